import LinuxProbes
import VigilKit

/// The neighbour (ARP) table's entries per device, from /proc/net/arp:
/// node_exporter's arp collector.
///
/// Every line of the table counts, whatever its flags (an incomplete entry,
/// flags 0x0, too), as node_exporter counts them. A device with no entry has
/// no event, and a line with fewer than six columns, or whose HW type and
/// flags are not 0x-prefixed, is skipped.
final class ARPMonitor: ProcfsMonitor, PolledMonitor {
    static let spec = PluginSpec(
        name: "arp", version: "1.0.0",
        summary: "ARP table entries per network device, from /proc/net/arp (node_exporter's arp)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("device", doc: "The ARP entries of one device, every poll; a device without entries has no event.", fields: [
                FieldDecl("device", .string, doc: "the network device the entries are on (eth0)"),
                FieldDecl("entries", .int, unit: "entries", doc: "the lines of <procfs>/net/arp naming this device"),
            ], policy: .samples, key: ["device"]),
        ])

    func start() throws(MonitorError) { try root.require("net/arp") }

    func poll() throws(MonitorError) {
        for (device, entries) in Self.entriesPerDevice(try root.pollText("net/arp")) {
            context.emit("device", fields: [("device", .string(device)), ("entries", .int(Int64(entries)))])
        }
    }

    /// `IP address HW type Flags HW address Mask Device` lines after the
    /// header, counted per device (the sixth column), sorted by device.
    static func entriesPerDevice(_ text: String) -> [(String, Int)] {
        var counts: [Substring: Int] = [:]
        for line in text.split(separator: "\n").dropFirst() {
            let columns = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            // HW type and Flags are 0x-prefixed: anything else is not an entry.
            guard columns.count >= 6, columns[1].hasPrefix("0x"), columns[2].hasPrefix("0x") else { continue }
            counts[columns[5], default: 0] += 1
        }
        return counts.map { (String($0.key), $0.value) }.sorted { $0.0 < $1.0 }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(ARPMonitor.self, a, r) }
