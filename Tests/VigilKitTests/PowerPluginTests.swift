import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `power` plugin, built as libpower.so, against the sysfs fixtures in
/// Tests/Fixtures/sys/power (see the README there for the expected figures).
@Suite(.serialized) struct PowerPluginTests {
    static let fixtures = repoRoot + "/Tests/Fixtures/sys/power"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libpower.so") }

    func battery(_ instance: TestInstance, _ name: String) -> [TestEvent] {
        instance.events(kind: "battery").filter { $0.string("name") == name }
    }

    func supply(_ instance: TestInstance, _ name: String) -> [TestEvent] {
        instance.events(kind: "supply").filter { $0.string("name") == name }
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "power" && d.polled && d.defaultInterval == 10_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["sysfs:string:/sys", "low_level:int:10", "peripherals:bool:false", "uevent_socket:string:-", "attributes:bool:false"])
        #expect(d.events.map(\.kind) == ["battery", "supply", "profile", "attributes"])
        let battery = d.events[0].fields
        #expect(battery.map(\.name) == ["name", "present", "level", "state", "low", "time_to_empty", "time_to_full"])
        #expect(battery.map(\.unit) == ["", "", "percent", "", "", "seconds", "seconds"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func laptopSnapshot() throws {
        let instance = try host().instance(options: "{ sysfs: \(machines)/laptop/sys }", interval: .seconds(10))
        try instance.start()
        let bat = battery(instance, "BAT0")
        #expect(bat.count == 1)
        let b = try #require(bat.first)
        #expect(b.bool("present") == true)
        #expect(b.double("level") == 87)
        #expect(b.string("state") == "discharging")
        #expect(b.bool("low") == false)
        #expect(b.int("time_to_empty") == 16516)  // round(3600 × 45310000 µWh / 9876000 µW)
        #expect(b.int("time_to_full") == nil)
        #expect(b.severity == .info)
        #expect(supply(instance, "AC").map { "\($0.string("type")!):\($0.bool("online")!)" } == ["Mains:false"])
        #expect(supply(instance, "ucsi-source-psy-USBC000:001").map { "\($0.string("type")!):\($0.bool("online")!)" }
                == ["USB:false"])
        let profile = instance.events(kind: "profile")
        #expect(profile.map { "\($0.string("profile")!):\($0.bool("low_power")!)" } == ["balanced:false"])
        #expect(instance.events.count == 4)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func batteryWithChargeAndNoCapacity() throws {
        let instance = try host().instance(options: "{ sysfs: \(Self.fixtures)/charge }", interval: .seconds(10))
        try instance.start()
        let b = try #require(battery(instance, "BAT1").first)
        let level = try #require(b.double("level"))
        #expect(abs(level - 100.0 * 2853000 / 4118000) < 1e-9)
        #expect(b.string("state") == "charging")
        #expect(b.int("time_to_full") == 2996)  // round(3600 × (4118000 − 2853000) µAh / 1520000 µA)
        #expect(b.int("time_to_empty") == nil)
        #expect(supply(instance, "ADP1").first?.bool("online") == true)
        #expect(instance.events(kind: "profile").first?.string("profile") == "quiet")
        #expect(instance.events(kind: "profile").first?.bool("low_power") == true)
        #expect(battery(instance, "hidpp_battery_0").isEmpty)  // a peripheral: not without peripherals: true
        try instance.stop()
        #expect(instance.violations.isEmpty)

        let all = try host().instance(options: "{ sysfs: \(Self.fixtures)/charge, peripherals: true }", interval: .seconds(10))
        try all.start()
        let mouse = try #require(battery(all, "hidpp_battery_0").first)
        #expect(mouse.double("level") == 55)
        #expect(mouse.string("state") == "discharging")
        #expect(mouse.int("time_to_empty") == nil)  // no energy or charge figures
        try all.stop()
        #expect(all.violations.isEmpty)
    }

    /// A charger plugged in: the kernel's power_supply uevent makes the
    /// monitor re-read at once, without waiting for the next poll.
    @Test func aPowerSupplyUeventWakesTheMonitor() throws {
        let tree = try PowerTempTree(copying: machines + "/laptop/sys")
        let socketPath = tree.path + "/uevents.sock"
        let instance = try host().instance(options: "{ sysfs: \(tree.path), uevent_socket: \(socketPath) }",
                                           interval: .seconds(10))
        try instance.start()
        #expect(instance.events(kind: "supply").count == 2)
        let sender = try UeventSender(path: socketPath)
        func uevent(_ devpath: String, _ subsystem: String, _ extra: [String]) -> [UInt8] {
            (["change@\(devpath)", "ACTION=change", "DEVPATH=\(devpath)", "SUBSYSTEM=\(subsystem)"] + extra)
                .flatMap { Array($0.utf8) + [0] }
        }
        try tree.write(tree.path + "/class/power_supply/AC/online", "1")
        try tree.write(tree.path + "/class/power_supply/BAT0/status", "Charging")
        try sender.send(uevent("/devices/pci0000:00/0000:00:14.0/usb1/1-2", "usb", []))
        try sender.send(uevent("/devices/LNXSYSTM:00/LNXSYBUS:00/PNP0A08:00/device:1e/PNP0C09:00/ACPI0003:00/power_supply/AC",
                               "power_supply", ["POWER_SUPPLY_NAME=AC", "POWER_SUPPLY_ONLINE=1"]))
        let supplies = instance.waitForEvents(3, kind: "supply")
        #expect(supplies.last?.string("name") == "AC" && supplies.last?.bool("online") == true)
        #expect(instance.waitForEvents(2, kind: "battery").last?.string("state") == "charging")
        try instance.stop()
        #expect(access(socketPath, F_OK) != 0, "the socket is removed at stop")
        #expect(instance.violations.isEmpty)
    }

    @Test func snapshotThenChanges() throws {
        let tree = try PowerTempTree(copying: machines + "/laptop/sys")
        let bat = tree.path + "/class/power_supply/BAT0/"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(10))
        try instance.start()
        #expect(instance.events.count == 4)

        try instance.advance(by: .seconds(20))  // nothing changed
        #expect(instance.events.count == 4)

        // Noise: power draw up 2 %, time_to_empty 16516 → 16150 s (less than 10 minutes).
        try tree.write(bat + "power_now", "10100000")
        try instance.advance(by: .seconds(10))
        #expect(instance.events.count == 4)

        try tree.write(bat + "capacity", "86")
        try instance.advance(by: .seconds(10))
        #expect(battery(instance, "BAT0").map { $0.double("level") } == [87, 86])
        #expect(battery(instance, "BAT0").last?.int("time_to_empty") == 16150)
        #expect(instance.events.count == 5)

        // Plugged in: the AC goes online and the battery charges.
        try tree.write(tree.path + "/class/power_supply/AC/online", "1")
        try tree.write(bat + "status", "Charging")
        try tree.write(bat + "power_now", "9876000")
        try tree.write(tree.path + "/firmware/acpi/platform_profile", "low-power")
        try instance.advance(by: .seconds(10))
        #expect(supply(instance, "AC").map { $0.bool("online") } == [false, true])
        let charging = try #require(battery(instance, "BAT0").last)
        #expect(charging.string("state") == "charging")
        #expect(charging.int("time_to_full") == 2464)  // round(3600 × (52070000 − 45310000) / 9876000)
        #expect(charging.int("time_to_empty") == nil)
        #expect(instance.events(kind: "profile").map { $0.bool("low_power") } == [false, true])
        #expect(supply(instance, "ucsi-source-psy-USBC000:001").count == 1)
        #expect(instance.events.count == 8)

        // Low, and not charging: flagged, and a warning.
        try tree.write(bat + "status", "Discharging")
        try tree.write(bat + "capacity", "9")
        try instance.advance(by: .seconds(10))
        let low = try #require(battery(instance, "BAT0").last)
        #expect(low.bool("low") == true && low.severity == .warning)

        // A restart sends the snapshot again.
        try instance.stop()
        try instance.start()
        #expect(instance.events.count == 9 + 4)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutAnyPowerSupply() throws {
        for root in [Self.fixtures + "/empty", Self.fixtures + "/no-such-tree"] {
            let instance = try host().instance(options: "{ sysfs: \(root) }", interval: .seconds(10))
            do {
                try instance.start()
                Issue.record("start succeeded on \(root)")
            } catch {
                #expect(error.status == "unavailable")
                #expect(error.description.contains("no power supply in \(root)/class/power_supply"))
            }
            #expect(instance.events.isEmpty)
            #expect(instance.violations.isEmpty)
        }
        // Peripherals alone do not make a machine's power supply.
        let tree = try PowerTempTree(copying: Self.fixtures + "/charge")
        try tree.remove(tree.path + "/class/power_supply/BAT1")
        try tree.remove(tree.path + "/class/power_supply/ADP1")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(10))
        #expect(throws: PluginTestError.self) { try instance.start() }
    }

    @Test func aBatteryVanishingMidRun() throws {
        let tree = try PowerTempTree(copying: machines + "/laptop/sys")
        let supplies = tree.path + "/class/power_supply"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(10))
        try instance.start()
        #expect(battery(instance, "BAT0").count == 1)

        // A file listed, then gone when read (a dangling link reads as ENOENT,
        // as a removed battery's attributes do): the battery is skipped this poll.
        try tree.remove(supplies + "/BAT0/energy_now")
        #expect(symlink(supplies + "/BAT0/gone", supplies + "/BAT0/energy_now") == 0)
        try tree.write(supplies + "/BAT0/capacity", "50")
        try instance.advance(by: .seconds(10))
        #expect(battery(instance, "BAT0").count == 1)
        #expect(instance.logs.contains { $0.message.contains("skipping BAT0") })

        // A read that fails (EISDIR here, EIO or EAGAIN from a driver): skipped too.
        try tree.remove(supplies + "/BAT0/energy_now")
        try tree.write(supplies + "/BAT0/energy_now", "45310000")
        try tree.remove(supplies + "/BAT0/status")
        #expect(mkdir(supplies + "/BAT0/status", 0o755) == 0)
        try instance.advance(by: .seconds(10))
        #expect(battery(instance, "BAT0").count == 1)
        try tree.remove(supplies + "/BAT0/status")
        try tree.write(supplies + "/BAT0/status", "Discharging")
        try instance.advance(by: .seconds(10))
        #expect(battery(instance, "BAT0").map { $0.double("level") } == [87, 50])

        // The battery removed: reported gone once.
        try tree.remove(supplies + "/BAT0")
        try instance.advance(by: .seconds(20))
        let gone = battery(instance, "BAT0")
        #expect(gone.count == 3)
        #expect(gone.last?.bool("present") == false && gone.last?.double("level") == nil)

        // Back in: a fresh first event.
        try PowerTempTree.copy(machines + "/laptop/sys/class/power_supply/BAT0", to: supplies + "/BAT0")
        try instance.advance(by: .seconds(10))
        #expect(battery(instance, "BAT0").last?.double("level") == 87)
        #expect(battery(instance, "BAT0").count == 4)

        // Every supply gone: unavailable, after saying so.
        for name in ["AC", "BAT0", "ucsi-source-psy-USBC000:001"] { try tree.remove(supplies + "/" + name) }
        do {
            try instance.advance(by: .seconds(10))
            Issue.record("a poll without supplies succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        #expect(supply(instance, "AC").last?.bool("online") == false)
        #expect(battery(instance, "BAT0").last?.bool("present") == false)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func refusesAnImpossibleLowLevel() throws {
        do {
            _ = try host().instance(options: "{ sysfs: \(machines)/laptop/sys, low_level: 150 }")
            Issue.record("low_level 150 accepted")
        } catch let error as PluginTestError {
            #expect(error.status == "invalid configuration")
            #expect(error.description.contains("options.low_level: must be a percentage"))
        }
    }
}

private typealias PowerTempTree = TempTree
