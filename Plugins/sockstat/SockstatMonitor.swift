#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import LinuxProbes
import VigilKit

/// Sockets in use by protocol, node_exporter's sockstat collector: the
/// levels of /proc/net/sockstat (IPv4 and totals) and /proc/net/sockstat6
/// (IPv6), one `sample` event a poll.
///
/// Field names are the line's label and the figure's name, lowercase:
/// `TCP: inuse` is `tcp_inuse`, `FRAG6: memory` is `frag6_memory`. The
/// kernel counts TCP and UDP buffer memory in pages (`tcp_mem`, `udp_mem`);
/// the plugin adds the same in bytes (`tcp_mem_bytes`, `udp_mem_bytes`) with
/// the page size of the machine it runs on (sysconf), as node_exporter does.
/// A figure the kernel lacks (no IPv6: no sockstat6) is absent.
final class SockstatMonitor: ProcfsMonitor, PolledMonitor {
    /// A figure of the files: its line label, its name there, the field.
    struct Figure: Sendable {
        var section: String, name: String, field: String, unit: String, doc: String
    }

    static let figures: [Figure] = [
        Figure(section: "sockets", name: "used", field: "sockets_used", unit: "sockets", doc: "sockets in use, all families"),
        Figure(section: "TCP", name: "inuse", field: "tcp_inuse", unit: "sockets", doc: "IPv4 TCP sockets in use (listening included)"),
        Figure(section: "TCP", name: "orphan", field: "tcp_orphan", unit: "sockets", doc: "TCP sockets no longer attached to a process"),
        Figure(section: "TCP", name: "tw", field: "tcp_tw", unit: "sockets", doc: "TCP sockets in TIME-WAIT"),
        Figure(section: "TCP", name: "alloc", field: "tcp_alloc", unit: "sockets", doc: "TCP sockets allocated (all states, IPv6 included)"),
        Figure(section: "TCP", name: "mem", field: "tcp_mem", unit: "pages", doc: "memory used by TCP buffers, in pages"),
        Figure(section: "UDP", name: "inuse", field: "udp_inuse", unit: "sockets", doc: "IPv4 UDP sockets in use"),
        Figure(section: "UDP", name: "mem", field: "udp_mem", unit: "pages", doc: "memory used by UDP buffers, in pages"),
        Figure(section: "UDPLITE", name: "inuse", field: "udplite_inuse", unit: "sockets", doc: "IPv4 UDP-Lite sockets in use"),
        Figure(section: "RAW", name: "inuse", field: "raw_inuse", unit: "sockets", doc: "IPv4 raw sockets in use"),
        Figure(section: "FRAG", name: "inuse", field: "frag_inuse", unit: "queues", doc: "IPv4 fragment reassembly queues in use"),
        Figure(section: "FRAG", name: "memory", field: "frag_memory", unit: "bytes", doc: "memory used by IPv4 fragment reassembly"),
        Figure(section: "TCP6", name: "inuse", field: "tcp6_inuse", unit: "sockets", doc: "IPv6 TCP sockets in use"),
        Figure(section: "UDP6", name: "inuse", field: "udp6_inuse", unit: "sockets", doc: "IPv6 UDP sockets in use"),
        Figure(section: "UDPLITE6", name: "inuse", field: "udplite6_inuse", unit: "sockets", doc: "IPv6 UDP-Lite sockets in use"),
        Figure(section: "RAW6", name: "inuse", field: "raw6_inuse", unit: "sockets", doc: "IPv6 raw sockets in use"),
        Figure(section: "FRAG6", name: "inuse", field: "frag6_inuse", unit: "queues", doc: "IPv6 fragment reassembly queues in use"),
        Figure(section: "FRAG6", name: "memory", field: "frag6_memory", unit: "bytes", doc: "memory used by IPv6 fragment reassembly"),
    ]

    /// Figures in pages that get a twin in bytes: the field, its twin.
    static let inBytes: [String: String] = ["tcp_mem": "tcp_mem_bytes", "udp_mem": "udp_mem_bytes"]

    static let spec = PluginSpec(
        name: "sockstat", version: "1.0.0",
        summary: "Sockets in use by protocol and their buffer memory, from /proc/net/sockstat and sockstat6",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("sample", doc: "The socket figures at poll time (levels); a figure the kernel lacks is absent.",
                      fields: figures.flatMap { figure -> [FieldDecl] in
                          let decl = FieldDecl(figure.field, .int, unit: figure.unit, doc: "\(figure.section) \(figure.name): \(figure.doc)")
                          guard let twin = inBytes[figure.field] else { return [decl] }
                          return [decl, FieldDecl(twin, .int, unit: "bytes", doc: "\(figure.field) × the page size")]
                      }, policy: .samples),
        ])

    private static let files = ["net/sockstat", "net/sockstat6"]
    private static let index: [String: [String: Int]] = {
        var index: [String: [String: Int]] = [:]
        for (i, figure) in figures.enumerated() { index[figure.section, default: [:]][figure.name] = i }
        return index
    }()

    private let pageSize: Int64 = {
        let size = sysconf(Int32(_SC_PAGESIZE))
        return size > 0 ? Int64(size) : 4096
    }()

    func start() throws(MonitorError) { try root.require(Self.files[0]) }

    func poll() throws(MonitorError) {
        var values = [Int64?](repeating: nil, count: Self.figures.count)
        for file in Self.files {
            let text: String
            do {
                text = try root.readText(file)
            } catch {
                if file != Self.files[0], error.isUnavailable { continue }  // no IPv6
                throw MonitorError(error)
            }
            for figure in NetCounters.parsePairs(text) {
                if let i = Self.index[figure.section]?[figure.name] { values[i] = figure.value }
            }
        }
        var fields: [(String, Value)] = []
        fields.reserveCapacity(values.count + Self.inBytes.count)
        for (figure, value) in zip(Self.figures, values) {
            guard let value else { continue }
            fields.append((figure.field, .int(value)))
            if let twin = Self.inBytes[figure.field] {
                let (bytes, overflow) = value.multipliedReportingOverflow(by: pageSize)
                fields.append((twin, .int(overflow ? (value < 0 ? .min : .max) : bytes)))
            }
        }
        context.emit("sample", fields: fields)
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(SockstatMonitor.self, a, r) }
