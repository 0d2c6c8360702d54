import Foundation
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The built-in plugins, loaded from the `.so` files the build made, reading
/// fixture trees through their `procfs` option; fixture files change between
/// polls to check deltas.
@Suite struct ProcPluginTests {
    /// A copy of a fixture tree that the test may change.
    func tree(_ fixture: String) throws -> String {
        let dir = try TestEnv.tempDir("proc")
        try FileManager.default.removeItem(atPath: dir)
        try FileManager.default.copyItem(atPath: TestEnv.fixture(fixture), toPath: dir)
        return dir
    }

    func double(_ event: Event?, _ name: String) -> Double? {
        if case .double(let d)? = event?[field: name] { return d }
        return nil
    }

    @Test func cpuReportsUsageSinceBootThenTheDeltaBetweenPolls() async throws {
        let root = try tree("machines/server/proc")
        let h = try Harness(plugin: "cpu", options: "{ procfs: \(root), per_cpu: true }")
        h.launch()
        let first = h.waitFor(1) { $0.kind == "sample" }.first
        let sinceBoot = 12_770_102.0 / 337_976_457.0
        #expect(abs((double(first, "usage") ?? -1) - sinceBoot) < 1e-12)
        #expect(h.waitFor(4) { $0.kind == "core" }.count == 4)
        // The same machine a moment later: each CPU advanced 100 jiffies.
        try FileManager.default.removeItem(atPath: root + "/stat")
        try FileManager.default.copyItem(atPath: TestEnv.fixture("proc/server-later/stat"), toPath: root + "/stat")
        h.poll()
        let samples = h.waitFor(2) { $0.kind == "sample" }
        let delta = samples.last
        #expect(abs((double(delta, "usage") ?? -1) - 0.25) < 1e-9)
        #expect(abs((double(delta, "user") ?? -1) - 0.15) < 1e-9)
        #expect(abs((double(delta, "system") ?? -1) - 0.10) < 1e-9)
        #expect(abs((double(delta, "iowait") ?? -1) - 0.05) < 1e-9)
        #expect(abs((double(delta, "idle") ?? -1) - 0.70) < 1e-9)
        let cores = h.waitFor(8) { $0.kind == "core" }.suffix(4)
        #expect(cores.map { $0[field: "cpu"] } == [.int(0), .int(1), .int(2), .int(3)])
        #expect(abs((double(cores.first, "usage") ?? -1) - 0.5) < 1e-9)
        await h.stop()
    }

    @Test func memoryReportsBytesRatiosAndPressure() async throws {
        let h = try Harness(plugin: "memory", options: "{ procfs: \(TestEnv.fixture("machines/server/proc")) }")
        h.launch()
        let event = h.waitFor(1) { $0.kind == "sample" }.first
        #expect(event?[field: "total"] == .int(65_843_200 * 1024))
        #expect(event?[field: "available"] == .int(49_382_400 * 1024))
        #expect(event?[field: "free"] == .int(28_411_904 * 1024))
        #expect(event?[field: "swap_total"] == .int(8_388_608 * 1024))
        #expect(abs((double(event, "used_ratio") ?? -1) - 0.25) < 1e-9)
        #expect(abs((double(event, "swap_used_ratio") ?? -1) - 0.125) < 1e-9)
        #expect(double(event, "pressure_some_avg10") == 0.12)
        #expect(double(event, "pressure_full_avg10") == 0.0)
        #expect(event?[field: "pressure_some_total"] == .int(8_123_456))
        await h.stop()
    }

    @Test func memoryWithoutPressureOmitsThoseFields() async throws {
        let h = try Harness(plugin: "memory", options: "{ procfs: \(TestEnv.fixture("proc/old-kernel")) }")
        h.launch()
        let event = h.waitFor(1) { $0.kind == "sample" }.first
        #expect(event != nil)
        #expect(event?[field: "pressure_some_avg10"] == nil)
        #expect(abs((double(event, "used_ratio") ?? -1) - 0.5) < 1e-9)
        await h.stop()
    }

    @Test func loadReportsTheAverages() async throws {
        let h = try Harness(plugin: "load", options: "{ procfs: \(TestEnv.fixture("machines/server/proc")) }")
        h.launch()
        let event = h.waitFor(1) { $0.kind == "sample" }.first
        #expect(double(event, "load1") == 1.72)
        #expect(double(event, "load5") == 1.35)
        #expect(double(event, "load15") == 1.08)
        #expect(event?[field: "runnable"] == .int(3))
        #expect(event?[field: "entities"] == .int(612))
        await h.stop()
    }

    @Test func aMissingSourceIsUnavailableNotAnError() async throws {
        let empty = try TestEnv.tempDir()
        let h = try Harness(plugin: "load", options: "{ procfs: \(empty) }")
        h.launch()
        let availability = h.waitFor(1) { $0.kind == "availability" }.first
        #expect(availability?.monitor == "m")
        #expect(availability?[field: "available"] == .bool(false))
        if case .string(let reason)? = availability?[field: "reason"] { #expect(reason.contains("loadavg")) }
        #expect(h.events.allSatisfy { $0.kind != "instance_failed" })
        #expect(h.instance.state == .retrying)
        await h.stop()
    }

    @Test func aBrokenFileIsATemporaryFailureNotACrash() async throws {
        let h = try Harness(plugin: "load", options: "{ procfs: \(TestEnv.fixture("machines/broken/proc")) }")
        h.launch()
        h.poll()
        try await Task.sleep(for: .milliseconds(100))
        #expect(h.instance.pollErrors.load(ordering: .relaxed) >= 1)
        #expect(h.instance.state == .running)
        #expect(h.events.filter { $0.kind == "sample" }.isEmpty)
        await h.stop()
    }

    @Test func everyPluginRunsOnThisMachinesRealProc() async throws {
        for plugin in ["cpu", "memory", "load"] {
            let h = try Harness(plugin: plugin)
            h.launch()
            let first = h.waitFor(1).first
            #expect(first?.kind == "sample" || first?.kind == "availability", "\(plugin): \(String(describing: first))")
            await h.stop()
        }
    }
}
