@preconcurrency import CVigilPlugin
import LinuxProbes
import VigilKit

/// Memory and swap use from /proc/meminfo, with memory pressure (PSI) from
/// /proc/pressure/memory where the kernel has it.
final class MemoryMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "memory", version: "1.0.0",
        summary: "Memory and swap use from /proc/meminfo; pressure stall figures from /proc/pressure/memory",
        defaultInterval: .seconds(5),
        options: [
            OptionDecl("procfs", .string, default: "/proc", doc: "Root of the proc filesystem (a fixture tree in tests)."),
        ],
        events: [
            EventDecl("sample", doc: "Memory figures at poll time. Pressure fields appear only where /proc/pressure exists.", fields: [
                FieldDecl("total", .int, unit: "bytes", doc: "MemTotal"),
                FieldDecl("available", .int, unit: "bytes", doc: "MemAvailable (estimated on kernels without it)"),
                FieldDecl("free", .int, unit: "bytes", doc: "MemFree"),
                FieldDecl("buffers", .int, unit: "bytes"),
                FieldDecl("cached", .int, unit: "bytes"),
                FieldDecl("used_ratio", .double, unit: "ratio", doc: "(total - available) / total"),
                FieldDecl("swap_total", .int, unit: "bytes"),
                FieldDecl("swap_free", .int, unit: "bytes"),
                FieldDecl("swap_used_ratio", .double, unit: "ratio", doc: "absent without swap"),
                FieldDecl("pressure_some_avg10", .double, unit: "percent", doc: "share of time some tasks stalled on memory, last 10 s"),
                FieldDecl("pressure_full_avg10", .double, unit: "percent", doc: "share of time all tasks stalled on memory, last 10 s"),
                FieldDecl("pressure_some_total", .int, unit: "microseconds", doc: "total stall time of some tasks"),
            ]),
        ])

    private let context: MonitorContext
    private let root: FSRoot
    private var hasPressure = true

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.root = FSRoot(options.string("procfs") ?? "/proc")
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

@_cdecl("vigil_plugin_entry")
public func vigilPluginEntry(_ args: UnsafePointer<vigil_entry_args>?,
                             _ result: UnsafeMutablePointer<vigil_entry_result>?) -> vigil_status {
    VigilKit.export(MemoryMonitor.self, args, result)
}
