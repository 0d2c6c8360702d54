/// A field of one monitor's events: what thresholds watch and rules read.
public struct ValueRef: Hashable, Sendable, CustomStringConvertible {
    public var monitor: String
    public var kind: String
    public var field: String

    public init(monitor: String, kind: String, field: String) {
        self.monitor = monitor
        self.kind = kind
        self.field = field
    }

    public var description: String { "\(monitor).\(kind).\(field)" }
}

/// A threshold checked against its monitor's self-description.
public struct ThresholdSpec: Sendable {
    public var ref: ValueRef
    public var per: [String]
    public var warning: ThresholdLimit?
    public var critical: ThresholdLimit?
    public var holdFor: Int64
    public var hits: Int
    /// Nanoseconds, resolved from intervals where written so.
    public var staleAfter: Int64?

    public init(ref: ValueRef, per: [String] = [], warning: ThresholdLimit? = nil, critical: ThresholdLimit? = nil,
                holdFor: Int64 = 0, hits: Int = 0, staleAfter: Int64? = nil) {
        self.ref = ref
        self.per = per
        self.warning = warning
        self.critical = critical
        self.holdFor = holdFor
        self.hits = hits
        self.staleAfter = staleAfter
    }
}

/// One comparison of a rule, its reference resolved.
public struct RuleComparison: Sendable {
    public var ref: ValueRef
    public var op: ComparisonOperator
    public var literal: Literal
    /// The reference as written (`power.level`): the name of its value in rule events.
    public var name: String

    public init(ref: ValueRef, op: ComparisonOperator, literal: Literal, name: String) {
        self.ref = ref
        self.op = op
        self.literal = literal
        self.name = name
    }

    /// Whether `value` satisfies the comparison; false for a value of another type.
    public func holds(for value: FieldValue?) -> Bool {
        switch (value, literal) {
        case (.int(let v)?, .number(let n)): op.holds(Double(v), n)
        case (.double(let v)?, .number(let n)): !v.isNaN && op.holds(v, n)
        case (.string(let v)?, .string(let s)): op.holds(v, s)
        case (.bool(let v)?, .bool(let b)): op == .equal ? v == b : op == .notEqual ? v != b : false
        default: false
        }
    }
}

/// A rule checked against the monitors it reads.
public struct RuleSpec: Sendable {
    public var name: String
    public var condition: ConditionTree<RuleComparison>
    public var severity: Severity
    public var holdFor: Int64
    public var exec: ExecConfig?

    public init(name: String, condition: ConditionTree<RuleComparison>, severity: Severity = .warning,
                holdFor: Int64 = 0, exec: ExecConfig? = nil) {
        self.name = name
        self.condition = condition
        self.severity = severity
        self.holdFor = holdFor
        self.exec = exec
    }
}

/// Checks a manifest's thresholds and rules against its monitors' plugins:
/// unknown monitors, kinds and fields, fields of the wrong type, and
/// intervals a push monitor does not have, each at its line and column.
public enum ConditionResolver {
    /// What the resolver needs to know of one monitor whose plugin loaded.
    public struct MonitorInfo: Sendable {
        public var description: PluginDescription
        /// The interval the monitor polls at (its own or the plugin's default).
        public var interval: Int64
        public var enabled: Bool
        /// The names of the fields beyond those declared, for kinds with
        /// dynamic fields (`EventSpec.dynamicFields`); nil when they cannot be
        /// known before the monitor runs.
        public var dynamicFields: [String]?

        public init(description: PluginDescription, interval: Int64, enabled: Bool = true, dynamicFields: [String]? = nil) {
            self.description = description
            self.interval = interval
            self.enabled = enabled
            self.dynamicFields = dynamicFields
        }
    }

    /// The option that names a plugin's dynamic fields, by convention: a json
    /// option `fields` holding a list of names (the ffi plugin's). A plugin
    /// whose kinds have dynamic fields and no such option gets nil: its
    /// fields cannot be checked before it runs.
    public static let dynamicFieldsOption = "fields"

    /// The dynamic field names `monitor` gives its plugin, when they can be
    /// known from its options (see `dynamicFieldsOption`).
    public static func dynamicFields(of monitor: MonitorConfig, plugin: PluginDescription) -> [String]? {
        guard plugin.events.contains(where: \.dynamicFields),
              let spec = plugin.options.first(where: { $0.name == dynamicFieldsOption && $0.type == .json }) else { return nil }
        let node: ConfigNode
        if let written = monitor.options.first(where: { $0.key.text == dynamicFieldsOption })?.value {
            node = written
        } else if let text = spec.defaultText, case (let parsed?, let problems) = ConfigParser(file: "", environment: [:]).parse(text),
                  problems.isEmpty {
            node = parsed
        } else {
            return []
        }
        guard case .sequence(let items, _) = node else { return nil }  // the plugin refuses it when created
        let names = items.compactMap { $0.scalar.flatMap { $0.isNull ? nil : $0.text } }
        return names.count == items.count ? names : nil
    }

    /// Resolves every threshold and rule. Monitors missing from `monitors`
    /// (their plugin did not load: already reported) are not checked; a rule
    /// reading one keeps a reference that never gets a value.
    public static func resolve(_ manifest: Manifest, monitors: [String: MonitorInfo])
        -> (thresholds: [ThresholdSpec], rules: [RuleSpec], diagnostics: [Diagnostic]) {
        var diagnostics: [Diagnostic] = []
        var thresholds: [ThresholdSpec] = []
        for monitor in manifest.monitors {
            guard let info = monitors[monitor.name] else { continue }
            if !info.enabled, let first = monitor.thresholds.first {
                diagnostics.append(Diagnostic(.warning, at: first.location,
                                              "monitor '\(monitor.name)' is disabled: its thresholds are not evaluated"))
                continue
            }
            for t in monitor.thresholds {
                if let spec = resolve(t, monitor: monitor.name, info, &diagnostics) { thresholds.append(spec) }
            }
        }
        var rules: [RuleSpec] = []
        let names = manifest.monitors.map(\.name)
        for rule in manifest.rules {
            var failed = false
            var warned: Set<String> = []
            let condition = rule.condition.map { c -> RuleComparison in
                guard let r = resolve(c, names: names, monitors: monitors, &diagnostics) else {
                    failed = true
                    return RuleComparison(ref: ValueRef(monitor: "", kind: "", field: ""), op: c.op, literal: c.literal, name: c.referenceText)
                }
                if let info = monitors[r.ref.monitor], !info.enabled, warned.insert(r.ref.monitor).inserted {
                    diagnostics.append(Diagnostic(.warning, at: c.location,
                                                  "rule '\(rule.name)' reads monitor '\(r.ref.monitor)', which is disabled: this comparison is never true"))
                }
                return r
            }
            guard !failed else { continue }
            rules.append(RuleSpec(name: rule.name, condition: condition, severity: rule.severity, holdFor: rule.holdFor, exec: rule.exec))
        }
        return (thresholds, rules, diagnostics)
    }

    /// The kinds a monitor's events have: the plugin's and the host's.
    static func kinds(_ d: PluginDescription) -> [EventSpec] { d.events + PluginDescription.hostKinds }

    private static func resolve(_ t: ThresholdConfig, monitor: String, _ info: MonitorInfo,
                                _ diagnostics: inout [Diagnostic]) -> ThresholdSpec? {
        let parts = t.field.split(separator: ".").map(String.init)
        guard let (spec, field) = find(parts, in: info, monitor: monitor, at: t.location, &diagnostics) else { return nil }
        if let type = field?.type, type != .int && type != .double {
            diagnostics.append(Diagnostic(at: t.location, "threshold on '\(t.field)' of monitor '\(monitor)': the field is \(type.withArticle), and thresholds need a number",
                                          hint: "compare it in a rule instead: \(monitor).\(t.field) == …"))
            return nil
        }
        for name in t.per where !spec.dynamicFields && !spec.fields.contains(where: { $0.name == name }) {
            diagnostics.append(Diagnostic(at: t.location, "threshold on '\(t.field)' of monitor '\(monitor)': 'per' names '\(name)', which '\(spec.kind)' events do not have",
                                          hint: Suggest.hint(for: name, in: spec.fields.map(\.name))))
            return nil
        }
        var staleAfter: Int64?
        switch t.staleAfter {
        case .intervals(let n)?:
            guard info.description.polled else {
                diagnostics.append(Diagnostic(at: t.location, "threshold on '\(t.field)' of monitor '\(monitor)': stale_after \(n) counts intervals, and plugin '\(info.description.name)' is not polled",
                                              hint: "give a duration: stale_after: 5m"))
                return nil
            }
            let (ns, overflow) = Int64(n).multipliedReportingOverflow(by: info.interval)
            staleAfter = overflow ? .max : ns  // longer than the clock counts: never
        case .duration(let ns)?: staleAfter = ns
        case nil: break
        }
        return ThresholdSpec(ref: ValueRef(monitor: monitor, kind: spec.kind, field: field?.name ?? parts.last!), per: t.per,
                             warning: t.warning, critical: t.critical, holdFor: t.holdFor, hits: t.hits, staleAfter: staleAfter)
    }

    /// `[FIELD]` or `[KIND, FIELD]` in a plugin's description: the kind, and
    /// the field (nil for a kind whose fields are named by options).
    private static func find(_ parts: [String], in info: MonitorInfo, monitor: String, at: SourceLocation,
                             _ diagnostics: inout [Diagnostic]) -> (EventSpec, FieldSpec?)? {
        let d = info.description
        let kinds = kinds(d)
        /// A field not declared by `spec`, which has dynamic fields: checked
        /// against the names the options give, or a warning that it cannot be.
        func dynamic(_ spec: EventSpec, _ name: String) -> (EventSpec, FieldSpec?)? {
            guard let names = info.dynamicFields else {
                diagnostics.append(Diagnostic(.warning, at: at, "field '\(name)' of monitor '\(monitor)' cannot be checked: plugin \(d.name) names the fields of its '\(spec.kind)' events from its options",
                                              hint: "make sure the monitor's options name '\(name)'"))
                return (spec, nil)
            }
            if names.contains(name) { return (spec, nil) }
            let all = spec.fields.map(\.name) + names
            diagnostics.append(Diagnostic(at: at, "'\(spec.kind)' events of monitor '\(monitor)' (plugin \(d.name)) have no field '\(name)': its option '\(dynamicFieldsOption)' names \(names.isEmpty ? "none" : names.joined(separator: ", "))",
                                          hint: Suggest.hint(for: name, in: all) ?? "its fields: \(all.joined(separator: ", "))"))
            return nil
        }
        let allFields = kinds.flatMap { $0.fields.map(\.name) }
        if parts.count == 2 {
            guard let spec = kinds.first(where: { $0.kind == parts[0] }) else {
                diagnostics.append(Diagnostic(at: at, "monitor '\(monitor)' (plugin \(d.name)) has no event kind '\(parts[0])'",
                                              hint: Suggest.hint(for: parts[0], in: kinds.map(\.kind)) ?? "its kinds: \(kinds.map(\.kind).joined(separator: ", "))"))
                return nil
            }
            if let field = spec.fields.first(where: { $0.name == parts[1] }) { return (spec, field) }
            if spec.dynamicFields { return dynamic(spec, parts[1]) }
            diagnostics.append(Diagnostic(at: at, "'\(spec.kind)' events of monitor '\(monitor)' (plugin \(d.name)) have no field '\(parts[1])'",
                                          hint: Suggest.hint(for: parts[1], in: spec.fields.map(\.name)) ?? "its fields: \(spec.fields.map(\.name).joined(separator: ", "))"))
            return nil
        }
        let name = parts[0]
        if let spec = kinds.first(where: { $0.fields.contains { $0.name == name } }) {
            return (spec, spec.fields.first { $0.name == name })
        }
        if let spec = kinds.first(where: \.dynamicFields) { return dynamic(spec, name) }
        diagnostics.append(Diagnostic(at: at, "monitor '\(monitor)' (plugin \(d.name)) has no field '\(name)'",
                                      hint: Suggest.hint(for: name, in: allFields) ?? "its fields: \(Array(Set(allFields)).sorted().joined(separator: ", "))"))
        return nil
    }

    private static func resolve(_ c: ParsedComparison, names: [String], monitors: [String: MonitorInfo],
                                _ diagnostics: inout [Diagnostic]) -> RuleComparison? {
        // The longest monitor name the reference starts with (names may have dots).
        let candidates = names.filter { name in
            let n = name.split(separator: ".").map(String.init)
            return n.count < c.reference.count && Array(c.reference.prefix(n.count)) == n
        }
        guard let monitor = candidates.max(by: { $0.count < $1.count }) else {
            diagnostics.append(Diagnostic(at: c.location, "'\(c.referenceText)' names no monitor of this manifest",
                                          hint: Suggest.hint(for: c.reference[0], in: names) ?? "monitors: \(names.joined(separator: ", "))"))
            return nil
        }
        let rest = Array(c.reference.dropFirst(monitor.split(separator: ".").count))
        guard rest.count <= 2 else {
            diagnostics.append(Diagnostic(at: c.location, "'\(c.referenceText)': after monitor '\(monitor)' write FIELD or KIND.FIELD"))
            return nil
        }
        guard let info = monitors[monitor] else {
            // The plugin did not load (reported where the monitor is): never true.
            return RuleComparison(ref: ValueRef(monitor: monitor, kind: "", field: rest.last!), op: c.op, literal: c.literal, name: c.referenceText)
        }
        guard let (spec, field) = find(rest, in: info, monitor: monitor, at: c.location, &diagnostics) else { return nil }
        if let field {
            let fits: Bool
            switch (field.type, c.literal) {
            case (.int, .number), (.double, .number), (.string, .string): fits = true
            case (.bool, .bool): fits = !c.op.isOrdering
            default: fits = false
            }
            if !fits {
                let problem = field.type == .bool && c.op.isOrdering
                    ? "'\(c.op.rawValue)' does not order booleans; use == or !="
                    : "compares \(field.type.withArticle) field with \(c.literal.typeName)"
                diagnostics.append(Diagnostic(at: c.location, "'\(c.text)': \(problem)"))
                return nil
            }
        }
        return RuleComparison(ref: ValueRef(monitor: monitor, kind: spec.kind, field: field?.name ?? rest.last!),
                              op: c.op, literal: c.literal, name: c.referenceText)
    }
}
