import Testing
import VigilCore

/// What a reload keeps: fingerprints that ignore where a setting is written,
/// and thresholds and rules that keep their state when they did not change.
@Suite struct ReloadStateTests {
    typealias T = ConditionEngineTests
    static let s = ConditionEngineTests.s

    @Test func aFingerprintIgnoresWhereASettingIsWritten() {
        let a = MonitorConfig(name: "cpu", plugin: "cpu", interval: 1_000_000_000,
                              location: SourceLocation(file: "a.yaml", line: 3, column: 3))
        var b = MonitorConfig(name: "cpu", plugin: "cpu", interval: 1_000_000_000,
                              location: SourceLocation(file: "conf.d/b.yaml", line: 40, column: 5))
        b.pluginLocation = SourceLocation(file: "x", line: 9, column: 9)
        #expect(ConfigFingerprint.of(a) == ConfigFingerprint.of(b))
        b.interval = 2_000_000_000
        #expect(ConfigFingerprint.of(a) != ConfigFingerprint.of(b))
        var c = a
        c.thresholds = []
        c.enabled = false
        #expect(ConfigFingerprint.of(a) != ConfigFingerprint.of(c))
        // A skipped property does not count.
        c.enabled = true
        c.interval = 5
        #expect(ConfigFingerprint.of(a, skipping: ["interval"]) == ConfigFingerprint.of(c, skipping: ["interval"]))
    }

    @Test func aStringCannotPassForStructure() {
        struct Pair { var a: String; var b: String }
        #expect(ConfigFingerprint.of(Pair(a: "x\",b:\"y", b: "")) != ConfigFingerprint.of(Pair(a: "x", b: "y\",")))
        // Dictionaries are written in one order whatever their hashing.
        let d1: [String: Int] = Dictionary(uniqueKeysWithValues: (0..<50).map { ("k\($0)", $0) })
        let d2: [String: Int] = Dictionary(uniqueKeysWithValues: (0..<50).reversed().map { ("k\($0)", $0) })
        #expect(ConfigFingerprint.of(d1) == ConfigFingerprint.of(d2))
    }

    @Test func anUnchangedThresholdKeepsItsStateAndMakesNoEvent() {
        var old = T.engine([T.cpuThreshold()])
        #expect(T.feed(&old, [0.97]) == ["critical@1"])
        // The same threshold (written elsewhere would not matter), plus a new one.
        let other = ThresholdSpec(ref: ValueRef(monitor: "cpu", kind: "sample", field: "usage"),
                                  warning: ThresholdLimit(.above, 0.5, clear: 0.4), critical: nil,
                                  holdFor: 0, hits: 0, staleAfter: nil)
        var next = ConditionEngine(thresholds: [T.cpuThreshold(), other], rules: [], plugins: ["cpu": "cpu"])
        next.adoptState(from: old)
        #expect(next.start(now: 2 * Self.s, wallTime: 2 * Self.s).isEmpty)
        // Still critical: 0.96 says nothing for the kept one; the new one sees warning.
        let events = next.observe(T.sample(0.96, at: 3), now: 3 * Self.s)
        #expect(events.count == 1)
        #expect(events.first?[field: "state"] == .string("warning"))
        // And the kept one leaves critical as it would have.
        let down = next.observe(T.sample(0.85, at: 4), now: 4 * Self.s).compactMap { $0[field: "state"] }
        #expect(down == [.string("warning")])
    }

    @Test func anUnchangedRuleStaysActiveAndAChangedOneStartsAfresh() throws {
        var old = ConditionEngine(thresholds: [], rules: [T.danger], plugins: [:])
        _ = old.start(now: 0, wallTime: 0)
        _ = old.observe(T.battery(15, "discharging", at: 1), now: 1 * Self.s)
        #expect(!old.observe(T.thermal("serious", at: 2), now: 2 * Self.s).isEmpty)
        #expect(old.isActive(rule: "low-power-danger"))

        var kept = ConditionEngine(thresholds: [], rules: [T.danger], plugins: [:])
        kept.adoptState(from: old)
        #expect(kept.start(now: 3 * Self.s, wallTime: 3 * Self.s).isEmpty)  // no second "active"
        #expect(kept.isActive(rule: "low-power-danger"))
        let off = try #require(kept.observe(T.battery(15, "charging", at: 4), now: 4 * Self.s).first)
        #expect(off[field: "active"] == .bool(false))

        // The same name with another condition is another rule: no state taken.
        let changed = RuleSpec(name: "low-power-danger", condition: T.compare("power", "battery", "level", .less, .number(10)),
                               severity: .critical)
        var fresh = ConditionEngine(thresholds: [], rules: [changed], plugins: [:])
        fresh.adoptState(from: old)
        #expect(!fresh.isActive(rule: "low-power-danger"))
    }
}
