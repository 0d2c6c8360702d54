import Foundation
import Synchronization
import Testing

/// A sink of `type: plugin` behind a disk buffer, through the real binary,
/// with the C output example (graphite) and a carbon stand-in on loopback:
/// carbon is down, the host takes a flood into the buffer (the output
/// answering RETRY all along) and is killed with SIGKILL; carbon comes up,
/// the host is started again, and every event the first host accepted
/// arrives.
@Suite(.serialized) struct OutputBufferRunTests {
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
