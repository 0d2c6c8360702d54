import Testing
@testable import VigilCore

/// `thresholds:` and `rules:` in a manifest: what is read, and what is
/// reported where, before and after the plugins' self-descriptions are known.
@Suite struct RulesManifestTests {
    static let manifest = """
        monitors:
          cpu:
            plugin: cpu
            interval: 1s
            thresholds:
              usage:
                warning:  { above: 0.80, clear_below: 0.70 }
                critical: { above: 0.95, clear_below: 0.90 }
                for: 30s
                hits: 3
                stale_after: 3
          power:
            plugin: power
            thresholds:
              level: { critical: { below: 10, clear_above: 15 } }
          thermal: { plugin: thermal }
        rules:
          low-power-danger:
            all:
              - power.level < 20
              - power.state == "discharging"
              - any: [ thermal.state == "serious", thermal.state == 'critical' ]
            severity: critical
            for: 10s
            exec: ["/usr/local/bin/notify", "low power and hot"]
        sinks:
          journal: { type: file, path: /tmp/j.jsonl, match: ["*/threshold", "*/rule"] }
        """

    @Test func readsThresholdsAndRules() throws {
        let (m, diagnostics) = load(Self.manifest)
        #expect(diagnostics.isEmpty, "\(diagnostics)")
        let manifest = try #require(m)
        let cpu = try #require(manifest.monitors.first?.thresholds.first)
        #expect(cpu.field == "usage" && cpu.holdFor == 30_000_000_000 && cpu.hits == 3 && cpu.staleAfter == .intervals(3))
        #expect(cpu.warning == ThresholdLimit(.above, 0.8, clear: 0.7) && cpu.critical == ThresholdLimit(.above, 0.95, clear: 0.9))
        #expect(cpu.location == loc(6, 7))
        let power = try #require(manifest.monitors[1].thresholds.first)
        #expect(power.critical == ThresholdLimit(.below, 10, clear: 15) && power.warning == nil)

        let rule = try #require(manifest.rules.first)
        #expect(rule.name == "low-power-danger" && rule.severity == .critical && rule.holdFor == 10_000_000_000)
        #expect(rule.exec?.argv == ["/usr/local/bin/notify", "low power and hot"] && rule.exec?.on == .activate)
        #expect(rule.condition.leaves.map(\.text)
                == ["power.level < 20", "power.state == \"discharging\"", "thermal.state == \"serious\"", "thermal.state == 'critical'"])
        #expect(rule.condition.leaves.map(\.literal) == [.number(20), .string("discharging"), .string("serious"), .string("critical")])
        #expect(rule.condition.leaves[0].location == loc(20, 9))
        guard case .all(let items) = rule.condition, items.count == 3, case .any(let inner) = items[2] else {
            Issue.record("not all[…, any[…]]: \(rule.condition)")
            return
        }
        #expect(inner.count == 2)
    }

    @Test func parseErrorsAtTheirColumn() {
        let (_, d) = load("""
            monitors: { power: { plugin: power } }
            rules:
              a: { condition: "power.level = 20" }
              b:
                any:
                  - power.level < twenty
                  - power level < 3
                  - power.state == "open
              c: { all: [ power.level < 20 and power.state == "x" ] }
            sinks: { out: { type: null } }
            """)
        expectDiagnostic(d, at: 3, 32, "expected a comparison (< <= > >= == !=) after 'power.level', found '=' ('=' is written '==')")
        expectDiagnostic(d, at: 6, 23, "'twenty' is not a number, a quoted string, true or false")
        expectDiagnostic(d, at: 7, 9, "'power' names no field")
        expectDiagnostic(d, at: 8, 24, "a string that is not closed")
        expectDiagnostic(d, at: 9, 32, "unexpected 'a' after the comparison")
    }

    @Test func structuralErrors() {
        let (_, d) = load("""
            monitors:
              cpu:
                plugin: cpu
                thresholds:
                  usage: { warning: { above: 0.9, below: 0.1 } }
                  user: { critical: { above: high } }
                  system: { warning: { above: 0.9, clear_below: 0.95 } }
                  idle: { warning: { below: 0.5 }, critical: { below: 0.6 } }
                  steal: { for: 10s }
                  iowait: { warning: { above: 0.5, clear_above: 0.4 }, hits: 0 }
            rules:
              cpu: { condition: "cpu.usage > 0.5" }
              empty: { severity: critical }
              two: { all: [ cpu.usage > 1 ], any: [ cpu.usage > 2 ] }
              bad-exec: { condition: "cpu.usage > 1", exec: [] }
              stray: { condition: "cpu.usage > 1", exec_timeout: 5s }
            sinks: { out: { type: null } }
            """)
        expectDiagnostic(d, at: 5, 25, "'warning' has both 'above' and 'below'")
        expectDiagnostic(d, at: 6, 34, "'above' must be a number, not a string 'high'")
        expectDiagnostic(d, at: 7, 53, "'clear_below' (0.95) must be at or below 'above' (0.9)")
        expectDiagnostic(d, at: 8, 50, "threshold 'idle': critical (0.6) is not past warning (0.5)")
        expectDiagnostic(d, at: 9, 7, "threshold 'steal' has neither 'warning' nor 'critical'")
        expectDiagnostic(d, at: 10, 53, "'clear_above' goes with 'below'")
        expectDiagnostic(d, at: 10, 66, "'hits' must be between 1 and 1000000")
        expectDiagnostic(d, at: 12, 3, "rule 'cpu' has the name of a monitor")
        expectDiagnostic(d, at: 13, 3, "rule 'empty' has no condition")
        expectDiagnostic(d, at: 14, 3, "rule 'two' has 'all' and 'any'")
        expectDiagnostic(d, at: 15, 49, "'exec' needs a program")
        expectDiagnostic(d, at: 16, 54, "'exec_timeout' without 'exec'")
    }

    // MARK: against the plugins' self-descriptions

    static let cpu = PluginDescription(
        name: "cpu", version: "1", summary: "", abiMajor: 1, abiMinor: 2, options: [],
        events: [EventSpec(kind: "sample", doc: "", fields: [FieldSpec(name: "usage", type: .double), FieldSpec(name: "user", type: .double)]),
                 EventSpec(kind: "core", doc: "", fields: [FieldSpec(name: "cpu", type: .int), FieldSpec(name: "usage", type: .double)])],
        defaultInterval: 1_000_000_000, polled: true, path: "")
    static let power = PluginDescription(
        name: "power", version: "1", summary: "", abiMajor: 1, abiMinor: 2, options: [],
        events: [EventSpec(kind: "battery", doc: "", fields: [
            FieldSpec(name: "name", type: .string), FieldSpec(name: "level", type: .double),
            FieldSpec(name: "state", type: .string), FieldSpec(name: "low", type: .bool)])],
        defaultInterval: 10_000_000_000, polled: true, path: "")
    static let clock = PluginDescription(
        name: "clock", version: "1", summary: "", abiMajor: 1, abiMinor: 2, options: [],
        events: [EventSpec(kind: "step", doc: "", fields: [FieldSpec(name: "delta", type: .double)])],
        defaultInterval: 0, polled: false, path: "")

    func resolve(_ text: String) -> (thresholds: [ThresholdSpec], rules: [RuleSpec], diagnostics: [Diagnostic]) {
        let (m, loadDiagnostics) = load(text)
        #expect(loadDiagnostics.isEmpty, "\(loadDiagnostics)")
        guard let m else { return ([], [], []) }
        var infos: [String: ConditionResolver.MonitorInfo] = [:]
        for monitor in m.monitors {
            let d = ["cpu": Self.cpu, "power": Self.power, "clock": Self.clock][monitor.plugin]!
            infos[monitor.name] = .init(description: d, interval: monitor.interval ?? d.defaultInterval, enabled: monitor.enabled)
        }
        return ConditionResolver.resolve(m, monitors: infos)
    }

    @Test func resolvesKindsFieldsAndIntervals() throws {
        let r = resolve("""
            monitors:
              cpu:
                plugin: cpu
                interval: 2s
                thresholds:
                  usage: { warning: { above: 0.8 }, stale_after: 3 }
                  core.usage: { critical: { above: 0.99 }, per: [cpu] }
              power: { plugin: power }
            rules:
              r: { all: [ power.level < 20, power.battery.state == "discharging", power.low == true, power.available == false ] }
            sinks: { out: { type: null } }
            """)
        #expect(r.diagnostics.isEmpty, "\(r.diagnostics)")
        #expect(r.thresholds.map(\.ref) == [ValueRef(monitor: "cpu", kind: "sample", field: "usage"),
                                            ValueRef(monitor: "cpu", kind: "core", field: "usage")])
        #expect(r.thresholds[0].staleAfter == 6_000_000_000)  // 3 intervals of 2 s
        #expect(r.thresholds[1].per == ["cpu"])
        let refs = try #require(r.rules.first).condition.leaves.map(\.ref)
        #expect(refs.map(\.kind) == ["battery", "battery", "battery", "availability"])
        #expect(try #require(r.rules.first).condition.leaves.map(\.name)
                == ["power.level", "power.battery.state", "power.low", "power.available"])
    }

    @Test func unknownMonitorsFieldsAndWrongTypesAtTheirPlace() {
        let r = resolve("""
            monitors:
              cpu:
                plugin: cpu
                thresholds:
                  usgae: { warning: { above: 0.8 } }
                  disk.usage: { warning: { above: 0.8 } }
                  core.usage: { warning: { above: 0.8 }, per: [core] }
              power:
                plugin: power
                thresholds:
                  state: { warning: { above: 1 } }
              clock:
                plugin: clock
                thresholds:
                  delta: { warning: { above: 1 }, stale_after: 3 }
            rules:
              r1: { condition: "powr.level < 20" }
              r2: { condition: "power.levl < 20" }
              r3: { condition: "power.state < 3" }
              r4: { condition: "power.low > false" }
              r5: { all: [ power.level < 20, "cpu.usage > 'high'" ] }
            sinks: { out: { type: null } }
            """)
        let d = r.diagnostics
        expectDiagnostic(d, at: 5, 7, "monitor 'cpu' (plugin cpu) has no field 'usgae'", hint: .equals("did you mean 'usage'?"))
        expectDiagnostic(d, at: 6, 7, "monitor 'cpu' (plugin cpu) has no event kind 'disk'")
        expectDiagnostic(d, at: 7, 7, "'per' names 'core', which 'core' events do not have")
        expectDiagnostic(d, at: 11, 7, "the field is a string, and thresholds need a number")
        expectDiagnostic(d, at: 15, 7, "stale_after 3 counts intervals, and plugin 'clock' is not polled")
        expectDiagnostic(d, at: 17, 21, "'powr.level' names no monitor of this manifest", hint: .equals("did you mean 'power'?"))
        expectDiagnostic(d, at: 18, 21, "monitor 'power' (plugin power) has no field 'levl'")
        expectDiagnostic(d, at: 19, 21, "'power.state < 3': compares a string field with a number")
        expectDiagnostic(d, at: 20, 21, "'>' does not order booleans")
        expectDiagnostic(d, at: 21, 35, "'cpu.usage > 'high'': compares a double field with a string")
        #expect(r.thresholds.isEmpty && r.rules.isEmpty)
    }

    @Test func monitorNamesWithDotsAndDisabledMonitors() {
        let r = resolve("""
            monitors:
              web.1: { plugin: cpu }
              web: { plugin: power, enabled: false }
            rules:
              r: { all: [ web.1.usage > 0.5, web.1.core.cpu == 3, web.level < 5 ] }
            sinks: { out: { type: null } }
            """)
        #expect(r.rules.first?.condition.leaves.map(\.ref)
                == [ValueRef(monitor: "web.1", kind: "sample", field: "usage"), ValueRef(monitor: "web.1", kind: "core", field: "cpu"),
                    ValueRef(monitor: "web", kind: "battery", field: "level")])
        expectDiagnostic(r.diagnostics, at: 5, 55, "reads monitor 'web', which is disabled", level: .warning)
    }

    @Test func thresholdsOfDisabledMonitorsAreNotEvaluated() {
        let r = resolve("""
            monitors:
              cpu: { plugin: cpu, enabled: false, thresholds: { usage: { warning: { above: 0.8 } } } }
              power: { plugin: power, thresholds: { level: { critical: { below: 5 }, stale_after: 1000000 } } }
            sinks: { out: { type: null } }
            """)
        expectDiagnostic(r.diagnostics, at: 2, 53, "monitor 'cpu' is disabled: its thresholds are not evaluated", level: .warning)
        #expect(r.thresholds.map(\.ref.monitor) == ["power"])
        #expect(r.thresholds.first?.staleAfter == 10_000_000_000_000_000)  // 10^6 intervals of 10 s
    }

    @Test func staleAfterInIntervalsIsBoundedAndItsProductSaturates() throws {
        let (m, d) = load("""
            monitors:
              power: { plugin: power, thresholds: { level: { critical: { below: 5 }, stale_after: 10000000000 } } }
            sinks: { out: { type: null } }
            """)
        expectDiagnostic(d, at: 2, 87, "'stale_after' must be between 1 and 1000000 intervals, not 10000000000")
        // Past the manifest's bound, a count given in code still saturates: longer than the clock counts.
        var manifest = try #require(m)
        manifest.monitors[0].thresholds = [ThresholdConfig(field: "level", location: loc(2, 43))]
        manifest.monitors[0].thresholds[0].critical = ThresholdLimit(.below, 5)
        manifest.monitors[0].thresholds[0].staleAfter = .intervals(10_000_000_000)
        let r = ConditionResolver.resolve(manifest, monitors: ["power": .init(description: Self.power, interval: 10_000_000_000)])
        #expect(r.thresholds.first?.staleAfter == .max)
    }
}
