import Foundation
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
import VigilKitTesting

/// One ABI boundary: for each malformed event of the `malformed` fixture,
/// the runtime (which refuses and counts), the test kit (which records) and
/// `vigil plugins check` (which reports) give the same verdict, because they
/// decode with the same decoder behind the same host table.
@Suite(.startsProcesses, .offThePool) struct ABIVerdictTests {
    /// The fixture's cases and the reason each must be refused for.
    static let cases: [(Int, EmitRefusal)] = [
        (1, .malformed), (2, .malformed), (3, .badSeverity), (4, .badTime), (5, .malformed),
        (6, .malformed), (7, .reservedKind), (8, .malformed), (9, .duplicateField), (10, .badFieldType),
        (11, .unsupportedType), (12, .tooLarge), (13, .tooLarge), (14, .tooLarge), (15, .malformed),
    ]

    @Test(arguments: cases)
    func theRuntimeTheTestKitAndTheCheckerAgree(_ which: Int, _ reason: EmitRefusal) async throws {
        let path = try TestEnv.cPlugin("malformed")

        // The runtime: refused, counted under the reason; the good sample still routed.
        let h = try Harness(plugin: path, options: "{ case: \(which) }")
        h.launch()
        let samples = h.waitFor(1) { $0.kind == "sample" }
        await h.stop()
        #expect(samples.count == 1)
        #expect(h.instance.refusals.snapshot.map(\.reason) == [reason], "case \(which)")
        #expect(h.instance.emitted.load(ordering: .relaxed) == 1)

        // The test kit: the same refusal, as a violation, and only the good sample kept.
        let host = try PluginTestHost(path: path)
        let instance = try host.instance(options: "{ case: \(which) }", interval: .seconds(1))
        try instance.start()
        #expect(instance.events.map(\.kind) == ["sample"])
        #expect(instance.violations.count == 1 && instance.violations[0].hasPrefix("refused (\(reason.name)): "),
                "case \(which): \(instance.violations)")
        try instance.stop()

        // The checker: a failed declarations check naming the same reason.
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", path, "--option", "case=\(which)"], timeout: 120)
        #expect(check.status == 1, "case \(which): \(check.stdout)\(check.stderr)")
        let line = check.stdout.split(separator: "\n").first { $0.contains("events match declarations") }
        #expect(line?.contains("FAIL") == true && line?.contains("refused by the host (\(reason.name)): ") == true,
                "case \(which): \(check.stdout)")
    }

    @Test func aGoodEventPassesEverywhere() async throws {
        let path = try TestEnv.cPlugin("malformed")
        let h = try Harness(plugin: path)
        h.launch()
        #expect(h.waitFor(1).count == 1)
        await h.stop()
        #expect(h.instance.refusals.total == 0)
        let instance = try PluginTestHost(path: path).instance(interval: .seconds(1))
        try instance.start()
        #expect(instance.violations.isEmpty)
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", path], timeout: 120)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
    }

    /// A failed create's handle is dead: what a plugin calls through it later
    /// reaches nothing, and is counted.
    @Test func callsThroughAFailedCreatesHandleAreIgnored() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("malformed"), options: "{ stale_host: true }", interval: "1s")
        h.launch()  // the first create fails for now; the retry (≥ 1 s later) runs
        let samples = h.waitFor(1, timeout: 15) { $0.kind == "sample" }
        await h.stop()
        #expect(samples.count == 1)
        #expect(h.events.allSatisfy { $0.severity != .critical && $0.kind != "availability" }, "\(h.events)")
        #expect(h.instance.lateCalls == 3)  // log, set_availability, emit
        #expect(h.instance.refusals.total == 0)
    }

    /// A source flapping 10 000 times a poll changes state, not the log:
    /// at most the burst of availability events, then one a second.
    @Test func aFlappingSourceIsRateLimited() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("malformed"), options: "{ flap: 10000 }", interval: "500ms")
        h.launch()
        h.waitFor(3, timeout: 10) { $0.kind == "sample" }
        await h.stop()
        let availability = h.events.filter { $0.kind == "availability" }
        #expect(availability.count >= 2)
        #expect(availability.count <= Int(MonitorAvailability.burst) + 3, "\(availability.count)")
    }

    /// A 1 MiB log message is cut at the header's limit, and the cut is said.
    @Test func aHugeLogMessageIsCut() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("malformed"), options: "{ log_bytes: 1048576 }")
        h.launch()
        h.waitFor(1) { $0.kind == "sample" }
        await h.stop()
        #expect(h.instance.logGate.cuts.load(ordering: .relaxed) >= 1)
    }
}
