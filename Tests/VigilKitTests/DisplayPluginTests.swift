import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `display` plugin, built as libdisplay.so, against the sysfs fixtures in
/// Tests/Fixtures/sys/display (see the README there for the expected figures).
@Suite(.serialized) struct DisplayPluginTests {
    static let fixtures = repoRoot + "/Tests/Fixtures/sys/display"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libdisplay.so") }

    func backlight(_ instance: TestInstance, _ name: String) -> [TestEvent] {
        instance.events(kind: "backlight").filter { $0.string("name") == name }
    }

    func connector(_ instance: TestInstance, _ name: String) -> [TestEvent] {
        instance.events(kind: "connector").filter { $0.string("connector") == name }
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "display" && d.polled && d.defaultInterval == 5_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" } == ["sysfs:string:/sys"])
        #expect(d.events.map(\.kind) == ["backlight", "connector"])
        #expect(d.events[0].fields.map(\.name)
                == ["name", "type", "brightness", "raw_brightness", "actual_brightness", "max_brightness", "powered"])
        #expect(d.events[1].fields.map(\.name)
                == ["connector", "type", "connected", "status", "enabled", "preferred_mode", "mode_count", "dpms"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func laptopSnapshot() throws {
        let instance = try host().instance(options: "{ sysfs: \(machines)/laptop/sys }", interval: .seconds(5))
        try instance.start()
        let bl = try #require(backlight(instance, "intel_backlight").first)
        #expect(bl.string("type") == "raw")
        #expect(bl.double("brightness") == 9696.0 / 19393.0)
        #expect(bl.int("raw_brightness") == 9696)
        #expect(bl.int("actual_brightness") == 9696)
        #expect(bl.int("max_brightness") == 19393)
        #expect(bl.bool("powered") == true)

        let panel = try #require(connector(instance, "card0-eDP-1").first)
        #expect(panel.string("type") == "eDP")
        #expect(panel.bool("connected") == true)
        #expect(panel.string("status") == "connected")
        #expect(panel.bool("enabled") == true)
        #expect(panel.string("preferred_mode") == "1920x1200")
        #expect(panel.int("mode_count") == 10)
        #expect(panel.string("dpms") == "on")

        let hdmi = try #require(connector(instance, "card0-HDMI-A-1").first)
        #expect(hdmi.string("type") == "HDMI-A")
        #expect(hdmi.bool("connected") == false)
        #expect(hdmi.string("status") == "disconnected")
        #expect(hdmi.bool("enabled") == false)
        #expect(hdmi.string("preferred_mode") == nil)
        #expect(hdmi.int("mode_count") == 0)
        #expect(hdmi.string("dpms") == "off")

        #expect(connector(instance, "card0-DP-1").map { $0.string("type") } == ["DP"])
        // card0, renderD128 and version are not connectors.
        #expect(instance.events(kind: "connector").map { $0.string("connector")! }
                == ["card0-DP-1", "card0-HDMI-A-1", "card0-eDP-1"])
        #expect(instance.events.count == 4)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func brightnessChangesBeyondAndBelowMinChange() throws {
        let tree = try DisplayTempTree(copying: machines + "/laptop/sys")
        let bl = tree.path + "/class/backlight/intel_backlight/"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(5))
        try instance.start()
        #expect(instance.events.count == 4)

        try instance.advance(by: .seconds(10))  // nothing changed
        #expect(instance.events.count == 4)

        // 9696 → 9800: 0.0054 of the range, below min_change: not reported,
        // though the raw values moved.
        try tree.write(bl + "brightness", "9800")
        try tree.write(bl + "actual_brightness", "9800")
        try instance.advance(by: .seconds(5))
        #expect(instance.events.count == 4)

        // 9696 → 9900: 0.0105 since the last one reported.
        try tree.write(bl + "brightness", "9900")
        try tree.write(bl + "actual_brightness", "9900")
        try instance.advance(by: .seconds(5))
        let events = backlight(instance, "intel_backlight")
        #expect(events.map { $0.int("raw_brightness") } == [9696, 9900])
        #expect(events.last?.double("brightness") == 9900.0 / 19393.0)
        #expect(instance.events.count == 5)

        // Blanked: bl_power 4 (FB_BLANK_POWERDOWN), brightness unchanged.
        try tree.write(bl + "bl_power", "4")
        try instance.advance(by: .seconds(5))
        #expect(backlight(instance, "intel_backlight").map { $0.bool("powered") } == [true, true, false])

        // Full and the minimum: the fraction stays within 0…1.
        try tree.write(bl + "actual_brightness", "19393")
        try instance.advance(by: .seconds(5))
        #expect(backlight(instance, "intel_backlight").last?.double("brightness") == 1)
        try tree.write(bl + "actual_brightness", "0")
        try instance.advance(by: .seconds(5))
        #expect(backlight(instance, "intel_backlight").last?.double("brightness") == 0)
        #expect(instance.events.count == 8)

        // A restart sends the snapshot again.
        try instance.stop()
        try instance.start()
        #expect(instance.events.count == 8 + 4)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func hdmiPluggedThenUnplugged() throws {
        let tree = try DisplayTempTree(copying: machines + "/laptop/sys")
        let hdmi = tree.path + "/class/drm/card0-HDMI-A-1"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(5))
        try instance.start()
        #expect(connector(instance, "card0-HDMI-A-1").map { $0.bool("connected") } == [false])

        try DisplayTempTree.copy(Self.fixtures + "/docked/class/drm/card0-HDMI-A-1", to: hdmi)
        try instance.advance(by: .seconds(5))
        let plugged = try #require(connector(instance, "card0-HDMI-A-1").last)
        #expect(plugged.bool("connected") == true)
        #expect(plugged.string("status") == "connected")
        #expect(plugged.bool("enabled") == true)
        #expect(plugged.string("preferred_mode") == "2560x1440")
        #expect(plugged.int("mode_count") == 16)
        #expect(plugged.string("dpms") == "on")
        #expect(instance.events.count == 5)  // the panel and the backlight did not change

        // The monitor goes to sleep, then is unplugged.
        try tree.write(hdmi + "/dpms", "Off")
        try instance.advance(by: .seconds(5))
        #expect(connector(instance, "card0-HDMI-A-1").last?.string("dpms") == "off")
        try DisplayTempTree.copy(machines + "/laptop/sys/class/drm/card0-HDMI-A-1", to: hdmi)
        try instance.advance(by: .seconds(5))
        let unplugged = try #require(connector(instance, "card0-HDMI-A-1").last)
        #expect(unplugged.bool("connected") == false)
        #expect(unplugged.string("status") == "disconnected")
        #expect(unplugged.bool("enabled") == false)
        #expect(unplugged.string("preferred_mode") == nil)
        #expect(unplugged.int("mode_count") == 0)
        #expect(connector(instance, "card0-HDMI-A-1").count == 4)

        // A connector that goes away (a dock's MST connector): reported once as removed.
        try tree.remove(tree.path + "/class/drm/card0-DP-1")
        try instance.advance(by: .seconds(10))
        let removed = connector(instance, "card0-DP-1")
        #expect(removed.map { $0.string("status") } == ["disconnected", "removed"])
        #expect(removed.last?.bool("connected") == false)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutBacklightOrConnector() throws {
        for root in [Self.fixtures + "/empty", Self.fixtures + "/no-such-tree"] {
            let instance = try host().instance(options: "{ sysfs: \(root) }", interval: .seconds(5))
            do {
                try instance.start()
                Issue.record("start succeeded on \(root)")
            } catch {
                #expect(error.status == "unavailable")
                #expect(error.description.contains("no backlight in \(root)/class/backlight"))
                #expect(error.description.contains("no display connector in \(root)/class/drm"))
            }
            #expect(instance.events.isEmpty)
            #expect(instance.violations.isEmpty)
        }

        // Everything gone mid-run: unavailable from the poll, not a failure.
        let tree = try DisplayTempTree(copying: machines + "/laptop/sys")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(5))
        try instance.start()
        try tree.remove(tree.path + "/class")
        do {
            try instance.advance(by: .seconds(5))
            Issue.record("a poll without any display device succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func anUnreadableAttributeSkipsTheDevice() throws {
        let tree = try DisplayTempTree(copying: machines + "/laptop/sys")
        let bl = tree.path + "/class/backlight/intel_backlight/"
        let hdmi = tree.path + "/class/drm/card0-HDMI-A-1/"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(5))
        try instance.start()
        #expect(instance.events.count == 4)

        // A read that fails (EISDIR here, EIO or EAGAIN from a driver): the
        // backlight is skipped this poll, the others go on.
        try tree.remove(bl + "actual_brightness")
        #expect(mkdir(bl + "actual_brightness", 0o755) == 0)
        try tree.write(bl + "brightness", "19393")
        // A file listed, then gone when read (a dangling link reads as ENOENT,
        // as an unplugged device's attributes do).
        try tree.remove(hdmi + "modes")
        #expect(symlink(hdmi + "gone", hdmi + "modes") == 0)
        try tree.write(hdmi + "status", "connected")
        try instance.advance(by: .seconds(5))
        #expect(backlight(instance, "intel_backlight").count == 1)
        #expect(connector(instance, "card0-HDMI-A-1").count == 1)
        #expect(instance.logs.contains { $0.message.contains("skipping backlight intel_backlight") })
        #expect(instance.logs.contains { $0.message.contains("skipping connector card0-HDMI-A-1") })
        #expect(instance.events.count == 4)

        // Content that does not parse: skipped as well.
        try tree.remove(bl + "actual_brightness")
        try tree.write(bl + "actual_brightness", "bright")
        try instance.advance(by: .seconds(5))
        #expect(backlight(instance, "intel_backlight").count == 1)

        // Readable again: reported.
        try tree.remove(bl + "actual_brightness")
        try tree.write(bl + "actual_brightness", "19393")
        try tree.remove(hdmi + "modes")
        try tree.write(hdmi + "modes", "1920x1080")
        try instance.advance(by: .seconds(5))
        #expect(backlight(instance, "intel_backlight").last?.double("brightness") == 1)
        #expect(connector(instance, "card0-HDMI-A-1").last?.string("preferred_mode") == "1920x1080")
        #expect(instance.events.count == 6)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func refusesAnEmptySysfs() throws {
        do {
            _ = try host().instance(options: "{ sysfs: '' }")
            Issue.record("an empty sysfs accepted")
        } catch let error as PluginTestError {
            #expect(error.status == "invalid configuration")
            #expect(error.description.contains("options.sysfs: must not be empty"))
        }
    }
}

private typealias DisplayTempTree = TempTree
