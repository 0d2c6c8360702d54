import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
@testable import vigil

/// The control API through the real binaries: `vigil run --control` serving,
/// `vigil ctl` asking, and a raw client for what ctl does not send.
@Suite(.serialized, .startsProcesses, .offThePool) struct ControlRunTests {
    struct Host {
        let dir: String
        let socket: String
        let process: RunningProcess

        /// `vigil run` of `monitors` with a null sink (`sink` overrides it), serving on `dir`/vigil.sock.
        /// The host lives `duration` unless stopped: long, since a full test
        /// run's load can stall a test for tens of seconds (a host of 20 s
        /// was seen to end under a test still asking it).
        init(_ monitors: String, sink: String = "out: { type: null }", for duration: String = "300s") throws {
            dir = try TestEnv.tempDir("control")
            socket = dir + "/vigil.sock"
            try TestEnv.write("""
            plugin_dirs: [\(try TestEnv.cPlugins())]
            monitors:
            \(monitors)
            sinks:
              \(sink)
            """, to: dir + "/vigil.yaml")
            process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--control", "unix:" + socket,
                                                        "--for", duration])
            let path = socket
            guard SinkRunTests.waitUntil(10, { FileManager.default.fileExists(atPath: path) }) else {
                let output = process.wait(timeout: 1)
                throw TestFailure("no control socket: \(output.stderr)")
            }
        }

        func ctl(_ arguments: String...) throws -> TestEnv.Output {
            try TestEnv.run(TestEnv.vigil, ["ctl"] + arguments + ["--control", "unix:" + socket], timeout: 30)
        }

        func json(_ arguments: String...) throws -> [String: Any] {
            let output = try TestEnv.run(TestEnv.vigil, ["ctl"] + arguments + ["--json", "--control", "unix:" + socket],
                                         timeout: 30)
            return (try JSONSerialization.jsonObject(with: Data(output.stdout.utf8))) as? [String: Any] ?? [:]
        }

        func monitor(_ name: String) throws -> [String: Any] {
            try (json("status")["monitors"] as? [[String: Any]] ?? []).first { $0["name"] as? String == name } ?? [:]
        }

        func stop() -> TestEnv.Output {
            process.signal(SIGTERM)
            return process.wait(timeout: 30)
        }
    }

    @Test func healthStatusPollAndRestartOfOneMonitor() async throws {
        let host = try Host("""
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
          bad:
            plugin: faulty
            interval: 100ms
            isolation: process
            options: { fault: segv_poll, at: 2 }
            max_restarts: 0
        """)
        // The faulty monitor is quarantined at its first crash.
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("bad")["state"] as? String) == "quarantined" })

        let health = try host.ctl("health")
        #expect(health.status == 1)
        #expect(health.stdout == "unhealthy\n  monitor bad is quarantined\n", "\(health.stdout)")

        let bad = try host.monitor("bad")
        #expect(bad["isolation"] as? String == "process")
        #expect(bad["crashes"] as? Int == 1)
        #expect((bad["last_error"] as? String)?.hasPrefix("the plugin's runner ended in poll #2: killed by SIGSEGV") == true)
        #expect((bad["file"] as? String)?.hasSuffix("/faulty.so") == true)
        let beat = try host.monitor("beat")
        #expect(beat["state"] as? String == "running")
        #expect(beat["interval_s"] as? Double == 3600)
        #expect(beat["polls"] as? Int == 1)

        // A poll now, outside the hourly schedule; the other monitor untouched.
        let poll = try host.ctl("poll", "beat")
        #expect(poll.status == 0, "\(poll.stderr)")
        #expect(SinkRunTests.waitUntil(5) { (try? host.monitor("beat")["polls"] as? Int) == 2 })

        // A running monitor restarts: stopped, started, a new snapshot poll.
        let running = try host.ctl("restart", "beat")
        #expect(running.status == 0, "\(running.stderr)")
        #expect(SinkRunTests.waitUntil(5) { (try? host.monitor("beat")["polls"] as? Int) == 3 })
        // Refusals say why, with exit 1.
        let missing = try host.ctl("poll", "nope")
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no monitor 'nope'; monitors: beat, bad (HTTP 404)"))

        // Out of quarantine by request: it runs, crashes again, and is quarantined again.
        let restart = try host.ctl("restart", "bad")
        #expect(restart.status == 0, "\(restart.stderr)")
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("bad")["crashes"] as? Int) == 2 })

        let table = try host.ctl("status")
        #expect(table.stdout.contains("MONITOR  STATE"), "\(table.stdout)")
        #expect(table.stdout.contains("beat     running"))
        // Which host answered: its pid, where it was asked, its manifest and start.
        let head = table.stdout.split(separator: "\n").prefix(2).map(String.init)
        #expect(head.count == 2 && head[0].hasSuffix("(pid \(host.process.pid)) at unix:\(host.socket)"), "\(table.stdout)")
        #expect(head.count == 2 && head[1].hasPrefix("  manifest \(host.dir)/vigil.yaml, started 20"), "\(table.stdout)")
        let output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("started by an operator"))
        // The socket is gone with the host.
        #expect(!FileManager.default.fileExists(atPath: host.socket))
    }

    @Test func aQuarantinedMonitorStartsAgainWhenItsPluginFileChanges() throws {
        let plugins = try TestEnv.tempDir("quarantine-plugin")
        let file = plugins + "/faulty.so"
        try FileManager.default.copyItem(atPath: try TestEnv.cPlugins() + "/faulty.so", toPath: file)
        let host = try Host("""
          bad:
            plugin: \(file)
            interval: 100ms
            isolation: process
            options: { fault: segv_poll, at: 2 }
            max_restarts: 0
        """)
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("bad")["state"] as? String) == "quarantined" })
        #expect((try? host.monitor("bad")["crashes"] as? Int) == 1)
        // A new build of the file, put in place as an install does (a new
        // inode): within a check (every 5 s) it starts again, and crashing
        // again it is quarantined again.
        try FileManager.default.copyItem(atPath: file, toPath: file + ".new")
        #expect(rename(file + ".new", file) == 0)
        #expect(SinkRunTests.waitUntil(15) { (try? host.monitor("bad")["crashes"] as? Int) == 2 })
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("bad")["state"] as? String) == "quarantined" })
        let output = host.stop()
        #expect(output.stderr.contains("faulty.so changed: leaving quarantine"), "\(output.stderr)")
    }

    /// A reload that waits for a monitor that will not stop takes more than
    /// the connection's 10 s request deadline: the answer still comes, and
    /// `vigil ctl reload` says it was applied (exit 0), not "no answer"
    /// (exit 2, which a script would take as "try again").
    @Test func aReloadLongerThanTheRequestDeadlineIsAnswered() throws {
        let host = try Host("""
          hang: { plugin: hang_in_stop, interval: 1s, timeout: 25s, isolation: process }
          beat: { plugin: heartbeat, interval: 1s, isolation: none }
        """)
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("hang")["state"] as? String) == "running" })
        let manifest = try String(contentsOfFile: host.dir + "/vigil.yaml", encoding: .utf8)
        try TestEnv.write(manifest.split(separator: "\n").filter { !$0.contains("hang_in_stop") }.joined(separator: "\n") + "\n",
                          to: host.dir + "/vigil.yaml")
        let started = Date()
        let reload = try host.ctl("reload")
        #expect(reload.status == 0, "\(reload.stdout)\(reload.stderr)")
        #expect(Date().timeIntervalSince(started) >= 9, "the reload did not wait for the monitor it removed")
        #expect(try host.monitor("hang").isEmpty)
        _ = host.stop()
    }

    @Test func theSocketIsTheGroupsAndOnlyOneHostHasIt() throws {
        let host = try Host("  beat: { plugin: heartbeat, interval: 1h, isolation: none }")
        // Bound 0600, then opened to the group: the test may look in between.
        var st = stat()
        #expect(SinkRunTests.waitUntil(5) { lstat(host.socket, &st) == 0 && st.st_mode & 0o777 == 0o660 })
        #expect(st.st_mode & 0o777 == 0o660)
        // A second host asking for the same socket by name does not start.
        let second = try TestEnv.run(TestEnv.vigil, ["run", host.dir + "/vigil.yaml", "--control", "unix:" + host.socket,
                                                     "--for", "1s"], timeout: 30)
        #expect(second.status != 0)
        // Named with its command line, so that the operator knows which one.
        #expect(second.stderr.contains("is held by another vigil (pid \(host.process.pid): \(TestEnv.vigil) run \(host.dir)/vigil.yaml"),
                "\(second.stderr)")
        // One that finds its default socket taken runs without a control API,
        // and warns, naming the other: `vigil ctl` would reach that one.
        let third = try TestEnv.run(TestEnv.vigil, ["run", host.dir + "/vigil.yaml", "--for", "500ms"],
                                    environment: ["VIGIL_STATE_DIR": host.dir], timeout: 30)
        #expect(third.status == 0, "\(third.stderr)")
        #expect(third.stderr.contains("warning [vigil] no control API: \(host.socket) is held by another vigil (pid \(host.process.pid): "),
                "\(third.stderr)")
        #expect(try host.ctl("health").stdout == "ok\n")
        _ = host.stop()
    }

    @Test func healthNamesASinkThatLostEventsInTheLastMinute() throws {
        // The heartbeat keeps the host up after the flood has finished.
        let host = try Host("""
          flood: { plugin: flood, isolation: none, options: { count: 20000 } }
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
        """,
                            sink: "small: { type: null, queue_size: 1, overflow: drop_newest }")
        var reasons: [String] = []
        SinkRunTests.waitUntil(10) {
            reasons = (try? host.json("health")["reasons"] as? [String]) ?? []
            return !reasons.isEmpty
        }
        #expect(reasons.first?.hasPrefix("sink small lost ") == true, "\(reasons)")
        #expect(reasons.first?.contains("queue_full") == true)
        _ = host.stop()
    }

    /// An output that failed for good is named by health for as long as
    /// the host runs (not only while its losses are in the last minute),
    /// with why in the status and a gauge in /metrics.
    @Test func healthStatusAndMetricsNameAnOutputThatFailedForGood() async throws {
        let host = try Host("""
          flood: { plugin: flood, isolation: none, options: { count: 1000 } }
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
        """, sink: "out: { type: plugin, plugin: output_hostile, isolation: none, match: [\"flood/*\"], batch: 10, options: { mode: fatal } }")
        var reasons: [String] = []
        SinkRunTests.waitUntil(10) {
            reasons = (try? host.json("health")["reasons"] as? [String]) ?? []
            return reasons.contains { $0.hasPrefix("sink out failed: ") }
        }
        #expect(reasons.contains("sink out failed: write returned fatal: the peer is gone for good"), "\(reasons)")
        let sink = (try host.json("status")["sinks"] as? [[String: Any]])?.first ?? [:]
        #expect(sink["failure"] as? String == "write returned fatal: the peer is gone for good", "\(sink)")
        let table = try host.ctl("status")
        #expect(table.stdout.contains("sink out failed: write returned fatal"), "\(table.stdout)")
        let metrics = try await ControlClient.request(.GET, "/metrics", to: ControlAddress(path: host.socket))
        #expect(metrics.text.contains("vigil_sink_failed{sink=\"out\"} 1"), "\(metrics.text.prefix(3000))")
        _ = host.stop()
    }

    @Test func unknownEndpointsAndMethodsAreRefusedByName() async throws {
        let host = try Host("  beat: { plugin: heartbeat, interval: 1h, isolation: none }")
        let address = ControlAddress(path: host.socket)
        let missing = try await ControlClient.request(.GET, "/v2/nothing", to: address)
        #expect(missing.status == 404)
        #expect(missing.text.contains("no such endpoint: GET /v2/nothing"))
        let wrongMethod = try await ControlClient.request(.DELETE, "/v1/status", to: address)
        #expect(wrongMethod.status == 405)
        let getAction = try await ControlClient.request(.GET, "/v1/monitors/beat/poll", to: address)
        #expect(getAction.status == 405)
        // A body past the limit is refused, not read into memory.
        let big = try await ControlClient.request(.POST, "/v1/monitors/beat/poll",
                                                  body: [UInt8](repeating: 0x41, count: ControlServer.maxBody + 1), to: address)
        #expect(big.status == 413)
        let health = try await ControlClient.request(.GET, "/v1/health?verbose=1", to: address)
        #expect(health.status == 200)
        _ = host.stop()
    }

    /// Connections held open without a request are capped; the host
    /// answers again once they are gone.
    @Test func idleConnectionsCannotTakeTheHostsDescriptors() throws {
        let host = try Host("  beat: { plugin: heartbeat, interval: 1h, isolation: none }")
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<(ControlServer.maxConnections + 8) {
            held.append(try Sockets.connect(.unix(path: host.socket)))
        }
        // The connections past the cap were closed by the host: they read end of file.
        usleep(500_000)
        var closed = 0
        for fd in held {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 20) > 0 {
                var byte: UInt8 = 0
                if read(fd, &byte, 1) == 0 { closed += 1 }
            }
        }
        #expect(closed >= 8, "\(closed) closed")
        // The silent ones held, a second on: one that asks takes the place of
        // the oldest silent one, and is answered.
        usleep(1_100_000)
        let health = try host.ctl("health")
        #expect(health.stdout == "ok\n", "\(health.stderr)")
        for fd in held { close(fd) }
        held = []
        #expect(SinkRunTests.waitUntil(5) { (try? host.ctl("health").stdout) == "ok\n" })
        _ = host.stop()
    }

    /// The host's open descriptors (its /proc fd directory).
    static func descriptors(of pid: pid_t) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
    }

    /// Each restart of an isolated monitor lets its runner go for good: the
    /// host closes the runner's socket, ring memfd and eventfds (4 were left
    /// open per restart), and the end of a runner it let go is not reported
    /// as a crash (about every other restart was, and used up the budget).
    @Test func restartingAnIsolatedMonitorLeaksNoDescriptorAndReportsNoCrash() throws {
        let host = try Host("""
          m:
            plugin: heartbeat
            interval: 100ms
            isolation: process
            restart_backoff: { min: 100ms, max: 100ms }
            max_restarts: 3
        """)
        func state() -> String? { try? host.monitor("m")["state"] as? String }
        #expect(SinkRunTests.waitUntil(10) { state() == "running" })
        let pid = host.process.pid
        // Settled: the control connections above are closed.
        usleep(300_000)
        let baseline = Self.descriptors(of: pid)
        for _ in 0..<20 {
            let restart = try host.ctl("restart", "m")
            #expect(restart.status == 0, "\(restart.stderr)")
            // Running again, long enough for the runner let go to have ended.
            #expect(SinkRunTests.waitUntil(10) { state() == "running" })
            usleep(150_000)
        }
        // The last runner let go ends within a second; a little slack for
        // a control connection still closing.
        #expect(SinkRunTests.waitUntil(5) { Self.descriptors(of: pid) <= baseline + 2 },
                "\(baseline) descriptors before 20 restarts, \(Self.descriptors(of: pid)) after")
        let m = try host.monitor("m")
        #expect(m["state"] as? String == "running")
        #expect(m["crashes"] as? Int == 0, "\(m)")
        #expect(m["restarts"] as? Int == 0, "\(m)")
        let output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(!output.stderr.contains("runner ended"), "\(output.stderr)")
        #expect(output.stderr.components(separatedBy: "started by an operator").count - 1 == 20)
    }

    @Test func ctlWithoutAHostSaysSoWithExit2() throws {
        let output = try TestEnv.run(TestEnv.vigil, ["ctl", "status", "--control", "unix:/nonexistent/vigil.sock"])
        #expect(output.status == 2)
        // In the system's words, not NIO's ("connect(descriptor:addr:size:)").
        #expect(output.stderr == "vigil ctl: cannot reach the control socket unix:/nonexistent/vigil.sock: No such file or directory\n",
                "\(output.stderr)")
    }

    /// Options before the verb, as systemctl and kubectl users type them.
    @Test func ctlTakesItsOptionsBeforeTheVerbToo() throws {
        let host = try Host("  beat: { plugin: heartbeat, interval: 1h, isolation: none }")
        defer { _ = host.stop() }
        let before = try TestEnv.run(TestEnv.vigil, ["ctl", "--control", "unix:" + host.socket, "--json", "health"])
        #expect(before.status == 0, "\(before.stderr)")
        #expect(before.stdout.contains("\"status\""), "\(before.stdout)")
        let after = try TestEnv.run(TestEnv.vigil, ["ctl", "status", "--control", "unix:" + host.socket])
        #expect(after.status == 0 && after.stdout.contains("beat"), "\(after.stdout)\(after.stderr)")
    }
}
