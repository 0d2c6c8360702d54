import CompressNIO
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SwiftProtobuf
import VigilABI
import VigilCore
import VigilHTTPClient
import VigilIsolation
import VigilOTLP

/// `type: otlp`: events to an OpenTelemetry receiver over OTLP/HTTP
/// (`POST /v1/logs`, `/v1/metrics`), protobuf or JSON, gzip by default.
///
/// Batching: events wait in the sink until `batch.events` are there, the
/// request would pass `batch.bytes`, or the oldest has waited
/// `batch.timeout`. Delivery: an answer 2xx delivers the batch; 429, 502,
/// 503, 504 and connection errors are retried with exponential backoff and
/// jitter between `retry_min` and `retry_max`, after the answer's
/// `Retry-After` when it has one; any other answer is final, and its events
/// are counted lost (`write_failed`) with the server's reason in the log.
/// A 2xx answer's `partial_success` is logged and its rejected records
/// counted lost (`rejected`), never retried. While the sink retries, events
/// queue behind it (the queue's size and overflow policy apply, counted);
/// at shutdown what is still not delivered by the drain deadline is counted
/// lost (`shutdown`).
///
/// With both signals, an event's delivery is its log record's; a metrics
/// request that fails is logged. Plain http only (no TLS in this build).
package final class OTLPSink: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread only
    let config: OTLPSinkConfig
    let host: String
    private let facts: @Sendable () -> [String: MonitorFacts]
    private let poster: HTTPClient
    private var pending: [Event] = []
    /// Of `pending`, how many at its front the runner already counts
    /// written (returned by an earlier `write`): a loss among them is taken
    /// back (`countLostAfterWrite`), a loss among the batch in hand is
    /// counted in the call (`countLost`).
    private var returned = 0
    /// The same for the chunk being sent.
    private var chunkReturned = 0
    private var pendingSince: Int64 = 0
    private var loggedDown = false
    private let headers: [(String, String)]
    /// Behind a disk buffer: `write` returns only once its events were
    /// answered for good (the buffer batches, and acknowledges on return).
    private let synchronous: Bool

    init(config: OTLPSinkConfig, host: String, facts: @escaping @Sendable () -> [String: MonitorFacts], synchronous: Bool = false) {
        self.synchronous = synchronous
        self.config = config
        self.host = host
        self.facts = facts
        poster = HTTPClient(host: config.host, port: Int(config.port), userAgent: "vigil/\(vigilVersion)")
        var headers = config.headers
        headers.append(("Content-Type", config.encoding == .protobuf ? "application/x-protobuf" : "application/json"))
        if config.compression == .gzip { headers.append(("Content-Encoding", "gzip")) }
        self.headers = headers
    }

    /// While events wait for more, wake when the oldest has waited `batch.timeout`.
    package var tickInterval: Int64 {
        guard !pending.isEmpty else { return SinkTicks.never }
        return max(1_000_000, pendingSince.addingSaturating(config.batchTimeout).subtractingSaturating(monotonicNanoseconds()))
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        if pending.isEmpty { pendingSince = monotonicNanoseconds() }
        returned = pending.count
        pending.append(contentsOf: batch)
        while pending.count >= config.batchEvents || (synchronous && !pending.isEmpty) {
            let n = min(config.batchEvents, pending.count)
            chunkReturned = min(n, returned)
            flush(pending.prefix(n), context: context)
            returned -= min(n, returned)
            pending.removeFirst(n)
            pendingSince = monotonicNanoseconds()
        }
        // What stays is returned now.
        returned = pending.count
    }

    /// Counts `n` events of the chunk being sent as lost under `reason`.
    private func lose(_ n: Int, _ reason: LossReason, _ context: SinkContext) {
        let back = min(n, chunkReturned)
        if back > 0 {
            context.countLostAfterWrite(back, reason)
            chunkReturned -= back
        }
        if n > back { context.countLost(n - back, reason) }
    }

    package func tick(context: SinkContext) {
        guard !pending.isEmpty, monotonicNanoseconds() - pendingSince >= config.batchTimeout else { return }
        chunkReturned = pending.count
        flush(pending[...], context: context)
        pending.removeAll(keepingCapacity: true)
        returned = 0
    }

    package func shutdown(context: SinkContext) {
        if !pending.isEmpty {
            chunkReturned = pending.count
            flush(pending[...], context: context)
            pending.removeAll()
            returned = 0
        }
        poster.close()
    }

    /// Sends `events` (which `write` has returned as written) as one request
    /// per signal; what does not arrive is taken back as lost.
    private func flush(_ events: ArraySlice<Event>, context: SinkContext) {
        guard !events.isEmpty else { return }
        let primary = config.signals.first ?? .logs
        for signal in config.signals { flush(signal, events, primary: signal == primary, context: context) }
    }

    /// One signal's request for `events`, split in halves while it would
    /// pass `batch.bytes` (one event alone is sent whatever its size).
    private func flush(_ signal: OTLPSinkConfig.Signal, _ events: ArraySlice<Event>, primary: Bool, context: SinkContext) {
        let body: [UInt8]
        do {
            switch signal {
            case .logs:
                body = try encode(OTLPMessages.logs(events, host: host, observed: realtimeNanoseconds()))
            case .metrics:
                let table = facts()
                let (request, points) = OTLPMessages.metrics(events, host: host) { monitor, kind in
                    table[monitor]?.description.events.first { $0.kind == kind }
                        ?? (table[monitor] != nil ? PluginDescription.hostKinds.first { $0.kind == kind } : nil)
                }
                // Events without numbers make no metrics request: delivered as far as metrics go.
                guard points > 0 else { return }
                body = try encode(request)
            }
        } catch {
            context.logger.error("cannot encode \(events.count) events for OTLP \(signal.rawValue): \(error)")
            if primary { lose(events.count, .writeFailed, context) }
            return
        }
        if body.count > config.batchBytes && events.count > 1 {
            let half = events.startIndex + events.count / 2
            flush(signal, events[..<half], primary: primary, context: context)
            flush(signal, events[half...], primary: primary, context: context)
            return
        }
        deliver(signal, body: body, events: events.count, primary: primary, context: context)
    }

    private func encode(_ message: some SwiftProtobuf.Message) throws -> [UInt8] {
        switch config.encoding {
        case .protobuf: try message.serializedBytes()
        case .json: try message.jsonUTF8Bytes(options: OTLPMessages.jsonOptions)
        }
    }

    /// Posts one request until it is answered for good (or the host gives up
    /// at shutdown), and settles its events' account.
    private func deliver(_ signal: OTLPSinkConfig.Signal, body: [UInt8], events: Int, primary: Bool, context: SinkContext) {
        let path = config.basePath + "/v1/" + signal.rawValue
        var buffer = ByteBuffer(bytes: body)
        if config.compression == .gzip {
            do {
                buffer = try buffer.compress(with: .gzip())
            } catch {
                context.logger.error("cannot gzip an OTLP request: \(error); sent as is")
                buffer = ByteBuffer(bytes: body)
            }
        }
        var attempt = 0
        var headers = self.headers
        // A body the gzip step could not compress goes as is, and says so.
        if config.compression == .gzip && buffer.getBytes(at: buffer.readerIndex, length: 2) != [0x1F, 0x8B] {
            headers.removeAll { $0.0 == "Content-Encoding" }
        }
        while true {
            if context.shouldAbandon {
                if primary { lose(events, .shutdown, context) }
                context.logger.error("gave up sending \(events) events to \(endpoint(path)) at shutdown")
                return
            }
            let wait: Int64
            do {
                let response = try poster.post(path, body: buffer, headers: headers, timeout: .nanoseconds(config.timeout),
                                               giveUp: { context.shouldAbandon })
                switch response.status {
                case 200..<300:
                    if loggedDown { context.logger.notice("\(endpoint(path)) takes requests again") }
                    loggedDown = false
                    settle(signal, response, events: events, primary: primary, context: context)
                    return
                case 429, 502, 503, 504:
                    wait = retryDelay(response.headers, attempt: attempt)
                    if !loggedDown {
                        context.logger.warning("\(endpoint(path)) answered \(response.status): retrying with backoff up to \(Units.formatDuration(config.retryMax))")
                        loggedDown = true
                    }
                default:
                    if primary { lose(events, .writeFailed, context) }
                    context.logger.error("\(endpoint(path)) refused \(events) events with \(response.status): \(HTTPPosting.shown(response.body)); not retried")
                    return
                }
            } catch {
                wait = retryDelay(nil, attempt: attempt)
                if !loggedDown {
                    context.logger.warning("cannot send to \(endpoint(path)): \(error); retrying with backoff up to \(Units.formatDuration(config.retryMax))")
                    loggedDown = true
                }
            }
            attempt += 1
            context.pause(wait)
        }
    }

    /// A 2xx answer: its `partial_success`, if any, logged and counted.
    private func settle(_ signal: OTLPSinkConfig.Signal, _ response: HTTPClient.Response, events: Int, primary: Bool,
                        context: SinkContext) {
        guard !response.body.isEmpty else { return }
        let json = response.headers["Content-Type"].contains { $0.contains("json") }
        var rejected: Int64 = 0
        var message = ""
        switch signal {
        case .logs:
            let answer = json ? try? OTLPMessages.LogsResponse(jsonUTF8Bytes: response.body)
                : try? OTLPMessages.LogsResponse(serializedBytes: response.body)
            rejected = answer?.partialSuccess.rejectedLogRecords ?? 0
            message = answer?.partialSuccess.errorMessage ?? ""
        case .metrics:
            let answer = json ? try? OTLPMessages.MetricsResponse(jsonUTF8Bytes: response.body)
                : try? OTLPMessages.MetricsResponse(serializedBytes: response.body)
            rejected = answer?.partialSuccess.rejectedDataPoints ?? 0
            message = answer?.partialSuccess.errorMessage ?? ""
        }
        guard rejected > 0 || !message.isEmpty else { return }
        let what = signal == .logs ? "log records" : "data points"
        context.logger.warning("\(endpoint(config.basePath + "/v1/" + signal.rawValue)) rejected \(rejected) of the \(what) sent: \(HTTPPosting.shown(Array(message.utf8))) (partial success; not retried)")
        if primary && rejected > 0 { lose(Int(min(rejected, Int64(events))), .rejected, context) }
    }

    /// The answer's `Retry-After`, at least `retry_min`; else exponential
    /// backoff from `retry_min` to `retry_max` with up to half of it as jitter.
    func retryDelay(_ headers: HTTPHeaders?, attempt: Int) -> Int64 {
        if let asked = HTTPPosting.retryAfter(headers) { return max(config.retryMin, asked) }
        return Backoff(min: config.retryMin, max: config.retryMax).wait(attempt: attempt)
    }

    private func endpoint(_ path: String) -> String {
        "http://\(config.host.contains(":") ? "[\(config.host)]" : config.host):\(config.port)\(path)"
    }
}

/// `type: otlp`: OTLP/HTTP to `endpoint` (`http://HOST:PORT[/PATH]`; the
/// signals' paths `/v1/logs` and `/v1/metrics` are appended).
package struct OTLPSinkConfig: Sendable {
    package enum Signal: String, Sendable, CaseIterable { case logs, metrics }
    package enum Encoding: String, Sendable, CaseIterable { case protobuf, json }
    package enum Compression: String, Sendable, CaseIterable { case gzip, none }

    package var host: String
    package var port: UInt16
    /// The endpoint's path, without a trailing `/` ("" for none).
    package var basePath: String
    package var signals: [Signal] = [.logs]
    package var encoding: Encoding = .protobuf
    package var compression: Compression = .gzip
    /// Sent with every request (an `Authorization`, a tenant).
    package var headers: [(String, String)] = []
    /// A request carries at most this many events…
    package var batchEvents = 512
    /// …and this many bytes before compression…
    package var batchBytes = 4 << 20
    /// …and a partial batch waits at most this long for more.
    package var batchTimeout: Int64 = 1_000_000_000
    /// Backoff between retries (429, 502, 503, 504, connection errors).
    package var retryMin: Int64 = 500_000_000
    package var retryMax: Int64 = 30_000_000_000
    /// One request's deadline.
    package var timeout: Int64 = 10_000_000_000
    package var endpointLocation: SourceLocation?
    package var buffer: SinkBufferConfig?

    package init(host: String, port: UInt16, basePath: String) {
        self.host = host
        self.port = port
        self.basePath = basePath
    }
}

extension OTLPSinkConfig: SinkType, DiskBufferable {
    package static let type = "otlp"
    package static let keys = ["endpoint", "signals", "encoding", "compression", "headers", "batch", "retry_min", "retry_max", "timeout"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> OTLPSinkConfig? {
        let keys = sink.keys, name = sink.name, at = sink.location
        guard let node = keys["endpoint"] else {
            d.error(at, "otlp sink '\(name)' needs 'endpoint'", hint: "endpoint: http://127.0.0.1:4318")
            return nil
        }
        guard let text = d.string(node, what: "'endpoint'") else { return nil }
        let endpoint: HTTPPosting.Endpoint
        switch HTTPPosting.parse(text, defaultPort: 4318) {
        case .success(let e): endpoint = e
        case .failure(let why):
            d.error(node.location, "bad 'endpoint' '\(text)': \(why)", hint: "endpoint: http://127.0.0.1:4318")
            return nil
        }
        var config = OTLPSinkConfig(host: endpoint.host, port: endpoint.port, basePath: endpoint.path)
        config.endpointLocation = node.location
        if let n = keys["signals"] {
            var signals: [OTLPSinkConfig.Signal] = []
            for (text, at) in d.locatedStrings(n, what: "'signals'") {
                guard let signal = OTLPSinkConfig.Signal(rawValue: text) else {
                    d.error(at, "'signals' lists logs and metrics, not '\(text)'",
                            hint: Suggest.hint(for: text, in: OTLPSinkConfig.Signal.allCases.map(\.rawValue)))
                    continue
                }
                if !signals.contains(signal) { signals.append(signal) }
            }
            if signals.isEmpty, !d.hasErrors { d.error(n.location, "'signals' is empty: list logs, metrics or both") }
            if !signals.isEmpty { config.signals = signals }
        }
        if let n = keys["encoding"] { config.encoding = d.choice(n, what: "'encoding'", of: OTLPSinkConfig.Encoding.self) ?? .protobuf }
        if let n = keys["compression"] {
            config.compression = d.choice(n, what: "'compression'", of: OTLPSinkConfig.Compression.self) ?? .gzip
        }
        if let n = keys["headers"] {
            config.headers = HTTPPosting.readHeaders(n, ownHint: "use 'encoding' and 'compression' for the body's type and encoding",
                                                     example: "headers: { Authorization: \"Bearer ${OTLP_TOKEN}\" }", &d)
        }
        if let n = keys["batch"],
           let b = Keys(nested: n, what: "'batch'", of: "sink '\(name)'", known: ["events", "bytes", "timeout"],
                        example: "batch: { events: 512, bytes: 4MiB, timeout: 1s }", &d) {
            if let v = b["events"], let count = d.int(v, what: "'batch.events'", in: 1...100_000, unit: " events") { config.batchEvents = Int(count) }
            if let v = b["bytes"], let bytes = d.size(v, what: "'batch.bytes'", atMost: 64 << 20, limitText: "64MiB") {
                if bytes < 1024 { d.error(v.location, "'batch.bytes' must be at least 1KiB") } else { config.batchBytes = Int(bytes) }
            }
            if let v = b["timeout"], let ns = d.duration(v, what: "'batch.timeout'") { config.batchTimeout = max(ns, 1_000_000) }
        }
        if let n = keys["retry_min"], let ns = d.duration(n, what: "'retry_min'") { config.retryMin = max(ns, 10_000_000) }
        if let n = keys["retry_max"], let ns = d.duration(n, what: "'retry_max'") { config.retryMax = max(ns, config.retryMin) }
        if let n = keys["timeout"], let ns = d.duration(n, what: "'timeout'") { config.timeout = max(ns, 100_000_000) }
        return config
    }

    /// A receiver answers for every request.
    package var diskBufferRefusal: String? { nil }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        OTLPSink(config: self, host: build.host, facts: { [directory = build.directory] in directory?.facts() ?? [:] },
                 synchronous: buffer != nil)
    }
}
