import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `wifi` plugin, built as libwifi.so, against the laptop machine
/// (Tests/Fixtures/machines/laptop) and the fixtures in Tests/Fixtures/proc/wifi
/// (net/wireless) and Tests/Fixtures/sys/wifi (class/net): the laptop (a cfg80211 driver: wlp2s0 quality 58/70, level −52 dBm, noise −256,
/// discarded 0+0+0+14+3, 7 missed beacons), `positive` (an older driver that shows
/// levels as unsigned bytes: quality 91/100, level 217 → −39, noise 161 → −95) and
/// `ethernet` (no wireless interface: a header-only net/wireless, enp0s31f6 and lo).
@Suite(.serialized) struct WifiPluginTests {
    static let procFixtures = repoRoot + "/Tests/Fixtures/proc/wifi"
    static let sysFixtures = repoRoot + "/Tests/Fixtures/sys/wifi"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libwifi.so") }

    func options(_ proc: String, _ sys: String, _ extra: String = "") -> String {
        "{ procfs: \(proc), sysfs: \(sys)\(extra) }"
    }

    func link(_ instance: TestInstance, _ name: String = "wlp2s0") -> [TestEvent] {
        instance.events(kind: "link").filter { $0.string("interface") == name }
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "wifi" && d.polled && d.defaultInterval == 5_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["procfs:string:/proc", "sysfs:string:/sys", "quality_max:int:70", "identifiers:bool:true",
                    "nl80211_stream:string:-"])
        #expect(d.events.map(\.kind) == ["link"])
        let fields = d.events[0].fields
        #expect(fields.map(\.name) == ["interface", "address", "operstate", "connected", "quality", "signal_dbm",
                                       "noise_dbm", "discarded", "missed_beacons", "ssid", "bssid", "frequency"])
        #expect(fields.map(\.unit) == ["", "", "", "", "ratio", "dBm", "dBm", "packets", "beacons", "", "", "MHz"])
        #expect(d.events[0].doc.contains("SSID"))
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func laptopSnapshot() throws {
        let instance = try host().instance(
            options: options(machines + "/laptop/proc", machines + "/laptop/sys"), interval: .seconds(5))
        try instance.start()
        #expect(instance.events.count == 1)  // lo is not wireless
        let e = try #require(link(instance).first)
        #expect(e.string("address") == "a4:c3:f0:85:1d:2e")
        #expect(e.string("operstate") == "up")
        #expect(e.bool("connected") == true)
        #expect(e.double("quality") == 58.0 / 70)
        #expect(e.int("signal_dbm") == -52)
        #expect(e.int("noise_dbm") == nil)  // −256: not measured
        #expect(e.int("discarded") == 17)
        #expect(e.int("missed_beacons") == 7)
        try instance.advance(by: .seconds(20))
        #expect(instance.events.count == 1)  // nothing changed
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func positiveLevelsAreUnsignedBytes() throws {
        let instance = try host().instance(
            options: options(Self.procFixtures + "/positive", Self.sysFixtures + "/positive", ", quality_max: 100"),
            interval: .seconds(5))
        try instance.start()
        let e = try #require(link(instance).first)
        #expect(e.double("quality") == 0.91)
        #expect(e.int("signal_dbm") == -39)  // 217 − 256
        #expect(e.int("noise_dbm") == -95)   // 161 − 256
        #expect(e.int("discarded") == 7)
        #expect(e.bool("connected") == true)
        try instance.stop()
        #expect(instance.violations.isEmpty)

        // With the default scale (70), a quality of 91 is clamped to 1.
        let clamped = try host().instance(options: options(Self.procFixtures + "/positive", Self.sysFixtures + "/positive"))
        try clamped.start()
        #expect(link(clamped).first?.double("quality") == 1)
        try clamped.stop()
    }

    @Test func minimumChanges() throws {
        let tree = try WifiTempTree(copying: machines + "/laptop/proc", machines + "/laptop/sys")
        let instance = try host().instance(options: options(tree.proc, tree.sys), interval: .seconds(5))
        try instance.start()
        #expect(link(instance).count == 1)

        // Quality 58 → 60 (0.029) and signal −52 → −50 (2 dB), counters +50: below every minimum.
        try tree.wireless("wlp2s0: 0000   60.  -50.  -256        0      0      0     60      7        7")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).count == 1)

        // Signal −52 → −49 (3 dB from the last event passed on): an event.
        try tree.wireless("wlp2s0: 0000   60.  -49.  -256        0      0      0     60      7        7")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).map { $0.int("signal_dbm") } == [-52, -49])
        #expect(link(instance).last?.double("quality") == 60.0 / 70)
        #expect(link(instance).last?.int("discarded") == 67)

        // Quality 60 → 64 (0.057): an event; the noise appears: an event too.
        try tree.wireless("wlp2s0: 0000   64   -49    -92        0      0      0     60      7        7")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).count == 3)
        #expect(link(instance).last?.double("quality") == 64.0 / 70)
        #expect(link(instance).last?.int("noise_dbm") == -92)

        // 100 more missed beacons: an event.
        try tree.wireless("wlp2s0: 0000   64   -49    -92        0      0      0     60      7      107")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).map { $0.int("missed_beacons") } == [7, 7, 7, 107])

        // A restart sends the snapshot again.
        try instance.stop()
        try instance.start()
        #expect(link(instance).count == 5)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func disconnectionAndReconnection() throws {
        let tree = try WifiTempTree(copying: machines + "/laptop/proc", machines + "/laptop/sys")
        let iface = tree.sys + "/class/net/wlp2s0"
        let instance = try host().instance(options: options(tree.proc, tree.sys), interval: .seconds(5))
        try instance.start()

        // operstate down (the line may linger a moment): not connected, no link figures.
        try tree.write(iface + "/operstate", "down")
        try instance.advance(by: .seconds(5))
        let down = try #require(link(instance).last)
        #expect(link(instance).count == 2)
        #expect(down.string("operstate") == "down" && down.bool("connected") == false)
        #expect(down.double("quality") == nil && down.int("signal_dbm") == nil && down.int("discarded") == nil)
        #expect(down.string("address") == "a4:c3:f0:85:1d:2e")

        // The line gone while operstate says up: not connected either, and the
        // interface is still found through wireless/.
        try tree.write(iface + "/operstate", "up")
        try tree.wireless(nil)
        try instance.advance(by: .seconds(5))
        #expect(link(instance).map { $0.bool("connected") } == [true, false, false])
        #expect(link(instance).last?.string("operstate") == "up")

        // Associated again.
        try tree.wireless("wlp2s0: 0000   58.  -52.  -256        0      0      0     14      3        7")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).map { $0.bool("connected") } == [true, false, false, true])
        #expect(link(instance).last?.int("signal_dbm") == -52)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func notAssociatedAtStart() throws {
        // A Wi-Fi interface with no line in net/wireless (header only): available, not connected.
        let instance = try host().instance(
            options: options(Self.procFixtures + "/ethernet", machines + "/laptop/sys"), interval: .seconds(5))
        try instance.start()
        let e = try #require(link(instance).first)
        #expect(e.bool("connected") == false && e.string("operstate") == "up" && e.double("quality") == nil)
        try instance.stop()

        // No net/wireless at all (a kernel without wireless extensions): operstate alone tells.
        let noWext = try host().instance(
            options: options(Self.procFixtures + "/no-such-tree", machines + "/laptop/sys"), interval: .seconds(5))
        try noWext.start()
        #expect(link(noWext).first?.bool("connected") == true)
        #expect(link(noWext).first?.double("quality") == nil)
        try noWext.stop()
        #expect(instance.violations.isEmpty && noWext.violations.isEmpty)
    }

    @Test func anInterfaceVanishing() throws {
        let tree = try WifiTempTree(copying: machines + "/laptop/proc", machines + "/laptop/sys")
        let iface = tree.sys + "/class/net/wlp2s0"
        let instance = try host().instance(options: options(tree.proc, tree.sys), interval: .seconds(5))
        try instance.start()

        // An attribute that fails to read (EISDIR here, EIO from a driver): skipped this poll.
        try tree.remove(iface + "/operstate")
        #expect(mkdir(iface + "/operstate", 0o755) == 0)
        try tree.wireless("wlp2s0: 0000   20.  -80.  -256        0      0      0     14      3        7")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).count == 1)
        #expect(instance.logs.contains { $0.message.contains("skipping wlp2s0") })
        try tree.remove(iface + "/operstate")
        try tree.write(iface + "/operstate", "up")

        // The adapter unplugged: the directory and the line gone; reported once, then unavailable.
        try tree.remove(iface)
        try tree.wireless(nil)
        do {
            try instance.advance(by: .seconds(5))
            Issue.record("a poll without a wireless interface succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        let gone = try #require(link(instance).last)
        #expect(link(instance).count == 2)
        #expect(gone.bool("connected") == false && gone.string("operstate") == nil && gone.string("address") == nil)

        // Plugged back in: a fresh first event.
        try WifiTempTree.copy(machines + "/laptop/sys/class/net/wlp2s0", to: iface)
        try tree.wireless("wlp2s0: 0000   58.  -52.  -256        0      0      0     14      3        7")
        try instance.advance(by: .seconds(5))
        #expect(link(instance).count == 3)
        #expect(link(instance).last?.bool("connected") == true)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutAWirelessInterface() throws {
        let cases = [(Self.procFixtures + "/ethernet", Self.sysFixtures + "/ethernet"),
                     (Self.procFixtures + "/no-such-tree", Self.sysFixtures + "/no-such-tree")]
        for (proc, sys) in cases {
            let instance = try host().instance(options: options(proc, sys), interval: .seconds(5))
            do {
                try instance.start()
                Issue.record("start succeeded on \(sys)")
            } catch {
                #expect(error.status == "unavailable")
                #expect(error.description.contains("no wireless interface in \(sys)/class/net or \(proc)/net/wireless"))
            }
            #expect(instance.events.isEmpty)
            #expect(instance.violations.isEmpty)
        }
    }

    @Test func refusesBadOptions() throws {
        for (given, message) in [(options(machines + "/laptop/proc", machines + "/laptop/sys", ", quality_max: 0"),
                                  "options.quality_max: must be from 1 to 255"),
                                 (options("''", machines + "/laptop/sys"), "options.procfs: must not be empty")] {
            do {
                _ = try host().instance(options: given)
                Issue.record("\(given) accepted")
            } catch let error as PluginTestError {
                #expect(error.status == "invalid configuration")
                #expect(error.description.contains(message))
            }
        }
    }
}

/// Copies of a procfs and a sysfs fixture tree in a fresh temporary directory, removed at the end.
private final class WifiTempTree: TempTree {
    static let header = """
        Inter-| sta-|   Quality        |   Discarded packets               | Missed | WE
         face | tus | link level noise |  nwid  crypt   frag  retry   misc | beacon | 22

        """

    init(copying procSource: String, _ sysSource: String) throws {
        try super.init()
        try Self.copy(procSource, to: proc)
        try Self.copy(sysSource, to: sys)
    }

    /// Rewrites net/wireless with the two header lines and `line` (none: header only).
    func wireless(_ line: String?) throws {
        try Self.write(proc + "/net/wireless", bytes: Array((Self.header + (line.map { $0 + "\n" } ?? "")).utf8))
    }
}
