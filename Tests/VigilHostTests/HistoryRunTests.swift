import Foundation
import Testing

/// The `history` sink through the real binary: what `/v1/series` lists and
/// `/v1/query` answers is what the same run wrote to a file sink.
@Suite(.serialized, .startsProcesses, .offThePool) struct HistoryRunTests {
    static let capture = TestEnv.repoRoot + "/Tests/Fixtures/machines/capture"

    static func get(_ host: ControlRunTests.Host, _ target: String) throws -> (status: Int, json: [String: Any]) {
        let reply = try TestEnv.unixHTTP(socket: host.socket, "GET", target)
        return (reply.status, (try? JSONSerialization.jsonObject(with: Data(reply.body.utf8))) as? [String: Any] ?? [:])
    }

    @Test func seriesAndQueriesGiveBackWhatTheEventsSaid() throws {
        let dir = try TestEnv.tempDir()
        let host = try ControlRunTests.Host("""
          net: { plugin: netdev, interval: 100ms, options: { procfs: \(Self.capture)/proc, sysfs: \(Self.capture)/sys } }
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        """, sink: """
        history: { type: history, retention: 5m, max_memory: 4MiB }
          journal: { type: file, path: \(dir)/events.jsonl }
        """)
        defer { _ = host.stop() }
        #expect(SinkRunTests.waitUntil(10) {
            ((try? Self.get(host, "/v1/series?monitor=beat").json["series"]) as? [[String: Any]])?.isEmpty == false
        })
        usleep(1_000_000)

        // Identities are the stream's, counters say so, strings are no series.
        let (status, listed) = try Self.get(host, "/v1/series?monitor=net&field=receive_bytes")
        #expect(status == 200 && listed["sink"] as? String == "history" && listed["more"] as? Bool == false)
        let series = listed["series"] as? [[String: Any]] ?? []
        let interfaces = series.compactMap { ($0["identity"] as? [String: String])?["interface"] }
        #expect(Set(interfaces) == ["eth0", "ifb0", "ifb1", "lo"], "\(series)")
        #expect(series.allSatisfy { $0["counter"] as? Bool == true && $0["kind"] as? String == "interface" })
        let beats = (try Self.get(host, "/v1/series?monitor=beat").json["series"] as? [[String: Any]]) ?? []
        #expect(beats.map { $0["field"] as? String } == ["count"], "the message is a string: no series")

        // Every point of beat's count, as the file sink has it.
        let beatID = try #require(beats.first?["id"] as? String)
        let (_, raw) = try Self.get(host, "/v1/query?series=\(beatID)&from=-5m&rate=false")
        let points = (raw["points"] as? [[Double]]) ?? []
        #expect(raw["counter"] as? Bool == true && raw["rate"] as? Bool == false && raw["tier"] as? String == "points")
        #expect(points.count >= 10)
        func written() -> [Int64: Double] {
            let pairs = ((try? SinkRunTests.lines(dir + "/events.jsonl")) ?? []).compactMap { line -> (Int64, Double)? in
                let json = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                guard json?["monitor"] as? String == "beat", let fields = json?["fields"] as? [String: Any],
                      let count = fields["count"] as? Int, let time = json?["time"] as? String else { return nil }
                return (Self.milliseconds(time), Double(count))
            }
            return Dictionary(pairs, uniquingKeysWith: { a, _ in a })
        }
        // The file sink writes a batch after the history has it: the last
        // point queried may reach the file a moment later (seen in CI).
        var byTime = written()
        _ = SinkRunTests.waitUntil(10) {
            byTime = written()
            return points.allSatisfy { byTime[Int64($0[0])] != nil }
        }
        for point in points {
            #expect(byTime[Int64(point[0])] == point[1], "query point \(point) not in the file sink's events")
        }
        // As a rate: 10 beats a second.
        let (_, rate) = try Self.get(host, "/v1/query?series=\(beatID)&from=-5m")
        let rates = ((rate["points"] as? [[Double]]) ?? []).map { $0[1] }
        #expect(rate["rate"] as? Bool == true && rates.count == points.count - 1)
        #expect(rates.allSatisfy { $0 > 2 && $0 < 20 }, "beats per second: \(rates)")
        // Per step: [time, min, max, mean, last], on multiples of the step.
        let (_, stepped) = try Self.get(host, "/v1/query?series=\(beatID)&from=-5m&step=1s&rate=false")
        let buckets = (stepped["points"] as? [[Double]]) ?? []
        #expect(stepped["step_ms"] as? Int == 1000 && buckets.allSatisfy { $0.count == 5 && Int64($0[0]) % 1000 == 0 })
        #expect(buckets.last?[4] == points.last?[1])

        // The last events, whole, as the file sink wrote them.
        let (eventsStatus, recent) = try Self.get(host, "/v1/events?monitor=beat&limit=5")
        let events = recent["events"] as? [[String: Any]] ?? []
        #expect(eventsStatus == 200 && events.count == 5 && events.allSatisfy { $0["monitor"] as? String == "beat" })
        let seqs = events.compactMap { $0["seq"] as? Int }
        #expect(seqs == seqs.sorted() && recent["last_seq"] as? Int == seqs.last)
        var fileLines: [String] = []
        _ = SinkRunTests.waitUntil(10) {
            fileLines = (try? SinkRunTests.lines(dir + "/events.jsonl")) ?? []
            return seqs.allSatisfy { seq in fileLines.contains { $0.contains("\"seq\":\(seq),") } }
        }
        for event in events {
            let seq = event["seq"] as? Int ?? -1
            let line = fileLines.first { $0.contains("\"seq\":\(seq),") }
            let same = line.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? NSDictionary }
            #expect(same == event as NSDictionary, "seq \(seq): \(line ?? "not in the file")")
        }
        let (_, later) = try Self.get(host, "/v1/events?since=\(seqs.last ?? 0)&limit=10000")
        #expect(((later["events"] as? [[String: Any]]) ?? []).allSatisfy { ($0["seq"] as? Int ?? 0) > seqs.last ?? 0 })
        let (_, notices) = try Self.get(host, "/v1/events?severity=notice&limit=10000")
        let kinds = Set(((notices["events"] as? [[String: Any]]) ?? []).compactMap { $0["kind"] as? String })
        #expect(kinds.contains("started") && !kinds.contains("beat"), "\(kinds)")
    }

    @Test func badQueriesAreAnsweredWithWhatIsWrong() throws {
        let host = try ControlRunTests.Host("""
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        """, sink: "history: { type: history }")
        defer { _ = host.stop() }
        let cases: [(String, Int, String)] = [
            ("/v1/query", 400, "series is missing"),
            ("/v1/query?series=9.9", 404, "no series '9.9'"),
            ("/v1/query?series=x", 404, "no series 'x'"),
            ("/v1/query?series=0.0&from=yesterday", 400, "a time is milliseconds"),
            ("/v1/query?series=0.0&step=often", 400, "step is milliseconds"),
            ("/v1/query?series=0.0&from=100&to=10", 400, "is after to"),
            ("/v1/series?limit=0", 400, "limit must be"),
            ("/v1/series?sink=other", 404, "no history sink 'other'; history sinks: history"),
            ("/v1/events?severity=loud", 400, "severity is one of"),
            ("/v1/events?since=-1", 400, "since is a sequence number"),
        ]
        #expect(SinkRunTests.waitUntil(10) { (try? Self.get(host, "/v1/series").status) == 200 })
        for (target, status, says) in cases {
            let reply = try TestEnv.unixHTTP(socket: host.socket, "GET", target)
            #expect(reply.status == status && reply.body.contains(says), "\(target): \(reply.status) \(reply.body)")
        }
        let post = try TestEnv.unixHTTP(socket: host.socket, "POST", "/v1/series")
        #expect(post.status == 405)
        // A query for every point there could be: answered, within the bound.
        let huge = try TestEnv.unixHTTP(socket: host.socket, "GET", "/v1/query?series=0.0&from=-9223372036854775807&step=1")
        #expect(huge.status == 200, "\(huge.body)")
    }

    /// A reload that leaves the history sink as it was keeps what it holds.
    @Test func aReloadKeepsTheHistory() throws {
        let host = try ControlRunTests.Host("""
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        """, sink: "history: { type: history }")
        defer { _ = host.stop() }
        var id: String?
        #expect(SinkRunTests.waitUntil(10) {
            id = ((try? Self.get(host, "/v1/series?monitor=beat").json["series"]) as? [[String: Any]])?.first?["id"] as? String
            return id != nil
        })
        usleep(500_000)
        let before = ((try Self.get(host, "/v1/query?series=\(id ?? "")&from=-5m&rate=false").json["points"]) as? [[Double]]) ?? []
        #expect(before.count >= 3)
        let manifest = try String(contentsOfFile: host.dir + "/vigil.yaml", encoding: .utf8)
        try TestEnv.write(manifest.replacingOccurrences(of: "monitors:\n", with: "monitors:\n  other: { plugin: heartbeat, interval: 1h }\n"),
                          to: host.dir + "/vigil.yaml")
        let reload = try TestEnv.unixHTTP(socket: host.socket, "POST", "/v1/reload")
        #expect(reload.status == 200, "\(reload.body)")
        usleep(300_000)
        let after = ((try Self.get(host, "/v1/query?series=\(id ?? "")&from=-5m&rate=false").json["points"]) as? [[Double]]) ?? []
        #expect(after.count > before.count && Array(after.prefix(before.count)) == before, "\(before.count) points before, \(after.count) after")
    }

    /// `path:` keeps the history across a restart; a damaged file is
    /// refused whole, moved aside, said in the log and in status.
    @Test func theHistoryOutlivesARestartAndADamagedFileIsRefused() throws {
        let dir = try TestEnv.tempDir()
        let file = dir + "/history.bin"
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        sinks:
          history: { type: history, path: \(file) }
        """, to: manifest)
        let first = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "1500ms"], timeout: 30)
        #expect(first.status == 0 && first.stderr.contains("history written to \(file)"), "\(first.stderr)")

        let host = try ControlRunTests.Host("""
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
        """, sink: "history: { type: history, path: \(file) }")
        var beats: [[Double]] = []
        #expect(SinkRunTests.waitUntil(10) {
            let id = ((try? Self.get(host, "/v1/series?monitor=beat").json["series"]) as? [[String: Any]])?.first?["id"] as? String
            beats = ((try? Self.get(host, "/v1/query?series=\(id ?? "")&from=-10m&rate=false").json["points"]) as? [[Double]]) ?? []
            return !beats.isEmpty
        })
        // The first run's beats (counted from 1) and then this run's (from 1 again).
        let counts = beats.map { $0[1] }
        #expect(counts.count >= 10 && Array(counts.prefix(10)) == (1...10).map(Double.init), "\(counts)")
        _ = host.stop()

        // Damaged: refused whole, moved aside, and said.
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: file)))
        bytes[bytes.count / 2] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let damaged = try ControlRunTests.Host("""
          beat: { plugin: heartbeat, interval: 1h, isolation: none }
        """, sink: "history: { type: history, path: \(file) }")
        let status = try damaged.json("status")
        let history = ((status["sinks"] as? [[String: Any]])?.first { $0["name"] as? String == "history" })?["history"] as? [String: Any]
        #expect((history?["problem"] as? String)?.contains("refused at start: its checksum does not match") == true, "\(history ?? [:])")
        #expect(FileManager.default.fileExists(atPath: file + ".refused"))
        let stopped = damaged.stop()
        #expect(stopped.stderr.contains("history file \(file) refused: its checksum does not match"), "\(stopped.stderr)")
    }

    @Test func pointsTheHistoryDidNotKeepAreSaidAtExitWithoutCountingEventsLost() throws {
        let host = try ControlRunTests.Host(
            "  net: { plugin: netdev, interval: 100ms, options: { procfs: \(Self.capture)/proc, sysfs: \(Self.capture)/sys } }",
            sink: "history: { type: history, max_series: 3 }")
        #expect(SinkRunTests.waitUntil(10) {
            let status = (try? TestEnv.unixHTTP(socket: host.socket, "GET", "/v1/status").body) ?? ""
            return status.contains("\"max_series\":") && !status.contains("\"max_series\":0")
        })
        let out = host.stop()
        // The events reached the sink: none lost, exit 0; the points it refused are said.
        #expect(out.status == 0, "\(out.stderr)")
        let line = out.stderr.split(separator: "\n").first { $0.contains("sink history (history)") }.map(String.init) ?? ""
        #expect(line.contains("none lost") && line.contains("history: points not kept: ") && line.contains(" max_series"), "\(line)")
    }

    @Test func withoutAHistorySinkTheAnswerSaysSo() throws {
        let host = try ControlRunTests.Host("  beat: { plugin: heartbeat, interval: 1h, isolation: none }")
        defer { _ = host.stop() }
        let reply = try TestEnv.unixHTTP(socket: host.socket, "GET", "/v1/series")
        #expect(reply.status == 404 && reply.body.contains("no history sink"), "\(reply.body)")
    }

    /// `2026-11-29T23:38:38.123456789Z` as ms since the epoch.
    static func milliseconds(_ text: String) -> Int64 {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let seconds = text.prefix(19) + "Z"
        let whole = Int64(formatter.date(from: String(seconds))?.timeIntervalSince1970 ?? 0)
        let fraction = text.dropFirst(20).prefix { $0.isNumber }
        let ms = Int64(String(fraction.prefix(3)).padding(toLength: 3, withPad: "0", startingAt: 0)) ?? 0
        return whole * 1000 + ms
    }
}
