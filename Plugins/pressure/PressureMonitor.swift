import LinuxProbes
import VigilKit

/// Pressure stall information (PSI), `<procfs>/pressure/{cpu,io,memory,irq}`
/// (Linux 4.20+ with CONFIG_PSI; `irq` 6.1+ with CONFIG_IRQ_TIME_ACCOUNTING):
/// node_exporter's pressure collector, with the averages too.
///
/// One `sample` event every poll with, for each resource and each of its
/// lines, the share of wall time tasks were stalled averaged over 10, 60 and
/// 300 s (percent, as the kernel writes them) and the total stall time since
/// boot (a counter, the kernel's microseconds as seconds). `some` is the time
/// at least one task was stalled on the resource, `full` the time every
/// non-idle task was at once. A file this kernel lacks (irq; cpu's `full`
/// line before 5.13) just means fewer fields; a garbled file is skipped for
/// that poll (debug log). Unavailable when no file can be read: no
/// `pressure/` directory, or PSI disabled at boot (`psi=0`, EOPNOTSUPP).
final class PressureMonitor: PolledMonitor {
    static let resources = ["cpu", "io", "memory", "irq"]

    static let spec = PluginSpec(
        name: "pressure", version: "1.0.0",
        summary: "Pressure stall information from /proc/pressure: time tasks waited for CPU, I/O, memory and IRQs",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("sample", doc: "Every resource's stall shares and totals, every poll; fields RESOURCE_LINE_FIGURE, e.g. memory_full_avg10, io_some_total.",
                      fields: PressureMonitor.fields, policy: .samples),
        ])

    static let fields: [FieldDecl] = resources.flatMap { resource in
        ["some", "full"].flatMap { line in
            let what = line == "some" ? "at least one task was stalled on \(resource)"
                : "every non-idle task was stalled on \(resource) at once"
            return [
                FieldDecl("\(resource)_\(line)_avg10", .double, unit: "percent", doc: "share of time \(what), over 10 s"),
                FieldDecl("\(resource)_\(line)_avg60", .double, unit: "percent", doc: "the same over 60 s"),
                FieldDecl("\(resource)_\(line)_avg300", .double, unit: "percent", doc: "the same over 300 s"),
                FieldDecl("\(resource)_\(line)_total", .double, unit: "seconds", doc: "time \(what) since boot", counter: true),
            ]
        }
    }

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem; PSI is read from <procfs>/pressure/."))
    }

    private let context: MonitorContext
    private let procfs: FSRoot
    /// Resources whose file was garbled last time (logged once per streak).
    private var garbled: Set<String> = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        procfs = try .monitorRoot(options.procfs, option: "procfs")
    }

    func start() throws(MonitorError) {
        garbled = []
        try procfs.require("pressure", " (a kernel without PSI)")
    }

    func poll() throws(MonitorError) {
        var fields: [(String, Value)] = []
        fields.reserveCapacity(32)
        var unavailable: ProbeError?
        for resource in Self.resources {
            let pressure: Pressure
            do {
                pressure = try procfs.pressure(resource)
                garbled.remove(resource)
            } catch {
                if error.isUnavailable {
                    unavailable = unavailable ?? error
                } else if garbled.insert(resource).inserted {
                    context.log(.debug, "skipping \(resource): \(error.description)")
                }
                continue
            }
            Self.append(resource, "some", pressure.some, to: &fields)
            if let full = pressure.full { Self.append(resource, "full", full, to: &fields) }
        }
        if fields.isEmpty, let unavailable, garbled.isEmpty { throw .unavailable(unavailable.description) }
        guard !fields.isEmpty else { return }
        context.emit("sample", fields: fields)
    }

    static func append(_ resource: String, _ line: String, _ figures: PressureLine, to fields: inout [(String, Value)]) {
        let prefix = resource + "_" + line + "_"
        fields.append((prefix + "avg10", .double(figures.avg10)))
        fields.append((prefix + "avg60", .double(figures.avg60)))
        fields.append((prefix + "avg300", .double(figures.avg300)))
        fields.append((prefix + "total", .double(Double(figures.total) / 1_000_000)))
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(PressureMonitor.self, a, r) }
