import Foundation
import Synchronization
import Testing

/// A sink of `type: plugin` behind a disk buffer, through the real binary,
/// with the C output example (graphite) and a carbon stand-in on loopback:
/// carbon is down, the host takes a flood into the buffer (the output
/// answering RETRY all along) and is killed with SIGKILL; carbon comes up,
/// the host is started again, and every event the first host accepted
/// arrives.
@Suite(.serialized, .startsProcesses, .offThePool) struct OutputBufferRunTests {
    static func manifest(_ dir: String, port: Int, flood: Bool) throws -> String {
        let path = dir + (flood ? "/first.yaml" : "/second.yaml")
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
        \(flood ? "  f: { plugin: flood, isolation: none, options: { count: 2000, rate: 4000, fields: 1 } }" : "")
        sinks:
          carbon:
            type: plugin
            plugin: graphite
            isolation: none
            match: ["f/*"]
            options: { host: 127.0.0.1, port: \(port), prefix: buf }
            retry_min: 20ms
            retry_max: 100ms
            buffer: { type: disk, path: \(dir)/buffer, fsync: always }
        """, to: path)
        return path
    }

    /// The flood's values (field v0 counts 0, 1, 2…) among carbon's lines.
    static func values(_ lines: [String]) -> [Int] {
        lines.compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 3, parts[0].hasSuffix(".f.flood.v0") else { return nil }
            return Double(parts[1]).map { Int($0) }
        }
    }

    @Test func everyAcceptedEventReachesTheOutputAfterKill9AndARestart() throws {
        let dir = try TestEnv.tempDir("output-buffer-kill9")
        // Carbon is down (bound, not listening): the output answers RETRY,
        // the buffer keeps everything.
        let carbonPort = try TCPListener(listening: false)
        defer { carbonPort.close() }
        let port = carbonPort.port
        let socket = dir + "/vigil.sock"
        let first = try TestEnv.start(TestEnv.vigil, ["run", try Self.manifest(dir, port: port, flood: true), "--control", "unix:" + socket])
        let taken = SinkRunTests.waitUntil(30) {
            guard let out = try? TestEnv.run(TestEnv.vigil, ["ctl", "status", "--json", "--control", "unix:" + socket], timeout: 10),
                  let json = try? JSONSerialization.jsonObject(with: Data(out.stdout.utf8)) as? [String: Any],
                  let sink = (json["sinks"] as? [[String: Any]])?.first else { return false }
            return (sink["written"] as? Int ?? 0) >= 2000
        }
        first.signal(SIGKILL)
        _ = first.wait(timeout: 10)
        #expect(taken, "the flood never got into the buffer")

        try carbonPort.listenNow()
        let carbon = LineCollector(carbonPort)
        let run = try TestEnv.run(TestEnv.vigil, ["run", try Self.manifest(dir, port: port, flood: false), "--for", "3s",
                                                  "--control", "none", "--summary", dir + "/summary.json"], timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("events from an earlier run to send"), "\(run.stderr)")
        _ = SinkRunTests.waitUntil(5) { Set(Self.values(carbon.lines())).count >= 2000 }
        let values = Self.values(carbon.lines())
        #expect(Set(values) == Set(0..<2000), "\(Set(values).count) distinct of 2000")
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        let sink = (summary["sinks"] as? [[String: Any]])?.first ?? [:]
        let buffer = sink["buffer"] as? [String: Any] ?? [:]
        #expect((buffer["replayed"] as? Int ?? 0) >= 2000, "\(buffer)")
        #expect(buffer["buffered"] as? Int == 0, "\(buffer)")
        let duplicates = values.count - Set(values).count
        #expect(duplicates <= buffer["possible_duplicates"] as? Int ?? 0, "\(duplicates) duplicates, \(buffer)")
    }

    /// While the output answers RETRY, a stop keeps the events on disk (not
    /// lost: exit 0, "kept"), and the next start delivers them.
    @Test func aStopWhileTheOutputRetriesKeepsTheEventsForTheNextStart() throws {
        let dir = try TestEnv.tempDir("output-buffer-stop")
        let carbonPort = try TCPListener(listening: false)
        defer { carbonPort.close() }
        let port = carbonPort.port
        let first = try TestEnv.run(TestEnv.vigil, ["run", try Self.manifest(dir, port: port, flood: true), "--for", "2s",
                                                    "--drain-timeout", "500ms", "--control", "none"], timeout: 60)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stderr.contains("2000 kept for the next start") && first.stderr.contains("none lost"), "\(first.stderr)")
        try carbonPort.listenNow()
        let carbon = LineCollector(carbonPort)
        let second = try TestEnv.run(TestEnv.vigil, ["run", try Self.manifest(dir, port: port, flood: false), "--for", "2s",
                                                     "--control", "none"], timeout: 60)
        #expect(second.status == 0, "\(second.stderr)")
        _ = SinkRunTests.waitUntil(5) { Set(Self.values(carbon.lines())).count >= 2000 }
        #expect(Set(Self.values(carbon.lines())) == Set(0..<2000))
    }

    @Test func validateAcceptsADiskBufferOnAPluginSink() throws {
        let dir = try TestEnv.tempDir("output-buffer-validate")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", try Self.manifest(dir, port: 2003, flood: true)], timeout: 60)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
    }
}

/// What a plugin sink's configuration means, the same to `run` and to
/// `validate`, behind a disk buffer or not.
@Suite(.startsProcesses, .offThePool) struct PluginSinkConfigRunTests {
    /// Behind a disk buffer the output runs on the buffer's delivery
    /// thread, and its flush still comes every `flush_interval`.
    @Test func anOutputBehindADiskBufferIsFlushedEveryFlushInterval() throws {
        let dir = try TestEnv.tempDir("output-buffer-flush")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
        monitors:
          f: { plugin: flood, options: { count: 50, rate: 25 } }
        sinks:
          out:
            type: plugin
            plugin: output_hostile
            isolation: none
            match: ["f/*"]
            flush_interval: 200ms
            options: { mode: crash_in_flush, at: 1000000, path: \(dir)/delivered.txt }
            buffer: { type: disk, path: \(dir)/buffer }
        """, to: dir + "/m.yaml")
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins(), "--for", "2s",
                                                  "--control", "none"], timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        let lines = try String(contentsOfFile: dir + "/delivered.txt", encoding: .utf8).split(separator: "\n")
        let flushes = lines.filter { $0 == "flush" }.count
        #expect(flushes >= 4, "\(flushes) flushes in 2 s at 200ms")
        #expect(lines.count - flushes == 50, "\(lines.count - flushes) delivered")
    }

    /// A relative `plugin:` path is the manifest's directory's, for `run`
    /// started elsewhere as for `validate`.
    @Test func aRelativePluginPathIsTheManifestsDirectorys() throws {
        let dir = try TestEnv.tempDir("output-relative")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/plugins", withIntermediateDirectories: true)
        try NewPluginTests.succeed("cp", "/bin/cp", [try TestEnv.cPlugin("output_min"), dir + "/plugins/output_min.so"], timeout: 30)
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          f: { plugin: flood, options: { count: 20, rate: 1000 } }
        sinks:
          out:
            type: plugin
            plugin: plugins/output_min.so
            match: ["f/*"]
            options: { path: \(dir)/delivered.txt }
        """, to: dir + "/m.yaml")
        let validate = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml"], timeout: 60)
        #expect(validate.status == 0, "\(validate.stdout)\(validate.stderr)")
        // Started from another directory (/), where plugins/output_min.so is not.
        let run = try TestEnv.run("/bin/sh", ["-c", "cd / && exec \"$0\" run \"$1\" --control none", TestEnv.vigil, dir + "/m.yaml"],
                                  timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        let delivered = try String(contentsOfFile: dir + "/delivered.txt", encoding: .utf8).split(separator: "\n")
        #expect(delivered.count == 20, "\(delivered)")
    }
}
