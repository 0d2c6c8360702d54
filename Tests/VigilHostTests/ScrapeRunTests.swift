import Foundation
import Glibc
import Testing
import VigilForeign

/// The `scrape` plugin through the real `vigil`: a real node_exporter
/// (Debian's prometheus-node-exporter on loopback) scraped beside a direct
/// fetch of it; a real Prometheus taking a rate of a counter that passed
/// through; and endpoints that misbehave every way Tests/Fixtures/scrape/
/// exporters.py knows, each a counted, logged failed scrape, never a crash.
@Suite(.serialized, .startsProcesses, .offThePool)
struct ScrapeRunTests {
    static let nodeExporter = "/usr/bin/prometheus-node-exporter"

    /// Runs the monitors for `duration`, or with `stopAfter` until `during` returns.
    func run(_ monitors: String, in dir: String, for duration: String, extraSinks: String = "", stopAfter: Bool = false,
             during: (() throws -> Void)? = nil) throws -> (TestEnv.Output, [[String: Any]]) {
        try TestEnv.write("monitors:\n" + monitors + "\nsinks:\n  out: { type: file, path: \(dir)/events.jsonl }\n" + extraSinks,
                          to: dir + "/m.yaml")
        let process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/m.yaml", "--for", duration, "--control", "none"])
        try during?()
        if stopAfter { process.signal(SIGTERM) }
        let output = process.wait(timeout: 120)
        return (output, NagiosRunTests.events(dir + "/events.jsonl"))
    }

    /// A node_exporter with collectors whose series are the same from one
    /// scrape to the next (its textfile, uname, os, loadavg, and its own go_
    /// and process_ figures), on a port of its own.
    final class Exporter {
        let process: RunningProcess
        let port: Int

        init(dir: String) throws {
            try #require(FileManager.default.isExecutableFile(atPath: ScrapeRunTests.nodeExporter),
                         "prometheus-node-exporter is not installed (scripts/test-deps installs it)")
            try NodeExporterParityTests.writeTextfiles(in: dir + "/textfile")
            port = try ControlTCPRunTests.freePort()
            process = try TestEnv.start(ScrapeRunTests.nodeExporter, [
                "--web.listen-address=127.0.0.1:\(port)", "--collector.disable-defaults", "--collector.textfile",
                "--collector.textfile.directory=\(dir)/textfile", "--collector.uname", "--collector.os", "--collector.loadavg",
            ])
            let port = port
            guard SinkRunTests.waitUntil(20, { (try? NodeExporterParityTests.scrape(port))?.contains("node_load1") == true }) else {
                throw TestFailure("node_exporter did not answer")
            }
        }

        deinit {
            process.signal(SIGKILL)
            _ = process.wait(timeout: 10)
        }
    }

    /// Every series node_exporter returns arrives once per scrape, under its
    /// name, labels and type, and the values of the series that do not move
    /// are the direct fetch's.
    @Test func everySeriesOfARealNodeExporterArrivesOncePerScrape() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let exporter = try Exporter(dir: dir)
        let monitors = """
              node:
                plugin: scrape
                interval: 1s
                options: { url: "http://127.0.0.1:\(exporter.port)/metrics", timeout: 900ms }
            """
        var direct = ""
        let (output, events) = try run(monitors, in: dir, for: "3500ms") {
            usleep(1_500_000)
            direct = try NodeExporterParityTests.scrape(exporter.port)
        }
        #expect(output.status == 0, "\(output.stderr)")
        let fetched = try PrometheusExposition.parse(Array(direct.utf8))
        var expected: [String: (type: String, value: Double)] = [:]
        for family in fetched.families {
            for sample in family.samples {
                expected[sample.name + "{" + PrometheusExposition.labelText(sample.labels) + "}"] = (family.type.rawValue, sample.value)
            }
        }
        // The events of each scrape: the samples before its `scrape` event.
        var rounds: [[[String: Any]]] = []
        var current: [[String: Any]] = []
        for event in events where event["monitor"] as? String == "node" {
            let fields = event["fields"] as? [String: Any] ?? [:]
            if event["kind"] as? String == "sample" { current.append(fields) }
            if event["kind"] as? String == "scrape" {
                #expect(fields["up"] as? Bool == true, "\(fields)")
                rounds.append(current)
                current = []
            }
        }
        #expect(rounds.count >= 3, "\(rounds.count) scrapes")
        let stable = ["node_uname_info", "node_os_info", "node_os_version", "backup_", "node_textfile_", "go_info"]
        for (i, round) in rounds.enumerated() {
            var seen: [String: Int] = [:]
            for fields in round {
                let key = "\(fields["prometheus_name"] as? String ?? "")" + "{" + "\(fields["prometheus_labels"] as? String ?? "")" + "}"
                seen[key, default: 0] += 1
                guard let (type, value) = expected[key] else {
                    Issue.record("scrape \(i): \(key) is not in the direct fetch")
                    continue
                }
                #expect(fields["type"] as? String == type, "\(key)")
                if stable.contains(where: { key.hasPrefix($0) }) {
                    #expect(fields["value"] as? Double == value, "scrape \(i): \(key): \(fields["value"] ?? "nil"), fetched \(value)")
                }
            }
            #expect(seen.values.allSatisfy { $0 == 1 }, "scrape \(i): given more than once: \(seen.filter { $0.value > 1 }.keys)")
            #expect(Set(seen.keys) == Set(expected.keys),
                    "scrape \(i): missing \(Set(expected.keys).subtracting(seen.keys).sorted().prefix(5)), extra \(Set(seen.keys).subtracting(expected.keys).sorted().prefix(5))")
        }
    }

    /// The series pass through a prometheus sink as node_exporter served
    /// them, and a real Prometheus scraping that sink takes a rate of a
    /// counter that came through.
    @Test func aRealPrometheusTakesARateOfACounterThatCameThrough() throws {
        let prometheus = try #require(PrometheusRunTests.tool("prometheus"), "prometheus is not installed (scripts/test-deps installs it)")
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let exporter = try Exporter(dir: dir)
        let sinkPort = try ControlTCPRunTests.freePort(), webPort = try ControlTCPRunTests.freePort()
        try TestEnv.write("""
            global: { scrape_interval: 1s, evaluation_interval: 1s }
            scrape_configs:
              - job_name: vigil
                static_configs: [{ targets: ["127.0.0.1:\(sinkPort)"] }]
            """, to: dir + "/prometheus.yml")
        let monitors = """
              node:
                plugin: scrape
                interval: 1s
                options: { url: "http://127.0.0.1:\(exporter.port)/metrics", timeout: 900ms, match: ["promhttp_*", "node_load*", "backup_*"] }
            """
        let sink = "  prom: { type: prometheus, listen: \"tcp://127.0.0.1:\(sinkPort)\" }\n"
        var rate: Double?
        var histogramCount: String?
        let (output, _) = try run(monitors, in: dir, for: "60s", extraSinks: sink, stopAfter: true) {
            let server = try TestEnv.start(prometheus, ["--config.file=\(dir)/prometheus.yml", "--storage.tsdb.path=\(dir)/tsdb",
                                                        "--web.listen-address=127.0.0.1:\(webPort)", "--log.level=warn"])
            defer {
                server.signal(SIGTERM)
                _ = server.wait(timeout: 30)
            }
            func value(_ q: String) -> String? { (PrometheusRunTests.query(port: webPort, q).first?["value"] as? [Any])?.last as? String }
            // Each scrape of node_exporter adds one to its promhttp counter: a rate of about one a second.
            _ = SinkRunTests.waitUntil(35) {
                rate = Double(value("rate(promhttp_metric_handler_requests_total{code=\"200\"}[10s])") ?? "")
                return (rate ?? 0) > 0.3
            }
            histogramCount = value("histogram_quantile(0.5, rate(backup_duration_seconds_bucket[10s]))") ?? value("backup_duration_seconds_count")
        }
        #expect(output.status == 0, "\(output.stderr)")
        #expect((rate ?? 0) > 0.3 && (rate ?? 0) < 3, "rate \(rate ?? -1)")
        #expect(histogramCount != nil)
    }

    /// Every way an endpoint can misbehave is one failed scrape, counted and
    /// logged once, with vigil and the other monitors unharmed; OpenMetrics
    /// is read as OpenMetrics; headers are sent.
    @Test func misbehavingEndpointsAreCountedFailures() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let file = dir + "/ports.json"
        let peers = try TestEnv.start("/usr/bin/python3", [TestEnv.fixture("scrape/exporters.py"), file])
        defer { peers.signal(SIGKILL); _ = peers.wait(timeout: 10) }
        #expect(SinkRunTests.waitUntil(20) { FileManager.default.fileExists(atPath: file) })
        let ports = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Int])
        let closed = try TCPListener(listening: false)
        defer { closed.close() }
        var monitors = ""
        for (name, port) in ports.sorted(by: { $0.key < $1.key }) {
            monitors += """
                  \(name):
                    plugin: scrape
                    interval: 1s
                    options: { url: "http://127.0.0.1:\(port)/metrics", timeout: 800ms, max_bytes: 1MiB, max_series: 1000,
                               headers: { Authorization: "Bearer s3cret" } }

                """
        }
        monitors += "  refused:\n    plugin: scrape\n    interval: 1s\n    options: { url: \"http://127.0.0.1:\(closed.port)/metrics\" , timeout: 500ms }\n"
        let began = Date()
        let (output, events) = try run(monitors, in: dir, for: "3500ms")
        #expect(output.status == 0, "\(output.stderr)")
        #expect(Date().timeIntervalSince(began) < 15)
        func scrapes(_ monitor: String) -> [[String: Any]] { NagiosRunTests.of(events, monitor: monitor, kind: "scrape") }
        func samples(_ monitor: String) -> [[String: Any]] { NagiosRunTests.of(events, monitor: monitor, kind: "sample") }
        for (name, says) in [("garbage", "line 1"), ("huge", "longer than 1048576 bytes"), ("hang", "no answer"), ("cut", "closed"),
                             ("error", "HTTP status 500"), ("flood", "more than 1000 series"), ("refused", "cannot connect"),
                             ("gzipped", "Content-Encoding: gzip, though the request asked for identity"),
                             ("gzipraw", "gzip data (it starts 1f 8b)")] {
            let all = scrapes(name)
            #expect(all.count >= 2, "\(name): \(all.count) scrapes")
            #expect(all.allSatisfy { $0["up"] as? Bool == false }, "\(name): \(all)")
            let error = all.first?["error"] as? String ?? ""
            #expect(error.contains(says), "\(name): \(all.first ?? [:])")
            #expect(samples(name).isEmpty, "\(name)")
            // Logged once, however many scrapes failed the same way.
            #expect(output.stderr.components(separatedBy: "monitor=\(name) plugin=scrape: scrape of").count == 2, "\(name): \(output.stderr)")
        }
        let om = samples("openmetrics")
        #expect(scrapes("openmetrics").first?["up"] as? Bool == true)
        let names = om.prefix(6).map { "\($0["prometheus_name"]!)/\($0["type"]!)" }
        #expect(names == ["jobs_total/counter", "jobs_created/counter", "temp_celsius/gauge", "lat_bucket/histogram", "lat_bucket/histogram",
                          "lat_count/histogram"], "\(names)")
        // A 70 KB HELP: once per scrape, on the name's first sample, cut
        // to what a field holds; labels no event can hold: left out and
        // counted, the rest of the answer passed on (and vigil's exit 0
        // above says no event was refused).
        let long = scrapes("longhelp")
        #expect(long.count >= 2 && long.allSatisfy { $0["up"] as? Bool == true && $0["too_large"] as? Int == 1 && $0["kept"] as? Int == 901 },
                "\(long)")
        let helped = samples("longhelp").compactMap { $0["help"] as? String }
        #expect(helped.count == 2 * long.count, "\(helped.count) helps in \(long.count) scrapes")
        #expect(helped.contains { $0.hasSuffix("…") && $0.utf8.count <= 65_536 && $0.hasPrefix("hhhh") })
        #expect(samples("longhelp").count == 901 * long.count)
        #expect(output.stderr.contains("samples of http://127.0.0.1:\(ports["longhelp"]!)/metrics have a name or labels over 65536 bytes"))
        let seen = samples("headers").first?["prometheus_labels"] as? String
        #expect(seen == #"accept_openmetrics="1",authorization="Bearer s3cret""#, "\(seen ?? "nil")")
    }

    @Test func validateSaysWhatIsWrongWithAnEndpoint() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
            monitors:
              a:
                plugin: scrape
                options: { url: "https://example.org/metrics" }
              b:
                plugin: scrape
                options: { url: "http://host:99999/metrics" }
              c:
                plugin: scrape
                interval: 5s
                options: { url: "http://127.0.0.1:9100/metrics", timeout: 10s, headers: { "Bad Name": x } }
            """, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml"])
        let text = result.stdout + result.stderr
        #expect(result.status != 0)
        #expect(text.contains("https is not read yet"), "\(text)")
        #expect(text.contains("the port is not a number from 1 to 65535"), "\(text)")
        #expect(text.contains("longer than the interval") || text.contains("not a header name"), "\(text)")
    }
}
