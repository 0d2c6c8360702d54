#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinuxProbes
import VigilKit

/// The system clock as node_exporter's time and timex collectors see it:
/// the wall time and the local zone's offset, the clock sources the kernel
/// offers and uses (sysfs), and the kernel's clock discipline from
/// adjtimex(2) (offset, frequency, errors, synchronization, PPS).
///
/// adjtimex cannot read a fixture tree, so it sits behind the `adjtimex`
/// option: `syscall` (the default) asks the kernel; a path replays a reading
/// recorded as `name value` lines (Timex.swift), which is how the scaling
/// is tested. A kernel or sandbox that refuses the call (EPERM under some
/// seccomp profiles) leaves out the `timex` kind, as node_exporter does.
final class TimeMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "time", version: "1.0.0",
        summary: "Wall time and zone offset, clock sources (sysfs) and the kernel clock discipline (adjtimex)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("clock", doc: "The wall clock at poll time, and the process's local time zone.", fields: [
                FieldDecl("seconds", .double, unit: "seconds", doc: "wall time since the epoch (the host's clock)"),
                FieldDecl("zone", .string, doc: "the local zone's abbreviation at that time (UTC, CET, CEST…)"),
                FieldDecl("zone_offset", .int, unit: "seconds", doc: "the local zone's offset from UTC, east positive"),
            ], policy: .samples),
            EventDecl("clocksource", doc: "One clock source a clocksource device offers (available_clocksource).", fields: [
                FieldDecl("device", .string, doc: "the clocksource device's number (0 for clocksource0)"),
                FieldDecl("clocksource", .string, doc: "the clock source's name (tsc, hpet, kvm-clock…)"),
            ], key: ["device", "clocksource"]),
            EventDecl("current_clocksource", doc: "The clock source a clocksource device uses (current_clocksource).", fields: [
                FieldDecl("device", .string, doc: "the clocksource device's number"),
                FieldDecl("clocksource", .string, doc: "the clock source in use"),
            ], key: ["device"]),
            EventDecl("timex", doc: "The kernel clock discipline, from adjtimex(2) read only.",
                      fields: TimexReading.decls, policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var adjtimex = "syscall"
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."),
            .option("adjtimex", \.adjtimex,
                    doc: "`syscall`: read the clock discipline from the kernel; or the path of a reading recorded as `name value` lines (tests)."))
    }

    private static let clocksources = "devices/system/clocksource"

    private let context: MonitorContext
    private let sysfs: FSRoot
    private let recording: String?
    private var timexRefused = false

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.sysfs = FSRoot(options.sysfs, keepingFilesOpen: true)
        if options.adjtimex == "syscall" {
            self.recording = nil
        } else {
            guard options.adjtimex.hasPrefix("/") else {
                throw .invalidOption("adjtimex", "\"\(options.adjtimex)\" is neither syscall nor an absolute path")
            }
            self.recording = options.adjtimex
        }
    }

    func poll() throws(MonitorError) {
        emitClock()
        emitClocksources()
        try emitTimex()
    }

    private func emitClock() {
        let ns = context.now()
        var seconds = time_t(ns / 1_000_000_000)
        var local = tm()
        var zone = "UTC"
        var offset: Int64 = 0
        if localtime_r(&seconds, &local) != nil {
            offset = Int64(local.tm_gmtoff)
            if let name = local.tm_zone { zone = String(cString: name) }
        }
        context.emit("clock", ["seconds": .double(Double(ns) / 1e9), "zone": .string(zone), "zone_offset": .int(offset)])
    }

    /// Every `clocksource<N>` device: one event per source it offers, one for the source it uses.
    private func emitClocksources() {
        guard let names = sysfs.list(Self.clocksources) else { return }
        let devices = names.compactMap { name -> (Int, String)? in
            guard name.hasPrefix("clocksource"), let n = Int(name.dropFirst("clocksource".count)) else { return nil }
            return (n, name)
        }.sorted { $0.0 < $1.0 }
        for (number, name) in devices {
            let dir = Self.clocksources + "/" + name
            if case .text(let available) = sysfs.attribute(dir + "/available_clocksource") {
                for source in available.split(whereSeparator: { $0 == " " || $0 == "\t" }) {
                    context.emit("clocksource", ["device": .string(String(number)), "clocksource": .string(String(source))])
                }
            }
            if case .text(let current) = sysfs.attribute(dir + "/current_clocksource"), !current.isEmpty {
                context.emit("current_clocksource", ["device": .string(String(number)), "clocksource": .string(current)])
            }
        }
    }

    private func emitTimex() throws(MonitorError) {
        let reading: TimexReading
        if let recording {
            let text: String
            do { text = try FSRoot("/").readText(recording) } catch { throw .temporary(error.description) }
            guard let parsed = TimexReading.parse(recorded: text) else {
                throw .temporary("\(recording): not a recorded adjtimex reading (name value lines)")
            }
            reading = parsed
        } else {
            switch TimexReading.syscall() {
            case .success(let read):
                reading = read
            case .failure(let failure):
                let code = failure.code
                if code == EPERM || code == ENOSYS {  // a sandbox: no timex, as node_exporter
                    if !timexRefused { context.log(.notice, "adjtimex: \(String(cString: strerror(code))); no timex events") }
                    timexRefused = true
                    return
                }
                throw .temporary("adjtimex: \(String(cString: strerror(code)))")
            }
        }
        context.emit("timex", fields: reading.fields)
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(TimeMonitor.self, a, r) }
