import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `wifi` plugin's nl80211 path (SSID, BSSID, frequency), built as
/// libwifi.so and driven through its `nl80211_stream` option with recorded
/// streams of the kernel's generic netlink replies. The streams in
/// Tests/Fixtures/netlink/nl80211 are made by `NL80211Recording` below, byte
/// by byte from linux/netlink.h, genetlink.h and nl80211.h; a test checks that
/// the committed files are exactly what it makes (`VIGIL_RECORD_NL80211=1`
/// rewrites them). The sysfs and procfs trees are made here too: one
/// associated station interface, wlp2s0.
@Suite(.serialized) struct WifiNl80211Tests {
    static let streams = repoRoot + "/Tests/Fixtures/netlink/nl80211"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libwifi.so") }

    func link(_ instance: TestInstance) -> [TestEvent] {
        instance.events(kind: "link").filter { $0.string("interface") == "wlp2s0" }
    }

    /// The fields of an event as name=value text, in order.
    static func rendered(_ event: TestEvent) -> [String] {
        event.fields.map { field in
            switch field.value {
            case .string(let s): "\(field.name)=\(s)"
            case .int(let n): "\(field.name)=\(n)"
            case .double(let d): "\(field.name)=\(d)"
            case .bool(let b): "\(field.name)=\(b)"
            }
        }
    }

    static let base = ["interface=wlp2s0", "address=a4:c3:f0:85:1d:2e", "operstate=up", "connected=true",
                       "quality=\(58.0 / 70)", "signal_dbm=-52", "discarded=17", "missed_beacons=7"]

    static func stream(_ names: String...) throws -> [UInt8] {
        try names.flatMap { try TempTree.read(streams + "/" + $0) }
    }

    // MARK: the recordings

    @Test func recordingsAreWhatTheGeneratorMakes() throws {
        let record = getenv("VIGIL_RECORD_NL80211") != nil
        for (name, bytes) in NL80211Recording.all {
            if record { try TempTree.write(Self.streams + "/" + name, bytes: bytes) }
            let committed = try TempTree.read(Self.streams + "/" + name)
            #expect(committed == bytes, "\(name) differs from what NL80211Recording makes")
        }
    }

    @Test func recordingsFollowTheABI() throws {
        // Every message's nlmsg_len is within the file and 4-aligned positions chain to the end,
        // except in truncated.bin, whose last message claims more than is left.
        for (name, bytes) in NL80211Recording.all {
            var offset = 0
            var lengths: [Int] = []
            while offset + 16 <= bytes.count {
                let length = Int(bytes[offset]) | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2]) << 16
                lengths.append(length)
                offset += (length + 3) & ~3
            }
            if name == "truncated.bin" { #expect(offset > bytes.count) } else { #expect(offset == bytes.count, "\(name)") }
            #expect(!lengths.isEmpty)
        }
    }

    // MARK: the plugin

    @Test func describesTheNewFieldsAndOptions() throws {
        let d = try host().description
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["procfs:string:/proc", "sysfs:string:/sys", "quality_max:int:70", "identifiers:bool:true",
                    "nl80211_stream:string:-"])
        let fields = d.events[0].fields
        #expect(fields.map(\.name).suffix(3) == ["ssid", "bssid", "frequency"])
        #expect(fields.map(\.unit).suffix(3) == ["", "", "MHz"])
        #expect(fields.suffix(3).allSatisfy { !$0.doc.isEmpty })
        #expect(d.events[0].doc.contains("nl80211"))
    }

    @Test func associatedStation() throws {
        let tree = try StationTree()
        try tree.stream(Self.stream("family.bin", "interface-dump.bin", "scan-dump.bin"))
        let instance = try host().instance(options: tree.options(), interval: .seconds(5))
        try instance.start()
        let e = try #require(link(instance).first)
        #expect(Self.rendered(e) == Self.base + ["ssid=Café Lab", "bssid=3c:37:86:5a:0e:41", "frequency=5180"])
        // Each poll is a new session on the same replies: nothing changed.
        try instance.advance(by: .seconds(10))
        #expect(link(instance).count == 1)
        #expect(!instance.logs.contains { $0.message.contains("nl80211") })
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func roamingToAnotherAccessPoint() throws {
        let tree = try StationTree()
        try tree.stream(Self.stream("family.bin", "interface-dump.bin", "scan-dump.bin"))
        let instance = try host().instance(options: tree.options(), interval: .seconds(5))
        try instance.start()
        // Now associated with the 2.4 GHz radio of the same network.
        try tree.stream(Self.stream("family.bin") + NL80211Recording.interfaceDump(frequency: 2437)
                        + NL80211Recording.scanDump(associatedIndex: 0))
        try instance.advance(by: .seconds(5))
        let events = link(instance)
        #expect(events.count == 2)
        #expect(events.last.map(Self.rendered) == Self.base + ["ssid=Café Lab", "bssid=3c:37:86:5a:0e:40", "frequency=2437"])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func identifiersOff() throws {
        let tree = try StationTree()
        // The interface has its frequency, so without identifiers no scan dump is asked for:
        // the stream has no reply to one, and a request for it would fail the session.
        try tree.stream(Self.stream("family.bin", "interface-dump.bin"))
        let instance = try host().instance(options: tree.options(", identifiers: false"), interval: .seconds(5))
        try instance.start()
        let e = try #require(link(instance).first)
        #expect(Self.rendered(e) == Self.base + ["frequency=5180"])
        #expect(!instance.logs.contains { $0.message.contains("nl80211") })
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func noNl80211Family() throws {
        // CTRL_CMD_GETFAMILY answered with NLMSG_ERROR −ENOENT: no cfg80211 loaded, as on this machine.
        let tree = try StationTree()
        try tree.stream(Self.stream("family-enoent.bin"))
        let instance = try host().instance(options: tree.options(), interval: .seconds(5))
        try instance.start()
        try instance.advance(by: .seconds(10))
        #expect(link(instance).map(Self.rendered) == [Self.base])
        let notes = instance.logs.filter { $0.message.contains("no nl80211 family") }
        #expect(notes.count == 1)  // once, not every poll
        #expect(notes.allSatisfy { $0.level == 0 })  // debug
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func truncatedReplies() throws {
        // From the start: nothing from nl80211, the rest as before, no crash.
        let tree = try StationTree()
        try tree.stream(Self.stream("family.bin", "truncated.bin"))
        let instance = try host().instance(options: tree.options(), interval: .seconds(5))
        try instance.start()
        #expect(link(instance).map(Self.rendered) == [Self.base])
        #expect(instance.logs.contains { $0.level == 0 && $0.message.contains("truncated") })
        try instance.stop()

        // After a good session: the last values are kept, so the fields do not flap.
        try tree.stream(Self.stream("family.bin", "interface-dump.bin", "scan-dump.bin"))
        let again = try host().instance(options: tree.options(), interval: .seconds(5))
        try again.start()
        try tree.stream(Self.stream("family.bin", "truncated.bin"))
        try again.advance(by: .seconds(5))
        try tree.stream(Self.stream("family.bin", "interface-dump.bin"))  // cut short before the scan reply
        try again.advance(by: .seconds(5))
        #expect(link(again).count == 1)
        #expect(link(again).first.map(Self.rendered) == Self.base + ["ssid=Café Lab", "bssid=3c:37:86:5a:0e:41", "frequency=5180"])
        #expect(again.logs.contains { $0.message.contains("ended before NLMSG_DONE") })
        try again.stop()
        #expect(instance.violations.isEmpty && again.violations.isEmpty)
    }

    @Test func ssidFromTheBSSAndBytesThatAreNotUTF8() throws {
        let tree = try StationTree()
        // No NL80211_ATTR_SSID nor WIPHY_FREQ on the interface: the SSID element and frequency of the BSS.
        try tree.stream(Self.stream("family.bin") + NL80211Recording.interfaceDump(ssid: nil, frequency: nil)
                        + NL80211Recording.scanDump(ssid: [0x48, 0x6f, 0x6d, 0x65, 0xff, 0x5c, 0x0a]))
        let instance = try host().instance(options: tree.options(), interval: .seconds(5))
        try instance.start()
        let e = try #require(link(instance).first)
        #expect(Self.rendered(e) == Self.base + ["ssid=Home\\xff\\\\\\x0a", "bssid=3c:37:86:5a:0e:41", "frequency=5180"])
        try instance.stop()

        // Valid UTF-8 with a control character: only that is escaped.
        try tree.stream(Self.stream("family.bin") + NL80211Recording.interfaceDump(ssid: Array("Gäste\tNetz".utf8))
                        + NL80211Recording.scanDump())
        let utf8 = try host().instance(options: tree.options(), interval: .seconds(5))
        try utf8.start()
        #expect(link(utf8).first?.string("ssid") == "Gäste\\x09Netz")
        try utf8.stop()
        #expect(instance.violations.isEmpty && utf8.violations.isEmpty)
    }

    @Test func netlinkFraming() throws {
        let tree = try StationTree()
        // A stale reply to an earlier request (seq 99) and an NLMSG_NOOP before the real ones are
        // skipped; a BSS nest with NLA_F_NESTED set reads the same; the last message is unpadded.
        var bytes = NL80211Recording.message(type: NL80211Recording.family, flags: 2, seq: 99,
                                             payload: NL80211Recording.genl(7, []))
        bytes += NL80211Recording.message(type: 1, flags: 0, seq: 1, payload: [])
        bytes += try Self.stream("family.bin", "interface-dump.bin")
        bytes += NL80211Recording.scanDump(nestedFlag: true)
        let trimmed = NL80211Recording.message(type: 3, flags: 2, seq: 3, payload: [0, 0, 0, 0, 0xaa]).prefix(21)
        bytes.removeLast(20)  // the scan dump's NLMSG_DONE, replaced by an unpadded one
        bytes += Array(trimmed)
        try tree.stream(bytes)
        let instance = try host().instance(options: tree.options(), interval: .seconds(5))
        try instance.start()
        #expect(link(instance).first.map(Self.rendered) == Self.base + ["ssid=Café Lab", "bssid=3c:37:86:5a:0e:41", "frequency=5180"])
        try instance.stop()

        // A dump that fails part-way (NLMSG_DONE carrying −EBUSY), an attribute whose length
        // runs past its message, a dump that changed while read, a message shorter than its
        // header: errors, logged, no fields.
        let failing: [(String, [UInt8])] = [
            ("errno 16", try Self.stream("family.bin", "interface-dump.bin")
                + NL80211Recording.message(type: 3, flags: 2, seq: 3, payload: NL80211Recording.le32(UInt32(bitPattern: -EBUSY)))),
            ("an attribute at byte", try Self.stream("family.bin")
                + NL80211Recording.message(type: NL80211Recording.family, flags: 2, seq: 2,
                                           payload: NL80211Recording.genl(7, [0x40, 0x00, 0x03, 0x00, 3, 0, 0, 0]))
                + NL80211Recording.done(seq: 2)),
            ("NLM_F_DUMP_INTR", try Self.stream("family.bin")
                + NL80211Recording.message(type: NL80211Recording.family, flags: 0x12, seq: 2,
                                           payload: NL80211Recording.genl(7, NL80211Recording.attr(3, NL80211Recording.le32(3))))
                + NL80211Recording.done(seq: 2)),
            ("shorter than its header", try Self.stream("family.bin") + [8, 0, 0, 0, 3, 0, 2, 0, 2, 0, 0, 0, 0, 0, 0, 0]),
        ]
        for (message, stream) in failing {
            try tree.stream(stream)
            let failed = try host().instance(options: tree.options(), interval: .seconds(5))
            try failed.start()
            #expect(link(failed).map(Self.rendered) == [Self.base], "\(message)")
            #expect(failed.logs.contains { $0.message.contains(message) }, "\(message): \(failed.logs.map(\.message))")
            try failed.stop()
            #expect(failed.violations.isEmpty)
        }
    }

    @Test func onlyWhileConnectedAndNotForFixtureRoots() throws {
        let tree = try StationTree()
        // Not associated (no line in net/wireless): no session, so even garbage is never read.
        try tree.wireless(nil)
        try tree.stream([1, 2, 3])
        let idle = try host().instance(options: tree.options(), interval: .seconds(5))
        try idle.start()
        #expect(link(idle).first?.bool("connected") == false)
        #expect(link(idle).first?.string("ssid") == nil && !idle.logs.contains { $0.message.contains("nl80211") })
        try idle.stop()

        // Fixture roots without a stream: nl80211 is not asked (it would describe this machine).
        try tree.wireless(StationTree.line)
        let fixtures = try host().instance(options: "{ procfs: \(tree.proc), sysfs: \(tree.sys) }", interval: .seconds(5))
        try fixtures.start()
        #expect(link(fixtures).map(Self.rendered) == [Self.base])
        #expect(!fixtures.logs.contains { $0.message.contains("nl80211") })
        try fixtures.stop()

        // An unreadable stream file: logged, the rest as before.
        let missing = try host().instance(options: "{ procfs: \(tree.proc), sysfs: \(tree.sys), nl80211_stream: \(tree.path)/none.bin }")
        try missing.start()
        #expect(link(missing).map(Self.rendered) == [Self.base])
        #expect(missing.logs.contains { $0.message.contains("none.bin") })
        try missing.stop()
        #expect(idle.violations.isEmpty && fixtures.violations.isEmpty && missing.violations.isEmpty)
    }

    @Test func realRootsOnThisMachine() throws {
        // The real /sys and /proc: runs, or is unavailable without a wireless interface; never fails otherwise.
        let instance = try host().instance(options: "{}", interval: .seconds(5))
        do {
            try instance.start()
            try instance.advance(by: .seconds(5))
            try instance.stop()
        } catch {
            #expect(error.status == "unavailable")
        }
        #expect(instance.violations.isEmpty)
    }

    @Test func refusesARelativeStreamPath() throws {
        do {
            _ = try host().instance(options: "{ nl80211_stream: streams/family.bin }")
            Issue.record("a relative path was accepted")
        } catch let error as PluginTestError {
            #expect(error.status == "invalid configuration")
            #expect(error.description.contains("options.nl80211_stream: must be an absolute path"))
        }
    }
}

/// A sysfs and procfs tree with one associated Wi-Fi interface, and a place for the stream.
private final class StationTree: TempTree {
    static let line = "wlp2s0: 0000   58.  -52.  -256        0      0      0     14      3        7"
    var streamPath: String { path + "/nl80211.bin" }

    override init() throws {
        try super.init()
        for dir in [sys, sys + "/class", sys + "/class/net", sys + "/class/net/wlp2s0", sys + "/class/net/wlp2s0/wireless",
                    proc, proc + "/net"] {
            guard mkdir(dir, 0o755) == 0 else { throw Failure(description: "mkdir \(dir) failed") }
        }
        try write(sys + "/class/net/wlp2s0/address", "a4:c3:f0:85:1d:2e")
        try write(sys + "/class/net/wlp2s0/operstate", "up")
        try wireless(Self.line)
    }

    func wireless(_ line: String?) throws {
        let header = """
            Inter-| sta-|   Quality        |   Discarded packets               | Missed | WE
             face | tus | link level noise |  nwid  crypt   frag  retry   misc | beacon | 22

            """
        try Self.write(proc + "/net/wireless", bytes: Array((header + (line.map { $0 + "\n" } ?? "")).utf8))
    }

    func stream(_ bytes: [UInt8]) throws { try Self.write(streamPath, bytes: bytes) }

    func options(_ extra: String = "") -> String {
        "{ procfs: \(proc), sysfs: \(sys), nl80211_stream: \(streamPath)\(extra) }"
    }
}

/// The recorded streams: what the kernel sends a client that opened a
/// NETLINK_GENERIC socket (port id 0x3a1c here) and asked, in turn, with
/// sequence numbers 1, 2 and 3:
///
/// 1. CTRL_CMD_GETFAMILY "nl80211" → CTRL_CMD_NEWFAMILY (not multipart:
///    the reply is that one message), or NLMSG_ERROR −ENOENT echoing the
///    request when cfg80211 is not loaded;
/// 2. NL80211_CMD_GET_INTERFACE dump → one NL80211_CMD_NEW_INTERFACE per
///    interface (NLM_F_MULTI), then NLMSG_DONE;
/// 3. NL80211_CMD_GET_SCAN dump for ifindex 3 → one
///    NL80211_CMD_NEW_SCAN_RESULTS per BSS, then NLMSG_DONE.
///
/// Written from the headers, independently of the plugin's own encoder.
enum NL80211Recording {
    static let family: UInt16 = 0x1c  // the id the controller gave nl80211 in this recording
    static let port: UInt32 = 0x3a1c

    static var all: [(String, [UInt8])] {
        [("family.bin", familyReply()), ("family-enoent.bin", familyMissing()), ("interface-dump.bin", interfaceDump()),
         ("scan-dump.bin", scanDump()), ("truncated.bin", truncated())]
    }

    static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xff), UInt8(v >> 8)] }
    static func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * $0)) & 0xff) } }
    static func le64(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8((v >> (8 * UInt64($0))) & 0xff) } }
    static func pad(_ b: [UInt8]) -> [UInt8] { b + [UInt8](repeating: 0, count: (4 - b.count % 4) % 4) }

    /// struct nlmsghdr, then the payload, padded to 4.
    static func message(type: UInt16, flags: UInt16, seq: UInt32, pid: UInt32 = port, payload: [UInt8]) -> [UInt8] {
        pad(le32(UInt32(16 + payload.count)) + le16(type) + le16(flags) + le32(seq) + le32(pid) + payload)
    }

    /// struct genlmsghdr (cmd, version, reserved), then attributes.
    static func genl(_ command: UInt8, version: UInt8 = 1, _ attributes: [UInt8]) -> [UInt8] { [command, version, 0, 0] + attributes }

    /// struct nlattr, then the value, padded to 4.
    static func attr(_ type: UInt16, _ value: [UInt8]) -> [UInt8] { pad(le16(UInt16(4 + value.count)) + le16(type) + value) }
    static func string(_ type: UInt16, _ s: String) -> [UInt8] { attr(type, Array(s.utf8) + [0]) }

    static func done(seq: UInt32) -> [UInt8] { message(type: 3, flags: 2, seq: seq, payload: le32(0)) }

    static func familyRequest() -> [UInt8] {
        message(type: 0x10, flags: 1, seq: 1, pid: 0, payload: genl(3, string(2, "nl80211")))
    }

    static func familyReply() -> [UInt8] {
        // CTRL_ATTR_OPS: nested ops (CTRL_ATTR_OP_ID 1, CTRL_ATTR_OP_FLAGS 2), a few of nl80211's.
        let ops = [1, 5, 32].enumerated().flatMap { i, op in
            attr(UInt16(i + 1), attr(1, le32(UInt32(op))) + attr(2, le32(0x0e)))
        }
        // CTRL_ATTR_MCAST_GROUPS: nested groups (CTRL_ATTR_MCAST_GRP_NAME 1, CTRL_ATTR_MCAST_GRP_ID 2).
        let groups = [("config", 5), ("scan", 6), ("regulatory", 7), ("mlme", 8)].enumerated().flatMap { i, g in
            attr(UInt16(i + 1), string(1, g.0) + attr(2, le32(UInt32(g.1))))
        }
        return message(type: 0x10, flags: 0, seq: 1, payload: genl(1, version: 2, string(2, "nl80211") + attr(1, le16(family))
            + attr(3, le32(1)) + attr(4, le32(0)) + attr(5, le32(330)) + attr(6, ops) + attr(7, groups)))
    }

    /// NLMSG_ERROR: struct nlmsgerr { int error; struct nlmsghdr msg; } with the request echoed.
    static func familyMissing() -> [UInt8] {
        message(type: 2, flags: 0, seq: 1, payload: le32(UInt32(bitPattern: -2)) + familyRequest())
    }

    static let defaultSSID = Array("Café Lab".utf8)

    static func interfaceDump(ssid: [UInt8]? = defaultSSID, frequency: UInt32? = 5180) -> [UInt8] {
        var a = attr(3, le32(3)) + string(4, "wlp2s0") + attr(5, le32(2)) + attr(1, le32(0)) + attr(153, le64(1))
            + attr(6, [0xa4, 0xc3, 0xf0, 0x85, 0x1d, 0x2e]) + attr(46, le32(7)) + attr(83, [0])
        if let frequency {
            // NL80211_ATTR_CHANNEL_WIDTH: 80 MHz (3) on 5 GHz, 20 MHz (1) on 2.4 GHz; CENTER_FREQ1 accordingly.
            let wide = frequency > 5000
            a += attr(38, le32(frequency)) + attr(159, le32(wide ? 3 : 1)) + attr(160, le32(wide ? frequency + 30 : frequency))
        }
        a += attr(98, le32(2200))
        if let ssid { a += attr(52, ssid) }
        return message(type: family, flags: 2, seq: 2, payload: genl(7, a)) + done(seq: 2)
    }

    /// Two BSSes of one network, on 2.4 and 5 GHz; the one at `associatedIndex` carries NL80211_BSS_STATUS associated.
    static func scanDump(ssid: [UInt8] = defaultSSID, associatedIndex: Int = 1, nestedFlag: Bool = false) -> [UInt8] {
        let radios: [([UInt8], UInt32, Int32)] = [([0x3c, 0x37, 0x86, 0x5a, 0x0e, 0x40], 2437, -6100),
                                                  ([0x3c, 0x37, 0x86, 0x5a, 0x0e, 0x41], 5180, -5200)]
        var bytes: [UInt8] = []
        for (i, (bssid, frequency, signal)) in radios.enumerated() {
            // Information elements: SSID (0), supported rates (1), DS parameter set (3).
            let elements: [UInt8] = [0, UInt8(ssid.count)] + ssid + [1, 4, 0x8c, 0x12, 0x98, 0x24] + [3, 1, frequency == 2437 ? 6 : 36]
            var bss = attr(1, bssid) + attr(2, le32(frequency)) + attr(3, le64(0x1234_5678)) + attr(4, le16(100))
                + attr(5, le16(0x1411)) + attr(6, elements) + attr(7, le32(UInt32(bitPattern: signal)))
                + attr(10, le32(120)) + attr(15, le64(981_000_000_000))
            if i == associatedIndex { bss += attr(9, le32(1)) }
            let nest = attr(47 | (nestedFlag ? 0x8000 : 0), bss)
            bytes += message(type: family, flags: 2, seq: 3,
                             payload: genl(34, attr(46, le32(42)) + attr(3, le32(3)) + attr(153, le64(1)) + nest))
        }
        return bytes + done(seq: 3)
    }

    /// The interface dump cut 24 bytes into its NEW_INTERFACE message: a length that runs past the end.
    static func truncated() -> [UInt8] { Array(interfaceDump().prefix(16 + 24)) }
}
