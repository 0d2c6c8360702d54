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

/// A monitor's facts by its name and, where the caller knows it, the plugin
/// its event came from (behind a disk buffer the monitor may since run
/// another plugin: `RememberedMonitors`).
package typealias MonitorFactsLookup = @Sendable (_ monitor: String, _ plugin: String?) -> MonitorFacts?

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
    /// Of a sink behind a disk buffer: the process's directory, and what
    /// the buffer remembers of monitors that are not running.
    private let live: MonitorDirectory?
    private let remembered: RememberedMonitors?

    package init() {
        live = nil
        remembered = nil
    }

    /// The directory a sink behind a disk buffer sees: `live`'s monitors,
    /// then those `remembered` holds events of.
    package init(_ live: MonitorDirectory?, remembering remembered: RememberedMonitors) {
        self.live = live
        self.remembered = remembered
    }

    package func attach(_ source: any MonitorFactsSource) { self.source.withLock { $0.value = source } }

    private var runtime: (any MonitorFactsSource)? { live?.runtime ?? source.withLock { $0.value } }

    /// The facts of the current instance of each monitor named.
    package func facts() -> [String: MonitorFacts] {
        var facts = runtime?.monitorFacts() ?? [:]
        if let remembered {
            for (monitor, kept) in remembered.facts() where facts[monitor] == nil { facts[monitor] = kept }
        }
        return facts
    }

    /// The facts of the current instance of `monitor`, if it has one; with
    /// `plugin`, behind a disk buffer, those of that plugin's instance the
    /// buffer remembers when the running one is another plugin's.
    package func facts(of monitor: String, plugin: String? = nil) -> MonitorFacts? {
        let live = runtime?.monitorFacts(of: monitor)
        guard let remembered else { return live }
        if let live, plugin == nil || live.description.name == plugin { return live }
        return remembered.facts(of: monitor, plugin: plugin) ?? live
    }

    /// The host's own figures (none before the runtime is attached).
    package func selfMetrics() -> [UInt8] {
        runtime?.selfMetrics() ?? []
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
    private let facts: MonitorFactsLookup
    /// The host's own figures, asked at each scrape (`self_metrics: true`).
    private let selfMetrics: (@Sendable () -> [UInt8])?
    private var server: MetricsHTTPServer?
    private var lastBindAttempt: Int64 = 0
    private var loggedBindFailure = false
    /// How events become series (the mapping the `remote_write` sink shares).
    private let mapping: PrometheusMapping
    private var loggedRefusal = false

    init(config: PrometheusSinkConfig, host: String, facts: @escaping MonitorFactsLookup,
         selfMetrics: (@Sendable () -> [UInt8])? = nil) {
        self.config = config
        self.host = host
        self.facts = facts
        self.selfMetrics = selfMetrics
        self.series = PrometheusSeries(maxSeries: config.maxSeries)
        self.mapping = PrometheusMapping(settings: .init(names: config.names, dropUnmapped: config.dropUnmapped,
                                                         expireAfter: config.expireAfter, host: host), facts: facts)
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
        series.expire(now: monotonicNanoseconds()) { facts($0, nil)?.running == true }
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        var writer = SeriesWriter(updater: .empty, now: monotonicNanoseconds(), limit: config.maxSeries)
        series.update { updater in
            // Swapped in and out, not copied: the series' tables stay uniquely held.
            swap(&writer.updater, &updater)
            mapping.map(batch, into: &writer)
            swap(&writer.updater, &updater)
        }
        let limit = config.maxSeries
        if !loggedRefusal, series.refused > 0 {
            loggedRefusal = true
            context.logger.warning("\(limit) series held (max_series): new series are not made; counted in the exposition as vigil_prometheus_series_refused_total")
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

    init(host: String, port: UInt16, series: PrometheusSeries, extra: (@Sendable () -> [UInt8])? = nil,
         drain: (@Sendable (@escaping @Sendable () -> Void) -> Void)? = nil) throws {
        group = MultiThreadedEventLoopGroup.singleton  // the process's one event-loop group, never shut down
        do {
            let address = try NIOCore.SocketAddress.makeAddressResolvingHost(host, port: Int(port))
            channel = try HTTPServing.bootstrap(group, maxConnections: 64, idleTimeout: .seconds(30)) {
                MetricsHTTPHandler(series: series, extra: extra, drain: drain)
            }
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: HTTPServing.backlog)
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
        return PrometheusSink(config: self, host: build.host, facts: { directory?.facts(of: $0, plugin: $1) }, selfMetrics: figures)
    }
}

/// The `prometheus` sink's side of `PrometheusMapping.map`: each sample's
/// value written as the exposition has it, into its series.
private struct SeriesWriter: PrometheusSampleSink {
    var updater: PrometheusSeries.Updater
    let now: Int64
    let limit: Int
    var value: [UInt8] = []

    init(updater: PrometheusSeries.Updater, now: Int64, limit: Int) {
        self.updater = updater
        self.now = now
        self.limit = limit
        value.reserveCapacity(32)
    }

    mutating func sample(_ output: PrometheusMapping.Output, _ labels: String, _ field: PrometheusMapping.Value,
                         _ plan: PrometheusMapping.KindPlan, _ event: Event) {
        let scale = output.shape.scale
        value.removeAll(keepingCapacity: true)
        switch field {
        case .int(let i) where scale == 1: PrometheusMapping.appendInteger(i, to: &value)
        case .int(let i): PrometheusMapping.appendNumber(Double(i) * scale, to: &value)
        case .double(let d): PrometheusMapping.appendNumber(scale == 1 ? d : d * scale, to: &value)
        case .bool(let b): value.append(b ? UInt8(ascii: "1") : UInt8(ascii: "0"))
        }
        _ = updater.set(output.shape, family: &output.family, labels: labels, value: value[...], now: now, ttl: plan.ttl,
                        monitor: event.monitor, onChange: plan.onChange, limit: limit)
    }

    mutating func named(_ shape: PrometheusNaming.Shape, _ labels: String, _ number: Double, _ plan: PrometheusMapping.KindPlan,
                        _ event: Event) {
        value.removeAll(keepingCapacity: true)
        PrometheusMapping.appendNumber(number, to: &value)
        // Kept by its ttl alone.
        _ = updater.set(shape, labels: labels, value: value[...], now: now, ttl: plan.ttl, monitor: event.monitor,
                        onChange: false, limit: limit)
    }

    mutating func info(_ shape: PrometheusNaming.Shape, entity: String, labels: String, _ plan: PrometheusMapping.KindPlan,
                       _ event: Event) {
        updater.setInfo(shape, entity: entity, labels: labels, now: now, ttl: plan.ttl, monitor: event.monitor,
                        onChange: plan.onChange, limit: limit)
    }
}

