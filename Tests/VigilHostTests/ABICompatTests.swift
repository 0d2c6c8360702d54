import Foundation
import Synchronization
import Testing
import VigilCore

/// Plugins of every earlier minor load unchanged in this host. For each of
/// ABI 1.0 to 1.4, Tests/Fixtures/compat/compat.c is built by cc against that
/// minor's frozen header (Tests/Compat/vigil_plugin-1.N.h, never edited),
/// using what the minor offers (see the fixture's comment), and the real
/// `vigil` binary describes it (what the minor can declare and nothing
/// beyond), checks it, and runs it, in a runner process and in its own. The
/// same source builds unchanged against the current header; an "output"
/// from before outputs existed is refused, saying why.
@Suite(.startsProcesses, .offThePool) struct ABICompatTests {
    static let minors = [0, 1, 2, 3, 4]

    /// Where a fixture's `vigil_plugin.h` comes from.
    enum Header: Hashable, CustomStringConvertible {
        case frozen(minor: Int)
        case current

        var includeDir: String {
            switch self {
            case .current: return TestEnv.repoRoot + "/Sources/CVigilPlugin/include"
            case .frozen(let minor): return ABICompatTests.buildRoot + "/header-1.\(minor)"
            }
        }
        var description: String {
            switch self {
            case .current: return "current"
            case .frozen(let minor): return "1.\(minor)"
            }
        }
    }

    /// The fixtures' builds and the frozen headers' copies, once per test run.
    static let buildRoot: String = (try? TestEnv.tempDir("abiCompat")) ?? NSTemporaryDirectory()
    private static let built = Mutex<[String: String]>([:])

    /// `fixture` (a file of Tests/Fixtures/compat) built by cc against
    /// `header`, as scripts/build-c-plugins builds the C plugins; once per
    /// test run for each source, header and defines.
    static func build(_ fixture: String, against header: Header, defines: [String] = []) throws -> String {
        let key = "\(fixture)-\(header)" + defines.map { "-\($0)" }.joined()
        return try built.withLock { built in
            if let path = built[key] { return path }
            if case .frozen(let minor) = header {
                let dir = header.includeDir
                if !FileManager.default.fileExists(atPath: dir + "/vigil_plugin.h") {
                    try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
                    try FileManager.default.copyItem(atPath: TestEnv.repoRoot + "/Tests/Compat/vigil_plugin-1.\(minor).h",
                                                     toPath: dir + "/vigil_plugin.h")
                }
            }
            let dir = buildRoot + "/" + key.filter { $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            let output = dir + "/" + fixture.replacingOccurrences(of: ".c", with: ".so")
            let compiler = try FFIPluginTests.cCompiler()
            let result = try TestEnv.run(compiler[0], Array(compiler.dropFirst()) + [
                "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-shared", "-fPIC",
                "-I", header.includeDir] + defines.map { "-D" + $0 } + [
                TestEnv.fixture("compat/" + fixture), "-o", output,
            ], timeout: 120)
            guard result.status == 0 else {
                throw TestFailure("cc of \(fixture) against the \(header) header (\(defines)) failed: \(result.stderr)")
            }
            built[key] = output
            return output
        }
    }

    /// compat.c written for ABI 1.`minor`, built against `header` (its own
    /// frozen one unless said).
    static func plugin(minor: Int, header: Header? = nil) throws -> String {
        try build("compat.c", against: header ?? .frozen(minor: minor), defines: ["COMPAT_MINOR=\(minor)"])
    }

    /// Each frozen copy is the header of the minor its name says (the
    /// copies themselves are never edited: Tests/Compat/README.md).
    @Test(arguments: minors)
    func eachFrozenHeaderIsOfItsMinor(minor: Int) throws {
        let text = try String(contentsOfFile: TestEnv.repoRoot + "/Tests/Compat/vigil_plugin-1.\(minor).h", encoding: .utf8)
        #expect(text.contains("#define VIGIL_ABI_MAJOR 1\n#define VIGIL_ABI_MINOR \(minor)\n"))
    }

    // MARK: - describe

    /// What `vigil plugins describe` says of the plugin's own options and
    /// kinds, from "Options:" up to the kinds the host adds, for compat.c
    /// written for ABI 1.`declared` that chose ABI 1.`read`: the options and
    /// fields it declares, with the marks the chosen minor has room for.
    /// Field flags and on-change kinds (1.4), examples (1.3) and dynamic
    /// fields (1.2) appear from the minor that brought them, never before.
    static func declarations(minor declared: Int, read: Int? = nil) -> String {
        let read = read ?? declared
        var out = """
        Options:
          label (string, default compat)
              Carried by every reading.
          scale (double, default 1.5)
              A reading's value is n times this.
          limit (int, default 3)
              Readings in all, 1 to 1000.
          loud (bool, default false)
              Readings are warnings.

        """
        if declared >= 2 { out += "  extra (json, no default)\n      Names of more int fields of a reading, each equal to n.\n" }
        if declared >= 3 { out += "  target (string, required\(read >= 3 ? ", e.g. demo" : ""))\n      What the readings are about.\n" }
        out += """

        Events:
          reading — One reading.
              n (int\(read >= 4 ? ", counter" : "")): 1 for the first reading, then 2, 3…
              value (double, ratio): n times scale.
              label (string\(read >= 4 ? ", identity" : "")): The label option.

        """
        if declared >= 3 { out += "      target (string): The target option.\n" }
        if declared >= 2 && read >= 2 { out += "      … and fields named by the instance's options\n" }
        if declared >= 4 {
            out += "  state\(read >= 4 ? " (on change)" : "") — Where the readings are.\n"
                + "      phase (string): running, then done after the last reading.\n"
        }
        return out
    }

    /// `vigil plugins describe PATH`: its exit status, the ABI line, and the
    /// declarations (the text between "Options:" and the host's kinds).
    func describe(_ path: String) throws -> (status: Int32, abi: String?, declarations: String, output: TestEnv.Output) {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", path], timeout: 60)
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let abi = lines.first { $0.hasPrefix("  ABI: ") }.map { String($0.dropFirst("  ABI: ".count)) }
        let start = lines.firstIndex(of: "Options:") ?? lines.endIndex
        let end = lines.firstIndex { $0.hasPrefix("  availability ") } ?? lines.endIndex
        let declarations = start < end ? lines[start..<end].map { $0 + "\n" }.joined() : ""
        return (result.status, abi, declarations, result)
    }

    @Test(arguments: minors)
    func describeShowsWhatTheMinorCanDeclareAndNothingBeyond(minor: Int) throws {
        let described = try describe(try Self.plugin(minor: minor))
        #expect(described.status == 0, "\(described.output.stderr)")
        #expect(described.output.stdout.hasPrefix("compat 1.\(minor).0 — Compatibility fixture of ABI 1.\(minor).\n"))
        #expect(described.abi == "1.\(minor)")
        #expect(described.output.stdout.contains("  polled, default interval 10ms\n"))
        #expect(described.declarations == Self.declarations(minor: minor), "\(described.output.stdout)")
    }

    /// A plugin built against the 1.4 header that chooses an older minor is
    /// read as that minor: the marks, examples and flags its structs hold
    /// beyond it are not looked at (the probe child's description, which
    /// describe prints, is the one runners and the checker use).
    @Test(arguments: [0, 1, 2, 3])
    func whatAPluginHoldsBeyondTheMinorItChoseIsNotRead(chosen: Int) throws {
        let plugin = try Self.build("compat.c", against: .frozen(minor: 4),
                                    defines: ["COMPAT_MINOR=4", "COMPAT_ANSWER_MINOR=\(chosen)"])
        let described = try describe(plugin)
        #expect(described.status == 0, "\(described.output.stderr)")
        #expect(described.abi == "1.\(chosen)")
        #expect(described.declarations == Self.declarations(minor: 4, read: chosen), "\(described.output.stdout)")
    }

    // MARK: - check

    @Test(arguments: minors)
    func checkPassesAsBuilt(minor: Int) throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try Self.plugin(minor: minor)], timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("  plugin compat 1.\(minor).0, ABI 1.\(minor), polled"), "\(result.stdout)")
        #expect(result.stdout.contains("chose ABI 1.\(minor); this host speaks 1.5"))
        #expect(result.stdout.hasSuffix("8 passed, 0 failed\n"), "\(result.stdout)")
        // The required `target` has no default: 1.3's example is what lets the check create an instance.
        if minor >= 3 {
            #expect(result.stdout.contains("create with example options"), "\(result.stdout)")
            #expect(result.stdout.contains("target=demo"))
        } else {
            #expect(result.stdout.contains("create with default options     label=compat, scale=1.5, limit=3, loud=false"
                                           + (minor >= 2 ? ", extra=(none)" : "")), "\(result.stdout)")
        }
    }

    // MARK: - run

    /// How the monitor runs: in a runner process (the default for a plugin
    /// from outside the host's directories, reading the description the
    /// probe child sent) or in the host's own (read by the host's loader).
    enum Isolation: String, CaseIterable, CustomStringConvertible {
        case runner, inProcess
        var description: String { rawValue }
    }

    @Test(arguments: minors, Isolation.allCases)
    func runDeliversItsEventsWithTheirFields(minor: Int, isolation: Isolation) throws {
        let dir = try TestEnv.tempDir()
        let plugin = try Self.plugin(minor: minor)
        var options = ["label: abc", "scale: 2", "limit: 3", "loud: true"]
        if minor >= 2 { options.append("extra: [alpha, beta]") }
        if minor >= 3 { options.append("target: disk") }
        try TestEnv.write("""
        monitors:
          c:
            plugin: \(plugin)
            interval: 10ms
            options: { \(options.joined(separator: ", ")) }
        \(isolation == .inProcess ? "    isolation: none" : "")
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl, fsync: never }
        """, to: dir + "/vigil.yaml")
        // A 1.0 plugin cannot say it has finished: it is stopped after a while.
        // From 1.1 on the run ends by itself, long before the minute is out.
        let started = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--control", "none",
                                                     "--for", minor >= 1 ? "60s" : "1s"], timeout: 90)
        #expect(result.status == 0, "every event delivered: \(result.stderr)")
        #expect(result.stderr.contains("monitor 'c' runs in a runner process") == (isolation == .runner), "\(result.stderr)")
        if minor >= 1 {
            #expect(result.stderr.contains("every monitor has finished; stopping"), "\(result.stderr)")
            #expect(Date().timeIntervalSince(started) < 30)
        } else {
            #expect(!result.stderr.contains("finished"), "\(result.stderr)")
        }
        let lines = try String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8).split(separator: "\n")
        let events = try lines.map { try JSONLineDecoder().decode(String($0)).event }.filter { $0.monitor == "c" }
        #expect(events.allSatisfy { $0.plugin == "compat" })

        let readings = events.filter { $0.kind == "reading" }
        let names = ["n", "value", "label"] + (minor >= 3 ? ["target"] : []) + (minor >= 2 ? ["alpha", "beta"] : [])
        #expect(readings.count == 3, "\(events)")
        for (i, reading) in readings.enumerated() {
            let n = Int64(i + 1)
            #expect(reading.severity == .warning)
            #expect(reading.fields.map(\.name) == names)
            #expect(reading[field: "n"] == .int(n))
            #expect(reading[field: "value"] == .double(2 * Double(n)))
            #expect(reading[field: "label"] == .string("abc"))
            if minor >= 3 { #expect(reading[field: "target"] == .string("disk")) }
            if minor >= 2 { #expect(reading[field: "alpha"] == .int(n) && reading[field: "beta"] == .int(n)) }
        }
        let states = events.filter { $0.kind == "state" }
        #expect(states.map { $0[field: "phase"] } == (minor >= 4 ? [.string("running"), .string("done")] : []))
        #expect(Set(events.map(\.kind)).isSubset(of: ["reading", "state"]), "\(events)")
    }

    /// 1.2: an INVALID_CONFIG message may start with the option's path, and
    /// the host reports it at that place in the manifest.
    @Test(arguments: minors.filter { $0 >= 2 })
    func anInvalidConfigNamingAnOptionPathIsReportedAtItsPlace(minor: Int) throws {
        let dir = try TestEnv.tempDir()
        let line = "    options: { \(minor >= 3 ? "target: x, " : "")extra: [alpha, Bad] }"
        let column = line.distance(from: line.startIndex, to: try #require(line.range(of: "Bad")).lowerBound) + 1
        try TestEnv.write("""
        monitors:
          c:
            plugin: \(try Self.plugin(minor: minor))
        \(line)
        """, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml"], timeout: 60)
        #expect(result.status == 1)
        #expect((result.stdout + result.stderr).contains(
            "m.yaml:4:\(column): error: monitor 'c': options.extra[1]: 'Bad' is not a field name ([a-z0-9_], 1 to 32 characters)"),
            "\(result.stdout)\(result.stderr)")
    }

    // MARK: - source compatibility

    /// The same source, built against the current header, is a 1.5 plugin
    /// that declares exactly what its frozen-header build declared.
    @Test(arguments: minors)
    func theCurrentHeaderBuildsEachFixtureUnchanged(minor: Int) throws {
        let current = try describe(try Self.plugin(minor: minor, header: .current))
        #expect(current.status == 0, "\(current.output.stderr)")
        #expect(current.abi == "1.5")
        #expect(current.declarations == Self.declarations(minor: minor), "\(current.output.stdout)")
        let frozen = try describe(try Self.plugin(minor: minor))
        #expect(current.declarations == frozen.declarations)
    }

    // MARK: - outputs need 1.5

    /// A 1.4 plugin that calls itself kind 2 (an output, from 1.5 on) is
    /// refused by describe, check and validate alike, naming the minor that
    /// outputs need and the one it chose.
    @Test func anOutputBuiltAgainstThe14HeaderIsRefusedSayingOutputsNeed15() throws {
        let plugin = try Self.build("output_kind.c", against: .frozen(minor: 4))
        let why = "an output plugin needs ABI 1.5 or later; it chose 1.4"

        let described = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", plugin], timeout: 60)
        #expect(described.status == 1)
        #expect(described.stderr.contains("plugin \(plugin) refused: malformed self-description: \(why)"), "\(described.stderr)")

        let checked = try TestEnv.run(TestEnv.vigil, ["plugins", "check", plugin], timeout: 60)
        #expect(checked.status != 0)
        #expect(checked.stderr.contains(why), "\(checked.stdout)\(checked.stderr)")

        let dir = try TestEnv.tempDir()
        try TestEnv.write("""
        monitors:
          c: { plugin: \(try Self.plugin(minor: 0)) }
        sinks:
          out: { type: plugin, plugin: \(plugin), isolation: none }
        """, to: dir + "/m.yaml")
        let validated = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml"], timeout: 60)
        #expect(validated.status == 1)
        #expect((validated.stdout + validated.stderr).contains("m.yaml:4:32: error: sink 'out': plugin \(plugin) refused: malformed self-description: \(why)"),
                "\(validated.stdout)\(validated.stderr)")
    }
}
