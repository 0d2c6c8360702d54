import Foundation
import Testing

/// Each status of docs/exit-status.md through the real `vigil run`: the
/// status, and the exit lines and `--summary` agreeing with it.
@Suite(.startsProcesses, .offThePool) struct ExitStatusTests {
    static func manifest(_ body: String, in dir: String) throws -> String {
        let path = dir + "/vigil.yaml"
        try TestEnv.write("plugin_dirs: [\(try TestEnv.cPlugins())]\n" + body, to: path)
        return path
    }

    @Test func zeroWhenEverythingWasDeliveredAndRefusedEmitsAreNoLoss() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("""
        monitors:
          beat: { plugin: heartbeat, interval: 50ms }
          bad: { plugin: malformed, interval: 50ms, options: { case: 1 } }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl }
        """, in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "500ms", "--control", "none", "--summary", dir + "/s.json"], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains(", none lost\n"), "\(result.stderr)")
        let summary = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/s.json"))) as? [String: Any])
        #expect(summary["lost"] as? Int == 0)
        let bad = (summary["monitors"] as? [[String: Any]])?.first { $0["name"] as? String == "bad" }
        #expect((bad?["refused"] as? Int ?? 0) > 0, "the plugin's bad emits were refused: \(bad ?? [:])")
    }

    @Test func oneWhenTheRunCannotStart() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("monitors:\n  beat: { plugin: heartbeat }\nsinks:\n  out: { type: null }\n", in: dir)
        try TestEnv.write("a file", to: dir + "/file")
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "1s", "--control", "unix:\(dir)/file/vigil.sock"], timeout: 60)
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("Not a directory"), "\(result.stderr)")
    }

    @Test func twoForAnInvalidFragmentNamingItsFile() throws {
        let dir = try TestEnv.tempDir()
        try FileManager.default.createDirectory(atPath: dir + "/conf.d", withIntermediateDirectories: true)
        let manifest = try Self.manifest("include: conf.d/*.yaml\nmonitors:\n  beat: { plugin: heartbeat }\nsinks:\n  out: { type: null }\n", in: dir)
        try TestEnv.write("monitors:\n  other: { plugin: heartbeat, interval: soon }\n", to: dir + "/conf.d/a.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "1s", "--control", "none"], timeout: 60)
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("\(dir)/conf.d/a.yaml:2:41: error: 'interval' is not a duration"), "\(result.stderr)")
        #expect(result.stderr.contains("nothing was started"))
    }

    @Test func threeWhenAWriteFails() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("""
        monitors:
          beat: { plugin: heartbeat, interval: 20ms }
        sinks:
          full: { type: file, path: /dev/full }
        """, in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "500ms", "--control", "none"], timeout: 60)
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains(" write_failed, "), "\(result.stderr)")
        #expect(result.stderr.contains("lost in sinks (exit status 3)"), "\(result.stderr)")
        #expect(!result.stderr.contains("none lost"), "\(result.stderr)")
    }

    @Test func threeWhenADropNewestQueueOfOneOverflows() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("""
        monitors:
          flood: { plugin: flood, options: { count: 20000 } }
        sinks:
          small: { type: null, queue_size: 1, overflow: drop_newest, match: [flood] }
        """, in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "5s", "--control", "none", "--summary", dir + "/s.json"], timeout: 60)
        #expect(result.status == 3, "\(result.stderr)")
        let summary = try SinkRunTests.summary(dir + "/s.json")
        let small = try #require(summary[sink: "small"])
        #expect((small.lost["queue_full"] ?? 0) > 0)
        #expect(small.written + small.lostTotal == 20000, "every flood event delivered or counted")
    }

    /// A file sink on a FIFO nobody reads blocks in open(2): the host gives up
    /// on it at the drain deadline, and what it held is lost, counted, told.
    @Test func threeWhenASinkIsStuckPastTheDrainDeadline() throws {
        let dir = try TestEnv.tempDir()
        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        let manifest = try Self.manifest("""
        monitors:
          beat: { plugin: heartbeat, interval: 50ms }
        sinks:
          stuck: { type: file, path: \(dir)/fifo }
        """, in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "300ms", "--drain-timeout", "200ms", "--control", "none",
                                                     "--summary", dir + "/s.json"], timeout: 60)
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("sink stuck did not finish"), "\(result.stderr)")
        let stuck = try #require(try SinkRunTests.summary(dir + "/s.json")[sink: "stuck"])
        #expect(stuck.written == 0)
        #expect((stuck.lost["shutdown"] ?? 0) > 0 && stuck.lostTotal == stuck.lost["shutdown"], "\(stuck)")
        #expect(!result.stderr.contains("none lost"), "\(result.stderr)")
    }

    /// A FIFO (or any file that is not a regular one) as the manifest is
    /// refused at once: open(2) of a FIFO waits for a writer, and a host
    /// waiting there could not be stopped (issue 26). The same at a reload:
    /// the running manifest stays, and SIGTERM still ends the run.
    /// `validate` and `run` judge a manifest alike (issue 26): options a
    /// plugin refuses at create, and a file sink whose path is a directory,
    /// are the same errors at the same places from both, and `run` starts
    /// nothing (status 2) where `validate` calls the manifest invalid.
    @Test func twoWhereValidateCallsTheManifestInvalid() throws {
        let dir = try TestEnv.tempDir()
        let badOption = try Self.manifest("""
        monitors:
          beat: { plugin: heartbeat, interval: 1h }
          fast: { plugin: heartbeat, options: { push_interval: 1ns } }
        sinks:
          out: { type: null }
        """, in: dir)
        let validated = try TestEnv.run(TestEnv.vigil, ["validate", badOption], timeout: 60)
        let error = validated.stderr.split(separator: "\n").first { $0.contains("error: monitor 'fast'") }.map(String.init)
        #expect(validated.status != 0 && error != nil, "\(validated.stderr)")
        let ran = try TestEnv.run(TestEnv.vigil, ["run", badOption, "--for", "2s", "--control", "none"], timeout: 60)
        #expect(ran.status == 2, "\(ran.stderr)")
        #expect(error.map { ran.stderr.contains($0) } == true, "the same line from both: \(error ?? "") in \(ran.stderr)")
        #expect(!ran.stderr.contains("started 2 monitors"), "\(ran.stderr)")

        try FileManager.default.createDirectory(atPath: dir + "/events", withIntermediateDirectories: true)
        let sinkIsDirectory = try Self.manifest("""
        monitors:
          beat: { plugin: heartbeat, interval: 1h }
        sinks:
          out: { type: file, path: \(dir)/events }
        """, in: dir)
        let validatedSink = try TestEnv.run(TestEnv.vigil, ["validate", sinkIsDirectory], timeout: 60)
        let sinkError = validatedSink.stderr.split(separator: "\n").first { $0.contains("is a directory") }.map(String.init)
        #expect(validatedSink.status != 0 && sinkError != nil, "\(validatedSink.stderr)")
        let ranSink = try TestEnv.run(TestEnv.vigil, ["run", sinkIsDirectory, "--for", "2s", "--control", "none"], timeout: 60)
        #expect(ranSink.status == 2, "\(ranSink.stderr)")
        #expect(sinkError.map { ranSink.stderr.contains($0) } == true, "\(ranSink.stderr)")
    }

    @Test func twoWhenTheManifestIsAFIFOAndNoHangAtAReloadToOne() throws {
        let dir = try TestEnv.tempDir()
        let fifo = dir + "/m.yaml"
        #expect(mkfifo(fifo, 0o600) == 0)
        let started = Date()
        let validate = try TestEnv.run(TestEnv.vigil, ["validate", fifo], timeout: 20)
        #expect(validate.status == 1 || validate.status == 2, "\(validate.stderr)")
        #expect(validate.stderr.contains("\(fifo):1:1: error: cannot read it: not a regular file (a FIFO)"), "\(validate.stderr)")
        let run = try TestEnv.run(TestEnv.vigil, ["run", fifo, "--for", "1s", "--control", "none"], timeout: 20)
        #expect(run.status == 2, "\(run.stderr)")
        #expect(run.stderr.contains("not a regular file (a FIFO)"), "\(run.stderr)")
        #expect(Date().timeIntervalSince(started) < 15)

        // A running host whose manifest becomes a FIFO: SIGHUP, then SIGTERM.
        let good = try Self.manifest("monitors:\n  beat: { plugin: heartbeat, interval: 100ms }\nsinks:\n  out: { type: null }\n", in: dir)
        let host = try TestEnv.start(TestEnv.vigil, ["run", good, "--for", "60s", "--control", "none"])
        defer { if host.isRunning { host.signal(SIGKILL); _ = host.wait(timeout: 5) } }
        usleep(1_000_000)
        #expect(unlink(good) == 0 && mkfifo(good, 0o600) == 0)
        host.signal(SIGHUP)
        usleep(500_000)
        host.signal(SIGTERM)
        let output = host.wait(timeout: 15)
        #expect(!host.isRunning)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("not a regular file (a FIFO)"), "\(output.stderr)")
    }

    /// A plugin in vigil's process that calls exit(3) does not make vigil
    /// exit 3 ("events were lost"): the exit is reported as what it is, with
    /// status 4 (issue 26).
    @Test func fourWhenAnInProcessPluginCallsExit() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("""
        monitors:
          quits: { plugin: faulty, isolation: none, options: { fault: exit_start } }
        sinks:
          out: { type: null }
        """, in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "5s", "--control", "none"], timeout: 60)
        #expect(result.status == 4, "\(result.stderr)")
        #expect(result.stderr.contains("something in vigil's process called exit(3)"), "\(result.stderr)")
        // vigil's own exits keep their statuses.
        let usage = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "soon"], timeout: 30)
        #expect(usage.status == 64 && !usage.stderr.contains("called exit"), "\(usage.stderr)")
        let fine = try TestEnv.run(TestEnv.vigil, ["validate", manifest], timeout: 60)
        #expect(fine.status == 0 && !fine.stderr.contains("called exit"), "\(fine.stderr)")
    }

    @Test func threeWhenOnceCannotWriteStdout() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("monitors:\n  beat: { plugin: heartbeat }\nsinks:\n  out: { type: null }\n", in: dir)
        let result = try TestEnv.run("/bin/sh", ["-c", "exec \"$0\" run --once \"$1\" > /dev/full", TestEnv.vigil, manifest], timeout: 60)
        #expect(result.status == 3, "\(result.stderr)")
        #expect(result.stderr.contains("sink stdout (log): 0 written, 1 lost: 0 queue_full, 0 shutdown, 1 write_failed"), "\(result.stderr)")
    }

    /// A run with an end tests the manifest: a monitor that never ran fails it.
    /// A service (no end) runs the others and keeps its status.
    @Test func oneWhenAMonitorFailedToStartInARunWithAnEnd() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("""
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
          refuses: { plugin: start_fails, isolation: none }
          gone: { plugin: no_such_plugin }
        sinks:
          out: { type: null }
        """, in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "1s", "--control", "none"], timeout: 60)
        #expect(result.status == 1, "\(result.stderr)")
        let said = result.stderr.split(separator: "\n").filter { $0.contains(" failed to start: ") }.map(String.init)
        #expect(said.count == 2 && said.contains { $0.contains("error [vigil] monitor 'gone' failed to start: its plugin was refused: ") }
                && said.contains { $0.hasSuffix("error [vigil] monitor 'refuses' failed to start: start failed (fatal): start refused: device busy; exit status 1") },
                "\(result.stderr)")

        let service = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--control", "none"])
        Thread.sleep(forTimeInterval: 2)
        service.signal(SIGTERM)
        let ended = service.wait(timeout: 30)
        #expect(ended.status == 0, "\(ended.stderr)")
        #expect(ended.stderr.contains("start refused: device busy"), "\(ended.stderr)")
        #expect(!ended.stderr.contains("failed to start:"), "\(ended.stderr)")
    }

    @Test func sixtyFourForUsage() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest("monitors:\n  beat: { plugin: heartbeat }\nsinks:\n  out: { type: null }\n", in: dir)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "soon", "--control", "none"], timeout: 30)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("'soon' is not a duration"), "\(result.stderr)")
        // With `vigil run`'s usage, not the top level's.
        #expect(result.stderr.contains("Usage: vigil run [<options>] <manifest>"), "\(result.stderr)")
        #expect(!result.stderr.contains("Usage: vigil <subcommand>"), "\(result.stderr)")
    }
}
