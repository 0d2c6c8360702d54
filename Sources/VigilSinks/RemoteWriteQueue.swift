import Foundation
import Logging
import NIOCore
import NIOHTTP1
import SwiftProtobuf
import Synchronization
import VigilABI
import VigilCore
import VigilHTTPClient
import VigilPrompb

/// One series as a `remote_write` request carries it: its labels, sorted
/// by name with `__name__` and the external labels among them, made once
/// when the series appears; and the number that picks its shard, so that
/// its samples leave in the order they were made.
package final class RemoteWriteSeries: Sendable {
    /// Its labels as a serialized `TimeSeries` of them alone (`RemoteWriteRequest.Builder`).
    let labels: [UInt8]
    let shardKey: Int

    init(labels: [UInt8], shardKey: Int) {
        self.labels = labels
        self.shardKey = shardKey
    }
}

/// A sample waiting in a shard: its series, value and time (ms), and the
/// event it came from (`RemoteWriteLedger.none` for a stale marker, which
/// no event made).
struct RemoteWriteItem {
    let series: RemoteWriteSeries
    let value: Double
    let time: Int64
    let event: UInt64
}

/// The account of the events whose samples are in the shards. An event is
/// settled once each of its samples was delivered or given up; lost, under
/// the first reason, when any was. Events leave the account in order, and
/// only those `write` has returned (`release`): so a loss is taken off the
/// runner's `written` only after the runner counted the event there. Who
/// takes events out reports them (`RemoteWriteOutbox.settle`) before a
/// `wait` for them returns: a disk buffer reads the losses of a batch as
/// soon as its write returns.
final class RemoteWriteLedger: Sendable {
    static let none = UInt64.max

    private struct State {
        /// The number of `remaining[0]`: every event before it is settled.
        var base: UInt64 = 0
        var remaining = CircularBuffer<Int32>()
        /// 0: none of its samples lost; else the reason's raw value + 1.
        var lost = CircularBuffer<UInt8>()
        /// Events numbered below it were returned by `write`.
        var released: UInt64 = 0
        /// Takers of events not done reporting them.
        var reporting = 0
        var waiting = 0
        /// Given up whole (`abandonAll`): nothing is counted after.
        var closed = false
    }

    private let state = Mutex(State())
    private let settled = Wakeup()

    /// What leaving the account counts: events lost per reason (indexed by
    /// `LossReason.rawValue`) and delivered.
    struct Settled {
        var lost = [Int](repeating: 0, count: LossReason.allCases.count)
        var delivered = 0
        var isEmpty: Bool { delivered == 0 && lost.allSatisfy { $0 == 0 } }
    }

    /// The number the next event will have (sink's thread).
    var next: UInt64 { state.withLock { $0.base + UInt64($0.remaining.count) } }

    /// Opens the events of a batch, each with its number of samples (none:
    /// settled once released). Sink's thread, before their samples are queued.
    func open(_ samples: [Int32]) {
        state.withLock { s in
            for n in samples {
                s.remaining.append(n)
                s.lost.append(0)
            }
        }
    }

    /// Settles one sample of each of `events` (as delivered, or lost under
    /// `reason`); the events that leave. When some did, the caller reports
    /// them, then calls `reported`.
    func settle(_ events: some Sequence<UInt64>, lost reason: LossReason?) -> Settled {
        state.withLock { s -> Settled in
            guard !s.closed else { return Settled() }
            let mark = reason.map { UInt8($0.rawValue + 1) } ?? 0
            for event in events where event != Self.none && event >= s.base {
                let offset = Int(event - s.base)
                guard offset < s.remaining.count else { continue }
                let i = s.remaining.index(s.remaining.startIndex, offsetBy: offset)
                s.remaining[i] -= 1
                let j = s.lost.index(s.lost.startIndex, offsetBy: offset)
                if mark != 0, s.lost[j] == 0 { s.lost[j] = mark }
            }
            return pop(&s)
        }
    }

    /// The events numbered below `end` were returned by `write`: those
    /// settled leave (reported as by `settle`).
    func release(through end: UInt64) -> Settled {
        state.withLock { s -> Settled in
            guard !s.closed else { return Settled() }
            s.released = max(s.released, end)
            return pop(&s)
        }
    }

    /// Every event not settled yet, counted lost (`shutdown`), the account
    /// closed: a shard that ends later counts nothing.
    func abandonAll() -> Settled {
        state.withLock { s -> Settled in
            guard !s.closed else { return Settled() }
            var out = Settled()
            for (n, mark) in zip(s.remaining, s.lost) {
                if mark != 0 { out.lost[Int(mark) - 1] += 1 } else if n > 0 { out.lost[LossReason.shutdown.rawValue] += 1 } else { out.delivered += 1 }
            }
            s.base += UInt64(s.remaining.count)
            s.remaining.removeAll()
            s.lost.removeAll()
            s.closed = true
            return out
        }
    }

    /// What `settle` or `release` took out was reported: a wait may end.
    func reported() {
        let wake = state.withLock { s -> Int in
            s.reporting -= 1
            guard s.reporting == 0 else { return 0 }
            defer { s.waiting = 0 }
            return s.waiting
        }
        settled.wake(wake)
    }

    /// Waits until every event before `end` settled and was reported, or
    /// `deadline` (monotonic ns); whether they were.
    func wait(through end: UInt64, until deadline: Int64) -> Bool {
        while true {
            let done = state.withLock { s -> Bool in
                if s.closed || (s.base >= end && s.reporting == 0) { return true }
                s.waiting += 1
                return false
            }
            if done { return true }
            let now = monotonicNanoseconds()
            if now >= deadline {
                state.withLock { s in if s.waiting > 0 { s.waiting -= 1 } }
                return false
            }
            if !settled.wait(until: min(deadline, now + 50_000_000)) {
                state.withLock { s in if s.waiting > 0 { s.waiting -= 1 } }
            }
        }
    }

    /// Events at the front, released and settled, taken out and counted (one more reporting, when any).
    private func pop(_ s: inout State) -> Settled {
        var out = Settled()
        while s.base < s.released, let n = s.remaining.first, n <= 0 {
            let mark = s.lost.removeFirst()
            s.remaining.removeFirst()
            s.base += 1
            if mark == 0 { out.delivered += 1 } else { out.lost[Int(mark) - 1] += 1 }
        }
        if !out.isEmpty { s.reporting += 1 }
        return out
    }
}

/// What a `remote_write` sink reports (`vigil ctl status`, `/metrics`, the
/// console's sinks view, the run's summary): its queue of shards and what
/// became of its samples, as Prometheus' own remote write reports them.
public struct SendQueueReport: Codable, Sendable, Equatable {
    /// Where it sends.
    package var url = ""
    /// Shards now, the number the last reckoning asked for, and the bounds.
    package var shards = 0
    package var desiredShards = 0.0
    package var minShards = 0
    package var maxShards = 0
    /// Samples each shard holds at most.
    package var capacity = 0
    /// Samples queued in the shards, or in a request not yet answered.
    package var pendingSamples = 0
    /// Series alive (not ended by a stale marker).
    package var series = 0
    /// Samples made of the events (`in` = sent + lost + pending), and what became of them: delivered,
    /// or lost by reason (`rejected`: refused by the receiver with a 4xx;
    /// `shutdown`: still queued at the drain deadline; `write_failed`: not
    /// encodable; `out_of_order`: not after its series' last sample;
    /// `max_series`: its series would pass `max_series`).
    package var samplesIn: UInt64 = 0
    package var samplesSent: UInt64 = 0
    package var samplesLost: [String: UInt64] = [:]
    /// Requests answered 2xx, attempts retried (5xx, 429, no answer) and
    /// the samples in them, requests refused for good.
    package var requests: UInt64 = 0
    package var retries: UInt64 = 0
    package var samplesRetried: UInt64 = 0
    package var refusedRequests: UInt64 = 0
    /// Compressed bytes of the requests delivered.
    package var bytesSent: UInt64 = 0
    /// Series ended with Prometheus' stale marker, and metadata requests delivered.
    package var staleMarkers: UInt64 = 0
    package var metadataSent: UInt64 = 0
    /// While samples wait: how far the newest sample delivered is behind the clock (s).
    package var behindS = 0.0
    /// The last error (an answer or no answer), while not yet followed by a success.
    package var lastError: String?

    /// The counts of a sink a reload replaced added to its successor's, whose state it takes.
    package func adding(_ later: SendQueueReport) -> SendQueueReport {
        var sum = later
        sum.samplesIn &+= samplesIn
        sum.samplesSent &+= samplesSent
        sum.samplesLost.merge(samplesLost) { $0 &+ $1 }
        sum.requests &+= requests
        sum.retries &+= retries
        sum.samplesRetried &+= samplesRetried
        sum.refusedRequests &+= refusedRequests
        sum.bytesSent &+= bytesSent
        sum.staleMarkers &+= staleMarkers
        sum.metadataSent &+= metadataSent
        return sum
    }
}

/// What a `remote_write` sink's shards share: where and how they send, the
/// event account, the figures, and the context of the sink's runner (set
/// at its first call, before any shard runs).
final class RemoteWriteOutbox: @unchecked Sendable {  // `context` is set once, before the shards start; the rest is immutable or behind its locks
    struct Settings: Sendable {
        var endpoint: HTTPPosting.Endpoint
        var headers: [(String, String)]
        var credentials: HTTPCredentials?
        var capacity: Int
        var maxSamplesPerSend: Int
        var batchSendDeadline: Int64
        var minBackoff: Int64
        var maxBackoff: Int64
        var timeout: Int64
        /// Behind a disk buffer: what the shards hold at the drain deadline
        /// stays on disk for the next start, and is not lost.
        var behindBuffer = false
    }

    struct Figures {
        var samplesIn: UInt64 = 0
        var samplesSent: UInt64 = 0
        var samplesLost: [String: UInt64] = [:]
        var requests: UInt64 = 0
        var retries: UInt64 = 0
        var samplesRetried: UInt64 = 0
        var refusedRequests: UInt64 = 0
        var bytesSent: UInt64 = 0
        var staleMarkers: UInt64 = 0
        var metadataSent: UInt64 = 0
        /// Nanoseconds spent in requests that delivered (for the shards' reckoning).
        var sendNanos: Int64 = 0
        /// The oldest sample time (ms) queued, and the newest delivered.
        var oldestIn: Int64 = 0
        var newestSent: Int64 = 0
        var lastError: String?
        /// Retried attempts since the last success (the log says the first and the recovery).
        var failing = 0
        var lastFailure: Int64 = 0
        var lastRefusalLog: Int64 = 0
        var refusalsNotLogged = 0
        /// When a failure was last logged, and whether the recovery is to be.
        var lastFailureLog: Int64 = 0
        var failureLogged = false
        /// A shard has logged that it gave up at shutdown (one line a sink).
        var gaveUpLogged = false
        /// Given up whole (`abandonAll`): nothing is counted after.
        var closed = false
    }

    let settings: Settings
    let ledger = RemoteWriteLedger()
    let figures = Mutex(Figures())
    private(set) var context: SinkContext?

    init(settings: Settings) { self.settings = settings }

    func attach(_ context: SinkContext) {
        if self.context == nil { self.context = context }
    }

    /// Settles one sample of each of `events` and tells the runner of the
    /// events that left the account, before a `wait` for them may end.
    func settle(_ events: some Sequence<UInt64>, lost reason: LossReason?) {
        report(ledger.settle(events, lost: reason))
    }

    /// Events `write` returned before `end`: those settled, told to the runner.
    func release(through end: UInt64) {
        report(ledger.release(through: end))
    }

    /// The shards did not end by the drain deadline (a call that does not
    /// return): every event and sample not settled is lost to the shutdown.
    func abandonAll() {
        let settled = ledger.abandonAll()
        figures.withLock { f in
            let pending = f.samplesIn &- f.samplesSent &- f.samplesLost.values.reduce(0, &+)
            if pending > 0 && pending < UInt64(Int64.max) { f.samplesLost["shutdown", default: 0] &+= pending }
            f.closed = true
        }
        if let context {
            for reason in LossReason.allCases where settled.lost[reason.rawValue] > 0 {
                context.countLostAfterWrite(settled.lost[reason.rawValue], reason)
            }
        }
    }

    private func report(_ settled: RemoteWriteLedger.Settled) {
        guard !settled.isEmpty else { return }
        if let context {
            for reason in LossReason.allCases where settled.lost[reason.rawValue] > 0 {
                context.countLostAfterWrite(settled.lost[reason.rawValue], reason)
            }
        }
        ledger.reported()
    }

    /// Samples given up, by the reason the report names.
    func countLost(_ n: Int, _ reason: String) {
        guard n > 0 else { return }
        figures.withLock { f in if !f.closed { f.samplesLost[reason, default: 0] &+= UInt64(n) } }
    }

    var shouldAbandon: Bool { context?.shouldAbandon ?? false }
}

/// One shard of a `remote_write` sink: a queue of at most `capacity`
/// samples and the thread that sends them, `max_samples_per_send` at a
/// time, or fewer once the oldest has waited `batch_send_deadline`; each
/// request retried with backoff and jitter until it is answered for good
/// or the host gives up at its drain deadline. A series' samples always
/// go through the same shard, in order.
final class RemoteWriteShard: @unchecked Sendable {  // `state` behind its lock; the client and the scratch of a request are the shard thread's own
    private struct State {
        var items = CircularBuffer<RemoteWriteItem>()
        /// When the oldest queued sample came (monotonic ns).
        var since: Int64 = 0
        /// Send what is queued now (a reshard, the end).
        var flush = false
        var stopping = false
        /// A request is out.
        var busy = false
        var metadata: [Prometheus_MetricMetadata]?
        var consumerWaiting = false
        var producersWaiting = 0
    }

    let index: Int
    private let outbox: RemoteWriteOutbox
    private let state = Mutex(State())
    private let work = Wakeup()
    private let room = Wakeup()
    private let ended = DispatchSemaphore(value: 0)
    private let client: HTTPClient
    private let credentials: HTTPCredentialReader
    private let logger: Logger

    init(index: Int, outbox: RemoteWriteOutbox, logger: Logger) {
        self.index = index
        self.outbox = outbox
        self.logger = logger
        let e = outbox.settings.endpoint
        client = HTTPClient(host: e.host, port: Int(e.port), userAgent: "vigil/\(vigilVersion)")
        credentials = HTTPCredentialReader(outbox.settings.credentials)
    }

    func start(name: String) {
        startHostThread(named: "vigil-rw-\(index)-\(name)".prefix(15).description, stackSize: 512 << 10) { [self] in
            run()
            client.close()
            ended.signal()
        }
    }

    /// Samples queued or in a request not yet answered.
    var pending: Int { state.withLock { $0.items.count } }

    /// Nothing queued and no request out.
    var isIdle: Bool { state.withLock { $0.items.isEmpty && !$0.busy && $0.metadata == nil } }

    /// Queues `items`, waiting for room while the shard is full; how many
    /// were queued (fewer only when the host gave up at its drain deadline).
    /// `blocked` grows by the time it waited (the shards' reckoning).
    func push(_ items: ArraySlice<RemoteWriteItem>, context: SinkContext, blocked: inout Int64) -> Int {
        var queued = 0
        let capacity = outbox.settings.capacity, batch = outbox.settings.maxSamplesPerSend
        while queued < items.count {
            let wake = state.withLock { s -> Bool? in
                let room = capacity - s.items.count
                guard room > 0 else {
                    s.producersWaiting += 1
                    return nil
                }
                let wasEmpty = s.items.isEmpty
                if wasEmpty { s.since = monotonicNanoseconds() }
                let n = min(room, items.count - queued)
                let start = items.startIndex + queued
                s.items.append(contentsOf: items[start..<(start + n)])
                queued += n
                // A consumer asleep on an empty queue is woken to time the
                // batch's deadline; one timing it, once a request's worth is there.
                guard wasEmpty || s.items.count >= batch, s.consumerWaiting else { return false }
                s.consumerWaiting = false
                return true
            }
            switch wake {
            case true?: work.wake()
            case false?: break
            case nil:
                // Full: the receiver is slow or away. Wait for room, doing
                // the runner's housekeeping, until the host gives up.
                work.wake()
                if context.shouldAbandon {
                    state.withLock { if $0.producersWaiting > 0 { $0.producersWaiting -= 1 } }
                    return queued
                }
                let start = monotonicNanoseconds()
                if !room.wait(until: start + 50_000_000) {
                    state.withLock { if $0.producersWaiting > 0 { $0.producersWaiting -= 1 } }
                }
                blocked = blocked.addingSaturating(monotonicNanoseconds() - start)
                context.whileWaiting()
            }
        }
        return queued
    }

    /// Sends what is queued at once (a reshard waits for `isIdle`).
    func flush() {
        state.withLock { $0.flush = true }
        wakeConsumer()
    }

    /// Hands shard 0 the metadata to send before its next samples.
    func send(metadata: [Prometheus_MetricMetadata]) {
        state.withLock { $0.metadata = metadata }
        wakeConsumer()
    }

    /// Sends everything queued, then ends; `join` waits for it.
    func stop() {
        state.withLock { $0.stopping = true }
        wakeConsumer()
    }

    /// Waits for the thread to end, until `deadline` (monotonic ns); whether it did.
    func join(until deadline: Int64) -> Bool {
        if deadline == .max {
            ended.wait()
            return true
        }
        return ended.wait(timeout: .now() + .nanoseconds(Int(max(0, deadline - monotonicNanoseconds())))) == .success
    }

    private func wakeConsumer() {
        let asleep = state.withLock { s -> Bool in
            defer { s.consumerWaiting = false }
            return s.consumerWaiting
        }
        if asleep { work.wake() }
    }

    private enum Next {
        case samples([RemoteWriteItem])
        case metadata([Prometheus_MetricMetadata])
        case sleep(until: Int64)
        case end
    }

    private func run() {
        let batch = outbox.settings.maxSamplesPerSend, deadline = outbox.settings.batchSendDeadline
        while true {
            let now = monotonicNanoseconds()
            let (next, producers) = state.withLock { s -> (Next, Int) in
                if let metadata = s.metadata {
                    s.metadata = nil
                    s.busy = true
                    return (.metadata(metadata), 0)
                }
                let n = s.items.count
                if n >= batch || (n > 0 && (s.flush || s.stopping || now >= s.since.addingSaturating(deadline))) {
                    let take = min(n, batch)
                    var out: [RemoteWriteItem] = []
                    out.reserveCapacity(take)
                    for _ in 0..<take { out.append(s.items.removeFirst()) }
                    s.busy = true
                    if !s.items.isEmpty { s.since = now } else { s.flush = false }
                    defer { s.producersWaiting = 0 }
                    return (.samples(out), s.producersWaiting)
                }
                if n == 0 {
                    s.flush = false
                    if s.stopping { return (.end, 0) }
                }
                s.consumerWaiting = true
                return (.sleep(until: n > 0 ? s.since.addingSaturating(deadline) : Int64.max), 0)
            }
            room.wake(producers)
            switch next {
            case .end:
                return
            case .sleep(let until):
                if !work.wait(until: until) { state.withLock { $0.consumerWaiting = false } }
            case .samples(let items):
                send(items)
                state.withLock { $0.busy = false }
            case .metadata(let metadata):
                sendMetadata(metadata)
                state.withLock { $0.busy = false }
            }
        }
    }

    /// One request of `items`, a series' samples together in their order;
    /// delivered, or given up and counted.
    private func send(_ items: [RemoteWriteItem]) {
        // A series' samples together, in their order.
        var place: [ObjectIdentifier: Int] = [:]
        place.reserveCapacity(items.count)
        var series: [(RemoteWriteSeries, [Prometheus_Sample])] = []
        series.reserveCapacity(items.count)
        var newest: Int64 = 0
        for item in items {
            var sample = Prometheus_Sample()
            sample.value = item.value
            sample.timestamp = item.time
            newest = max(newest, item.time)
            let key = ObjectIdentifier(item.series)
            if let i = place[key] {
                series[i].1.append(sample)
            } else {
                place[key] = series.count
                series.append((item.series, [sample]))
            }
        }
        let body: [UInt8]
        do {
            var request = RemoteWriteRequest.Builder(capacity: items.count * 24 + series.reduce(0) { $0 + $1.0.labels.count })
            for (s, samples) in series { try request.append(labels: s.labels, samples: samples) }
            body = try Snappy.compress(request.bytes)
        } catch {
            logger.error("cannot encode a remote write request of \(items.count) samples: \(error); they are lost")
            settle(items, lost: .writeFailed, reportAs: "write_failed")
            return
        }
        let outcome = post(body, what: "\(items.count) samples", samples: items.count)
        switch outcome {
        case .delivered(let took):
            let markers = items.count { $0.event == RemoteWriteLedger.none }
            outbox.figures.withLock { f in
                f.samplesSent &+= UInt64(items.count - markers)
                f.staleMarkers &+= UInt64(markers)
                f.requests &+= 1
                f.bytesSent &+= UInt64(body.count)
                f.sendNanos = f.sendNanos.addingSaturating(took)
                f.newestSent = max(f.newestSent, newest)
            }
            settle(items, lost: nil, reportAs: "")
        case .refused:
            settle(items, lost: .rejected, reportAs: "rejected")
        case .abandoned:
            settle(items, lost: .shutdown, reportAs: "shutdown")
            // What is still queued will not be sent either.
            var rest: [RemoteWriteItem] = []
            state.withLock { s in
                while let item = s.items.popFirst() { rest.append(item) }
            }
            room.wake(state.withLock { s in
                defer { s.producersWaiting = 0 }
                return s.producersWaiting
            })
            if !rest.isEmpty { settle(rest, lost: .shutdown, reportAs: "shutdown") }
        }
    }

    private func sendMetadata(_ metadata: [Prometheus_MetricMetadata]) {
        var request = Prometheus_WriteRequest()
        request.metadata = metadata
        guard let bytes = try? request.serializedBytes() as [UInt8], let body = try? Snappy.compress(bytes) else { return }
        if case .delivered = post(body, what: "the metadata of \(metadata.count) families", samples: 0) {
            outbox.figures.withLock { $0.metadataSent &+= 1 }
        }
    }

    /// Stale markers are no event's samples: neither sent nor lost in the figures.
    private func settle(_ items: [RemoteWriteItem], lost reason: LossReason?, reportAs name: String) {
        if reason != nil { outbox.countLost(items.count { $0.event != RemoteWriteLedger.none }, name) }
        outbox.settle(items.lazy.map(\.event), lost: reason)
    }

    private enum Outcome {
        case delivered(took: Int64)
        case refused
        case abandoned
    }

    /// Posts `body` until it is answered for good: 2xx delivers; 5xx, 429
    /// and no answer are retried after the answer's Retry-After or the
    /// backoff's next wait (30 ms to 5 s by default, with jitter, so that a
    /// fleet that lost its receiver together does not come back together);
    /// any other answer refuses it for good.
    private func post(_ body: [UInt8], what: String, samples: Int) -> Outcome {
        let settings = outbox.settings
        var backoff = Backoff(min: settings.minBackoff, max: settings.maxBackoff)
        let buffer = ByteBuffer(bytes: body)
        while true {
            if outbox.shouldAbandon {
                let first = outbox.figures.withLock { f -> Bool in
                    defer { f.gaveUpLogged = true }
                    return !f.gaveUpLogged
                }
                if first {
                    logger.error("gave up sending to \(settings.endpoint.shown) at the drain deadline: what the shards still held \(settings.behindBuffer ? "stays in the disk buffer, sent at the next start" : "is lost (shutdown)")")
                }
                return .abandoned
            }
            var headers = RemoteWriteRequest.headers + settings.headers
            var wait: Int64
            var problem: String
            do {
                if let authorization = try credentials.authorization() { headers.append(("Authorization", authorization)) }
                let start = monotonicNanoseconds()
                let response = try client.post(settings.endpoint.path.isEmpty ? "/" : settings.endpoint.path, body: buffer, headers: headers,
                                               timeout: .nanoseconds(settings.timeout), giveUp: { self.outbox.shouldAbandon })
                let took = monotonicNanoseconds() - start
                switch response.status {
                case 200..<300:
                    recovered()
                    return .delivered(took: took)
                case 429, 500..<600:
                    problem = "answered \(response.status): \(HTTPPosting.firstLine(response.body))"
                    wait = HTTPPosting.retryAfter(response.headers).map { max(settings.minBackoff, $0) } ?? backoff.next()
                default:
                    refused(what, response)
                    return .refused
                }
            } catch {
                if outbox.shouldAbandon { continue }  // given up at shutdown: said once, above
                problem = "\(error)"
                wait = backoff.next()
            }
            failed(problem, samples: samples)
            let until = monotonicNanoseconds().addingSaturating(wait)
            while !outbox.shouldAbandon {
                let left = until - monotonicNanoseconds()
                if left <= 0 { break }
                var ts = timespec(tv_sec: 0, tv_nsec: Int(min(left, 50_000_000)))
                nanosleep(&ts, nil)
            }
        }
    }

    /// A retried attempt: counted; logged when the sink was sending well,
    /// at most once a minute (a receiver that comes and goes does not fill
    /// the log: the recovery is logged only after a logged failure).
    private func failed(_ problem: String, samples: Int) {
        let now = monotonicNanoseconds()
        let log = outbox.figures.withLock { f -> Bool in
            f.retries &+= 1
            f.samplesRetried &+= UInt64(samples)
            f.lastError = problem
            f.lastFailure = now
            f.failing += 1
            guard f.failing == 1, !f.failureLogged, f.lastFailureLog == 0 || now - f.lastFailureLog >= 60_000_000_000 else { return false }
            f.lastFailureLog = now
            f.failureLogged = true
            return true
        }
        if log {
            logger.warning("cannot send to \(outbox.settings.endpoint.shown): \(problem); retrying with backoff up to \(Units.formatDuration(outbox.settings.maxBackoff))")
        }
    }

    private func recovered() {
        let (after, log) = outbox.figures.withLock { f -> (Int, Bool) in
            defer {
                f.failing = 0
                f.lastError = nil
                f.failureLogged = false
            }
            return (f.failing, f.failureLogged)
        }
        if log { logger.notice("\(outbox.settings.endpoint.shown) takes requests again (after \(after) retried attempts)") }
    }

    /// A 4xx other than 429: the receiver will not take the request as it
    /// is (out of order, too old, a bad label). Logged with the answer's
    /// first line, at most every 10 s (the others counted in the next).
    private func refused(_ what: String, _ response: HTTPClient.Response) {
        let now = monotonicNanoseconds()
        let (log, skipped) = outbox.figures.withLock { f -> (Bool, Int) in
            f.refusedRequests &+= 1
            f.lastError = "answered \(response.status): \(HTTPPosting.firstLine(response.body))"
            guard now - f.lastRefusalLog >= 10_000_000_000 || f.lastRefusalLog == 0 else {
                f.refusalsNotLogged += 1
                return (false, 0)
            }
            f.lastRefusalLog = now
            defer { f.refusalsNotLogged = 0 }
            return (true, f.refusalsNotLogged)
        }
        guard log else { return }
        let also = skipped > 0 ? " (and \(skipped) more requests since the last such message)" : ""
        logger.error("\(outbox.settings.endpoint.shown) refused \(what) with \(response.status): \(HTTPPosting.firstLine(response.body)); not retried, counted lost (rejected)\(also)")
    }
}
