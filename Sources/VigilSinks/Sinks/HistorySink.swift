import Foundation
import Glibc
import Logging
import Synchronization
import VigilCore
import VigilHistory

/// `type: history`: every numeric and boolean field of the events routed to
/// it, kept in memory for the console and the control API's queries
/// (`HistoryStore`): every point for `retention`, the per-minute min, max,
/// mean and last for `minute_retention`, within `max_memory` and
/// `max_series`. A series is one field of one monitor's events of one
/// kind and identity (the fields the plugin marks as identities); fields
/// the plugin marks as counters are kept as they are and shown as rates.
package struct HistorySinkConfig: Sendable, Equatable {
    package var limits = HistoryLimits()
    /// The last events kept whole, for `/v1/events`.
    package var events = 10_000
    /// Where the history is kept across restarts: written at stop, read at start.
    package var path: String?
    package init() {}
}

extension HistorySinkConfig: SinkType {
    package static let type = "history"
    package static let keys = ["retention", "minute_retention", "max_memory", "max_series", "events", "path"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> HistorySinkConfig? {
        let keys = sink.keys
        var config = HistorySinkConfig()
        if let n = keys["retention"], let ns = d.duration(n, what: "'retention'", atLeast: 60_000_000_000) {
            config.limits.retention = ns / 1_000_000
        }
        if let n = keys["minute_retention"], let ns = d.duration(n, what: "'minute_retention'", atLeast: 60_000_000_000) {
            config.limits.minuteRetention = ns / 1_000_000
        }
        if let n = keys["max_memory"], let bytes = d.size(n, what: "'max_memory'", atMost: 64 << 30, limitText: "64GiB") {
            if bytes < 1 << 20 {
                d.error(n.location, "'max_memory' must be at least 1MiB, not \(bytes) bytes")
            } else {
                config.limits.maxMemory = Int(bytes)
            }
        }
        if let n = keys["max_series"], let count = d.int(n, what: "'max_series'", in: 1...100_000_000) {
            config.limits.maxSeries = Int(count)
        }
        if let n = keys["events"], let count = d.int(n, what: "'events'", in: 0...1_000_000) {
            config.events = Int(count)
        }
        if let n = keys["path"], let text = d.string(n, what: "'path'") {
            if text.isEmpty || text.hasSuffix("/") {
                d.error(n.location, "'path' must name a file, not '\(text)'")
            } else {
                config.path = text
            }
        }
        return config
    }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        let directory = build.directory
        return HistorySink(limits: limits, events: events, path: path, host: build.host, logger: build.logger,
                           facts: { directory?.facts(of: $0) })
    }
}

/// The sink: events into its `HistoryStore`, on the sink's thread.
package final class HistorySink: EventSink {
    package let store: HistoryStore
    private let facts: @Sendable (String) -> MonitorFacts?
    /// Per monitor and kind: which fields are identities and counters, for
    /// the instance it was read from. Only the sink's thread uses it.
    private let plans = Mutex<[PlanKey: Plan]>([:])

    private struct PlanKey: Hashable {
        let monitor: String
        let kind: String
    }

    private struct Plan {
        let instance: ObjectIdentifier?
        let identities: Set<String>
        let counters: Set<String>
        /// Of a kind without identities: its one stream, and the last
        /// millisecond it was given (the history keeps one point a
        /// millisecond a stream, so a flood's others are passed over here,
        /// before any work, and counted as the store would count them).
        let stream: StreamKey?
        var lastMillisecond: Int64 = .min
    }

    /// The last events, whole; nil when `events: 0`.
    private let ring: EventRing<Event>?

    /// The file it is kept in across restarts, if any.
    private let path: String?

    init(limits: HistoryLimits, events: Int, path: String?, host: String, logger: Logger,
         facts: @escaping @Sendable (String) -> MonitorFacts?) {
        self.path = path
        store = path.map { Self.read($0, limits: limits, logger: logger) } ?? HistoryStore(limits: limits)
        ring = events > 0 ? EventRing(capacity: events, maxBytes: max(1 << 20, events * 512), host: host) : nil
        self.facts = facts
    }

    package var history: HistoryStore? { store }
    package var recentEvents: EventRing<Event>? { ring }

    package func write(_ batch: [Event], context: SinkContext) throws {
        var points: [(stream: StreamKey, time: Int64, fields: [HistoryField])] = []
        points.reserveCapacity(batch.count)
        var passedOver = 0
        plans.withLock { plans in
            var asked: [String: MonitorFacts?] = [:]
            for event in batch {
                let key = PlanKey(monitor: event.monitor, kind: event.kind)
                let known = plans[key]
                // Another point in a millisecond this stream has: passed over at once.
                if let known, known.stream != nil, event.time / 1_000_000 <= known.lastMillisecond {
                    for field in event.fields {
                        if case .string = field.value { continue }
                        passedOver += 1
                    }
                    continue
                }
                let current: MonitorFacts? = if let known = asked[event.monitor] { known } else {
                    { let f = facts(event.monitor); asked[event.monitor] = f; return f }()
                }
                var plan: Plan
                if let known, known.instance == current.map(\.instance) {
                    plan = known
                } else {
                    let spec = current?.description.events.first { $0.kind == event.kind }
                    let identities = Set((spec?.fields ?? []).filter(\.identity).map(\.name))
                    plan = Plan(instance: current.map(\.instance), identities: identities,
                                counters: Set((spec?.fields ?? []).filter(\.counter).map(\.name)),
                                stream: identities.isEmpty ? StreamKey(monitor: event.monitor, kind: event.kind) : nil)
                }
                var identity: [StreamKey.Identity] = []
                var fields: [HistoryField] = []
                fields.reserveCapacity(event.fields.count)
                for field in event.fields {
                    if plan.stream == nil, plan.identities.contains(field.name) {
                        switch field.value {
                        case .string(let text): identity.append(.init(field.name, text))
                        case .int(let number): identity.append(.init(field.name, String(number)))
                        default: break
                        }
                        continue
                    }
                    let counter = plan.counters.contains(field.name)
                    switch field.value {
                    case .int(let v): fields.append(HistoryField(field.name, .int(v), counter: counter))
                    case .double(let v): fields.append(HistoryField(field.name, .double(v), counter: counter))
                    case .bool(let v): fields.append(HistoryField(field.name, .int(v ? 1 : 0)))
                    case .string: break
                    }
                }
                if plan.stream != nil, !fields.isEmpty { plan.lastMillisecond = event.time / 1_000_000 }
                plans[key] = plan
                guard !fields.isEmpty else { continue }
                points.append((plan.stream ?? StreamKey(monitor: event.monitor, kind: event.kind, identity: identity), event.time, fields))
            }
        }
        store.append(points)
        if passedOver > 0 { store.countOutOfOrder(passedOver) }
        ring?.append(batch.map { event in
            // About what it holds: the strings' bytes and a little a field.
            var size = 96 + event.monitor.utf8.count + event.kind.utf8.count
            for field in event.fields {
                size += 32 + field.name.utf8.count
                if case .string(let text) = field.value { size += text.utf8.count }
            }
            return EventRing.Entry(seq: event.seq, time: event.time, monitor: event.monitor, kind: event.kind,
                                   severity: event.severity.rawValue, size: size, payload: event)
        })
    }

    /// The history written to `path` (through a file beside it, synced,
    /// then renamed over it: a crash leaves the old file or the new one).
    package func shutdown(context: SinkContext) {
        guard let path else { return }
        let bytes = store.fileBytes()
        let temporary = path + ".new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let why = String(cString: strerror(errno))
            store.problem = "not written to \(path): \(why)"
            context.logger.error("history not written to \(temporary): \(why)")
            return
        }
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            written += n
        }
        let synced = written == bytes.count && fsync(fd) == 0
        let why = String(cString: strerror(errno))
        close(fd)
        guard synced, rename(temporary, path) == 0 else {
            unlink(temporary)
            store.problem = "not written to \(path): \(why)"
            context.logger.error("history not written to \(path): \(why); the file there, if any, is as it was")
            return
        }
        let figures = store.figures
        context.logger.info("history written to \(path): \(figures.series) series, \(figures.points) points, \(bytes.count) bytes")
    }

    /// The history kept in `path`, or an empty one: a file that is missing
    /// starts it afresh; one that is refused is moved aside (PATH.refused),
    /// said, and shown in status, never half taken.
    static func read(_ path: String, limits: HistoryLimits, logger: Logger) -> HistoryStore {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno != ENOENT { logger.error("history file \(path) cannot be read: \(String(cString: strerror(errno))); starting empty") }
            return HistoryStore(limits: limits)
        }
        let refuse = { (why: String) -> HistoryStore in
            let aside = path + ".refused"
            let moved = rename(path, aside) == 0
            logger.error("history file \(path) refused: \(why); starting empty\(moved ? " (the file is now \(aside))" : "")")
            let store = HistoryStore(limits: limits)
            store.problem = "\(path) refused at start: \(why)"
            return store
        }
        // Larger than the history could hold, with room for its bookkeeping: not read at all.
        let most = Int64(limits.maxMemory) * 2 + (64 << 20)
        guard (info.st_mode & S_IFMT) == S_IFREG else { return refuse("not a regular file") }
        guard Int64(info.st_size) <= most else { return refuse("\(info.st_size) bytes, more than max_memory allows") }
        guard let data = FileManager.default.contents(atPath: path) else {
            return refuse("cannot be read: \(String(cString: strerror(errno)))")
        }
        do throws(HistoryFileError) {
            let store = try HistoryStore.load(Array(data), limits: limits)
            let figures = store.figures
            logger.info("history read from \(path): \(figures.series) series, \(figures.points) points, \(figures.minutes) minutes")
            return store
        } catch {
            return refuse(error.description)
        }
    }
}
