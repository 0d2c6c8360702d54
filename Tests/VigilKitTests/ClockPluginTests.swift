import Foundation
import Testing
import VigilKitTesting

/// The clock plugin with a temporary root whose etc/localtime names the zone.
/// Clock steps and suspends cannot be made here (the machine's clock is never
/// set): `clock_stepped`, `resumed` and their arithmetic are untested.
@Suite struct ClockPluginTests {
    func rootfs(zone: String) throws -> String {
        let path = NSTemporaryDirectory() + "vigil-clock-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path + "/etc", withIntermediateDirectories: true)
        #expect(symlink("/usr/share/zoneinfo/" + zone, path + "/etc/localtime") == 0)
        return path
    }

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libclock.so") }

    func utcDate() -> String {
        var t = time(nil)
        var tm = tm()
        gmtime_r(&t, &tm)
        return String(format: "%04d-%02d-%02d", Int(tm.tm_year) + 1900, Int(tm.tm_mon) + 1, Int(tm.tm_mday))
    }

    @Test func aSnapshotOnStartThenAZoneChange() throws {
        let root = try rootfs(zone: "Europe/Paris")
        let clock = try host().instance(options: "{ rootfs: \"\(root)\" }")
        try clock.start()
        let snapshot = try #require(clock.events(kind: "snapshot").first)
        #expect(snapshot.string("zone") == "Europe/Paris")
        let date = try #require(snapshot.string("date"))
        // Another root's day is the UTC day; around midnight it may have just turned.
        #expect(date.count == 10 && (date == utcDate() || date < utcDate()))
        #expect((snapshot.double("suspended") ?? -1) >= 0)

        // How timedatectl replaces the link: a new one, renamed over.
        #expect(symlink("/usr/share/zoneinfo/America/New_York", root + "/etc/.localtime.new") == 0)
        #expect(rename(root + "/etc/.localtime.new", root + "/etc/localtime") == 0)
        let changed = clock.waitForEvents(1, kind: "timezone_changed")
        try clock.stop()

        #expect(changed.count == 1)
        #expect(changed.first?.string("old_zone") == "Europe/Paris")
        #expect(changed.first?.string("new_zone") == "America/New_York")
        #expect(clock.events(kind: "timezone_changed").count == 1)
        #expect(clock.violations.isEmpty, "\(clock.violations)")
    }

    @Test func aZoneFileNamedByEtcTimezone() throws {
        let root = try rootfs(zone: "UTC")
        unlink(root + "/etc/localtime")
        try Data("TZif".utf8).write(to: URL(fileURLWithPath: root + "/etc/localtime"))
        try "Asia/Tokyo\n".write(toFile: root + "/etc/timezone", atomically: false, encoding: .utf8)
        let clock = try host().instance(options: "{ rootfs: \"\(root)\", check_interval: 1s }")
        try clock.start()
        #expect(clock.events(kind: "snapshot").first?.string("zone") == "Asia/Tokyo")
        try "Europe/Berlin\n".write(toFile: root + "/etc/timezone", atomically: false, encoding: .utf8)
        let changed = clock.waitForEvents(1, kind: "timezone_changed")
        // A restart: the worker and its descriptors are made anew.
        try clock.stop()
        try clock.start()
        try clock.stop()
        #expect(changed.first?.string("old_zone") == "Asia/Tokyo")
        #expect(changed.first?.string("new_zone") == "Europe/Berlin")
        #expect(clock.events(kind: "snapshot").count == 2)
        #expect(clock.violations.isEmpty, "\(clock.violations)")
    }

    @Test("bad options are refused with their option path", arguments: [
        ("{ check_interval: 0s }", "options.check_interval: must be positive"),
        ("{ rootfs: relative }", "options.rootfs: \"relative\" is not an absolute path"),
    ])
    func badOptions(options: String, message: String) throws {
        #expect {
            _ = try host().instance(options: options)
        } throws: { error in
            "\(error)".contains(message)
        }
    }
}
