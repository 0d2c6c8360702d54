import Foundation
import VigilABI
import VigilCore
import VigilHistory
import VigilIsolation
import VigilRuntime
import VigilSinks

/// One request to the control API, as the HTTP layer hands it over.
public struct ControlRequest: Sendable {
    public var method: String
    /// The path, without the query.
    public var path: String
    /// The query's parameters, decoded (`+` is a space); the last of a name wins.
    public var query: [String: String]
    public var body: [UInt8]

    public init(method: String, uri: String, body: [UInt8] = []) {
        self.method = method
        self.path = String(uri.prefix { $0 != "?" })
        self.body = body
        var query: [String: String] = [:]
        if let mark = uri.firstIndex(of: "?") {
            for pair in uri[uri.index(after: mark)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let decode = { (text: Substring) in
                    String(text).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(text)
                }
                query[decode(parts[0])] = parts.count > 1 ? decode(parts[1]) : ""
            }
        }
        self.query = query
    }
}

public struct ControlResponse: Sendable {
    public var status: Int
    public var contentType: String
    public var body: [UInt8]
    /// Headers beyond the content's type and length.
    public var headers: [(String, String)] = []

    public init(status: Int, contentType: String, body: [UInt8], headers: [(String, String)] = []) {
        self.status = status
        self.contentType = contentType
        self.body = body
        self.headers = headers
    }

    static func json(_ status: Int, _ value: some Encodable) -> ControlResponse {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = (try? encoder.encode(value)).map { Array($0) + [0x0A] } ?? Array("{}\n".utf8)
        return ControlResponse(status: status, contentType: "application/json", body: body)
    }

    static func error(_ status: Int, _ message: String) -> ControlResponse {
        json(status, ["error": message])
    }

    /// 405 for a method `request`'s path does not take, with the one it does (`Allow`).
    static func notAllowed(_ request: ControlRequest, _ allowed: String) -> ControlResponse {
        var response = error(405, "\(request.method) \(request.path): only \(allowed)")
        response.headers.append(("Allow", allowed))
        return response
    }
}

/// The control API of a running host (issue 13): what `vigil ctl` and an
/// operator's scripts ask over the control socket. Routing and the JSON
/// bodies live here; the HTTP layer is `ControlServer`.
///
/// - `GET /v1/health`: 200 and `{"status":"ok"}`, or 503 with the reasons
///   (a monitor failed or quarantined, a sink that lost events in the last
///   minute).
/// - `GET /v1/status`: every monitor and sink.
/// - `POST /v1/monitors/NAME/poll`: a poll now, outside the schedule.
/// - `POST /v1/monitors/NAME/stop`, `…/start`: one monitor, the others untouched.
/// - `POST /v1/monitors/NAME/restart`: stop (when running), then start.
/// - `POST /v1/reload`: the manifest again, applied as a diff; answers the
///   diff, or the errors (422) with nothing changed.
/// - `GET /v1/series`, `GET /v1/query`, `GET /v1/events`: what a
///   `history` sink keeps (`HistoryAPI`).
/// - `GET /metrics`: the same counters in Prometheus' text format.
/// - `GET /v1/openapi.json`: all of the above described (`OpenAPI`).
package final class ControlAPI: Sendable {
    let runtime: VigilRuntime
    let figures: ControlFigures

    init(runtime: VigilRuntime, figures: ControlFigures = ControlFigures()) {
        self.runtime = runtime
        self.figures = figures
    }

    /// The history sinks' readings, as they are now.
    var historyAPI: HistoryAPI {
        HistoryAPI(sinks: runtime.sinks.compactMap { runner in
            runner.sink.history.map { (runner.config.name, $0, runner.sink.recentEvents) }
        })
    }

    func handle(_ request: ControlRequest) async -> ControlResponse {
        let parts = request.path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        let get = request.method == "GET", post = request.method == "POST"
        if parts == ["v1", "health"] {
            return get ? health() : .notAllowed(request, "GET")
        }
        if parts == ["v1", "status"] {
            return get ? .json(200, status()) : .notAllowed(request, "GET")
        }
        if parts.count == 4, parts[0] == "v1", parts[1] == "monitors" {
            return post ? await monitorAction(name: parts[2], verb: parts[3])
                : .notAllowed(request, "POST")
        }
        if parts == ["v1", "reload"] {
            guard post else { return .notAllowed(request, "POST") }
            let result = await runtime.reload(reason: "asked over the control API")
            return .json(result.applied ? 200 : 422, result)
        }
        if parts == ["v1", "series"] || parts == ["v1", "query"] || parts == ["v1", "events"] {
            guard get else { return .notAllowed(request, "GET") }
            let api = historyAPI
            switch parts[1] {
            case "series": return api.series(request.query)
            case "query": return api.query(request.query)
            default: return api.events(request.query)
            }
        }
        if parts == ["v1", "conditions"] || parts == ["v1", "manifest"] || parts == ["v1", "sparklines"] {
            guard get else { return .notAllowed(request, "GET") }
            switch parts[1] {
            case "conditions": return conditions()
            case "manifest": return manifestAnswer()
            default: return sparklines(request.query)
            }
        }
        if parts == ["v1", "openapi.json"] {
            guard get else { return .notAllowed(request, "GET") }
            return ControlResponse(status: 200, contentType: "application/json", body: Array(OpenAPI.document.utf8) + [0x0A])
        }
        if parts == ["metrics"] {
            guard get else { return .notAllowed(request, "GET") }
            return ControlResponse(status: 200, contentType: PrometheusText.contentType,
                                   body: SelfMetrics(runtime: runtime).exposition() + figures.exposition())
        }
        return .error(404, "no such endpoint: \(request.method) \(request.path)")
    }

    // MARK: - health

    package struct Health: Encodable {
        var status: String
        var reasons: [String]
    }

    func health() -> ControlResponse {
        let health = self.healthNow()
        return .json(health.reasons.isEmpty ? 200 : 503, health)
    }

    func healthNow() -> Health {
        var reasons: [String] = []
        for instance in runtime.instances {
            switch instance.state {
            case .failed: reasons.append("monitor \(instance.name) failed")
            case .quarantined: reasons.append("monitor \(instance.name) is quarantined")
            default: break
            }
        }
        for runner in runtime.sinks {
            if let why = runner.stats.failedForGood { reasons.append("sink \(runner.config.name) failed: \(why)") }
        }
        for (sink, lost) in runtime.lossHistory.lostInLastMinute(runtime.sinks) where lost.total > 0 {
            reasons.append("sink \(sink.config.name) lost \(lost.total) events in the last minute (\(lost.description))")
        }
        return Health(status: reasons.isEmpty ? "ok" : "unhealthy", reasons: reasons)
    }

    // MARK: - status

    package struct Status: Encodable {
        package struct Monitor: Encodable {
            var name: String
            var state: String
            var plugin: String
            var file: String
            var isolation: String
            var intervalS: Double?
            var events: UInt64
            var refused: UInt64
            var polls: UInt64
            var pollErrors: UInt64
            var crashes: UInt64
            var restarts: UInt64
            var available: Bool
            var unavailableReason: String?
            var lastError: String?
            var lastErrorTime: String?
            var lastPollTime: String?
            var lastPollS: Double?
        }

        package struct Sink: Encodable {
            var name: String
            var type: String
            var queueDepth: Int
            var queueCapacity: Int
            var highWater: Int
            var accepted: UInt64
            var written: UInt64
            var dropped: UInt64
            var failed: UInt64
            var truncated: UInt64
            /// A listening sink's events with no client connected: neither written nor lost.
            var noClient: UInt64
            var lost: [String: UInt64]
            /// An output plugin's (`type: plugin`): where it runs, and its
            /// runners that ended and were started again.
            var isolation: String?
            var crashes: UInt64?
            var restarts: UInt64?
            /// An output plugin's writes answered RETRY, and the events in them.
            var retries: UInt64?
            var retriedEvents: UInt64?
            /// Why an output plugin's sink failed for good, once it has.
            var failure: String?
            /// A `history` sink's figures.
            var history: History?
            /// A disk buffer's figures.
            var buffer: SinkBufferReport?
            /// A `remote_write` sink's queue of shards and its samples.
            var sendQueue: SendQueueReport?
        }

        /// The host process itself.
        package struct Process: Encodable {
            /// CPU time used (user and system), seconds.
            var cpuS: Double
            var rssBytes: Int
            var threads: Int
        }

        package struct History: Encodable {
            var series: Int
            var points: Int
            var minutes: Int
            var bytes: Int
            var maxMemory: Int
            /// Points dropped or not kept, by reason: max_memory, max_series, out_of_order.
            var dropped: [String: UInt64]
            /// Its file refused at start, or not written.
            var problem: String?
        }

        var pid: Int32
        var version: String
        /// The main manifest file, absolute: which host this is.
        var manifest: String
        /// When it started (wall clock, as events say times).
        var startedAt: String
        var uptimeS: Double
        var events: UInt64
        /// As `/v1/health` says it.
        var health: Health
        var process: Process
        var monitors: [Monitor]
        var sinks: [Sink]
    }

    /// CPU time from getrusage; resident memory and threads from /proc/self.
    static func process() -> Status.Process {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        var rss = 0, threads = 0
        if let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) {
            let fields = statm.split(separator: " ")
            if fields.count > 1, let pages = Int(fields[1]) { rss = pages.multipliedReportingOverflow(by: Int(sysconf(Int32(_SC_PAGESIZE)))).partialValue }
        }
        if let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") {
            // After the command's ")": state is field 3, num_threads field 20.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 17, let n = Int(fields[17]) { threads = n }
        }
        return Status.Process(cpuS: cpu, rssBytes: rss, threads: threads)
    }

    func status() -> Status {
        let monitors = runtime.instances.map { instance -> Status.Monitor in
            let s = instance.status
            return Status.Monitor(
                name: instance.name, state: s.state.rawValue, plugin: instance.description.name,
                file: instance.description.path, isolation: instance.transport is RunnerTransport ? "process" : "none",
                intervalS: instance.interval > 0 ? Double(instance.interval) / 1e9 : nil,
                events: instance.emitted.load(ordering: .relaxed), refused: instance.refusals.total,
                polls: instance.polls.load(ordering: .relaxed), pollErrors: instance.pollErrors.load(ordering: .relaxed),
                crashes: instance.crashes.load(ordering: .relaxed), restarts: instance.restarts.load(ordering: .relaxed),
                available: s.available, unavailableReason: s.available ? nil : s.unavailableReason,
                lastError: s.lastError?.text, lastErrorTime: s.lastError.map { timestamp($0.at) },
                lastPollTime: s.lastPoll.map { timestamp($0.at) }, lastPollS: s.lastPoll.map { Double($0.took) / 1e9 })
        }
        let sinks = runtime.sinks.map { runner -> Status.Sink in
            let s = runner.stats
            return Status.Sink(name: s.name, type: s.type, queueDepth: s.depth, queueCapacity: runner.config.queueCapacity,
                               highWater: s.highWater, accepted: s.accepted, written: s.written, dropped: s.dropped,
                               failed: s.failed, truncated: s.truncated, noClient: s.noClient,
                               lost: Dictionary(uniqueKeysWithValues: LossReason.allCases.map { ($0.name, s.lost[$0]) }),
                               isolation: s.isolation?.rawValue, crashes: s.crashes, restarts: s.restarts,
                               retries: s.retries, retriedEvents: s.retriedEvents, failure: s.failedForGood,
                               history: runner.sink.history.map { store in
                                   let f = store.figures
                                   return Status.History(series: f.series, points: f.points, minutes: f.minutes, bytes: f.bytes,
                                                         maxMemory: store.limits.maxMemory,
                                                         dropped: ["max_memory": f.losses.memoryPoints, "max_series": f.losses.seriesRefused,
                                                                   "out_of_order": f.losses.outOfOrder],
                                                         problem: store.problem)
                               },
                               buffer: runner.sink.bufferReport, sendQueue: runner.sink.sendQueue)
        }
        let started = runtime.started
        let uptime = started > 0 ? Double(max(0, monotonicNanoseconds() - started)) / 1e9 : 0
        let manifest = URL(fileURLWithPath: runtime.manifest.file).standardizedFileURL.path
        let startedAt = timestamp(realtimeNanoseconds().subtractingSaturating(Int64(uptime * 1e9)))
        return Status(pid: getpid(), version: vigilVersion, manifest: manifest, startedAt: startedAt, uptimeS: uptime,
                      events: runtime.bus.lastSequence, health: healthNow(), process: Self.process(), monitors: monitors, sinks: sinks)
    }

    // MARK: - one monitor

    package struct Accepted: Encodable {
        var monitor: String
        var action: String
        var state: String
    }

    func monitorAction(name: String, verb: String) async -> ControlResponse {
        guard let instance = runtime.instances.first(where: { $0.name == name }) else {
            return .error(404, "no monitor '\(name)'; monitors: \(runtime.instances.map(\.name).joined(separator: ", "))")
        }
        switch verb {
        case "poll":
            guard instance.transport.polls else {
                return .error(409, "monitor '\(name)' pushes its events; it has no poll")
            }
            guard instance.state == .running else {
                return .error(409, "monitor '\(name)' is \(instance.state.rawValue), not running")
            }
            instance.pollNow()
        case "stop":
            guard instance.state != .stopped else {
                return .error(409, "monitor '\(name)' is stopped already")
            }
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                instance.operatorStop { done.resume() }
            }
            runtime.hostEvents.publish("monitor_stopped", .notice, [Field("monitor", .string(name))])
        case "start":
            guard instance.operatorStart() else {
                return .error(409, "monitor '\(name)' is \(instance.state.rawValue); start takes a stopped, failed or quarantined monitor")
            }
            runtime.hostEvents.publish("monitor_started", .notice, [Field("monitor", .string(name))])
        case "restart":
            // A stop and a start, each seen as the separate verbs make it seen.
            if instance.state != .stopped {
                await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                    instance.operatorStop { done.resume() }
                }
                runtime.hostEvents.publish("monitor_stopped", .notice, [Field("monitor", .string(name))])
            }
            guard instance.operatorStart() else {
                return .error(409, "monitor '\(name)' is \(instance.state.rawValue) and cannot be started now")
            }
            runtime.hostEvents.publish("monitor_started", .notice, [Field("monitor", .string(name))])
        default:
            return .error(404, "no action '\(verb)' for a monitor; actions: start, stop, poll, restart")
        }
        return .json(202, Accepted(monitor: name, action: verb, state: instance.state.rawValue))
    }
}

/// `2026-11-21T21:50:29.123456789Z`, as the events say it.
func timestamp(_ ns: Int64) -> String {
    var out: [UInt8] = []
    JSONLineEncoder.appendTimestamp(ns, to: &out)
    return String(decoding: out, as: UTF8.self)
}
