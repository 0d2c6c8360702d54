/// Thresholds and rules over the events of a run: events about events.
///
/// Pure: it does no I/O and reads no clock. Every call is given the time, a
/// monotonic `now` for holds and staleness, and the wall time to stamp the
/// events it makes; the host calls it under a lock with the events plugins
/// emit, a heartbeat after each successful poll, and `advance` at
/// `nextDeadline`. Tests drive it with made-up times.
///
/// **Thresholds** keep a state per monitor, kind, field (and the values of
/// the `per` fields): nominal, warning, critical or stale. A value enters a
/// level when it is strictly past the level's limit, and leaves it when it is
/// strictly back past the clear value (the hysteresis). A new state is taken
/// when it has held for `holdFor`, or for `hits` consecutive values,
/// whichever comes first (at once with neither). A threshold that has had no
/// value, and whose monitor has had no successful poll, for `staleAfter`
/// becomes stale; the next value leaves stale at once. A `threshold` event is
/// made on every change of state, and only then, with the value, the state
/// before, and the limit crossed: the level's limit on the way up, the clear
/// value on the way down.
///
/// **Rules** read the latest value of each field they name. A comparison
/// with no value yet is false. A rule is evaluated at `start` (one already
/// true fires then) and whenever a value it reads changes, never otherwise.
/// It becomes active when its condition has held for `holdFor`, and inactive
/// as soon as it no longer holds. A `rule` event is made on each change.
public struct ConditionEngine: Sendable {
    public static let thresholdKind = "threshold"
    public static let ruleKind = "rule"

    public enum State: String, Sendable {
        case nominal, warning, critical, stale

        /// Order of badness (stale is not a level).
        var rank: Int {
            switch self {
            case .nominal, .stale: 0
            case .warning: 1
            case .critical: 2
            }
        }

        /// The severity of a threshold event announcing this state.
        public var severity: Severity {
            switch self {
            case .nominal: .notice
            case .warning, .stale: .warning
            case .critical: .critical
            }
        }
    }

    struct Pending: Sendable {
        var target: State
        var since: Int64
        var hits: Int
    }

    /// One threshold's state for one entity.
    struct Entity: Sendable {
        var per: [Field]
        var state = State.nominal
        var value: Double?
        var lastSeen: Int64
        var pending: Pending?
        /// When it entered its state (wall clock, ns); nil: never left nominal.
        var since: Int64?
    }

    struct Watch: Sendable {
        var spec: ThresholdSpec
        var entities: [Entity] = []
    }

    struct Rule: Sendable {
        var spec: RuleSpec
        var active = false
        var pendingSince: Int64?
        /// When it last became active, and last changed (wall clock, ns).
        var lastFired: Int64?
        var lastChange: Int64?
        /// Distinct references, in the order written.
        var reads: [(name: String, ref: ValueRef)]
    }

    private var watches: [Watch]
    private var rules: [Rule]
    private var values: [ValueRef: FieldValue] = [:]
    /// Rules reading each reference.
    private var readers: [ValueRef: [Int]] = [:]
    /// Monitor → plugin name, for events made without a source event (stale).
    private let plugins: [String: String]
    /// Monitors whose source is unavailable, or that failed or finished:
    /// their polls do not keep thresholds fresh.
    private var absent: Set<String> = []
    /// Monitors whose events (or polls) matter here.
    public let watchedMonitors: Set<String>
    /// Of each watched monitor, the kinds whose events matter here: those
    /// its thresholds and rules read, and `availability`.
    public let watchedKinds: [String: Set<String>]

    public init(thresholds: [ThresholdSpec], rules: [RuleSpec], plugins: [String: String]) {
        self.watches = thresholds.map { Watch(spec: $0) }
        self.plugins = plugins
        var ruleStates: [Rule] = []
        var readers: [ValueRef: [Int]] = [:]
        for (i, spec) in rules.enumerated() {
            var reads: [(String, ValueRef)] = []
            for c in spec.condition.leaves where !reads.contains(where: { $0.1 == c.ref }) {
                reads.append((c.name, c.ref))
                readers[c.ref, default: []].append(i)
            }
            ruleStates.append(Rule(spec: spec, reads: reads))
        }
        self.rules = ruleStates
        self.readers = readers
        let refs = thresholds.map(\.ref) + readers.keys
        self.watchedMonitors = Set(refs.map(\.monitor))
        var kinds: [String: Set<String>] = [:]
        for ref in refs { kinds[ref.monitor, default: ["availability"]].insert(ref.kind) }
        self.watchedKinds = kinds
    }

    public var isEmpty: Bool { watches.isEmpty && rules.isEmpty }

    /// What the thresholds and rules are now, for the control API.
    public struct Snapshot: Sendable {
        public struct Threshold: Sendable {
            public let spec: ThresholdSpec
            /// The values of its `per` fields (empty without `per`).
            public let per: [Field]
            public let state: State
            public let value: Double?
            /// When it entered `state` (wall clock, ns); nil: never left nominal.
            public let since: Int64?
        }

        public struct Rule: Sendable {
            public let spec: RuleSpec
            public let active: Bool
            /// Its condition holds, and its `for` is running.
            public let pending: Bool
            public let lastFired: Int64?
            public let lastChange: Int64?
        }

        public let thresholds: [Threshold]
        public let rules: [Rule]
    }

    public var snapshot: Snapshot {
        var thresholds: [Snapshot.Threshold] = []
        for watch in watches {
            // A threshold nothing has reached yet is shown, nominal.
            if watch.entities.isEmpty {
                thresholds.append(.init(spec: watch.spec, per: [], state: .nominal, value: nil, since: nil))
            }
            for entity in watch.entities {
                thresholds.append(.init(spec: watch.spec, per: entity.per, state: entity.state, value: entity.value, since: entity.since))
            }
        }
        let rules = rules.map {
            Snapshot.Rule(spec: $0.spec, active: $0.active, pending: $0.pendingSince != nil, lastFired: $0.lastFired, lastChange: $0.lastChange)
        }
        return Snapshot(thresholds: thresholds, rules: rules)
    }

    /// A reload: thresholds and rules that did not change (same fingerprint,
    /// wherever they are written) take their state from `old` (levels,
    /// holds running, active rules, the values they read), so a reload
    /// makes no event for them; new ones start afresh (call `start` after).
    public mutating func adoptState(from old: ConditionEngine) {
        var oldWatches: [String: [Entity]] = [:]
        for w in old.watches { oldWatches[ConfigFingerprint.of(w.spec)] = w.entities }
        for i in watches.indices {
            if let entities = oldWatches[ConfigFingerprint.of(watches[i].spec)] { watches[i].entities = entities }
        }
        var oldRules: [String: Rule] = [:]
        for r in old.rules { oldRules[ConfigFingerprint.of(r.spec)] = r }
        for i in rules.indices {
            if let kept = oldRules[ConfigFingerprint.of(rules[i].spec)] {
                rules[i].active = kept.active
                rules[i].pendingSince = kept.pendingSince
                rules[i].lastFired = kept.lastFired
                rules[i].lastChange = kept.lastChange
            }
        }
        values = old.values.filter { readers[$0.key] != nil }
        absent = old.absent.intersection(watchedMonitors)
    }

    // MARK: - inputs

    /// Thresholds without `per` start their staleness clock, and every rule
    /// is evaluated: one already true (with no `for`) is active at once.
    public mutating func start(now: Int64, wallTime: Int64) -> [Event] {
        for i in watches.indices where watches[i].spec.per.isEmpty && watches[i].entities.isEmpty {
            watches[i].entities.append(Entity(per: [], lastSeen: now))
        }
        var out: [Event] = []
        for i in rules.indices { evaluate(rule: i, now: now, wallTime: wallTime, into: &out) }
        return out
    }

    /// An event a plugin emitted: updates the thresholds on its fields and the
    /// rules that read them. Returns the threshold and rule events it causes.
    public mutating func observe(_ event: Event, now: Int64) -> [Event] {
        guard watchedMonitors.contains(event.monitor) else { return [] }
        var out: [Event] = []
        if event.kind == "availability", case .bool(let available)? = event[field: "available"] {
            if available {
                absent.remove(event.monitor)
            } else {
                out += unavailable(monitor: event.monitor, now: now, wallTime: event.time)
            }
        }
        for i in watches.indices where watches[i].spec.ref.monitor == event.monitor && watches[i].spec.ref.kind == event.kind {
            guard let value = Self.number(event[field: watches[i].spec.ref.field]) else { continue }
            observe(threshold: i, value: value, event: event, now: now, into: &out)
        }
        var dirty: [Int] = []
        for field in event.fields {
            let ref = ValueRef(monitor: event.monitor, kind: event.kind, field: field.name)
            guard let reading = readers[ref] else { continue }
            if values[ref] != field.value {
                values[ref] = field.value
                for r in reading where !dirty.contains(r) { dirty.append(r) }
            }
        }
        for r in dirty.sorted() { evaluate(rule: r, now: now, wallTime: event.time, into: &out) }
        return out
    }

    /// A successful poll of `monitor`: its values, changed or not, are
    /// current, so its thresholds are not stale. A stale one takes the state
    /// of its last value again.
    public mutating func heartbeat(monitor: String, now: Int64, wallTime: Int64) -> [Event] {
        var out: [Event] = []
        guard !absent.contains(monitor) else { return out }
        for i in watches.indices where watches[i].spec.ref.monitor == monitor {
            for e in watches[i].entities.indices {
                watches[i].entities[e].lastSeen = now
                let entity = watches[i].entities[e]
                if entity.state == .stale, let value = entity.value {
                    let target = Self.target(watches[i].spec, current: .nominal, value: value)
                    transition(watch: i, entity: e, to: target, now: now, wallTime: wallTime, into: &out)
                }
            }
        }
        return out
    }

    /// The monitor's source went away, or the monitor failed or finished:
    /// its thresholds are stale now, whatever their `stale_after`, until a
    /// value comes again (or, once it is available again, a successful poll).
    public mutating func unavailable(monitor: String, now: Int64, wallTime: Int64) -> [Event] {
        absent.insert(monitor)
        var out: [Event] = []
        for i in watches.indices where watches[i].spec.ref.monitor == monitor {
            for e in watches[i].entities.indices {
                watches[i].entities[e].pending = nil
                transition(watch: i, entity: e, to: .stale, now: now, wallTime: wallTime, into: &out)
            }
        }
        return out
    }

    /// Takes the states whose hold time is over and marks what has gone stale.
    public mutating func advance(to now: Int64, wallTime: Int64) -> [Event] {
        var out: [Event] = []
        for i in watches.indices {
            let spec = watches[i].spec
            for e in watches[i].entities.indices {
                let entity = watches[i].entities[e]
                if let stale = spec.staleAfter, entity.state != .stale, now - entity.lastSeen >= stale {
                    watches[i].entities[e].pending = nil
                    transition(watch: i, entity: e, to: .stale, now: now, wallTime: wallTime, into: &out)
                } else if let pending = entity.pending, spec.holdFor > 0, now - pending.since >= spec.holdFor {
                    watches[i].entities[e].pending = nil
                    transition(watch: i, entity: e, to: pending.target, now: now, wallTime: wallTime, into: &out)
                }
            }
        }
        for r in rules.indices {
            if let since = rules[r].pendingSince, now - since >= rules[r].spec.holdFor {
                rules[r].pendingSince = nil
                rules[r].active = true
                rules[r].lastFired = wallTime
                rules[r].lastChange = wallTime
                out.append(ruleEvent(r, wallTime: wallTime))
            }
        }
        return out
    }

    /// The earliest time `advance` has something to do, if any.
    public var nextDeadline: Int64? {
        var next: Int64?
        func consider(_ t: Int64) { if next == nil || t < next! { next = t } }
        for w in watches {
            for e in w.entities {
                if let stale = w.spec.staleAfter, e.state != .stale { consider(Self.later(e.lastSeen, by: stale)) }
                if let p = e.pending, w.spec.holdFor > 0 { consider(Self.later(p.since, by: w.spec.holdFor)) }
            }
        }
        for r in rules { if let since = r.pendingSince { consider(Self.later(since, by: r.spec.holdFor)) } }
        return next
    }

    /// `t + d`, saturating: a hold of a hundred years is never, not a crash.
    static func later(_ t: Int64, by d: Int64) -> Int64 {
        let (sum, overflow) = t.addingReportingOverflow(d)
        return overflow ? .max : sum
    }

    /// Whether a rule is active now.
    public func isActive(rule name: String) -> Bool { rules.first { $0.spec.name == name }?.active ?? false }

    /// The state of a threshold (monitor.kind.field, and the `per` values if any).
    public func state(of ref: ValueRef, per: [FieldValue] = []) -> State? {
        watches.first { $0.spec.ref == ref }?.entities.first { $0.per.map(\.value) == per }?.state
    }

    // MARK: - thresholds

    /// The state a value puts a threshold in, from `current` (hysteresis:
    /// a level is left only past its clear value).
    public static func target(_ spec: ThresholdSpec, current: State, value v: Double) -> State {
        if let c = spec.critical {
            if c.triggers(v) || (current == .critical && !c.clears(v)) { return .critical }
        }
        if let w = spec.warning {
            if w.triggers(v) || ((current == .warning || current == .critical) && !w.clears(v)) { return .warning }
        }
        return .nominal
    }

    private mutating func observe(threshold i: Int, value: Double, event: Event, now: Int64, into out: inout [Event]) {
        let spec = watches[i].spec
        let per = spec.per.compactMap { name in event[field: name].map { Field(name, $0) } }
        let e: Int
        if let found = watches[i].entities.firstIndex(where: { $0.per == per }) {
            e = found
        } else {
            watches[i].entities.append(Entity(per: per, lastSeen: now))
            e = watches[i].entities.count - 1
        }
        watches[i].entities[e].lastSeen = now
        guard !value.isNaN else { return }  // no value: fresh, but nothing to judge
        watches[i].entities[e].value = value
        let entity = watches[i].entities[e]
        if entity.state == .stale {  // a value again: leave stale at once
            transition(watch: i, entity: e, to: Self.target(spec, current: .nominal, value: value), now: now,
                       wallTime: event.time, into: &out)
            return
        }
        let target = Self.target(spec, current: entity.state, value: value)
        guard target != entity.state else {
            watches[i].entities[e].pending = nil
            return
        }
        // Values on the same side of the current state count toward one hold,
        // even if they point at different levels (0.97, 0.85, 0.97… from
        // nominal); the state taken is then the nearer of the levels seen.
        var pending = Pending(target: target, since: now, hits: 0)
        if let p = entity.pending, (p.target.rank > entity.state.rank) == (target.rank > entity.state.rank) {
            pending = p
            let up = target.rank > entity.state.rank
            pending.target = up ? (target.rank < p.target.rank ? target : p.target) : (target.rank > p.target.rank ? target : p.target)
        }
        pending.hits += 1
        let byTime = spec.holdFor > 0 && now - pending.since >= spec.holdFor
        let byCount = spec.hits > 0 && pending.hits >= spec.hits
        if (spec.holdFor == 0 && spec.hits == 0) || byTime || byCount {
            watches[i].entities[e].pending = nil
            transition(watch: i, entity: e, to: pending.target, now: now, wallTime: event.time, into: &out)
        } else {
            watches[i].entities[e].pending = pending
        }
    }

    private mutating func transition(watch i: Int, entity e: Int, to state: State, now: Int64, wallTime: Int64,
                                     into out: inout [Event]) {
        let previous = watches[i].entities[e].state
        guard state != previous else { return }
        watches[i].entities[e].state = state
        watches[i].entities[e].since = wallTime
        let spec = watches[i].spec
        let entity = watches[i].entities[e]
        var fields = [Field("field", .string(spec.ref.field)), Field("source_kind", .string(spec.ref.kind))]
        if state != .stale, let value = entity.value { fields.append(Field("value", .double(value))) }
        fields.append(Field("state", .string(state.rawValue)))
        fields.append(Field("previous", .string(previous.rawValue)))
        // The limit crossed: the level entered, or the clear value that let
        // the value down to this state (warning's, on the way to nominal).
        let limit: ThresholdLimit?
        var crossed: Double?
        switch state {
        case .critical: limit = spec.critical; crossed = limit?.value
        case .warning where previous == .critical: limit = spec.critical; crossed = limit?.clear
        case .warning: limit = spec.warning; crossed = limit?.value
        case .nominal where previous == .critical || previous == .warning:
            limit = spec.warning ?? spec.critical; crossed = limit?.clear
        default: limit = nil
        }
        if let crossed { fields.append(Field("limit", .double(crossed))) }
        if let direction = limit?.direction ?? spec.critical?.direction ?? spec.warning?.direction {
            fields.append(Field("direction", .string(direction.rawValue)))
        }
        fields += entity.per
        let monitor = spec.ref.monitor
        out.append(Event(time: wallTime, monitor: monitor, plugin: plugins[monitor] ?? monitor, kind: Self.thresholdKind,
                         severity: state.severity, fields: fields))
    }

    static func number(_ value: FieldValue?) -> Double? {
        switch value {
        case .double(let d)?: d
        case .int(let i)?: Double(i)
        default: nil
        }
    }

    // MARK: - rules

    private mutating func evaluate(rule r: Int, now: Int64, wallTime: Int64, into out: inout [Event]) {
        let holds = rules[r].spec.condition.evaluate { $0.holds(for: values[$0.ref]) }
        if holds {
            guard !rules[r].active, rules[r].pendingSince == nil else { return }
            if rules[r].spec.holdFor == 0 {
                rules[r].active = true
                rules[r].lastFired = wallTime
                rules[r].lastChange = wallTime
                out.append(ruleEvent(r, wallTime: wallTime))
            } else {
                rules[r].pendingSince = now
            }
        } else {
            rules[r].pendingSince = nil
            guard rules[r].active else { return }
            rules[r].active = false
            rules[r].lastChange = wallTime
            out.append(ruleEvent(r, wallTime: wallTime))
        }
    }

    /// A rule's event: whether it is active, and each value it reads (those it has).
    private func ruleEvent(_ r: Int, wallTime: Int64) -> Event {
        let rule = rules[r]
        var fields = [Field("active", .bool(rule.active))]
        for read in rule.reads { if let v = values[read.ref] { fields.append(Field(read.name, v)) } }
        return Event(time: wallTime, monitor: rule.spec.name, plugin: Manifest.hostMonitorName, kind: Self.ruleKind,
                     severity: rule.active ? rule.spec.severity : .notice, fields: fields)
    }
}
