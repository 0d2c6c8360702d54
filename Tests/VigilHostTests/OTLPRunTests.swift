import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The `otlp` sink through the real binary to a receiver that decodes with
/// the official protos (PyPI's opentelemetry-proto, in the venv scripts/test-deps
/// makes): one log record per routed event with its attributes, time and
/// severity, protobuf and JSON, gzip; metrics with names, units and values;
/// retries on 503 honouring Retry-After; partial success counted; a final
/// refusal not retried; a receiver that comes up late.
@Suite(.serialized, .startsProcesses, .offThePool) struct OTLPRunTests {
    /// The Python with opentelemetry-proto: $VIGIL_TEST_PYTHON, else the
    /// repository's .build/test-venv.
    static func python() throws -> String {
        let candidates = [ProcessInfo.processInfo.environment["VIGIL_TEST_PYTHON"], TestEnv.repoRoot + "/.build/test-venv/bin/python"]
        for case let path? in candidates where FileManager.default.isExecutableFile(atPath: path) {
            let check = try TestEnv.run(path, ["-c", "import opentelemetry.proto.collector.logs.v1.logs_service_pb2"], timeout: 30)
            if check.status == 0 { return path }
        }
        throw TestFailure("no Python with opentelemetry-proto: python3 -m venv .build/test-venv && .build/test-venv/bin/pip install opentelemetry-proto==1.45.2 (scripts/test-deps does)")
    }

    struct Receiver {
        let out: String
        let port: Int
        let process: RunningProcess

        init(_ dir: String, _ arguments: [String] = [], port: Int = 0) throws {
            out = dir + "/received.jsonl"
            process = try TestEnv.start(try OTLPRunTests.python(),
                                        [TestEnv.fixture("otlp/receiver.py"), out, "--port", String(port)] + arguments)
            let portFile = out + ".port"
            guard SinkRunTests.waitUntil(60, { (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) } != nil }),
                  let text = try? String(contentsOfFile: portFile, encoding: .utf8), let p = Int(text) else {
                process.signal(SIGTERM)
                throw TestFailure("the OTLP receiver did not start: \(process.wait(timeout: 5).stderr)")
            }
            self.port = p
        }

        func records(_ signal: String = "logs") -> [[String: Any]] {
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
                .filter { $0["signal"] as? String == signal }
        }

        func requests() -> [[String: Any]] {
            let text = (try? String(contentsOfFile: out + ".requests", encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        }

        func stop() {
            process.signal(SIGTERM)
            _ = process.wait(timeout: 10)
        }
    }

    /// Runs `vigil run` on `sinks` (EVENTS is a file sink's path) with a
    /// heartbeat, the fixture machine's memory and a small flood; returns
    /// its output, its summary and the events the file sink wrote.
    static func run(_ dir: String, sinks: String, seconds: Int = 2) throws -> (TestEnv.Output, [String: Any], [[String: Any]]) {
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        host: otlp-box
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
          memory: { plugin: memory, interval: 200ms, options: { procfs: \(TestEnv.fixture("machines/server/proc")) } }
          flood: { plugin: flood, isolation: none, options: { count: 1500, rate: 3000, fields: 2 } }
        sinks:
          file: { type: file, path: \(dir)/events.jsonl }
        \(sinks)
        """, to: dir + "/vigil.yaml")
        let output = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "\(seconds)s", "--control", "none",
                                                     "--summary", dir + "/summary.json"], timeout: 120)
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        let text = (try? String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8)) ?? ""
        let events = text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
        return (output, summary, events)
    }

    static func sink(_ summary: [String: Any], _ name: String) -> [String: Any] {
        (summary["sinks"] as? [[String: Any]] ?? []).first { $0["name"] as? String == name } ?? [:]
    }

    /// Nanoseconds since the epoch of a file sink's RFC 3339 time with nine digits.
    static func nanoseconds(_ text: String) -> UInt64? {
        guard text.count == 30, let dot = text.firstIndex(of: ".") else { return nil }
        let formatter = ISO8601DateFormatter()
        guard let date = formatter.date(from: String(text[..<dot]) + "Z"),
              let fraction = UInt64(text[text.index(after: dot)..<text.index(before: text.endIndex)]) else { return nil }
        return UInt64(date.timeIntervalSince1970) * 1_000_000_000 + fraction
    }

    @Test(arguments: ["protobuf", "json"])
    func everyEventIsOneLogRecordWithItsFieldsAndTime(encoding: String) throws {
        let dir = try TestEnv.tempDir("otlp-\(encoding)")
        let receiver = try Receiver(dir)
        defer { receiver.stop() }
        let (output, summary, events) = try Self.run(dir, sinks: """
          otlp: { type: otlp, endpoint: "http://127.0.0.1:\(receiver.port)", encoding: \(encoding), batch: { events: 200, timeout: 100ms } }
        """)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("none lost"))
        #expect(Self.sink(summary, "otlp")["written"] as? Int == events.count)
        let records = receiver.records()
        #expect(records.count == events.count, "\(records.count) records for \(events.count) events")
        var bySeq: [Int: [String: Any]] = [:]
        for record in records {
            let attributes = record["attributes"] as? [String: [Any]] ?? [:]
            if let seq = attributes["vigil.seq"]?.last as? Int { bySeq[seq] = record }
        }
        #expect(bySeq.count == events.count, "every seq once")
        let severities = ["debug": 5, "info": 9, "notice": 10, "warning": 13, "error": 17, "critical": 21]
        for event in events {
            guard let seq = event["seq"] as? Int, let record = bySeq[seq] else {
                Issue.record("no record for \(event)")
                continue
            }
            #expect(record["time_unix_nano"] as? UInt64 == Self.nanoseconds(event["time"] as? String ?? "") ?? 0
                    || (record["time_unix_nano"] as? Int).map(UInt64.init) == Self.nanoseconds(event["time"] as? String ?? ""),
                    "time of \(seq)")
            #expect(record["severity_text"] as? String == event["severity"] as? String)
            #expect(record["severity_number"] as? Int == severities[event["severity"] as? String ?? ""])
            #expect(record["event_name"] as? String == event["kind"] as? String)
            let attributes = record["attributes"] as? [String: [Any]] ?? [:]
            #expect(attributes["vigil.monitor"]?.last as? String == event["monitor"] as? String)
            for (name, value) in event["fields"] as? [String: Any] ?? [:] {
                let got = attributes[name]
                switch got?.first as? String {
                case "int_value": #expect("\(got?.last ?? "")" == "\(value)", "\(name) of \(seq)")
                case "double_value":
                    #expect(abs((got?.last as? Double ?? .nan) - (value as? Double ?? .infinity)) < 1e-9, "\(name) of \(seq)")
                case "string_value": #expect(got?.last as? String == value as? String, "\(name) of \(seq)")
                case "bool_value": #expect(got?.last as? Bool == value as? Bool, "\(name) of \(seq)")
                default: Issue.record("field \(name) of \(seq) not an attribute: \(String(describing: got))")
                }
            }
        }
        #expect((records.first?["resource"] as? [String: [Any]])?["host.name"]?.last as? String == "otlp-box")
        let requests = receiver.requests()
        #expect(requests.allSatisfy { $0["path"] as? String == "/v1/logs" })
        #expect(requests.allSatisfy { ($0["encoding"] as? String) == "gzip" })
        #expect(requests.allSatisfy { ($0["content_type"] as? String)?.hasPrefix(encoding == "json" ? "application/json" : "application/x-protobuf") == true })
        // Batched: the flood's 1500 events in requests of at most 200.
        #expect(requests.count < events.count / 50, "\(requests.count) requests")
    }

    @Test func metricsCarryTheFixturesValuesWithUnits() throws {
        let dir = try TestEnv.tempDir("otlp-metrics")
        let receiver = try Receiver(dir)
        defer { receiver.stop() }
        let (output, _, _) = try Self.run(dir, sinks: """
          otlp: { type: otlp, endpoint: "http://127.0.0.1:\(receiver.port)/", signals: [metrics], compression: none, match: [memory, beat] }
        """, seconds: 1)
        #expect(output.status == 0, "\(output.stderr)")
        let points = receiver.records("metrics")
        let available = points.first { $0["name"] as? String == "vigil_memory_available_bytes" }
        #expect(available?["unit"] as? String == "By")
        #expect(available?["type"] as? String == "gauge")
        #expect(available?["value"] as? Int == 49_382_400 * 1024, "\(String(describing: available))")
        let ratio = points.first { $0["name"] as? String == "vigil_memory_used_ratio" }
        #expect(ratio?["unit"] as? String == "1")
        let beats = points.filter { $0["name"] as? String == "vigil_heartbeat_beat_count" }
        #expect(!beats.isEmpty && beats.allSatisfy { $0["type"] as? String == "sum" && $0["monotonic"] as? Bool == true })
        #expect(receiver.requests().allSatisfy { $0["path"] as? String == "/v1/metrics" && ($0["encoding"] as? String) == "" })
    }

    @Test func a503IsRetriedAfterItsRetryAfterAndNothingIsLost() throws {
        let dir = try TestEnv.tempDir("otlp-retry")
        let receiver = try Receiver(dir, ["--fail", "2", "--retry-after", "1"])
        defer { receiver.stop() }
        let (output, _, events) = try Self.run(dir, sinks: """
          otlp: { type: otlp, endpoint: "http://127.0.0.1:\(receiver.port)", retry_min: 50ms, batch: { events: 5000, timeout: 100ms } }
        """, seconds: 4)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("answered 503: retrying"))
        #expect(receiver.records().count == events.count)
        let requests = receiver.requests()
        let at = requests.compactMap { $0["at"] as? Double }
        // Retry-After: 1 is honoured between the failures and the retry.
        #expect(at.count >= 3 && at[1] - at[0] >= 0.9 && at[2] - at[1] >= 0.9, "\(at)")
    }

    @Test func aPartialSuccessIsLoggedAndCountedRejectedNotRetried() throws {
        let dir = try TestEnv.tempDir("otlp-partial")
        let receiver = try Receiver(dir, ["--reject", "1"])
        defer { receiver.stop() }
        let (output, summary, events) = try Self.run(dir, sinks: """
          otlp: { type: otlp, endpoint: "http://127.0.0.1:\(receiver.port)", batch: { events: 5000, timeout: 300ms } }
        """)
        let requests = receiver.requests().count
        #expect(output.status == 3, "\(output.stderr)")
        #expect(output.stderr.contains("rejected 1 of the log records sent: the test receiver rejects 1 (partial success; not retried)"))
        let lost = Self.sink(summary, "otlp")["lost"] as? [String: Any] ?? [:]
        #expect(lost["rejected"] as? Int == requests, "\(lost)")
        // Never sent again: each event once.
        #expect(receiver.records().count == events.count)
    }

    @Test func aFinalRefusalIsNotRetriedAndCountedLost() throws {
        let dir = try TestEnv.tempDir("otlp-400")
        let receiver = try Receiver(dir, ["--status-after", "400"])
        defer { receiver.stop() }
        let (output, summary, events) = try Self.run(dir, sinks: """
          otlp: { type: otlp, endpoint: "http://127.0.0.1:\(receiver.port)", retry_min: 10ms, batch: { events: 5000, timeout: 300ms } }
        """)
        #expect(output.status == 3)
        #expect(output.stderr.contains("refused") && output.stderr.contains("with 400: refused by the test receiver; not retried"), "\(output.stderr)")
        let lost = Self.sink(summary, "otlp")["lost"] as? [String: Any] ?? [:]
        #expect(lost["write_failed"] as? Int == events.count, "\(lost)")
        // One request per batch, none again.
        #expect(receiver.requests().count <= 10)
    }

    /// Hostile testing found both: a dead peer with several batches waiting
    /// trapped the host at shutdown (a counter taken back below zero), and a
    /// peer that never answers left its batch counted written ("none lost").
    @Test(arguments: ["dead", "silent"])
    func aPeerThatNeverTakesAnythingIsCountedLostAtShutdown(peer: String) throws {
        let dir = try TestEnv.tempDir("otlp-\(peer)")
        let port = try ControlTCPRunTests.freePort()
        var silent: RunningProcess?
        if peer == "silent" {
            // Accepts, reads nothing, answers nothing.
            silent = try TestEnv.start("/usr/bin/env", ["python3", "-c", """
            import socket, time
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", \(port))); s.listen(16)
            held = []
            while True: held.append(s.accept()[0])
            """])
            Thread.sleep(forTimeInterval: 0.5)
        }
        defer { silent?.signal(SIGKILL); _ = silent?.wait(timeout: 5) }
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors: { beat: { plugin: heartbeat, interval: 100ms, isolation: none } }
        sinks:
          otel: { type: otlp, endpoint: "http://127.0.0.1:\(port)", timeout: 30s, batch: { events: 5, timeout: 100ms } }
        """, to: dir + "/vigil.yaml")
        let started = Date()
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "2s", "--drain-timeout", "1s", "--control", "none",
                                                  "--summary", dir + "/summary.json"], timeout: 60)
        #expect(run.status == 3, "\(run.stderr)")
        #expect(Date().timeIntervalSince(started) < 10, "waited out the request's timeout")
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        let sink = (summary["sinks"] as? [[String: Any]])?.first ?? [:]
        let lost = (sink["lost"] as? [String: Any])?["shutdown"] as? Int ?? 0
        #expect(lost == summary["events"] as? Int && sink["written"] as? Int == 0, "\(sink)")
    }

    @Test func aReceiverThatComesUpLateGetsEverything() throws {
        let dir = try TestEnv.tempDir("otlp-late")
        let port = try ControlTCPRunTests.freePort()
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 50ms, isolation: none }
        sinks:
          otlp: { type: otlp, endpoint: "http://127.0.0.1:\(port)", retry_min: 50ms, retry_max: 200ms, batch: { timeout: 50ms } }
        """, to: dir + "/vigil.yaml")
        let host = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "3s", "--control", "none", "--summary", dir + "/summary.json"])
        Thread.sleep(forTimeInterval: 1.2)
        let receiver = try Receiver(dir, port: port)
        defer { receiver.stop() }
        let output = host.wait(timeout: 60)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("cannot send to http://127.0.0.1:\(port)/v1/logs"))
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        #expect(receiver.records().count == summary["events"] as? Int)
    }
}

/// The disk buffer through the real binary: the OTLP peer is down, the host
/// takes a flood into its buffer and is killed with SIGKILL; the peer comes
/// back, the host is started again, and every event the first host accepted
/// arrives, possible duplicates counted; a corrupted segment is skipped and
/// reported, with exit status 3.
@Suite(.serialized, .startsProcesses, .offThePool) struct DiskBufferRunTests {
    static func manifest(_ dir: String, port: Int, flood: Bool, maxSize: String = "64MiB") throws -> String {
        let path = dir + (flood ? "/first.yaml" : "/second.yaml")
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
        \(flood ? "  flood: { plugin: flood, isolation: none, options: { count: 3000, rate: 6000, fields: 2 } }" : "")
        sinks:
          otel: { type: otlp, endpoint: "http://127.0.0.1:\(port)", retry_min: 50ms, retry_max: 200ms,
                  batch: { events: 256, timeout: 50ms },
                  buffer: { type: disk, path: \(dir)/buffer, max_size: \(maxSize), fsync: always } }
        """, to: path)
        return path
    }

    /// Runs the first host until its sink has taken the flood into the buffer, then SIGKILL.
    static func floodAndKill(_ dir: String, port: Int, maxSize: String = "64MiB") throws {
        let first = try manifest(dir, port: port, flood: true, maxSize: maxSize)
        let socket = dir + "/vigil.sock"
        let host = try TestEnv.start(TestEnv.vigil, ["run", first, "--control", "unix:" + socket])
        let taken = SinkRunTests.waitUntil(30) {
            guard let out = try? TestEnv.run(TestEnv.vigil, ["ctl", "status", "--json", "--control", "unix:" + socket], timeout: 10),
                  let json = try? JSONSerialization.jsonObject(with: Data(out.stdout.utf8)) as? [String: Any],
                  let sink = (json["sinks"] as? [[String: Any]])?.first else { return false }
            return (sink["written"] as? Int ?? 0) >= 3001
        }
        host.signal(SIGKILL)
        _ = host.wait(timeout: 10)
        #expect(taken, "the flood never got into the buffer")
    }

    static func floodValues(_ receiver: OTLPRunTests.Receiver) -> [Double] {
        receiver.records().compactMap { r in
            r["event_name"] as? String == "flood" ? (r["attributes"] as? [String: [Any]])?["v0"]?.last as? Double : nil
        }
    }

    @Test func everyAcceptedEventArrivesAfterKill9AndARestart() throws {
        let dir = try TestEnv.tempDir("buffer-kill9")
        let port = try ControlTCPRunTests.freePort()
        try Self.floodAndKill(dir, port: port)
        let receiver = try OTLPRunTests.Receiver(dir, port: port)
        defer { receiver.stop() }
        let second = try Self.manifest(dir, port: port, flood: false)
        let run = try TestEnv.run(TestEnv.vigil, ["run", second, "--for", "3s", "--control", "none", "--summary", dir + "/summary.json"],
                                  timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("events from an earlier run to send"), "\(run.stderr)")
        let values = Self.floodValues(receiver)
        #expect(Set(values) == Set((0..<3000).map(Double.init)), "\(Set(values).count) distinct of 3000")
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        let buffer = ((summary["sinks"] as? [[String: Any]])?.first?["buffer"] as? [String: Any]) ?? [:]
        #expect((buffer["replayed"] as? Int ?? 0) >= 3000, "\(buffer)")
        #expect(buffer["buffered"] as? Int == 0)
        // What arrived twice is no more than what the host said may.
        let duplicates = values.count - Set(values).count
        #expect(duplicates <= buffer["possible_duplicates"] as? Int ?? 0, "\(duplicates) duplicates, \(buffer)")
    }

    @Test func aCorruptedSegmentIsSkippedAndReported() throws {
        let dir = try TestEnv.tempDir("buffer-corrupted")
        let port = try ControlTCPRunTests.freePort()
        // 1 MiB: segments of 128 KiB, so the flood spans several.
        try Self.floodAndKill(dir, port: port, maxSize: "1MiB")
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir + "/buffer").filter { $0.hasSuffix(".seg") }.sorted()
        #expect(segments.count >= 3, "\(segments)")
        let victim = dir + "/buffer/" + segments[1]
        var bytes = try Data(contentsOf: URL(fileURLWithPath: victim))
        for i in stride(from: bytes.count / 2, to: min(bytes.count, bytes.count / 2 + 64), by: 1) { bytes[i] ^= 0x5A }
        try bytes.write(to: URL(fileURLWithPath: victim))
        let receiver = try OTLPRunTests.Receiver(dir, port: port)
        defer { receiver.stop() }
        let run = try TestEnv.run(TestEnv.vigil, ["run", try Self.manifest(dir, port: port, flood: false, maxSize: "1MiB"),
                                                  "--for", "3s", "--control", "none"], timeout: 60)
        #expect(run.status == 3, "\(run.stderr)")
        #expect(run.stderr.contains("1 corrupt segment parts skipped"), "\(run.stderr)")
        let values = Set(Self.floodValues(receiver))
        // The other segments all arrived: the last flood event among them.
        #expect(values.contains(2999) && values.contains(0))
        #expect(values.count < 3000 && values.count > 2000, "\(values.count)")
    }

    @Test func aBufferThatCannotBeOpenedCountsItsEventsLost() throws {
        let dir = try TestEnv.tempDir("buffer-unopenable")
        try TestEnv.write("a file where the buffer's directory should be", to: dir + "/buffer")
        let run = try TestEnv.run(TestEnv.vigil, ["run", try Self.manifest(dir, port: try ControlTCPRunTests.freePort(), flood: false),
                                                  "--for", "1s", "--control", "none"], timeout: 60)
        #expect(run.status == 3, "\(run.stderr)")
        #expect(run.stderr.contains("cannot open the disk buffer \(dir)/buffer"), "\(run.stderr)")
        #expect(run.stderr.contains("write_failed"), "\(run.stderr)")
    }

    /// A reload that changes the sink makes its replacement before the old
    /// one let go of the directory: the two never hold it at once, and
    /// nothing is lost or sent twice.
    @Test func aReloadedBufferedSinkTakesOverTheDirectory() throws {
        let dir = try TestEnv.tempDir("buffer-reload")
        let receiver = try OTLPRunTests.Receiver(dir)
        defer { receiver.stop() }
        func write(_ timeout: String) throws {
            try TestEnv.write("""
            plugin_dirs: [\(try TestEnv.cPlugins())]
            monitors:
              beat: { plugin: heartbeat, interval: 20ms, isolation: none }
            sinks:
              otel: { type: otlp, endpoint: "http://127.0.0.1:\(receiver.port)", batch: { events: 64, timeout: \(timeout) },
                      buffer: { type: disk, path: \(dir)/buffer } }
            """, to: dir + "/vigil.yaml")
        }
        try write("50ms")
        let host = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "4s", "--control", "none",
                                                     "--summary", dir + "/summary.json"])
        for round in 0..<3 {
            Thread.sleep(forTimeInterval: 0.7)
            try write("\(60 + round)ms")
            host.signal(SIGHUP)
        }
        let run = host.wait(timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        let events = summary["events"] as? Int ?? -1
        #expect(SinkRunTests.waitUntil(10) { receiver.records().count >= events })
        let seqs = receiver.records().compactMap { ($0["attributes"] as? [String: [Any]])?["vigil.seq"]?.last as? Int }
        #expect(Set(seqs).count == events, "\(Set(seqs).count) distinct of \(events)")
    }

    /// A full buffer drops as `when_full` says, counted `buffer_full`; the
    /// newest or the oldest events are the ones kept.
    @Test(arguments: ["drop_newest", "drop_oldest"])
    func aFullBufferDropsAsWhenFullSaysAndCountsIt(policy: String) throws {
        let dir = try TestEnv.tempDir("buffer-full-\(policy)")
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          flood: { plugin: flood, isolation: none, options: { count: 20000, fields: 4 } }
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
        sinks:
          otel: { type: otlp, endpoint: "http://127.0.0.1:\(try ControlTCPRunTests.freePort())", overflow: block,
                  buffer: { type: disk, path: \(dir)/buffer, max_size: 1MiB, when_full: \(policy), fsync: never } }
        """, to: dir + "/vigil.yaml")
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--for", "3s", "--control", "none",
                                                  "--summary", dir + "/summary.json"], timeout: 60)
        #expect(run.status == 3, "\(run.stderr)")
        #expect(run.stderr.contains("is full (max_size 1MiB)"), "\(run.stderr)")
        let summary = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json")))) as? [String: Any] ?? [:]
        let sink = (summary["sinks"] as? [[String: Any]])?.first ?? [:]
        let lost = (sink["lost"] as? [String: Any])?["buffer_full"] as? Int ?? 0
        let kept = (sink["buffer"] as? [String: Any])?["buffered"] as? Int ?? 0
        #expect(lost > 1000, "\(sink)")
        // Every event is kept or counted: none is lost without a reason.
        #expect(kept > 1000 && kept + lost == summary["events"] as? Int, "\(sink)")
        // What is on disk: the first events with drop_newest, the last with drop_oldest.
        let buffer = try DiskBuffer(directory: dir + "/buffer", maxBytes: 1 << 20, fsync: .never)
        let first = buffer.read(max: 1).first.map { String(decoding: $0.payload, as: UTF8.self) } ?? ""
        if policy == "drop_newest" {
            // One of the first made: the host's start, the flood's first or the heartbeat's first (its snapshot poll).
            #expect(first.contains("\"kind\":\"started\"") || first.contains("\"v0\":0")
                    || first.contains("\"monitor\":\"beat\"") && first.contains("\"seq\":1,"), "\(first)")
        } else {
            #expect(!first.contains("\"v0\":0,") && !first.contains("\"kind\":\"started\""), "\(first)")
        }
    }
}
