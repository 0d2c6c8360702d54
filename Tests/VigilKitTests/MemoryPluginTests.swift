import Foundation
import Testing
import VigilKitTesting

/// The memory plugin's warning (iOS's memory warning, with hysteresis) and
/// its figures from /proc/vmstat, run from the built .so on a fixture tree
/// that the test changes between polls.
@Suite struct MemoryPluginTests {
    /// A copy of the `server` fixture the test may change.
    func tree() throws -> String {
        let dir = NSTemporaryDirectory() + "vigil-memory-\(UUID().uuidString.prefix(8))"
        try FileManager.default.copyItem(atPath: repoRoot + "/Tests/Fixtures/machines/server/proc", toPath: dir)
        return dir
    }

    func setAvailable(_ percent: Double, in root: String) throws {
        let total = 65_843_200.0
        var text = try String(contentsOfFile: root + "/meminfo", encoding: .utf8)
        text = text.split(separator: "\n").map { line in
            line.hasPrefix("MemAvailable:") ? "MemAvailable:   \(Int(total * percent / 100)) kB" : String(line)
        }.joined(separator: "\n") + "\n"
        try text.write(toFile: root + "/meminfo", atomically: true, encoding: .utf8)
    }

    func setPressure(_ avg10: Double, in root: String) throws {
        try "some avg10=\(avg10) avg60=0.25 avg300=0.10 total=8123456\nfull avg10=0.00 avg60=0.08 avg300=0.03 total=3456789\n"
            .write(toFile: root + "/pressure/memory", atomically: true, encoding: .utf8)
    }

    @Test func aWarningBeginsAndEndsWithHysteresis() throws {
        let root = try tree()
        let host = try PluginTestHost(path: productsDir + "/libmemory.so")
        let memory = try host.instance(options: "{ procfs: \(root), available_warning: 10, pressure_warning: 10 }",
                                       interval: .seconds(1))
        try memory.start()
        #expect(memory.events(kind: "sample").first?.int("oom_kills") == 2)
        #expect(memory.events(kind: "warning").isEmpty)  // 75 % available, 0.12 % pressure

        try setAvailable(5, in: root)
        try memory.advance(by: .seconds(1))
        try setAvailable(12, in: root)  // above the level, within its 5-point clearance
        try memory.advance(by: .seconds(1))
        try setAvailable(20, in: root)
        try memory.advance(by: .seconds(1))

        try setPressure(15, in: root)
        try memory.advance(by: .seconds(1))
        try setPressure(9, in: root)  // below the level, within its 2-point clearance
        try memory.advance(by: .seconds(1))
        try setPressure(5, in: root)
        try memory.advance(by: .seconds(1))
        try memory.stop()

        let warnings = memory.events(kind: "warning")
        #expect(warnings.map { $0.bool("active") } == [true, false, true, false])
        #expect(warnings.map { $0.string("reason") } == ["low_available", "low_available", "pressure", "pressure"])
        #expect(warnings.map(\.severity.description) == ["warning", "notice", "warning", "notice"])
        #expect(abs((warnings.first?.double("available_percent") ?? 0) - 5) < 0.01)
        #expect(memory.violations.isEmpty, "\(memory.violations)")
    }

    @Test func aLevelOfZeroTurnsTheWarningOff() throws {
        let root = try tree()
        try setAvailable(1, in: root)
        let host = try PluginTestHost(path: productsDir + "/libmemory.so")
        let memory = try host.instance(options: "{ procfs: \(root), available_warning: 0 }", interval: .seconds(1))
        try memory.start()
        #expect(memory.events(kind: "warning").isEmpty)
        try memory.stop()
    }

    @Test func aLevelOutsideAPercentIsRefusedWithItsOption() throws {
        let host = try PluginTestHost(path: productsDir + "/libmemory.so")
        #expect {
            _ = try host.instance(options: "{ pressure_warning: 150 }")
        } throws: { error in
            "\(error)".contains("options.pressure_warning: must be a percent from 0 to 100")
        }
    }
}
