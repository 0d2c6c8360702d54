import Glibc
import Testing
import VigilCore
import VigilKit
import VigilKitTesting

/// The built `thermal` plugin (libthermal.so) on the fixture trees in
/// Tests/Fixtures/sys/thermal (see the README there for what each holds).
@Suite(.serialized) struct ThermalPluginTests {
    let fixtures = repoRoot + "/Tests/Fixtures/sys/thermal"

    func host() throws(PluginTestError) -> PluginTestHost { try PluginTestHost(path: productsDir + "/libthermal.so") }

    /// The `zone` events of one zone, in order.
    func zone(_ instance: TestInstance, _ name: String) -> [TestEvent] {
        instance.events(kind: "zone").filter { $0.string("zone") == name }
    }

    @Test func describesItsOptionsAndKinds() throws {
        let d = try host().description
        #expect(d.name == "thermal")
        #expect(d.options.map(\.name) == ["sysfs", "hwmon", "min_change"])
        #expect(d.options.map(\.defaultText) == ["/sys", "true", "0.5"])
        #expect(d.events.map(\.kind) == ["summary", "zone"])
        #expect(d.events.last?.fields.map(\.name) == ["zone", "source", "type", "label", "temperature", "state"])
        #expect(d.defaultInterval == 10_000_000_000)
    }

    @Test func snapshotHasExactValuesAndStates() throws {
        let instance = try host().instance(options: "{ sysfs: \(machines)/laptop/sys }", interval: .seconds(10))
        try instance.start()
        let zones = instance.events(kind: "zone")
        // Zone 2 is unreadable, zone 3 disabled, hwmon0 mirrors zone 0, hwmon3 has no temperature.
        #expect(zones.map { $0.string("zone") ?? "?" } == [
            "thermal_zone0", "thermal_zone1", "hwmon1/temp1", "hwmon1/temp2", "hwmon2/temp1", "hwmon2/temp2", "hwmon2/temp3",
        ])
        #expect(zones.map { $0.double("temperature") ?? -1 } == [47.0, 52.0, 38.85, 41.85, 55.0, 53.0, 51.0])
        #expect(zones.allSatisfy { $0.string("state") == "nominal" })
        #expect(zones.map { $0.string("source") ?? "?" } == ["thermal_zone", "thermal_zone", "hwmon", "hwmon", "hwmon", "hwmon", "hwmon"])
        #expect(zones.map { $0.string("type") ?? "?" } == ["acpitz", "x86_pkg_temp", "nvme", "nvme", "coretemp", "coretemp", "coretemp"])
        #expect(zones.map { $0.string("label") ?? "?" } == ["acpitz", "x86_pkg_temp", "Composite", "Sensor 1", "Package id 0", "Core 0", "Core 1"])
        let summary = instance.events(kind: "summary")
        #expect(summary.count == 1)
        #expect(summary.first?.string("state") == "nominal")
        #expect(summary.first?.double("temperature") == 55.0)
        // The unreadable zone is skipped and logged at debug; the disabled one too.
        #expect(instance.logs.contains { $0.level == 0 && $0.message.hasPrefix("thermal_zone2 skipped:") })
        #expect(instance.logs.contains { $0.level == 0 && $0.message.contains("thermal_zone3 is disabled") })
        // Nothing changed: nothing more, and the unreadable zone is logged once.
        try instance.advance(by: .seconds(30))
        #expect(instance.events.count == 8)
        #expect(instance.logs.filter { $0.message.hasPrefix("thermal_zone2 skipped:") }.count == 1)
        try instance.stop()
        #expect(instance.availability.isEmpty)
        #expect(instance.violations.isEmpty)
    }

    @Test func statesFollowTheTripPoints() throws {
        let tree = try FixtureCopy(machines + "/laptop/sys")
        let temp = "class/thermal/thermal_zone0/temp"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(10))
        try instance.start()
        // Each step: millidegrees written before the poll, the state expected after it.
        let steps: [(Int, String)] = [
            (51000, "fair"),       // ≥ the 50 °C active trip; coretemp (55) is still the hottest
            (61000, "fair"),       // ≥ the 60 °C active trip: still fair
            (96000, "serious"),    // ≥ passive 95
            (101000, "serious"),   // ≥ hot 100
            (106000, "critical"),  // ≥ critical 105
            (99000, "serious"),    // below critical (no hysteresis), ≥ passive
            (49000, "fair"),       // below 50, but not below 50 - 2 (hysteresis of the active trip)
            (47500, "nominal"),    // below 48
        ]
        for (milli, state) in steps {
            try tree.write(temp, "\(milli)\n")
            try instance.advance(by: .seconds(10))
            #expect(zone(instance, "thermal_zone0").last?.string("state") == state, "at \(milli)")
            #expect(zone(instance, "thermal_zone0").last?.double("temperature") == Double(milli) / 1000)
        }
        #expect(zone(instance, "thermal_zone0").map { $0.string("state") ?? "?" } ==
                ["nominal", "fair", "fair", "serious", "serious", "critical", "serious", "fair", "nominal"])
        let summaries = instance.events(kind: "summary")
        #expect(summaries.map { $0.string("state") ?? "?" } ==
                ["nominal", "fair", "fair", "serious", "serious", "critical", "serious", "fair", "nominal"])
        #expect(summaries.map { $0.double("temperature") ?? -1 } == [55.0, 55.0, 61.0, 96.0, 101.0, 106.0, 99.0, 55.0, 55.0])
        // Severity follows the state.
        #expect(zone(instance, "thermal_zone0")[5].severity == .critical)
        #expect(zone(instance, "thermal_zone0")[3].severity == .warning)
        // Only zone 0 changed.
        #expect(zone(instance, "thermal_zone1").count == 1)
        #expect(zone(instance, "hwmon2/temp1").count == 1)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func hwmonStatesFollowMaxAndCrit() throws {
        let tree = try FixtureCopy(machines + "/laptop/sys")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        for (milli, state) in [(84000, "serious"), (100000, "critical"), (83000, "nominal")] {
            try tree.write("class/hwmon/hwmon2/temp1_input", "\(milli)\n")
            try instance.advance(by: .seconds(1))
            #expect(zone(instance, "hwmon2/temp1").last?.string("state") == state, "at \(milli)")
        }
        // nvme Composite: max 81.85, crit 84.85.
        try tree.write("class/hwmon/hwmon1/temp1_input", "84850\n")
        try instance.advance(by: .seconds(1))
        #expect(zone(instance, "hwmon1/temp1").last?.string("state") == "critical")
        #expect(instance.events(kind: "summary").last?.string("state") == "critical")
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func minChangeSuppressesSmallChanges() throws {
        let tree = try FixtureCopy(machines + "/laptop/sys")
        let temp = "class/thermal/thermal_zone1/temp"
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        // Default 0.5 °C, measured from the last reported value (52.0).
        for (milli, reported) in [(52300, [52.0]), (52600, [52.0, 52.6]), (52900, [52.0, 52.6]), (52000, [52.0, 52.6, 52.0])] {
            try tree.write(temp, "\(milli)\n")
            try instance.advance(by: .seconds(1))
            #expect(zone(instance, "thermal_zone1").map { $0.double("temperature") ?? -1 } == reported, "at \(milli)")
        }
        // The summary's highest temperature too: 55.2 is not a change from 55.0.
        try tree.write("class/hwmon/hwmon2/temp1_input", "55200\n")
        try instance.advance(by: .seconds(1))
        #expect(zone(instance, "hwmon2/temp1").count == 1)
        #expect(instance.events(kind: "summary").count == 1)
        try instance.stop()

        // A larger min_change.
        let coarse = try FixtureCopy(machines + "/laptop/sys")
        let second = try host().instance(options: "{ sysfs: \(coarse.path), min_change: 2 }", interval: .seconds(1))
        try second.start()
        for (milli, reported) in [(53900, [52.0]), (54000, [52.0, 54.0]), (52500, [52.0, 54.0])] {
            try coarse.write(temp, "\(milli)\n")
            try second.advance(by: .seconds(1))
            #expect(zone(second, "thermal_zone1").map { $0.double("temperature") ?? -1 } == reported, "at \(milli)")
        }
        // A state change is reported at once, whatever the temperature moved.
        try coarse.write("class/thermal/thermal_zone0/temp", "50000\n")
        try second.advance(by: .seconds(1))
        #expect(zone(second, "thermal_zone0").last?.string("state") == "fair")
        #expect(zone(second, "thermal_zone0").last?.double("temperature") == 50.0)
        try second.stop()
        #expect(instance.violations.isEmpty)
        #expect(second.violations.isEmpty)
    }

    @Test func unreadableAndVanishingZonesAreSkipped() throws {
        let tree = try FixtureCopy(machines + "/laptop/sys")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        #expect(zone(instance, "thermal_zone2").isEmpty)
        // The zone becomes readable: reported from then on.
        try tree.remove("class/thermal/thermal_zone2/temp")
        try tree.write("class/thermal/thermal_zone2/temp", "36000\n")
        try instance.advance(by: .seconds(1))
        #expect(zone(instance, "thermal_zone2").map { $0.double("temperature") ?? -1 } == [36.0])
        #expect(zone(instance, "thermal_zone2").first?.string("type") == "iwlwifi_1")
        // Its temp file vanishes (as a zone going away does): skipped, never fatal.
        try tree.remove("class/thermal/thermal_zone2/temp")
        try instance.advance(by: .seconds(1))
        // A whole hwmon device goes away, and comes back: a snapshot of it again.
        try tree.remove("class/hwmon/hwmon1")
        try instance.advance(by: .seconds(1))
        #expect(zone(instance, "hwmon1/temp1").count == 1)
        try tree.copy(from: machines + "/laptop/sys", "class/hwmon/hwmon1")
        try instance.advance(by: .seconds(1))
        #expect(zone(instance, "hwmon1/temp1").count == 2)
        #expect(zone(instance, "hwmon1/temp1").last?.double("temperature") == 38.85)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutAnySensor() throws {
        let instance = try host().instance(options: "{ sysfs: \(fixtures)/empty }", interval: .seconds(1))
        do {
            try instance.start()
            Issue.record("start succeeded on a tree without sensors")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains("no thermal zone in \(fixtures)/empty/class/thermal"))
        }
        #expect(instance.availability.count == 1)
        #expect(instance.availability.first?.available == false)
        #expect(instance.availability.first?.reason.contains("no temperature sensor in \(fixtures)/empty/class/hwmon") == true)
        #expect(instance.events.isEmpty)
        #expect(instance.violations.isEmpty)

        // A root that does not exist at all is the same.
        let missing = try host().instance(options: "{ sysfs: \(fixtures)/no-such-tree }", interval: .seconds(1))
        #expect(throws: PluginTestError.self) { try missing.start() }
        #expect(missing.availability.first?.available == false)
    }

    @Test func hwmonOnlyMachinesAndTheHwmonOption() throws {
        let desktop = try host().instance(options: "{ sysfs: \(fixtures)/desktop }", interval: .seconds(1))
        try desktop.start()
        #expect(desktop.events(kind: "zone").map { $0.string("label") ?? "?" } == ["Tctl", "Tccd1"])
        #expect(desktop.events(kind: "zone").map { $0.double("temperature") ?? -1 } == [45.125, 40.25])
        #expect(desktop.events(kind: "zone").map { $0.string("zone") ?? "?" } == ["hwmon0/temp1", "hwmon0/temp3"])
        #expect(desktop.events(kind: "summary").first?.string("state") == "nominal")
        try desktop.stop()
        #expect(desktop.violations.isEmpty)

        let without = try host().instance(options: "{ sysfs: \(fixtures)/desktop, hwmon: false }", interval: .seconds(1))
        do {
            try without.start()
            Issue.record("start succeeded without thermal zones and with hwmon off")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains("hwmon is false"))
        }

        let laptop = try host().instance(options: "{ sysfs: \(machines)/laptop/sys, hwmon: false }", interval: .seconds(1))
        try laptop.start()
        #expect(laptop.events(kind: "zone").map { $0.string("zone") ?? "?" } == ["thermal_zone0", "thermal_zone1"])
        #expect(laptop.events(kind: "summary").first?.double("temperature") == 52.0)
        try laptop.stop()
        #expect(laptop.violations.isEmpty)
    }

    @Test func becomesAvailableWhenSensorsAppear() throws {
        let tree = try FixtureCopy(fixtures + "/empty")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        #expect(throws: PluginTestError.self) { try instance.start() }
        try tree.copy(from: fixtures + "/desktop", "class/hwmon/hwmon0")
        try instance.start()
        #expect(instance.availability.map(\.available) == [false, true])
        #expect(instance.events(kind: "zone").count == 2)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func badOptionsAreRefusedAtTheirName() throws {
        for (options, name) in [("{ min_change: -1 }", "options.min_change"), ("{ sysfs: '' }", "options.sysfs")] {
            do {
                _ = try host().instance(options: options, interval: .seconds(1))
                Issue.record("\(options) was accepted")
            } catch {
                #expect(error.status == "invalid configuration")
                #expect(error.description.contains(name))
            }
        }
    }
}

/// A writable copy of a fixture tree in a temporary directory, removed at the end.
final class FixtureCopy {
    let path: String

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    init(_ source: String) throws {
        var template = Array("/tmp/vigil-thermal-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure(description: "mkdtemp failed") }
        path = String(cString: made)
        try Self.copyTree(source, path)
    }

    deinit { Self.removeTree(path) }

    /// Copies `relative` of the tree at `source` into this copy (replacing nothing).
    func copy(from source: String, _ relative: String) throws {
        try Self.copyTree(source + "/" + relative, path + "/" + relative)
    }

    func write(_ relative: String, _ text: String) throws {
        guard let file = fopen(path + "/" + relative, "we") else {
            throw Failure(description: "cannot write \(relative): errno \(errno)")
        }
        fputs(text, file)
        fclose(file)
    }

    func remove(_ relative: String) throws {
        Self.removeTree(path + "/" + relative)
    }

    static func copyTree(_ from: String, _ to: String) throws {
        var info = stat()
        guard lstat(from, &info) == 0 else { throw Failure(description: "cannot stat \(from)") }
        switch info.st_mode & S_IFMT {
        case S_IFLNK:
            var buffer = [CChar](repeating: 0, count: 4096)
            let n = readlink(from, &buffer, buffer.count - 1)
            guard n > 0 else { throw Failure(description: "cannot read link \(from)") }
            buffer[n] = 0
            guard symlink(buffer, to) == 0 else { throw Failure(description: "cannot link \(to)") }
        case S_IFDIR:
            guard mkdir(to, 0o755) == 0 || errno == EEXIST else { throw Failure(description: "cannot make \(to)") }
            guard let dir = opendir(from) else { throw Failure(description: "cannot list \(from)") }
            var names: [String] = []
            while let entry = readdir(dir) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                if name != "." && name != ".." { names.append(name) }
            }
            closedir(dir)
            for name in names { try copyTree(from + "/" + name, to + "/" + name) }
        default:
            guard let input = fopen(from, "re"), let output = fopen(to, "we") else { throw Failure(description: "cannot copy \(from)") }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = fread(&buffer, 1, buffer.count, input)
                if n == 0 { break }
                fwrite(buffer, 1, n, output)
            }
            fclose(input)
            fclose(output)
        }
    }

    static func removeTree(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR {
            if let dir = opendir(path) {
                var names: [String] = []
                while let entry = readdir(dir) {
                    let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
                    if name != "." && name != ".." { names.append(name) }
                }
                closedir(dir)
                for name in names { removeTree(path + "/" + name) }
            }
            rmdir(path)
        } else {
            unlink(path)
        }
    }
}
