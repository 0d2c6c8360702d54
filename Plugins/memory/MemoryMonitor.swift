import LinuxProbes
import VigilKit

/// Memory and swap use from /proc/meminfo, with memory pressure (PSI) from
/// /proc/pressure/memory where the kernel has it.
final class MemoryMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "memory", version: "1.0.0",
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
                FieldDecl("pressure_some_total", .int, unit: "microseconds", minChange: 100_000, doc: "total stall time of some tasks"),
            ]),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."))
    }

    /// Byte counts within a MiB of the last event are not a change.
    static let mib = 1_048_576.0

    private let context: MonitorContext
    private let root: FSRoot
    private var hasPressure = true

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.root = FSRoot(options.procfs)
    }

    func start() throws(MonitorError) {
        guard root.exists("meminfo") else { throw .unavailable("\(root.path("meminfo")) does not exist") }
        hasPressure = root.exists("pressure/memory")
    }

    func poll() throws(MonitorError) {
        let info: MemInfo
        do {
            info = try root.memInfo()
        } catch {
            throw error.isUnavailable ? .unavailable(error.description) : .temporary(error.description)
        }
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
        if hasPressure {
            do {
                let pressure = try root.pressure("memory")
                fields.append(("pressure_some_avg10", .double(pressure.some.avg10)))
                if let full = pressure.full { fields.append(("pressure_full_avg10", .double(full.avg10))) }
                fields.append(("pressure_some_total", .int(Int64(clamping: pressure.some.total))))
            } catch {
                // PSI can be compiled in but disabled (EOPNOTSUPP): stop asking.
                hasPressure = false
                context.log(.info, "memory pressure not available: \(error)")
            }
        }
        context.emit("sample", fields: fields)
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(MemoryMonitor.self, a, r) }
