import Testing
import VigilCore

/// The threshold and rule engine, driven with made-up times: no clock, no sleeping.
@Suite struct ConditionEngineTests {
    static let s: Int64 = 1_000_000_000
    static let usage = ValueRef(monitor: "cpu", kind: "sample", field: "usage")

    /// A cpu `sample` event with `usage`, at wall time `t` seconds.
    static func sample(_ usage: Double, at t: Int64 = 0, monitor: String = "cpu") -> Event {
        Event(time: t * s, monitor: monitor, plugin: "cpu", kind: "sample", fields: [Field("usage", .double(usage))])
    }

    static func cpuThreshold(holdFor: Int64 = 0, hits: Int = 0, staleAfter: Int64? = nil) -> ThresholdSpec {
        ThresholdSpec(ref: usage, warning: ThresholdLimit(.above, 0.80, clear: 0.70),
                      critical: ThresholdLimit(.above, 0.95, clear: 0.90), holdFor: holdFor, hits: hits, staleAfter: staleAfter)
    }

    static func engine(_ thresholds: [ThresholdSpec], _ rules: [RuleSpec] = []) -> ConditionEngine {
        var e = ConditionEngine(thresholds: thresholds, rules: rules, plugins: ["cpu": "cpu", "power": "power"])
        _ = e.start(now: 0, wallTime: 0)
        return e
    }

    /// Feeds values one second apart (monotonic = wall), returning the states announced.
    static func feed(_ e: inout ConditionEngine, _ values: [Double], from start: Int64 = 1) -> [String] {
        var states: [String] = []
        for (i, v) in values.enumerated() {
            let t = start + Int64(i)
            for event in e.observe(sample(v, at: t), now: t * s) {
                states.append(text(event[field: "state"]) + "@\(t)")
            }
        }
        return states
    }

    static func text(_ v: FieldValue?) -> String {
        switch v {
        case .string(let s)?: s
        case .double(let d)?: String(d)
        case .int(let i)?: String(i)
        case .bool(let b)?: String(b)
        case nil: "-"
        }
    }

    // MARK: thresholds

    @Test func hysteresisAndOnlyChangesAreReported() {
        var e = Self.engine([Self.cpuThreshold()])
        // 0.85 enters warning; 0.75 is not below clear_below 0.70, so it stays;
        // 0.96 critical; 0.92 stays critical (clear 0.90); 0.85 leaves critical
        // for warning; 0.65 leaves warning.
        let states = Self.feed(&e, [0.5, 0.85, 0.75, 0.79, 0.96, 0.92, 0.85, 0.65, 0.6])
        #expect(states == ["warning@2", "critical@5", "warning@7", "nominal@8"])
    }

    @Test func thresholdEventCarriesValueLimitAndPrevious() throws {
        var e = Self.engine([Self.cpuThreshold()])
        let up = try #require(e.observe(Self.sample(0.97, at: 10), now: 10 * Self.s).first)
        #expect(up.kind == "threshold" && up.monitor == "cpu" && up.plugin == "cpu" && up.severity == .critical)
        #expect(up.time == 10 * Self.s)
        #expect(up.fields.map(\.name) == ["field", "source_kind", "value", "state", "previous", "limit", "direction"])
        #expect(up[field: "field"] == .string("usage") && up[field: "source_kind"] == .string("sample"))
        #expect(up[field: "value"] == .double(0.97) && up[field: "state"] == .string("critical") && up[field: "previous"] == .string("nominal"))
        #expect(up[field: "limit"] == .double(0.95) && up[field: "direction"] == .string("above"))
        // Down to warning: critical's clear value; straight to nominal: warning's.
        let warning = try #require(e.observe(Self.sample(0.85, at: 11), now: 11 * Self.s).first)
        #expect(warning[field: "state"] == .string("warning") && warning[field: "limit"] == .double(0.90))
        _ = e.observe(Self.sample(0.97, at: 12), now: 12 * Self.s)
        let down = try #require(e.observe(Self.sample(0.5, at: 13), now: 13 * Self.s).first)
        #expect(down[field: "state"] == .string("nominal") && down[field: "previous"] == .string("critical"))
        #expect(down[field: "limit"] == .double(0.70) && down.severity == .notice)
    }

    @Test func aLowerBoundIsBadWhenLow() {
        let level = ValueRef(monitor: "power", kind: "battery", field: "level")
        var e = Self.engine([ThresholdSpec(ref: level, critical: ThresholdLimit(.below, 10, clear: 15))])
        func at(_ v: Double, _ t: Int64) -> String? {
            e.observe(Event(time: t * Self.s, monitor: "power", plugin: "power", kind: "battery",
                            fields: [Field("level", .int(Int64(v)))]), now: t * Self.s).first.map { Self.text($0[field: "state"]) }
        }
        #expect(at(50, 1) == nil)
        #expect(at(9, 2) == "critical")
        #expect(at(12, 3) == nil)  // not above clear_above 15 yet
        #expect(at(16, 4) == "nominal")
    }

    @Test func hitsNeedsConsecutiveValues() {
        var e = Self.engine([Self.cpuThreshold(hits: 3)])
        // Two highs, a low (resets the count), then three highs.
        let states = Self.feed(&e, [0.85, 0.86, 0.5, 0.85, 0.86, 0.87, 0.5, 0.5, 0.5])
        #expect(states == ["warning@6", "nominal@9"])
    }

    @Test func forHoldsAcrossSamplesAndTheTimer() {
        var e = Self.engine([Self.cpuThreshold(holdFor: 30 * Self.s)])
        // Samples every second: the state changes at the sample 30 s after the first high one.
        let states = Self.feed(&e, Array(repeating: 0.85, count: 32))
        #expect(states == ["warning@31"])

        // A monitor that emits only on change: one value, then silence; the timer takes the state.
        var quiet = Self.engine([Self.cpuThreshold(holdFor: 30 * Self.s)])
        #expect(quiet.observe(Self.sample(0.99, at: 100), now: 100 * Self.s).isEmpty)
        #expect(quiet.nextDeadline == 130 * Self.s)
        #expect(quiet.advance(to: 129 * Self.s, wallTime: 129 * Self.s).isEmpty)
        let fired = quiet.advance(to: 130 * Self.s, wallTime: 130 * Self.s)
        #expect(fired.map { Self.text($0[field: "state"]) } == ["critical"])
        #expect(fired.first?.time == 130 * Self.s)
        #expect(quiet.nextDeadline == nil)
    }

    @Test func holdsLongerThanTheClockCanCountAreNever() {
        var e = Self.engine([Self.cpuThreshold(holdFor: .max - 1, staleAfter: .max)])
        #expect(e.observe(Self.sample(0.99, at: 5), now: 5 * Self.s).isEmpty)
        #expect(e.nextDeadline == .max)
        #expect(e.advance(to: 1_000_000 * Self.s, wallTime: 0).isEmpty)
    }

    @Test func aValueBackInsideCancelsTheHold() {
        var e = Self.engine([Self.cpuThreshold(holdFor: 10 * Self.s)])
        _ = e.observe(Self.sample(0.85, at: 1), now: 1 * Self.s)
        _ = e.observe(Self.sample(0.5, at: 5), now: 5 * Self.s)
        #expect(e.nextDeadline == nil)
        #expect(e.advance(to: 20 * Self.s, wallTime: 20 * Self.s).isEmpty)
        #expect(e.state(of: Self.usage) == .nominal)
    }

    @Test func forOrHitsWhicheverComesFirst() {
        var e = Self.engine([Self.cpuThreshold(holdFor: 60 * Self.s, hits: 3)])
        #expect(Self.feed(&e, [0.85, 0.85, 0.85]) == ["warning@3"])
    }

    @Test func stalenessWithoutValuesOrPolls() {
        var e = Self.engine([Self.cpuThreshold(staleAfter: 3 * Self.s)])
        _ = e.observe(Self.sample(0.85, at: 1), now: 1 * Self.s)  // warning
        #expect(e.nextDeadline == 4 * Self.s)
        // A successful poll with no new value keeps it fresh.
        #expect(e.heartbeat(monitor: "cpu", now: 3 * Self.s, wallTime: 3 * Self.s).isEmpty)
        #expect(e.advance(to: 5 * Self.s, wallTime: 5 * Self.s).isEmpty)
        let stale = e.advance(to: 6 * Self.s, wallTime: 6 * Self.s)
        #expect(stale.map { Self.text($0[field: "state"]) } == ["stale"])
        #expect(stale.first?[field: "previous"] == .string("warning") && stale.first?[field: "value"] == nil)
        #expect(stale.first?.severity == .warning)
        // The next value leaves stale at once, to the state it is in.
        let back = e.observe(Self.sample(0.5, at: 7), now: 7 * Self.s)
        #expect(back.map { Self.text($0[field: "state"]) } == ["nominal"] && back.first?[field: "previous"] == .string("stale"))
    }

    @Test func valuesBouncingBetweenLevelsStillCountTowardOneHold() {
        // From nominal, 0.97 and 0.85 both point up: three of them take the nearer level.
        var e = Self.engine([Self.cpuThreshold(hits: 3)])
        #expect(Self.feed(&e, [0.97, 0.85, 0.97]) == ["warning@3"])
        // Three highs in a row from warning go on to critical.
        #expect(Self.feed(&e, [0.97, 0.97, 0.97], from: 4) == ["critical@6"])
    }

    @Test func anUnavailableOrGoneMonitorIsStaleAtOnceAndItsPollsDoNotRevive() {
        var e = Self.engine([Self.cpuThreshold()])
        _ = e.observe(Self.sample(0.99, at: 1), now: 1 * Self.s)  // critical
        let gone = Event(time: 2 * Self.s, monitor: "cpu", plugin: "cpu", kind: "availability",
                         fields: [Field("available", .bool(false)), Field("reason", .string("no /proc/stat"))])
        #expect(e.observe(gone, now: 2 * Self.s).map { Self.text($0[field: "state"]) } == ["stale"])
        #expect(e.heartbeat(monitor: "cpu", now: 3 * Self.s, wallTime: 3 * Self.s).isEmpty)
        #expect(e.state(of: Self.usage) == .stale)
        // Available again: the next successful poll restores the last value's state.
        var back = gone
        back.fields = [Field("available", .bool(true)), Field("reason", .string(""))]
        #expect(e.observe(back, now: 4 * Self.s).isEmpty)
        #expect(e.heartbeat(monitor: "cpu", now: 5 * Self.s, wallTime: 5 * Self.s).map { Self.text($0[field: "state"]) } == ["critical"])
        // A monitor that failed or finished.
        #expect(e.unavailable(monitor: "cpu", now: 6 * Self.s, wallTime: 6 * Self.s).count == 1)
    }

    @Test func notANumberIsNotAValue() {
        var e = Self.engine([Self.cpuThreshold()])
        _ = e.observe(Self.sample(0.99, at: 1), now: 1 * Self.s)
        #expect(e.observe(Self.sample(.nan, at: 2), now: 2 * Self.s).isEmpty)
        _ = e.unavailable(monitor: "cpu", now: 3 * Self.s, wallTime: 0)
        _ = e.observe(Event(time: 0, monitor: "cpu", plugin: "cpu", kind: "availability", fields: [Field("available", .bool(true))]),
                      now: 4 * Self.s)
        // The last real value was critical, not NaN.
        #expect(e.heartbeat(monitor: "cpu", now: 5 * Self.s, wallTime: 0).map { Self.text($0[field: "state"]) } == ["critical"])
    }

    @Test func staleFromTheStartWhenNothingEverArrives() {
        var e = Self.engine([Self.cpuThreshold(staleAfter: 3 * Self.s)])
        #expect(e.nextDeadline == 3 * Self.s)
        #expect(e.advance(to: 3 * Self.s, wallTime: 3 * Self.s).map { Self.text($0[field: "previous"]) } == ["nominal"])
        // A heartbeat without any value ever seen leaves it stale.
        #expect(e.heartbeat(monitor: "cpu", now: 4 * Self.s, wallTime: 4 * Self.s).isEmpty)
        #expect(e.state(of: Self.usage) == .stale)
    }

    @Test func perKeepsOneStatePerEntity() {
        let level = ValueRef(monitor: "power", kind: "battery", field: "level")
        var e = Self.engine([ThresholdSpec(ref: level, per: ["name"], critical: ThresholdLimit(.below, 10))])
        func battery(_ name: String, _ v: Int64, _ t: Int64) -> [Event] {
            e.observe(Event(time: t * Self.s, monitor: "power", plugin: "power", kind: "battery",
                            fields: [Field("name", .string(name)), Field("level", .int(v))]), now: t * Self.s)
        }
        #expect(battery("BAT0", 5, 1).map { $0[field: "name"] } == [.string("BAT0")])
        #expect(battery("BAT1", 80, 2).isEmpty)  // BAT1 is nominal; BAT0 stays critical
        #expect(battery("BAT0", 5, 3).isEmpty)
        #expect(e.state(of: level, per: [.string("BAT0")]) == .critical)
        #expect(e.state(of: level, per: [.string("BAT1")]) == .nominal)
    }

    @Test func eventsOfOtherKindsOrWithoutTheFieldAreIgnored() {
        var e = Self.engine([Self.cpuThreshold()])
        #expect(e.observe(Event(time: 0, monitor: "cpu", plugin: "cpu", kind: "core", fields: [Field("usage", .double(0.99))]),
                          now: 0).isEmpty)
        #expect(e.observe(Event(time: 0, monitor: "cpu", plugin: "cpu", kind: "sample", fields: [Field("user", .double(0.99))]),
                          now: 0).isEmpty)
        #expect(e.observe(Self.sample(0.99, monitor: "cpu2"), now: 0).isEmpty)
        #expect(e.state(of: Self.usage) == .nominal)
    }

    // MARK: rules

    static func compare(_ monitor: String, _ kind: String, _ field: String, _ op: ComparisonOperator, _ literal: Literal)
        -> ConditionTree<RuleComparison> {
        .leaf(RuleComparison(ref: ValueRef(monitor: monitor, kind: kind, field: field), op: op, literal: literal,
                             name: "\(monitor).\(field)"))
    }

    /// The low-power-danger rule.
    static let danger = RuleSpec(name: "low-power-danger", condition: .all([
        compare("power", "battery", "level", .less, .number(20)),
        compare("power", "battery", "state", .equal, .string("discharging")),
        .any([compare("thermal", "summary", "state", .equal, .string("serious")),
              compare("thermal", "summary", "state", .equal, .string("critical"))]),
    ]), severity: .critical)

    static func battery(_ level: Int64, _ state: String, at t: Int64) -> Event {
        Event(time: t * s, monitor: "power", plugin: "power", kind: "battery",
              fields: [Field("name", .string("BAT0")), Field("level", .int(level)), Field("state", .string(state))])
    }

    static func thermal(_ state: String, at t: Int64) -> Event {
        Event(time: t * s, monitor: "thermal", plugin: "thermal", kind: "summary",
              fields: [Field("state", .string(state)), Field("temperature", .double(80))])
    }

    @Test func nestedRuleTransitionsWithTheValuesThatMadeIt() throws {
        var e = ConditionEngine(thresholds: [], rules: [Self.danger], plugins: [:])
        #expect(e.start(now: 0, wallTime: 0).isEmpty)  // no values: false, and nothing said
        #expect(e.observe(Self.battery(15, "discharging", at: 1), now: 1 * Self.s).isEmpty)  // thermal unknown: false
        #expect(e.observe(Self.thermal("fair", at: 2), now: 2 * Self.s).isEmpty)
        let on = try #require(e.observe(Self.thermal("serious", at: 3), now: 3 * Self.s).first)
        #expect(on.kind == "rule" && on.monitor == "low-power-danger" && on.plugin == "vigil" && on.severity == .critical)
        #expect(on.fields == [Field("active", .bool(true)), Field("power.level", .int(15)),
                              Field("power.state", .string("discharging")), Field("thermal.state", .string("serious"))])
        // Still true through the other branch of `any`: nothing new.
        #expect(e.observe(Self.thermal("critical", at: 4), now: 4 * Self.s).isEmpty)
        let off = try #require(e.observe(Self.battery(15, "charging", at: 5), now: 5 * Self.s).first)
        #expect(off[field: "active"] == .bool(false) && off.severity == .notice && off[field: "power.state"] == .string("charging"))
        #expect(!e.isActive(rule: "low-power-danger"))
    }

    @Test func aRuleAlreadyTrueAtSetupFiresAtStart() {
        // `none` of comparisons that have no value yet is true.
        let quiet = RuleSpec(name: "no-alarm", condition: .none([Self.compare("power", "battery", "low", .equal, .bool(true))]))
        var e = ConditionEngine(thresholds: [], rules: [quiet], plugins: [:])
        let events = e.start(now: 0, wallTime: 42)
        #expect(events.map { $0[field: "active"] } == [.bool(true)] && events.first?.time == 42)
        #expect(events.first?.fields.count == 1)  // no value read yet
    }

    @Test func aRuleTrueWhenTheFirstValuesArriveFiresThen() {
        var e = ConditionEngine(thresholds: [], rules: [Self.danger], plugins: [:])
        _ = e.start(now: 0, wallTime: 0)
        #expect(e.observe(Self.thermal("critical", at: 0), now: 0).isEmpty)
        #expect(e.observe(Self.battery(5, "discharging", at: 0), now: 0).count == 1)
    }

    @Test func forDelaysActivationNotDeactivation() {
        var rule = Self.danger
        rule.holdFor = 10 * Self.s
        var e = ConditionEngine(thresholds: [], rules: [rule], plugins: [:])
        _ = e.start(now: 0, wallTime: 0)
        _ = e.observe(Self.thermal("serious", at: 1), now: 1 * Self.s)
        #expect(e.observe(Self.battery(10, "discharging", at: 2), now: 2 * Self.s).isEmpty)
        #expect(e.nextDeadline == 12 * Self.s)
        #expect(e.advance(to: 11 * Self.s, wallTime: 11 * Self.s).isEmpty)
        #expect(e.advance(to: 12 * Self.s, wallTime: 12 * Self.s).map { $0[field: "active"] } == [.bool(true)])
        #expect(e.observe(Self.thermal("fair", at: 13), now: 13 * Self.s).map { $0[field: "active"] } == [.bool(false)])
        // True again, then false before the hold is over: never active.
        _ = e.observe(Self.thermal("critical", at: 20), now: 20 * Self.s)
        _ = e.observe(Self.thermal("nominal", at: 25), now: 25 * Self.s)
        #expect(e.nextDeadline == nil)
        #expect(e.advance(to: 40 * Self.s, wallTime: 40 * Self.s).isEmpty)
    }

    @Test func onlyRulesReadingAChangedValueAreEvaluated() {
        // An unchanged value re-sent (a sample) makes no event, and a value of
        // another monitor reaches no rule.
        var e = ConditionEngine(thresholds: [], rules: [Self.danger], plugins: [:])
        _ = e.start(now: 0, wallTime: 0)
        _ = e.observe(Self.thermal("serious", at: 1), now: 1 * Self.s)
        #expect(e.observe(Self.battery(5, "discharging", at: 2), now: 2 * Self.s).count == 1)
        #expect(e.observe(Self.battery(5, "discharging", at: 3), now: 3 * Self.s).isEmpty)
        #expect(e.observe(Self.sample(0.9, at: 4), now: 4 * Self.s).isEmpty)
        #expect(!e.watchedMonitors.contains("cpu"))
    }

    @Test func comparisonsOfEachType() {
        func holds(_ op: ComparisonOperator, _ literal: Literal, _ value: FieldValue?) -> Bool {
            RuleComparison(ref: Self.usage, op: op, literal: literal, name: "x").holds(for: value)
        }
        #expect(holds(.less, .number(20), .int(19)) && !holds(.less, .number(20), .int(20)))
        #expect(holds(.lessOrEqual, .number(20), .int(20)) && holds(.greaterOrEqual, .number(0.5), .double(0.5)))
        #expect(holds(.greater, .number(-1), .double(0)) && holds(.notEqual, .number(1), .double(1.5)))
        #expect(holds(.equal, .string("on"), .string("on")) && holds(.notEqual, .string("on"), .string("off")))
        #expect(holds(.equal, .bool(false), .bool(false)) && !holds(.less, .bool(true), .bool(false)))
        #expect(!holds(.equal, .string("1"), .int(1)))  // another type: false, not an error
        #expect(!holds(.less, .number(1), nil))  // no value yet: false
        #expect(!holds(.notEqual, .number(1), nil))  // even for !=
        #expect(!holds(.greater, .number(0), .double(.nan)))
    }

    @Test func thresholdsAndRulesTogether() {
        let rule = RuleSpec(name: "hot-cpu", condition: Self.compare("cpu", "sample", "usage", .greater, .number(0.9)))
        var e = ConditionEngine(thresholds: [Self.cpuThreshold()], rules: [rule], plugins: ["cpu": "cpu"])
        _ = e.start(now: 0, wallTime: 0)
        let events = e.observe(Self.sample(0.97, at: 1), now: 1 * Self.s)
        #expect(events.map(\.kind) == ["threshold", "rule"])
    }
}
