import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// `vigil validate`, `plugins list` and `plugins describe` know every plugin
/// by the description its probe child sent, and never load one in the vigil
/// process: a plugin that crashes is a refusal, and the good ones are
/// described in full all the same.
@Suite(.startsProcesses, .offThePool) struct ProbeOnlyVerbsTests {
    /// A 0755 directory with good plugins beside ones that crash or hang.
    func pluginDir(_ tag: String = #function) throws -> String {
        let dir = try TestEnv.tempDir(tag)
        #expect(chmod(dir, 0o755) == 0)
        for name in ["good_minimal", "heartbeat", "crash_in_constructor", "create_crashes", "create_hangs", "entry_is_data"] {
            try FileManager.default.copyItem(atPath: try TestEnv.cPlugin(name), toPath: "\(dir)/\(name).so")
        }
        return dir
    }

    /// `dir`/vigil.yaml: `body` after a `plugin_dirs` naming `dir`.
    func writeManifest(in dir: String, _ body: String) throws -> String {
        let path = dir + "/vigil.yaml"
        try TestEnv.write("plugin_dirs: [\(dir)]\n" + body, to: path)
        return path
    }

    @Test func describePrintsAGoodPluginInFullAndRefusesACrashingOne() throws {
        let dir = try pluginDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let good = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "--plugin-dir", dir, "heartbeat"])
        #expect(good.status == 0, "\(good.stderr)")
        for line in ["heartbeat 1.0.0 — Emits a beat every interval", "  file: \(dir)/heartbeat.so", "  ABI: 1.5",
                     "  polled, default interval 1s",
                     "  threads (int, default 0)", "  push_interval (duration, default 100ms)", "  message (string, default alive)",
                     "  beat — One per poll.", "      count (int, count, counter): Beats emitted by this instance so far",
                     "  push — One per push_interval", "      thread (int, identity): Index of the pushing thread",
                     "  availability (on change) — The monitor's source appeared or went away"] {
            #expect(good.stdout.contains(line), "\(line) in \(good.stdout)")
        }
        // create is not called by describe: a plugin whose create crashes is described.
        let createCrashes = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "\(dir)/create_crashes.so"])
        #expect(createCrashes.status == 0 && createCrashes.stdout.contains("create_crashes 1.0.0"), "\(createCrashes.stderr)")

        let crash = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "--plugin-dir", dir, "crash_in_constructor"])
        #expect(crash.status == 1)
        #expect(crash.stdout.isEmpty)
        #expect(crash.stderr.contains("vigil: plugin \(dir)/crash_in_constructor.so refused: load (dlopen, its constructors and vigil_plugin_entry) crashed with SIGSEGV (Segmentation fault)\n"),
                "\(crash.stderr)")
        let data = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "\(dir)/entry_is_data.so"])
        #expect(data.status == 1 && data.stderr.hasSuffix("refused: it exports vigil_plugin_entry as data, not a function\n"), "\(data.stderr)")

        let timed = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "--timing", "--plugin-dir", dir, "heartbeat"])
        #expect(timed.status == 0 && timed.stdout.contains("threads (int, default 0)"), "\(timed.stderr)")
        // timing: load 0.084 ms (vetting 0.021, dlopen 0.050, entry 0.002, reading 0.008), create 0.003 ms
        let line = String(timed.stdout.split(separator: "\n").last ?? "")
        let numbers = line.split(whereSeparator: { !"0123456789.".contains($0) }).compactMap { Double($0) }
        #expect(line.hasPrefix("timing: load ") && line.contains(" ms (vetting ") && line.contains(", dlopen ")
                && line.contains(", entry ") && line.contains(", reading ") && line.hasSuffix(" ms"), "\(line)")
        // The steps are parts of the load, each measured, none longer than the whole.
        #expect(numbers.count == 6 && numbers[1...4].allSatisfy { $0 >= 0 && $0 <= numbers[0] }
                && numbers[1...4].reduce(0, +) <= numbers[0] + 0.0005 && numbers[2] > 0, "\(line)")
    }

    @Test func listListsTheGoodInOrderWithTimingAndTheRefusedAfter() throws {
        let dir = try pluginDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "list", "--timing", "--plugin-dir", dir], timeout: 120)
        #expect(result.status == 1)
        let rows = result.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
        #expect(rows.first == ["NAME", "VERSION", "ABI", "LOAD+CREATE", "MS", "PATH"], "\(result.stdout)")
        let mine = rows.filter { $0.last?.hasPrefix(dir + "/") == true }
        // In file order, whichever probe child finished first.
        #expect(mine.map(\.[0]) == ["create_crashes", "create_hangs", "good_minimal", "heartbeat"], "\(result.stdout)")
        for row in mine {
            #expect(row.count == 5 && row[1] == "1.0.0" && row[2] == "1.5", "\(row)")
        }
        #expect(mine.first { $0[0] == "heartbeat" }.map { Double($0[3]) != nil } == true, "\(result.stdout)")
        let refused = result.stderr.split(separator: "\n").filter { $0.contains(dir) }
        #expect(refused == [
            "vigil: plugin \(dir)/crash_in_constructor.so refused: load (dlopen, its constructors and vigil_plugin_entry) crashed with SIGSEGV (Segmentation fault)",
            "vigil: plugin \(dir)/entry_is_data.so refused: it exports vigil_plugin_entry as data, not a function",
        ], "\(result.stderr)")
    }

    @Test func validateChecksOptionsKindsAndFieldsOfTheGoodBesideTheRefused() throws {
        let dir = try pluginDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let manifest = try writeManifest(in: dir, """
        monitors:
          beat:
            plugin: heartbeat
            options: { thread: 2 }
          pulse:
            plugin: heartbeat
            thresholds:
              cont: { critical: { above: 10 } }
          ctor: { plugin: crash_in_constructor }
          crash: { plugin: create_crashes }
        sinks:
          out: { type: log, match: ["pulse/pulse"] }
        """)
        let result = try TestEnv.run(TestEnv.vigil, ["validate", manifest], timeout: 120)
        #expect(result.status == 1)
        func reported(_ text: String) -> Bool { result.stderr.contains("\(manifest):\(text)\n") }
        // The good plugin's options, fields and kinds, as its probe child described them.
        #expect(reported("5:16: error: unknown option 'thread' for plugin 'heartbeat' in monitor 'beat'\n  hint: did you mean 'threads'?"),
                "\(result.stderr)")
        #expect(reported("9:7: error: monitor 'pulse' (plugin heartbeat) has no field 'cont'\n  hint: did you mean 'count'?"))
        #expect(reported("13:29: warning: pattern 'pulse/pulse' in 'match' of sink 'out' can never match: monitor 'pulse' has no event kind 'pulse'\n  hint: kinds: availability, beat, push, threshold"))
        // The crashing ones, at their monitors; a plugin found but refused gets no "did you mean".
        #expect(reported("10:19: error: monitor 'ctor': plugin \(dir)/crash_in_constructor.so refused: load (dlopen, its constructors and vigil_plugin_entry) crashed with SIGSEGV (Segmentation fault)"))
        #expect(reported("11:3: error: monitor 'crash': create crashed with SIGSEGV (Segmentation fault)"))
        #expect(!result.stderr.contains("did you mean 'crash_in_constructor'"))
        #expect(result.stderr.hasSuffix("\(manifest): 4 errors, 1 warning\n"), "\(result.stderr)")
    }

    /// A manifest of 40,000 monitors with long names: their names reach the
    /// probe on its stdin, not in its arguments (past ARG_MAX: "Argument
    /// list too long"), each is created once in the one probe of their
    /// plugin file, and nothing is blamed on the plugin for the time the
    /// host takes (issue 26).
    @Test func validateCreatesFortyThousandMonitorsInOneProbe() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let prefix = String(repeating: "a_monitor_with_a_rather_long_name_", count: 2)
        var body = "plugin_dirs: [\(try TestEnv.cPlugins())]\nisolation: process\nmonitors:\n"
        for i in 0..<40_000 { body += "  \(prefix)\(i): {plugin: heartbeat}\n" }
        body += "sinks:\n  out: { type: null }\n"
        try TestEnv.write(body, to: dir + "/vigil.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/vigil.yaml"], timeout: 300)
        #expect(result.status == 0, "\(result.stderr.suffix(2000))")
        #expect(result.stdout.contains("valid: 40000 monitors"), "\(result.stdout.suffix(500))")
    }

    /// Which processes dlopen'ed a file of `dir`: each process writes its
    /// own ld.so trace (`LD_DEBUG_OUTPUT=PREFIX` makes `PREFIX.PID`).
    func loaders(of dir: String, _ arguments: [String], fork: Bool = true) throws -> (vigil: Bool, children: Int, output: TestEnv.Output) {
        let traces = try TestEnv.tempDir("ldtrace")
        defer { try? FileManager.default.removeItem(atPath: traces) }
        let process = try TestEnv.start(TestEnv.vigil, arguments,
                                        environment: ["LD_DEBUG": "files", "LD_DEBUG_OUTPUT": traces + "/ld",
                                                      "VIGIL_RUNNER_FORK": fork ? "1" : "0"])
        let output = process.wait(timeout: 120)
        var vigil = false
        var children = 0
        for name in try FileManager.default.contentsOfDirectory(atPath: traces) {
            let trace = try String(contentsOfFile: "\(traces)/\(name)", encoding: .utf8)
            guard trace.contains("file=\(dir)/") else { continue }
            if name == "ld.\(process.pid)" { vigil = true } else { children += 1 }
        }
        return (vigil, children, output)
    }

    @Test func noneOfThemLoadsAPluginInTheVigilProcess() throws {
        let dir = try pluginDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let manifest = try writeManifest(in: dir, """
        monitors:
          good: { plugin: good_minimal, interval: 100ms }
          beat: { plugin: heartbeat }
        sinks: { out: { type: null } }
        """)
        for verb in [["validate", manifest], ["plugins", "list", "--plugin-dir", dir], ["plugins", "describe", "\(dir)/heartbeat.so"],
                     ["plugins", "describe", "--timing", "\(dir)/heartbeat.so"]] {
            let (vigil, children, output) = try loaders(of: dir, verb)
            #expect(output.stderr.isEmpty || verb[1] == "list", "\(verb): \(output.stderr)")
            #expect(!vigil, "\(verb) loaded a plugin in the vigil process")
            #expect(children >= 1, "\(verb): no probe child loaded a plugin")
        }
        // run: a plugin from outside the host's directories is loaded by its
        // runner process, never by the host (issue 12's default).
        // Runners started by exec here: ld.so writes a forked runner's trace
        // to its fork server's file, a descriptor the runner does not keep.
        let (vigil, children, output) = try loaders(of: dir, ["run", "--for", "300ms", manifest], fork: false)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(!vigil, "run loaded an outside plugin in the host process")
        #expect(children >= 1, "no runner loaded the plugin")
    }
}
