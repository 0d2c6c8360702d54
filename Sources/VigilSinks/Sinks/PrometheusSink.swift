import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import VigilABI
import VigilCore
import VigilForeign
import VigilIsolation

/// What a sink that keeps series needs to know of the monitor an event
/// came from: its plugin's self-description (units, identities, counters,
/// on-change kinds), its interval and whether it runs.
package struct MonitorFacts: Sendable {
    let instance: ObjectIdentifier
    let description: PluginDescription
    let interval: Int64
    let running: Bool

    package init(instance: ObjectIdentifier, description: PluginDescription, interval: Int64, running: Bool) {
        self.instance = instance
        self.description = description
        self.interval = interval
        self.running = running
    }
}

/// Whoever knows the running monitors (the runtime).
package protocol MonitorFactsSource: AnyObject, Sendable {
    /// The facts of the current instance of each monitor, by name.
    func monitorFacts() -> [String: MonitorFacts]
    /// The facts of the current instance of one monitor (a sink asks for
    /// those its batch names, not for all).
    func monitorFacts(of monitor: String) -> MonitorFacts?
    /// The host's own figures in Prometheus' text format (the control API's
    /// `/metrics` without the sinks' series).
    func selfMetrics() -> [UInt8]
}

/// The running monitors, as sinks see them: set once the runtime exists,
/// read by a sink's thread (once per batch) and its tick.
package final class MonitorDirectory: Sendable {
    private let source = Mutex<WeakSource>(WeakSource())
    private struct WeakSource { weak var value: (any MonitorFactsSource)? }

    package init() {}

    package func attach(_ source: any MonitorFactsSource) { self.source.withLock { $0.value = source } }

    /// The facts of the current instance of each monitor named.
    package func facts() -> [String: MonitorFacts] {
        source.withLock { $0.value }?.monitorFacts() ?? [:]
    }

    /// The facts of the current instance of `monitor`, if it has one.
    package func facts(of monitor: String) -> MonitorFacts? {
        source.withLock { $0.value }?.monitorFacts(of: monitor)
    }

    /// The host's own figures (none before the runtime is attached).
    package func selfMetrics() -> [UInt8] {
        source.withLock { $0.value }?.selfMetrics() ?? []
    }
}

/// `type: prometheus`: every numeric and boolean field of the events routed
/// to it as a Prometheus series, served at `/metrics` on `listen` (and on
/// the control API's `/metrics`). Names follow `PrometheusNaming`; labels
/// are `monitor`, `host` and the fields the plugin marks as identities.
/// Fields marked as counters are counters, every other number a gauge, a
/// boolean 0 or 1; strings that are no identity are not exposed.
///
/// A series goes `expire_after` after the last event that carried it
/// (default five of its monitor's intervals, five minutes for a monitor
/// that is not polled); one of a kind emitted on change lives while its
/// monitor runs, since silence means its value still holds.
///
/// The host's own events (monitor `vigil`) are not exposed: their figures
/// are the control API's `/metrics`.
///
/// Best-effort by nature: Prometheus pulls the latest value, so an event
/// counts as written once its values are in the exposition.
package final class PrometheusSink: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread; the HTTP server reads only `series`, under its lock
    let config: PrometheusSinkConfig
    let host: String
    let series: PrometheusSeries
    /// A running monitor's facts, asked once per batch for each monitor in
    /// it, and at a tick for those whose series live while they run.
    private let facts: @Sendable (String) -> MonitorFacts?
    /// The host's own figures, asked at each scrape (`self_metrics: true`).
    private let selfMetrics: (@Sendable () -> [UInt8])?
    private var server: MetricsHTTPServer?
    private var lastBindAttempt: Int64 = 0
    private var loggedBindFailure = false
    /// Per monitor and kind: the family of each field, for the instance it was made for.
    private var plans: [String: [String: KindPlan]] = [:]
    private var loggedRefusal = false

    /// Where one field's value goes: a family, under the sink's usual
    /// labels (`labels` nil) or the ones a `names:` entry lists. A class, so
    /// that a value's way out is one reference, and the family it found is
    /// kept for the next value (only inside `series.update`, under its lock).
    package final class Output: @unchecked Sendable {  // `family` is read and written only by the sink's thread inside `series.update`
        let shape: PrometheusNaming.Shape
        let labels: [PrometheusNameMap.Label]?
        var family: PrometheusSeries.Family?

        init(shape: PrometheusNaming.Shape, labels: [PrometheusNameMap.Label]?) {
            self.shape = shape
            self.labels = labels
        }
    }

    package final class KindPlan {
        let instance: ObjectIdentifier?
        /// Per field: where its value goes (none: not served).
        var fields: [String: [Output]] = [:]
        /// The same for the undeclared fields an event names as counters.
        var counterFields: [String: [Output]] = [:]
        /// The fields of the kind's last event in their order, and where
        /// each goes: a monitor emits a kind's fields in the same order
        /// poll after poll, so a field is found by its place (and its name
        /// compared), not hashed into `fields`.
        var layout: [(name: String, outputs: [Output])] = []
        let identities: [(field: String, label: String)]
        /// The info gauges `names:` makes of the kind.
        let infos: [Output]
        /// The native info gauge of a kind with strings that are no
        /// identity (`vigil_system_device_info{kernel_release=…}`), and those strings.
        let nativeInfo: (shape: PrometheusNaming.Shape, fields: [(field: String, label: String)])?
        let onChange: Bool
        let ttl: Int64
        let specs: [String: FieldSpec]
        let mapped: [PrometheusNameMap.Entry]
        /// Of a kind with dynamic fields (VIGIL_EVENT_DYNAMIC_FIELDS).
        let dynamic: Bool
        /// Of a kind whose events name their own series (`prometheus_name`,
        /// `prometheus_labels`: textfile, scrape): served as they say.
        let passThrough: Bool
        /// Pass-through families by sample name, and the label texts found valid.
        var passThroughShapes: [String: PrometheusNaming.Shape] = [:]
        var validLabels: Set<String> = []

        init(instance: ObjectIdentifier?, identities: [(field: String, label: String)], infos: [Output],
             nativeInfo: (shape: PrometheusNaming.Shape, fields: [(field: String, label: String)])?, onChange: Bool,
             ttl: Int64, specs: [String: FieldSpec], mapped: [PrometheusNameMap.Entry], dynamic: Bool, passThrough: Bool = false) {
            self.instance = instance
            self.identities = identities
            self.infos = infos
            self.nativeInfo = nativeInfo
            self.onChange = onChange
            self.ttl = ttl
            self.specs = specs
            self.mapped = mapped
            self.dynamic = dynamic
            self.passThrough = passThrough
        }
    }

    /// The fields by which an event names its own series.
    static let passThroughName = "prometheus_name", passThroughLabels = "prometheus_labels"

    /// The string field in which an event of a dynamic kind names its counters.
    static let countersField = "counters"

    init(config: PrometheusSinkConfig, host: String, facts: @escaping @Sendable (String) -> MonitorFacts?,
         selfMetrics: (@Sendable () -> [UInt8])? = nil) {
        self.config = config
        self.host = host
        self.facts = facts
        self.selfMetrics = selfMetrics
        self.series = PrometheusSeries(maxSeries: config.maxSeries)
    }

    /// The series as the control API's `/metrics` appends them.
    package func appendExposition(to bytes: inout [UInt8]) { bytes += series.exposition(openMetrics: false) }

    /// Binds now, so that an address that cannot be had is reported when
    /// the host starts; retried every 5 s after.
    package func bind(logger: Logger) {
        guard server == nil else { return }
        lastBindAttempt = monotonicNanoseconds()
        do {
            let drain = self.drain.withLock { $0 }
            server = try MetricsHTTPServer(host: config.listenHost, port: config.listenPort, series: series, extra: selfMetrics,
                                           drain: drain)
            if loggedBindFailure { logger.notice("serving /metrics on \(server!.shown)") } else {
                logger.info("serving /metrics on \(server!.shown)")
            }
            loggedBindFailure = false
        } catch {
            if !loggedBindFailure { logger.error("cannot listen on tcp://\(config.listenHost):\(config.listenPort): \(error); retrying every 5s") }
            loggedBindFailure = true
        }
    }

    /// Its events are needed only by a scrape, which has the sink's thread
    /// write what was queued before it first (`drain`): the thread is not
    /// woken for each poll's few events.
    package var needsEventsPromptly: Bool { false }

    /// Set once, before the sink runs (`attach(drain:)`); read by the HTTP server's threads.
    private let drain = Mutex<(@Sendable (@escaping @Sendable () -> Void) -> Void)?>(nil)

    package func attach(drain: @escaping @Sendable (_ then: @escaping @Sendable () -> Void) -> Void) {
        self.drain.withLock { $0 = drain }
    }

    /// The port served (tests bind port 0).
    var boundPort: Int? { server?.port }

    /// Expiry once a second, which also writes what was queued since the
    /// last (its thread is not woken for events: `needsEventsPromptly`), so
    /// that the sink's figures and series are never more than a second
    /// behind without a scrape; a bind retried every 5 s.
    package var tickInterval: Int64 {
        server == nil ? 5_000_000_000 : 1_000_000_000
    }

    package func tick(context: SinkContext) {
        if server == nil, monotonicNanoseconds() - lastBindAttempt >= 5_000_000_000 { bind(logger: context.logger) }
        series.expire(now: monotonicNanoseconds()) { facts($0)?.running == true }
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        var known: [String: MonitorFacts?] = [:]
        func facts(of monitor: String) -> MonitorFacts? {
            if let asked = known[monitor] { return asked }
            let asked = self.facts(monitor)
            known[monitor] = asked
            return asked
        }
        let now = monotonicNanoseconds()
        let limit = config.maxSeries
        var value: [UInt8] = []
        value.reserveCapacity(32)
        series.update { updater in
            // The host's own events (started, reloaded…) are figures of the
            // control API's /metrics, not values to keep.
            for event in batch where event.monitor != Manifest.hostMonitorName {
                let plan = self.plan(for: event, facts: facts(of: event.monitor))
                if plan.passThrough {
                    guard let (shape, labels, number) = Self.passThrough(event, plan: plan) else { continue }
                    value.removeAll(keepingCapacity: true)
                    Self.appendNumber(number, to: &value)
                    _ = updater.set(shape, labels: labels, value: value[...], now: now, ttl: plan.ttl, monitor: event.monitor,
                                    onChange: false, limit: limit)
                    continue
                }
                // Each label set made once per event: the usual labels, and
                // each set a names file lists (the many families of one
                // kind mostly list the same, `device` or `cpu` and `mode`).
                var usual: String?
                var made: [(listed: [PrometheusNameMap.Label], text: String)] = []
                func labels(_ listed: [PrometheusNameMap.Label]?) -> String {
                    guard let listed else {
                        if let usual { return usual }
                        let text = self.usualLabels(event, plan)
                        usual = text
                        return text
                    }
                    if let known = made.first(where: { $0.listed == listed }) { return known.text }
                    let text = Self.labels(listed, of: event)
                    made.append((listed, text))
                    return text
                }
                if let native = plan.nativeInfo {
                    let entity = labels(nil)
                    var all = entity
                    for (field, label) in native.fields {
                        PrometheusSeries.appendLabel(label, Self.labelText(event[field: field]), to: &all)
                    }
                    updater.setInfo(native.shape, entity: entity, labels: all, now: now, ttl: plan.ttl, monitor: event.monitor,
                                    onChange: plan.onChange, limit: limit)
                }
                for info in plan.infos {
                    _ = updater.set(info.shape, family: &info.family, labels: labels(info.labels), value: [UInt8(ascii: "1")],
                                    now: now, ttl: plan.ttl, monitor: event.monitor, onChange: plan.onChange, limit: limit)
                }
                // A kind with dynamic fields names its undeclared counters
                // in `counters` (VIGIL_EVENT_DYNAMIC_FIELDS): such a field is
                // planned apart from a gauge of the same name.
                var counters: Substring?
                if plan.dynamic, case .string(let list)? = event[field: Self.countersField] { counters = list[...] }
                for (place, field) in event.fields.enumerated() {
                    let counter = counters.map { list in
                        plan.specs[field.name] == nil && list.split(separator: ",").contains { $0 == field.name }
                    } ?? false
                    let outputs: [Output]
                    if counters == nil, place < plan.layout.count, plan.layout[place].name == field.name {
                        outputs = plan.layout[place].outputs
                    } else {
                        if let known = counter ? plan.counterFields[field.name] : plan.fields[field.name] {
                            outputs = known
                        } else {
                            outputs = self.outputs(event: event, field: field, plan: plan, counter: counter)
                            if counter { plan.counterFields[field.name] = outputs } else { plan.fields[field.name] = outputs }
                        }
                        if counters == nil {
                            if place < plan.layout.count { plan.layout[place] = (field.name, outputs) } else { plan.layout.append((field.name, outputs)) }
                        }
                    }
                    for output in outputs {
                        let scale = output.shape.scale
                        value.removeAll(keepingCapacity: true)
                        switch field.value {
                        case .int(let i) where scale == 1: Self.appendInteger(i, to: &value)
                        case .int(let i): Self.appendNumber(Double(i) * scale, to: &value)
                        case .double(let d): Self.appendNumber(scale == 1 ? d : d * scale, to: &value)
                        case .bool(let b): value.append(b ? UInt8(ascii: "1") : UInt8(ascii: "0"))
                        case .string: continue
                        }
                        _ = updater.set(output.shape, family: &output.family, labels: labels(output.labels), value: value[...],
                                        now: now, ttl: plan.ttl, monitor: event.monitor, onChange: plan.onChange, limit: limit)
                    }
                }
            }
        }
        if !loggedRefusal, series.refused > 0 {
            loggedRefusal = true
            context.logger.warning("\(limit) series held (max_series): new series are not made; counted in the exposition as vigil_prometheus_series_refused_total")
        }
    }

    /// A series an event names itself: its family (by `prometheus_name`,
    /// with the `type` and `help` fields), its labels exactly as
    /// `prometheus_labels` gives them, and its value; nil when the name or
    /// the labels are not valid in the exposition (checked once each, with
    /// the one reader of the format) or there is no number.
    static func passThrough(_ event: Event, plan: KindPlan) -> (PrometheusNaming.Shape, String, Double)? {
        guard case .string(let name)? = event[field: passThroughName],
              case .string(let labels)? = event[field: passThroughLabels] else { return nil }
        let number: Double
        switch event[field: "value"] {
        case .double(let d)?: number = d
        case .int(let i)?: number = Double(i)
        default: return nil
        }
        let shape: PrometheusNaming.Shape
        if let known = plan.passThroughShapes[name] {
            shape = known
        } else {
            guard PrometheusNaming.isValidMetricName(name) else { return nil }
            var kind = PrometheusNaming.MetricKind.untyped
            if case .string(let type)? = event[field: "type"] { kind = PrometheusNaming.MetricKind(rawValue: type) ?? .untyped }
            var help = ""
            if case .string(let text)? = event[field: "help"] { help = text }
            var family = name
            if kind == .counter, name.hasSuffix("_total") { family = String(name.dropLast(6)) }
            if kind.isWhole, let suffix = ["_bucket", "_sum", "_count", "_created"].first(where: { name.hasSuffix($0) }) {
                family = String(name.dropLast(suffix.count))
            }
            shape = PrometheusNaming.Shape(name: name, family: family, kind: kind, scale: 1, help: help)
            if plan.passThroughShapes.count < 100_000 { plan.passThroughShapes[name] = shape }
        }
        if !plan.validLabels.contains(labels) {
            // Read back and written again by the one writer of such label sets: the same text or refused.
            guard let read = try? PrometheusExposition.parse(Array("x{\(labels)} 0\n".utf8)).families.first?.samples.first,
                  PrometheusExposition.labelText(read.labels) == labels else { return nil }
            if plan.validLabels.count < 100_000 { plan.validLabels.insert(labels) }
        }
        return (shape, labels, number)
    }

    /// `monitor`, `host`, then the kind's identities.
    private func usualLabels(_ event: Event, _ plan: KindPlan) -> String {
        var labels = ""
        PrometheusSeries.appendLabel("monitor", event.monitor, to: &labels)
        PrometheusSeries.appendLabel("host", host, to: &labels)
        for (field, label) in plan.identities {
            PrometheusSeries.appendLabel(label, Self.labelText(event[field: field]), to: &labels)
        }
        return labels
    }

    /// The labels a `names:` entry lists, from the event's fields and constants.
    static func labels(_ listed: [PrometheusNameMap.Label], of event: Event) -> String {
        var labels = ""
        for label in listed {
            switch label.source {
            case .constant(let text): PrometheusSeries.appendLabel(label.name, text, to: &labels)
            case .field(let name): PrometheusSeries.appendLabel(label.name, labelText(event[field: name]), to: &labels)
            }
        }
        return labels
    }

    /// A field's value as a label's: a string (cut at `maxLabelBytes`), a
    /// number as the exposition writes one, a bool as 0 or 1; empty when absent.
    static func labelText(_ value: FieldValue?) -> String {
        switch value {
        case .string(let s): return labelValue(s)
        case .int(let i): return String(i)
        case .double(let d):
            var bytes: [UInt8] = []
            appendNumber(d, to: &bytes)
            return String(decoding: bytes, as: UTF8.self)
        case .bool(let b): return b ? "1" : "0"
        case nil: return ""
        }
    }

    /// The longest label value kept, in bytes: with `max_series` it bounds
    /// the memory a plugin's identities can take (a longer one is cut on a
    /// character boundary and ends in `…`).
    static let maxLabelBytes = 256

    static func labelValue(_ s: String) -> String {
        guard s.utf8.count > maxLabelBytes else { return s }
        var out = ""
        for c in s.unicodeScalars {
            if out.utf8.count + c.utf8.count > maxLabelBytes - 3 { break }
            out.unicodeScalars.append(c)
        }
        return out + "…"
    }

    /// How the fields of an event of this monitor and kind are exposed.
    private func plan(for event: Event, facts: MonitorFacts?) -> KindPlan {
        if let plan = plans[event.monitor]?[event.kind], plan.instance == facts?.instance { return plan }
        let spec = facts?.description.events.first { $0.kind == event.kind }
            ?? PluginDescription.hostKinds.first { $0.kind == event.kind && facts != nil }
        var specs: [String: FieldSpec] = [:]
        for field in spec?.fields ?? [] { specs[field.name] = field }
        let identities = (spec?.fields ?? []).filter(\.identity).map { ($0.name, PrometheusNaming.labelName($0.name)) }
        let interval = facts?.interval ?? 0
        let ttl = config.expireAfter ?? (interval > 0 ? interval.multipliedSaturating(by: 5) : 300_000_000_000)
        let mapped = config.names?.entries(plugin: event.plugin, kind: event.kind) ?? []
        let infos = mapped.filter { $0.field == nil }.map { entry in
            Output(shape: PrometheusNaming.Shape(name: entry.name, family: entry.name, kind: .gauge, scale: 1,
                                                 help: entry.help ?? (spec.map { $0.doc.isEmpty ? "" : $0.doc + " " } ?? "") + "(\(entry.plugin) \(entry.kind))"),
                   labels: entry.labels)
        }
        // A kind's strings that are no identity: one info gauge, unless a
        // names file says what to make of the kind or serves only what it names.
        var nativeInfo: (shape: PrometheusNaming.Shape, fields: [(field: String, label: String)])?
        let strings = (spec?.fields ?? []).filter { $0.type == .string && !$0.identity }
        if !strings.isEmpty, mapped.isEmpty, !(config.names != nil && config.dropUnmapped),
           let shape = PrometheusNaming.infoShape(plugin: event.plugin, kind: event.kind, doc: spec?.doc ?? "") {
            let taken = Set(["monitor", "host"] + identities.map(\.1))
            nativeInfo = (shape, strings.map { ($0.name, PrometheusNaming.labelName($0.name)) }.filter { !taken.contains($0.1) })
        }
        let plan = KindPlan(instance: facts?.instance, identities: identities, infos: infos, nativeInfo: nativeInfo,
                            onChange: spec?.onChange == true, ttl: ttl, specs: specs, mapped: mapped,
                            dynamic: spec?.dynamicFields == true,
                            passThrough: specs[Self.passThroughName]?.type == .string && specs[Self.passThroughLabels]?.type == .string)
        plans[event.monitor, default: [:]][event.kind] = plan
        return plan
    }

    /// Where a field goes: the families `names:` makes of it, else its
    /// native family (unless `unmapped: drop`); strings go nowhere.
    private func outputs(event: Event, field: Field, plan: KindPlan, counter: Bool = false) -> [Output] {
        var isBool = false
        switch field.value {
        case .string: return []
        case .bool: isBool = true
        default: break
        }
        let spec = plan.specs[field.name] ?? (counter ? FieldSpec(name: field.name, type: .int, counter: true) : nil)
        let entries = plan.mapped.filter { $0.field == field.name }
        if !entries.isEmpty {
            return entries.map { Output(shape: PrometheusNaming.shape(mapped: $0, spec: spec, valueIsBool: isBool), labels: $0.labels) }
        }
        if config.names != nil && config.dropUnmapped { return [] }
        guard let shape = PrometheusNaming.shape(plugin: event.plugin, kind: event.kind, field: field.name, spec: spec, valueIsBool: isBool)
        else { return [] }
        return [Output(shape: shape, labels: nil)]
    }

    /// A float as both formats read it: `NaN`, `+Inf`, `-Inf`, else the
    /// shortest text that reads back as the same Double.
    static func appendNumber(_ d: Double, to out: inout [UInt8]) {
        if d.isNaN { out += "NaN".utf8; return }
        if d.isInfinite { out += (d > 0 ? "+Inf" : "-Inf").utf8; return }
        if d == d.rounded(.towardZero), abs(d) < 1e15 {
            appendInteger(Int64(d), to: &out)
        } else {
            out += d.description.utf8
        }
    }

    /// An integer's decimal digits, written without making a String.
    static func appendInteger(_ i: Int64, to out: inout [UInt8]) {
        if i < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = i.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 20 digits at most, kept in 24 bytes
        let count = withUnsafeMutableBytes(of: &digits) { buffer -> Int in
            var n = 0
            repeat {
                buffer[buffer.count - 1 - n] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                n += 1
            } while magnitude > 0
            return n
        }
        withUnsafeBytes(of: &digits) { out += $0[($0.count - count)...] }
    }

    package func shutdown(context: SinkContext) {
        server?.close()
        server = nil
    }
}

/// The `prometheus` sink's HTTP/1.1 listener (SwiftNIO): `GET /metrics`
/// answered on the event loop from the cached exposition, OpenMetrics when
/// the scraper's `Accept` asks for it; at most 64 connections, idle ones
/// closed after 30 s.
package final class MetricsHTTPServer: @unchecked Sendable {  // immutable after init
    private let group: MultiThreadedEventLoopGroup
    private let channel: Channel
    let port: Int
    let shown: String

    init(host: String, port: UInt16, series: PrometheusSeries, extra: (@Sendable () -> [UInt8])? = nil,
         drain: (@Sendable (@escaping @Sendable () -> Void) -> Void)? = nil) throws {
        group = MultiThreadedEventLoopGroup.singleton  // the process's one event-loop group, never shut down
        do {
            let address = try NIOCore.SocketAddress.makeAddressResolvingHost(host, port: Int(port))
            channel = try HTTPServing.bootstrap(group, maxConnections: 64, idleTimeout: .seconds(30)) {
                MetricsHTTPHandler(series: series, extra: extra, drain: drain)
            }
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 64)
            .bind(to: address)
            .wait()
        } catch {
            throw error
        }
        self.port = channel.localAddress?.port ?? Int(port)
        shown = "http://\(host.contains(":") ? "[\(host)]" : host):\(self.port)/metrics"
    }

    func close() {
        try? channel.close().wait()
    }
}

private final class MetricsHTTPHandler: ChannelInboundHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    package typealias InboundIn = HTTPServerRequestPart
    package typealias OutboundOut = HTTPServerResponsePart

    static let textType = "text/plain; version=0.0.4; charset=utf-8"
    static let openMetricsType = "application/openmetrics-text; version=1.0.0; charset=utf-8"
    /// What an Accept header that asks for OpenMetrics holds (looked for as
    /// bytes: Foundation's `contains` bridges the header through NSString).
    static let openMetricsName = Array("application/openmetrics-text".utf8)

    private let series: PrometheusSeries
    /// The host's own figures, served before the series (text format only).
    private let extra: (@Sendable () -> [UInt8])?
    /// Has the sink's thread write what was queued, then calls back (nil:
    /// the series are served as they are).
    private let drain: (@Sendable (@escaping @Sendable () -> Void) -> Void)?
    private var head: HTTPRequestHead?

    /// How long a scrape waits for the sink's thread to write what was
    /// queued before it; past it, the series are served as they are (up to
    /// a tick behind). A second: under CI's load the thread was not run
    /// within 100 ms, and a scrape then served a poll 2 s old.
    static let drainWait: TimeAmount = .seconds(1)

    init(series: PrometheusSeries, extra: (@Sendable () -> [UInt8])?,
         drain: (@Sendable (@escaping @Sendable () -> Void) -> Void)?) {
        self.series = series
        self.extra = extra
        self.drain = drain
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent { context.close(promise: nil) } else { context.fireUserInboundEventTriggered(event) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h
        case .body: break  // a scrape has no body; whatever comes is not kept
        case .end:
            guard let head else { return }
            self.head = nil
            let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
            guard head.method == .GET || head.method == .HEAD else {
                respond(context, head, status: .methodNotAllowed, type: "text/plain; charset=utf-8",
                        body: Array("only GET and HEAD are served\n".utf8), extra: [("Allow", "GET, HEAD")])
                return
            }
            switch path {
            case "/metrics":
                guard let drain else {
                    serveMetrics(context, head)
                    return
                }
                // The events queued before the scrape, written first: once
                // the sink's thread says so, or after `drainWait`, whichever
                // comes first (the other finds it done).
                let loop = context.eventLoop
                let bound = NIOLoopBound((self, context), eventLoop: loop)
                let answered = Atomic<Bool>(false)
                let serve: @Sendable () -> Void = {
                    loop.execute {
                        guard !answered.exchange(true, ordering: .relaxed) else { return }
                        let (handler, context) = bound.value
                        handler.serveMetrics(context, head)
                    }
                }
                loop.scheduleTask(in: Self.drainWait, serve)
                drain(serve)
            case "/":
                respond(context, head, status: .ok, type: "text/plain; charset=utf-8",
                        body: Array("vigil: the events' values are at /metrics\n".utf8))
            default:
                respond(context, head, status: .notFound, type: "text/plain; charset=utf-8",
                        body: Array("not found: the values are at /metrics\n".utf8))
            }
        }
    }

    private func serveMetrics(_ context: ChannelHandlerContext, _ head: HTTPRequestHead) {
        // The host's figures are written in the text format only, so
        // a sink that serves them answers in it whatever is asked.
        if let extra {
            respond(context, head, status: .ok, type: Self.textType, body: extra() + series.exposition(openMetrics: false))
            return
        }
        let openMetrics = head.headers["Accept"].contains { $0.utf8.contains(Self.openMetricsName) }
        respond(context, head, status: .ok, type: openMetrics ? Self.openMetricsType : Self.textType,
                body: series.exposition(openMetrics: openMetrics))
    }

    private func respond(_ context: ChannelHandlerContext, _ head: HTTPRequestHead, status: HTTPResponseStatus, type: String,
                         body: [UInt8], extra: [(String, String)] = []) {
        var out = HTTPResponseHead(version: head.version, status: status)
        out.headers.add(name: "Content-Type", value: type)
        out.headers.add(name: "Content-Length", value: "\(body.count)")
        for (name, value) in extra { out.headers.add(name: name, value: value) }
        let keepAlive = head.isKeepAlive
        if !keepAlive { out.headers.add(name: "Connection", value: "close") }
        // A scraper that does not read its answers (pipelined requests, a
        // full socket) gets no more of them: the connection closes rather
        // than queue a copy of the exposition per request.
        guard context.channel.isWritable else {
            context.close(promise: nil)
            return
        }
        context.write(wrapOutboundOut(.head(out)), promise: nil)
        if head.method != .HEAD {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { bound.value.close(promise: nil) }
        }
    }
}

/// `type: prometheus`: the events' numbers as series at
/// `http://listen/metrics`.
package struct PrometheusSinkConfig: Sendable, Equatable {
    package static let defaultPort: UInt16 = 9798
    package var listenHost = "127.0.0.1"
    package var listenPort: UInt16 = PrometheusSinkConfig.defaultPort
    /// A series goes this long after the last event that carried it; nil:
    /// five of its monitor's intervals (five minutes for one not polled).
    package var expireAfter: Int64?
    /// The most series held; past it new series are not made (counted).
    package var maxSeries = 100_000
    /// Where `listen` is written.
    package var listenLocation: SourceLocation?
    /// `names:`: the families fields become instead of their native names.
    package var names: PrometheusNameMap?
    /// The file `names:` was read from, as written, and where it is written.
    package var namesFile: String?
    package var namesLocation: SourceLocation?
    /// `unmapped: drop`: with `names:`, a field the file does not name is not served.
    package var dropUnmapped = false
    /// `self_metrics: true`: the host's own figures (the control API's
    /// `/metrics`) are served beside the events' values.
    package var selfMetrics = false
    package init() {}
}

extension PrometheusSinkConfig: SinkType {
    package static let type = "prometheus"
    package static let keys = ["listen", "expire_after", "max_series", "names", "unmapped", "self_metrics"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> PrometheusSinkConfig? {
        let keys = sink.keys
        var config = PrometheusSinkConfig()
        if let node = keys["listen"] {
            config.listenLocation = node.location
            guard let address = d.address(node, what: "'listen'") else { return nil }
            guard case .tcp(let host, let port) = address else {
                d.error(node.location, "a prometheus sink listens on tcp://HOST:PORT (Prometheus scrapes over TCP), not \(address)",
                        hint: "listen: \"tcp://127.0.0.1:\(PrometheusSinkConfig.defaultPort)\"")
                return nil
            }
            config.listenHost = host
            config.listenPort = port
        }
        if let node = keys["expire_after"], let ns = d.duration(node, what: "'expire_after'") {
            if ns < 1_000_000_000 {
                d.error(node.location, "'expire_after' must be at least 1s (series are swept once a second)")
            } else {
                config.expireAfter = ns
            }
        }
        if let node = keys["max_series"], let n = d.int(node, what: "'max_series'", in: 1...10_000_000, unit: " series") {
            config.maxSeries = Int(n)
        }
        if let node = keys["names"], let path = d.string(node, what: "'names'") {
            config.namesFile = path
            config.namesLocation = node.location
            config.names = readNames(path, at: node.location, loader: sink.loader, &d)
        }
        if let node = keys["unmapped"], let choice = d.choice(node, what: "'unmapped'", from: ["keep", "drop"]) {
            if keys["names"] == nil {
                d.warning(node.location, "'unmapped' has no effect without 'names'", hint: "names: FILE (see docs/sinks.md)")
            }
            config.dropUnmapped = choice == "drop"
        }
        if let node = keys["self_metrics"], let on = d.bool(node, what: "'self_metrics'") { config.selfMetrics = on }
        return config
    }

    /// The names file at `path` (relative to the manifest's directory),
    /// read through the manifest's source and parsed with its positions;
    /// nil, reported at `at`, when it cannot be read.
    static func readNames(_ path: String, at: SourceLocation, loader: ManifestLoader, _ d: inout Diags) -> PrometheusNameMap? {
        guard let source = loader.source else { return nil }  // a check of the manifest alone
        let directory = loader.file.lastIndex(of: "/").map { String(loader.file[..<$0]) } ?? ""
        let resolved = path.hasPrefix("/") || directory.isEmpty ? path : directory + "/" + path
        let file: ManifestSourceFile
        do {
            file = try source.read(resolved, limit: ManifestLimits.maxFileBytes, fragment: true)
        } catch {
            d.error(at, "cannot read the names file \(resolved): \(error.reason)",
                    hint: "the shipped one is dist/prometheus/node-exporter.yaml in the source tree, PREFIX/share/vigil/prometheus/node-exporter.yaml installed")
            return nil
        }
        guard file.bytes.count <= ManifestLimits.maxFileBytes else {
            d.error(at, "the names file \(resolved) is larger than the limit of \(Units.formatSize(Int64(ManifestLimits.maxFileBytes)))")
            return nil
        }
        let (root, problems) = file.bytes.withUnsafeBufferPointer {
            ConfigParser(file: resolved, environment: loader.environment).parse(utf8: $0)
        }
        d.items += problems
        guard let root else { return nil }
        return PrometheusNameMap.read(root, &d)
    }

    /// With `names:`, a note of the families the file names that this
    /// manifest will not make: their plugin is run by no monitor routed to
    /// the sink, or declares no such kind or field; and the file's `absent:`.
    package func validate(_ sink: SinkConfig, in manifest: Manifest, probes: PluginProbes) -> [Diagnostic] {
        guard let names, let at = namesLocation else { return [] }
        var described: [String: PluginDescription] = [:]
        let patterns = sink.match.map(RoutePattern.init)
        func routed(_ monitor: String) -> Bool {
            patterns.contains { !$0.exclude && $0.monitor.matches(monitor) }
                && !patterns.contains { $0.exclude && $0.kind.isWildcard && $0.monitor.matches(monitor) }
        }
        for monitor in manifest.monitors where monitor.enabled && routed(monitor.name) {
            if case .success(let found) = probes.describe(reference: manifest.pluginReference(of: monitor)) {
                described[found.description.name] = found.description
            }
        }
        func made(_ entry: PrometheusNameMap.Entry) -> Bool {
            guard let plugin = described[entry.plugin], let kind = plugin.events.first(where: { $0.kind == entry.kind }) else { return false }
            guard let field = entry.field else { return true }
            return kind.dynamicFields || kind.fields.contains { $0.name == field }
        }
        var unmade: [String] = []
        var seen = Set<String>()
        for family in names.families where !seen.contains(family) {
            seen.insert(family)
            let entries = names.entries.filter { $0.name == family }
            if !entries.contains(where: made) {
                let sources = Set(entries.map(\.plugin)).sorted().joined(separator: ", ")
                unmade.append("\(family) (from \(sources))")
            }
        }
        var out: [Diagnostic] = []
        if !unmade.isEmpty {
            out.append(Diagnostic(.note, at: at, "sink '\(sink.name)': \(unmade.count) of the \(seen.count) families of \(namesFile ?? "the names file") will not be served: no monitor routed here runs their plugin, or it declares no such field: \(unmade.joined(separator: ", "))",
                                  hint: "add a monitor of that plugin (manifests/node-exporter.yaml runs them all)"))
        }
        if !names.absent.isEmpty {
            out.append(Diagnostic(.note, at: at, "sink '\(sink.name)': \(names.absent.count) \(names.absent.count == 1 ? "family" : "families") of the exporter \(namesFile ?? "the names file") stands in for \(names.absent.count == 1 ? "has" : "have") no Vigil source: " + names.absent.map { "\($0.name) (\($0.why))" }.joined(separator: "; ")))
        }
        return out
    }

    package var exclusiveResources: [String] { ["listen address \(SocketAddress.tcp(host: listenHost, port: listenPort))"] }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        let directory = build.directory
        var figures: (@Sendable () -> [UInt8])?
        if selfMetrics { figures = { directory?.selfMetrics() ?? [] } }
        return PrometheusSink(config: self, host: build.host, facts: { directory?.facts(of: $0) }, selfMetrics: figures)
    }
}
