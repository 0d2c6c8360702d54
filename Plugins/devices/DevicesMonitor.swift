import Glibc
import LinuxProbes
import Synchronization
import VigilKit

/// Devices added, removed and changed: XestiMonitors' accessory and camera
/// monitors, on Linux. The USB devices present are read from
/// `<sysfs>/bus/usb/devices/*` on start (entries with an `idVendor`: real
/// devices, not interfaces). Then:
///
/// - on the real `/sys`, the kernel's uevents (a NETLINK_KOBJECT_UEVENT socket
///   bound to group 1) are read by a worker, as they come;
/// - with `uevent_socket`, uevent-format datagrams sent to that unix socket
///   are read instead (for tests, and for feeding events from elsewhere);
/// - for a fixture root, or when the netlink socket cannot be opened (EPERM
///   in some containers; the reason is logged), the USB tree is polled every
///   interval and diffed.
///
/// Polled, so that the host's interval drives the fallback; with a uevent
/// source a poll does nothing.
final class DevicesMonitor: PolledMonitor, @unchecked Sendable {  // shared state is behind `state`
    static let identity: [FieldDecl] = [
        FieldDecl("vendor", .string, doc: "vendor id, four hex digits (idVendor, or PRODUCT's first part)"),
        FieldDecl("product", .string, doc: "product id, four hex digits (idProduct, or PRODUCT's second part)"),
        FieldDecl("manufacturer", .string, doc: "the device's manufacturer string, where it has one"),
        FieldDecl("product_name", .string, doc: "the device's product string, where it has one"),
        FieldDecl("serial", .string, doc: "the device's serial number string, where it has one"),
        FieldDecl("busnum", .int, doc: "USB bus number"),
        FieldDecl("devnum", .int, doc: "device number on its bus"),
        FieldDecl("speed", .double, unit: "Mbit/s", doc: "negotiated speed (1.5, 12, 480, 5000…)"),
    ]

    static let occurrenceFields: [FieldDecl] = [
        FieldDecl("action", .string, doc: "the kernel's ACTION: add, remove, change, bind, unbind, move, online, offline"),
        FieldDecl("devpath", .string, doc: "the device's path under sysfs (/devices/pci0000:00/…/usb1/1-3)"),
        FieldDecl("subsystem", .string, doc: "the kernel subsystem (usb, power_supply, block, input…)"),
        FieldDecl("devtype", .string, doc: "the kernel DEVTYPE (usb_device, usb_interface, disk…), where it has one"),
    ] + identity

    static let spec = PluginSpec(
        name: "devices", version: "1.0.0",
        summary: "Devices added, removed and changed (USB snapshot from sysfs, then kernel uevents, or a polled sysfs diff)",
        defaultInterval: .seconds(2),
        events: [
            EventDecl("device", doc: "On start, one event per USB device present (bus/usb/devices entries with an idVendor); on a machine without a USB bus, none, and the monitor is unavailable with that reason.",
                      fields: [FieldDecl("devpath", .string, doc: "the device's path under sysfs"),
                               FieldDecl("subsystem", .string, doc: "usb"),
                               FieldDecl("devtype", .string, doc: "usb_device")] + identity,
                      key: ["devpath"]),
            .occurrence("added", doc: "A device appeared (ACTION=add; a new entry in a polled tree).", fields: occurrenceFields),
            .occurrence("removed", doc: "A device went away (ACTION=remove; an entry gone from a polled tree); ids from the uevent's PRODUCT or from what was known of it.",
                        fields: occurrenceFields),
            .occurrence("changed", doc: "A device changed (ACTION=change, bind, unbind, move, online, offline; other attributes in a polled tree).",
                        fields: occurrenceFields),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var subsystems: [String] = ["usb"]
        var devtypes: [String]? = nil
        var ueventSocket: String? = nil
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem; uevents are read only for the real /sys (a fixture tree is polled)."),
            .option("subsystems", \.subsystems, doc: "Subsystems to report (usb, power_supply, block…); \"*\" for all."),
            .optional("devtypes", \.devtypes, doc: "Only these DEVTYPEs (usb_device skips usb_interface events); events without a DEVTYPE pass."),
            .optional("uevent_socket", \.ueventSocket,
                      doc: "Read uevent-format datagrams from a unix datagram socket bound at this path instead of netlink (for tests, or to feed events from elsewhere)."))
    }

    /// What sysfs says of one USB device.
    struct USBDevice: Equatable {
        var devpath: String
        var vendor: String
        var product: String
        var manufacturer: String?
        var productName: String?
        var serial: String?
        var busnum: Int64?
        var devnum: Int64?
        var speed: Double?

        var fields: [(String, Value)] {
            var f: [(String, Value)] = [("vendor", .string(vendor)), ("product", .string(product))]
            if let manufacturer { f.append(("manufacturer", .string(manufacturer))) }
            if let productName { f.append(("product_name", .string(productName))) }
            if let serial { f.append(("serial", .string(serial))) }
            if let busnum { f.append(("busnum", .int(busnum))) }
            if let devnum { f.append(("devnum", .int(devnum))) }
            if let speed { f.append(("speed", .double(speed))) }
            return f
        }
    }

    enum Source: Equatable { case netlink, socket, polling }

    static let usbDir = "/bus/usb/devices"

    private let context: MonitorContext
    private let options: Options
    private let root: String
    private var uevents: UeventSocket?
    private var source = Source.polling
    /// Devices known by devpath: from the snapshot, adds and the polled diff.
    private let state = Mutex<[(devpath: String, device: USBDevice)]>([])
    /// USB devices are wanted and the machine has no USB bus: said with
    /// availability (start and poll only, which are never concurrent).
    private var usbBusMissing = false

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        for (i, s) in options.subsystems.enumerated() where s.isEmpty {
            throw .invalidOption("subsystems[\(i)]", "must not be empty")
        }
        if let path = options.ueventSocket {
            guard !path.isEmpty else { throw .invalidOption("uevent_socket", "must not be empty") }
            guard path.utf8.count < 108 else { throw .invalidOption("uevent_socket", "longer than a unix socket path may be (107 bytes)") }
        }
        var root = options.sysfs
        while root.count > 1, root.hasSuffix("/") { root.removeLast() }
        self.root = root == "/" ? "" : root
        self.options = options
        self.context = context
    }

    func start() throws(MonitorError) {
        // A restart: the previous worker was joined after stop.
        uevents = nil
        state.withLock { $0 = [] }
        source = .polling
        var why = "sysfs is \(options.sysfs), not /sys, so its tree is polled"
        if let path = options.ueventSocket {
            switch UeventSocket.unix(path) {
            case .success(let s): uevents = s; source = .socket
            case .failure(.notASocket): throw .invalidOption("uevent_socket", "\(path) exists and is not a socket")
            case .failure(let failure): throw .unavailable(failure.description)
            }
        } else if root.isEmpty || root == "/sys" {
            switch UeventSocket.kernel() {
            case .success(let s): uevents = s; source = .netlink
            case .failure(let failure):
                why = failure.description
                context.log(.warning, "\(why): polling \(root)\(Self.usbDir) every interval instead")
            }
        }
        let hasBus = FSRoot.isDirectory(root + Self.usbDir)
        guard hasBus || source != .polling else {
            throw .unavailable("no \(root)\(Self.usbDir) and no uevent source (\(why))")
        }
        // Without a USB bus the snapshot would be silence: say why instead. The
        // instance runs on (uevents of the other subsystems, a bus that appears).
        let missing = !hasBus && wanted(subsystem: "usb", devtype: "usb_device")
        if missing || usbBusMissing {
            context.setAvailability(!missing, reason: missing ? Self.noBusReason(root) : "")
        }
        usbBusMissing = missing
        let devices = scan()
        state.withLock { $0 = devices.map { ($0.devpath, $0) } }
        if wanted(subsystem: "usb", devtype: "usb_device") {
            for d in devices {
                context.emit("device", fields: [("devpath", .string(d.devpath)), ("subsystem", "usb"), ("devtype", "usb_device")] + d.fields)
            }
        }
        guard let uevents else { return }
        context.spawn(source == .netlink ? "uevent" : "uevent-socket") { [self] token in
            while !token.isCancelled {
                switch token.waitFor(fd: uevents.fd, events: Int16(POLLIN), timeout: nil) {
                case .cancelled: return
                case .timedOut: continue
                case .ready(let revents):
                    uevents.drain(receive)
                    if revents & Int16(POLLNVAL) != 0 { return }
                }
            }
        }
    }

    func stop() {
        // The SDK joins the worker after this returns; the socket is closed
        // at the next start or in deinit, once nothing reads it.
        if source == .socket { uevents?.unlinkPath() }
    }

    static func noBusReason(_ root: String) -> String {
        "no USB bus: \(root)\(usbDir) does not exist, so there is no USB device to report; uevents are still read, and a bus that appears is reported"
    }

    func poll() throws(MonitorError) {
        if usbBusMissing, FSRoot.isDirectory(root + Self.usbDir) {
            usbBusMissing = false
            context.setAvailability(true)
        }
        guard source == .polling else { return }
        guard FSRoot.isDirectory(root + Self.usbDir) else { throw .unavailable("\(root)\(Self.usbDir) does not exist") }
        diff()
    }

    // MARK: the polled tree

    /// Compares the tree with what is known and reports the difference.
    private func diff() {
        let now = scan()
        let before = state.withLock { known -> [(devpath: String, device: USBDevice)] in
            defer { known = now.map { ($0.devpath, $0) } }
            return known
        }
        guard wanted(subsystem: "usb", devtype: "usb_device") else { return }
        for (devpath, old) in before where !now.contains(where: { $0.devpath == devpath }) {
            report("removed", action: "remove", devpath: devpath, subsystem: "usb", devtype: "usb_device", device: old)
        }
        for d in now {
            if let old = before.first(where: { $0.devpath == d.devpath })?.device {
                if old != d { report("changed", action: "change", devpath: d.devpath, subsystem: "usb", devtype: "usb_device", device: d) }
            } else {
                report("added", action: "add", devpath: d.devpath, subsystem: "usb", devtype: "usb_device", device: d)
            }
        }
    }

    /// The USB devices in `<sysfs>/bus/usb/devices`, sorted by name; entries
    /// without an idVendor (interfaces) or whose attributes vanished are skipped.
    private func scan() -> [USBDevice] {
        let dir = root + Self.usbDir
        let rootReal = Self.realPath(root.isEmpty ? "/" : root) ?? root
        var devices: [USBDevice] = []
        for name in FSRoot.listDirectory(dir) ?? [] where !name.hasPrefix(".") {
            let full = dir + "/" + name
            var devpath = Self.usbDir + "/" + name
            if let real = Self.realPath(full) {
                let prefix = rootReal == "/" ? "" : rootReal
                if real.hasPrefix(prefix + "/") { devpath = String(real.dropFirst(prefix.count)) }
            }
            if let d = read(full, devpath: devpath) { devices.append(d) }
        }
        return devices
    }

    /// The device at `path` (a sysfs directory), or nil when it has no readable idVendor/idProduct.
    private func read(_ path: String, devpath: String) -> USBDevice? {
        guard let vendor = Self.attribute(path, "idVendor"), let product = Self.attribute(path, "idProduct") else { return nil }
        return USBDevice(devpath: devpath, vendor: vendor, product: product,
                         manufacturer: Self.attribute(path, "manufacturer"), productName: Self.attribute(path, "product"),
                         serial: Self.attribute(path, "serial"),
                         busnum: Self.attribute(path, "busnum").flatMap { Int64($0) },
                         devnum: Self.attribute(path, "devnum").flatMap { Int64($0) },
                         speed: Self.attribute(path, "speed").flatMap { Double($0) })
    }

    // MARK: uevents

    private func receive(_ datagram: UeventSocket.Datagram) {
        switch datagram {
        case .event(let event): handle(event)
        case .skipped(.libudev, _): break
        case .skipped(let why, let size): context.log(.debug, "skipping a uevent datagram of \(size) bytes: \(why)")
        case .overflowed:
            context.log(.warning, "the uevent queue overflowed: some events were lost; resynchronizing from \(root)\(Self.usbDir)")
            diff()
        }
    }

    private func handle(_ event: Uevent) {
        let known = state.withLock { known in known.first { $0.devpath == event.devpath }?.device }
        var device: USBDevice?
        switch event.action {
        case "remove":
            device = known
            state.withLock { known in known.removeAll { $0.devpath == event.devpath } }
        default:
            // Read sysfs after the add; the attributes may already be gone.
            device = read(root + event.devpath, devpath: event.devpath)
            if let device, event.subsystem == "usb", event.devtype == "usb_device" || event.devtype == nil {
                state.withLock { known in
                    if let i = known.firstIndex(where: { $0.devpath == event.devpath }) { known[i].device = device }
                    else { known.append((event.devpath, device)) }
                }
            }
        }
        if device == nil, let ids = event.usbIDs {
            device = USBDevice(devpath: event.devpath, vendor: ids.vendor, product: ids.product)
            if let bus = event["BUSNUM"].flatMap({ Int64($0) }) { device?.busnum = bus }
            if let dev = event["DEVNUM"].flatMap({ Int64($0) }) { device?.devnum = dev }
        }
        guard wanted(subsystem: event.subsystem, devtype: event.devtype) else { return }
        let kind = switch event.action {
        case "add": "added"
        case "remove": "removed"
        default: "changed"
        }
        report(kind, action: event.action, devpath: event.devpath, subsystem: event.subsystem, devtype: event.devtype, device: device)
    }

    private func report(_ kind: String, action: String, devpath: String, subsystem: String, devtype: String?, device: USBDevice?) {
        var fields: [(String, Value)] = [("action", .string(action)), ("devpath", .string(devpath)), ("subsystem", .string(subsystem))]
        if let devtype { fields.append(("devtype", .string(devtype))) }
        if let device { fields += device.fields }
        context.emit(kind, fields: fields)
    }

    private func wanted(subsystem: String, devtype: String?) -> Bool {
        guard options.subsystems.contains("*") || options.subsystems.contains(subsystem) else { return false }
        if let devtypes = options.devtypes, let devtype { return devtypes.contains(devtype) }
        return true
    }

    // MARK: files

    /// An attribute's text, trimmed; nil when it cannot be read or is
    /// empty. Through LinuxProbes' reader: a FIFO there (a damaged or
    /// hostile tree) held the monitor's start forever, and a link to
    /// /dev/urandom made 4 KiB of noise a vendor that changed every poll.
    static func attribute(_ dir: String, _ name: String) -> String? {
        guard case .text(let text) = FSRoot("/").attribute(dir + "/" + name), !text.isEmpty else { return nil }
        return text
    }

    static func realPath(_ path: String) -> String? {
        guard let p = realpath(path, nil) else { return nil }
        defer { free(p) }
        return String(cString: p)
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(DevicesMonitor.self, a, r) }
