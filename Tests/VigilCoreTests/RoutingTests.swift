import Testing
@testable import VigilCore
@testable import VigilSinks

/// The indices in a set, in `forEach` order.
func indices(_ set: SinkSet) -> [Int] {
    var out: [Int] = []
    set.forEach { out.append($0) }
    return out
}

func compiler(_ sinks: [([String], Severity)]) -> RouteCompiler {
    RouteCompiler(sinks: sinks.map { RouteCompiler.SinkRule(match: $0.0, minSeverity: $0.1) })
}

// MARK: - SinkSet

@Suite("SinkSet")
struct SinkSetTests {
    @Test("insert, contains, set algebra")
    func algebra() {
        var a = SinkSet()
        #expect(a.isEmpty)
        #expect(a == .empty)
        a.insert(0)
        a.insert(5)
        a.insert(63)
        #expect(!a.isEmpty)
        #expect(a.contains(0) && a.contains(5) && a.contains(63))
        #expect(!a.contains(1) && !a.contains(62))
        #expect(a.bits == (UInt64(1) << 0 | UInt64(1) << 5 | UInt64(1) << 63))
        var b = SinkSet()
        b.insert(5)
        b.insert(7)
        #expect(indices(a | b) == [0, 5, 7, 63])
        #expect(indices(a & b) == [5])
        #expect(indices(a.subtracting(b)) == [0, 63])
        #expect(indices(b.subtracting(a)) == [7])
        a.insert(5)  // idempotent
        #expect(indices(a) == [0, 5, 63])
    }

    @Test("forEach visits each index once, lowest first")
    func forEachOrder() {
        let set = SinkSet(bits: 0x8000_0000_0000_0000 | 0b1010_0110)
        #expect(indices(set) == [1, 2, 5, 7, 63])
        #expect(indices(SinkSet(bits: .max)) == Array(0..<64))
        #expect(indices(.empty) == [])
    }

    @Test("forEach rethrows and stops at the first error")
    func forEachThrows() {
        struct Stop: Error {}
        var seen: [Int] = []
        var caught = false
        do {
            try SinkSet(bits: 0b1111).forEach { i in
                seen.append(i)
                if i == 1 { throw Stop() }
            }
        } catch {
            caught = error is Stop
        }
        #expect(caught)
        #expect(seen == [0, 1])
    }
}

// MARK: - Glob

@Suite("Glob")
struct GlobTests {
    @Test("matches", arguments: [
        ("*", "", true),
        ("*", "anything/at all", true),
        ("", "", true),
        ("", "a", false),
        ("cpu", "cpu", true),
        ("cpu", "cpu0", false),
        ("cpu", "cp", false),
        ("cpu*", "cpu", true),
        ("cpu*", "cpu0", true),
        ("*cpu", "xcpu", true),
        ("*cpu", "cpux", false),
        ("a*b*c", "abc", true),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "abbc", true),
        ("a*b*c", "aXbYcZc", true),
        ("a*b*c", "acb", false),
        ("a*b*c", "abcd", false),
        ("**", "x", true),
        ("*a*", "bab", true),
        ("*a*", "bbb", false),
        ("?", "", false),
        ("?", "a", true),
        ("?", "ab", false),
        ("?", "é", true),          // one scalar
        ("??u", "cpu", true),
        ("?pu", "gpu", true),
        ("?pu", "cpux", false),
        ("[ab]*", "alpha", true),
        ("[ab]*", "beta", true),
        ("[ab]*", "cpu", false),
        ("[ab]*", "", false),
        ("[a-c]x", "bx", true),
        ("[a-c]x", "dx", false),
        ("[!a-c]x", "dx", true),
        ("[!a-c]x", "ax", false),
        ("[^a]", "b", true),
        ("[^a]", "a", false),
        ("[]]", "]", true),         // ']' first in a class is a member
        ("[!]]", "a", true),
        ("[!]]", "]", false),
        ("[a-]", "-", true),        // '-' last is literal
        ("[a-]", "b", false),
        ("cpu[0-9]", "cpu7", true),
        ("cpu[0-9]", "cpux", false),
        ("*[0-9]", "disk12", true),
        ("[ab", "[ab", true),       // an unterminated class matches literally
        ("[ab", "a", false),
        ("x[", "x[", true),
        ("x[", "xa", false),
    ])
    func matches(pattern: String, text: String, expected: Bool) {
        #expect(Glob(pattern).matches(text) == expected, "'\(pattern)' ~ '\(text)'")
    }

    @Test("problems: only unterminated classes", arguments: [
        ("[ab", "unterminated '[' at position 1" as String?),
        ("x[", "unterminated '[' at position 2"),
        ("a[b]c[d", "unterminated '[' at position 6"),
        ("[]", "unterminated '[' at position 1"),
        ("[!]", "unterminated '[' at position 1"),
        ("[]]", nil),
        ("[!]]", nil),
        ("[a-z]*", nil),
        ("*", nil),
        ("?x", nil),
        ("", nil),
    ])
    func problems(pattern: String, problem: String?) {
        #expect(Glob(pattern).problem == problem)
    }

    @Test("wildcard and meta")
    func meta() {
        #expect(Glob("*").isWildcard)
        #expect(!Glob("**").isWildcard)
        #expect(!Glob("cpu").hasMeta)
        #expect(Glob("c?u").hasMeta && Glob("c*").hasMeta && Glob("[c]").hasMeta)
    }
}

// MARK: - RoutePattern

@Suite("RoutePattern")
struct RoutePatternTests {
    @Test("split into monitor and kind; no '/' means every kind")
    func split() {
        let a = RoutePattern("cpu")
        #expect(a.monitor.pattern == "cpu" && a.kind.pattern == "*" && !a.exclude)
        let b = RoutePattern("!vigil/*")
        #expect(b.monitor.pattern == "vigil" && b.kind.pattern == "*" && b.exclude)
        let c = RoutePattern("*/threshold")
        #expect(c.monitor.pattern == "*" && c.kind.pattern == "threshold" && !c.exclude)
        let d = RoutePattern("!cpu/sample")
        #expect(d.monitor.pattern == "cpu" && d.kind.pattern == "sample" && d.exclude)
    }

    @Test("problem", arguments: [
        ("", "it is empty" as String?),
        ("!", "it is empty"),
        ("a/b/c", "it has more than one '/': write MONITOR/KIND"),
        ("/sample", "a side of '/' is empty: write MONITOR/KIND, e.g. cpu/sample or */threshold"),
        ("cpu/", "a side of '/' is empty: write MONITOR/KIND, e.g. cpu/sample or */threshold"),
        ("!/x", "a side of '/' is empty: write MONITOR/KIND, e.g. cpu/sample or */threshold"),
        ("[ab", "unterminated '[' at position 1"),
        ("cpu/[ab", "unterminated '[' at position 1"),
        ("!c[pu/x", "unterminated '[' at position 2"),
        ("cpu", nil),
        ("cpu/sample", nil),
        ("*/threshold", nil),
        ("!vigil/*", nil),
        ("[ab]*", nil),
    ])
    func problem(text: String, problem: String?) {
        #expect(RoutePattern.problem(in: text) == problem)
    }

    @Test("literalMonitor names the monitor only when it has no glob characters", arguments: [
        ("cpu", "cpu" as String?),
        ("cpu/sample", "cpu"),
        ("!cpu", "cpu"),
        ("!cpu/x*", "cpu"),
        ("cpu*", nil),
        ("*/threshold", nil),
        ("[ab]", nil),
        ("c?u", nil),
    ])
    func literal(text: String, monitor: String?) {
        #expect(RoutePattern.literalMonitor(in: text) == monitor)
    }
}

// MARK: - Routes

@Suite("Routing")
struct RoutingTests {
    let kinds = ["sample", "threshold", "availability"]

    @Test("'*' takes every kind of every monitor at every severity")
    func everything() {
        let c = compiler([(["*"], .debug)])
        for monitor in ["cpu", "memory", "vigil"] {
            let r = c.routes(monitor: monitor, kinds: kinds)
            #expect(indices(r.everyKind) == [0])
            for k in kinds.indices {
                for s in Severity.allCases { #expect(indices(r.sinks(kindIndex: k, severity: s)) == [0]) }
            }
            #expect(indices(r.sinks(kind: "undeclared", severity: .debug)) == [0])
        }
    }

    @Test("'cpu' means cpu/*")
    func monitorOnly() {
        let c = compiler([(["cpu"], .debug)])
        let cpu = c.routes(monitor: "cpu", kinds: kinds)
        #expect(cpu.kindSinks.map(indices) == [[0], [0], [0]])
        #expect(indices(cpu.sinks(kind: "whatever", severity: .info)) == [0])
        let mem = c.routes(monitor: "memory", kinds: kinds)
        #expect(mem.kindSinks.map(indices) == [[], [], []])
        #expect(mem.sinks(kind: "sample", severity: .critical).isEmpty)
        #expect(c.routes(monitor: "cpu0", kinds: kinds).everyKind.isEmpty)
    }

    @Test("'cpu/sample' takes one kind of one monitor")
    func monitorAndKind() {
        let c = compiler([(["cpu/sample"], .debug)])
        let cpu = c.routes(monitor: "cpu", kinds: kinds)
        #expect(cpu.everyKind.isEmpty)
        #expect(cpu.kindSinks.map(indices) == [[0], [], []])
        #expect(indices(cpu.sinks(kind: "sample", severity: .info)) == [0])
        #expect(cpu.sinks(kind: "threshold", severity: .info).isEmpty)
        #expect(c.routes(monitor: "memory", kinds: kinds).sinks(kind: "sample", severity: .info).isEmpty)
    }

    @Test("'*/threshold' takes one kind of every monitor")
    func kindOfEveryMonitor() {
        let c = compiler([(["*/threshold"], .debug)])
        for monitor in ["cpu", "memory", "disk-1"] {
            let r = c.routes(monitor: monitor, kinds: kinds)
            #expect(r.kindSinks.map(indices) == [[], [0], []])
        }
    }

    @Test("'!vigil/*' with '*' excludes the host's own events, in either order", arguments: [
        ["*", "!vigil/*"], ["!vigil/*", "*"], ["!vigil", "*"],
    ])
    func exclusion(match: [String]) {
        let c = compiler([(match, .debug), (["*"], .debug)])
        let cpu = c.routes(monitor: "cpu", kinds: kinds)
        #expect(cpu.kindSinks.map(indices) == [[0, 1], [0, 1], [0, 1]])
        let vigil = c.routes(monitor: "vigil", kinds: ["availability", "log"])
        #expect(vigil.kindSinks.map(indices) == [[1], [1]])
        #expect(indices(vigil.sinks(kind: "undeclared", severity: .critical)) == [1])
    }

    @Test("kind exclusions and kind globs")
    func kindExclusion() {
        let c = compiler([(["cpu", "!cpu/th*"], .debug), (["*/[st]*", "!memory/sample"], .debug)])
        let cpu = c.routes(monitor: "cpu", kinds: kinds)
        #expect(cpu.kindSinks.map(indices) == [[0, 1], [1], [0]])
        let mem = c.routes(monitor: "memory", kinds: kinds)
        #expect(mem.kindSinks.map(indices) == [[], [1], []])
        #expect(indices(cpu.sinks(kind: "throttle", severity: .info)) == [1])
        #expect(indices(cpu.sinks(kind: "state", severity: .info)) == [0, 1])
    }

    @Test("exclusions alone mean everything but them")
    func excludeOnly() {
        let c = compiler([(["!cpu"], .debug), (["!cpu/sample", "!vigil"], .debug)])
        #expect(c.routes(monitor: "cpu", kinds: kinds).kindSinks.map(indices) == [[], [1], [1]])
        #expect(c.routes(monitor: "memory", kinds: kinds).kindSinks.map(indices) == [[0, 1], [0, 1], [0, 1]])
        #expect(c.routes(monitor: "vigil", kinds: kinds).kindSinks.map(indices) == [[0], [0], [0]])
    }

    @Test("classes and '?' in the monitor part")
    func monitorGlobs() {
        let c = compiler([(["[ab]*"], .debug), (["?pu"], .debug), (["[!c]*/sample"], .debug)])
        #expect(indices(c.routes(monitor: "alpha", kinds: kinds).kindSinks[0]) == [0, 2])
        #expect(indices(c.routes(monitor: "beta", kinds: kinds).kindSinks[1]) == [0])
        #expect(indices(c.routes(monitor: "cpu", kinds: kinds).kindSinks[0]) == [1])
        #expect(indices(c.routes(monitor: "gpu", kinds: kinds).kindSinks[0]) == [1, 2])
        #expect(c.routes(monitor: "cpux", kinds: kinds).kindSinks[1].isEmpty)
    }

    @Test("min_severity: a sink with min warning does not get info")
    func severityMasks() {
        let c = compiler([(["*"], .warning), (["*"], .debug), (["*"], .critical)])
        let r = c.routes(monitor: "cpu", kinds: kinds)
        let expected: [Severity: [Int]] = [.debug: [1], .info: [1], .notice: [1], .warning: [0, 1], .error: [0, 1],
                                           .critical: [0, 1, 2]]
        for (severity, sinks) in expected {
            #expect(indices(r.sinks(kindIndex: 0, severity: severity)) == sinks, "\(severity)")
            #expect(indices(r.sinks(kind: "sample", severity: severity)) == sinks, "\(severity)")
            #expect(indices(r.sinks(kind: "undeclared", severity: severity)) == sinks, "\(severity)")
        }
    }

    @Test("kinds not declared by the plugin are resolved by glob at lookup")
    func undeclaredKinds() {
        let c = compiler([(["cpu/sam*"], .debug), (["cpu", "!cpu/samx"], .debug)])
        let r = c.routes(monitor: "cpu", kinds: [])
        #expect(r.kinds.isEmpty && r.kindSinks.isEmpty)
        #expect(indices(r.sinks(kind: "sample", severity: .info)) == [0, 1])
        #expect(indices(r.sinks(kind: "samx", severity: .info)) == [0])
        #expect(indices(r.sinks(kind: "other", severity: .info)) == [1])
    }

    @Test("declared and undeclared lookups agree")
    func lookupsAgree() {
        let c = compiler([(["*", "!vigil/*"], .info), (["cpu/sample", "*/threshold"], .debug),
                          (["[cm]*", "!*/avail*"], .warning), (["!cpu"], .debug)])
        for monitor in ["cpu", "memory", "vigil", "disk"] {
            let declared = c.routes(monitor: monitor, kinds: kinds)
            let undeclared = c.routes(monitor: monitor, kinds: [])
            for (k, kind) in kinds.enumerated() {
                for s in Severity.allCases {
                    #expect(declared.sinks(kindIndex: k, severity: s) == undeclared.sinks(kind: kind, severity: s),
                            "\(monitor)/\(kind) at \(s)")
                    #expect(declared.sinks(kind: kind, severity: s) == declared.sinks(kindIndex: k, severity: s))
                }
            }
        }
    }

    @Test("several sinks get the right bits")
    func multipleSinks() {
        let c = compiler([
            (["*"], .debug),                    // 0
            (["cpu/sample"], .debug),           // 1
            (["*", "!cpu/sample"], .debug),     // 2
            (["memory"], .info),                // 3
            (["*/threshold"], .error),          // 4
        ])
        let cpu = c.routes(monitor: "cpu", kinds: kinds)
        #expect(cpu.kindSinks.map(indices) == [[0, 1], [0, 2, 4], [0, 2]])
        #expect(cpu.kindSinks[0].bits == 0b00011)
        #expect(cpu.kindSinks[1].bits == 0b10101)
        #expect(indices(cpu.sinks(kindIndex: 1, severity: .warning)) == [0, 2])
        #expect(indices(cpu.sinks(kindIndex: 1, severity: .error)) == [0, 2, 4])
        let mem = c.routes(monitor: "memory", kinds: kinds)
        #expect(mem.kindSinks.map(indices) == [[0, 2, 3], [0, 2, 3, 4], [0, 2, 3]])
        #expect(indices(mem.sinks(kindIndex: 0, severity: .debug)) == [0, 2])
        #expect(indices(mem.sinks(kindIndex: 0, severity: .info)) == [0, 2, 3])
    }

    @Test("64 sinks use every bit")
    func sixtyFourSinks() {
        let c = compiler(Array(repeating: (["*"], Severity.debug), count: 64))
        let r = c.routes(monitor: "cpu", kinds: ["sample"])
        #expect(r.sinks(kindIndex: 0, severity: .info).bits == .max)
        #expect(indices(r.sinks(kindIndex: 0, severity: .info)).last == 63)
    }

    @Test("RouteCompiler(manifest:) uses each sink's match and min_severity, in manifest order")
    func fromManifest() {
        let at = VigilCore.SourceLocation(file: "test.yaml", line: 1, column: 1)
        let manifest = Manifest(file: "test.yaml", sinks: [
            SinkConfig(name: "all", settings: NullSinkSettings(), location: at),
            SinkConfig(name: "warn", settings: NullSinkSettings(), match: ["cpu"], minSeverity: .warning, location: at),
            SinkConfig(name: "nohost", settings: NullSinkSettings(), match: ["*", "!vigil/*"], location: at),
        ])
        let c = RouteCompiler(manifest: manifest)
        #expect(c.sinks.count == 3)
        let cpu = c.routes(monitor: "cpu", kinds: ["sample"])
        #expect(indices(cpu.sinks(kindIndex: 0, severity: .info)) == [0, 2])
        #expect(indices(cpu.sinks(kindIndex: 0, severity: .warning)) == [0, 1, 2])
        let vigil = c.routes(monitor: "vigil", kinds: ["log"])
        #expect(indices(vigil.sinks(kindIndex: 0, severity: .critical)) == [0])
    }
}
