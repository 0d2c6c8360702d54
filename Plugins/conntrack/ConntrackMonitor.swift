import LinuxProbes
import VigilKit

/// The netfilter connection tracking table: its size and limit from
/// /proc/sys/net/netfilter, and its per-CPU statistics from
/// /proc/net/stat/nf_conntrack, summed over the CPUs: node_exporter's
/// conntrack collector.
///
/// Unavailable where the kernel has no conntrack (the module not loaded:
/// no nf_conntrack_count). The statistics' columns are found by the file's
/// header, so a kernel that lacks one (search_restart came in 4.11; found,
/// insert, ignore stay 0 on newer kernels) gives fewer fields, and one
/// without the file gives none. Each CPU's value is the kernel's 32-bit
/// counter, wrapping at 2^32; the sum is reported as it comes, as
/// node_exporter does.
final class ConntrackMonitor: ProcfsMonitor, PolledMonitor {
    static let spec = PluginSpec(
        name: "conntrack", version: "1.0.0",
        summary: "Netfilter connection tracking: entries, limit and statistics summed over CPUs (node_exporter's conntrack)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("sample", doc: "The table and its statistics, every poll.", fields: [
                FieldDecl("entries", .int, unit: "connections", doc: "connections tracked now (<procfs>/sys/net/netfilter/nf_conntrack_count)"),
                FieldDecl("entries_limit", .int, unit: "connections", doc: "the table's size limit (nf_conntrack_max)"),
            ] + ConntrackMonitor.statistics.map {
                FieldDecl($0.field, .int, unit: $0.unit, doc: $0.doc + " (<procfs>/net/stat/nf_conntrack's \($0.column), summed over CPUs)", counter: true)
            }, policy: .samples),
        ])

    static let statistics: [(column: String, field: String, unit: String, doc: String)] = [
        ("found", "found", "lookups", "lookups that found an entry"),
        ("invalid", "invalid", "packets", "packets that could not be tracked"),
        ("ignore", "ignore", "packets", "packets already tracked or not to track"),
        ("insert", "insert", "connections", "entries inserted"),
        ("insert_failed", "insert_failed", "connections", "entries that could not be inserted (a clash)"),
        ("drop", "drop", "packets", "packets dropped because the table was full or an entry could not be made"),
        ("early_drop", "early_drop", "connections", "entries dropped early to make room for new ones"),
        ("search_restart", "search_restart", "lookups", "lookups restarted because a hash table was resized"),
    ]

    static let countFile = "sys/net/netfilter/nf_conntrack_count"
    static let maxFile = "sys/net/netfilter/nf_conntrack_max"
    static let statFile = "net/stat/nf_conntrack"

    func start() throws(MonitorError) { try root.require(Self.countFile, " (no connection tracking)") }

    func poll() throws(MonitorError) {
        var fields: [(String, Value)] = []
        for (file, field) in [(Self.countFile, "entries"), (Self.maxFile, "entries_limit")] {
            switch root.attribute(file) {
            case .text(let text):
                guard let value = Int64(text) else {
                    throw .temporary("\(root.path(file)): expected an integer, found '\(text.prefix(32))'")
                }
                fields.append((field, .int(value)))
            case .absent:
                if field == "entries" { throw .unavailable("\(root.path(file)) does not exist (no connection tracking)") }
            case .failed(let error):
                throw .temporary(error.description)
            }
        }
        if let text = try? root.readText(Self.statFile) {
            let sums = Self.sum(text)
            for statistic in Self.statistics {
                if let value = sums[statistic.column] { fields.append((statistic.field, .int(clamping: value))) }
            }
        }
        context.emit("sample", fields: fields)
    }

    /// Each column of the header summed over the CPU lines (hexadecimal);
    /// a line that does not parse is skipped. The sums saturate.
    static func sum(_ text: String) -> [String: UInt64] {
        let lines = text.split(separator: "\n")
        guard let header = lines.first else { return [:] }
        let names = header.split(whereSeparator: { $0 == " " || $0 == "\t" })
        var sums = [UInt64](repeating: 0, count: names.count)
        var any = false
        for line in lines.dropFirst() {
            let columns = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard columns.count >= names.count else { continue }
            var values: [UInt64] = []
            for column in columns.prefix(names.count) {
                guard let value = KernelNumber.hex(column) else { break }
                values.append(value)
            }
            guard values.count == names.count else { continue }
            any = true
            for i in values.indices {
                let (s, overflow) = sums[i].addingReportingOverflow(values[i])
                sums[i] = overflow ? .max : s
            }
        }
        guard any else { return [:] }
        var result: [String: UInt64] = [:]
        for (i, name) in names.enumerated() { result[String(name)] = sums[i] }
        return result
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(ConntrackMonitor.self, a, r) }
