import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import VigilABI
import VigilCore

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
    /// The running monitors, asked once per batch and tick.
    private let facts: @Sendable () -> [String: MonitorFacts]
    private var server: MetricsHTTPServer?
    private var lastBindAttempt: Int64 = 0
    private var loggedBindFailure = false
    /// Per monitor and kind: the family of each field, for the instance it was made for.
    private var plans: [String: [String: KindPlan]] = [:]
    private var loggedRefusal = false

    package struct KindPlan {
        let instance: ObjectIdentifier?
        var fields: [String: PrometheusNaming.Shape?]
        let identities: [(field: String, label: String)]
        let onChange: Bool
        let ttl: Int64
        let specs: [String: FieldSpec]
    }

    init(config: PrometheusSinkConfig, host: String, facts: @escaping @Sendable () -> [String: MonitorFacts]) {
        self.config = config
        self.host = host
        self.facts = facts
        self.series = PrometheusSeries(maxSeries: config.maxSeries)
    }

    /// Binds now, so that an address that cannot be had is reported when
    /// the host starts; retried every 5 s after.
    package func appendExposition(to bytes: inout [UInt8]) { bytes += series.exposition(openMetrics: false) }

    package func bind(logger: Logger) {
        guard server == nil else { return }
        lastBindAttempt = monotonicNanoseconds()
        do {
            server = try MetricsHTTPServer(host: config.listenHost, port: config.listenPort, series: series)
            if loggedBindFailure { logger.notice("serving /metrics on \(server!.shown)") } else {
                logger.info("serving /metrics on \(server!.shown)")
            }
            loggedBindFailure = false
        } catch {
            if !loggedBindFailure { logger.error("cannot listen on tcp://\(config.listenHost):\(config.listenPort): \(error); retrying every 5s") }
            loggedBindFailure = true
        }
    }

    /// The port served (tests bind port 0).
    var boundPort: Int? { server?.port }

    /// Expiry once a second while there are series; a bind retried every 5 s.
    package var tickInterval: Int64 {
        if server == nil { return 5_000_000_000 }
        return series.count > 0 ? 1_000_000_000 : SinkTicks.never
    }

    package func tick(context: SinkContext) {
        if server == nil, monotonicNanoseconds() - lastBindAttempt >= 5_000_000_000 { bind(logger: context.logger) }
        let facts = facts()
        series.expire(now: monotonicNanoseconds()) { facts[$0]?.running == true }
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        let facts = facts()
        let now = monotonicNanoseconds()
        let limit = config.maxSeries
        var value: [UInt8] = []
        value.reserveCapacity(32)
        series.update { updater in
            // The host's own events (started, reloaded…) are figures of the
            // control API's /metrics, not values to keep.
            for event in batch where event.monitor != Manifest.hostMonitorName {
                let plan = self.plan(for: event, facts: facts[event.monitor])
                var labels = ""
                PrometheusSeries.appendLabel("monitor", event.monitor, to: &labels)
                PrometheusSeries.appendLabel("host", host, to: &labels)
                for (field, label) in plan.identities {
                    switch event[field: field] {
                    case .string(let s): PrometheusSeries.appendLabel(label, Self.labelValue(s), to: &labels)
                    case .int(let i): PrometheusSeries.appendLabel(label, String(i), to: &labels)
                    default: PrometheusSeries.appendLabel(label, "", to: &labels)
                    }
                }
                for field in event.fields {
                    let shape: PrometheusNaming.Shape?
                    if let known = plan.fields[field.name] {
                        shape = known
                    } else {
                        shape = Self.shape(event: event, field: field, spec: plan.specs[field.name])
                        plans[event.monitor]?[event.kind]?.fields[field.name] = .some(shape)
                    }
                    guard let shape else { continue }
                    value.removeAll(keepingCapacity: true)
                    switch field.value {
                    case .int(let i) where shape.scale == 1: value += String(i).utf8
                    case .int(let i): Self.appendNumber(Double(i) * shape.scale, to: &value)
                    case .double(let d): Self.appendNumber(shape.scale == 1 ? d : d * shape.scale, to: &value)
                    case .bool(let b): value.append(b ? UInt8(ascii: "1") : UInt8(ascii: "0"))
                    case .string: continue
                    }
                    _ = updater.set(shape, labels: labels, value: value[...], now: now, ttl: plan.ttl,
                                    monitor: event.monitor, onChange: plan.onChange, limit: limit)
                }
            }
        }
        if !loggedRefusal, series.refused > 0 {
            loggedRefusal = true
            context.logger.warning("\(limit) series held (max_series): new series are not made; counted in the exposition as vigil_prometheus_series_refused_total")
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
        let plan = KindPlan(instance: facts?.instance, fields: [:], identities: identities,
                            onChange: spec?.onChange == true, ttl: ttl, specs: specs)
        plans[event.monitor, default: [:]][event.kind] = plan
        return plan
    }

    static func shape(event: Event, field: Field, spec: FieldSpec?) -> PrometheusNaming.Shape? {
        var isBool = false
        switch field.value {
        case .string: return nil
        case .bool: isBool = true
        default: break
        }
        return PrometheusNaming.shape(plugin: event.plugin, kind: event.kind, field: field.name, spec: spec, valueIsBool: isBool)
    }

    /// A float as both formats read it: `NaN`, `+Inf`, `-Inf`, else the
    /// shortest text that reads back as the same Double.
    static func appendNumber(_ d: Double, to out: inout [UInt8]) {
        if d.isNaN { out += "NaN".utf8; return }
        if d.isInfinite { out += (d > 0 ? "+Inf" : "-Inf").utf8; return }
        if d == d.rounded(.towardZero), abs(d) < 1e15 {
            out += String(Int64(d)).utf8
        } else {
            out += d.description.utf8
        }
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

    init(host: String, port: UInt16, series: PrometheusSeries) throws {
        group = MultiThreadedEventLoopGroup.singleton  // the process's one event-loop group, never shut down
        do {
            let address = try NIOCore.SocketAddress.makeAddressResolvingHost(host, port: Int(port))
            channel = try HTTPServing.bootstrap(group, maxConnections: 64, idleTimeout: .seconds(30)) {
                MetricsHTTPHandler(series: series)
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

    private let series: PrometheusSeries
    private var head: HTTPRequestHead?

    init(series: PrometheusSeries) { self.series = series }

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
                let openMetrics = head.headers["Accept"].contains { $0.contains("application/openmetrics-text") }
                respond(context, head, status: .ok, type: openMetrics ? Self.openMetricsType : Self.textType,
                        body: series.exposition(openMetrics: openMetrics))
            case "/":
                respond(context, head, status: .ok, type: "text/plain; charset=utf-8",
                        body: Array("vigil: the events' values are at /metrics\n".utf8))
            default:
                respond(context, head, status: .notFound, type: "text/plain; charset=utf-8",
                        body: Array("not found: the values are at /metrics\n".utf8))
            }
        }
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
package struct PrometheusSinkConfig: Sendable {
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
    package init() {}
}

extension PrometheusSinkConfig: SinkType {
    package static let type = "prometheus"
    package static let keys = ["listen", "expire_after", "max_series"]

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
        return config
    }

    package var exclusiveResources: [String] { ["listen address \(SocketAddress.tcp(host: listenHost, port: listenPort))"] }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        PrometheusSink(config: self, host: build.host, facts: { [directory = build.directory] in directory?.facts() ?? [:] })
    }
}
