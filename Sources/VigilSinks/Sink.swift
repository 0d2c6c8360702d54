import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilHistory
import VigilIsolation

/// A destination for events. Every method is called on the sink's own thread,
/// one at a time, so implementations need no locking of their own (except for
/// `requestReopen`, which may come from any thread).
///
/// Modelled on swift-otel's exporters: a batch in, a flush, a shutdown.
public protocol EventSink: AnyObject, Sendable {
    /// Writes a batch, in order.
    ///
    /// Loss is counted where it happens, by reason (`LossReason`). Returning
    /// means every event of the batch was delivered except those the sink
    /// counted with `context.countLost` during the call (a datagram refused).
    /// Throwing means the events neither delivered (`SinkWriteError.delivered`,
    /// a prefix of the batch) nor counted are lost: as `shutdown` when the
    /// runner is past its drain deadline, else under the error's reason
    /// (`write_failed` by default). Events of earlier batches found lost
    /// later (still in a socket's send queue when it broke) are taken back
    /// with `context.countLostAfterWrite`. A sink that can hold events while
    /// its peer or disk is away retries inside `write`, checking
    /// `context.shouldAbandon`.
    func write(_ batch: [Event], context: SinkContext) throws
    /// Periodic housekeeping: fsync interval, flushing slow clients.
    /// Called at least every `tickInterval` nanoseconds while running.
    func tick(context: SinkContext)
    /// How often `tick` wants to run now, in nanoseconds (read again after
    /// each call); `SinkTicks.never` when there is nothing to do, so an idle
    /// sink does not wake at all.
    var tickInterval: Int64 { get }
    /// Called once before the sink runs, with a function that wakes its
    /// thread (for work that arrives other than as events: a new client).
    func attach(wake: @escaping @Sendable () -> Void)
    /// Flushes and releases everything; called once, after the last write.
    func shutdown(context: SinkContext)
    /// Asks the sink to reopen its files (SIGHUP). Any thread.
    func requestReopen()
    /// A sink that writes JSON Lines may take them made by the producers,
    /// on their threads, as each event is queued (`EncodedLines`): it
    /// returns the encoder to make them with, and finds each event's line
    /// in `context.lines` during `write`. nil (the default): not wanted.
    var producerLines: JSONLineEncoder? { get }
    /// The sink calls `context.aboutToSend()` before the first byte of a
    /// batch leaves for its peer (a disk buffer marks the batch sent then,
    /// not before a connection exists: a peer never reached receives no
    /// duplicate). False: the batch counts as sent when `write` begins.
    var reportsSending: Bool { get }
    /// A listening sink takes its address (logging what it could not):
    /// at start, or on a reload once the sink it replaces has let go of it.
    /// Others do nothing.
    func bind(logger: Logger)
    /// An output plugin's runner figures, for `ctl status` and /metrics
    /// (nil for other sinks; a disk buffer answers for what it holds).
    var outputRunner: (any OutputRunnerReporting)? { get }
    /// What the sink adds to the control API's /metrics (a prometheus
    /// sink's series, so one scrape has the host's figures and the values).
    func appendExposition(to bytes: inout [UInt8])
    /// A disk buffer's figures (nil for a sink without one).
    var bufferReport: SinkBufferReport? { get }
    /// The figures of a sink that sends through a queue of its own (a
    /// `remote_write` sink's shards); nil for every other sink.
    var sendQueue: SendQueueReport? { get }
    /// False for a sink whose events matter only when someone reads them
    /// (a scrape): its thread is not woken for each event, only when a
    /// batch's worth is queued, at its tick, at the close, or when the sink
    /// asks (`attach(drain:)`), so that a poll's few events cost no wake-up.
    var needsEventsPromptly: Bool { get }
    /// Called once before the sink runs, with a function that has the
    /// sink's thread write every event queued so far, then calls back (on
    /// that thread): what a sink that `needsEventsPromptly` not calls before
    /// it is read.
    func attach(drain: @escaping @Sendable (_ then: @escaping @Sendable () -> Void) -> Void)
    /// What a `history` sink keeps, for the control API's queries (nil
    /// for every other sink).
    var history: HistoryStore? { get }
    /// A `history` sink's last events, whole, for `/v1/events` (nil for
    /// every other sink).
    var recentEvents: EventRing<Event>? { get }
    /// Whether its `tick` must also run behind a disk buffer, on the
    /// buffer's delivery thread where its writes run (an output plugin's
    /// flush every `flush_interval`).
    var ticksBehindBuffer: Bool { get }
}

public enum SinkTicks {
    /// No periodic work: the sink's thread sleeps until events arrive.
    public static let never: Int64 = 1 << 60
}

extension EventSink {
    public func tick(context: SinkContext) {}
    public var tickInterval: Int64 { SinkTicks.never }
    public func requestReopen() {}
    public func attach(wake: @escaping @Sendable () -> Void) {}
    public var producerLines: JSONLineEncoder? { nil }
    public var reportsSending: Bool { false }
    public func bind(logger: Logger) {}
    public var outputRunner: (any OutputRunnerReporting)? { nil }
    public func appendExposition(to bytes: inout [UInt8]) {}
    public var bufferReport: SinkBufferReport? { nil }
    public var sendQueue: SendQueueReport? { nil }
    public var ticksBehindBuffer: Bool { false }
    public var history: HistoryStore? { nil }
    public var recentEvents: EventRing<Event>? { nil }
    public var needsEventsPromptly: Bool { true }
    public func attach(drain: @escaping @Sendable (_ then: @escaping @Sendable () -> Void) -> Void) {}
}

/// Thrown by a sink whose batch got partly through: the first `delivered`
/// events arrived; the rest are lost under `reason`.
public struct SinkWriteError: Error, CustomStringConvertible {
    public var delivered: Int
    public var reason: LossReason
    public var underlying: any Error

    public init(delivered: Int, reason: LossReason = .writeFailed, _ underlying: any Error) {
        self.delivered = delivered
        self.reason = reason
        self.underlying = underlying
    }

    public var description: String { "\(underlying)" }
}

/// What a sink may know about its runner.
public final class SinkContext: @unchecked Sendable {  // shared counters are atomics; the per-call fields are the sink's thread's own
    public let name: String
    public let logger: Logger
    private let closing = Atomic<Bool>(false)
    private let abandonAt = Atomic<Int64>(.max)
    /// Events lost after the runner handed them to the sink, by reason.
    package let lost = AtomicLossCounts()
    /// Events delivered (net of those taken back by `countLostAfterWrite`).
    package let written = Atomic<UInt64>(0)
    /// Events delivered cut short to fit the transport (a syslog message
    /// over its size limit): written, not lost, and counted apart.
    package let truncated = Atomic<UInt64>(0)
    /// Events counted written that were still in the kernel's send queue of
    /// a healthy connection when the sink closed it at exit: the kernel goes
    /// on delivering them after vigil has ended, so they are not lost, but
    /// no one is left to confirm it (issue 26).
    package let unconfirmed = Atomic<UInt64>(0)
    /// Events a listening sink had no client for: not written, not lost
    /// (nobody had asked for them), counted apart (`no_client`).
    package let noClient = Atomic<UInt64>(0)
    /// What happened to the transport (`TransportEvent`).
    package let transportEvents = TransportEventCounts()
    /// Of a sink behind a disk buffer: events wait on disk that it has not
    /// been handed yet, so a series that went quiet may only be behind
    /// (`remote_write` expires none by time meanwhile).
    package let behindBuffer = Atomic<Bool>(false)

    /// Counts one `TransportEvent` (the sink logs it too).
    public func count(_ event: TransportEvent) { transportEvents.add(event) }
    /// Events counted lost during the current `write` (sink's thread only).
    package var lostInCall = 0
    /// Events counted delivered during the current `write` (sink's thread only).
    package var deliveredInCall = 0
    /// Events counted `noClient` during the current `write` (sink's thread only).
    package var noClientInCall = 0
    /// The events of the batch in hand the sink has accounted for itself.
    package var settledInCall: Int { lostInCall + deliveredInCall + noClientInCall }
    /// The lines of the batch in hand, made by the producers, for a sink
    /// that asked for them (`EventSink.producerLines`); nil otherwise.
    /// During `write`, on the sink's thread.
    public package(set) var lines: EncodedLines?
    /// The size of the batch in the sink's hands (less what `countLost` took
    /// of it), and whether the host gave up on a sink stuck in a call
    /// (`abandon`): from then on nothing the runner's thread reports is
    /// counted, since the host has counted it already.
    private let hand = Mutex<(inFlight: Int, abandoned: Bool)>((0, false))
    /// Set by the runner: housekeeping a sink calls while it waits a long time
    /// inside `write` (e.g. reconnecting), such as logging queue drops.
    package var whileWaiting: @Sendable () -> Void = {}
    /// Set by a disk buffer around an inner write (`EventSink.reportsSending`):
    /// called, once, before the batch's first byte leaves. Sink's thread only.
    var onSending: (() -> Void)?

    /// The batch in hand is about to leave (see `EventSink.reportsSending`).
    public func aboutToSend() {
        if let onSending {
            self.onSending = nil
            onSending()
        }
    }

    package init(name: String, logger: Logger) {
        self.name = name
        self.logger = logger
    }

    /// Counts `n` events that were cut to fit their transport; they are
    /// still delivered (or lost) as any other.
    public func countTruncated(_ n: Int) {
        guard n > 0 else { return }
        truncated.wrappingAdd(UInt64(n), ordering: .relaxed)
    }

    /// Counts `n` events, written, as unconfirmed (see `unconfirmed`).
    public func countUnconfirmed(_ n: Int) {
        guard n > 0, !hand.withLock({ $0.abandoned }) else { return }
        unconfirmed.wrappingAdd(UInt64(n), ordering: .relaxed)
    }

    /// Takes `n` events off the batch in hand, for a sink that accounts for
    /// them itself; false once the host has given up on the call (it has
    /// counted the batch already).
    private func takeFromHand(_ n: Int) -> Bool {
        hand.withLock { h in
            guard !h.abandoned else { return false }
            h.inFlight -= n
            return true
        }
    }

    /// Counts `n` events of the batch in hand as lost, without failing the
    /// batch. Call from `write` only.
    public func countLost(_ n: Int, _ reason: LossReason) {
        guard n > 0, takeFromHand(n) else { return }
        lostInCall += n
        lost.add(UInt64(n), reason)
    }

    /// Counts `n` events of the batch in hand as delivered before `write`
    /// returns: a sink that writes a batch in parts, each answered for (an
    /// output plugin's), so that what was delivered stays delivered if the
    /// host gives up on the call later (the drain deadline). Call from
    /// `write` only.
    public func countDelivered(_ n: Int) {
        guard n > 0, takeFromHand(n) else { return }
        deliveredInCall += n
        written.wrappingAdd(UInt64(n), ordering: .relaxed)
    }

    /// Counts `n` events of the batch in hand as not sent for want of a
    /// client (a listening sink with none connected): neither written nor
    /// lost. Call from `write` only.
    public func countNoClient(_ n: Int) {
        guard n > 0, takeFromHand(n) else { return }
        noClientInCall += n
        noClient.wrappingAdd(UInt64(n), ordering: .relaxed)
    }

    /// Counts `n` events of earlier batches, which `write` had returned as
    /// delivered, as lost after all (bytes that never left a socket's send
    /// queue). They are taken off `written`.
    public func countLostAfterWrite(_ n: Int, _ reason: LossReason) {
        guard n > 0, !hand.withLock({ $0.abandoned }) else { return }
        // Never more than was counted written: a sink's mistake must not
        // wrap the counter (and trap the next add).
        var current = written.load(ordering: .relaxed)
        while true {
            let (exchanged, now) = written.compareExchange(expected: current, desired: current - min(current, UInt64(n)),
                                                           ordering: .relaxed)
            if exchanged { break }
            current = now
        }
        lost.add(UInt64(n), reason)
    }

    /// Waits `ns` before a retry, in short steps: doing the runner's
    /// housekeeping meanwhile, and ending early once the sink must give up.
    public func pause(_ ns: Int64) {
        let until = monotonicNanoseconds().addingSaturating(max(0, ns))
        while !shouldAbandon {
            let left = until - monotonicNanoseconds()
            if left <= 0 { return }
            whileWaiting()
            var ts = timespec(tv_sec: 0, tv_nsec: Int(min(left, 50_000_000)))
            nanosleep(&ts, nil)
        }
    }

    /// The monotonic time (ns) at which a sink must give up at shutdown;
    /// `Int64.max` while running.
    public var abandonDeadline: Int64 { abandonAt.load(ordering: .acquiring) }

    /// True once the host is shutting down.
    public var isClosing: Bool { closing.load(ordering: .acquiring) }

    /// True when a sink should stop retrying and give up its batch: the host
    /// is shutting down and the drain deadline has passed.
    public var shouldAbandon: Bool { monotonicNanoseconds() >= abandonAt.load(ordering: .acquiring) }

    /// The runner hands the sink a batch of `n` events.
    package func take(_ n: Int) {
        hand.withLock { $0.inFlight = n }
    }

    /// The sink's call returned: false when the host gave up on it meanwhile,
    /// and the batch must not be counted again.
    package func settle() -> Bool {
        hand.withLock { h in
            h.inFlight = 0
            return !h.abandoned
        }
    }

    /// The host gives up on a sink stuck in a call (`write` blocked on a FIFO
    /// nobody reads, a hung file system): the events in its hands are lost to
    /// the shutdown, counted now, once. Returns how many.
    package func abandon() -> Int {
        let n = hand.withLock { h -> Int in
            guard !h.abandoned else { return 0 }
            h.abandoned = true
            defer { h.inFlight = 0 }
            return max(0, h.inFlight)
        }
        lost.add(UInt64(n), .shutdown)
        return n
    }

    package func beginClosing(drainDeadline: Int64) {
        // The earlier deadline holds: a sink a reload is stopping keeps its
        // own when the host stops too. Moved later, it held the directory of
        // its disk buffer past the time its replacement waits for it.
        abandonAt.min(drainDeadline, ordering: .acquiringAndReleasing)
        closing.store(true, ordering: .releasing)
    }
}
