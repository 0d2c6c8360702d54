import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `radio` plugin, built as libradio.so: sysfs polled on the machine
/// trees in Tests/Fixtures/machines (laptop: Wi-Fi phy0 as rfkill0, USB
/// Bluetooth hci0 as rfkill1, the ThinkPad's tpacpi_bluetooth_sw as rfkill2,
/// all unblocked; broken: a soft-blocked phy0, an ideapad switch without
/// `soft`, a dangling link), and /dev/rfkill pushed, through a FIFO in a
/// temporary tree fed with the 8-byte events the kernel sends.
@Suite(.serialized) struct RadioPluginTests {

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libradio.so") }

    /// A tree's instance: its sys and dev as the roots.
    func instance(_ root: String, _ extra: String = "") throws -> TestInstance {
        try host().instance(options: "{ sysfs: \(root)/sys, devfs: \(root)/dev\(extra) }", interval: .seconds(5))
    }

    // MARK: expected events, one line each

    static func line(_ event: TestEvent) -> String {
        ([event.kind] + event.fields.map { field in
            switch field.value {
            case .bool(let v): "\(field.name)=\(v)"
            case .int(let v): "\(field.name)=\(v)"
            case .double(let v): "\(field.name)=\(v)"
            case .string(let v): "\(field.name)=\(v)"
            }
        }).joined(separator: " ")
    }

    static func lines(_ instance: TestInstance) -> [String] { instance.events.map(line) }

    static func radio(_ index: Int, _ name: String?, _ type: String, soft: Bool = false, hard: Bool = false,
                      present: Bool = true) -> String {
        "radio index=\(index)" + (name.map { " name=\($0)" } ?? "") + " type=\(type) soft_blocked=\(soft) hard_blocked=\(hard)"
            + " blocked=\(soft || hard) present=\(present)"
    }

    static func airplane(_ active: Bool, radios: Int, blocked: Int) -> String {
        "airplane_mode active=\(active) radios=\(radios) blocked=\(blocked)"
    }

    static let laptopSnapshot = [
        radio(0, "phy0", "wlan"), radio(1, "hci0", "bluetooth"), radio(2, "tpacpi_bluetooth_sw", "bluetooth"),
        airplane(false, radios: 3, blocked: 0),
    ]

    static let classDir = "/sys/class/rfkill/"

    // MARK: self-description and options

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "radio" && d.polled && d.defaultInterval == 5_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["sysfs:string:/sys", "devfs:string:/dev", "types:json:[]"])
        #expect(d.events.map(\.kind) == ["radio", "airplane_mode"])
        #expect(d.events[0].fields.map(\.name)
                == ["index", "name", "type", "soft_blocked", "hard_blocked", "blocked", "present"])
        #expect(d.events[1].fields.map(\.name) == ["active", "radios", "blocked"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func refusesBadOptions() throws {
        for (options, message) in [("{ sysfs: '' }", "options.sysfs: must not be empty"),
                                   ("{ devfs: '' }", "options.devfs: must not be empty"),
                                   ("{ types: [wlan, wifi] }", "options.types[1]: unknown radio type 'wifi'")] {
            do {
                _ = try host().instance(options: options)
                Issue.record("\(options) accepted")
            } catch let error as PluginTestError {
                #expect(error.status == "invalid configuration")
                #expect(error.description.contains(message), "\(error)")
            }
        }
    }

    // MARK: polled sysfs

    @Test func laptopSnapshotPolled() throws {
        let root = machines + "/laptop"
        let instance = try instance(root)
        try instance.start()
        #expect(Self.lines(instance) == Self.laptopSnapshot)
        // No /dev/rfkill in the tree: said once, at debug, and polled.
        #expect(instance.logs.filter { $0.message.contains("cannot open \(root)/dev/rfkill") }.map(\.level) == [0])
        try instance.advance(by: .seconds(10))
        #expect(instance.events.count == 4)
        #expect(instance.logs.filter { $0.message.contains("cannot open") }.count == 1)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func softBlocksBetweenPollsAndAirplaneMode() throws {
        let tree = try RadioTempTree(copying: machines + "/laptop")
        let dir = tree.path + Self.classDir
        let instance = try instance(tree.path)
        try instance.start()
        #expect(Self.lines(instance) == Self.laptopSnapshot)

        // rfkill block wifi
        try tree.write(dir + "rfkill0/soft", "1")
        try tree.write(dir + "rfkill0/state", "0")
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(4) == [Self.radio(0, "phy0", "wlan", soft: true),
                                                      Self.airplane(false, radios: 3, blocked: 1)])

        // Bluetooth blocked by software, the ThinkPad's switch by hardware: every radio off.
        try tree.write(dir + "rfkill1/soft", "1")
        try tree.write(dir + "rfkill2/hard", "1")
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(6) == [Self.radio(1, "hci0", "bluetooth", soft: true),
                                                      Self.radio(2, "tpacpi_bluetooth_sw", "bluetooth", hard: true),
                                                      Self.airplane(true, radios: 3, blocked: 3)])
        try instance.advance(by: .seconds(10))  // nothing changed
        #expect(instance.events.count == 9)

        // Wi-Fi back on: airplane mode ends.
        try tree.write(dir + "rfkill0/soft", "0")
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(9) == [Self.radio(0, "phy0", "wlan"),
                                                      Self.airplane(false, radios: 3, blocked: 2)])

        // A restart sends the snapshot again.
        try instance.stop()
        try instance.start()
        #expect(Self.lines(instance).dropFirst(11) == [
            Self.radio(0, "phy0", "wlan"), Self.radio(1, "hci0", "bluetooth", soft: true),
            Self.radio(2, "tpacpi_bluetooth_sw", "bluetooth", hard: true), Self.airplane(false, radios: 3, blocked: 2),
        ])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func removalPolled() throws {
        let tree = try RadioTempTree(copying: machines + "/laptop")
        let instance = try instance(tree.path)
        try instance.start()

        // The USB Bluetooth adapter unplugged: its link and its device go.
        try tree.remove(tree.path + Self.classDir + "rfkill1")
        try tree.remove(tree.sys + "/devices/pci0000:00/0000:00:14.0/usb1/1-10")
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(4) == [Self.radio(1, "hci0", "bluetooth", present: false),
                                                      Self.airplane(false, radios: 2, blocked: 0)])
        try instance.advance(by: .seconds(5))
        #expect(instance.events.count == 6)

        // Plugged in again (the kernel would give it a new index; the same one comes back here).
        try RadioTempTree.copy(machines + "/laptop/sys/devices/pci0000:00/0000:00:14.0/usb1/1-10",
                               to: tree.sys + "/devices/pci0000:00/0000:00:14.0/usb1/1-10")
        #expect(symlink("../../devices/pci0000:00/0000:00:14.0/usb1/1-10/1-10:1.0/bluetooth/hci0/rfkill1",
                        tree.path + Self.classDir + "rfkill1") == 0)
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(6) == [Self.radio(1, "hci0", "bluetooth"),
                                                      Self.airplane(false, radios: 3, blocked: 0)])

        // Every device gone (the modules unloaded): reported, then unavailable.
        try tree.remove(tree.sys + "/class/rfkill")
        do {
            try instance.advance(by: .seconds(5))
            Issue.record("a poll without any rfkill device succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        #expect(Self.lines(instance).dropFirst(8) == [
            Self.radio(0, "phy0", "wlan", present: false), Self.radio(1, "hci0", "bluetooth", present: false),
            Self.radio(2, "tpacpi_bluetooth_sw", "bluetooth", present: false), Self.airplane(false, radios: 0, blocked: 0),
        ])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func typesFilter() throws {
        let tree = try RadioTempTree(copying: machines + "/laptop")
        let instance = try instance(tree.path, ", types: [wlan]")
        try instance.start()
        #expect(Self.lines(instance) == [Self.radio(0, "phy0", "wlan"), Self.airplane(false, radios: 3, blocked: 0)])
        // Bluetooth is not reported, but airplane mode counts it.
        try tree.write(tree.path + Self.classDir + "rfkill1/soft", "1")
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(2) == [Self.airplane(false, radios: 3, blocked: 1)])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    // MARK: nothing there, broken things

    @Test func unavailableOnAnEmptyTree() throws {
        let tree = try RadioTempTree()
        for step in ["nothing", "empty class/rfkill", "a regular file as dev/rfkill"] {
            switch step {
            case "empty class/rfkill":
                #expect(mkdir(tree.sys, 0o755) == 0 && mkdir(tree.sys + "/class", 0o755) == 0
                        && mkdir(tree.sys + "/class/rfkill", 0o755) == 0)
            case "a regular file as dev/rfkill":
                #expect(mkdir(tree.path + "/dev", 0o755) == 0)
                try tree.write(tree.path + "/dev/rfkill", "")
            default: break
            }
            let instance = try instance(tree.path)
            do {
                try instance.start()
                Issue.record("start succeeded with \(step)")
            } catch {
                #expect(error.status == "unavailable", "\(step)")
                #expect(error.description.contains("no rfkill device in \(tree.sys)/class/rfkill"), "\(error)")
                let why = step == "a regular file as dev/rfkill"
                    ? "\(tree.path)/dev/rfkill is not a character device or a FIFO"
                    : "cannot open \(tree.path)/dev/rfkill: No such file or directory"
                #expect(error.description.contains(why), "\(error)")
            }
            #expect(instance.events.isEmpty)
            #expect(instance.violations.isEmpty)
        }
    }

    @Test func brokenMachine() throws {
        let instance = try instance(machines + "/broken")
        try instance.start()
        // rfkill1 has no `soft`, rfkill2's link dangles: skipped, and said at debug.
        #expect(Self.lines(instance) == [Self.radio(0, "phy0", "wlan", soft: true), Self.airplane(true, radios: 1, blocked: 1)])
        let skipped = instance.logs.filter { $0.message.hasPrefix("skipping rfkill device") }
        #expect(skipped.map(\.level) == [0, 0])
        #expect(skipped[0].message.contains("rfkill1") && skipped[0].message.contains("soft"))
        #expect(skipped[1].message.contains("rfkill2"))
        try instance.advance(by: .seconds(10))
        #expect(instance.events.count == 2)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func anUnreadableAttributeKeepsTheLastState() throws {
        let tree = try RadioTempTree(copying: machines + "/laptop")
        let bt = tree.path + Self.classDir + "rfkill1/"
        let instance = try instance(tree.path)
        try instance.start()

        // A read that fails (EISDIR here, EIO or EAGAIN from a driver): skipped, neither changed nor gone.
        try tree.remove(bt + "soft")
        #expect(mkdir(bt + "soft", 0o755) == 0)
        try tree.write(bt + "hard", "1")
        try instance.advance(by: .seconds(5))
        #expect(instance.events.count == 4)
        #expect(instance.logs.contains { $0.level == 0 && $0.message.contains("skipping rfkill device rfkill1") })

        // Readable again: the change is reported.
        try tree.remove(bt + "soft")
        try tree.write(bt + "soft", "0")
        try instance.advance(by: .seconds(5))
        #expect(Self.lines(instance).dropFirst(4) == [Self.radio(1, "hci0", "bluetooth", hard: true),
                                                      Self.airplane(false, radios: 3, blocked: 1)])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    // MARK: /dev/rfkill pushed

    static func event(_ index: UInt32, type: UInt8, op: UInt8, soft: Bool = false, hard: Bool = false) -> [UInt8] {
        withUnsafeBytes(of: index) { Array($0) } + [type, op, soft ? 1 : 0, hard ? 1 : 0]
    }

    static let add: UInt8 = 0, del: UInt8 = 1, change: UInt8 = 2, changeAll: UInt8 = 3
    static let wlan: UInt8 = 1, bluetooth: UInt8 = 2

    /// What the kernel queues on open for the laptop: an ADD per device.
    static let laptopAdds = event(0, type: wlan, op: add) + event(1, type: bluetooth, op: add) + event(2, type: bluetooth, op: add)

    @Test func pushedFromTheDevice() throws {
        let tree = try RadioTempTree(copying: machines + "/laptop")
        let feed = try RfkillFeed(tree)
        try feed.write(Self.laptopAdds)
        let instance = try instance(tree.path)
        try instance.start()
        #expect(Self.lines(instance) == Self.laptopSnapshot)
        #expect(!instance.logs.contains { $0.message.contains("polling") })
        // A poll reads nothing: the tree's files are not the source.
        try tree.write(tree.path + Self.classDir + "rfkill0/soft", "1")
        try instance.advance(by: .seconds(10))
        #expect(instance.events.count == 4)

        // rfkill block wifi
        try feed.write(Self.event(0, type: Self.wlan, op: Self.change, soft: true))
        instance.waitForEvents(2, kind: "airplane_mode")
        #expect(Self.lines(instance).dropFirst(4) == [Self.radio(0, "phy0", "wlan", soft: true),
                                                      Self.airplane(false, radios: 3, blocked: 1)])

        // rfkill block bluetooth (CHANGE_ALL, then the kernel's CHANGE per device),
        // written in pieces: a FIFO may return part of an event.
        let all = Self.event(0, type: Self.bluetooth, op: Self.changeAll, soft: true)
            + Self.event(1, type: Self.bluetooth, op: Self.change, soft: true)
            + Self.event(2, type: Self.bluetooth, op: Self.change, soft: true)
        try feed.write(Array(all[0..<3]))
        usleep(50_000)
        try feed.write(Array(all[3...]))
        instance.waitForEvents(3, kind: "airplane_mode")
        #expect(Self.lines(instance).dropFirst(6) == [Self.radio(1, "hci0", "bluetooth", soft: true),
                                                      Self.radio(2, "tpacpi_bluetooth_sw", "bluetooth", soft: true),
                                                      Self.airplane(true, radios: 3, blocked: 3)])

        // An op this version does not know: skipped, said at debug.
        try feed.write(Self.event(0, type: Self.wlan, op: 9))
        // The USB adapter unplugged.
        try feed.write(Self.event(1, type: Self.bluetooth, op: Self.del, soft: true))
        instance.waitForEvents(4, kind: "airplane_mode")
        #expect(Self.lines(instance).dropFirst(9) == [Self.radio(1, "hci0", "bluetooth", soft: true, present: false),
                                                      Self.airplane(true, radios: 2, blocked: 2)])
        #expect(instance.logs.contains { $0.level == 0 && $0.message.contains("op 9") })

        // A new device the tree has no directory for: no name. Airplane mode ends.
        try feed.write(Self.event(7, type: 5, op: Self.add))
        instance.waitForEvents(5, kind: "airplane_mode")
        #expect(Self.lines(instance).dropFirst(11) == [Self.radio(7, nil, "wwan"), Self.airplane(false, radios: 3, blocked: 2)])
        #expect(instance.events.count == 13)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func aWriterThatGoesAwayIsWaitedFor() throws {
        let tree = try RadioTempTree(copying: machines + "/laptop")
        var feed: RfkillFeed? = try RfkillFeed(tree)
        try feed?.write(Self.laptopAdds)
        let instance = try instance(tree.path)
        try instance.start()
        #expect(instance.events.count == 4)

        feed = nil  // the last writer closes: end of file, the FIFO is opened again
        let deadline = Self.monotonic() + 10_000_000_000
        while !instance.logs.contains(where: { $0.message.contains("reopening") }), Self.monotonic() < deadline {
            usleep(10_000)
        }
        #expect(instance.logs.contains { $0.message.contains("reopening") })
        feed = try RfkillFeed(tree, create: false)
        try feed?.write(Self.event(2, type: Self.bluetooth, op: Self.change, hard: true))
        instance.waitForEvents(2, kind: "airplane_mode")
        #expect(Self.lines(instance).dropFirst(4) == [Self.radio(2, "tpacpi_bluetooth_sw", "bluetooth", hard: true),
                                                      Self.airplane(false, radios: 3, blocked: 1)])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func aDeviceWithoutRadiosIsAvailable() throws {
        // rfkill loaded, no radio yet (a desktop before its USB Bluetooth dongle).
        let tree = try RadioTempTree()
        let feed = try RfkillFeed(tree)
        let instance = try instance(tree.path)
        try instance.start()
        #expect(Self.lines(instance) == [Self.airplane(false, radios: 0, blocked: 0)])
        try feed.write(Self.event(0, type: Self.bluetooth, op: Self.add, soft: true))
        instance.waitForEvents(2, kind: "airplane_mode")
        #expect(Self.lines(instance).dropFirst() == [Self.radio(0, nil, "bluetooth", soft: true),
                                                     Self.airplane(true, radios: 1, blocked: 1)])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    static func monotonic() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    // MARK: this machine

    /// The real /sys and /dev: runs, or is unavailable; never a failure.
    @Test func realMachine() throws {
        let instance = try host().instance()
        do {
            try instance.start()
            try instance.stop()
        } catch {
            #expect(error.status == "unavailable", "\(error)")
        }
        #expect(instance.violations.isEmpty)
    }
}

/// A FIFO at `<tree>/dev/rfkill`, held open for writing (read-write, so that
/// opening does not wait for a reader, and the reader sees no end of file
/// until this is released).
private final class RfkillFeed {
    let fd: Int32

    init(_ tree: RadioTempTree, create: Bool = true) throws {
        let path = tree.path + "/dev/rfkill"
        if create {
            guard mkdir(tree.path + "/dev", 0o755) == 0 || errno == EEXIST, mkfifo(path, 0o600) == 0 else {
                throw RadioTempTree.Failure(description: "mkfifo \(path): \(String(cString: strerror(errno)))")
            }
        }
        fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw RadioTempTree.Failure(description: "open \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(fd) }

    func write(_ bytes: [UInt8]) throws {
        guard Glibc.write(fd, bytes, bytes.count) == bytes.count else {
            throw RadioTempTree.Failure(description: "write to the FIFO: \(String(cString: strerror(errno)))")
        }
    }
}

private typealias RadioTempTree = TempTree
