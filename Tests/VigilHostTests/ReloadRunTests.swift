import Foundation
import NIOHTTP1
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
@testable import vigil

/// Diff reload, one monitor's start and stop, and `/metrics`, through the
/// real binaries: `vigil run` serving, `vigil ctl` and a raw client asking,
/// the events read back from the file sink they went to.
@Suite(.serialized, .startsProcesses, .offThePool) struct ReloadRunTests {
    /// A host running `dir`/vigil.yaml with a control socket.
    struct Host {
        let dir: String
        let manifest: String
        let socket: String
        let events: String
        let process: RunningProcess

        init(_ tag: String, _ body: String, arguments: [String] = [], for duration: String = "600s",
             environment: [String: String]? = nil) throws {
            dir = try TestEnv.tempDir(tag)
            manifest = dir + "/vigil.yaml"
            socket = dir + "/vigil.sock"
            events = dir + "/events.jsonl"
            try Self.write(body, manifest: manifest, events: events)
            process = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--control", "unix:" + socket, "--for", duration]
                                        + arguments, environment: environment)
            let path = socket
            guard SinkRunTests.waitUntil(15, { FileManager.default.fileExists(atPath: path) }) else {
                let output = process.wait(timeout: 1)
                throw TestFailure("no control socket: \(output.stderr)")
            }
        }

        /// The manifest's text, with the C plugins' directory and the events file filled in.
        func write(_ body: String) throws { try Self.write(body, manifest: manifest, events: events) }

        /// A body that names its own `plugin_dirs` keeps them; CPLUGINS in it
        /// is the C plugins' directory.
        static func write(_ body: String, manifest: String, events: String) throws {
            let dirs = body.contains("plugin_dirs:") ? "" : "plugin_dirs: [\(try TestEnv.cPlugins())]\n"
            let text = dirs + body.replacingOccurrences(of: "EVENTS", with: events)
                .replacingOccurrences(of: "CPLUGINS", with: try TestEnv.cPlugins())
            try TestEnv.write(text, to: manifest)
        }

        func ctl(_ arguments: String...) throws -> TestEnv.Output {
            try TestEnv.run(TestEnv.vigil, ["ctl"] + arguments + ["--control", "unix:" + socket], timeout: 60)
        }

        func request(_ method: HTTPMethod, _ path: String) async throws -> ControlClient.Reply {
            try await ControlClient.request(method, path, to: try ControlAddress(parsing: "unix:" + socket))
        }

        func status() throws -> [String: Any] {
            let output = try ctl("status", "--json")
            return (try? JSONSerialization.jsonObject(with: Data(output.stdout.utf8))) as? [String: Any] ?? [:]
        }

        func monitor(_ name: String) throws -> [String: Any]? {
            (try status()["monitors"] as? [[String: Any]] ?? []).first { $0["name"] as? String == name }
        }

        func stop() -> TestEnv.Output {
            process.signal(SIGTERM)
            return process.wait(timeout: 60)
        }

        /// The events written so far, parsed.
        func written() throws -> [[String: Any]] {
            let text = (try? String(contentsOfFile: events, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap {
                (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
            }
        }
    }

    /// The issue's test: a flood at 20 k events/s runs through 20 reloads
    /// that add, remove and change other monitors and a sink; none of its
    /// events is lost, the file sink's seq has no gap and no repeat, and the
    /// monitors that did not change were never restarted (no second
    /// snapshot: the heartbeat's counter never starts again).
    @Test func aFloodRunsUntouchedThroughTwentyReloads() async throws {
        let count = 100_000
        func manifest(_ round: Int) -> String {
            """
            monitors:
              flood: { plugin: flood, isolation: none, options: { count: \(count), rate: 20000 } }
              beat: { plugin: heartbeat, interval: 50ms, isolation: none }
              other: { plugin: heartbeat, interval: \(100 + round)ms, isolation: none }
            \(round % 2 == 1 ? "  extra: { plugin: heartbeat, interval: 70ms, isolation: none }" : "")
            sinks:
              out: { type: file, path: EVENTS, queue_size: 1048576 }
            \(round % 3 == 1 ? "  side: { type: null, match: [\"beat/*\"] }" : "")
            """
        }
        let host = try Host("flood-reloads", manifest(0))
        var applied = 0
        for round in 1...20 {
            try await Task.sleep(for: .milliseconds(150))
            try host.write(manifest(round))
            let output = try host.ctl("reload", "--json")
            #expect(output.status == 0, "reload \(round): \(output.stdout) \(output.stderr)")
            let reply = (try? JSONSerialization.jsonObject(with: Data(output.stdout.utf8))) as? [String: Any] ?? [:]
            let monitors = reply["monitors"] as? [String: [String]] ?? [:]
            #expect(monitors["unchanged"]?.contains("flood") == true, "reload \(round) touched the flood: \(output.stdout)")
            #expect(monitors["unchanged"]?.contains("beat") == true, "reload \(round) touched beat: \(output.stdout)")
            #expect(monitors["changed"] == ["other"], "reload \(round): \(output.stdout)")
            if reply["applied"] as? Bool == true { applied += 1 }
        }
        #expect(applied == 20)
        let flood = try #require(try host.monitor("flood"))
        #expect(flood["restarts"] as? Int == 0)
        // Wait for the flood to finish, then stop.
        #expect(SinkRunTests.waitUntil(30) {
            ((try? host.monitor("flood"))??["events"] as? Int ?? 0) >= count
        })
        let output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("none lost"), "\(output.stderr)")

        let events = try host.written()
        let seqs = events.compactMap { $0["seq"] as? Int }
        #expect(seqs.count == events.count)
        // Every event went to `out` (it matches everything): seq 1…N, each once.
        #expect(seqs == Array(1...seqs.count), "seq has gaps or repeats")
        #expect(events.filter { $0["monitor"] as? String == "flood" && $0["kind"] as? String == "flood" }.count == count)
        #expect(events.filter { $0["monitor"] as? String == "vigil" && $0["kind"] as? String == "reloaded" }.count == 20)
        // beat was never restarted: its counter only grows, from its one snapshot on.
        let beats = events.filter { $0["monitor"] as? String == "beat" && $0["kind"] as? String == "beat" }
            .compactMap { ($0["fields"] as? [String: Any])?["count"] as? Int }
        #expect(beats.count > 20)
        #expect(zip(beats, beats.dropFirst()).allSatisfy { $0 < $1 }, "beat's counter started again: \(beats.prefix(40))")
    }

    /// An invalid manifest is refused with FILE:LINE:COLUMN and changes
    /// nothing; so is a valid one naming a plugin that cannot be had.
    @Test func aRefusedReloadChangesNothing() async throws {
        let host = try Host("refused-reload", """
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
        """)
        defer { _ = host.stop() }
        try host.write("""
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none, colour: red }
        sinks:
          out: { type: file, path: EVENTS }
        """)
        var output = try host.ctl("reload")
        #expect(output.status == 1)
        #expect(output.stderr.contains("vigil.yaml:3:"), "\(output.stderr)")
        #expect(output.stderr.contains("colour"), "\(output.stderr)")

        try host.write("""
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
          ghost: { plugin: no_such_plugin_here, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
        """)
        let reply = try await host.request(.POST, "/v1/reload")
        #expect(reply.status == 422)
        let body = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any] ?? [:]
        #expect(body["applied"] as? Bool == false)
        let errors = body["errors"] as? [String] ?? []
        #expect(errors.contains { $0.contains("vigil.yaml:4:") && $0.contains("no_such_plugin_here") }, "\(errors)")
        // Still the one monitor, still running.
        let monitors = try host.status()["monitors"] as? [[String: Any]] ?? []
        #expect(monitors.map { $0["name"] as? String } == ["beat"])
        #expect(monitors.first?["state"] as? String == "running")

        let metrics = try await host.request(.GET, "/metrics")
        #expect(metrics.text.contains("vigil_reloads_total{result=\"refused\"} 2"), "\(metrics.text)")
        output = try host.ctl("health")
        #expect(output.status == 0)
    }

    /// A plugin file dropped into a plugin directory while the host runs is
    /// found by the next reload: refused while it is missing, started once
    /// it is there, and the running monitor is not touched by either.
    @Test func aPluginDroppedIntoAPluginDirectoryIsFoundAtReload() async throws {
        let drop = try TestEnv.tempDir("drop-dir")
        let first = """
        plugin_dirs: [\(drop)]
        monitors:
          beat: { plugin: CPLUGINS/heartbeat.so, interval: 50ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
        """
        let host = try Host("plugin-drop", first)
        defer { _ = host.stop() }
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("beat"))??["state"] as? String == "running" })
        try host.write(first.replacingOccurrences(of: "sinks:", with: """
          fresh: { plugin: good_minimal, interval: 50ms }
        sinks:
        """))
        var output = try host.ctl("reload")
        #expect(output.status == 1, "\(output.stdout)")
        #expect(output.stderr.contains("good_minimal"), "\(output.stderr)")
        #expect(try host.monitor("fresh") == nil)

        let source = try TestEnv.cPlugin("good_minimal")
        try FileManager.default.copyItem(atPath: source, toPath: drop + "/good_minimal.so")
        output = try host.ctl("reload", "--json")
        #expect(output.status == 0, "\(output.stderr)")
        let diff = (try? JSONSerialization.jsonObject(with: Data(output.stdout.utf8))) as? [String: Any] ?? [:]
        let monitors = diff["monitors"] as? [String: Any] ?? [:]
        #expect(monitors["added"] as? [String] == ["fresh"], "\(output.stdout)")
        #expect(monitors["unchanged"] as? [String] == ["beat"], "\(output.stdout)")
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("fresh"))??["state"] as? String == "running" })
        // beat ran throughout: one first beat only.
        let firstBeats = try host.written().filter {
            $0["monitor"] as? String == "beat" && ($0["fields"] as? [String: Any])?["count"] as? Int == 1
        }
        #expect(firstBeats.count == 1)
    }

    /// `ctl stop` stops one monitor (its events stop, the others go on),
    /// `ctl start` starts it again with a new snapshot; SIGHUP reloads.
    @Test func oneMonitorStopsAndStartsWhileOthersRun() async throws {
        let summary = try TestEnv.tempDir("stop-start-summary") + "/summary.json"
        let host = try Host("stop-start", """
        monitors:
          beat: { plugin: heartbeat, interval: 50ms, isolation: none }
          other: { plugin: heartbeat, interval: 50ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
          spare: { type: null }
        """, arguments: ["--summary", summary])
        try await Task.sleep(for: .milliseconds(300))
        var output = try host.ctl("stop", "beat")
        #expect(output.status == 0, "\(output.stderr)")
        #expect(try host.monitor("beat")?["state"] as? String == "stopped")
        #expect(try host.ctl("stop", "beat").status == 1)  // stopped already
        let stoppedAt = try host.monitor("beat")?["events"] as? Int ?? -1
        let otherAt = try host.monitor("other")?["events"] as? Int ?? -1
        try await Task.sleep(for: .milliseconds(400))
        #expect(try host.monitor("beat")?["events"] as? Int == stoppedAt)
        #expect((try host.monitor("other")?["events"] as? Int ?? 0) > otherAt)
        // Health says nothing of a monitor an operator stopped.
        #expect(try host.ctl("health").status == 0)

        output = try host.ctl("start", "beat")
        #expect(output.status == 0, "\(output.stderr)")
        #expect(SinkRunTests.waitUntil(5) { (try? host.monitor("beat"))??["state"] as? String == "running" })
        #expect(try host.ctl("start", "beat").status == 1)  // running already
        #expect(try host.ctl("start", "nobody").status == 1)

        // SIGHUP: a monitor added by a reload, one removed, a sink removed.
        try host.write("""
        monitors:
          beat: { plugin: heartbeat, interval: 50ms, isolation: none }
          third: { plugin: heartbeat, interval: 50ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
        """)
        host.process.signal(SIGHUP)
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("third"))??["state"] as? String == "running" })
        // A restart is a stop and a start, each an event as the verbs make them.
        output = try host.ctl("restart", "beat")
        #expect(output.status == 0, "\(output.stderr)")
        output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
        let kinds = try host.written().compactMap { e -> String? in
            e["monitor"] as? String == "vigil" ? e["kind"] as? String : nil
        }
        #expect(kinds.filter { $0 == "monitor_stopped" }.count == 2 && kinds.filter { $0 == "monitor_started" }.count == 2
                && kinds.contains("reloaded"), "\(kinds)")
        // One entry per name in the summary and the exit lines; what the reload removed is marked.
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: summary))) as? [String: Any] ?? [:]
        let monitors = (json["monitors"] as? [[String: Any]] ?? []).map { ($0["name"] as? String ?? "?", $0["retired"] as? Bool) }
        #expect(monitors.map(\.0) == ["other", "beat", "third"] || monitors.map(\.0).sorted() == ["beat", "other", "third"], "\(monitors)")
        #expect(monitors.first { $0.0 == "other" }?.1 == true && monitors.first { $0.0 == "beat" }?.1 == false, "\(monitors)")
        let sinks = (json["sinks"] as? [[String: Any]] ?? []).map { ($0["name"] as? String ?? "?", $0["retired"] as? Bool) }
        #expect(sinks.map(\.0).sorted() == ["out", "spare"] && sinks.first { $0.0 == "spare" }?.1 == true, "\(sinks)")
        #expect(output.stderr.components(separatedBy: "sink out (file").count == 2, "\(output.stderr)")
        #expect(output.stderr.contains("sink spare (null, removed by a reload): "), "\(output.stderr)")
        // Three runs of beat (the start, the operator's start, the restart): three first beats (count 1).
        let firstBeats = try host.written().filter {
            $0["monitor"] as? String == "beat" && ($0["fields"] as? [String: Any])?["count"] as? Int == 1
        }
        #expect(firstBeats.count == 3)
    }

    /// `--watch`: saving the manifest (written elsewhere, renamed over it, as
    /// editors do) applies it; so does a new fragment; a broken save is refused.
    @Test func watchReloadsWhenTheManifestChanges() async throws {
        let host = try Host("watch", """
        include: ["conf.d/*.yaml"]
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
        """, arguments: ["--watch"])
        defer { _ = host.stop() }
        try await Task.sleep(for: .milliseconds(200))
        try host.write("""
        include: ["conf.d/*.yaml"]
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
          added: { plugin: heartbeat, interval: 100ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
        """)
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("added"))??["state"] as? String == "running" })
        // The include directory did not exist: made now, with a fragment in it.
        try FileManager.default.createDirectory(atPath: host.dir + "/conf.d", withIntermediateDirectories: true)
        try TestEnv.write("monitors:\n  fragment: { plugin: heartbeat, interval: 100ms, isolation: none }\n",
                          to: host.dir + "/conf.d/extra.yaml")
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("fragment"))??["state"] as? String == "running" })
        // And a fragment edited in place.
        try TestEnv.write("monitors:\n  fragment: { plugin: heartbeat, interval: 200ms, isolation: none }\n",
                          to: host.dir + "/conf.d/extra.yaml")
        #expect(SinkRunTests.waitUntil(10) { (try? host.monitor("fragment"))??["interval_s"] as? Double == 0.2 })
        try TestEnv.write("monitors: [", to: host.manifest)
        try await Task.sleep(for: .milliseconds(1500))
        #expect(try host.monitor("added")?["state"] as? String == "running")
        let metrics = try await host.request(.GET, "/metrics")
        #expect(metrics.text.contains("vigil_reloads_total{result=\"applied\"} 3"), "\(metrics.text)")
        #expect(metrics.text.contains("vigil_reloads_total{result=\"refused\"} 1"), "\(metrics.text)")
    }

    /// `/metrics` is Prometheus' text format that promtool accepts, with
    /// the counters the issue names.
    @Test func metricsPassPromtool() async throws {
        let host = try Host("metrics", """
        monitors:
          beat: { plugin: heartbeat, interval: 50ms, isolation: none }
        sinks:
          out: { type: file, path: EVENTS }
          tiny: { type: null, queue_size: 1 }
        """)
        defer { _ = host.stop() }
        try await Task.sleep(for: .milliseconds(500))
        let reply = try await host.request(.GET, "/metrics")
        #expect(reply.status == 200)
        let text = reply.text
        for name in ["vigil_events_total{monitor=\"beat\"}", "vigil_sink_events_total{sink=\"out\",outcome=\"written\"}",
                     "vigil_sink_queue_depth{sink=\"out\"}", "vigil_plugin_call_seconds_bucket{monitor=\"beat\",call=\"poll\",le=\"+Inf\"}",
                     "vigil_monitor_up{monitor=\"beat\"} 1", "vigil_reloads_total{result=\"applied\"} 0"] {
            #expect(text.contains(name), "missing \(name)")
        }
        let written = text.split(separator: "\n").first { $0.hasPrefix("vigil_sink_events_total{sink=\"out\",outcome=\"written\"}") }
        #expect((written?.split(separator: " ").last.flatMap { Double($0) } ?? 0) > 0)
        #expect(try await host.request(.POST, "/metrics").status == 405)

        let promtool = ["/usr/bin/promtool", "/usr/local/bin/promtool"].first { FileManager.default.isExecutableFile(atPath: $0) }
        let tool = try #require(promtool, "promtool is not installed (apt-get install prometheus; scripts/test-deps installs it)")
        let file = host.dir + "/metrics.txt"
        try Data(reply.body).write(to: URL(fileURLWithPath: file))
        let check = try TestEnv.run("/bin/sh", ["-c", "\(tool) check metrics < \(file)"], timeout: 30)
        #expect(check.status == 0, "promtool: \(check.stdout) \(check.stderr)")
    }
}

/// The exposition writer on its own: label values from outside are escaped,
/// numbers written as Prometheus reads them.
@Suite(.startsProcesses, .offThePool) struct PrometheusTextTests {
    @Test func labelValuesAreEscapedAndNumbersReadable() {
        var text = PrometheusText()
        text.family("vigil_x_total", .counter, "Help with a \\ and\na newline.")
        text.sample("vigil_x_total", [("sink", "a\"b\\c\nd")], 3)
        text.sample("vigil_x_total", [("sink", "f")], 0.25)
        text.sample("vigil_x_total", [("sink", "g")], .infinity)
        text.sample("vigil_x_total", [("sink", "h")], .nan)
        let out = String(decoding: text.bytes, as: UTF8.self)
        #expect(out == """
        # HELP vigil_x_total Help with a \\\\ and\\na newline.
        # TYPE vigil_x_total counter
        vigil_x_total{sink="a\\"b\\\\c\\nd"} 3
        vigil_x_total{sink="f"} 0.25
        vigil_x_total{sink="g"} +Inf
        vigil_x_total{sink="h"} NaN

        """)
    }
}

/// Apart from ReloadRunTests (serialized), so that it runs beside the others.
@Suite(.startsProcesses, .offThePool) struct ReloadMemoryTests {
    /// Reloads free what they retire: 10,000 reloads, each replacing a sink
    /// (its queue between two sizes, so that what a sink holds stays the
    /// same) and a monitor in the host's process, every fiftieth one in a
    /// runner too, and the host's private memory after the last is where it was
    /// after the first 1,000 (within 1 MiB; the allocator warms up over the first thousand, about 1 MiB, docs/performance.md). A retired instance leaves only
    /// its counters: one series per name, the retired ones summed into it.
    /// (`scripts/reload-memory` does the same with the release build.)
    @Test func reloadsFreeWhatTheyRetire() async throws {
        @Sendable func body(_ i: Int) -> String {
            """
            monitors:
              hb: { plugin: heartbeat, interval: 1h }
              here: { plugin: heartbeat, interval: \(3_600_000 + i)ms, isolation: none }
              apart: { plugin: heartbeat, interval: \(3_600_000 + i / 50)ms, isolation: process }
            sinks:
              out: { type: file, path: EVENTS, fsync: never }
              side: { type: null, queue_size: \(1000 + i % 2) }
            """
        }
        // Two malloc arenas: how many glibc makes depends on how busy the
        // machine is (the whole suite runs beside this test), and each
        // arena keeps what was freed in it, which would be read as the
        // reloads' (docs/performance.md, "Malloc arenas").
        var environment = ProcessInfo.processInfo.environment
        environment["MALLOC_ARENA_MAX"] = "2"
        // Its own deadline well beyond the suite's: the loop takes 80 s alone
        // and whatever the rest of the suite leaves it.
        let host = try ReloadRunTests.Host("reloadmemory", body(0), for: "3600s", environment: environment)
        defer { _ = host.stop() }
        @Sendable func privateKiB() -> Int {
            let text = (try? String(contentsOfFile: "/proc/\(host.process.pid)/smaps_rollup", encoding: .utf8)) ?? ""
            // Dirty only: the clean private pages are the text of the
            // binary that no other process (a runner, another test's host)
            // happens to map at that moment.
            return text.split(separator: "\n").filter { $0.hasPrefix("Private_Dirty:") }
                .compactMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") }
                .reduce(0, +)
        }
        let reloads = 10_000
        // The loop blocks on its own thread (see `TestEnv.unixHTTP`).
        let socket = host.socket
        let afterWarmUp = try await TestEnv.onOwnThread { () throws -> Int in
            var afterWarmUp = 0
            for i in 1...reloads {
                try host.write(body(i))
                let reply = try TestEnv.unixHTTP(socket: socket, "POST", "/v1/reload")
                guard reply.status == 200 else { throw TestFailure("reload \(i): \(reply.status) \(reply.body)") }
                if i == 1_000 {
                    Thread.sleep(forTimeInterval: 0.3)
                    afterWarmUp = privateKiB()
                }
            }
            return afterWarmUp
        }
        // Retired sinks finish draining on their own threads, and what a
        // grace period frees goes after it.
        try await Task.sleep(for: .seconds(1))
        let after = privateKiB()
        #expect(afterWarmUp > 0 && after - afterWarmUp < 1024,
                "private memory: \(afterWarmUp) KiB after 1,000 reloads, \(after) KiB after \(reloads)")
        let metrics = try await host.request(.GET, "/metrics")
        let text = String(decoding: metrics.body, as: UTF8.self)
        #expect(text.contains("vigil_reloads_total{result=\"applied\"} \(reloads)"))
        // One series per name, the retired runners of 'side' summed into it.
        #expect(text.components(separatedBy: "vigil_sink_events_total{sink=\"side\",outcome=\"accepted\"}").count == 2)
        #expect(text.components(separatedBy: "vigil_events_total{monitor=\"here\"}").count == 2)
    }
}
