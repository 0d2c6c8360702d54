import Foundation
import Testing
import VigilPrompb
@testable import VigilIsolation
@testable import VigilSinks

/// Prometheus' remote write 1.0 on the wire (issue 32): the requests
/// RemoteWriteRequest makes (protobuf by swift-protobuf, snappy by the
/// system's libsnappy) taken by Debian's VictoriaMetrics and by Prometheus'
/// own receiver (`--web.enable-remote-write-receiver`), started here on
/// loopback, and given back by their query APIs with every value and time.
@Suite(.serialized, .startsProcesses, .offThePool) struct RemoteWriteWireTests {
    @Test func snappyRoundTripsAndRefusesWhatIsNotABlock() throws {
        #expect(Snappy.unavailable == nil, "\(Snappy.unavailable ?? "")")
        // Text like a request's: labels that repeat, values that do not.
        let words = (0..<60_000).flatMap { Array("name=\"node_\($0 % 97)\",v=\($0 * 7919 % 10_007);".utf8) }
        for size in [0, 1, 100, 65_536, 1 << 20] {
            let text = Array(words.prefix(size))
            let packed = try Snappy.compress(text)
            #expect(try Snappy.uncompress(packed) == text)
            if size >= 65_536 { #expect(packed.count < size, "\(packed.count) of \(size)") }
        }
        #expect(throws: SnappyError.self) { try Snappy.uncompress([0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) }
        #expect(throws: SnappyError.self) { try Snappy.uncompress(try Snappy.compress([UInt8](repeating: 7, count: 4096)), limit: 1000) }
        // A block that lies about its length is refused, not read past.
        var lying = try Snappy.compress([UInt8](repeating: 1, count: 100))
        lying[0] = 0x7F
        #expect(throws: SnappyError.self) { try Snappy.uncompress(lying) }
    }

    /// Three series of five samples each, at whole seconds before now.
    static func series(now: Int64) -> [RemoteWriteRequest.Series] {
        let times: [Int64] = (0..<5).map { now - Int64(5 - $0) * 1000 }
        func samples(_ values: [Double]) -> [(value: Double, time: Int64)] { zip(values, times).map { ($0, $1) } }
        let gauge: [Double] = [0.25, 0.5, 1e-9, -3.75, 12345.678]
        let bytes: [Double] = [1e15, 1e15 + 4096, 1e15 + 8192, 1e15 + 8192, 1e15 + 65_536]
        let up: [Double] = [1, 1, 0, 1, 1]
        return [
            .init(labels: [("__name__", "vigil_wire_gauge"), ("host", "h1"), ("cpu", "0")], samples: samples(gauge)),
            .init(labels: [("__name__", "vigil_wire_bytes_total"), ("device", "eth0 \"x\"\\")], samples: samples(bytes)),
            .init(labels: [("__name__", "vigil_wire_up")], samples: samples(up)),
        ]
    }

    static func post(port: Int, path: String, body: [UInt8]) throws -> (status: Int, body: String) {
        var request = Array("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\nContent-Length: \(body.count)\r\n".utf8)
        for (name, value) in RemoteWriteRequest.headers { request += Array("\(name): \(value)\r\n".utf8) }
        request += Array("\r\n".utf8) + body
        let reply = TestEnv.parts(ofReply: try TestEnv.http(port: port, request))
        return (reply.status, reply.body)
    }

    @Test func theRequestDecodesAsItWasMade() throws {
        let series = Self.series(now: 1_764_460_800_000)
        let decoded = try RemoteWriteRequest.decode(try RemoteWriteRequest.body(series))
        // Labels come back sorted by name, as the protocol asks.
        #expect(decoded.map { $0.labels.map(\.name) } == [["__name__", "cpu", "host"], ["__name__", "device"], ["__name__"]])
        #expect(decoded.map(\.samples.count) == [5, 5, 5])
        #expect(decoded[1].samples.map(\.value) == series[1].samples.map(\.value))
        let stale = try RemoteWriteRequest.decode(try RemoteWriteRequest.body([.init(labels: [("__name__", "x")],
                                                                                    samples: [(RemoteWriteRequest.staleMarker, Int64(1))])]))
        #expect(stale.first?.samples.first?.value.bitPattern == RemoteWriteRequest.staleMarker.bitPattern)
    }

    /// The sink's requests (labels serialized once per series, each entry
    /// its labels then its samples) decode, by swift-protobuf, as the
    /// request swift-protobuf makes whole.
    @Test func aRequestOfLabelsSerializedOnceIsTheWholeRequest() throws {
        let series = Self.series(now: 1_764_460_800_000)
        var builder = RemoteWriteRequest.Builder()
        var whole = Prometheus_WriteRequest()
        for s in series {
            let labels = s.labels.map { pair -> Prometheus_Label in
                var label = Prometheus_Label()
                label.name = pair.name
                label.value = pair.value
                return label
            }
            let samples = s.samples.map { pair -> Prometheus_Sample in
                var sample = Prometheus_Sample()
                sample.value = pair.value
                sample.timestamp = pair.time
                return sample
            }
            try builder.append(labels: try RemoteWriteRequest.Builder.labelBytes(labels), samples: samples)
            var ts = Prometheus_TimeSeries()
            ts.labels = labels
            ts.samples = samples
            whole.timeseries.append(ts)
        }
        #expect(try Prometheus_WriteRequest(serializedBytes: builder.bytes) == whole)
        // A series long enough that its entry's length takes three bytes.
        let many = (0..<3000).map { i -> Prometheus_Sample in
            var sample = Prometheus_Sample()
            sample.value = Double(i) / 3
            sample.timestamp = Int64(i)
            return sample
        }
        var long = RemoteWriteRequest.Builder()
        try long.append(labels: try RemoteWriteRequest.Builder.labelBytes(whole.timeseries[0].labels), samples: many)
        let decoded = try Prometheus_WriteRequest(serializedBytes: long.bytes)
        #expect(decoded.timeseries.count == 1 && decoded.timeseries[0].samples == many && decoded.timeseries[0].labels == whole.timeseries[0].labels)
    }

    @Test func victoriaMetricsTakesItAndGivesEveryValueBack() throws {
        let vm = try #require(PrometheusRunTests.tool("victoria-metrics"), "no victoria-metrics: scripts/test-deps installs it")
        let dir = try TestEnv.tempDir("vm")
        let port = try ControlTCPRunTests.freePort()
        let server = try TestEnv.start(vm, ["-storageDataPath=\(dir)/data", "-httpListenAddr=127.0.0.1:\(port)", "-loggerLevel=ERROR",
                                            "-search.latencyOffset=0s"])
        defer {
            server.signal(SIGTERM)
            _ = server.wait(timeout: 30)
        }
        #expect(SinkRunTests.waitUntil(30) { (try? TestEnv.httpGet(port: port, "/health"))?.status == 200 })
        let now = Int64(Date().timeIntervalSince1970) * 1000
        let series = Self.series(now: now)
        let sent = try Self.post(port: port, path: "/api/v1/write", body: try RemoteWriteRequest.body(series))
        #expect(sent.status == 204, "\(sent)")
        _ = try TestEnv.httpGet(port: port, "/internal/force_flush")
        // /api/v1/export: every sample as stored, with its time.
        var lines: [[String: Any]] = []
        #expect(SinkRunTests.waitUntil(20) {
            let match = "{__name__=~\"vigil_wire_.*\"}".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let body = (try? TestEnv.httpGet(port: port, "/api/v1/export?match[]=\(match)").body) ?? ""
            lines = body.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            return lines.count == 3
        }, "\(lines)")
        for s in series {
            let name = s.labels.first { $0.name == "__name__" }!.value
            let line = try #require(lines.first { ($0["metric"] as? [String: String])?["__name__"] == name })
            let metric = line["metric"] as? [String: String] ?? [:]
            #expect(metric == Dictionary(uniqueKeysWithValues: s.labels.map { ($0.name, $0.value) }))
            #expect((line["timestamps"] as? [Int64]) == s.samples.map(\.time), "\(name)")
            #expect((line["values"] as? [Double]) == s.samples.map(\.value), "\(name)")
        }
    }

    @Test func prometheusReceiverTakesItAndAQueryGivesItBack() throws {
        let prometheus = try #require(PrometheusRunTests.tool("prometheus"), "no prometheus: scripts/test-deps installs it")
        let dir = try TestEnv.tempDir("promrw")
        let port = try ControlTCPRunTests.freePort()
        try TestEnv.write("global: { scrape_interval: 1h }\n", to: dir + "/prometheus.yml")
        let server = try TestEnv.start(prometheus, ["--config.file=\(dir)/prometheus.yml", "--storage.tsdb.path=\(dir)/tsdb",
                                                    "--web.listen-address=127.0.0.1:\(port)", "--web.enable-remote-write-receiver",
                                                    "--log.level=warn"])
        defer {
            server.signal(SIGTERM)
            _ = server.wait(timeout: 30)
        }
        #expect(SinkRunTests.waitUntil(30) { (try? TestEnv.httpGet(port: port, "/-/ready"))?.status == 200 })
        let now = Int64(Date().timeIntervalSince1970) * 1000
        let series = Self.series(now: now)
        let sent = try Self.post(port: port, path: "/api/v1/write", body: try RemoteWriteRequest.body(series))
        #expect(sent.status == 204, "\(sent)")
        for s in series {
            let name = s.labels.first { $0.name == "__name__" }!.value
            // A range selector over the samples' span: each (time, value) as stored.
            let found = PrometheusRunTests.query(port: port, "\(name)[10s]")
            let values = (found.first?["values"] as? [[Any]]) ?? []
            let pairs = values.compactMap { pair -> (Int64, Double)? in
                guard pair.count == 2, let t = pair[0] as? Double, let v = (pair[1] as? String).flatMap(Double.init) else { return nil }
                return (Int64((t * 1000).rounded()), v)
            }
            #expect(pairs.map(\.0) == s.samples.map(\.time), "\(name): \(found)")
            #expect(pairs.map(\.1) == s.samples.map(\.value), "\(name): \(found)")
            #expect((found.first?["metric"] as? [String: String]) == Dictionary(uniqueKeysWithValues: s.labels.map { ($0.name, $0.value) }))
        }
        // A body that is not snappy is refused by the receiver: what the sink will count `rejected`.
        let bad = try Self.post(port: port, path: "/api/v1/write", body: Array("not snappy".utf8))
        #expect(bad.status == 400, "\(bad)")
    }
}
