// Tests of the boottime plugin with VigilKitTesting's test host: it negotiates
// with the monitor type as `vigil` does, binds options as a manifest would,
// and polls on an injected clock, so nothing here sleeps.

import Foundation
import Testing
import VigilKitTesting
@testable import BoottimePlugin

@Suite struct BoottimeTests {
    /// A fresh directory standing in for /proc, with `uptime` if given.
    static func fixture(uptime: String?) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("boottime-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        if let uptime { try uptime.write(toFile: dir + "/uptime", atomically: true, encoding: .utf8) }
        return dir
    }

    @Test func describesItself() throws {
        let d = try PluginTestHost(BoottimeMonitor.self).description
        #expect(d.name == "boottime" && d.polled)
        #expect(d.problems().isEmpty)
        #expect(d.options.map(\.name) == ["procfs", "recent"])
        #expect(d.options.map(\.defaultText) == ["/proc", "10m"])
        #expect(d.events.map(\.kind) == ["sample"])
        #expect(d.events.first?.fields.map(\.unit) == ["seconds", ""])
    }

    @Test func pollsEmitTheUptime() throws {
        let dir = try Self.fixture(uptime: "12345.67 54321.00\n")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let host = try PluginTestHost(BoottimeMonitor.self)
        let instance = try host.instance(options: "{ procfs: \(dir), recent: 1h }", interval: .seconds(10))
        try instance.start()  // start, then the snapshot poll
        try instance.advance(by: .seconds(30))  // three more polls, clock +30 s
        try "30.50 60.00\n".write(toFile: dir + "/uptime", atomically: true, encoding: .utf8)  // a fresh boot
        try instance.advance(by: .seconds(10))
        try instance.stop()

        let samples = instance.events(kind: "sample")
        #expect(samples.count == 5)
        #expect(samples.first?.double("uptime") == 12345.67)
        #expect(samples.first?.bool("recently_booted") == false)
        #expect(samples.last?.double("uptime") == 30.5)
        #expect(samples.last?.bool("recently_booted") == true)
        #expect(instance.violations.isEmpty)  // every event matched the declared kind
    }

    @Test func aMissingFileIsUnavailable() throws {
        let dir = try Self.fixture(uptime: nil)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let instance = try PluginTestHost(BoottimeMonitor.self).instance(options: "{ procfs: \(dir) }")
        let error = #expect(throws: PluginTestError.self) { try instance.start() }
        #expect(error?.status?.hasPrefix("unavailable") == true)
        #expect(error?.description.contains("\(dir)/uptime") == true)
    }

    @Test func badValuesAreReportedAtTheOption() throws {
        let host = try PluginTestHost(BoottimeMonitor.self)
        let error = #expect(throws: PluginTestError.self) { try host.instance(options: "{ recent: 0s }") }
        #expect(error?.status?.hasPrefix("invalid config") == true)
        #expect(error?.description.contains("options.recent: must be more than 0s") == true)
        // A value of the wrong type is refused before the plugin sees it.
        #expect(throws: PluginTestError.self) { try host.instance(options: "{ recent: soon }") }
    }
}

