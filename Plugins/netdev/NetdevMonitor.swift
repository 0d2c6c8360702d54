import Glibc
import LinuxProbes
import VigilKit

/// Network interfaces' traffic counters and link facts: node_exporter's
/// netdev and netclass collectors.
///
/// Sources:
/// - `<procfs>/net/dev`: the kernel's counters per interface (the `interface`
///   event), with `<sysfs>/class/net/<if>/statistics/rx_nohandler`.
/// - `<sysfs>/class/net/<if>/`: mtu, speed, carrier, operstate, duplex,
///   addresses, flags, indexes (the `link` event).
///
/// The counters are the kernel's raw values, as node_exporter reports them:
/// a driver's 32-bit counter that wraps is reported wrapped (Prometheus'
/// rate() sees a reset), and a value past 2^63 − 1 is reported as 2^63 − 1.
/// An attribute the kernel refuses to read (`speed`, `carrier`, `duplex` of an
/// interface that is down answer EINVAL) or that does not parse is left out of
/// that poll's event; an interface that goes away is simply not reported.
final class NetdevMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "netdev", version: "1.0.0",
        summary: "Network interfaces: traffic counters from /proc/net/dev and link facts from /sys/class/net (node_exporter's netdev and netclass)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("interface", doc: """
                One interface's counters from <procfs>/net/dev, every poll (interfaces matching `interfaces`, \
                not `exclude` nor `stats_exclude`). A column the kernel does not have is absent.
                """, fields: [FieldDecl("interface", .string, doc: "the interface name (eth0, wlp2s0)")]
                    + NetdevMonitor.counterFields.map(\.decl) + [NetdevMonitor.nohandlerField],
                policy: .samples, key: ["interface"]),
            EventDecl("link", doc: """
                One interface's facts from <sysfs>/class/net/<interface>/, every poll (interfaces matching \
                `interfaces`, not `exclude`). An attribute that is missing or cannot be read (EINVAL while the \
                interface is down) is absent.
                """, fields: NetdevMonitor.linkFields, policy: .samples, key: ["interface"]),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var sysfs = "/sys"
        var interfaces: [String] = ["*"]
        var exclude: [String] = []
        var statsExclude: [String] = []
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."),
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."),
            .option("interfaces", \.interfaces, doc: "Globs of the interface names to report (fnmatch: `eth*`, `en*`)."),
            .option("exclude", \.exclude, doc: "Globs of interface names not to report at all."),
            .option("stats_exclude", \.statsExclude,
                    doc: "Globs of interface names whose counters (the interface event) are not reported, though their link is: Debian's node_exporter leaves out `lo` so."))
    }

    /// A /proc/net/dev column and the field it becomes.
    struct Counter {
        var transmit: Bool
        var column: String
        var decl: FieldDecl
    }

    static let counterFields: [Counter] = [
        Counter(transmit: false, column: "bytes", decl: FieldDecl("receive_bytes", .int, unit: "bytes", doc: "bytes received", counter: true)),
        Counter(transmit: false, column: "packets", decl: FieldDecl("receive_packets", .int, unit: "packets", doc: "packets received", counter: true)),
        Counter(transmit: false, column: "errs", decl: FieldDecl("receive_errors", .int, unit: "packets", doc: "receive errors (errs)", counter: true)),
        Counter(transmit: false, column: "drop", decl: FieldDecl("receive_dropped", .int, unit: "packets",
                doc: "packets dropped on receive, with those missed by the device (drop)", counter: true)),
        Counter(transmit: false, column: "fifo", decl: FieldDecl("receive_fifo_errors", .int, unit: "packets", doc: "receive FIFO overruns (fifo)", counter: true)),
        Counter(transmit: false, column: "frame", decl: FieldDecl("receive_frame_errors", .int, unit: "packets",
                doc: "length, overrun, CRC and frame alignment errors (frame)", counter: true)),
        Counter(transmit: false, column: "compressed", decl: FieldDecl("receive_compressed", .int, unit: "packets", doc: "compressed packets received (cslip, ppp)", counter: true)),
        Counter(transmit: false, column: "multicast", decl: FieldDecl("receive_multicast", .int, unit: "packets", doc: "multicast packets received", counter: true)),
        Counter(transmit: true, column: "bytes", decl: FieldDecl("transmit_bytes", .int, unit: "bytes", doc: "bytes sent", counter: true)),
        Counter(transmit: true, column: "packets", decl: FieldDecl("transmit_packets", .int, unit: "packets", doc: "packets sent", counter: true)),
        Counter(transmit: true, column: "errs", decl: FieldDecl("transmit_errors", .int, unit: "packets", doc: "transmit errors (errs)", counter: true)),
        Counter(transmit: true, column: "drop", decl: FieldDecl("transmit_dropped", .int, unit: "packets", doc: "packets dropped on transmit (drop)", counter: true)),
        Counter(transmit: true, column: "fifo", decl: FieldDecl("transmit_fifo_errors", .int, unit: "packets", doc: "transmit FIFO errors (fifo)", counter: true)),
        Counter(transmit: true, column: "colls", decl: FieldDecl("transmit_collisions", .int, unit: "packets", doc: "collisions (colls)", counter: true)),
        Counter(transmit: true, column: "carrier", decl: FieldDecl("transmit_carrier_errors", .int, unit: "packets",
                doc: "carrier, aborted, window and heartbeat errors (carrier)", counter: true)),
        Counter(transmit: true, column: "compressed", decl: FieldDecl("transmit_compressed", .int, unit: "packets", doc: "compressed packets sent", counter: true)),
    ]

    static let nohandlerField = FieldDecl("receive_nohandler", .int, unit: "packets",
                                          doc: "packets received with no protocol to take them, from <sysfs>/class/net/<if>/statistics/rx_nohandler (4.6+)",
                                          counter: true)

    /// An integer attribute of class/net/<if> and the field it becomes.
    struct IntAttribute {
        var file: String
        var decl: FieldDecl
    }

    static let intAttributes: [IntAttribute] = [
        IntAttribute(file: "mtu", decl: FieldDecl("mtu", .int, unit: "bytes", doc: "the largest packet the interface sends")),
        IntAttribute(file: "speed", decl: FieldDecl("speed", .int, unit: "Mbit/s",
                     doc: "the link speed as the driver gives it; -1 when the driver does not know it (virtio, as node_exporter reports it); absent while down")),
        IntAttribute(file: "carrier_changes", decl: FieldDecl("carrier_changes", .int, unit: "changes", doc: "times the carrier went up or down", counter: true)),
        IntAttribute(file: "carrier_up_count", decl: FieldDecl("carrier_up_changes", .int, unit: "changes", doc: "times the carrier went up (4.16+)", counter: true)),
        IntAttribute(file: "carrier_down_count", decl: FieldDecl("carrier_down_changes", .int, unit: "changes", doc: "times the carrier went down (4.16+)", counter: true)),
        IntAttribute(file: "addr_assign_type", decl: FieldDecl("address_assign_type", .int,
                     doc: "how the hardware address was set: 0 permanent, 1 random, 2 stolen, 3 set by user space")),
        IntAttribute(file: "name_assign_type", decl: FieldDecl("name_assign_type", .int,
                     doc: "how the name was set: 1 enumerated by the kernel, 2 predictable by the kernel, 3 by user space, 4 renamed")),
        IntAttribute(file: "dev_id", decl: FieldDecl("dev_id", .int, doc: "the device's id among those sharing one hardware address")),
        IntAttribute(file: "dev_port", decl: FieldDecl("dev_port", .int, doc: "the port number among the device's ports")),
        IntAttribute(file: "flags", decl: FieldDecl("flags", .int, doc: "the IFF_* flags (IFF_UP 0x1, IFF_BROADCAST 0x2, IFF_LOOPBACK 0x8, …)")),
        IntAttribute(file: "ifindex", decl: FieldDecl("ifindex", .int, doc: "the interface index")),
        IntAttribute(file: "iflink", decl: FieldDecl("iflink", .int, doc: "the index of the interface this one sits on (its own index for a physical one)")),
        IntAttribute(file: "link_mode", decl: FieldDecl("link_mode", .int, doc: "0 default, 1 dormant (user space must bring the link up)")),
        IntAttribute(file: "netdev_group", decl: FieldDecl("netdev_group", .int, doc: "the interface group")),
        IntAttribute(file: "type", decl: FieldDecl("type", .int, doc: "the ARPHRD_* hardware type (1 ethernet, 772 loopback, 65534 none)")),
        IntAttribute(file: "tx_queue_len", decl: FieldDecl("tx_queue_len", .int, unit: "packets", doc: "the transmit queue's length")),
    ]

    /// String attributes of class/net/<if>: file, field, doc.
    static let stringAttributes: [(file: String, field: String, doc: String)] = [
        ("operstate", "operstate", "the RFC 2863 operational state: up, down, dormant, lowerlayerdown, notpresent, testing, unknown"),
        ("duplex", "duplex", "full, half or unknown; absent while down or when the driver does not say"),
        ("address", "address", "the hardware address"),
        ("broadcast", "broadcast", "the hardware broadcast address"),
        ("ifalias", "ifalias", "the alias a user gave the interface (often empty)"),
    ]

    static let linkFields: [FieldDecl] =
        [FieldDecl("interface", .string, doc: "the interface name")]
        + stringAttributes.map { FieldDecl($0.field, .string, doc: $0.doc) }
        + [FieldDecl("up", .bool, doc: "operstate is up"),
           FieldDecl("admin_state", .string, doc: "up when the IFF_UP flag is set (ip link set … up), else down"),
           FieldDecl("carrier", .bool, doc: "the physical link is up (carrier is 1); absent while the interface is down"),
           FieldDecl("dormant", .bool, doc: "the interface waits for an external event (802.1X) before going up; absent while down")]
        + intAttributes.map(\.decl)

    private let context: MonitorContext
    private let procfs: FSRoot
    private let sysfs: FSRoot
    private let include: [String]
    private let exclude: [String]
    private let statsExclude: [String]
    private var warnedSkipped = false
    /// The interfaces of the last poll, by name: the inode of each one's
    /// entry in class/net (whose attributes `sysfs` holds open).
    private var linkDirectories: [String: UInt64] = [:]

    static let netDir = "class/net"

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        for (name, globs) in [("interfaces", options.interfaces), ("exclude", options.exclude), ("stats_exclude", options.statsExclude)] {
            if let i = globs.firstIndex(where: \.isEmpty) { throw .invalidOption("\(name)[\(i)]", "must not be empty") }
        }
        self.context = context
        self.procfs = try .monitorRoot(options.procfs, option: "procfs")
        self.sysfs = try .monitorRoot(options.sysfs, option: "sysfs")
        self.include = options.interfaces
        self.exclude = options.exclude
        self.statsExclude = options.statsExclude
    }

    func start() throws(MonitorError) {
        warnedSkipped = false
        guard procfs.exists("net/dev") || FSRoot.isDirectory(sysfs.path(Self.netDir)) else {
            throw .unavailable("neither \(procfs.path("net/dev")) nor \(sysfs.path(Self.netDir)) exists")
        }
    }

    func poll() throws(MonitorError) {
        var failure: ProbeError?
        var statsSeen = false
        let links = linkNames()
        do {
            let dev = try procfs.netDev()
            statsSeen = true
            emitCounters(dev)
        } catch {
            if !error.isUnavailable { failure = error }
        }
        if let links { emitLinks(links) }
        if let failure { throw .temporary(failure.description) }
        if !statsSeen && links == nil {
            throw .unavailable("neither \(procfs.path("net/dev")) nor \(sysfs.path(Self.netDir)) can be read")
        }
    }

    private func selected(_ name: String) -> Bool {
        include.contains { fnmatch($0, name, 0) == 0 } && !exclude.contains { fnmatch($0, name, 0) == 0 }
    }

    private func emitCounters(_ dev: NetDev) {
        if !dev.skippedLines.isEmpty && !warnedSkipped {
            warnedSkipped = true
            context.log(.warning, "\(procfs.path("net/dev")): skipped garbled line(s) \(dev.skippedLines.map(String.init).joined(separator: ", "))")
        }
        // Where each declared counter is in this file's columns (nil: the kernel has no such column).
        let positions: [(name: String, transmit: Bool, index: Int)] = Self.counterFields.compactMap { counter in
            let columns = counter.transmit ? dev.transmitColumns : dev.receiveColumns
            return columns.firstIndex(of: counter.column).map { (counter.decl.name, counter.transmit, $0) }
        }
        for interface in dev.interfaces where selected(interface.name) && !statsExclude.contains(where: { fnmatch($0, interface.name, 0) == 0 }) {
            var fields: [(String, Value)] = [("interface", .string(interface.name))]
            fields.reserveCapacity(positions.count + 2)
            for p in positions {
                fields.append((p.name, .int(clamping: p.transmit ? interface.transmit[p.index] : interface.receive[p.index])))
            }
            if case .text(let text) = sysfs.attribute("\(Self.netDir)/\(interface.name)/statistics/rx_nohandler"),
               let value = UInt64(text) {
                fields.append((Self.nohandlerField.name, .int(clamping: value)))
            }
            context.emit("interface", fields: fields)
        }
    }

    /// The interfaces of class/net that are selected, sorted; nil when the
    /// directory cannot be listed. What `sysfs` held open of an interface
    /// that went, or whose name now stands for another device, is let go
    /// first, so that neither the counters nor the links read an old one.
    ///
    /// An interface is a symlink of class/net to its device (a directory
    /// in a fixture tree); bonding_masters and other plain files beside them
    /// are not. The symlink's own inode tells one device from another: a
    /// renamed device keeps its link under a new name, a new device with an
    /// old name has a new link. Readdir says both, without a stat of each.
    private func linkNames() -> [String]? {
        guard let entries = sysfs.entries(Self.netDir) else {
            sysfs.forgetOpenFiles(under: Self.netDir)
            linkDirectories = [:]
            return nil
        }
        var directories: [String: UInt64] = [:]
        var names: [String] = []
        for entry in entries where selected(entry.name) {
            switch entry.kind {
            case .directory: break
            case .symlink where linkDirectories[entry.name] == entry.inode: break  // seen last poll: still a device
            case .symlink, .unknown:
                guard FSRoot.isDirectory(sysfs.path("\(Self.netDir)/\(entry.name)")) else { continue }
            case .other: continue
            }
            directories[entry.name] = entry.inode
            names.append(entry.name)
        }
        for (name, inode) in linkDirectories where directories[name] != inode {
            sysfs.forgetOpenFiles(under: "\(Self.netDir)/\(name)")
        }
        linkDirectories = directories
        return names
    }

    /// Emits one link event per interface of `names`.
    private func emitLinks(_ names: [String]) {
        for name in names {
            let dir = "\(Self.netDir)/\(name)"
            var fields: [(String, Value)] = [("interface", .string(name))]
            func text(_ file: String) -> String? {
                if case .text(let t) = sysfs.attribute(dir + "/" + file) { t } else { nil }
            }
            var operstate: String?
            for attribute in Self.stringAttributes {
                guard let value = text(attribute.file) else { continue }
                if attribute.file == "operstate" { operstate = value }
                fields.append((attribute.field, .string(value)))
            }
            if let operstate { fields.append(("up", .bool(operstate == "up"))) }
            let flags = text("flags").flatMap(KernelNumber.integer)
            if let flags { fields.append(("admin_state", .string(flags & 0x1 != 0 ? "up" : "down"))) }
            for (file, field) in [("carrier", "carrier"), ("dormant", "dormant")] {
                if let value = text(file).flatMap(KernelNumber.integer) { fields.append((field, .bool(value != 0))) }
            }
            for attribute in Self.intAttributes {
                let value = attribute.file == "flags" ? flags : text(attribute.file).flatMap(KernelNumber.integer)
                if let value { fields.append((attribute.decl.name, .int(value))) }
            }
            context.emit("link", fields: fields)
        }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(NetdevMonitor.self, a, r) }
