import LinuxProbes
import VigilKit

/// CPU usage from /proc/stat: the share of time spent busy between two polls.
/// The first poll (the snapshot on start) reports usage since boot.
final class CPUMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "cpu", version: "1.0.0",
        summary: "CPU usage from /proc/stat deltas, for the whole machine and optionally per CPU",
        defaultInterval: .seconds(1),
        events: [
            EventDecl("sample", doc: "Machine-wide CPU time shares since the previous poll (since boot on the first).",
                      fields: CPUMonitor.usageFields, policy: .samples),
            EventDecl("core", doc: "The same shares for one CPU (with per_cpu: true).",
                      fields: [FieldDecl("cpu", .int, doc: "CPU number as in /proc/stat")] + CPUMonitor.usageFields,
                      policy: .samples, key: ["cpu"]),
        ])

    struct Options: DeclaredOptions {
        var perCPU = false
        var procfs = "/proc"
        static let schema = OptionSchema<Options>(
            .option("per_cpu", \.perCPU, doc: "Also emit one `core` event per CPU each poll."),
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."))
    }

    static let usageFields = [
        FieldDecl("usage", .double, unit: "ratio", doc: "busy share, 0…1"),
        FieldDecl("user", .double, unit: "ratio", doc: "user and nice"),
        FieldDecl("system", .double, unit: "ratio", doc: "system, irq and softirq"),
        FieldDecl("iowait", .double, unit: "ratio"),
        FieldDecl("steal", .double, unit: "ratio", doc: "time taken by the hypervisor"),
        FieldDecl("idle", .double, unit: "ratio"),
    ]

    private let context: MonitorContext
    private let root: FSRoot
    private let perCPU: Bool
    private var previous: ProcStat?

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.root = FSRoot(options.procfs)
        self.perCPU = options.perCPU
    }

    func start() throws(MonitorError) {
        previous = nil
        guard root.exists("stat") else { throw .unavailable("\(root.path("stat")) does not exist") }
    }

    func poll() throws(MonitorError) {
        let stat: ProcStat
        do {
            stat = try root.procStat()
        } catch {
            throw error.isUnavailable ? .unavailable(error.description) : .temporary(error.description)
        }
        defer { previous = stat }
        let total = previous.flatMap { CPUUsage.between($0.total, stat.total) } ?? CPUUsage.sinceBoot(stat.total)
        if let total { context.emit("sample", fields: Self.fields(total)) }
        guard perCPU else { return }
        for cpu in stat.perCPU {
            let usage = previous?.times(forCPU: cpu.id).flatMap { CPUUsage.between($0, cpu.times) } ?? CPUUsage.sinceBoot(cpu.times)
            if let usage { context.emit("core", fields: [("cpu", .int(Int64(cpu.id)))] + Self.fields(usage)) }
        }
    }

    static func fields(_ u: CPUUsage) -> [(String, Value)] {
        [("usage", .double(u.usage)), ("user", .double(u.user)), ("system", .double(u.system)),
         ("iowait", .double(u.iowait)), ("steal", .double(u.steal)), ("idle", .double(u.idle))]
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(CPUMonitor.self, a, r) }
