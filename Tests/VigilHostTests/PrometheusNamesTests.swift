import Foundation
import Logging
import Testing
import VigilABI
import VigilCore
@testable import VigilSinks
@testable import VigilControl
import VigilRuntime

/// A `prometheus` sink's `names:` file: families and labels as the file
/// says (node_exporter's, for the stand-in), read by the manifest's loader
/// with every mistake at its place, and the host's own figures beside the
/// series with `self_metrics: true`.
@Suite(.serialized) struct PrometheusNamesTests {
    static let description = PluginDescription(
        name: "cpu", version: "1", summary: "", abiMajor: 1, abiMinor: 4, options: [],
        events: [
            EventSpec(kind: "seconds", doc: "CPU time", fields: [
                FieldSpec(name: "cpu", type: .int, identity: true),
                FieldSpec(name: "user", type: .double, unit: "seconds", doc: "user time", counter: true),
                FieldSpec(name: "idle", type: .double, unit: "seconds", counter: true),
                FieldSpec(name: "steal_ms", type: .int, unit: "ms", counter: true),
                FieldSpec(name: "online", type: .bool),
            ]),
            EventSpec(kind: "info", doc: "The kernel", fields: [
                FieldSpec(name: "release", type: .string),
                FieldSpec(name: "machine", type: .string),
            ], onChange: true),
        ],
        defaultInterval: 1_000_000_000, polled: true, path: "/x/cpu.so")

    final class Marker: Sendable { static let shared = Marker() }
    static let facts = MonitorFacts(instance: ObjectIdentifier(Marker.shared), description: description, interval: 1_000_000_000, running: true)

    static let file = """
    families:
      - name: node_cpu_seconds_total
        from: cpu.seconds.user
        labels: {cpu: cpu, mode: "=user"}
      - name: node_cpu_seconds_total
        from: cpu.seconds.idle
        labels: {cpu: cpu, mode: "=idle"}
      - name: node_cpu_steal_seconds_total
        from: cpu.seconds.steal_ms
      - name: node_cpu_online
        from: cpu.seconds.online
        type: untyped
        labels: {cpu: cpu, missing: absent_field}
      - name: node_uname_info
        from: cpu.info
        labels: {release: release, machine: machine, sysname: "=Linux"}
    """

    /// The manifest's loader reading a sink whose `names:` is `text`, written beside it.
    static func load(_ text: String, sinkExtra: String = "") throws -> (PrometheusSinkConfig?, [Diagnostic], String) {
        let dir = try TestEnv.tempDir("prom-names")
        try TestEnv.write(text, to: dir + "/names.yaml")
        let manifest = """
        monitors:
          c: { plugin: cpu }
        sinks:
          prom: { type: prometheus, names: names.yaml\(sinkExtra) }
        """
        try TestEnv.write(manifest, to: dir + "/vigil.yaml")
        let loader = ManifestLoader(file: dir + "/vigil.yaml", source: FileManifestSource())
        let (loaded, diagnostics) = loader.load(manifest)
        let config = loaded?.sinks.first?.settings as? PrometheusSinkConfig
        return (config, diagnostics, dir)
    }

    func sink(_ config: PrometheusSinkConfig) throws -> (PrometheusSink, SinkContext, Int) {
        var config = config
        config.listenPort = UInt16(try ControlTCPRunTests.freePort())
        let sink = PrometheusSink(config: config, host: "box", facts: { m, _ in m == "c" ? Self.facts : nil }, selfMetrics: nil)
        sink.bind(logger: Logger(label: "test"))
        return (sink, SinkContext(name: "prom", logger: Logger(label: "test")), try #require(sink.boundPort))
    }

    func seconds(cpu: Int64, user: Double) -> Event {
        Event(time: 0, monitor: "c", plugin: "cpu", kind: "seconds", fields: [
            Field("cpu", .int(cpu)), Field("user", .double(user)), Field("idle", .double(100.5)), Field("steal_ms", .int(2500)),
            Field("online", .bool(true)),
        ])
    }

    @Test func familiesAndLabelsAreTheFilesAndUnmappedFieldsKeepTheirNames() throws {
        let (config, diagnostics, _) = try Self.load(Self.file)
        #expect(diagnostics.filter { $0.level == .error }.isEmpty, "\(diagnostics)")
        let (sink, context, port) = try sink(try #require(config))
        defer { sink.shutdown(context: context) }
        try sink.write([seconds(cpu: 0, user: 12.25), seconds(cpu: 1, user: 3),
                        Event(time: 0, monitor: "c", plugin: "cpu", kind: "info",
                              fields: [Field("release", .string("6.1.0-18-amd64")), Field("machine", .string("x86_64"))])],
                       context: context)
        let body = try TestEnv.httpGet(port: port, "/metrics").body
        // Two fields in one family, told apart by a constant label, in the file's label order.
        #expect(body.contains("# TYPE node_cpu_seconds_total counter\n"), "\(body)")
        #expect(body.contains("node_cpu_seconds_total{cpu=\"0\",mode=\"user\"} 12.25\n"))
        #expect(body.contains("node_cpu_seconds_total{cpu=\"1\",mode=\"user\"} 3\n"))
        #expect(body.contains("node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"} 100.5\n"))
        #expect(body.components(separatedBy: "# TYPE node_cpu_seconds_total").count == 2)
        // No labels listed: the sink's usual ones; the declared unit's scale (ms → s).
        #expect(body.contains("node_cpu_steal_seconds_total{monitor=\"c\",host=\"box\",cpu=\"0\"} 2.5\n"))
        // The type the file says; a label whose field is absent is empty.
        #expect(body.contains("# TYPE node_cpu_online untyped\n"))
        #expect(body.contains("node_cpu_online{cpu=\"0\",missing=\"\"} 1\n"))
        // An info gauge: value 1, labels from the kind's strings and a constant.
        #expect(body.contains("# TYPE node_uname_info gauge\n"))
        #expect(body.contains("node_uname_info{release=\"6.1.0-18-amd64\",machine=\"x86_64\",sysname=\"Linux\"} 1\n"))
        // Nothing of the mapped fields under native names; OpenMetrics names untyped `unknown`.
        #expect(!body.contains("vigil_cpu_seconds_user"))
        let om = try TestEnv.httpGet(port: port, "/metrics", headers: "Accept: application/openmetrics-text; version=1.0.0\r\n").body
        #expect(om.contains("# TYPE node_cpu_seconds counter\n") && om.contains("# TYPE node_cpu_online unknown\n"), "\(om)")
    }

    @Test func unmappedFieldsKeepTheirNativeNamesOrAreDropped() throws {
        let partial = "families:\n  - name: node_cpu_user_seconds_total\n    from: cpu.seconds.user\n"
        for (extra, kept) in [("", true), (", unmapped: drop", false)] {
            let (config, diagnostics, _) = try Self.load(partial, sinkExtra: extra)
            #expect(diagnostics.filter { $0.level == .error }.isEmpty, "\(diagnostics)")
            let (sink, context, port) = try sink(try #require(config))
            try sink.write([seconds(cpu: 0, user: 1)], context: context)
            let body = try TestEnv.httpGet(port: port, "/metrics").body
            sink.shutdown(context: context)
            #expect(body.contains("node_cpu_user_seconds_total{monitor=\"c\",host=\"box\",cpu=\"0\"} 1\n"), "\(body)")
            #expect(body.contains("vigil_cpu_seconds_idle_seconds_total{") == kept, "\(extra): \(body)")
        }
    }

    /// Each mistake at its FILE:LINE:COLUMN, in the names file, and what was right kept.
    @Test func mistakesInTheFileAreReportedWhereTheyAre() throws {
        let bad = """
        families:
          - name: node_ok
            from: cpu.seconds.user
          - name: 9starts_with_a_digit
            from: cpu.seconds.user
          - name: node_x
            from: cpu
          - name: node_y_total
            from: cpu.seconds.user
            type: counted
          - name: node_z
            from: cpu.seconds.user
            labels: {__reserved: cpu}
          - name: node_w
            from: cpu.seconds.user
            type: counter
          - nme: node_v
        """
        let (config, diagnostics, dir) = try Self.load(bad)
        let shown = diagnostics.map(\.description).joined(separator: "\n")
        let file = dir + "/names.yaml"
        #expect(shown.contains("\(file):4:11: error: '9starts_with_a_digit' is not a Prometheus metric name"), "\(shown)")
        #expect(shown.contains("\(file):7:11: error: 'from' is PLUGIN.KIND.FIELD"), "\(shown)")
        #expect(shown.contains("\(file):10:11: error: 'type' must be one of counter, gauge, untyped, not 'counted'"), "\(shown)")
        #expect(shown.contains("\(file):13:14: error: '__reserved' is not a Prometheus label name"), "\(shown)")
        #expect(shown.contains("\(file):16:11: error: a counter's name ends in _total"), "\(shown)")
        #expect(shown.contains("\(file):17:5: error: unknown key 'nme'"), "\(shown)")
        #expect(config?.names?.entries.map(\.name).contains("node_ok") == true)

        let (_, missing, manifestDir) = try Self.load("families: []", sinkExtra: ", self_metrics: yes")
        #expect(missing.filter { $0.level == .error }.isEmpty, "\(missing)")
        try FileManager.default.removeItem(atPath: manifestDir + "/names.yaml")
        let loader = ManifestLoader(file: manifestDir + "/vigil.yaml", source: FileManifestSource())
        let (_, gone) = loader.load(try String(contentsOfFile: manifestDir + "/vigil.yaml", encoding: .utf8))
        #expect(gone.map(\.description).joined().contains("vigil.yaml:4:36: error: cannot read the names file \(manifestDir)/names.yaml"),
                "\(gone)")
    }
}
