import LinuxProbes
import VigilKit

/// The network stack's per-CPU receive work, from /proc/net/softnet_stat:
/// node_exporter's softnet collector.
///
/// One line per online CPU of hexadecimal columns: processed, dropped,
/// time_squeeze, five unused, cpu_collision, received_rps, flow_limit_count
/// (2.6.x already had these), then the backlog's length (5.10+) and the CPU's
/// number (5.10+), then more on newer kernels. A kernel with fewer columns
/// gives fewer fields; a line with fewer than three, or one that is not
/// hexadecimal, is skipped. The CPU is the 13th column where the kernel
/// writes it (offline CPUs have no line), else the line's position, as
/// node_exporter 1.5 numbers them. The counters are the kernel's 32-bit
/// values as written: they wrap at 2^32, and are reported wrapped
/// (Prometheus' rate() sees a reset), as node_exporter reports them.
final class SoftnetMonitor: ProcfsMonitor, PolledMonitor {
    static let spec = PluginSpec(
        name: "softnet", version: "1.0.0",
        summary: "Packets processed, dropped and squeezed per CPU by the network stack, from /proc/net/softnet_stat (node_exporter's softnet)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("cpu", doc: "One CPU's softnet counters, every poll.", fields: [
                FieldDecl("cpu", .int, doc: "the CPU's number"),
                FieldDecl("processed", .int, unit: "packets", doc: "packets taken from the CPU's backlog or NAPI poll (column 1)", counter: true),
                FieldDecl("dropped", .int, unit: "packets", doc: "packets dropped because the backlog was full (column 2)", counter: true),
                FieldDecl("times_squeezed", .int, unit: "times",
                          doc: "times net_rx_action stopped with work left, out of budget or time (column 3)", counter: true),
                FieldDecl("received_rps", .int, unit: "times", doc: "times the CPU was woken to process packets steered to it by RPS (column 10)", counter: true),
                FieldDecl("flow_limit_count", .int, unit: "packets", doc: "packets dropped by the flow limit (column 11)", counter: true),
                FieldDecl("backlog_length", .int, unit: "packets", doc: "packets waiting in the CPU's backlog now (column 12, 5.10+)"),
            ], policy: .samples, key: ["cpu"]),
        ])

    func start() throws(MonitorError) { try root.require("net/softnet_stat") }

    func poll() throws(MonitorError) {
        for fields in Self.parse(try root.pollText("net/softnet_stat")) { context.emit("cpu", fields: fields) }
    }

    /// Column (0-based) → field, for the fields past the CPU's number.
    static let columns: [(index: Int, field: String)] = [
        (0, "processed"), (1, "dropped"), (2, "times_squeezed"), (9, "received_rps"), (10, "flow_limit_count"), (11, "backlog_length"),
    ]

    /// One field list per well-formed line.
    static func parse(_ text: String) -> [[(String, Value)]] {
        var events: [[(String, Value)]] = []
        for (position, line) in text.split(separator: "\n").enumerated() {
            var values: [UInt64] = []
            for column in line.split(whereSeparator: { $0 == " " || $0 == "\t" }) {
                guard let value = KernelNumber.hex(column) else { values = []; break }
                values.append(value)
            }
            guard values.count >= 3 else { continue }
            let cpu = values.count >= 13 ? Int64(clamping: values[12]) : Int64(position)
            var fields: [(String, Value)] = [("cpu", .int(cpu))]
            for (index, field) in columns where index < values.count {
                fields.append((field, .int(clamping: values[index])))
            }
            events.append(fields)
        }
        return events
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(SoftnetMonitor.self, a, r) }
