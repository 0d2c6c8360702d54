import Foundation
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The real `vigil` binary, run as a user would, with real files and sockets.
@Suite(.serialized, .startsProcesses, .offThePool) struct IntegrationTests {
    /// A unix socket server that accepts one connection and collects all it receives.
    final class Collector: @unchecked Sendable {
        let path: String
        private let fd: Int32
        private let received = Mutex<[UInt8]>([])
        private let done = DispatchSemaphore(value: 0)

        init(path: String) throws {
            self.path = path
            fd = try Sockets.listen(.unix(path: path))
            let fd = self.fd
            Thread.detachNewThread { [self] in
                let client = Sockets.accept(fd)
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while client >= 0 {
                    let n = read(client, &buffer, buffer.count)
                    if n <= 0 { break }
                    self.received.withLock { $0 += buffer[0..<n] }
                }
                if client >= 0 { close(client) }
                self.done.signal()
            }
        }

        func lines(timeout: Double = 10) -> [String] {
            _ = done.wait(timeout: .now() + timeout)
            close(fd)
            return received.withLock { String(decoding: $0, as: UTF8.self) }.split(separator: "\n").map(String.init)
        }
    }

    func readLines(_ path: String) throws -> [String] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .dropLast().map(String.init)
    }

    /// Every line is valid JSON of the event schema; returns the events.
    func parse(_ lines: [String]) throws -> [Event] {
        try lines.map { line in
            _ = try JSONSerialization.jsonObject(with: Data(line.utf8))
            return try JSONLineDecoder().decode(line).event
        }
    }

    @Test func runDeliversEveryEventToAFileAndASocketWithoutGaps() throws {
        let dir = try TestEnv.tempDir()
        let collector = try Collector(path: dir + "/collector.sock")
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        host: test-host
        monitors:
          cpu: { plugin: cpu, interval: 100ms, options: { procfs: \(TestEnv.fixture("machines/server/proc")) } }
          memory: { plugin: memory, interval: 200ms, options: { procfs: \(TestEnv.fixture("machines/server/proc")) } }
          load: { plugin: load, interval: 250ms, options: { procfs: \(TestEnv.fixture("machines/server/proc")) } }
          beat: { plugin: heartbeat, interval: 50ms, options: { threads: 2, push_interval: 10ms } }
        sinks:
          journal: { type: file, path: \(dir)/out/events.jsonl, fsync: always }
          collector: { type: socket, connect: "unix:\(collector.path)" }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "2s"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("none lost"), "\(result.stderr)")

        let fileLines = try readLines(dir + "/out/events.jsonl")
        let events = try parse(fileLines)
        #expect(events.count > 100)
        #expect(events.map(\.seq) == Array(1...UInt64(events.count)), "seq must be 1…N with no gap")
        #expect(events.allSatisfy { $0.time > 1_700_000_000_000_000_000 })
        let byMonitor = Dictionary(grouping: events, by: \.monitor)
        #expect(byMonitor["cpu"]?.count ?? 0 >= 15)
        #expect(byMonitor["beat"]?.contains { $0.kind == "push" } == true)
        #expect(byMonitor["vigil"]?.map(\.kind) == ["started", "stopping"])
        #expect(events.first { $0.monitor == "cpu" }?.plugin == "cpu")

        // The socket got the very same lines, byte for byte, in order.
        let socketLines = collector.lines()
        #expect(socketLines == fileLines)
        #expect(fileLines.first?.contains(#""host":"test-host""#) == true)

        var st = stat()
        stat(dir + "/out/events.jsonl", &st)
        #expect(st.st_mode & 0o777 == 0o640)
    }

    @Test func listenSinkStreamsToClientsAndTailPrintsThem() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        let socket = dir + "/events.sock"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 20ms }
        sinks:
          live: { type: socket, listen: "unix:\(socket)" }
        """, to: manifest)
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--for", "3s"])
        var waited = 0
        while access(socket, F_OK) != 0 && waited < 500 { usleep(10_000); waited += 1 }
        var st = stat()
        #expect(stat(socket, &st) == 0 && st.st_mode & 0o777 == 0o600)

        let tail = try TestEnv.run(TestEnv.vigil, ["tail", "unix:\(socket)", "--count", "5", "--color", "never"], timeout: 10)
        #expect(tail.status == 0, "\(tail.stderr)")
        let printed = tail.stdout.split(separator: "\n")
        #expect(printed.count == 5)
        // On a loaded machine tail may connect before the host's `started`.
        let beats = printed.filter { !$0.contains(" vigil/") }
        #expect(beats.count >= 4 && beats.allSatisfy { $0.contains(" info     beat/beat count=") && $0.contains("message=alive") },
                "\(printed)")

        let raw = try TestEnv.run(TestEnv.vigil, ["tail", "unix:\(socket)", "--raw"], timeout: 10)
        let events = try parse(raw.stdout.split(separator: "\n").map(String.init))
        #expect(events.count > 10)
        let seqs = events.map(\.seq)
        #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $1 == $0 + 1 }, "a client sees consecutive seq once connected")
        let result = vigil.wait(timeout: 15)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(access(socket, F_OK) != 0, "the socket file is removed at exit")
    }

    @Test func aSlowPollDelaysNoOtherMonitorAndTheWatchdogSaysSo() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          slow: { plugin: slow_poll, interval: 100ms, timeout: 1s, isolation: none, options: { sleep: 4s } }
          beat: { plugin: heartbeat, interval: 50ms }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "3s"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let events = try parse(try readLines(dir + "/events.jsonl"))
        // While 'slow' sat in its first 4 s poll, 'beat' kept its 50 ms rhythm.
        let beats = events.filter { $0.monitor == "beat" && $0.kind == "beat" }
        #expect(beats.count >= 40, "only \(beats.count) beats in 3 s")
        let gaps = zip(beats, beats.dropFirst()).map { $1.time - $0.time }
        #expect((gaps.max() ?? 0) < 500_000_000, "largest gap between beats: \(gaps.max() ?? 0) ns")
        #expect(result.stderr.contains("monitor=slow poll has been running for"), "\(result.stderr)")
        // Shutdown waited for the slow poll to return (within the stop timeout), then stopped it.
        #expect(events.contains { $0.kind == "stopping" })
        #expect(events.contains { $0.monitor == "slow" && $0.kind == "sample" })
    }

    /// Monitors of one interval are polled in one round, one after another;
    /// a poll that hangs in the middle of a round holds up the others for at
    /// most the round's rescue delay (50 ms at 200 ms), and the slow monitor
    /// polls on its own timer from then on.
    @Test func aPollThatHangsInARoundDelaysNoOtherMonitor() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        interval: 200ms
        monitors:
          a: { plugin: heartbeat }
          slow: { plugin: slow_poll, timeout: 5s, isolation: none, options: { sleep: 1500ms, from: 3 } }
          b: { plugin: heartbeat }
          c: { plugin: heartbeat }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "4s"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let events = try parse(try readLines(dir + "/events.jsonl"))
        for name in ["a", "b", "c"] {
            let beats = events.filter { $0.monitor == name && $0.kind == "beat" }
            #expect(beats.count >= 16, "\(name): only \(beats.count) beats in 4 s at 200 ms")
            let gaps = zip(beats, beats.dropFirst()).map { $1.time - $0.time }
            #expect((gaps.max() ?? 0) < 450_000_000, "\(name): largest gap between beats \(gaps.max() ?? 0) ns")
        }
        #expect(result.stderr.contains("monitor=slow a poll took"), "\(result.stderr)")
        #expect(result.stderr.contains("polled on its own timer from now on"), "\(result.stderr)")
        // Its third poll hung for 1.5 s; its own timer polled it again after.
        let slow = events.filter { $0.monitor == "slow" && $0.kind == "sample" }
        #expect(slow.count >= 3, "\(slow.count) polls of the slow monitor")
    }

    @Test func theReadmeCommandRunsTheDefaultManifest() throws {
        let dir = try TestEnv.tempDir()
        let result = try TestEnv.run(TestEnv.vigil, ["run", TestEnv.repoRoot + "/manifests/default.yaml", "--for", "1500ms"],
                                     environment: ["VIGIL_STATE_DIR": dir], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let events = try parse(try readLines(dir + "/events.jsonl"))
        let monitors = Set(events.map(\.monitor))
        #expect(monitors == ["vigil", "cpu", "memory", "load"])
        #expect(result.stderr.contains("cpu/sample usage="), "the log sink prints readable lines")
    }

    @Test func floodFinishesAndVigilExitsByItselfWithEveryEventDelivered() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          flood: { plugin: flood, options: { count: 50000, fields: 4, threads: 3 } }
        sinks:
          null: { type: null, overflow: block, queue_size: 1000 }
          journal: { type: file, path: \(dir)/events.jsonl, overflow: block, queue_size: 1000, fsync: never }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--summary", dir + "/summary.json"], timeout: 120)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("every monitor has finished; stopping"))
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json"))) as? [String: Any]
        let sinks = summary?["sinks"] as? [[String: Any]] ?? []
        // 50 000 flood events plus the host's 'started' and 'stopping', none dropped.
        #expect(sinks.map { $0["written"] as? Int } == [50_002, 50_002])
        #expect(sinks.allSatisfy { ($0["dropped"] as? Int) == 0 })
        let events = try parse(try readLines(dir + "/events.jsonl")).filter { $0.kind == "flood" }
        #expect(events.count == 50_000)
        #expect(events.allSatisfy { $0.fields.map(\.name) == ["v0", "v1", "v2", "v3"] })
    }

    @Test func aPluginBuiltAgainstTheFrozen10HeaderRunsInThisHost() throws {
        let dir = try TestEnv.tempDir()
        try FileManager.default.copyItem(atPath: TestEnv.repoRoot + "/Tests/Compat/vigil_plugin-1.0.h", toPath: dir + "/vigil_plugin.h")
        // The same compiler choice as scripts/build-c-plugins: $CC, cc, gcc, clang.
        let build = try TestEnv.run("/bin/sh", ["-c", """
            cc="${CC:-$(command -v cc || command -v gcc || command -v clang)}"
            "$cc" -std=c99 -Wall -Werror -shared -fPIC -I "$1" "$2" -o "$1/good_minimal.so"
            """, "sh", dir, TestEnv.fixture("plugins/good_minimal.c")])
        #expect(build.status == 0, "\(build.stderr)")
        let plugin = try PluginCatalog(directories: []).load(path: dir + "/good_minimal.so").get()
        #expect(plugin.description.abiMajor == 1 && plugin.description.abiMinor == 0)
        let h = try Harness(plugin: dir + "/good_minimal.so")
        h.launch()
        #expect(h.waitFor(1).first?[field: "value"] == .double(1.0))
        h.instance.shutdown {}
    }

    @Test func sigtermStopsMonitorsAndDrainsSinks() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 10ms, options: { threads: 1, push_interval: 1ms } }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl, fsync: never }
        """, to: manifest)
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest])
        var waited = 0
        while ((try? readLines(dir + "/events.jsonl"))?.count ?? 0) < 20 && waited < 1000 { usleep(10_000); waited += 1 }
        vigil.signal(SIGTERM)
        let result = vigil.wait(timeout: 15)
        #expect(result.status == 0, "\(result.stderr)")
        let events = try parse(try readLines(dir + "/events.jsonl"))
        // The push thread may emit after 'stopping' until stop joins it; nothing is lost either way.
        #expect(events.contains { $0.kind == "stopping" })
        #expect(events.map(\.seq) == Array(1...UInt64(events.count)))
    }

    @Test func refusedPluginsAndADeadSinkDoNotStopTheRest() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          old: { plugin: \(try TestEnv.cPlugin("abi_major2")) }
          broken: { plugin: create_errs }
          beat: { plugin: heartbeat, interval: 50ms }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl }
          dead: { type: socket, connect: "unix:\(dir)/nobody-listens.sock", queue_size: 10 }
        """, to: manifest)
        let started = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "1s", "--drain-timeout", "500ms"], timeout: 30)
        // 1 before 3: monitors were refused (which fails a run with an end), and events were lost in the dead sink.
        #expect(result.status == 1, "\(result.stderr)")
        #expect(result.stderr.contains("monitor 'old' failed to start: ") && result.stderr.contains("monitor 'broken' failed to start: "),
                "\(result.stderr)")
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(result.stderr.contains("abi_major2.so refused: it was built for Vigil ABI 2.0"))
        #expect(result.stderr.contains("monitor 'old' will not run; the others go on"))
        #expect(result.stderr.contains("create failed: the sensor is gone"), "\(result.stderr)")
        #expect(result.stderr.contains("cannot connect to unix:\(dir)/nobody-listens.sock"))
        #expect(result.stderr.contains("sink dead (socket):"))
        let events = try parse(try readLines(dir + "/events.jsonl"))
        #expect(events.contains { $0.kind == "plugin_refused" && $0[field: "monitor"] == .string("old") })
        #expect(events.contains { $0.kind == "instance_failed" && $0[field: "monitor"] == .string("broken") })
        #expect(events.filter { $0.kind == "beat" }.count >= 10)
    }

    @Test func aDeadBlockingSinkStallsOnlyItsOwnProducersAndCannotHangShutdown() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 20ms }
          cpu: { plugin: cpu, interval: 50ms, options: { procfs: \(TestEnv.fixture("machines/server/proc")) } }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl }
          dead: { type: socket, connect: "unix:\(dir)/nobody.sock", match: [beat], overflow: block, queue_size: 5 }
        """, to: manifest)
        let started = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "2s", "--drain-timeout", "500ms"], timeout: 60)
        let took = Date().timeIntervalSince(started)
        #expect(result.status == 3, "events were lost in the dead sink: \(result.stderr)")
        #expect(took < 8, "shutdown took \(took) s")
        let events = try parse(try readLines(dir + "/events.jsonl"))
        // 'beat' waits on the dead sink (it routes there); 'cpu' does not and keeps flowing.
        #expect(events.filter { $0.monitor == "cpu" }.count >= 25)
        #expect(events.filter { $0.monitor == "beat" }.count <= 10)
        #expect(events.map(\.seq) == events.map(\.seq).sorted())
        #expect(result.stderr.contains("sink dead (socket):"))
    }

    @Test func fileSinkRotatesBySizeAndReopensOnSighup() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        let path = dir + "/events.jsonl"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 5ms }
        sinks:
          journal: { type: file, path: \(path), rotate: { size: 8KiB, keep: 3 }, fsync: never }
        """, to: manifest)
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest])
        var waited = 0
        while access(path + ".3", F_OK) != 0 && waited < 1000 { usleep(10_000); waited += 1 }
        #expect(access(path + ".3", F_OK) == 0)
        // logrotate style: move the file away, then SIGHUP.
        rename(path, dir + "/moved.jsonl")
        vigil.signal(SIGHUP)
        waited = 0
        while access(path, F_OK) != 0 && waited < 500 { usleep(10_000); waited += 1 }
        #expect(access(path, F_OK) == 0, "SIGHUP reopens the file at its path")
        vigil.signal(SIGINT)
        let result = vigil.wait(timeout: 15)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(access(path + ".4", F_OK) != 0, "keep: 3 keeps three rotated files")
        for rotated in [path + ".1", path + ".2", path + ".3"] {
            var st = stat()
            stat(rotated, &st)
            #expect(st.st_size <= 8192 && st.st_size > 4096, "\(rotated) is \(st.st_size) bytes")
            #expect(try parse(try readLines(rotated)).count > 10)
        }
    }

    @Test func validateReportsEveryProblemWithLineAndColumn() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/bad.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          cpu:
            plugin: cpu
            intervall: 1s
            options: { per_cpus: true }
          mem: { plugin: memroy }
          beat: { plugin: heartbeat, options: { threads: many } }
          old: { plugin: \(try TestEnv.cPlugin("abi_minor_newer")) }
        sinks:
          out: { type: file, path: /tmp/x.jsonl, min_severity: warnng }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["validate", manifest], timeout: 30)
        #expect(result.status == 1)
        let err = result.stderr
        #expect(err.contains("\(manifest):5:5: error: unknown key 'intervall' in monitor 'cpu'\n  hint: did you mean 'interval'?"), "\(err)")
        #expect(err.contains("\(manifest):6:16: error: unknown option 'per_cpus' for plugin 'cpu' in monitor 'cpu'\n  hint: did you mean 'per_cpu'?"))
        #expect(err.contains("\(manifest):7:18: error: unknown plugin 'memroy' for monitor 'mem'"))
        #expect(err.contains("hint: did you mean 'memory'?"))
        #expect(err.contains("\(manifest):8:50: error: option 'threads' of plugin 'heartbeat' must be an int: 'many' is not a whole number"))
        #expect(err.contains("\(manifest):9:18: error: monitor 'old': plugin \(try TestEnv.cPlugin("abi_minor_newer")) refused: it needs Vigil ABI 1.99"))
        #expect(err.contains("\(manifest):11:56: error: 'min_severity' must be one of debug, info, notice, warning, error, critical, not 'warnng'\n  hint: did you mean 'warning'?"))
        #expect(err.contains("6 errors, 0 warnings"))
    }

    @Test func validateAcceptsTheShippedManifestsAndRunRejectsABadOne() throws {
        let ok = try TestEnv.run(TestEnv.vigil, ["validate", TestEnv.repoRoot + "/manifests/default.yaml"])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(ok.stdout.contains("valid: 3 monitors"))
        let dir = try TestEnv.tempDir()
        try TestEnv.write("monitors: [1, 2\n", to: dir + "/broken.yaml")
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/broken.yaml", "--for", "1s"])
        #expect(run.status == 2)
        #expect(run.stderr.contains("broken.yaml:2:1: error: invalid YAML"))
        #expect(run.stderr.contains("nothing was started"))
        try TestEnv.write("", to: dir + "/empty.yaml")
        let empty = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/empty.yaml"])
        #expect(empty.status == 1)
        #expect(empty.stderr.contains("empty.yaml:1:1: error: the manifest is empty"))
    }

    @Test func relativePluginPathsAreTakenFromTheManifestsDirectory() throws {
        let dir = try TestEnv.tempDir()
        try FileManager.default.createDirectory(atPath: dir + "/plugins", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: try TestEnv.cPlugin("heartbeat"), toPath: dir + "/plugins/heartbeat.so")
        try FileManager.default.copyItem(atPath: try TestEnv.cPlugin("good_minimal"), toPath: dir + "/plugins/good_minimal.so")
        try TestEnv.write("""
        plugin_dirs: [plugins]
        monitors:
          by_path: { plugin: ./plugins/heartbeat.so }
          by_name: { plugin: good_minimal }
        """, to: dir + "/vigil.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/vigil.yaml"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("valid: 2 monitors (2 enabled), 0 sinks"))
    }

    @Test func pluginsListAndDescribe() throws {
        let list = try TestEnv.run(TestEnv.vigil, ["plugins", "list", "--plugin-dir", try TestEnv.cPlugins()])
        #expect(list.status == 1)  // the ABI fixtures there are refused
        let rows = list.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        for name in ["cpu", "memory", "load", "heartbeat"] {
            let row = rows.first { $0.first.map(String.init) == name }
            // Any 1.x version: plugins gain options and kinds (issue 29's cpu and memory are 1.1.0).
            #expect(row.map { $0.count == 4 && $0[1].hasPrefix("1.") && $0[1].split(separator: ".").count == 3
                              && $0[2] == "1.5" && $0[3].hasSuffix(".so") } == true,
                    "\(name) missing or malformed in \(list.stdout)")
        }
        #expect(list.stderr.contains("abi_major2.so refused"))
        // Sorted by name.
        let names = rows.dropFirst().compactMap { $0.first.map(String.init) }
        #expect(names == names.sorted() && names.count > 4, "\(names)")
        let describe = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "cpu"])
        #expect(describe.status == 0)
        #expect(describe.stdout.contains("per_cpu (bool, default false)"))
        #expect(describe.stdout.contains("usage (double, ratio): busy share, 0…1"))
        let missing = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "nosuch"])
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("no plugin named 'nosuch'"))
    }

    @Test func everyVerbHasHelp() throws {
        for verb in [[], ["run"], ["validate"], ["plugins"], ["plugins", "list"], ["plugins", "describe"], ["tail"]] {
            let result = try TestEnv.run(TestEnv.vigil, verb + ["--help"])
            #expect(result.status == 0)
            #expect(result.stdout.contains("USAGE: vigil"), "\(verb)")
        }
    }
}
