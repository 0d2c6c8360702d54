import Foundation
import Glibc
import Testing
@testable import VigilForeign

/// The reader of the Prometheus exposition formats: every line of a real
/// node_exporter's /metrics (Debian's prometheus-node-exporter, started on
/// loopback), the formats' corner cases, and what it refuses, where.
@Suite struct PrometheusExpositionTests {
    typealias X = PrometheusExposition

    static func parse(_ text: String, _ format: X.Format = .text) throws(X.ParseError) -> X {
        try X.parse(Array(text.utf8), format: format)
    }

    @Test func aHistogramASummaryAndLabelsWithEscapes() throws {
        let x = try Self.parse(#"""
            # HELP http_requests_total The total number of HTTP requests.
            # TYPE http_requests_total counter
            http_requests_total{method="post",code="200"} 1027 1395066363000
            http_requests_total{method="post",code="400"}    3 1395066363000

            # A comment, then escapes in a label value.
            msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9
            metric_without_timestamp_and_labels 12.47
            something_weird{problem="division by zero"} +Inf -3982045
            # HELP http_request_duration_seconds A histogram of the request duration.
            # TYPE http_request_duration_seconds histogram
            http_request_duration_seconds_bucket{le="0.05"} 24054
            http_request_duration_seconds_bucket{le="+Inf"} 144320
            http_request_duration_seconds_sum 53423
            http_request_duration_seconds_count 144320
            # TYPE rpc_duration_seconds summary
            rpc_duration_seconds{quantile="0.5"} 4773
            rpc_duration_seconds{quantile="0.99",} 76656
            rpc_duration_seconds_sum 1.7560473e+07
            rpc_duration_seconds_count 2693
            """#)
        #expect(x.families.map(\.name) == ["http_requests_total", "msdos_file_access_time_seconds", "metric_without_timestamp_and_labels",
                                           "something_weird", "http_request_duration_seconds", "rpc_duration_seconds"])
        #expect(x.families.map(\.type) == [.counter, .untyped, .untyped, .untyped, .histogram, .summary])
        #expect(x.families[0].help == "The total number of HTTP requests.")
        #expect(x.families[0].samples[1].value == 3 && x.families[0].samples[1].timestamp == 1_395_066_363_000)
        #expect(x.families[1].samples[0].labels == [X.Label(name: "path", value: #"C:\DIR\FILE.TXT"#),
                                                    X.Label(name: "error", value: "Cannot find file:\n\"FILE.TXT\"")])
        #expect(x.families[3].samples[0].value == .infinity && x.families[3].samples[0].timestamp == -3_982_045)
        #expect(x.families[4].samples.map(\.name) == ["http_request_duration_seconds_bucket", "http_request_duration_seconds_bucket",
                                                      "http_request_duration_seconds_sum", "http_request_duration_seconds_count"])
        #expect(x.families[5].samples.count == 4)
        #expect(x.sampleCount == 13)
    }

    @Test func openMetricsWithUnitsCreatedAndExemplars() throws {
        let x = try Self.parse("""
            # TYPE acme_http_router_request_seconds summary
            # UNIT acme_http_router_request_seconds seconds
            # HELP acme_http_router_request_seconds Latency though all of ACME's HTTP request router.
            acme_http_router_request_seconds_sum{path="/api/v1",method="GET"} 9036.32
            acme_http_router_request_seconds_count{path="/api/v1",method="GET"} 807283.0
            acme_http_router_request_seconds_created{path="/api/v1",method="GET"} 1605281325.0
            # TYPE foo counter
            foo_total 17.0 1520879607.789 # {trace_id="KOO5S4vxi0o"} 0.67
            foo_created 1520872607.123
            # TYPE bar histogram
            bar_bucket{le="1"} 2 # {id="x"} 0.5 123.0
            bar_bucket{le="+Inf"} 3
            bar_count 3
            bar_sum 2.5
            # TYPE build info
            build_info{version="1.0"} 1
            # EOF

            """, .openMetrics)
        #expect(x.families.map(\.name) == ["acme_http_router_request_seconds", "foo", "bar", "build"])
        #expect(x.families[0].unit == "seconds" && x.families[0].samples.count == 3)
        #expect(x.families[1].type == .counter && x.families[1].samples.map(\.name) == ["foo_total", "foo_created"])
        #expect(x.families[1].samples[0].timestamp == 1_520_879_607_789)
        #expect(x.families[2].samples.count == 4 && x.families[3].type == .info)
    }

    /// Refused whole, at the line and column of the first problem.
    @Test(arguments: [
        ("a{b=\"c} 1\n", X.Format.text, 1, "not closed"),
        ("a 1\nb{c=\"d\",c=\"e\"} 2\n", .text, 2, "given twice"),
        ("a x\n", .text, 1, "is not a number"),
        ("a 1 2 3\n", .text, 1, "more after"),
        ("a 1 1.5\n", .text, 1, "milliseconds"),
        ("a{b=c} 1\n", .text, 1, "must be quoted"),
        ("a{1b=\"c\"} 1\n", .text, 1, "label name"),
        ("{a=\"b\"} 1\n", .text, 1, "without a metric name"),
        ("a 1\n# TYPE a counter\n", .text, 2, "after its samples"),
        ("# TYPE a gauge\n# TYPE a counter\n", .text, 2, "second # TYPE"),
        ("# TYPE a bogus\n", .text, 1, "not a metric type"),
        ("# TYPE h histogram\nh_bucket 1\n", .text, 2, "'le'"),
        ("# TYPE s summary\ns 1\n", .text, 2, "'quantile'"),
        ("a 1\na 2\n", .text, 2, "given twice"),
        ("a{b=\"\\x\"} 1\n", .text, 1, "unknown escape"),
        ("a 1\n", .openMetrics, 2, "# EOF"),
        ("a 1\n# EOF\nb 2\n", .openMetrics, 3, "nothing may follow"),
        ("a 1\n\n# EOF\n", .openMetrics, 2, "empty line"),
        ("# TYPE c counter\nc 1\n# EOF\n", .openMetrics, 2, "_total"),
        ("a 1\nb 1\na_x 1\n# TYPE a gauge\n# EOF\n", .openMetrics, 4, "appears again"),
        ("# just a comment\n# EOF\n", .openMetrics, 1, "OpenMetrics has only"),
        ("# EOF", .openMetrics, 1, "no newline"),
    ] as [(String, X.Format, Int, String)])
    func refusals(text: String, format: X.Format, line: Int, says: String) {
        do {
            _ = try X.parse(Array(text.utf8), format: format)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line && error.message.contains(says), "\(text.debugDescription): \(error)")
        }
    }

    @Test func aBoundOnSeries() {
        let text = (0..<100).map { "m{i=\"\($0)\"} 1\n" }.joined()
        #expect(throws: X.ParseError.self) { _ = try X.parse(Array(text.utf8), maxSeries: 99) }
        #expect((try? X.parse(Array(text.utf8), maxSeries: 100))?.sampleCount == 100)
    }

    @Test func garbageIsAnErrorNeverATrap() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("a_{}=\",# \n\\1.eE+-InfNaN\t:".utf8)
        for _ in 0..<2000 {
            let bytes = (0..<Int.random(in: 0..<80, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            _ = try? X.parse(bytes)
            _ = try? X.parse(bytes, format: .openMetrics)
        }
        _ = try? X.parse([0xff, 0xfe, 0x00, 0x0a])
    }

    /// Every line of a real node_exporter's /metrics: each sample line is one
    /// sample, each # TYPE one typed family, and the values are the same
    /// numbers (Go's formatting read back).
    @Test(.startsProcesses) func everyLineOfARealNodeExporter() throws {
        let exe = "/usr/bin/prometheus-node-exporter"
        try #require(FileManager.default.isExecutableFile(atPath: exe), "apt-get install prometheus-node-exporter")
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("# HELP cron_last_run_seconds When the job last ran.\n# TYPE cron_last_run_seconds gauge\ncron_last_run_seconds{job=\"back\\\\up\",note=\"a \\\"quoted\\\" word\"} 1.7e9\n",
                          to: dir + "/cron.prom")
        let listener = try TCPListener(listening: false)
        let port = listener.port
        listener.close()
        let process = try TestEnv.start(exe, ["--web.listen-address=127.0.0.1:\(port)", "--collector.textfile.directory=\(dir)"])
        defer { process.signal(SIGKILL); _ = process.wait(timeout: 10) }
        var body = ""
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            // HTTP/1.0: the body as it is, never chunked.
            if let raw = try? TestEnv.http(port: port, Array("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)) {
                let reply = TestEnv.parts(ofReply: raw)
                if reply.status == 200 { body = reply.body; break }
            }
            usleep(100_000)
        }
        try #require(!body.isEmpty, "node_exporter did not answer")
        let x = try X.parse(Array(body.utf8))
        let lines = body.split(separator: "\n")
        let sampleLines = lines.filter { !$0.hasPrefix("#") }
        #expect(x.sampleCount == sampleLines.count)
        #expect(x.families.filter { $0.type != .untyped }.count == lines.filter { $0.hasPrefix("# TYPE ") && !$0.hasSuffix(" untyped") }.count)
        // Each value, read back from its line by Double(), is the sample's.
        let all = x.families.flatMap(\.samples)
        for (line, sample) in zip(sampleLines, all) {
            let text = line.split(separator: " ").last.map(String.init) ?? ""
            let expected = Double(text) ?? (text == "+Inf" ? .infinity : text == "-Inf" ? -.infinity : .nan)
            #expect(sample.value == expected || (sample.value.isNaN && expected.isNaN), "\(line)")
        }
        let cron = try #require(x.families.first { $0.name == "cron_last_run_seconds" })
        #expect(cron.type == .gauge && cron.samples.first?.labels == [X.Label(name: "job", value: "back\\up"),
                                                                      X.Label(name: "note", value: "a \"quoted\" word")])
        #expect(x.families.contains { $0.name == "node_textfile_scrape_error" })
    }
}
