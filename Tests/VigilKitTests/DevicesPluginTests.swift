import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `devices` plugin, built as libdevices.so: the USB snapshot and the
/// polled diff against the sysfs fixtures in Tests/Fixtures/sys/devices, and
/// the uevent path through its `uevent_socket` option, fed with the
/// datagrams the kernel sends for a USB stick and a battery.
@Suite(.serialized) struct DevicesPluginTests {
    static let fixtures = repoRoot + "/Tests/Fixtures/sys/devices"
    static let usb1 = "/devices/pci0000:00/0000:00:14.0/usb1"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libdevices.so") }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "devices" && d.polled && d.defaultInterval == 2_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["sysfs:string:/sys", "subsystems:json:[\"usb\"]", "devtypes:json:-", "uevent_socket:string:-"])
        #expect(d.events.map(\.kind) == ["device", "added", "removed", "changed"])
        #expect(d.events[1].fields.map(\.name).prefix(6) == ["action", "devpath", "subsystem", "devtype", "vendor", "product"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func laptopSnapshot() throws {
        let instance = try host().instance(options: "{ sysfs: \(machines)/laptop/sys }")
        try instance.start()
        let devices = instance.events(kind: "device")
        // Interfaces (1-0:1.0, 1-2:1.0) have no idVendor: not devices.
        #expect(devices.map { $0.string("devpath")! } == [Self.usb1 + "/1-2", Self.usb1])
        let keyboard = devices[0], hub = devices[1]
        #expect(keyboard.string("subsystem") == "usb" && keyboard.string("devtype") == "usb_device")
        #expect(keyboard.string("vendor") == "046d" && keyboard.string("product") == "c31c")
        #expect(keyboard.string("manufacturer") == "Logitech" && keyboard.string("product_name") == "USB Keyboard")
        #expect(keyboard.string("serial") == nil)
        #expect(keyboard.int("busnum") == 1 && keyboard.int("devnum") == 3 && keyboard.double("speed") == 1.5)
        #expect(hub.string("vendor") == "1d6b" && hub.string("product") == "0002")
        #expect(hub.string("product_name") == "xHCI Host Controller" && hub.string("serial") == "0000:00:14.0")
        #expect(hub.double("speed") == 480)
        try instance.advance(by: .seconds(10))  // polled, nothing changed
        #expect(instance.events.count == 2)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func stickPluggedChangedAndUnplugged() throws {
        let tree = try DevicesTempTree(copying: machines + "/laptop/sys")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(2))
        try instance.start()
        #expect(instance.events(kind: "device").count == 2)
        try instance.advance(by: .seconds(4))
        #expect(instance.events.count == 2)

        try DevicesTempTree.copy(Self.fixtures + "/stick", to: tree.path)
        try instance.advance(by: .seconds(2))
        let added = try #require(instance.events(kind: "added").first)
        #expect(instance.events(kind: "added").count == 1)  // not its interface
        #expect(added.string("action") == "add" && added.string("devpath") == Self.usb1 + "/1-3")
        #expect(added.string("subsystem") == "usb" && added.string("devtype") == "usb_device")
        #expect(added.string("vendor") == "0781" && added.string("product") == "5567")
        #expect(added.string("manufacturer") == "SanDisk" && added.string("product_name") == "Cruzer Blade")
        #expect(added.string("serial") == "4C530001230614116172" && added.int("devnum") == 4)

        // The keyboard re-enumerated at another address.
        try tree.write(tree.path + Self.usb1 + "/1-2/devnum", "5")
        try instance.advance(by: .seconds(2))
        let changed = try #require(instance.events(kind: "changed").first)
        #expect(changed.string("devpath") == Self.usb1 + "/1-2" && changed.int("devnum") == 5)

        // Unplugged: the link and the device go; what was known of it is reported.
        try tree.remove(tree.path + "/bus/usb/devices/1-3")
        try tree.remove(tree.path + "/bus/usb/devices/1-3:1.0")
        try tree.remove(tree.path + Self.usb1 + "/1-3")
        try instance.advance(by: .seconds(2))
        let removed = try #require(instance.events(kind: "removed").first)
        #expect(removed.string("action") == "remove" && removed.string("devpath") == Self.usb1 + "/1-3")
        #expect(removed.string("vendor") == "0781" && removed.string("serial") == "4C530001230614116172")
        #expect(instance.events.count == 5)

        // A vanished attribute: the entry is skipped, nothing fails.
        try tree.remove(tree.path + Self.usb1 + "/1-2/idProduct")
        try instance.advance(by: .seconds(2))
        #expect(instance.events(kind: "removed").last?.string("devpath") == Self.usb1 + "/1-2")
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func subsystemFilter() throws {
        let instance = try host().instance(options: "{ sysfs: \(machines)/laptop/sys, subsystems: [power_supply] }")
        try instance.start()
        #expect(instance.events.isEmpty)
        try instance.stop()
    }

    @Test func unavailableWithoutUSBTree() throws {
        let tree = try DevicesTempTree(copying: Self.fixtures + "/stick/devices")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }")
        do {
            try instance.start()
            Issue.record("start should fail")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains("bus/usb/devices"))
        }
    }

    /// A machine without a USB bus but with a uevent source: the instance
    /// runs (uevents still come), reports no device, and says why it has
    /// none through availability instead of starting in silence; a bus
    /// that appears makes it available again.
    @Test func noUSBBusWithUeventsSaysSoWithAvailability() throws {
        let tree = try DevicesTempTree(copying: Self.fixtures + "/stick/devices")
        let socketPath = tree.path + "/uevents.sock"
        let instance = try host().instance(
            options: "{ sysfs: \(tree.path), uevent_socket: \(socketPath), subsystems: [usb, power_supply] }")
        try instance.start()
        #expect(instance.events(kind: "device").isEmpty)
        let said = instance.availability
        #expect(said.count == 1, "\(said)")
        #expect(said.first?.available == false)
        #expect(said.first?.reason == "no USB bus: \(tree.path)/bus/usb/devices does not exist, so there is no USB device to report; uevents are still read, and a bus that appears is reported")

        // Uevents of the other subsystems are still reported.
        let sender = try UeventSender(path: socketPath)
        try sender.send(Self.message("change@\(Self.battery)", [
            "ACTION=change", "DEVPATH=\(Self.battery)", "SUBSYSTEM=power_supply", "SEQNUM=1"]))
        #expect(instance.waitForEvents(1, kind: "changed").first?.string("subsystem") == "power_supply")

        // A poll while there is still no bus changes nothing; one after it appears says it is back.
        try instance.poll()
        #expect(instance.availability.count == 1)
        for dir in ["/bus", "/bus/usb", "/bus/usb/devices"] { #expect(mkdir(tree.path + dir, 0o755) == 0 || errno == EEXIST) }
        try instance.poll()
        #expect(instance.availability.map(\.available) == [false, true])
        try instance.poll()
        #expect(instance.availability.count == 2)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    /// Without usb among the subsystems, a missing bus is nobody's business.
    @Test func noUSBBusIsNotMentionedWhenUSBIsNotWanted() throws {
        let tree = try DevicesTempTree(copying: Self.fixtures + "/stick/devices")
        let instance = try host().instance(
            options: "{ sysfs: \(tree.path), uevent_socket: \(tree.path)/u.sock, subsystems: [power_supply] }")
        try instance.start()
        #expect(instance.availability.isEmpty)
        #expect(instance.events.isEmpty)
        try instance.stop()
    }

    @Test func badOptions() throws {
        #expect(throws: PluginTestError.self) { try host().instance(options: "{ sysfs: \"\" }") }
        let long = "/tmp/" + String(repeating: "x", count: 120)
        #expect(throws: PluginTestError.self) { try host().instance(options: "{ uevent_socket: \(long) }") }
    }

    // MARK: uevents

    static func message(_ header: String, _ properties: [String]) -> [UInt8] {
        var bytes = Array(header.utf8) + [0]
        for p in properties { bytes += Array(p.utf8) + [0] }
        return bytes
    }

    static let stick = usb1 + "/1-3"
    static let stickInterface = stick + "/1-3:1.0"
    static let battery = "/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0C0A:00/power_supply/BAT0"

    static func usbMessage(_ action: String, _ devpath: String, interface: Bool, seq: Int) -> [UInt8] {
        var p = ["ACTION=\(action)", "DEVPATH=\(devpath)", "SUBSYSTEM=usb"]
        if interface {
            p += ["DEVTYPE=usb_interface", "PRODUCT=781/5567/100", "TYPE=0/0/0", "INTERFACE=8/6/80",
                  "MODALIAS=usb:v0781p5567d0100dc00dsc00dp00ic08isc06ip50in00"]
            if action == "bind" { p.append("DRIVER=usb-storage") }
        } else {
            p += ["MAJOR=189", "MINOR=3", "DEVNAME=bus/usb/001/004", "DEVTYPE=usb_device", "PRODUCT=781/5567/100",
                  "TYPE=0/0/0", "BUSNUM=001", "DEVNUM=004"]
        }
        p.append("SEQNUM=\(seq)")
        return message("\(action)@\(devpath)", p)
    }

    @Test func ueventsFromASocket() throws {
        let tree = try DevicesTempTree(copying: machines + "/laptop/sys")
        let socketPath = tree.path + "/uevents.sock"
        let instance = try host().instance(
            options: "{ sysfs: \(tree.path), uevent_socket: \(socketPath), subsystems: [usb, power_supply] }")
        try instance.start()
        #expect(instance.events(kind: "device").count == 2)
        let sender = try UeventSender(path: socketPath)

        // Plugged in: sysfs has it by the time the add is read.
        try DevicesTempTree.copy(Self.fixtures + "/stick", to: tree.path)
        try sender.send(Self.usbMessage("add", Self.stick, interface: false, seq: 4521))
        try sender.send(Self.usbMessage("add", Self.stickInterface, interface: true, seq: 4522))
        try sender.send(Self.usbMessage("bind", Self.stickInterface, interface: true, seq: 4523))
        // Not the kernel's, or not uevents: skipped.
        try sender.send(Array("libudev".utf8) + [0, 0xfe, 0xed, 0xca, 0xfe] + Array(repeating: 1, count: 30))
        try sender.send(Self.message("add@/devices/x", ["ACTION=remove", "DEVPATH=/devices/x", "SUBSYSTEM=usb"]))
        try sender.send(Array("garbage without a header".utf8))
        try sender.send(Self.message("change@\(Self.battery)", [
            "ACTION=change", "DEVPATH=\(Self.battery)", "SUBSYSTEM=power_supply", "POWER_SUPPLY_NAME=BAT0",
            "POWER_SUPPLY_TYPE=Battery", "POWER_SUPPLY_STATUS=Charging", "POWER_SUPPLY_CAPACITY=81", "SEQNUM=4524"]))
        instance.waitForEvents(2, kind: "changed")

        let added = instance.events(kind: "added")
        #expect(added.map { $0.string("devtype") } == ["usb_device", "usb_interface"])
        #expect(added[0].string("manufacturer") == "SanDisk" && added[0].string("serial") == "4C530001230614116172")
        #expect(added[0].string("vendor") == "0781" && added[0].string("product") == "5567")
        // The interface has no idVendor in sysfs: the ids come from PRODUCT.
        #expect(added[1].string("vendor") == "0781" && added[1].string("product") == "5567")
        #expect(added[1].string("manufacturer") == nil)
        let changed = instance.events(kind: "changed")
        #expect(changed.map { $0.string("action") } == ["bind", "change"])
        #expect(changed[1].string("subsystem") == "power_supply" && changed[1].string("devpath") == Self.battery)
        #expect(changed[1].string("devtype") == nil && changed[1].string("vendor") == nil)

        // Unplugged: sysfs is gone first; ids from PRODUCT, names from what was known.
        try tree.remove(tree.path + Self.stick)
        try sender.send(Self.usbMessage("remove", Self.stickInterface, interface: true, seq: 4530))
        try sender.send(Self.usbMessage("remove", Self.stick, interface: false, seq: 4531))
        let removed = instance.waitForEvents(2, kind: "removed")
        #expect(removed.map { $0.string("devpath") } == [Self.stickInterface, Self.stick])
        #expect(removed.allSatisfy { $0.string("vendor") == "0781" && $0.string("product") == "5567" })
        #expect(removed[1].string("product_name") == "Cruzer Blade" && removed[1].int("devnum") == 4)
        #expect(instance.events.count == 2 + 2 + 2 + 2)
        try instance.stop()
        #expect(access(socketPath, F_OK) != 0)  // unlinked on stop
        #expect(instance.violations.isEmpty)
    }

    @Test func devtypeFilterOnUevents() throws {
        let tree = try DevicesTempTree(copying: machines + "/laptop/sys")
        let socketPath = tree.path + "/uevents.sock"
        let instance = try host().instance(
            options: "{ sysfs: \(tree.path), uevent_socket: \(socketPath), devtypes: [usb_device] }")
        try instance.start()
        let sender = try UeventSender(path: socketPath)
        try sender.send(Self.usbMessage("add", Self.stickInterface, interface: true, seq: 1))
        try sender.send(Self.usbMessage("add", Self.stick, interface: false, seq: 2))
        instance.waitForEvents(1, kind: "added")
        usleep(100_000)
        #expect(instance.events(kind: "added").map { $0.string("devpath") } == [Self.stick])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    /// The real /sys: netlink where allowed, else (EPERM in a container) a
    /// logged fallback to polling, else unavailable. Never a failure.
    @Test func realSys() throws {
        let instance = try host().instance()
        do {
            try instance.start()
            try instance.stop()
        } catch {
            #expect(error.status == "unavailable")
        }
        #expect(instance.violations.isEmpty)
    }
}

private typealias DevicesTempTree = TempTree
