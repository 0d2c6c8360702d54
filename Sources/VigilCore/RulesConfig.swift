/// A monitor's threshold on one numeric field, as the manifest writes it:
///
///     thresholds:
///       usage:
///         warning:  { above: 0.80, clear_below: 0.70 }
///         critical: { above: 0.95, clear_below: 0.90 }
///         for: 30s
///         hits: 3
///         stale_after: 3
public struct ThresholdConfig: Sendable {
    /// `FIELD`, or `KIND.FIELD` where the plugin has the field in several kinds.
    public var field: String
    public var warning: ThresholdLimit?
    public var critical: ThresholdLimit?
    /// How long a new state must hold before it is taken (ns; 0: no wait).
    public var holdFor: Int64 = 0
    /// How many consecutive values must agree on a new state (0: no count).
    /// With both, whichever is reached first.
    public var hits: Int = 0
    /// Without a value (or, for a polled monitor, a successful poll) this
    /// long, the state is `stale`.
    public var staleAfter: Staleness?
    /// Fields of the event that name the entity (`name` for batteries, `cpu`
    /// for cores): one state per distinct value. Empty: one state for the field.
    public var per: [String] = []
    public var location: SourceLocation

    public init(field: String, location: SourceLocation) {
        self.field = field
        self.location = location
    }
}

/// One level of a threshold: when it is entered and when it is left.
public struct ThresholdLimit: Sendable, Equatable {
    public enum Direction: String, Sendable {
        /// High is bad: entered above `value`, left below `clear`.
        case above
        /// Low is bad: entered below `value`, left above `clear`.
        case below
    }

    public var direction: Direction
    public var value: Double
    /// The value the field must pass back over to leave the level: the
    /// hysteresis. Equal to `value` when not written.
    public var clear: Double

    public init(_ direction: Direction, _ value: Double, clear: Double? = nil) {
        self.direction = direction
        self.value = value
        self.clear = clear ?? value
    }

    /// The value enters this level (strictly past the limit).
    public func triggers(_ v: Double) -> Bool { direction == .above ? v > value : v < value }

    /// The value leaves this level (strictly back past the clear value).
    public func clears(_ v: Double) -> Bool { direction == .above ? v < clear : v > clear }
}

public enum Staleness: Sendable, Equatable {
    /// Intervals of the monitor (polled monitors only).
    case intervals(Int)
    case duration(Int64)
}

/// A rule of the manifest, its condition still as written.
public struct RuleConfig: Sendable {
    public var name: String
    public var condition: ConditionTree<ParsedComparison>
    public var severity: Severity = .warning
    /// How long the condition must hold before the rule is active (ns).
    public var holdFor: Int64 = 0
    public var exec: ExecConfig?
    public var location: SourceLocation

    public init(name: String, condition: ConditionTree<ParsedComparison>, location: SourceLocation) {
        self.name = name
        self.condition = condition
        self.location = location
    }
}

/// A program a rule runs when it changes state.
public struct ExecConfig: Sendable, Equatable {
    public enum Trigger: String, Sendable, CaseIterable {
        case activate, deactivate, both
    }

    /// argv[0] is a path, or a name looked up in PATH; no shell is involved.
    public var argv: [String]
    public var timeout: Int64 = 10_000_000_000
    /// The least time between the starts of two runs.
    public var minGap: Int64 = 0
    public var on: Trigger = .activate
    public var location: SourceLocation

    public init(argv: [String], location: SourceLocation) {
        self.argv = argv
        self.location = location
    }

    public func runs(whenActive active: Bool) -> Bool {
        switch on {
        case .both: true
        case .activate: active
        case .deactivate: !active
        }
    }
}

// MARK: - reading them from the manifest

extension ManifestLoader {
    static let thresholdKeys = ["warning", "critical", "for", "hits", "stale_after", "per"]
    static let limitKeys = ["above", "below", "clear_below", "clear_above"]
    static let ruleKeys = ["all", "any", "none", "condition", "severity", "for", "exec", "exec_timeout", "exec_min_gap", "exec_on"]

    func loadThresholds(_ node: ConfigNode, monitor: String, _ d: inout Diags) -> [ThresholdConfig] {
        var result: [ThresholdConfig] = []
        for entry in d.entries(of: node, mustBe: "'thresholds' of monitor '\(monitor)' must map field names to levels",
                               hint: "thresholds: { usage: { warning: { above: 0.8 } } }") {
            let name = entry.key.text
            guard !name.isEmpty, !name.hasPrefix("."), !name.hasSuffix("."), name.split(separator: ".").count <= 2 else {
                d.error(entry.key.location, "'\(name)' is not a field: write FIELD or KIND.FIELD")
                continue
            }
            guard case .mapping(let fields, _) = entry.value else {
                d.error(entry.value.location, "threshold '\(name)' of monitor '\(monitor)' must be a mapping with 'warning:' or 'critical:', not \(entry.value.kindName)")
                continue
            }
            let keys = Keys(fields, context: "threshold '\(name)'", known: Self.thresholdKeys)
            keys.reportUnknown(into: &d)
            var threshold = ThresholdConfig(field: name, location: entry.key.location)
            if let w = keys["warning"] { threshold.warning = limit(w, level: "warning", &d) }
            if let c = keys["critical"] { threshold.critical = limit(c, level: "critical", &d) }
            if keys["warning"] == nil && keys["critical"] == nil {
                d.error(entry.key.location, "threshold '\(name)' has neither 'warning' nor 'critical'",
                        hint: "critical: { above: 90, clear_below: 85 }")
            }
            if let w = threshold.warning, let c = threshold.critical, let at = keys["critical"]?.location {
                if w.direction != c.direction {
                    d.error(at, "threshold '\(name)': critical is '\(c.direction.rawValue)' but warning is '\(w.direction.rawValue)'; both must bound the same side")
                } else if w.direction == .above ? c.value < w.value : c.value > w.value {
                    d.error(at, "threshold '\(name)': critical (\(c.value)) is not past warning (\(w.value))",
                            hint: w.direction == .above ? "critical must be at or above warning" : "critical must be at or below warning")
                }
            }
            if let f = keys["for"], let ns = d.duration(f, what: "'for'") { threshold.holdFor = ns }
            if let h = keys["hits"], let n = d.int(h, what: "'hits'", in: 1...1_000_000) {
                threshold.hits = Int(n)
            }
            if let s = keys["stale_after"] {
                if let text = s.scalar?.text, !text.isEmpty, text.allSatisfy({ ("0"..."9").contains($0) || $0 == "_" }) {
                    if let n = d.int(s, what: "'stale_after'", in: 1...1_000_000, unit: " intervals") { threshold.staleAfter = .intervals(Int(n)) }
                } else if let ns = d.duration(s, what: "'stale_after'", atLeast: 1_000_000) {
                    threshold.staleAfter = .duration(ns)
                }
            }
            if let p = keys["per"] { threshold.per = d.stringList(p, what: "'per'") }
            result.append(threshold)
        }
        return result
    }

    private func limit(_ node: ConfigNode, level: String, _ d: inout Diags) -> ThresholdLimit? {
        guard case .mapping(let fields, _) = node else {
            d.error(node.location, "'\(level)' must be a mapping like { above: 90, clear_below: 85 }, not \(node.kindName)")
            return nil
        }
        let keys = Keys(fields, context: "'\(level)'", known: Self.limitKeys)
        keys.reportUnknown(into: &d)
        let above = keys["above"], below = keys["below"]
        func number(_ n: ConfigNode, _ what: String) -> Double? {
            guard case .scalar(let s) = n, !s.quoted, let v = s.double, v.isFinite else {
                d.error(n.location, "'\(what)' must be a number, not \(n.kindName)\(n.scalar.map { " '\($0.text)'" } ?? "")")
                return nil
            }
            return v
        }
        switch (above, below) {
        case (nil, nil):
            d.error(node.location, "'\(level)' needs 'above' or 'below'")
            return nil
        case (.some, .some):
            d.error(node.location, "'\(level)' has both 'above' and 'below'; a level bounds one side",
                    hint: "for a range, put the low side in a second threshold on KIND.FIELD")
            return nil
        case (let a?, nil):
            if let wrong = keys["clear_above"] { d.error(wrong.location, "'clear_above' goes with 'below'; an 'above' level clears with 'clear_below'") }
            guard let v = number(a, "above") else { return nil }
            var clear: Double?
            if let c = keys["clear_below"] {
                clear = number(c, "clear_below")
                if let x = clear, x > v { d.error(c.location, "'clear_below' (\(x)) must be at or below 'above' (\(v))") }
            }
            return ThresholdLimit(.above, v, clear: clear)
        case (nil, let b?):
            if let wrong = keys["clear_below"] { d.error(wrong.location, "'clear_below' goes with 'above'; a 'below' level clears with 'clear_above'") }
            guard let v = number(b, "below") else { return nil }
            var clear: Double?
            if let c = keys["clear_above"] {
                clear = number(c, "clear_above")
                if let x = clear, x < v { d.error(c.location, "'clear_above' (\(x)) must be at or above 'below' (\(v))") }
            }
            return ThresholdLimit(.below, v, clear: clear)
        }
    }

    func loadRules(_ node: ConfigNode, _ d: inout Diags) -> [RuleConfig] {
        var result: [RuleConfig] = []
        for entry in d.entries(of: node, mustBe: "'rules' must map rule names to conditions") {
            let name = entry.key.text
            guard d.checkName(entry.key, what: "rule") else { continue }
            guard case .mapping(let fields, _) = entry.value else {
                d.error(entry.value.location, "rule '\(name)' must be a mapping with 'all:', 'any:', 'none:' or 'condition:', not \(entry.value.kindName)")
                continue
            }
            let keys = Keys(fields, context: "rule '\(name)'", known: Self.ruleKeys)
            keys.reportUnknown(into: &d)
            let combinators = fields.filter { ["all", "any", "none", "condition"].contains($0.key.text) }
            guard combinators.count == 1, let top = combinators.first else {
                d.error(entry.key.location, combinators.isEmpty
                        ? "rule '\(name)' has no condition: give it 'all:', 'any:', 'none:' or 'condition:'"
                        : "rule '\(name)' has \(combinators.map { "'\($0.key.text)'" }.joined(separator: " and ")); give it one, and nest the others",
                        hint: "all: [ power.level < 20, { any: [ thermal.state == \"serious\", thermal.state == \"critical\" ] } ]")
                continue
            }
            guard let condition = combinator(top.key.text, top.value, &d) else { continue }
            var rule = RuleConfig(name: name, condition: condition, location: entry.key.location)
            if let s = keys["severity"] { rule.severity = d.severity(s, what: "'severity'") ?? .warning }
            if let f = keys["for"], let ns = d.duration(f, what: "'for'") { rule.holdFor = ns }
            if let e = keys["exec"] {
                let argv = d.stringList(e, what: "'exec'")
                if argv.isEmpty || argv[0].isEmpty {
                    d.error(e.location, "'exec' needs a program: a list like [\"/usr/local/bin/notify\", \"text\"]")
                } else {
                    var exec = ExecConfig(argv: argv, location: e.location)
                    if case .scalar = e {
                        d.warning(e.location, "'exec' is one string, run as one program name without a shell",
                                  hint: "write a list: [\"/usr/local/bin/notify\", \"low power\"]")
                    }
                    if let t = keys["exec_timeout"], let ns = d.duration(t, what: "'exec_timeout'", atLeast: 1_000_000) {
                        exec.timeout = ns
                    }
                    if let g = keys["exec_min_gap"], let ns = d.duration(g, what: "'exec_min_gap'") { exec.minGap = ns }
                    if let o = keys["exec_on"] {
                        exec.on = d.choice(o, what: "'exec_on'", of: ExecConfig.Trigger.self) ?? .activate
                    }
                    rule.exec = exec
                }
            } else {
                for key in ["exec_timeout", "exec_min_gap", "exec_on"] {
                    if let n = keys[key] { d.error(n.location, "'\(key)' without 'exec'") }
                }
            }
            result.append(rule)
        }
        return result
    }

    /// `all:`/`any:`/`none:` with a list (or one item), or `condition:` with one comparison.
    private func combinator(_ key: String, _ node: ConfigNode, _ d: inout Diags) -> ConditionTree<ParsedComparison>? {
        if key == "condition" { return item(node, &d) }
        let items: [ConfigNode]
        switch node {
        case .sequence(let list, _): items = list
        case .scalar(let s) where s.isNull:
            d.error(node.location, "'\(key)' is empty: list the conditions it combines")
            return nil
        default: items = [node]
        }
        var children: [ConditionTree<ParsedComparison>] = []
        var ok = true
        for i in items {
            if let child = item(i, &d) { children.append(child) } else { ok = false }
        }
        guard ok else { return nil }
        switch key {
        case "all": return .all(children)
        case "any": return .any(children)
        default: return .none(children)
        }
    }

    /// A comparison string, or a mapping with one of all/any/none.
    private func item(_ node: ConfigNode, _ d: inout Diags) -> ConditionTree<ParsedComparison>? {
        switch node {
        case .scalar(let s) where !s.isNull:
            // The text starts one column after the scalar's quote, if it has one.
            // Columns inside the text are exact for one-line scalars without
            // escapes; otherwise diagnostics point at the scalar itself.
            var textStart = s.location
            let exact = !s.text.contains("\\") && !s.text.contains("\n")
            if s.quoted && exact { textStart.column += 1 }
            switch ConditionParser.parse(s.text, at: textStart) {
            case .success(let c): return .leaf(c)
            case .failure(let e):
                var at = textStart
                if exact { at.column += e.offset }
                d.error(at, "in condition '\(s.text)': \(e.message)")
                return nil
            }
        case .mapping(let entries, let at):
            guard entries.count == 1, let only = entries.first, ["all", "any", "none"].contains(only.key.text) else {
                d.error(at, "a nested condition is a mapping with one key, all, any or none, like { any: [a.x > 1, b.y == \"on\"] }")
                return nil
            }
            return combinator(only.key.text, only.value, &d)
        default:
            d.error(node.location, "a condition is a comparison like 'power.level < 20' or { all|any|none: [...] }, not \(node.kindName)")
            return nil
        }
    }
}
