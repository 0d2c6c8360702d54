import Glibc
import LinuxProbes
import VigilKit

/// The kernel's protocol counters, node_exporter's netstat collector: the
/// tables of /proc/net/snmp (Ip, Icmp, Tcp, Udp, UdpLite), /proc/net/netstat
/// (TcpExt, IpExt) and /proc/net/snmp6 (Ip6, Icmp6, Udp6, UdpLite6), one
/// `sample` event a poll.
///
/// Field names are the table's name and the counter's, lowercase and
/// snake_case: `Tcp ActiveOpens` is `tcp_active_opens`, `TcpExt
/// ListenDrops` is `tcpext_listen_drops`, `Ip6InOctets` is
/// `ip6_in_octets` (the whole list is `Counter.table`, in NetstatCounters.swift).
/// The plugin reports the counters it declares: every counter of the RFC
/// tables (Ip, Icmp, Tcp, Udp and their IPv6 twins), IpExt, and the TcpExt
/// counters operators graph; the rest of TcpExt, MPTcpExt and the per-type
/// IcmpMsg counters are not read. A counter the running kernel lacks (an
/// older kernel, no IPv6: no snmp6) is absent from the event.
///
/// Values are the kernel's raw numbers, as node_exporter reports them: a
/// counter that wraps (the 32-bit ones of a 32-bit kernel) is reported as it
/// wraps, and a consumer sees a reset. Numbers beyond Int64 saturate.
final class NetstatMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "netstat", version: "1.0.0",
        summary: "IP, ICMP, TCP and UDP protocol counters (v4 and v6), from /proc/net/snmp, snmp6 and netstat",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("sample", doc: "The protocol counters at poll time; a counter the kernel lacks is absent.",
                      fields: Counter.table.map(\.decl), policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var include: [String] = ["*"]
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."),
            .option("include", \.include, doc: """
                Globs (fnmatch) on the field names to report (default: all). node_exporter's default set is \
                manifests/node-exporter.yaml's: the *_in_errors, the octets, Icmp messages, Tcp's and Udp's main counters.
                """))
    }

    /// The files read, and how each is laid out.
    private static let sources: [(file: String, snmp6: Bool)] = [("net/snmp", false), ("net/netstat", false), ("net/snmp6", true)]

    private let context: MonitorContext
    private let root: FSRoot
    /// Per counter of `Counter.table`: whether `include` asks for it.
    private let included: [Bool]

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        if let i = options.include.firstIndex(where: \.isEmpty) { throw .invalidOption("include[\(i)]", "must not be empty") }
        self.context = context
        self.root = try .monitorRoot(options.procfs, option: "procfs")
        included = Counter.table.map { counter in options.include.contains { fnmatch($0, counter.field, 0) == 0 } }
    }

    func start() throws(MonitorError) {
        guard Self.sources.contains(where: { root.exists($0.file) }) else {
            throw .unavailable("none of \(Self.sources.map { root.path($0.file) }.joined(separator: ", ")) exists")
        }
    }

    func poll() throws(MonitorError) {
        var values = [Int64?](repeating: nil, count: Counter.table.count)
        var read = 0
        for source in Self.sources {
            let text: String
            do {
                text = try root.readText(source.file)
            } catch {
                if error.isUnavailable { continue }  // an older kernel, or no IPv6: fewer counters
                throw .temporary(error.description)
            }
            read += 1
            let counters = source.snmp6 ? NetCounters.parseSNMP6(text) : NetCounters.parseTables(text)
            for counter in counters {
                if let index = Counter.index[counter.section]?[counter.name] { values[index] = counter.value }
            }
        }
        guard read > 0 else { throw .unavailable("none of \(Self.sources.map { root.path($0.file) }.joined(separator: ", ")) exists") }
        var fields: [(String, Value)] = []
        fields.reserveCapacity(values.count)
        for (index, counter) in Counter.table.enumerated() where included[index] {
            if let value = values[index] { fields.append((counter.field, .int(value))) }
        }
        context.emit("sample", fields: fields)
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(NetstatMonitor.self, a, r) }
