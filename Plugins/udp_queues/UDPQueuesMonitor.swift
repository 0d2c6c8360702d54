import LinuxProbes
import VigilKit

/// The bytes waiting in UDP sockets' queues, summed over the sockets of
/// /proc/net/udp (IPv4) and /proc/net/udp6 (IPv6): node_exporter's
/// udp_queues collector.
///
/// A socket line's fifth column is `tx_queue:rx_queue` in hexadecimal (the
/// memory its send and receive queues hold). A line that does not parse is
/// skipped; a file that is missing (no IPv6) means no event for that
/// version; sums saturate rather than wrap.
final class UDPQueuesMonitor: ProcfsMonitor, PolledMonitor {
    static let spec = PluginSpec(
        name: "udp_queues", version: "1.0.0",
        summary: "Bytes queued in UDP sockets, IPv4 and IPv6, from /proc/net/udp and udp6 (node_exporter's udp_queues)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("queues", doc: "The queues of all UDP sockets of one IP version, every poll.", fields: [
                FieldDecl("ip", .string, doc: "v4 (<procfs>/net/udp) or v6 (<procfs>/net/udp6)"),
                FieldDecl("tx_queue", .int, unit: "bytes", doc: "bytes in the send queues, summed over the sockets"),
                FieldDecl("rx_queue", .int, unit: "bytes", doc: "bytes in the receive queues, summed over the sockets"),
                FieldDecl("sockets", .int, unit: "sockets", doc: "the UDP sockets listed"),
            ], policy: .samples, key: ["ip"]),
        ])

    static let files = [("v4", "net/udp"), ("v6", "net/udp6")]

    func start() throws(MonitorError) {
        guard Self.files.contains(where: { root.exists($0.1) }) else {
            throw .unavailable("neither \(root.path("net/udp")) nor \(root.path("net/udp6")) exists")
        }
    }

    func poll() throws(MonitorError) {
        var read = 0
        var failure: ProbeError?
        for (ip, file) in Self.files {
            let text: String
            do {
                text = try root.readText(file)
            } catch {
                if !error.isUnavailable { failure = error }
                continue
            }
            read += 1
            let sum = Self.sum(text)
            context.emit("queues", fields: [("ip", .string(ip)), ("tx_queue", .int(clamping: sum.tx)),
                                            ("rx_queue", .int(clamping: sum.rx)), ("sockets", .int(Int64(sum.sockets)))])
        }
        if let failure { throw .temporary(failure.description) }
        if read == 0 { throw .unavailable("neither \(root.path("net/udp")) nor \(root.path("net/udp6")) can be read") }
    }

    /// The queues summed over the socket lines after the header.
    static func sum(_ text: String) -> (tx: UInt64, rx: UInt64, sockets: Int) {
        var tx: UInt64 = 0, rx: UInt64 = 0, sockets = 0
        for line in text.split(separator: "\n").dropFirst() {
            var columns = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst(4).makeIterator()
            guard let queues = columns.next(), let colon = queues.firstIndex(of: ":"),
                  let t = KernelNumber.hex(queues[..<colon]), let r = KernelNumber.hex(queues[queues.index(after: colon)...])
            else { continue }
            let (newTx, o1) = tx.addingReportingOverflow(t)
            let (newRx, o2) = rx.addingReportingOverflow(r)
            tx = o1 ? .max : newTx
            rx = o2 ? .max : newRx
            sockets += 1
        }
        return (tx, rx, sockets)
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(UDPQueuesMonitor.self, a, r) }
