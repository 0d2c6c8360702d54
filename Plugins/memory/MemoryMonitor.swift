import LinuxProbes
import VigilKit

/// Memory and swap use from /proc/meminfo, with memory pressure (PSI) from
/// /proc/pressure/memory where the kernel has it.
final class MemoryMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "memory", version: "1.1.0",
        summary: "Memory and swap use from /proc/meminfo; pressure stall figures from /proc/pressure/memory",
        defaultInterval: .seconds(5),
        events: [
            EventDecl("sample", doc: "Memory figures: a snapshot on start, then when one changed by at least its minimum change (1 MiB, 0.001, 0.1 %). Pressure fields appear only where /proc/pressure exists.", fields: [
                FieldDecl("total", .int, unit: "bytes", minChange: MemoryMonitor.mib, doc: "MemTotal"),
                FieldDecl("available", .int, unit: "bytes", minChange: MemoryMonitor.mib, doc: "MemAvailable (estimated on kernels without it)"),
                FieldDecl("free", .int, unit: "bytes", minChange: MemoryMonitor.mib, doc: "MemFree"),
                FieldDecl("buffers", .int, unit: "bytes", minChange: MemoryMonitor.mib),
                FieldDecl("cached", .int, unit: "bytes", minChange: MemoryMonitor.mib),
                FieldDecl("used_ratio", .double, unit: "ratio", minChange: 0.001, doc: "(total - available) / total"),
                FieldDecl("swap_total", .int, unit: "bytes", minChange: MemoryMonitor.mib),
                FieldDecl("swap_free", .int, unit: "bytes", minChange: MemoryMonitor.mib),
                FieldDecl("swap_used_ratio", .double, unit: "ratio", minChange: 0.001, doc: "absent without swap"),
                FieldDecl("pressure_some_avg10", .double, unit: "percent", minChange: 0.1, doc: "share of time some tasks stalled on memory, last 10 s"),
                FieldDecl("pressure_full_avg10", .double, unit: "percent", minChange: 0.1, doc: "share of time all tasks stalled on memory, last 10 s"),
                FieldDecl("pressure_some_total", .int, unit: "microseconds", minChange: 100_000, doc: "total stall time of some tasks", counter: true),
                FieldDecl("oom_kills", .int, unit: "processes", doc: "processes killed by the OOM killer since boot (/proc/vmstat oom_kill)", counter: true),
            ]),
            EventDecl("meminfo", doc: """
                Every line of <procfs>/meminfo as a field (with meminfo: true), every poll: the kernel's key in \
                lowercase snake_case (MemTotal → mem_total, Active(anon) → active_anon, HugePages_Total → \
                huge_pages_total, DirectMap2M → direct_map_2m), kB values in bytes, the HugePages_* counts as \
                written. Every key the kernel is known to write is declared; a key an older kernel lacks is \
                absent, and a key this plugin does not know yet (a newer kernel's) is left out, logged once.
                """, fields: MemInfoFields.declared, policy: .samples),
            .occurrence("warning", doc: """
                Memory is short (iOS's memory warning): available memory fell to `available_warning` percent of \
                the total, or some tasks stalled on memory at least `pressure_warning` percent of the last 10 s. \
                Emitted when the condition begins (active, severity warning) and when it ends (inactive, notice): \
                it ends once available memory is 5 points above its level and pressure 2 points below its level.
                """, fields: [
                FieldDecl("active", .bool, doc: "true when the condition began, false when it ended"),
                FieldDecl("reason", .string, doc: "low_available, pressure, or both joined by +"),
                FieldDecl("available_percent", .double, unit: "percent", doc: "available / total × 100"),
                FieldDecl("pressure_some_avg10", .double, unit: "percent", doc: "where /proc/pressure exists"),
            ]),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var availableWarning = 10.0
        var pressureWarning = 10.0
        var meminfo = false
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."),
            .option("meminfo", \.meminfo, doc: "Also emit a `meminfo` event every poll: every line of meminfo as a field."),
            .option("available_warning", \.availableWarning,
                    doc: "Percent of memory available at or below which a `warning` begins (0 turns it off)."),
            .option("pressure_warning", \.pressureWarning,
                    doc: "Percent of the last 10 s some tasks stalled on memory at or above which a `warning` begins (0 turns it off)."))
    }

    /// The warning's hysteresis: how far past its level a value must come back.
    static let availableClearance = 5.0
    static let pressureClearance = 2.0

    /// Byte counts within a MiB of the last event are not a change.
    static let mib = 1_048_576.0

    private let context: MonitorContext
    private let root: FSRoot
    private var hasPressure = true
    private let options: Options
    /// Why memory is short now; empty when it is not.
    private var warning: [String] = []
    /// meminfo keys left out of `meminfo` events and logged, since start.
    private var unknownKeys: [String] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard (0...100).contains(options.availableWarning) else {
            throw .invalidOption("available_warning", "must be a percent from 0 to 100, not \(options.availableWarning)")
        }
        guard (0...100).contains(options.pressureWarning) else {
            throw .invalidOption("pressure_warning", "must be a percent from 0 to 100, not \(options.pressureWarning)")
        }
        self.context = context
        self.options = options
        self.root = try .monitorRoot(options.procfs, option: "procfs")
    }

    func start() throws(MonitorError) {
        try root.require("meminfo")
        hasPressure = root.exists("pressure/memory")
        warning = []
        unknownKeys = []
    }

    func poll() throws(MonitorError) {
        let info = try MonitorError.probing { () throws(ProbeError) in try root.memInfo() }
        var fields: [(String, Value)] = []
        func add(_ name: String, _ value: UInt64?) {
            if let value { fields.append((name, .int(Int64(clamping: value)))) }
        }
        add("total", info.total)
        add("available", info.available)
        add("free", info.free)
        add("buffers", info.buffers)
        add("cached", info.cached)
        if let ratio = info.usedRatio { fields.append(("used_ratio", .double(ratio))) }
        add("swap_total", info.swapTotal)
        add("swap_free", info.swapFree)
        if let ratio = info.swapUsedRatio { fields.append(("swap_used_ratio", .double(ratio))) }
        var someAvg10: Double?
        if hasPressure {
            do {
                let pressure = try root.pressure("memory")
                someAvg10 = pressure.some.avg10
                fields.append(("pressure_some_avg10", .double(pressure.some.avg10)))
                if let full = pressure.full { fields.append(("pressure_full_avg10", .double(full.avg10))) }
                fields.append(("pressure_some_total", .int(Int64(clamping: pressure.some.total))))
            } catch {
                // PSI can be compiled in but disabled (EOPNOTSUPP): stop asking.
                hasPressure = false
                context.log(.info, "memory pressure not available: \(error)")
            }
        }
        if let kills = oomKills() { fields.append(("oom_kills", .int(kills))) }
        context.emit("sample", fields: fields)
        if options.meminfo {
            let fields = MemInfoFields.fields(info) { key in
                guard !unknownKeys.contains(key) else { return }
                unknownKeys.append(key)
                context.log(.debug, "\(root.path("meminfo")): '\(key.prefix(64))' is not a key this plugin knows; left out")
            }
            context.emit("meminfo", fields: fields)
        }
        let available = info.total.flatMap { total in
            info.available.map { total > 0 ? Double($0) / Double(total) * 100 : 100 }
        }
        updateWarning(availablePercent: available, pressure: someAvg10)
    }

    /// Emits `warning` when memory becomes short, and again when it is not.
    private func updateWarning(availablePercent: Double?, pressure: Double?) {
        var reasons: [String] = []
        let wasLow = warning.contains("low_available"), wasPressed = warning.contains("pressure")
        if let available = availablePercent, options.availableWarning > 0,
           available <= options.availableWarning + (wasLow ? Self.availableClearance : 0) {
            reasons.append("low_available")
        }
        if let pressure, options.pressureWarning > 0,
           pressure >= options.pressureWarning - (wasPressed ? Self.pressureClearance : 0) {
            reasons.append("pressure")
        }
        guard reasons.isEmpty != warning.isEmpty else { warning = reasons; return }
        let active = !reasons.isEmpty
        var fields: [(String, Value)] = [("active", .bool(active)),
                                         ("reason", .string((active ? reasons : warning).joined(separator: "+")))]
        if let availablePercent { fields.append(("available_percent", .double(availablePercent))) }
        if let pressure { fields.append(("pressure_some_avg10", .double(pressure))) }
        warning = reasons
        context.emit("warning", severity: active ? .warning : .notice, fields: fields)
    }

    /// The OOM killer's count from /proc/vmstat (kernels since 4.13), if there.
    private func oomKills() -> Int64? {
        guard let bytes = try? root.readBytes("vmstat") else { return nil }
        // One line of some 180, found on the bytes: no line becomes a String.
        let key = Array("oom_kill ".utf8)
        var start = 0
        while start < bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != UInt8(ascii: "\n") { end += 1 }
            if end - start > key.count, bytes[start..<start + key.count].elementsEqual(key) {
                return Int64(String(decoding: bytes[(start + key.count)..<end], as: UTF8.self).filter { $0 != " " })
            }
            start = end + 1
        }
        return nil
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(MemoryMonitor.self, a, r) }
