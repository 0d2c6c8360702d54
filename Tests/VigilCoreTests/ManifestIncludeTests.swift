import Testing
@testable import VigilCore

/// `include:` through an in-memory source: no file system, every rule of
/// ManifestIncludes.swift, and hostile sources.
@Suite("Manifest includes")
struct ManifestIncludeTests {
    static let main = "/etc/vigil/vigil.yaml"

    static func load(_ files: [String: String], directories: Set<String> = [], main: String = main) -> (Manifest?, [Diagnostic]) {
        ManifestLoader(file: main).load(from: InMemoryManifestSource(files: files, directories: directories))
    }

    static func at(_ file: String, _ line: Int, _ column: Int) -> VigilCore.SourceLocation {
        VigilCore.SourceLocation(file: file, line: line, column: column)
    }

    static func errors(_ d: [Diagnostic]) -> [Diagnostic] { d.filter { $0.level == .error } }

    @Test("fragments add monitors, sinks and rules; files are listed in the order read, each pattern's matches sorted")
    func merges() throws {
        let (m, d) = Self.load([
            Self.main: """
            include: ["conf.d/*.yaml", "/opt/extra/one.yaml"]
            monitors:
              cpu: { plugin: cpu }
            sinks:
              console: { type: log }
            """,
            "/etc/vigil/conf.d/20-disk.yaml": """
            monitors:
              disk: { plugin: storage, interval: 5s }
            """,
            "/etc/vigil/conf.d/10-mem.yaml": """
            monitors:
              mem:
                plugin: memory
                thresholds:
                  used: { warning: { above: 0.8 } }
            rules:
              busy: { all: [ "cpu.usage > 0.9" ] }
            """,
            "/etc/vigil/conf.d/notes.txt": "not: [yaml",
            "/etc/vigil/conf.d/.hidden.yaml": "monitors: { hidden: { plugin: x } }",
            "/opt/extra/one.yaml": "sinks:\n  out: { type: file, path: /tmp/x.jsonl, match: [disk, mem] }\n",
        ])
        #expect(Self.errors(d).isEmpty, "\(ManifestErrors(d))")
        let manifest = try #require(m)
        #expect(manifest.files == [Self.main, "/etc/vigil/conf.d/10-mem.yaml", "/etc/vigil/conf.d/20-disk.yaml", "/opt/extra/one.yaml"])
        #expect(manifest.includeDirectories == ["/etc/vigil/conf.d"])
        #expect(manifest.includes.map(\.pattern) == ["conf.d/*.yaml", "/opt/extra/one.yaml"])
        #expect(manifest.monitors.map(\.name) == ["cpu", "mem", "disk"])
        #expect(manifest.monitors[1].thresholds.count == 1)
        #expect(manifest.monitors[2].interval == 5_000_000_000)
        #expect(manifest.monitors[2].location == Self.at("/etc/vigil/conf.d/20-disk.yaml", 2, 3))
        #expect(manifest.rules.map(\.name) == ["busy"])
        #expect(manifest.sinks.map(\.name) == ["console", "out"])
        // match patterns are checked against every file's monitors: no "matches no monitor" warning
        #expect(!d.contains { $0.message.contains("matches no monitor") }, "\(ManifestErrors(d))")
    }

    @Test("a name defined twice is an error at both places, each naming the other", arguments: [
        ("monitors", "monitor", "cpu: { plugin: cpu }"),
        ("sinks", "sink", "cpu: { type: log }"),
        ("rules", "rule", "cpu: { all: [ \"x.y > 1\" ] }"),
    ])
    func duplicateAcrossFiles(section: String, what: String, entry: String) {
        let fragmentA = "/etc/vigil/conf.d/a.yaml", fragmentB = "/etc/vigil/conf.d/b.yaml"
        let (_, d) = Self.load([
            Self.main: "include: conf.d/*.yaml\nmonitors:\n  x: { plugin: x }\n\(section == "monitors" ? "" : "\(section):\n  \(entry)\n")",
            fragmentA: "# first fragment\n\(section):\n  \(entry)\n",
            fragmentB: "\(section):\n    \(entry)\n",
        ])
        let twice = d.filter { $0.message.contains("\(what) 'cpu' is defined twice") }
        let mainAt = section == "monitors" ? nil : Self.at(Self.main, 5, 3)
        let aAt = Self.at(fragmentA, 3, 3), bAt = Self.at(fragmentB, 2, 5)
        if let mainAt {
            // main vs a, main vs b: four errors, the main file's twice
            #expect(twice.count == 4, "\(ManifestErrors(d))")
            #expect(twice.filter { $0.location == mainAt }.count == 2)
            #expect(twice.contains { $0.location == aAt && $0.message.hasSuffix("here and at \(mainAt)") })
            #expect(twice.contains { $0.location == bAt && $0.message.hasSuffix("here and at \(mainAt)") })
            #expect(twice.contains { $0.location == mainAt && $0.message.hasSuffix("here and at \(bAt)") })
        } else {
            #expect(twice.count == 2, "\(ManifestErrors(d))")
            #expect(twice.contains { $0.location == aAt && $0.message.hasSuffix("here and at \(bAt)") })
            #expect(twice.contains { $0.location == bAt && $0.message.hasSuffix("here and at \(aAt)") })
        }
        #expect(twice.allSatisfy { $0.level == .error })
    }

    @Test("a rule in a fragment with a monitor's name is an error at both")
    func ruleNamedLikeMonitor() {
        let (_, d) = Self.load([
            Self.main: "include: [conf.d/r.yaml]\nmonitors:\n  cpu: { plugin: cpu }\nsinks: { c: { type: log } }\n",
            "/etc/vigil/conf.d/r.yaml": "rules:\n  cpu: { all: [ \"cpu.usage > 1\" ] }\n",
        ])
        #expect(d.contains { $0.location == Self.at("/etc/vigil/conf.d/r.yaml", 2, 3) && $0.message.contains("rule 'cpu' has the name of a monitor") })
        #expect(d.contains { $0.location == Self.at(Self.main, 3, 3) && $0.message.contains("monitor 'cpu' has the name of a rule") })
    }

    @Test("host-wide keys, include and unknown keys in a fragment are errors at the key, in the fragment")
    func fragmentKeys() {
        let fragment = "/etc/vigil/conf.d/bad.yaml"
        let (m, d) = Self.load([
            Self.main: "include: [\"conf.d/*.yaml\"]\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n",
            fragment: """
            host: other
            isolation: process
            include: ["more/*.yaml"]
            monitor: { x: { plugin: x } }
            monitors: { mem: { plugin: memory } }
            """,
        ])
        expect(d, at: Self.at(fragment, 1, 1), "'host' is a host-wide setting: it belongs in the main manifest \(Self.main)")
        expect(d, at: Self.at(fragment, 2, 1), "'isolation' is a host-wide setting")
        expect(d, at: Self.at(fragment, 3, 1), "a fragment may not include others")
        let unknown = expect(d, at: Self.at(fragment, 4, 1), "unknown key 'monitor' in a fragment")
        #expect(unknown?.hint == "did you mean 'monitors'?")
        #expect(m?.monitors.map(\.name) == ["cpu", "mem"])
        #expect(m?.host == nil)
        #expect(m?.files.count == 2, "a fragment's include is not followed")
    }

    @Test("a fragment's monitors take the main file's isolation; its diagnostics name its file")
    func inheritsAndLocates() throws {
        let fragment = "/etc/vigil/conf.d/m.yaml"
        let (m, d) = Self.load([
            Self.main: "isolation: process\ninclude: conf.d/m.yaml\nsinks: { c: { type: log } }\n",
            fragment: "monitors:\n  vendor:\n    plugin: ./v.so\n    interval: 5 parsecs\n    max_restarts: 3\n",
        ])
        expect(d, at: Self.at(fragment, 4, 15), "'interval' is not a duration")
        let vendor = try #require(m?.monitors.first)
        #expect(vendor.supervision.maxRestarts == 3)
        #expect(m.map { $0.pluginReference(of: vendor) } == "/etc/vigil/./v.so", "relative to the main manifest's directory")
        #expect(!d.contains { $0.message.contains("has no 'monitors:'") }, "monitors in a fragment count")
    }

    @Test("a wildcard matching nothing, or a missing directory, is a note; a missing literal file is an error")
    func nothingMatched() {
        let (m, d) = Self.load([
            Self.main: "include: [\"conf.d/*.yaml\", \"missing.d/*.yaml\", \"one.yaml\"]\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n",
        ], directories: ["/etc/vigil/conf.d"])
        expect(d, at: Self.at(Self.main, 1, 11), "matches no file in /etc/vigil/conf.d", level: .note)
        expect(d, at: Self.at(Self.main, 1, 28), "there is no directory /etc/vigil/missing.d", level: .note)
        let missing = expect(d, at: Self.at(Self.main, 1, 48), "cannot include /etc/vigil/one.yaml: no such file")
        #expect(missing?.hint?.contains("names one file") == true)
        #expect(m?.includeDirectories == ["/etc/vigil/conf.d", "/etc/vigil/missing.d"])
        #expect(m?.files == [Self.main])
    }

    @Test("patterns that cannot be used are errors at the pattern")
    func badPatterns() {
        let long = String(repeating: "a", count: 300) + "*"
        let (_, d) = Self.load([
            Self.main: "include: [\"\", \"*/x.yaml\", \"conf.d/\", \"\(long)\", \"conf.d\", [a]]\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n",
            "/etc/vigil/conf.d/a.yaml": "monitors: {}",
        ])
        expect(d, at: Self.at(Self.main, 1, 11), "an 'include' pattern is empty")
        expect(d, at: Self.at(Self.main, 1, 15), "has a wildcard before its last '/'")
        expect(d, at: Self.at(Self.main, 1, 27), "'conf.d/' names a directory")
        expect(d, at: Self.at(Self.main, 1, 38), "the file-name part of 'include' pattern")
        let dir = expect(d, at: Self.at(Self.main, 1, 343), "cannot include /etc/vigil/conf.d: it is a directory")
        #expect(dir?.hint == "to include the files in it, write conf.d/*.yaml")
        expect(d, at: Self.at(Self.main, 1, 353), "'include' must list strings, not a list")
    }

    @Test("without a source the patterns are kept, not read, and the manifest is not judged incomplete")
    func noSource() {
        let (m, d) = ManifestLoader(file: "x.yaml").load("include: conf.d/*.yaml\n")
        #expect(Self.errors(d).isEmpty, "\(ManifestErrors(d))")
        #expect(!d.contains { $0.message.contains("no 'sinks:'") })
        #expect(m?.includes == [IncludePattern(pattern: "conf.d/*.yaml", location: VigilCore.SourceLocation(file: "x.yaml", line: 1, column: 10))])
        #expect(m?.files == ["x.yaml"])
    }

    @Test("a file matched twice, or the main manifest matched, is read once with a warning")
    func readOnce() {
        let (m, d) = Self.load([
            Self.main: "include: [\"*.yaml\", \"conf.d/a.yaml\", \"conf.d/*.yaml\"]\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n",
            "/etc/vigil/conf.d/a.yaml": "monitors: { mem: { plugin: memory } }\n",
        ])
        #expect(Self.errors(d).isEmpty, "\(ManifestErrors(d))")
        expect(d, at: Self.at(Self.main, 1, 11), "is the main manifest; it is read once", level: .warning)
        expect(d, at: Self.at(Self.main, 1, 38), "already included; it is read once", level: .warning)
        #expect(m?.files == [Self.main, "/etc/vigil/conf.d/a.yaml"])
    }

    @Test("empty and comment-only fragments are fine; a NUL in a comment is not text")
    func emptyFragments() {
        let (m, d) = ManifestLoader(file: Self.main).load(from: InMemoryManifestSource(bytes: [
            Self.main: Array("include: conf.d/*.yaml\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n".utf8),
            "/etc/vigil/conf.d/a.yaml": [],
            "/etc/vigil/conf.d/b.yaml": Array("# switched off\n  # for now\n".utf8),
            "/etc/vigil/conf.d/c.yaml": Array("# a \0 here\n".utf8),
            "/etc/vigil/conf.d/d.yaml": Array("[1, 2]\n".utf8),
        ]))
        #expect(m?.files.count == 5)
        let errors = Self.errors(d)
        #expect(errors.count == 2, "\(ManifestErrors(d))")
        #expect(errors.contains { $0.location.file == "/etc/vigil/conf.d/c.yaml" && $0.location.line == 1 })
        #expect(errors.contains { $0.location == Self.at("/etc/vigil/conf.d/d.yaml", 1, 1) && $0.message.contains("a fragment must be a mapping") })
    }

    @Test("limits: files in all, bytes in all, bytes of one fragment, names in one directory")
    func limits() throws {
        var files = [Self.main: "include: conf.d/*.yaml\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n"]
        for i in 0..<(ManifestLimits.maxIncludedFiles + 5) { files["/etc/vigil/conf.d/\(1000 + i).yaml"] = "# \(i)\n" }
        var (m, d) = Self.load(files)
        expect(d, at: Self.at(Self.main, 1, 10), "'include' brings in more than \(ManifestLimits.maxIncludedFiles) files; /etc/vigil/conf.d/\(1000 + ManifestLimits.maxIncludedFiles).yaml")
        #expect(m?.files.count == ManifestLimits.maxIncludedFiles + 1)

        // three fragments of 3MiB: the third passes 8MiB in all
        let big = "# " + String(repeating: "x", count: 3 << 20) + "\n"
        (m, d) = Self.load([
            Self.main: "include: conf.d/*.yaml\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n",
            "/etc/vigil/conf.d/a.yaml": big, "/etc/vigil/conf.d/b.yaml": big, "/etc/vigil/conf.d/c.yaml": big,
            "/etc/vigil/conf.d/d.yaml": "monitors: { late: { plugin: x } }",
        ])
        expect(d, at: Self.at(Self.main, 1, 10), "cannot include /etc/vigil/conf.d/c.yaml (matched by 'conf.d/*.yaml'): the manifest and its fragments would pass the limit of 8MiB in all")
        #expect(m?.files.count == 3)
        #expect(m?.monitors.map(\.name) == ["cpu"], "nothing after the limit is read")

        let huge = String(repeating: "x", count: ManifestLimits.maxFileBytes + 10)
        (m, d) = Self.load([
            Self.main: "include: conf.d/*.yaml\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n",
            "/etc/vigil/conf.d/a.yaml": huge, "/etc/vigil/conf.d/b.yaml": "monitors: { b: { plugin: x } }",
        ])
        expect(d, at: Self.at(Self.main, 1, 10), "cannot include /etc/vigil/conf.d/a.yaml (matched by 'conf.d/*.yaml'): it is larger than the limit of 4MiB a file")
        #expect(m?.monitors.map(\.name) == ["cpu", "b"], "one file too large does not stop the others")

        var crowded = [Self.main: "include: crowd/*.yaml\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n"]
        for i in 0...ManifestLimits.maxIncludeDirectoryEntries { crowded["/etc/vigil/crowd/\(i)"] = "" }
        (m, d) = Self.load(crowded)
        expect(d, at: Self.at(Self.main, 1, 10), "holds more than \(ManifestLimits.maxIncludeDirectoryEntries) names")
        #expect(m?.files == [Self.main])
    }

    @Test("a pathological pattern over a full directory stays fast: the bounds bound the matching")
    func pathologicalPattern() {
        // '*a*a*…*b' against names of 'a's: the most a backtracking match can cost, on the most names looked at.
        let name = String(repeating: "*a", count: (ManifestLimits.maxIncludeNamePatternBytes - 1) / 2) + "b"
        var files = [Self.main: "include: [\"d/\(name)\"]\nmonitors: { cpu: { plugin: cpu } }\nsinks: { c: { type: log } }\n"]
        for i in 0..<ManifestLimits.maxIncludeDirectoryEntries {
            files["/etc/vigil/d/\(i)" + String(repeating: "a", count: 240)] = ""
        }
        let clock = ContinuousClock()
        let start = clock.now
        let (m, d) = Self.load(files)
        #expect(clock.now - start < .seconds(10), "took \(clock.now - start)")
        #expect(d.contains { $0.level == .note && $0.message.contains("matches no file") }, "\(ManifestErrors(d))")
        #expect(m?.files == [Self.main])
    }

    @Test("a source that fails: every reason is an error at the pattern, naming the file")
    func failingSource() {
        struct Failing: ManifestSource {
            func read(_ path: String, limit: Int, fragment: Bool) throws(ManifestSourceError) -> ManifestSourceFile {
                if !fragment { return ManifestSourceFile(bytes: Array("include: [\"d/*.yaml\", \"x/*.yaml\", \"loop.yaml\"]\nmonitors: {}\n".utf8), identity: "main") }
                if path.hasSuffix("loop.yaml") { throw ManifestSourceError(.other, "Too many levels of symbolic links") }
                throw ManifestSourceError(.notRegularFile, "not a regular file (a FIFO)")
            }
            func list(_ directory: String, limit: Int) throws(ManifestSourceError) -> [String] {
                if directory == "d" { return ["fifo.yaml"] }
                throw ManifestSourceError(.other, "Permission denied")
            }
        }
        let (_, d) = ManifestLoader(file: "main.yaml").load(from: Failing())
        expect(d, at: VigilCore.SourceLocation(file: "main.yaml", line: 1, column: 11), "cannot include d/fifo.yaml (matched by 'd/*.yaml'): not a regular file (a FIFO)")
        expect(d, at: VigilCore.SourceLocation(file: "main.yaml", line: 1, column: 23), "cannot read the directory x of 'include' pattern 'x/*.yaml': Permission denied")
        expect(d, at: VigilCore.SourceLocation(file: "main.yaml", line: 1, column: 35), "cannot include loop.yaml: Too many levels of symbolic links")
    }

    @Test("a main file the source cannot read is one error at its line 1")
    func mainUnreadable() {
        let (m, d) = Self.load([:], directories: [Self.main])
        #expect(m == nil)
        #expect(d.map(\.description) == ["\(Self.main):1:1: error: it is a directory, not a manifest"])
    }

    /// Expects one diagnostic containing `message`, at `location`, of `level`.
    @discardableResult
    func expect(_ d: [Diagnostic], at location: VigilCore.SourceLocation, _ message: String, level: Diagnostic.Level = .error,
                sourceLocation: Testing.SourceLocation = #_sourceLocation) -> Diagnostic? {
        let found = d.filter { $0.message.contains(message) }
        guard found.count == 1, let one = found.first else {
            Issue.record("expected one diagnostic containing \"\(message)\", found \(found.count) in:\n\(ManifestErrors(d))", sourceLocation: sourceLocation)
            return nil
        }
        #expect(one.location == location, "\(one)", sourceLocation: sourceLocation)
        #expect(one.level == level, "\(one)", sourceLocation: sourceLocation)
        return one
    }
}
