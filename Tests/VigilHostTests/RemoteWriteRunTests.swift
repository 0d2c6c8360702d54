import Foundation
import Synchronization
import Testing
import VigilForeign
@testable import VigilIsolation
@testable import VigilSinks

/// The `remote_write` sink through the real binary, against Debian's
/// VictoriaMetrics and Prometheus' own receiver started here on loopback:
/// 10,000 series at 1 s for 60 s arrive with every sample, named and
/// valued as the `prometheus` sink serves them, and a query gives them
/// back; a receiver away for 20 s costs nothing behind a disk buffer and
/// is counted without one; a refusal is counted `rejected`; series that go
/// away end with the stale marker; retries wait as a receiver asks, and
/// the credentials go with every request.
@Suite(.startsProcesses, .offThePool) struct RemoteWriteRunTests {
    /// A receiver on loopback, stopped by `stop`.
    final class Receiver: @unchecked Sendable {  // used by its test's thread only
        let port: Int
        let dir: String
        let program: String
        let arguments: [String]
        var process: RunningProcess?

        /// VictoriaMetrics, its data in `dir`; a restart keeps it and the port.
        static func victoriaMetrics(_ dir: String, _ extra: [String] = []) throws -> Receiver {
            let vm = try #require(PrometheusRunTests.tool("victoria-metrics"), "no victoria-metrics: scripts/test-deps installs it")
            let port = try ControlTCPRunTests.freePort()
            let r = Receiver(port: port, dir: dir, program: vm,
                             arguments: ["-storageDataPath=\(dir)/vm", "-httpListenAddr=127.0.0.1:\(port)", "-loggerLevel=ERROR",
                                         "-search.latencyOffset=0s", "-search.disableCache"] + extra)
            try r.start()
            return r
        }

        /// Prometheus with its remote write receiver (or without, `receiver: false`).
        static func prometheus(_ dir: String, receiver: Bool = true) throws -> Receiver {
            let prometheus = try #require(PrometheusRunTests.tool("prometheus"), "no prometheus: scripts/test-deps installs it")
            let port = try ControlTCPRunTests.freePort()
            try TestEnv.write("global: { scrape_interval: 1h }\n", to: dir + "/prometheus.yml")
            let r = Receiver(port: port, dir: dir, program: prometheus,
                             arguments: ["--config.file=\(dir)/prometheus.yml", "--storage.tsdb.path=\(dir)/tsdb",
                                         "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn"]
                                 + (receiver ? ["--web.enable-remote-write-receiver"] : []))
            try r.start()
            return r
        }

        init(port: Int, dir: String, program: String, arguments: [String]) {
            self.port = port
            self.dir = dir
            self.program = program
            self.arguments = arguments
        }

        var isVictoriaMetrics: Bool { program.hasSuffix("victoria-metrics") }

        func start() throws {
            process = try TestEnv.start(program, arguments)
            let ready = isVictoriaMetrics ? "/health" : "/-/ready"
            guard SinkRunTests.waitUntil(60, { (try? TestEnv.httpGet(port: port, ready))?.status == 200 }) else {
                throw TestFailure("\(program) did not come up on port \(port): \(process?.wait(timeout: 5).stderr ?? "")")
            }
        }

        func stop(_ signal: Int32 = SIGTERM) {
            process?.signal(signal)
            _ = process?.wait(timeout: 60)
            process = nil
        }

        var url: String { "http://127.0.0.1:\(port)/api/v1/write" }

        /// `GET path` as HTTP/1.0: the whole body, however long (no chunks).
        func get(_ path: String) throws -> String {
            let fd = try Sockets.connect(.tcp(host: "127.0.0.1", port: UInt16(port)))
            defer { close(fd) }
            let reply = try TestEnv.exchange(fd, Array("GET \(path) HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8), stopReadingAfter: 120,
                                             what: "127.0.0.1:\(port)", sendMayFail: false)
            let parts = TestEnv.parts(ofReply: reply)
            guard parts.status == 200 else { throw TestFailure("GET \(path): \(parts.status) \(parts.body.prefix(300))") }
            return parts.body
        }

        /// Every stored sample of the series `selector` matches, by series
        /// (its labels), in time order: VictoriaMetrics' /api/v1/export, or
        /// a Prometheus range selector over the last `span`. Stale markers left out.
        func samples(_ selector: String, span: String = "10m") throws -> [[String: String]: [(time: Int64, value: Double)]] {
            var out: [[String: String]: [(time: Int64, value: Double)]] = [:]
            if isVictoriaMetrics {
                _ = try? TestEnv.httpGet(port: port, "/internal/force_flush")
                let body = try get("/api/v1/export?match[]=" + Self.encoded(selector))
                for line in body.split(separator: "\n") {
                    // A stale marker is exported as a bare NaN, which JSON has not.
                    let line = line.replacingOccurrences(of: "NaN", with: "null")
                    guard let json = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                          let metric = json["metric"] as? [String: String],
                          let times = json["timestamps"] as? [Any], let values = json["values"] as? [Any] else { continue }
                    var points: [(Int64, Double)] = out[metric] ?? []
                    for (t, v) in zip(times, values) {
                        guard let time = (t as? NSNumber)?.int64Value, let value = (v as? NSNumber)?.doubleValue, !value.isNaN else { continue }
                        points.append((time, value))
                    }
                    out[metric] = points.sorted { $0.0 < $1.0 }
                }
            } else {
                let body = try get("/api/v1/query?query=" + Self.encoded("\(selector)[\(span)]"))
                let json = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
                let result = (json?["data"] as? [String: Any])?["result"] as? [[String: Any]] ?? []
                for series in result {
                    guard let metric = series["metric"] as? [String: String] else { continue }
                    out[metric] = (series["values"] as? [[Any]] ?? []).compactMap { pair in
                        guard pair.count == 2, let t = (pair[0] as? NSNumber)?.doubleValue,
                              let v = (pair[1] as? String).flatMap(Double.init) else { return nil }
                        return (Int64((t * 1000).rounded()), v)
                    }
                }
            }
            return out
        }

        static func encoded(_ text: String) -> String {
            text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
        }
    }

    /// The events a file sink wrote.
    static func events(_ path: String) -> [[String: Any]] {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
    }

    /// Milliseconds since the epoch of a file sink's time (RFC 3339, nine digits).
    static func milliseconds(_ event: [String: Any]) -> Int64 {
        Int64((OTLPRunTests.nanoseconds(event["time"] as? String ?? "") ?? 0) / 1_000_000)
    }

    static func summary(_ path: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path)))) as? [String: Any] ?? [:]
    }

    /// Per flood series (entity, field), the samples its events make: (ms, value).
    static func expected(_ events: [[String: Any]], fields: Int) -> [String: [(time: Int64, value: Double)]] {
        var out: [String: [(time: Int64, value: Double)]] = [:]
        for event in events where event["monitor"] as? String == "flood" {
            guard let f = event["fields"] as? [String: Any], let entity = f["entity"] as? Int else { continue }
            let time = milliseconds(event)
            for k in 0..<fields {
                guard let v = (f["v\(k)"] as? NSNumber)?.doubleValue else { continue }
                out["\(entity)/v\(k)", default: []].append((time, v))
            }
        }
        return out
    }

    /// The key `expected` uses for a stored series of the flood (its
    /// name ends in the field's, its `entity` label).
    static func key(_ metric: [String: String]) -> String? {
        guard let name = metric["__name__"], let entity = metric["entity"], let v = name.split(separator: "_").last, v.hasPrefix("v") else { return nil }
        return "\(entity)/\(v)"
    }

    /// 10,000 series (1,000 entities of 10 fields) at 1 s for 60 s, to
    /// VictoriaMetrics and to Prometheus at once: each has every sample of
    /// every event the file sink wrote, at its event's time, with its
    /// value, under the names and labels the prometheus sink serves (its
    /// scrape at the end is the reference); a query_range gives them back.
    @Test func tenThousandSeriesAtOneSecondArriveWithEverySample() throws {
        let dir = try TestEnv.tempDir("rw-10k")
        let vm = try Receiver.victoriaMetrics(dir)
        defer { vm.stop() }
        let prom = try Receiver.prometheus(dir)
        defer { prom.stop() }
        let scrapePort = try ControlTCPRunTests.freePort()
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        host: rw-box
        monitors:
          flood: { plugin: flood, isolation: none, options: { count: 60000, rate: 1000, fields: 10, entities: 1000 } }
          beat: { plugin: heartbeat, interval: 1s, isolation: none }   # keeps the run going once the flood is done
        sinks:
          file: { type: file, path: \(dir)/events.jsonl, match: [flood] }
          scrape: { type: prometheus, listen: "tcp://127.0.0.1:\(scrapePort)", match: [flood] }
          vm: { type: remote_write, url: "\(vm.url)", match: [flood], external_labels: { fleet: test } }
          prom: { type: remote_write, url: "\(prom.url)", match: [flood], external_labels: { fleet: test } }
        """, to: dir + "/vigil.yaml")
        let run = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "66s", "--control", "none",
                                                    "--summary", dir + "/summary.json"])
        // The prometheus sink's series once the flood is done: the reference.
        Thread.sleep(forTimeInterval: 63)
        let scrape = try TestEnv.httpGet(port: scrapePort, "/metrics").body
        let output = run.wait(timeout: 120)
        #expect(output.status == 0, "\(output.stderr.suffix(3000))")
        #expect(output.stderr.contains("none lost"), "\(output.stderr.suffix(3000))")
        let events = Self.events(dir + "/events.jsonl")
        #expect(events.count == 60_000)
        let expected = Self.expected(events, fields: 10)
        #expect(expected.count == 10_000)
        // name{labels} value, as the prometheus sink served them.
        let served = try PrometheusExposition.parse(Array(scrape.utf8)).families.flatMap(\.samples)
        #expect(served.count == 10_000, "\(served.count) series scraped")
        let summary = Self.summary(dir + "/summary.json")
        for receiver in [vm, prom] {
            let what = receiver.isVictoriaMetrics ? "victoria-metrics" : "prometheus"
            let stored = try receiver.samples("{fleet=\"test\"}")
            #expect(stored.count == 10_000, "\(what): \(stored.count) series")
            // Every series the prometheus sink served, under the same name
            // and labels (and the external one), its last value the one served.
            for sample in served.prefix(2_000) {
                var labels = Dictionary(uniqueKeysWithValues: sample.labels.map { ($0.name, $0.value) })
                labels["__name__"] = sample.name
                labels["fleet"] = "test"
                let points = stored[labels]
                #expect(points?.last?.value == sample.value, "\(what): \(labels) last \(String(describing: points?.last)), served \(sample.value)")
            }
            var missing = 0, wrong = 0, extra = 0
            for (labels, points) in stored {
                guard let key = Self.key(labels), let want = expected[key] else {
                    extra += points.count
                    continue
                }
                let got = Dictionary(points.map { ($0.time, $0.value) }, uniquingKeysWith: { a, _ in a })
                for sample in want {
                    if let value = got[sample.time] {
                        if value != sample.value { wrong += 1 }
                    } else {
                        missing += 1
                    }
                }
                extra += max(0, points.count - want.count)
            }
            #expect(missing == 0 && wrong == 0 && extra == 0, "\(what): \(missing) samples missing, \(wrong) wrong, \(extra) extra")
            let sink = OTLPRunTests.sink(summary, receiver.isVictoriaMetrics ? "vm" : "prom")
            let queue = sink["send_queue"] as? [String: Any] ?? [:]
            #expect(queue["samples_in"] as? Int == 600_000 && queue["samples_sent"] as? Int == 600_000, "\(what): \(queue)")
            #expect(queue["stale_markers"] as? Int == 10_000, "\(what): every series ended at exit: \(queue)")
        }
        // A query_range over one series gives its values back at its steps.
        let last = try #require(served.first)
        let selector = last.name + "{" + last.labels.map { "\($0.name)=\"\($0.value)\"" }.joined(separator: ",") + "}"
        var labels = Dictionary(uniqueKeysWithValues: last.labels.map { ($0.name, $0.value) })
        labels["__name__"] = last.name
        // Up to the series' last sample: its stale marker, a millisecond after, ends it.
        let lastTime = try #require(Self.key(labels).flatMap { expected[$0]?.last?.time })
        for receiver in [vm, prom] {
            let end = Double(lastTime) / 1000
            let body = try receiver.get("/api/v1/query_range?query=\(Receiver.encoded(selector))&start=\(end - 30)&end=\(end)&step=1")
            let json = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
            let result = (json?["data"] as? [String: Any])?["result"] as? [[String: Any]] ?? []
            let values = (result.first?["values"] as? [[Any]] ?? []).compactMap { ($0.last as? String).flatMap(Double.init) }
            #expect(values.count >= 29 && values.last == last.value, "\(receiver.program): \(body.prefix(500))")
        }
    }

    /// VictoriaMetrics stopped 20 s in the middle of a minute, then started
    /// again on its data: behind a disk buffer every sample arrives (and the
    /// ones sent twice are counted); without one, what the sink's queue
    /// could not hold is counted lost by reason and the run exits 3.
    @Test func aReceiverAwayTwentySecondsCostsNothingBehindADiskBufferAndIsCountedWithout() throws {
        let dir = try TestEnv.tempDir("rw-away")
        let vm = try Receiver.victoriaMetrics(dir)
        defer { vm.stop() }
        // The buffered sink as both runs have it: the second replays what the first left.
        let buffered = """
          buffered:
            type: remote_write
            url: "\(vm.url)"
            match: [flood]
            external_labels: { path: buffered }
            buffer: { type: disk, path: \(dir)/buffer }
        """
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        host: rw-box
        monitors:
          flood: { plugin: flood, isolation: none, options: { count: 0, rate: 1000, fields: 10, entities: 1000 } }
        sinks:
          file: { type: file, path: \(dir)/events.jsonl, match: [flood] }
        \(buffered)
          direct: { type: remote_write, url: "\(vm.url)", match: [flood], external_labels: { path: direct }, queue_size: 2000 }
        """, to: dir + "/vigil.yaml")
        let run = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "60s", "--control", "none",
                                                    "--summary", dir + "/summary.json"])
        Thread.sleep(forTimeInterval: 20)
        vm.stop()
        Thread.sleep(forTimeInterval: 20)
        try vm.start()
        let output = run.wait(timeout: 180)
        // The direct sink lost what its queue could not hold: exit status 3.
        #expect(output.status == 3, "\(output.stderr.suffix(3000))")
        let summary = Self.summary(dir + "/summary.json")
        let bufferedSink = OTLPRunTests.sink(summary, "buffered"), direct = OTLPRunTests.sink(summary, "direct")
        let bufferedLost = (bufferedSink["lost"] as? [String: Int] ?? [:]).values.reduce(0, +)
        let directLost = direct["lost"] as? [String: Int] ?? [:]
        #expect(bufferedLost == 0, "\(bufferedSink)")
        #expect((directLost["queue_full"] ?? 0) > 0, "\(direct)")
        let events = Self.events(dir + "/events.jsonl")
        let expected = Self.expected(events, fields: 10)
        // A loaded machine may end the run before the backlog is replayed
        // (98,770 samples were still on disk once, beside other floods): it
        // stays there, and the next start sends it, which is what it is for.
        let left = (bufferedSink["buffer"] as? [String: Any])?["buffered"] as? Int ?? 0
        if left > 0 {
            try TestEnv.write("""
            plugin_dirs: [\(try TestEnv.cPlugins())]
            host: rw-box
            monitors:
              beat: { plugin: heartbeat, isolation: none, interval: 1s }
            sinks:
            \(buffered)
            """, to: dir + "/replay.yaml")
            let replay = try TestEnv.run(TestEnv.vigil, ["run", dir + "/replay.yaml", "--for", "40s", "--control", "none",
                                                         "--summary", dir + "/replay.json"], timeout: 180)
            let after = OTLPRunTests.sink(Self.summary(dir + "/replay.json"), "buffered")
            #expect(replay.status == 0 && (after["buffer"] as? [String: Any])?["buffered"] as? Int == 0,
                    "\(left) events left on disk; the next start: \(after) \(replay.stderr.suffix(2000))")
        }
        // Behind the buffer: every sample of every event; the duplicates counted.
        let stored = try vm.samples("{path=\"buffered\"}")
        var missing = 0, duplicates = 0, wrong = 0
        for (labels, points) in stored {
            guard let key = Self.key(labels), let want = expected[key] else { continue }
            let got = Dictionary(points.map { ($0.time, $0.value) }, uniquingKeysWith: { a, _ in a })
            duplicates += points.count - got.count
            for sample in want {
                if let value = got[sample.time] { if value != sample.value { wrong += 1 } } else { missing += 1 }
            }
        }
        let total = expected.values.reduce(0) { $0 + $1.count }
        #expect(missing == 0 && wrong == 0, "buffered: \(missing) of \(total) samples missing, \(wrong) wrong")
        print("remote write behind a disk buffer, VictoriaMetrics away 20 s: \(total) samples, \(missing) missing, \(duplicates) stored twice")
        // Without: every sample is delivered or counted; VictoriaMetrics has those delivered.
        let queue = direct["send_queue"] as? [String: Any] ?? [:]
        let sent = queue["samples_sent"] as? Int ?? -1, made = queue["samples_in"] as? Int ?? -1
        let lostSamples = (queue["samples_lost"] as? [String: Int] ?? [:]).values.reduce(0, +)
        #expect(made == sent + lostSamples && queue["pending_samples"] as? Int == 0, "\(queue)")
        let directStored = try vm.samples("{path=\"direct\"}")
        let unique = directStored.values.reduce(0) { n, points in n + Set(points.map(\.time)).count }
        #expect(unique == sent, "direct: VictoriaMetrics holds \(unique) samples, the sink sent \(sent)")
        let written = direct["written"] as? Int ?? 0
        #expect(written * 10 == made, "direct: \(written) events written, \(made) samples made")
        #expect(output.stderr.contains("queue_full"), "\(output.stderr.suffix(2000))")
    }

    /// Events a disk buffer kept through a restart, of a monitor the new
    /// manifest no longer has, are mapped with the description they were
    /// emitted under: each entity its own series with every sample (without
    /// it the entities merged into one series and most samples were refused
    /// as out of order).
    @Test func aBufferReplayedAfterItsMonitorWentKeepsItsIdentities() throws {
        let dir = try TestEnv.tempDir("rw-replay")
        let closed = try ControlTCPRunTests.freePort()
        func manifest(url: String, flood: Bool) -> String {
            """
            plugin_dirs: [\(try! TestEnv.cPlugins())]
            monitors:
            \(flood ? "  flood: { plugin: flood, isolation: none, options: { count: 0, rate: 200, fields: 2, entities: 20 } }"
                     : "  beat: { plugin: heartbeat, isolation: none, interval: 1s }")
            sinks:
              file: { type: file, path: \(dir)/events.jsonl, match: [flood] }
              rw: { type: remote_write, url: "\(url)", match: [flood, beat], buffer: { type: disk, path: \(dir)/buffer } }
            """
        }
        // The receiver away: the flood's events wait in the buffer.
        try TestEnv.write(manifest(url: "http://127.0.0.1:\(closed)/api/v1/write", flood: true), to: dir + "/a.yaml")
        let first = try TestEnv.run(TestEnv.vigil, ["run", dir + "/a.yaml", "--for", "2s", "--control", "none", "--drain-timeout", "1s"],
                                    timeout: 60)
        #expect(FileManager.default.fileExists(atPath: dir + "/buffer/monitors.jsonl"), "\(first.stderr.suffix(2000))")
        let events = Self.events(dir + "/events.jsonl")
        let expected = Self.expected(events, fields: 2)
        #expect(expected.count == 40, "\(expected.count) series")
        // Then without the flood, the receiver there: the buffer is sent.
        let vm = try Receiver.victoriaMetrics(dir)
        defer { vm.stop() }
        try TestEnv.write(manifest(url: vm.url, flood: false), to: dir + "/b.yaml")
        let second = try TestEnv.run(TestEnv.vigil, ["run", dir + "/b.yaml", "--for", "4s", "--control", "none", "--summary", dir + "/summary.json"],
                                     timeout: 60)
        #expect(second.status == 0, "\(second.stderr.suffix(3000))")
        let sink = OTLPRunTests.sink(Self.summary(dir + "/summary.json"), "rw")
        let queue = sink["send_queue"] as? [String: Any] ?? [:]
        #expect((queue["samples_lost"] as? [String: Int] ?? [:]).values.reduce(0, +) == 0, "\(queue)")
        let stored = try vm.samples("{__name__=~\"vigil_flood_.*\"}")
        var missing = 0
        for (key, want) in expected {
            let got = stored.first { Self.key($0.key) == key }?.value ?? []
            let times = Set(got.map(\.time))
            missing += want.filter { !times.contains($0.time) }.count
        }
        #expect(stored.keys.compactMap(Self.key).count == 40, "\(stored.keys.map { $0["entity"] ?? "-" })")
        #expect(missing == 0, "\(missing) of \(expected.values.reduce(0) { $0 + $1.count }) samples missing")
    }

    /// Behind a disk buffer, an outage longer than `expire_after` ends no
    /// series of a monitor that runs on: its samples wait on disk, and a
    /// sweep that judged them by the last one delivered sent stale markers
    /// between a series' last sample before the outage and the backlog.
    @Test func anOutageBehindABufferEndsNoSeriesOfARunningMonitor() throws {
        let dir = try TestEnv.tempDir("rw-outage")
        let vm = try Receiver.victoriaMetrics(dir)
        defer { vm.stop() }
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          m: { plugin: flood, isolation: none, options: { count: 0, rate: 5, fields: 1, entities: 2 } }
        sinks:
          rw: { type: remote_write, url: "\(vm.url)", expire_after: 1s, stale_on_exit: false, queue: { batch_send_deadline: 100ms },
                buffer: { type: disk, path: \(dir)/buffer } }
        """, to: dir + "/vigil.yaml")
        let run = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "12s", "--control", "none",
                                                    "--summary", dir + "/summary.json"])
        Thread.sleep(forTimeInterval: 2)
        vm.stop()
        Thread.sleep(forTimeInterval: 5)
        try vm.start()
        let output = run.wait(timeout: 60)
        #expect(output.status == 0, "\(output.stderr.suffix(2000))")
        let queue = OTLPRunTests.sink(Self.summary(dir + "/summary.json"), "rw")["send_queue"] as? [String: Any] ?? [:]
        #expect(queue["stale_markers"] as? Int == 0 && (queue["samples_sent"] as? Int ?? 0) > 0, "\(queue)")
    }

    /// A receiver that refuses (a Prometheus without its remote write
    /// receiver answers 404): the requests are not retried, their samples
    /// and events counted lost (`rejected`), the answer's first line logged.
    @Test func aRefusalIsCountedRejectedAndNotRetried() throws {
        let dir = try TestEnv.tempDir("rw-refused")
        let prom = try Receiver.prometheus(dir, receiver: false)
        defer { prom.stop() }
        try Self.writeFloodManifest(dir, flood: "count: 300, rate: 1000, fields: 2, entities: 10", sinks: """
          prom: { type: remote_write, url: "\(prom.url)", queue: { batch_send_deadline: 100ms } }
        """)
        let output = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "2s", "--control", "none",
                                                     "--summary", dir + "/summary.json"], timeout: 60)
        #expect(output.status == 3, "\(output.stderr)")
        let sink = OTLPRunTests.sink(Self.summary(dir + "/summary.json"), "prom")
        #expect((sink["lost"] as? [String: Int])?["rejected"] == 300, "\(sink)")
        let queue = sink["send_queue"] as? [String: Any] ?? [:]
        #expect((queue["samples_lost"] as? [String: Int])?["rejected"] == 600 && queue["retries"] as? Int == 0, "\(queue)")
        #expect(output.stderr.contains("refused") && output.stderr.contains("remote write receiver needs to be enabled"), "\(output.stderr)")
    }

    /// The scripted receiver (Tests/Fixtures/remote_write/receiver.py) and its port.
    /// Writes `dir`/vigil.yaml: the C plugins, one flood monitor in the
    /// host's process with the options `flood`, and `sinks` (the lines under
    /// `sinks:`, indented by two).
    static func writeFloodManifest(_ dir: String, flood: String, sinks: String) throws {
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          flood: { plugin: flood, isolation: none, options: { \(flood) } }
        sinks:
        \(sinks)
        """, to: dir + "/vigil.yaml")
    }

    static func scripted(_ out: String, _ arguments: [String]) throws -> (RunningProcess, Int) {
        let receiver = try TestEnv.start("/usr/bin/python3", [TestEnv.fixture("remote_write/receiver.py"), out] + arguments)
        guard SinkRunTests.waitUntil(30, { FileManager.default.fileExists(atPath: out + ".port") }),
              let port = Int((try? String(contentsOfFile: out + ".port", encoding: .utf8)) ?? "") else {
            receiver.signal(SIGKILL)
            throw TestFailure("the receiver did not start: \(receiver.wait(timeout: 5).stderr)")
        }
        return (receiver, port)
    }

    /// A receiver whose host never answers a connection attempt: the stop
    /// takes the drain deadline, no more, and what the shards held is
    /// counted lost (shutdown), exit status 3, never "none lost".
    @Test func aReceiverThatNeverAnswersCostsTheDrainDeadlineAndIsCounted() throws {
        let dir = try TestEnv.tempDir("rw-never")
        let (receiver, port) = try Self.scripted(dir + "/r", ["--never-accept"])
        defer {
            receiver.signal(SIGKILL)
            _ = receiver.wait(timeout: 10)
        }
        try Self.writeFloodManifest(dir, flood: "count: 0, rate: 200, fields: 2, entities: 10", sinks: """
          rw: { type: remote_write, url: "http://127.0.0.1:\(port)/api/v1/write", queue: { batch_send_deadline: 100ms }, match: [flood] }
        """)
        let run = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--control", "none", "--drain-timeout", "2s",
                                                    "--summary", dir + "/summary.json"])
        Thread.sleep(forTimeInterval: 3)
        let stopping = Date()
        run.signal(SIGTERM)
        let output = run.wait(timeout: 60)
        let took = Date().timeIntervalSince(stopping)
        #expect(output.status == 3, "\(output.stderr.suffix(2000))")
        #expect(took < 5, "the stop took \(took) s with a drain timeout of 2 s")
        let sink = OTLPRunTests.sink(Self.summary(dir + "/summary.json"), "rw")
        let accepted = sink["accepted"] as? Int ?? -1, written = sink["written"] as? Int ?? -1
        let lost = (sink["lost"] as? [String: Int] ?? [:]).values.reduce(0, +)
        #expect(accepted > 0 && written == 0 && lost == accepted, "accepted \(accepted), written \(written), lost \(lost): \(sink)")
        let queue = sink["send_queue"] as? [String: Any] ?? [:]
        #expect(queue["samples_sent"] as? Int == 0 && queue["pending_samples"] as? Int == 0, "\(queue)")
        #expect(!output.stderr.contains("none lost"))
    }

    /// Behind a disk buffer, a receiver that refuses every request: each
    /// event is counted lost (rejected), none written, and the buffer lets
    /// them go (a refusal is final).
    @Test func behindADiskBufferEveryRefusedEventIsCounted() throws {
        let dir = try TestEnv.tempDir("rw-buffer-refused")
        let (receiver, port) = try Self.scripted(dir + "/r", ["--then", "400"])
        defer {
            receiver.signal(SIGTERM)
            _ = receiver.wait(timeout: 10)
        }
        try Self.writeFloodManifest(dir, flood: "count: 600, rate: 300, fields: 2, entities: 600", sinks: """
          rw: { type: remote_write, url: "http://127.0.0.1:\(port)/api/v1/write", buffer: { type: disk, path: \(dir)/buffer }, match: [flood] }
        """)
        let output = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "4s", "--control", "none",
                                                     "--summary", dir + "/summary.json"], timeout: 60)
        #expect(output.status == 3, "\(output.stderr.suffix(2000))")
        let sink = OTLPRunTests.sink(Self.summary(dir + "/summary.json"), "rw")
        #expect(sink["written"] as? Int == 0 && (sink["lost"] as? [String: Int])?["rejected"] == 600, "\(sink)")
        #expect((sink["buffer"] as? [String: Any])?["buffered"] as? Int == 0, "\(sink)")
    }

    /// Answers 503 with Retry-After: 1, then 503, 429 and 500 without:
    /// retried after the second asked for, then by the backoff (30 ms…);
    /// each request carries the protocol's headers, the manifest's, and
    /// the bearer token of its file as the file says it now.
    @Test func retriesWaitAsAskedAndTheCredentialsGoWithEveryRequest() throws {
        let dir = try TestEnv.tempDir("rw-retry")
        let out = dir + "/requests.jsonl"
        try TestEnv.write("first-token\n", to: dir + "/token")
        let (receiver, port) = try Self.scripted(out, ["--answers", "503:1,503,429,500"])
        defer {
            receiver.signal(SIGTERM)
            _ = receiver.wait(timeout: 10)
        }
        try Self.writeFloodManifest(dir, flood: "count: 0, rate: 20, fields: 1, entities: 2", sinks: """
          rw:
            type: remote_write
            url: "http://127.0.0.1:\(port)/receive"
            headers: { X-Scope-OrgID: fleet-a }
            bearer_token_file: \(dir)/token
            queue: { batch_send_deadline: 200ms }
        """)
        let run = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "8s", "--control", "none",
                                                    "--summary", dir + "/summary.json"])
        // Once the scripted answers are through, the token changes: the requests after carry the new one.
        #expect(SinkRunTests.waitUntil(8) { Self.events(out).count >= 5 })
        try TestEnv.write("second-token\n", to: dir + "/token")
        let output = run.wait(timeout: 60)
        #expect(output.status == 0, "\(output.stderr)")
        // Four failures in a row are one warning, and their end one notice.
        #expect(output.stderr.components(separatedBy: "cannot send to").count == 2
                && output.stderr.components(separatedBy: "takes requests again").count == 2, "\(output.stderr)")
        let requests = Self.events(out)
        #expect(requests.count >= 6, "\(requests.count) requests")
        let statuses = requests.map { $0["status"] as? Int ?? 0 }
        #expect(Array(statuses.prefix(5)) == [503, 503, 429, 500, 204], "\(statuses)")
        let times = requests.map { $0["time"] as? Double ?? 0 }
        if times.count >= 5 {
            #expect(times[1] - times[0] >= 0.95, "Retry-After: 1 was not waited: \(times[1] - times[0]) s")
            #expect(times[2] - times[1] < 0.5 && times[4] - times[3] < 1.0, "the backoff starts at 30 ms: \(zip(times.dropFirst(), times).map { $0 - $1 })")
        }
        // The same samples, retried as they were.
        #expect(Set(requests.prefix(5).map { $0["body"] as? String ?? "" }).count == 1)
        for request in requests {
            let headers = request["headers"] as? [String: String] ?? [:]
            #expect(headers["content-encoding"] == "snappy" && headers["content-type"] == "application/x-protobuf"
                    && headers["x-prometheus-remote-write-version"] == "0.1.0" && headers["x-scope-orgid"] == "fleet-a", "\(headers)")
            #expect(headers["user-agent"]?.hasPrefix("vigil/") == true)
        }
        let tokens = requests.map { ($0["headers"] as? [String: String])?["authorization"] ?? "" }
        #expect(tokens.first == "Bearer first-token" && tokens.last == "Bearer second-token", "\(tokens)")
        // Every sample of the run, in order per series, in the bodies answered 204.
        var seen: [String: [Int64]] = [:]
        for request in requests where request["status"] as? Int == 204 {
            let body = Array(Data(base64Encoded: request["body"] as? String ?? "") ?? Data())
            for series in try RemoteWriteRequest.decode(body) {
                let key = series.labels.map { "\($0.name)=\($0.value)" }.joined(separator: ",")
                seen[key, default: []] += series.samples.filter { !$0.value.isNaN }.map(\.time)
            }
        }
        #expect(seen.count == 2 && seen.values.allSatisfy { $0 == $0.sorted() && Set($0).count == $0.count }, "\(seen.keys)")
        let queue = OTLPRunTests.sink(Self.summary(dir + "/summary.json"), "rw")["send_queue"] as? [String: Any] ?? [:]
        #expect(queue["retries"] as? Int == 4 && queue["samples_sent"] as? Int == seen.values.reduce(0) { $0 + $1.count }, "\(queue)")
    }

    /// VictoriaMetrics asking for HTTP basic auth: the password of a
    /// `password_file` lets every sample in; a wrong one is answered 401,
    /// counted `rejected`, never retried.
    @Test func basicAuthIsWhatVictoriaMetricsAsksFor() throws {
        let dir = try TestEnv.tempDir("rw-auth")
        let vm = try Receiver.victoriaMetrics(dir, ["-httpAuth.username=vigil", "-httpAuth.password=s3cret"])
        defer { vm.stop() }
        try TestEnv.write("s3cret\n", to: dir + "/password")
        try Self.writeFloodManifest(dir, flood: "count: 200, rate: 400, fields: 2, entities: 200", sinks: """
          good: { type: remote_write, url: "\(vm.url)", match: [flood], basic_auth: { username: vigil, password_file: \(dir)/password }, external_labels: { via: good } }
          bad: { type: remote_write, url: "\(vm.url)", match: [flood], basic_auth: { username: vigil, password: wrong }, external_labels: { via: bad } }
        """)
        let output = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "2s", "--control", "none",
                                                     "--summary", dir + "/summary.json"], timeout: 60)
        #expect(output.status == 3, "\(output.stderr.suffix(2000))")
        let summary = Self.summary(dir + "/summary.json")
        let good = OTLPRunTests.sink(summary, "good"), bad = OTLPRunTests.sink(summary, "bad")
        #expect((good["send_queue"] as? [String: Any])?["samples_sent"] as? Int == 400, "\(good)")
        #expect((bad["lost"] as? [String: Int])?["rejected"] == 200 && (bad["send_queue"] as? [String: Any])?["retries"] as? Int == 0, "\(bad)")
        #expect(output.stderr.contains("with 401"), "\(output.stderr.suffix(2000))")
        // What VictoriaMetrics holds, asked with the same credentials (its
        // new series are searchable a moment after they came).
        let authorization = "Authorization: Basic dmlnaWw6czNjcmV0\r\n"
        var status = 0
        var lines: [Substring] = []
        _ = SinkRunTests.waitUntil(20) {
            _ = try? TestEnv.httpGet(port: vm.port, "/internal/force_flush", headers: authorization)
            guard let fd = try? Sockets.connect(.tcp(host: "127.0.0.1", port: UInt16(vm.port))) else { return false }
            defer { close(fd) }
            let request = "GET /api/v1/export?match[]=" + Receiver.encoded("{via=~\".+\"}") + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + authorization + "\r\n"
            guard let text = try? TestEnv.exchange(fd, Array(request.utf8), stopReadingAfter: 60, what: "victoria-metrics", sendMayFail: false)
            else { return false }
            let reply = TestEnv.parts(ofReply: text)
            status = reply.status
            lines = reply.body.split(separator: "\n")
            return lines.count >= 400
        }
        #expect(status == 200 && lines.count == 400 && lines.allSatisfy { $0.contains("\"via\":\"good\"") }, "\(status): \(lines.count) series")
    }

    /// `vigil validate` says where the sink sends and from how many
    /// shards, and refuses credentials it cannot read, at their place.
    @Test func validateSaysWhereItSendsAndRefusesCredentialsItCannotRead() throws {
        let dir = try TestEnv.tempDir("rw-validate")
        try TestEnv.write("secret\n", to: dir + "/password")
        try TestEnv.write("""
        monitors: { cpu: { plugin: cpu } }
        sinks:
          a: { type: remote_write, url: "http://127.0.0.1:8428/api/v1/write", basic_auth: { username: u, password_file: \(dir)/password } }
          b: { type: remote_write, url: "http://127.0.0.1:8428/api/v1/write", queue: { min_shards: 4, max_shards: 4 }, buffer: { type: disk, path: \(dir)/buf } }
        """, to: dir + "/ok.yaml")
        let ok = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/ok.yaml"])
        #expect(ok.status == 0, "\(ok.stderr)")
        #expect(ok.stdout.contains("sink a: remote write to http://127.0.0.1:8428/api/v1/write from 1 to 50 shards (threads of its own), its samples in memory only"), "\(ok.stdout)")
        #expect(ok.stdout.contains("sink b: remote write to http://127.0.0.1:8428/api/v1/write from 4 shards (threads of its own), behind its disk buffer \(dir)/buf"), "\(ok.stdout)")
        try TestEnv.write("""
        monitors: { cpu: { plugin: cpu } }
        sinks:
          a: { type: remote_write, url: "http://127.0.0.1:8428/api/v1/write", bearer_token_file: \(dir)/missing }
        """, to: dir + "/bad.yaml")
        let bad = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/bad.yaml"])
        #expect(bad.status != 0)
        #expect(bad.stderr.contains("bad.yaml:3:90: error: sink 'a': 'bearer_token_file': cannot read \(dir)/missing"), "\(bad.stderr)")
        // A FIFO (or a directory) is no secret file: refused at once, never waited on.
        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        try TestEnv.write("""
        monitors: { cpu: { plugin: cpu } }
        sinks:
          a: { type: remote_write, url: "http://127.0.0.1:8428/api/v1/write", bearer_token_file: \(dir)/fifo }
          b: { type: remote_write, url: "http://127.0.0.1:8428/api/v1/write", basic_auth: { username: u, password_file: \(dir) } }
        """, to: dir + "/fifo.yaml")
        let fifo = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/fifo.yaml"], timeout: 20)
        #expect(fifo.status == 1 && fifo.stderr.contains("\(dir)/fifo is not a regular file")
                && fifo.stderr.contains("'basic_auth.password_file': \(dir) is not a regular file"), "\(fifo.stderr)")
    }

    /// A monitor stopped by `vigil ctl stop`: its series end with the stale
    /// marker within the sweep's second (a Prometheus query at that time
    /// finds nothing), while the others go on; the control API's status
    /// and /metrics show the queue.
    @Test func seriesThatGoAwayEndWithTheStaleMarker() throws {
        let dir = try TestEnv.tempDir("rw-stale")
        let prom = try Receiver.prometheus(dir)
        defer { prom.stop() }
        let socket = dir + "/control.sock"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        host: rw-box
        monitors:
          a: { plugin: flood, isolation: none, options: { count: 0, rate: 10, fields: 1, entities: 1 } }
          b: { plugin: flood, isolation: none, options: { count: 0, rate: 10, fields: 1, entities: 1 } }
          c: { plugin: flood, isolation: none, options: { count: 0, rate: 1, fields: 1, entities: 3 } }   # each entity every 3 s
        sinks:
          prom: { type: remote_write, url: "\(prom.url)", queue: { batch_send_deadline: 100ms }, stale_on_exit: false, expire_after: 1s }
          # The same behind a disk buffer, whose delivery thread runs the sweep.
          buffered: { type: remote_write, url: "\(prom.url)", queue: { batch_send_deadline: 100ms }, stale_on_exit: false, expire_after: 1s,
                      external_labels: { via: buffer }, buffer: { type: disk, path: \(dir)/buffer } }
        """, to: dir + "/vigil.yaml")
        let run = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "30s", "--control", "unix:\(socket)"])
        defer {
            run.signal(SIGTERM)
            _ = run.wait(timeout: 30)
        }
        func live(_ monitor: String) -> Bool {
            !PrometheusRunTests.query(port: prom.port, "{monitor=\"\(monitor)\"}").isEmpty
        }
        #expect(SinkRunTests.waitUntil(20) { live("a") && live("b") }, "both series arrive")
        #expect(SinkRunTests.waitUntil(10) { !PrometheusRunTests.query(port: prom.port, "{monitor=\"a\",via=\"buffer\"}").isEmpty })
        let stop = try TestEnv.run(TestEnv.vigil, ["ctl", "stop", "a", "--control", "unix:\(socket)"])
        #expect(stop.status == 0, "\(stop.stderr)")
        // Without the marker Prometheus would go on answering with a's last value for 5 minutes.
        #expect(SinkRunTests.waitUntil(10) { !live("a") }, "a's series did not end")
        Thread.sleep(forTimeInterval: 1)
        #expect(live("b"), "b's series ended with a's")
        func sendQueue(_ sink: String = "prom") -> [String: Any]? {
            guard let status = try? TestEnv.unixHTTP(socket: socket, "GET", "/v1/status"),
                  let json = try? JSONSerialization.jsonObject(with: Data(status.body.utf8)) as? [String: Any] else { return nil }
            return ((json["sinks"] as? [[String: Any]])?.first { $0["name"] as? String == sink })?["send_queue"] as? [String: Any]
        }
        // a's series, and c's each time one went more than expire_after without a sample:
        // c's entities take turns a second apart, so on a loaded machine the
        // second of c's markers can come a few seconds after a's.
        var queue = sendQueue()
        _ = SinkRunTests.waitUntil(15) {
            queue = sendQueue()
            return (queue?["stale_markers"] as? Int ?? 0) >= 3
        }
        #expect((queue?["stale_markers"] as? Int ?? 0) >= 3 && (queue?["series"] as? Int ?? 0) <= 3 && queue?["shards"] as? Int == 1,
                "\(String(describing: queue))")
        #expect(queue?["url"] as? String == prom.url)
        #expect(SinkRunTests.waitUntil(10) { (sendQueue("buffered")?["stale_markers"] as? Int ?? 0) >= 3 },
                "behind the buffer: \(String(describing: sendQueue("buffered")))")
        let metrics = try TestEnv.unixHTTP(socket: socket, "GET", "/metrics").body
        #expect(metrics.contains("vigil_remote_write_samples_total{sink=\"prom\",outcome=\"sent\"}")
                && metrics.contains("vigil_remote_write_stale_markers_total{sink=\"prom\"}"), "\(metrics.suffix(3000))")
        let ctl = try TestEnv.run(TestEnv.vigil, ["ctl", "status", "--control", "unix:\(socket)"])
        #expect(ctl.stdout.contains("sink prom → \(prom.url): 1 shard (1-50"), "\(ctl.stdout)")
    }
}
