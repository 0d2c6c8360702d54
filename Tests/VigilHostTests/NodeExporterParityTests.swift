import Foundation
import Synchronization
import Testing
import VigilForeign

/// `manifests/node-exporter.yaml`, the stand-in for node_exporter, beside
/// Debian's prometheus-node-exporter itself on the same machine at the same
/// moment: every family node_exporter serves here (but its own
/// `node_exporter_*`, `node_scrape_*`, `go_*`, `process_*`, `promhttp_*`)
/// is served by the stand-in with the same label sets, the same type, and
/// values that agree.
///
/// How values are compared: node_exporter is scraped, then 1.2 s later the
/// stand-in and node_exporter again, together (within 100 ms). The
/// stand-in polls every second, so its value was read between the two
/// node_exporter scrapes: it must lie between them, give or take 1 %
/// (gauges and counters alike: a counter can only have moved as much as the
/// host's activity in that time moved it). Info gauges must be identical.
/// Families whose value moves by more than that in a moment are listed in
/// `slack` with the reason.
@Suite(.serialized, .startsProcesses, .offThePool) struct NodeExporterParityTests {
    static let nodeExporter = "/usr/bin/prometheus-node-exporter"
    static let ownFamilies = ["node_exporter_", "node_scrape_", "go_", "process_", "promhttp_"]

    /// Families node_exporter serves that the stand-in does not, and why;
    /// nothing else may be missing.
    static let absent: [String: String] = [:]

    /// The textfile directory both read: a gauge with escaped labels, an
    /// untyped counter without help, a histogram and a summary kept whole,
    /// and a file still being written (no newline at its end), which both
    /// skip and count as node_textfile_scrape_error.
    static func writeTextfiles(in dir: String) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try TestEnv.write(#"""
            # HELP backup_last_success_seconds When the backup last succeeded.
            # TYPE backup_last_success_seconds gauge
            backup_last_success_seconds{job="nightly",path="C:\\backups\\db",note="say \"hi\"\nbye"} 1.7959e+09
            backup_runs_total 42
            # HELP backup_duration_seconds How long backups took.
            # TYPE backup_duration_seconds histogram
            backup_duration_seconds_bucket{le="60"} 3
            backup_duration_seconds_bucket{le="600"} 40
            backup_duration_seconds_bucket{le="+Inf"} 42
            backup_duration_seconds_sum 9876.5
            backup_duration_seconds_count 42
            # TYPE backup_size_bytes summary
            backup_size_bytes{quantile="0.5"} 1.2e+09
            backup_size_bytes{quantile="0.99"} 3.4e+09
            backup_size_bytes_sum 5.6e+10
            backup_size_bytes_count 42

            """#, to: dir + "/backup.prom")
        try TestEnv.write("half_written_metric{a=\"b\"} 1", to: dir + "/partial.prom")
        // One series in two files: node_exporter serves the first file's
        // (and logs the second), and the rest of the second file.
        try TestEnv.write("backup_dup{a=\"1\"} 1\nbackup_only_a 1\n", to: dir + "/backup_dup_a.prom")
        try TestEnv.write("backup_dup{a=\"1\"} 2\nbackup_only_b 2\n", to: dir + "/backup_dup_b.prom")
    }

    /// Families whose value may move by more than 1 % between two
    /// scrapes a second apart, and the absolute slack allowed beyond the
    /// two node_exporter values.
    static let slack: [String: (Double, String)] = [
        "node_procs_running": (16, "runnable tasks at one instant; the test suite runs beside it"),
        "node_procs_blocked": (16, "tasks in uninterruptible sleep at one instant"),
        "node_disk_io_now": (16, "requests in flight at one instant; the tests beside it write"),
        "node_load1": (1, "the kernel's average moves every 5 s, by up to a twelfth of its distance from the runnable tasks, and the poll is up to a second older than the scrape"),
        "node_load5": (0.25, "moves every 5 s by up to a sixtieth of its distance from the runnable tasks"),
        "node_time_seconds": (2, "the wall clock at the moment of the poll, which is up to 1 s before the scrape"),
        "node_entropy_available_bits": (256, "the kernel's estimate moves with every read of /dev/random"),
        "node_timex_offset_seconds": (0.01, "adjtimex' offset at the moment of the call"),
        "node_timex_estimated_error_seconds": (0.01, "adjtimex' estimate at the moment of the call"),
        "node_timex_maxerror_seconds": (0.01, "grows by 500 ppm a second between NTP updates"),
        "node_sockstat_TCP_inuse": (32, "sockets of the tests running beside it"),
        "node_sockstat_TCP_alloc": (32, "sockets of the tests running beside it"),
        "node_sockstat_TCP_tw": (64, "connections in TIME_WAIT come and go with the tests beside it"),
        "node_sockstat_TCP_orphan": (16, "sockets of the tests running beside it"),
        "node_sockstat_TCP6_inuse": (32, "sockets of the tests running beside it"),
        "node_sockstat_UDP_inuse": (16, "sockets of the tests running beside it"),
        "node_sockstat_UDP6_inuse": (16, "sockets of the tests running beside it"),
        "node_sockstat_sockets_used": (64, "sockets of the tests running beside it"),
        "node_sockstat_TCP_mem": (256, "pages of socket buffers at one instant"),
        "node_sockstat_TCP_mem_bytes": (1_048_576, "bytes of socket buffers at one instant"),
        "node_sockstat_UDP_mem": (256, "pages of socket buffers at one instant"),
        "node_sockstat_UDP_mem_bytes": (1_048_576, "bytes of socket buffers at one instant"),
        "node_netstat_Tcp_CurrEstab": (32, "connections of the tests running beside it"),
        "node_filefd_allocated": (512, "open files of the tests running beside it"),
        "node_nf_conntrack_entries": (64, "connections of the tests running beside it"),
        "node_udp_queues": (1_048_576, "bytes queued at one instant"),
        "node_arp_entries": (2, "neighbours come and go"),
        "node_memory_Committed_AS_bytes": (1_073_741_824, "the commit charge moves with every mapping a compiler or linker beside it makes (270 MB in a second seen while CI builds)"),
    ]

    /// node_memory_* moves with every test's allocations: 64 MiB of slack.
    static func slack(for family: String) -> Double {
        if let (value, _) = slack[family] { return value }
        if family.hasPrefix("node_memory_") && family.hasSuffix("_bytes") { return 64 * 1_048_576 }
        if family.hasPrefix("node_memory_") { return 64 }  // HugePages_* counts
        if family.hasPrefix("node_pressure_") { return 0.5 }  // seconds of stall, moving with the suite
        return 0
    }

    /// One exposition: per family its type and its series (labels → value).
    struct Exposition {
        var types: [String: String] = [:]
        var series: [String: [String: Double]] = [:]

        init(_ text: String) {
            for line in text.split(separator: "\n") {
                if line.hasPrefix("# TYPE ") {
                    let parts = line.split(separator: " ")
                    if parts.count == 4 { types[String(parts[2])] = String(parts[3]) }
                    continue
                }
                if line.hasPrefix("#") { continue }
                guard let (name, labels, value) = Self.sample(line) else { continue }
                series[name, default: [:]][labels] = value
            }
        }

        /// `name{a="x",b="y"} value` → name, the labels sorted and joined, the value.
        static func sample(_ line: Substring) -> (String, String, Double)? {
            let chars = Array(line.utf8)
            var i = 0
            while i < chars.count, chars[i] != UInt8(ascii: "{"), chars[i] != UInt8(ascii: " ") { i += 1 }
            let name = String(decoding: chars[..<i], as: UTF8.self)
            var labels: [String] = []
            if i < chars.count, chars[i] == UInt8(ascii: "{") {
                i += 1
                while i < chars.count, chars[i] != UInt8(ascii: "}") {
                    var key: [UInt8] = []
                    while i < chars.count, chars[i] != UInt8(ascii: "=") { key.append(chars[i]); i += 1 }
                    i += 2  // ="
                    var value: [UInt8] = []
                    while i < chars.count, chars[i] != UInt8(ascii: "\"") {
                        if chars[i] == UInt8(ascii: "\\"), i + 1 < chars.count {
                            value.append(chars[i]); i += 1
                        }
                        value.append(chars[i]); i += 1
                    }
                    i += 1  // closing quote
                    if i < chars.count, chars[i] == UInt8(ascii: ",") { i += 1 }
                    labels.append(String(decoding: key, as: UTF8.self) + "=" + String(decoding: value, as: UTF8.self))
                }
                i += 1
            }
            let rest = String(decoding: chars[min(i, chars.count)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)
            let valueText = rest.split(separator: " ").first.map(String.init) ?? ""
            let value: Double? = switch valueText {
            case "+Inf": .infinity
            case "-Inf": -.infinity
            case "NaN": .nan
            default: Double(valueText)
            }
            guard let value else { return nil }
            return (name, labels.sorted().joined(separator: ","), value)
        }

        /// The family a sample name belongs to.
        func family(of sample: String) -> String { sample }
    }

    /// The whole exposition at 127.0.0.1:`port` (HTTP/1.0: no chunks, no gzip).
    static func scrape(_ port: Int) throws -> String {
        let reply = try TestEnv.http(port: port, Array("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8))
        let parts = TestEnv.parts(ofReply: reply)
        guard parts.status == 200 else { throw TestFailure("127.0.0.1:\(port)/metrics answered \(parts.status): \(parts.head)") }
        return parts.body
    }

    /// node_exporter and the stand-in, each on a free port of loopback.
    final class Pair {
        let dir: String
        let nePort: Int
        let vigilPort: Int
        let exporter: RunningProcess
        let standIn: RunningProcess
        private var stopped = false

        init(_ tag: String) throws {
            try #require(FileManager.default.isExecutableFile(atPath: NodeExporterParityTests.nodeExporter),
                         "prometheus-node-exporter is not installed (scripts/test-deps installs it)")
            dir = try TestEnv.tempDir(tag)
            nePort = try ControlTCPRunTests.freePort()
            vigilPort = try ControlTCPRunTests.freePort()
            let textfiles = dir + "/textfile"
            try NodeExporterParityTests.writeTextfiles(in: textfiles)
            exporter = try TestEnv.start(NodeExporterParityTests.nodeExporter, ["--web.listen-address=127.0.0.1:\(nePort)",
                                                                                "--collector.textfile.directory=\(textfiles)"])
            standIn = try TestEnv.start(TestEnv.vigil, ["run", TestEnv.repoRoot + "/manifests/node-exporter.yaml",
                                                        "--control", "unix:\(dir)/vigil.sock", "--for", "300s"],
                                        environment: ["VIGIL_NODE_EXPORTER_LISTEN": "tcp://127.0.0.1:\(vigilPort)",
                                                      "VIGIL_NODE_EXPORTER_SELF_METRICS": "true",
                                                      "VIGIL_NODE_EXPORTER_TEXTFILE_DIR": textfiles])
            let (ne, vigil) = (nePort, vigilPort)
            guard SinkRunTests.waitUntil(30, {
                (try? NodeExporterParityTests.scrape(ne)).map { $0.contains("node_load1") } == true
                    && (try? NodeExporterParityTests.scrape(vigil)).map { $0.contains("node_load1") && $0.contains("node_network_receive_bytes_total") } == true
            }) else {
                throw TestFailure("not both serving: vigil says \(stop().stderr)")
            }
        }

        @discardableResult
        func stop() -> TestEnv.Output {
            if !stopped {
                exporter.signal(SIGTERM)
                _ = exporter.wait(timeout: 10)
            }
            stopped = true
            standIn.signal(SIGTERM)
            return standIn.wait(timeout: 30)
        }

        deinit { if !stopped { stop() } }
    }

    @Test func theStandInServesEveryFamilyNodeExporterDoesWithTheSameLabelsAndValues() throws {
        let pair = try Pair("node-parity")
        let (nePort, vigilPort) = (pair.nePort, pair.vigilPort)
        // Every monitor polled more than once, so that every counter is current.
        Thread.sleep(forTimeInterval: 2.5)

        // node_exporter every 200 ms over the 1.2 s before the pair of
        // scrapes: the stand-in's values were read at one moment of it, and
        // what moves with the rest of the suite (memory, when other tests
        // start and end processes) can rise and fall within it.
        var earlier: [Exposition] = []
        for _ in 0..<6 {
            earlier.append(Exposition(try Self.scrape(nePort)))
            Thread.sleep(forTimeInterval: 0.2)
        }
        // The stand-in and node_exporter together: both scrapes start within a few ms.
        let both = Mutex<(String?, String?, Double, Double)>((nil, nil, 0, 0))
        DispatchQueue.concurrentPerform(iterations: 2) { i in
            let start = Date().timeIntervalSince1970
            let body = try? Self.scrape(i == 0 ? vigilPort : nePort)
            both.withLock { if i == 0 { $0.0 = body; $0.2 = start } else { $0.1 = body; $0.3 = start } }
        }
        let (vigilText, neText, vigilStart, neStart) = both.withLock { $0 }
        #expect(abs(vigilStart - neStart) < 0.1, "the two scrapes started \(abs(vigilStart - neStart)) s apart")
        let vigil = Exposition(try #require(vigilText))
        let after = Exposition(try #require(neText))

        var missingFamilies: [String] = []
        var missingSeries: [String] = []
        var wrongTypes: [String] = []
        var disagreeing: [String] = []
        var compared = 0
        for (family, type) in after.types.sorted(by: { $0.key < $1.key }) {
            guard !Self.ownFamilies.contains(where: { family.hasPrefix($0) }), Self.absent[family] == nil else { continue }
            guard let got = vigil.types[family] else {
                missingFamilies.append(family)
                continue
            }
            if got != type { wrongTypes.append("\(family): \(got), node_exporter \(type)") }
            let theirs = after.series[family] ?? [:]
            let ours = vigil.series[family] ?? [:]
            for (labels, value) in theirs.sorted(by: { $0.key < $1.key }) {
                guard let mine = ours[labels] else {
                    missingSeries.append("\(family){\(labels)} (the stand-in has: \(ours.keys.sorted().prefix(3).joined(separator: " | ")))")
                    continue
                }
                compared += 1
                let seen = earlier.compactMap { $0.series[family]?[labels] } + [value]
                let low = seen.min() ?? value, high = seen.max() ?? value
                let tolerance = 0.01 * max(abs(low), abs(high)) + Self.slack(for: family)
                if family.hasSuffix("_info") {
                    if mine != value { disagreeing.append("\(family){\(labels)}: \(mine), node_exporter \(value)") }
                } else if !(mine >= low - tolerance && mine <= high + tolerance) && !(mine.isNaN && value.isNaN) {
                    disagreeing.append("\(family){\(labels)}: \(mine), node_exporter from \(low) to \(high) over 1.2 s")
                }
            }
        }
        #expect(missingFamilies.isEmpty, "families node_exporter serves and the stand-in does not:\n\(missingFamilies.joined(separator: "\n"))")
        #expect(missingSeries.isEmpty, "series without their twin:\n\(missingSeries.joined(separator: "\n"))")
        #expect(wrongTypes.isEmpty, "types that differ:\n\(wrongTypes.joined(separator: "\n"))")
        #expect(disagreeing.isEmpty, "values that disagree (of \(compared)):\n\(disagreeing.joined(separator: "\n"))")
        #expect(compared > 200, "only \(compared) series compared")

        // The textfile collector's families, sample by sample as both serve
        // them (histogram and summary kept whole, labels unescaped alike),
        // read with the one reader of the format.
        func textfileSamples(_ text: String) throws -> [String] {
            let x = try PrometheusExposition.parse(Array(text.utf8))
            return x.families.filter { $0.name.hasPrefix("backup_") || $0.name.hasPrefix("node_textfile_") || $0.name.hasPrefix("half_") }
                .flatMap { family in
                    family.samples.map { "\(family.name) \(family.type) \(family.help ?? "") \($0.name)\($0.labels.map { "\($0.name)=\($0.value)" }) \($0.value)" }
                }.sorted()
        }
        let ourTextfile = try textfileSamples(try #require(vigilText))
        let theirTextfile = try textfileSamples(try #require(neText))
        #expect(ourTextfile == theirTextfile, "ours only: \(Set(ourTextfile).subtracting(theirTextfile))\ntheirs only: \(Set(theirTextfile).subtracting(ourTextfile))")
        #expect(ourTextfile.count == 18, "\(ourTextfile)")  // backup.prom 13, the two backup_dup files 3 series and 2 mtimes
        #expect(ourTextfile.contains("node_textfile_scrape_error gauge 1 if there was an error opening or reading a file, 0 otherwise node_textfile_scrape_error[] 1.0"),
                "\(ourTextfile)")

        // The host's own figures ride along (self_metrics, asked for here), so one scrape job is enough.
        #expect(vigil.types["vigil_events_sequenced_total"] == "counter")

        // Prometheus' own linter finds nothing wrong with the exposition
        // but what it finds wrong with node_exporter's names themselves
        // (`node_memory_MemTotal_bytes` is not snake_case; bits are not bytes).
        if let promtool = PrometheusRunTests.tool("promtool") {
            try TestEnv.write(try #require(vigilText), to: pair.dir + "/standin.prom")
            try TestEnv.write(try #require(neText), to: pair.dir + "/node_exporter.prom")
            func lint(_ file: String) throws -> (status: Int32, complaints: Set<String>) {
                let run = try TestEnv.run("/bin/sh", ["-c", "\(promtool) check metrics < \(pair.dir)/\(file)"], timeout: 60)
                return (run.status, Set((run.stdout + run.stderr).split(separator: "\n").map(String.init)))
            }
            let ours = try lint("standin.prom"), theirs = try lint("node_exporter.prom")
            let own = ours.complaints.subtracting(theirs.complaints)
            #expect(own.isEmpty, "promtool on the stand-in, beyond what it says of node_exporter's names:\n\(own.sorted().joined(separator: "\n"))")
            #expect(!ours.complaints.contains { $0.contains("error while linting") || $0.contains("parse") })
        } else {
            Issue.record("promtool is not installed (apt-get install prometheus; scripts/test-deps installs it)")
        }
        let out = pair.stop()
        #expect(out.status == 0, "\(out.stderr)")
    }

    /// Debian's Prometheus scrapes both every second for 30 s: no scrape of
    /// the stand-in fails, and the rate of the traffic counters is the same
    /// figure from both targets within 5 %, while a steady stream of
    /// datagrams goes out of the default route's interface.
    @Test func prometheusScrapesBothAndTheRatesAgree() throws {
        let prometheus = try #require(PrometheusRunTests.tool("prometheus"),
                                      "prometheus is not installed (apt-get install prometheus; scripts/test-deps installs it)")
        let pair = try Pair("node-prom")
        let webPort = try ControlTCPRunTests.freePort()
        try TestEnv.write("""
        global: { scrape_interval: 1s, evaluation_interval: 1s }
        scrape_configs:
          - job_name: node_exporter
            static_configs: [{ targets: ["127.0.0.1:\(pair.nePort)"] }]
          - job_name: vigil
            static_configs: [{ targets: ["127.0.0.1:\(pair.vigilPort)"] }]
        """, to: pair.dir + "/prometheus.yml")
        let server = try TestEnv.start(prometheus, ["--config.file=\(pair.dir)/prometheus.yml", "--storage.tsdb.path=\(pair.dir)/tsdb",
                                                    "--web.listen-address=127.0.0.1:\(webPort)", "--log.level=warn"])
        defer {
            server.signal(SIGTERM)
            _ = server.wait(timeout: 30)
        }
        func query(_ q: String) -> [[String: Any]] { PrometheusRunTests.query(port: webPort, q) }
        func values(_ q: String) -> [String: Double] {
            var out: [String: Double] = [:]
            for r in query(q) {
                let job = (r["metric"] as? [String: String])?["job"] ?? ""
                if let text = (r["value"] as? [Any])?.last as? String, let v = Double(text) { out[job] = v }
            }
            return out
        }
        #expect(SinkRunTests.waitUntil(60) { values("up").count == 2 && values("up").values.allSatisfy { $0 == 1 } },
                "Prometheus never scraped both: \(query("up"))")

        // Datagrams out of the default route's interface, 200 a second, for the window.
        let route = (try? String(contentsOfFile: "/proc/net/route", encoding: .utf8)) ?? ""
        let defaultRoute = route.split(separator: "\n").map { $0.split(separator: "\t") }.first { $0.count > 2 && $0[1] == "00000000" }
        let device = defaultRoute.map { String($0[0]) }
        let gateway = defaultRoute.flatMap { UInt32($0[2], radix: 16) }.map { g in (0..<4).map { String((g >> (8 * $0)) & 0xff) }.joined(separator: ".") }
        let sending = Atomic<Bool>(true)
        let sender = Thread {
            guard let gateway else { return }
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(9).bigEndian  // discard
            inet_pton(AF_INET, gateway, &address.sin_addr)
            let payload = [UInt8](repeating: 0x56, count: 1000)
            while sending.load(ordering: .relaxed) {
                _ = withUnsafePointer(to: &address) { a in
                    a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, payload, payload.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                usleep(5_000)
            }
        }
        sender.start()
        defer { sending.store(false, ordering: .relaxed) }
        Thread.sleep(forTimeInterval: 32)

        // Every scrape of the last 30 s succeeded: 30 samples of up, all 1.
        let scrapes = values("count_over_time(up[30s])")
        let worst = values("min_over_time(up[30s])")
        #expect((scrapes["vigil"] ?? 0) >= 28 && worst["vigil"] == 1, "vigil: \(scrapes) scrapes, min up \(worst)")
        #expect(worst["node_exporter"] == 1, "node_exporter: min up \(worst)")
        // The rates, from both targets at the same evaluation.
        for direction in ["receive", "transmit"] {
            let filter = device.map { "{device=\"\($0)\"}" } ?? ""
            let rates = values("sum by (job) (rate(node_network_\(direction)_bytes_total\(filter)[10s]))")
            let (theirs, ours) = (rates["node_exporter"] ?? -1, rates["vigil"] ?? -1)
            let agree = abs(ours - theirs) <= 0.05 * max(abs(theirs), abs(ours)) || max(abs(theirs), abs(ours)) < 1
            #expect(theirs >= 0 && ours >= 0 && agree, "\(direction) bytes/s on \(device ?? "all"): vigil \(ours), node_exporter \(theirs)")
            if direction == "transmit" && gateway != nil { #expect(ours > 100_000, "the datagrams sent are not counted: \(ours) B/s") }
        }
        sending.store(false, ordering: .relaxed)
        let out = pair.stop()
        #expect(out.status == 0, "\(out.stderr)")
    }
}
