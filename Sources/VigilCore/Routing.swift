/// A set of sinks, by index: a bit per sink.
public struct SinkSet: Sendable, Equatable, Hashable {
    public var bits: UInt64
    public static let capacity = 64

    public init(bits: UInt64 = 0) { self.bits = bits }
    public static let empty = SinkSet()

    public var isEmpty: Bool { bits == 0 }
    public mutating func insert(_ index: Int) { bits |= 1 << UInt64(index) }
    public func contains(_ index: Int) -> Bool { bits & (1 << UInt64(index)) != 0 }
    public static func | (a: SinkSet, b: SinkSet) -> SinkSet { SinkSet(bits: a.bits | b.bits) }
    public static func & (a: SinkSet, b: SinkSet) -> SinkSet { SinkSet(bits: a.bits & b.bits) }
    public func subtracting(_ other: SinkSet) -> SinkSet { SinkSet(bits: bits & ~other.bits) }

    /// Calls `body` with each index in the set, lowest first.
    @inline(__always)
    public func forEach(_ body: (Int) throws -> Void) rethrows {
        var rest = bits
        while rest != 0 {
            let i = rest.trailingZeroBitCount
            try body(i)
            rest &= rest - 1
        }
    }
}

/// A shell-style glob: `*` any run of characters, `?` one character,
/// `[abc]`, `[a-z]`, `[!x]` one of (or none of) a set.
public struct Glob: Sendable, Equatable {
    public let pattern: String
    private let scalars: [Unicode.Scalar]

    public init(_ pattern: String) {
        self.pattern = pattern
        self.scalars = Array(pattern.unicodeScalars)
    }

    public var isWildcard: Bool { pattern == "*" }
    public var hasMeta: Bool { scalars.contains { $0 == "*" || $0 == "?" || $0 == "[" } }

    public func matches(_ text: String) -> Bool {
        let t = Array(text.unicodeScalars)
        var p = 0, s = 0
        var starP = -1, starS = 0
        while s < t.count {
            if p < scalars.count {
                switch scalars[p] {
                case "*":
                    starP = p; starS = s; p += 1
                    continue
                case "?":
                    p += 1; s += 1
                    continue
                case "[":
                    if let (matched, next) = matchClass(at: p, t[s]) {
                        if matched { p = next; s += 1; continue }
                    } else if t[s] == "[" {
                        p += 1; s += 1; continue
                    }
                default:
                    if scalars[p] == t[s] { p += 1; s += 1; continue }
                }
            }
            guard starP >= 0 else { return false }
            p = starP + 1
            starS += 1
            s = starS
        }
        while p < scalars.count && scalars[p] == "*" { p += 1 }
        return p == scalars.count
    }

    /// Whether `c` is in the class starting at `start`, and the index after it;
    /// nil for an unterminated class.
    private func matchClass(at start: Int, _ c: Unicode.Scalar) -> (Bool, Int)? {
        var i = start + 1
        var negate = false
        if i < scalars.count, scalars[i] == "!" || scalars[i] == "^" { negate = true; i += 1 }
        var matched = false
        var first = true
        while i < scalars.count {
            if scalars[i] == "]" && !first { return (matched != negate, i + 1) }
            first = false
            if i + 2 < scalars.count, scalars[i + 1] == "-", scalars[i + 2] != "]" {
                if scalars[i] <= c && c <= scalars[i + 2] { matched = true }
                i += 3
            } else {
                if scalars[i] == c { matched = true }
                i += 1
            }
        }
        return nil
    }

    /// Why the pattern is malformed, or nil.
    public var problem: String? {
        var i = 0
        while i < scalars.count {
            if scalars[i] == "[" {
                var j = i + 1
                if j < scalars.count, scalars[j] == "!" || scalars[j] == "^" { j += 1 }
                j += 1  // a ']' right after '[' is a member, not the end
                while j < scalars.count, scalars[j] != "]" { j += 1 }
                if j >= scalars.count { return "unterminated '[' at position \(i + 1)" }
                i = j
            }
            i += 1
        }
        return nil
    }
}

/// One entry of a sink's `match:` list, split into its monitor and kind globs.
public struct RoutePattern: Sendable, Equatable {
    public var monitor: Glob
    public var kind: Glob
    public var exclude: Bool

    public init(_ text: String) {
        var body = Substring(text)
        exclude = body.hasPrefix("!")
        if exclude { body = body.dropFirst() }
        if let slash = body.firstIndex(of: "/") {
            monitor = Glob(String(body[..<slash]))
            kind = Glob(String(body[body.index(after: slash)...]))
        } else {
            monitor = Glob(String(body))
            kind = Glob("*")
        }
    }

    /// Why a pattern is unusable, or nil.
    public static func problem(in text: String) -> String? {
        var body = Substring(text)
        if body.hasPrefix("!") { body = body.dropFirst() }
        if body.isEmpty { return "it is empty" }
        if body.filter({ $0 == "/" }).count > 1 { return "it has more than one '/': write MONITOR/KIND" }
        if body.hasPrefix("/") || body.hasSuffix("/") { return "a side of '/' is empty: write MONITOR/KIND, e.g. cpu/sample or */threshold" }
        let p = RoutePattern(text)
        return p.monitor.problem ?? p.kind.problem
    }

    /// The monitor name when the pattern names one monitor literally.
    public static func literalMonitor(in text: String) -> String? {
        let p = RoutePattern(text)
        return p.monitor.hasMeta ? nil : p.monitor.pattern
    }
}

/// The routes of one monitor, compiled when the manifest loads: which sinks
/// get each of its kinds at each severity. Lookups on the event path are an
/// array index or a short scan, never a glob match.
public struct MonitorRoutes: Sendable {
    /// Sinks that take every kind of this monitor (before severity filtering).
    public let everyKind: SinkSet
    /// Kind-specific includes and excludes, consulted for kinds not precomputed.
    let kindIncludes: [(Glob, SinkSet)]
    let kindExcludes: [(Glob, SinkSet)]
    let excludeAll: SinkSet
    /// Precomputed sink sets for the kinds the plugin declared, in `kinds` order.
    public let kinds: [String]
    public let kindSinks: [SinkSet]
    /// Sinks whose `min_severity` lets each severity through, by raw value.
    let bySeverity: [SinkSet]

    /// Sinks for an event of kind index `k` (into `kinds`) and `severity`.
    @inline(__always)
    public func sinks(kindIndex k: Int, severity: Severity) -> SinkSet {
        kindSinks[k] & bySeverity[Int(severity.rawValue)]
    }

    /// Sinks for an event of any kind, declared or not.
    public func sinks(kind: String, severity: Severity) -> SinkSet {
        sinks(kind: kind) & bySeverity[Int(severity.rawValue)]
    }

    /// Sinks for a kind at any severity (callers cache this for undeclared kinds).
    public func sinks(kind: String) -> SinkSet {
        if let k = kinds.firstIndex(of: kind) { return kindSinks[k] }
        return resolve(kind)
    }

    /// Sinks whose `min_severity` lets `severity` through.
    @inline(__always)
    public func severityMask(_ severity: Severity) -> SinkSet { bySeverity[Int(severity.rawValue)] }

    func resolve(_ kind: String) -> SinkSet {
        var set = everyKind
        for (glob, sinks) in kindIncludes where glob.matches(kind) { set = set | sinks }
        var out = excludeAll
        for (glob, sinks) in kindExcludes where glob.matches(kind) { out = out | sinks }
        return set.subtracting(out)
    }

    init(everyKind: SinkSet, kindIncludes: [(Glob, SinkSet)], kindExcludes: [(Glob, SinkSet)], excludeAll: SinkSet,
         kinds: [String], bySeverity: [SinkSet]) {
        self.everyKind = everyKind
        self.kindIncludes = kindIncludes
        self.kindExcludes = kindExcludes
        self.excludeAll = excludeAll
        self.kinds = kinds
        self.bySeverity = bySeverity
        var kindSinks: [SinkSet] = []
        for kind in kinds {
            var set = everyKind
            for (glob, sinks) in kindIncludes where glob.matches(kind) { set = set | sinks }
            var out = excludeAll
            for (glob, sinks) in kindExcludes where glob.matches(kind) { out = out | sinks }
            kindSinks.append(set.subtracting(out))
        }
        self.kindSinks = kindSinks
    }
}

/// Compiles sinks' `match` and `min_severity` into per-monitor routes.
public struct RouteCompiler: Sendable {
    public struct SinkRule: Sendable {
        public var patterns: [RoutePattern]
        public var minSeverity: Severity
        /// A list of exclusions only (`["!beat"]`) means everything but them.
        public init(match: [String], minSeverity: Severity) {
            var patterns = match.map(RoutePattern.init)
            if !patterns.isEmpty && patterns.allSatisfy(\.exclude) { patterns.insert(RoutePattern("*"), at: 0) }
            self.patterns = patterns
            self.minSeverity = minSeverity
        }
    }

    public let sinks: [SinkRule]
    private let bySeverity: [SinkSet]

    public init(sinks: [SinkRule]) {
        precondition(sinks.count <= SinkSet.capacity)
        self.sinks = sinks
        self.bySeverity = Severity.allCases.map { severity in
            var set = SinkSet()
            for (i, sink) in sinks.enumerated() where severity >= sink.minSeverity { set.insert(i) }
            return set
        }
    }

    /// Routes over slots: a sink's index is its slot, and an empty slot
    /// (nil) matches nothing. A running host keeps a sink in its slot across
    /// reloads.
    public init(slots: [SinkRule?]) {
        self.init(sinks: slots.map { $0 ?? SinkRule(match: [], minSeverity: .critical) })
    }

    public init(manifest: Manifest) {
        self.init(sinks: manifest.sinks.map { SinkRule(match: $0.match, minSeverity: $0.minSeverity) })
    }

    /// Routes for the monitor `name` whose plugin declares `kinds`.
    public func routes(monitor name: String, kinds: [String]) -> MonitorRoutes {
        var everyKind = SinkSet(), excludeAll = SinkSet()
        var includes: [(Glob, SinkSet)] = [], excludes: [(Glob, SinkSet)] = []
        for (i, sink) in sinks.enumerated() {
            var one = SinkSet()
            one.insert(i)
            for pattern in sink.patterns where pattern.monitor.matches(name) {
                switch (pattern.exclude, pattern.kind.isWildcard) {
                case (false, true): everyKind.insert(i)
                case (false, false): includes.append((pattern.kind, one))
                case (true, true): excludeAll.insert(i)
                case (true, false): excludes.append((pattern.kind, one))
                }
            }
        }
        return MonitorRoutes(everyKind: everyKind, kindIncludes: includes, kindExcludes: excludes,
                             excludeAll: excludeAll, kinds: kinds, bySeverity: bySeverity)
    }
}
