import Foundation
import Testing

/// `vigil run --once` through the real binary: one poll of each monitor (a
/// push-only one's start snapshot), the events on stdout, the manifest's
/// sinks never made, and an exit status that says whether every monitor
/// came through.
@Suite(.startsProcesses, .offThePool) struct OnceRunTests {
    /// Every path under `dir`, relative, sorted.
    static func tree(_ dir: String) -> [String] {
        (FileManager.default.enumerator(atPath: dir)?.allObjects as? [String] ?? []).sorted()
    }

    @Test func printsOnePollAndAPushSnapshotAndMakesNoSink() throws {
        let dir = try TestEnv.tempDir()
        let watched = dir + "/watched.txt"
        try TestEnv.write("hello", to: watched)
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 10ms }
          files: { plugin: files, options: { paths: ["\(watched)"] } }
          quiet: { plugin: heartbeat, enabled: false }
        rules:
          alive: { all: [ beat.count >= 1 ], exec: ["/bin/touch", "\(dir)/rule-ran"] }
        sinks:
          journal: { type: file, path: \(dir)/out/events.jsonl }
          live: { type: socket, listen: "unix:\(dir)/events.sock" }
          collector: { type: socket, connect: "unix:\(dir)/collector.sock" }
          console: { type: log, stream: stdout }
        """, to: manifest)
        let before = Self.tree(dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", "--once", manifest], environment: ["VIGIL_STATE_DIR": dir + "/state"],
                                     timeout: 60)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        // One poll, though the interval is 10ms: exactly one beat.
        #expect(lines.filter { $0.hasPrefix("beat/beat ") } == ["beat/beat info count=1 message=alive"], "\(result.stdout)")
        // The push-only plugin's start snapshot.
        #expect(lines.contains { $0.hasPrefix("files/present info path=\(watched) is_dir=false size=5 ") }, "\(result.stdout)")
        // The rule's event, but not its program; not the host's own events.
        #expect(lines.contains("alive/rule warning active=true beat.count=1"), "\(result.stdout)")
        #expect(!lines.contains { $0.hasPrefix("vigil/") || $0.hasPrefix("quiet/") }, "\(result.stdout)")
        // Nothing of the manifest's sinks, no control socket, no rule program: the directory is as it was.
        #expect(Self.tree(dir) == before, "\(Self.tree(dir))")
        #expect(result.stderr.isEmpty, "\(result.stderr)")

        let json = try TestEnv.run(TestEnv.vigil, ["run", "--once", "--json", manifest], timeout: 60)
        #expect(json.status == 0, "\(json.stderr)")
        let objects = try json.stdout.split(separator: "\n").map {
            try #require(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
        }
        #expect(objects.filter { $0["monitor"] as? String == "beat" }.count == 1)
        #expect(objects.contains { $0["monitor"] as? String == "files" && $0["kind"] as? String == "present" })
        #expect(Self.tree(dir) == before)
    }

    @Test func aMonitorThatFailsToStartOrPollExitsOneWithTheReason() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat }
          refuses: { plugin: start_fails }
          broken: { plugin: poll_errors }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", "--once", manifest], timeout: 60)
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("beat/beat info count=1"), "the others' events are printed: \(result.stdout)")
        let said = result.stderr.split(separator: "\n").filter { $0.hasPrefix("vigil: monitor ") }.map(String.init)
        #expect(said == ["vigil: monitor 'refuses' failed: start failed (fatal): start refused: device busy",
                         "vigil: monitor 'broken' failed: poll failed: sensor read failed (EIO)"], "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/events.jsonl"))
    }

    /// A source this machine does not have (no /proc/loadavg here) is said, and is not a failure.
    @Test func anUnavailableMonitorIsSaidButIsNoFailure() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat }
          gone: { plugin: load, options: { procfs: \(dir)/no-proc } }
        sinks:
          out: { type: null }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", "--once", manifest], timeout: 60)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("beat/beat info count=1"), "\(result.stdout)")
        let said = result.stderr.split(separator: "\n").filter { $0.hasPrefix("vigil: monitor ") }
        #expect(said.count == 1 && said[0].hasPrefix("vigil: monitor 'gone' unavailable on this machine (not a failure): "),
                "\(result.stderr)")
    }

    @Test func aPollThatNeverReturnsIsCutOffAtItsTimeout() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          slow: { plugin: slow_poll, isolation: process, timeout: 300ms, options: { sleep: 1h } }
          beat: { plugin: heartbeat }
        sinks:
          out: { type: null }
        """, to: manifest)
        let start = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["run", "--once", manifest], timeout: 60)
        #expect(Date().timeIntervalSince(start) < 20, "bounded by the timeout and the stop deadline")
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("vigil: monitor 'slow' failed: "), "\(result.stderr)")
        // The runner is killed at the deadline, or the watch gives up on it first: either says the timeout.
        #expect(result.stderr.contains("timeout of 0.300s") || result.stderr.contains("timeout of 300ms"), "\(result.stderr)")
        #expect(result.stdout.contains("beat/beat info count=1"), "\(result.stdout)")
    }

    @Test func anInProcessPollThatNeverReturnsIsCutOffToo() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          slow: { plugin: slow_poll, isolation: none, timeout: 200ms, options: { sleep: 1h } }
        sinks:
          out: { type: null }
        """, to: manifest)
        let start = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["run", "--once", manifest], timeout: 60)
        // The thread cannot be taken back: the run waits the stop deadline (10s) for it, then exits.
        #expect(Date().timeIntervalSince(start) < 30)
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("vigil: monitor 'slow' failed: its poll did not return within its timeout of 200ms; cut off"), "\(result.stderr)")
    }

    @Test func usage() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("monitors: { beat: { plugin: heartbeat } }\nsinks: { out: { type: null } }\n", to: manifest)
        let json = try TestEnv.run(TestEnv.vigil, ["run", "--json", manifest], timeout: 30)
        #expect(json.status == 64, "\(json.stderr)")
        #expect(json.stderr.contains("--json goes with --once"), "\(json.stderr)")
        let both = try TestEnv.run(TestEnv.vigil, ["run", "--once", "--for", "1s", manifest], timeout: 30)
        #expect(both.status == 64, "\(both.stderr)")
    }
}
