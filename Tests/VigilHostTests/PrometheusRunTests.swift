import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
@testable import vigil

/// The `prometheus` sink through the real binaries: `vigil run` serving a
/// fixture machine's load and memory, `promtool check metrics` on what it
/// serves, and Debian's `prometheus` scraping it, its query API asked for
/// the values /proc shows.
@Suite(.serialized, .startsProcesses, .offThePool) struct PrometheusRunTests {
    static let proc = TestEnv.fixture("machines/server/proc")

    /// The fixture's values, read from its files as /proc gives them.
    static func fixtureValues() throws -> (load1: String, total: Int64, available: Int64) {
        let loadavg = try String(contentsOfFile: proc + "/loadavg", encoding: .utf8)
        let meminfo = try String(contentsOfFile: proc + "/meminfo", encoding: .utf8)
        func kB(_ key: String) -> Int64 {
            let line = meminfo.split(separator: "\n").first { $0.hasPrefix(key + ":") } ?? ""
            return (Int64(line.split(separator: " ").dropFirst().first ?? "") ?? -1) * 1024
        }
        return (String(loadavg.split(separator: " ")[0]), kB("MemTotal"), kB("MemAvailable"))
    }

    struct Host {
        let dir: String
        let port: Int
        let process: RunningProcess

        init(_ tag: String) throws {
            dir = try TestEnv.tempDir(tag)
            port = try ControlTCPRunTests.freePort()
            try TestEnv.write("""
            plugin_dirs: [\(try TestEnv.cPlugins())]
            host: fixture-server
            monitors:
              load: { plugin: load, interval: 200ms, options: { procfs: \(PrometheusRunTests.proc) } }
              memory: { plugin: memory, interval: 200ms, options: { procfs: \(PrometheusRunTests.proc) } }
              cpu: { plugin: cpu, interval: 200ms, options: { procfs: \(PrometheusRunTests.proc), per_cpu: true } }
              beat: { plugin: heartbeat, interval: 100ms, isolation: none }
            sinks:
              prom: { type: prometheus, listen: "tcp://127.0.0.1:\(port)" }
            """, to: dir + "/vigil.yaml")
            process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--control", "unix:\(dir)/vigil.sock", "--for", "120s"])
            let port = port
            // Every monitor's first event, not just one: under a full run's load
            // the heartbeat's came after the others' (CI, 6b21fff).
            let families = ["vigil_load_load1", "vigil_memory_available_bytes", "vigil_cpu_core_usage_ratio", "vigil_heartbeat_beat_count_total"]
            guard SinkRunTests.waitUntil(20, {
                let body = (try? TestEnv.httpGet(port: port, "/metrics"))?.body ?? ""
                return families.allSatisfy { body.contains($0) }
            }) else {
                process.signal(SIGTERM)
                throw TestFailure("no series served: \(process.wait(timeout: 10).stderr)")
            }
        }

        func stop() -> TestEnv.Output {
            process.signal(SIGTERM)
            return process.wait(timeout: 30)
        }
    }

    /// The result of an instant query of the Prometheus at 127.0.0.1:`port` (none when it does not answer).
    static func query(port: Int, _ q: String) -> [[String: Any]] {
        let encoded = q.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? q
        guard let reply = try? TestEnv.httpGet(port: port, "/api/v1/query?query=\(encoded)"), reply.status == 200,
              let json = try? JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any],
              let data = json["data"] as? [String: Any] else { return [] }
        return data["result"] as? [[String: Any]] ?? []
    }

    static func tool(_ name: String) -> String? {
        ["/usr/bin/\(name)", "/usr/local/bin/\(name)"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    @Test func servesTheFixturesValuesInAFormatPromtoolAccepts() async throws {
        let host = try Host("prom-serve")
        let values = try Self.fixtureValues()
        let body = try TestEnv.httpGet(port: host.port, "/metrics").body
        #expect(body.contains("vigil_load_load1{monitor=\"load\",host=\"fixture-server\"} \(values.load1)\n"), "\(body)")
        #expect(body.contains("vigil_memory_total_bytes{monitor=\"memory\",host=\"fixture-server\"} \(values.total)\n"))
        #expect(body.contains("vigil_memory_available_bytes{monitor=\"memory\",host=\"fixture-server\"} \(values.available)\n"))
        #expect(body.contains("vigil_cpu_core_usage_ratio{monitor=\"cpu\",host=\"fixture-server\",cpu=\"0\"}"))
        #expect(body.contains("# TYPE vigil_heartbeat_beat_count_total counter"))

        let promtool = try #require(Self.tool("promtool"), "promtool is not installed (apt-get install prometheus; scripts/test-deps installs it)")
        let file = host.dir + "/metrics.txt"
        try TestEnv.write(body, to: file)
        let check = try TestEnv.run("/bin/sh", ["-c", "\(promtool) check metrics < \(file)"], timeout: 30)
        #expect(check.status == 0, "promtool: \(check.stdout) \(check.stderr)")

        // The control API's /metrics carries the same series after the host's own.
        // (Asked again if the first connection was cut: once seen under a full
        // test run's load, never alone.)
        let control = try ControlAddress(parsing: "unix:\(host.dir)/vigil.sock")
        var asked = try? await ControlClient.request(.GET, "/metrics", to: control)
        if asked == nil {
            try await Task.sleep(for: .milliseconds(500))
            asked = try await ControlClient.request(.GET, "/metrics", to: control)
        }
        let reply = try #require(asked)
        #expect(reply.text.contains("vigil_events_total{monitor=\"load\"}"))
        #expect(reply.text.contains("vigil_load_load1{monitor=\"load\",host=\"fixture-server\"} \(values.load1)"))
        try TestEnv.write(reply.text, to: file)
        let both = try TestEnv.run("/bin/sh", ["-c", "\(promtool) check metrics < \(file)"], timeout: 30)
        #expect(both.status == 0, "promtool on the control API: \(both.stdout) \(both.stderr)")

        let output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("serving /metrics on http://127.0.0.1:\(host.port)/metrics"))
    }

    /// Debian's Prometheus scrapes the sink every second; its query API
    /// answers with the load average and memory the fixture's /proc holds.
    @Test func prometheusScrapesItAndAnswersWithProcsValues() async throws {
        let prometheus = try #require(Self.tool("prometheus"), "prometheus is not installed (apt-get install prometheus; scripts/test-deps installs it)")
        let host = try Host("prom-scrape")
        defer { _ = host.stop() }
        let values = try Self.fixtureValues()
        let webPort = try ControlTCPRunTests.freePort()
        try TestEnv.write("""
        global: { scrape_interval: 1s, evaluation_interval: 1s }
        scrape_configs:
          - job_name: vigil
            static_configs: [{ targets: ["127.0.0.1:\(host.port)"] }]
        """, to: host.dir + "/prometheus.yml")
        let server = try TestEnv.start(prometheus, ["--config.file=\(host.dir)/prometheus.yml", "--storage.tsdb.path=\(host.dir)/tsdb",
                                                    "--web.listen-address=127.0.0.1:\(webPort)", "--log.level=warn"])
        defer {
            server.signal(SIGTERM)
            _ = server.wait(timeout: 30)
        }
        func query(_ q: String) -> [[String: Any]] { Self.query(port: webPort, q) }
        func value(_ q: String) -> String? { (query(q).first?["value"] as? [Any])?.last as? String }
        #expect(SinkRunTests.waitUntil(60) { value("up{job=\"vigil\"}") == "1" }, "Prometheus never scraped the sink")
        #expect(SinkRunTests.waitUntil(20) { value("vigil_load_load1") == values.load1 }, "\(query("vigil_load_load1"))")
        #expect(value("vigil_memory_total_bytes") == String(values.total))
        #expect(value("vigil_memory_available_bytes") == String(values.available))
        let labels = query("vigil_memory_available_bytes").first?["metric"] as? [String: String] ?? [:]
        #expect(labels["monitor"] == "memory" && labels["host"] == "fixture-server" && labels["job"] == "vigil", "\(labels)")
        // A counter Prometheus can take a rate of.
        #expect(SinkRunTests.waitUntil(20) { Double(value("rate(vigil_heartbeat_beat_count_total[5s])") ?? "") ?? 0 > 1 })
    }
}
