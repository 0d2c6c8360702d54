import Foundation
import Logging
import Testing
import VigilABI
import VigilCore
import VigilForeign
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The `prometheus` sink on its own: events in through `write`, the
/// exposition out over real HTTP on loopback.
@Suite(.serialized) struct PrometheusSinkTests {
    static let zone = PluginDescription(
        name: "thermal", version: "1", summary: "", abiMajor: 1, abiMinor: 4, options: [],
        events: [
            EventSpec(kind: "zone", doc: "", fields: [
                FieldSpec(name: "zone", type: .string, identity: true),
                FieldSpec(name: "temperature", type: .double, unit: "celsius", doc: "the temperature"),
                FieldSpec(name: "state", type: .string),
                FieldSpec(name: "hot", type: .bool),
                FieldSpec(name: "trips", type: .int, unit: "count", counter: true),
            ], onChange: true),
            EventSpec(kind: "sample", doc: "", fields: [FieldSpec(name: "load", type: .double, unit: "percent")]),
        ],
        defaultInterval: 1_000_000_000, polled: true, path: "/x/thermal.so")

    /// A sink on a free port whose monitors are `facts`.
    func sink(_ config: PrometheusSinkConfig = PrometheusSinkConfig(), facts: [String: MonitorFacts] = [:]) throws -> (PrometheusSink, SinkContext, Int) {
        var config = config
        config.listenPort = UInt16(try ControlTCPRunTests.freePort())
        let sink = PrometheusSink(config: config, host: "box", facts: { m, _ in facts[m] })
        sink.bind(logger: Logger(label: "test"))
        let port = try #require(sink.boundPort)
        return (sink, SinkContext(name: "prom", logger: Logger(label: "test")), port)
    }

    static let facts = MonitorFacts(instance: ObjectIdentifier(PrometheusSinkTests.Marker.shared), description: zone,
                                    interval: 1_000_000_000, running: true)
    final class Marker: Sendable { static let shared = Marker() }

    func event(_ zone: String, _ t: Double, kind: String = "zone", extra: [Field] = []) -> Event {
        Event(time: 0, monitor: "therm", plugin: "thermal", kind: kind, fields: [
            Field("zone", .string(zone)), Field("temperature", .double(t)), Field("state", .string("nominal")),
            Field("hot", .bool(t > 80)), Field("trips", .int(3)),
        ] + extra)
    }

    @Test func identitiesAreLabelsCountersCountAndStringsStayOut() throws {
        let (sink, context, port) = try sink(facts: ["therm": Self.facts])
        defer { sink.shutdown(context: context) }
        try sink.write([event("cpu \"die\"\n", 41.5), event("nvme", 85)], context: context)
        let reply = try TestEnv.httpGet(port: port, "/metrics")
        #expect(reply.status == 200)
        #expect(reply.head.contains("text/plain; version=0.0.4"))
        let body = reply.body
        #expect(body.contains("# TYPE vigil_thermal_zone_temperature_celsius gauge\n"))
        #expect(body.contains(#"vigil_thermal_zone_temperature_celsius{monitor="therm",host="box",zone="cpu \"die\"\n"} 41.5"#))
        #expect(body.contains(#"vigil_thermal_zone_temperature_celsius{monitor="therm",host="box",zone="nvme"} 85"#))
        #expect(body.contains(#"vigil_thermal_zone_hot{monitor="therm",host="box",zone="nvme"} 1"#))
        #expect(body.contains("# TYPE vigil_thermal_zone_trips_total counter\n"))
        // Strings that are no identity: one info gauge per entity, never a value.
        #expect(body.contains("# TYPE vigil_thermal_zone_info gauge\n"))
        #expect(body.contains(#"vigil_thermal_zone_info{monitor="therm",host="box",zone="nvme",state="nominal"} 1"#))
        #expect(!body.contains("vigil_thermal_zone_state"))
        // One HELP and TYPE per family, its series together.
        #expect(body.components(separatedBy: "# TYPE vigil_thermal_zone_temperature_celsius").count == 2)
        // A new value replaces the line: still one series.
        try sink.write([event("nvme", 90.25)], context: context)
        let again = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(again.contains(#"zone="nvme"} 90.25"#) && !again.contains(#"zone="nvme"} 85"#))
        #expect(sink.series.count == 8)  // temperature, hot, trips and info of two zones
        // A string that changes replaces its entity's info series: still one.
        var hot = event("nvme", 99)
        hot.fields[2] = Field("state", .string("critical"))
        try sink.write([hot], context: context)
        let changed = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(changed.contains(#"vigil_thermal_zone_info{monitor="therm",host="box",zone="nvme",state="critical"} 1"#))
        #expect(!changed.contains(#"zone="nvme",state="nominal""#), "\(changed)")
        #expect(sink.series.count == 8)
    }

    /// A kind with dynamic fields (collectd's value lists) names its
    /// counters in `counters`: those are counters, the rest gauges, even
    /// under one field name.
    @Test func aDynamicKindsCountersAreCounters() throws {
        let collectd = PluginDescription(
            name: "collectd", version: "1", summary: "", abiMajor: 1, abiMinor: 4, options: [],
            events: [EventSpec(kind: "value", doc: "", fields: [FieldSpec(name: "type", type: .string, identity: true)], dynamicFields: true)],
            defaultInterval: 1_000_000_000, polled: true, path: "/x/collectd.so")
        let facts = MonitorFacts(instance: ObjectIdentifier(Self.Marker.shared), description: collectd, interval: 1_000_000_000, running: true)
        let (sink, context, port) = try sink(facts: ["cd": facts])
        defer { sink.shutdown(context: context) }
        func value(_ type: String, _ fields: [Field]) -> Event {
            Event(time: 0, monitor: "cd", plugin: "collectd", kind: "value", fields: [Field("type", .string(type))] + fields)
        }
        try sink.write([value("if_octets", [Field("rx", .int(1000)), Field("tx", .int(2000)), Field("rx_rate", .double(12.5)),
                                            Field("counters", .string("rx,tx"))]),
                        value("cpu", [Field("value", .int(12345)), Field("counters", .string("value"))]),
                        value("temperature", [Field("value", .double(41.5))])], context: context)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(body.contains("# TYPE vigil_collectd_value_rx_total counter\n"), "\(body)")
        #expect(body.contains(#"vigil_collectd_value_rx_total{monitor="cd",host="box",type="if_octets"} 1000"#))
        #expect(body.contains("# TYPE vigil_collectd_value_rx_rate gauge\n"))
        #expect(body.contains(#"vigil_collectd_value_total{monitor="cd",host="box",type="cpu"} 12345"#))
        #expect(body.contains(#"vigil_collectd_value{monitor="cd",host="box",type="temperature"} 41.5"#))
        #expect(!body.contains("rx,tx"))
    }

    /// A kind whose events name their own series (textfile, scrape): served
    /// under that name and those labels, a histogram whole; and what a
    /// hostile plugin could give as a name or labels (not in the
    /// exposition's syntax, or written otherwise than it writes them) is
    /// not served, so the exposition stays valid.
    @Test func seriesThatNameThemselvesPassThroughOrAreRefused() throws {
        let textfile = PluginDescription(
            name: "textfile", version: "1", summary: "", abiMajor: 1, abiMinor: 4, options: [],
            events: [EventSpec(kind: "sample", doc: "", fields: [
                FieldSpec(name: "prometheus_name", type: .string, identity: true),
                FieldSpec(name: "prometheus_labels", type: .string, identity: true),
                FieldSpec(name: "value", type: .double), FieldSpec(name: "type", type: .string), FieldSpec(name: "help", type: .string),
            ])],
            defaultInterval: 1_000_000_000, polled: true, path: "/x/textfile.so")
        let facts = MonitorFacts(instance: ObjectIdentifier(Self.Marker.shared), description: textfile, interval: 1_000_000_000, running: true)
        let (sink, context, port) = try sink(facts: ["tf": facts])
        defer { sink.shutdown(context: context) }
        func sample(_ name: String, _ labels: String, _ value: Double, _ type: String = "gauge", help: String? = "h") -> Event {
            Event(time: 0, monitor: "tf", plugin: "textfile", kind: "sample", fields: [
                Field("prometheus_name", .string(name)), Field("prometheus_labels", .string(labels)), Field("value", .double(value)),
                Field("type", .string(type)),
            ] + (help.map { [Field("help", .string($0))] } ?? []))
        }
        try sink.write([
            sample("jobs_total", #"queue="a\"b""#, 7, "counter", help: "Jobs.\nDone."),
            sample("lat_bucket", #"le="1""#, 3, "histogram"), sample("lat_bucket", #"le="+Inf""#, 4, "histogram"),
            sample("lat_sum", "", 2.5, "histogram"), sample("lat_count", "", 4, "histogram"),
            // Refused: no metric name, labels not in the syntax, written otherwise than the sink writes them.
            sample("1bad", "", 1), sample("bad name", "", 1), sample("ok1", #"a="b"} evil 1\n#"#, 1), sample("ok2", "a=b", 1),
            sample("ok3", #"a="x",a="y""#, 1), sample("ok4", #"a = "b""#, 1), sample("ok5", #"__name__="x""#, 1),
            // Help comes with a name's first sample of a poll: a sink that saw another first takes it when it comes.
            sample("late", #"i="1""#, 1, help: nil), sample("late", #"i="2""#, 2, help: "Late help."),
        ], context: context)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(body.contains("# HELP late Late help.\n# TYPE late gauge\nlate{i=\"1\"} 1\nlate{i=\"2\"} 2\n"), "\(body)")
        #expect(body.contains("# HELP jobs_total Jobs.\\nDone.\n# TYPE jobs_total counter\njobs_total{queue=\"a\\\"b\"} 7\n"), "\(body)")
        #expect(body.contains("# TYPE lat histogram\nlat_bucket{le=\"1\"} 3\nlat_bucket{le=\"+Inf\"} 4\nlat_sum 2.5\nlat_count 4\n"), "\(body)")
        for refused in ["1bad", "bad name", "ok1", "ok2", "ok3", "ok4", "ok5", "evil"] { #expect(!body.contains(refused), "\(refused): \(body)") }
        // The exposition reads back whole, with the one reader of the format.
        let read = try PrometheusExposition.parse(Array(body.utf8))
        #expect(read.families.map(\.name) == ["jobs_total", "lat", "late"])
    }

    @Test func openMetricsWhenAskedAndRefusalsByName() throws {
        let (sink, context, port) = try sink(facts: ["therm": Self.facts])
        defer { sink.shutdown(context: context) }
        try sink.write([event("a", 1)], context: context)
        let om = try TestEnv.httpGet(port: port, "/metrics", headers: "Accept: application/openmetrics-text; version=1.0.0\r\n")
        #expect(om.head.contains("application/openmetrics-text"))
        #expect(om.body.hasSuffix("# EOF\n"))
        #expect(om.body.contains("# TYPE vigil_thermal_zone_trips counter\n"))
        #expect(om.body.contains("vigil_thermal_zone_trips_total{"))
        #expect(try TestEnv.httpGet(port: port, "/nope").status == 404)
        let post = try TestEnv.http(port: port, Array("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi".utf8))
        #expect(post.hasPrefix("HTTP/1.1 405"))
        let head = try TestEnv.http(port: port, Array("HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
        #expect(head.hasPrefix("HTTP/1.1 200") && head.hasSuffix("\r\n\r\n"))
    }

    @Test func unitsAreConvertedAndNumbersReadBack() throws {
        let (sink, context, port) = try sink(facts: ["therm": Self.facts])
        defer { sink.shutdown(context: context) }
        try sink.write([Event(time: 0, monitor: "therm", plugin: "thermal", kind: "sample", fields: [Field("load", .double(12.5))]),
                        event("x", .nan), event("y", .infinity), event("z", 1e300)], context: context)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(body.contains(#"vigil_thermal_load_ratio{monitor="therm",host="box"} 0.125"#))
        #expect(body.contains(#"zone="x"} NaN"#) && body.contains(#"zone="y"} +Inf"#) && body.contains(#"zone="z"} 1e+300"#))
    }

    @Test func seriesExpireUnlessTheirKindIsOnChangeAndTheMonitorRuns() throws {
        var config = PrometheusSinkConfig()
        config.expireAfter = 1_000_000_000
        let (sink, context, _) = try sink(config, facts: ["therm": Self.facts])
        defer { sink.shutdown(context: context) }
        try sink.write([event("a", 1), Event(time: 0, monitor: "therm", plugin: "thermal", kind: "sample", fields: [Field("load", .double(1))])],
                       context: context)
        #expect(sink.series.count == 5)  // the zone's three numbers and its info; the sample's load
        let later = monotonicNanoseconds() + 2_000_000_000
        // The sample kind is not on change: it goes; the zone's series live while therm runs.
        #expect(sink.series.expire(now: later) { $0 == "therm" } == 1)
        #expect(sink.series.count == 4)
        // Once therm stopped, they go expire_after later.
        #expect(sink.series.expire(now: later + 500_000_000) { _ in false } == 0)
        #expect(sink.series.expire(now: later + 1_500_000_000) { _ in false } == 4)
        #expect(sink.series.exposition(openMetrics: false).isEmpty)
    }

    @Test func maxSeriesIsHeldAndTheRefusalsAreCounted() throws {
        var config = PrometheusSinkConfig()
        config.maxSeries = 10
        let (sink, context, port) = try sink(config, facts: ["therm": Self.facts])
        defer { sink.shutdown(context: context) }
        // A plugin inventing identities without end cannot exhaust the host.
        try sink.write((0..<1000).map { event("zone\($0)", 1) }, context: context)
        #expect(sink.series.count == 10)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(body.contains("vigil_prometheus_series_refused_total 3990"), "\(body)")
    }

    @Test func longIdentitiesAreCutSoMaxSeriesBoundsTheMemory() throws {
        let (sink, context, port) = try sink(facts: ["therm": Self.facts])
        defer { sink.shutdown(context: context) }
        try sink.write([event(String(repeating: "é", count: 100_000), 1)], context: context)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        let line = try #require(body.split(separator: "\n").first { $0.hasPrefix("vigil_thermal_zone_temperature_celsius{") })
        #expect(line.utf8.count < 400, "\(line.utf8.count) bytes")
        #expect(line.contains("é…\"}") && !line.contains("\u{FFFD}"))
    }

    @Test func withoutADescriptionNumbersAreGaugesAndTheHostsOwnEventsAreLeftOut() throws {
        let (sink, context, port) = try sink()
        defer { sink.shutdown(context: context) }
        try sink.write([Event(time: 0, monitor: "rule1", plugin: "rule", kind: "fired", fields: [Field("level", .int(2)), Field("why", .string("x"))]),
                        Event(time: 0, monitor: "vigil", plugin: "vigil", kind: "started", fields: [Field("pid", .int(9))])],
                       context: context)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(body.contains(#"vigil_rule_fired_level{monitor="rule1",host="box"} 2"#))
        #expect(!body.contains("pid"))
    }

    /// Behind its runner, the sink's thread is not woken for a poll's few
    /// events (nothing is written for a while), yet a scrape serves them:
    /// it has the thread write what was queued before answering.
    @Test func aScrapeServesWhatWasQueuedJustBeforeIt() throws {
        var config = PrometheusSinkConfig()
        config.listenPort = UInt16(try ControlTCPRunTests.freePort())
        let sink = PrometheusSink(config: config, host: "box", facts: { _, _ in nil })
        let runner = SinkRunner(config: SinkConfig(name: "prom", settings: config, location: SourceLocation(file: "m", line: 1, column: 1)),
                                sink: sink, logger: Logger(label: "test"))
        sink.bind(logger: Logger(label: "test"))
        let port = try #require(sink.boundPort)
        runner.start()
        defer { Task { await runner.stop(drainTimeout: 1_000_000_000) } }
        for _ in 0..<1000 where !runner.queue.consumerWaiting { usleep(5_000) }  // its thread asleep on the empty queue
        for (i, t) in [41.5, 42.5].enumerated() {
            runner.queue.push(Event(time: 0, monitor: "therm", plugin: "thermal", kind: "sample", seq: UInt64(i + 1),
                                    fields: [Field("load", .double(t))]))
        }
        usleep(200_000)
        #expect(runner.stats.written == 0, "the sink's thread was woken for two events")
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        #expect(body.contains(#"vigil_thermal_load{monitor="therm",host="box"} 42.5"#), "\(body)")
        #expect(runner.stats.written == 2)
        // The control API's /metrics drains too.
        runner.queue.push(Event(time: 0, monitor: "therm", plugin: "thermal", kind: "sample", seq: 3, fields: [Field("load", .double(43.5))]))
        #expect(runner.drain(timeout: 5_000_000_000))
        var bytes: [UInt8] = []
        sink.appendExposition(to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self).contains("} 43.5"))
    }

    /// A histogram's family (its samples named apart from it) that expired
    /// and came back is served again, by a writer that kept it and by one
    /// that did not. It was left in the table of families by the name of
    /// its first sample, not its family's, so the samples that came back
    /// went to a family no longer served.
    @Test func aHistogramThatExpiredAndCameBackIsServed() {
        let series = PrometheusSeries(maxSeries: 100)
        let bucket = PrometheusNaming.Shape(name: "rq_seconds_bucket", family: "rq_seconds", kind: .histogram, scale: 1, help: "")
        let count = PrometheusNaming.Shape(name: "rq_seconds_count", family: "rq_seconds", kind: .histogram, scale: 1, help: "")
        var kept: PrometheusSeries.Family?
        func write(at now: Int64) {
            series.update { u in
                _ = u.set(bucket, family: &kept, labels: #"le="1""#, value: Array("3".utf8)[...], now: now, ttl: 10,
                          monitor: "m", onChange: false, limit: 100)
                _ = u.set(count, labels: "", value: Array("3".utf8)[...], now: now, ttl: 10, monitor: "m", onChange: false, limit: 100)
            }
        }
        write(at: 0)
        #expect(series.expire(now: 100) { _ in false } == 2)
        #expect(series.count == 0)
        write(at: 200)
        let text = String(decoding: series.exposition(openMetrics: false), as: UTF8.self)
        #expect(text.contains("rq_seconds_bucket{le=\"1\"} 3\n") && text.contains("rq_seconds_count 3\n"), "\(text)")
        #expect(series.count == 2)
    }

    @Test func aPortInUseIsReportedAndRetried() throws {
        let holder = try Sockets.listen(.tcp(host: "127.0.0.1", port: 0), backlog: 1)
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(holder, $0, &length) }
        }
        var config = PrometheusSinkConfig()
        config.listenPort = UInt16(bigEndian: address.sin_port)
        let sink = PrometheusSink(config: config, host: "box", facts: { _, _ in nil })
        sink.bind(logger: Logger(label: "test"))
        #expect(sink.boundPort == nil)
        #expect(sink.tickInterval == 5_000_000_000)
        close(holder)
        sink.bind(logger: Logger(label: "test"))
        #expect(sink.boundPort == Int(config.listenPort))
        sink.shutdown(context: SinkContext(name: "prom", logger: Logger(label: "test")))
    }
}
