import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

/// Runs one sink on a dedicated thread behind its bounded queue.
package final class SinkRunner: @unchecked Sendable {  // its mutable fields are the sink's thread's own; what others read is in atomics, `context` and `queue`

    package let config: SinkConfig
    package let sink: any EventSink
    package let queue: SinkQueue
    let context: SinkContext
    private let done = DispatchSemaphore(value: 0)
    /// A reload's replacement of a sink: started once the sink it replaces
    /// is done, which may be after the host began to stop. `join` waits for
    /// its thread all the same: a replacement not started by then was
    /// taken for drained, and the events queued for it were neither written
    /// nor counted.
    private let startsLater: Bool

    /// Monotonic times of the first and last successful write (0: none yet).
    package private(set) var firstWrite: Int64 = 0
    package private(set) var lastWrite: Int64 = 0
    private var lastErrorLog: Int64 = 0
    private var suppressedErrors = 0

    package init(config: SinkConfig, sink: any EventSink, logger: Logger, startsLater: Bool = false) {
        self.config = config
        self.sink = sink
        self.startsLater = startsLater
        self.queue = SinkQueue(capacity: config.queueCapacity, overflow: config.overflow, lines: sink.producerLines,
                               lazy: !sink.needsEventsPromptly)
        var logger = logger
        logger[metadataKey: "sink"] = "\(config.name)"
        self.context = SinkContext(name: config.name, logger: logger)
        context.whileWaiting = { [unowned self] in reportDrops() }
        sink.attach { [queue] in queue.wake() }
        sink.attach(drain: { [queue] done in queue.requestDrain(done) })
    }

    /// Waits, at most `timeout` ns, until the events queued before this call
    /// have been written: for a sink woken only to read
    /// (`EventSink.needsEventsPromptly` false), before it is read. Whether
    /// they were.
    package func drain(timeout: Int64) -> Bool {
        let written = DispatchSemaphore(value: 0)
        queue.requestDrain { written.signal() }
        return written.wait(timeout: .now() + .nanoseconds(Int(clamping: timeout))) == .success
    }

    /// Asks the sink to reopen its files, and wakes its thread to do it now.
    package func requestReopen() {
        sink.requestReopen()
        queue.wake()
    }

    /// Unique for the life of the process (a freed runner's address may be
    /// another's later): what the loss history tells runners apart by.
    let serial = SinkRunner.serials.add(1, ordering: .relaxed).newValue
    private static let serials = Atomic<UInt64>(0)

    /// Its thread was started (`join` waits only for one that was).
    private let started = Atomic<Bool>(false)

    package func start() {
        started.store(true, ordering: .releasing)
        // Not kept: Foundation holds a running thread, and a runner that
        // held its thread (whose closure holds the runner) would never be
        // freed after a reload retired it.
        startHostThread(named: "vigil-sink-\(config.name)", stackSize: 512 << 10) { [self] in
            run()
            done.signal()
        }
    }

    private func run() {
        var batch: [Event] = []
        var lines = EncodedLines()
        let madeLines = sink.producerLines != nil
        // The interval a sink wants can change (a file became dirty, a client
        // fell behind), so the next tick is worked out afresh on every turn.
        var lastTick = monotonicNanoseconds()
        while true {
            let now = monotonicNanoseconds()
            let nextTick = lastTick.addingSaturating(sink.tickInterval)
            var popped: UInt64 = 0
            let more = queue.pop(into: &batch, lines: &lines, timeout: max(1_000_000, nextTick.subtractingSaturating(now)),
                                 number: &popped)
            let woke = queue.takeWakeRequest()
            if !batch.isEmpty {
                context.lostInCall = 0
                context.deliveredInCall = 0
                context.noClientInCall = 0
                context.take(batch.count)
                if madeLines { context.lines = lines }
                defer {
                    if madeLines {
                        context.lines = nil
                        lines.removeAll(keepingCapacity: true)
                    }
                }
                do {
                    try sink.write(batch, context: context)
                    if context.settle() { delivered(batch.count - context.settledInCall) }
                } catch where !context.settle() {
                    // The host gave up on this sink while it was stuck, and counted the batch.
                    // (Otherwise `settle` has ended the batch, and the next clause counts it.)
                } catch {
                    let partial = error as? SinkWriteError
                    let done = min(max(0, partial?.delivered ?? 0), batch.count - context.settledInCall)
                    if done > 0 { delivered(done) }
                    let rest = batch.count - context.settledInCall - done
                    // Past the drain deadline, what could not go out is lost to the shutdown.
                    let reason: LossReason = context.shouldAbandon ? .shutdown : partial?.reason ?? .writeFailed
                    context.countLost(rest, reason)
                    reportFailure(error, lost: rest, reason: reason)
                    if context.shouldAbandon {
                        // Shutting down and past the drain deadline: the rest cannot go out either.
                        let rest = queue.discardAll()
                        if rest > 0 { context.logger.error("gave up at shutdown: \(rest) queued events lost") }
                    }
                }
                FieldStorage.shared.recycle(&batch)
                batch.removeAll(keepingCapacity: true)
            }
            if monotonicNanoseconds() >= lastTick.addingSaturating(sink.tickInterval) || woke {
                sink.tick(context: context)
                lastTick = monotonicNanoseconds()
            }
            queue.finishDrains(throughPop: popped)
            reportDrops()
            if !more { break }
        }
        sink.shutdown(context: context)
        queue.finishDrains(throughPop: .max, ended: true)
        if suppressedErrors > 0 {
            context.logger.error("\(suppressedErrors) more write failures were not logged")
        }
    }

    /// Counts `n` events of a batch as delivered (besides those the sink
    /// counted itself during the call, which set the times too).
    private func delivered(_ n: Int) {
        guard n > 0 || context.deliveredInCall > 0 else { return }
        context.written.wrappingAdd(UInt64(max(0, n)), ordering: .relaxed)
        let now = monotonicNanoseconds()
        if firstWrite == 0 { firstWrite = now }
        lastWrite = now
    }

    private var reportedDrops: UInt64 = 0
    private var lastDropLog: Int64 = 0

    // reportDrops runs on the sink's thread only (from the loop or whileWaiting).

    /// Logs events dropped since the last report, at most every 10 s.
    private func reportDrops() {
        let now = monotonicNanoseconds()
        guard now - lastDropLog >= 10_000_000_000, queue.hasDrops(since: reportedDrops) else { return }
        let dropped = queue.counters.queueFull
        guard dropped > reportedDrops else { return }
        context.logger.warning("queue full (\(config.queueCapacity) events): \(dropped - reportedDrops) events dropped (overflow: \(config.overflow.rawValue)), \(dropped) in all")
        reportedDrops = dropped
        lastDropLog = now
    }

    private func reportFailure(_ error: any Error, lost: Int, reason: LossReason) {
        let now = monotonicNanoseconds()
        if now - lastErrorLog >= 10_000_000_000 {
            context.logger.error("write failed, \(lost) events lost (\(reason.name)): \(error)")
            lastErrorLog = now
        } else {
            suppressedErrors += 1
        }
    }

    /// Stops taking events; the thread drains the queue into the sink, which
    /// may hold on to undeliverable events until `deadline` (monotonic ns).
    package func beginStop(deadline: Int64) {
        context.beginClosing(drainDeadline: deadline)
        queue.close()
    }

    /// Waits for the sink's thread to end, at most until `deadline`
    /// (monotonic ns). False when it had not ended (a sink stuck in a system
    /// call); the process then exits without it.
    package func join(until deadline: Int64) async -> Bool {
        guard startsLater || started.load(ordering: .acquiring) else { return true }
        return await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            DispatchQueue.global().async { [done] in
                let wait = max(0, deadline - monotonicNanoseconds())
                let ended = done.wait(timeout: .now() + .nanoseconds(Int(wait))) == .success
                // Whoever waits next (a sink a reload retired is joined again at shutdown) passes too.
                if ended { done.signal() }
                continuation.resume(returning: ended)
            }
        }
    }

    /// After `join` gave up on a sink stuck in a call: the batch in its hands
    /// and whatever is still queued are counted lost (`shutdown`), so that
    /// the summary and the exit status tell the loss. Returns how many.
    package func abandon() -> Int {
        context.abandon() + queue.discardAll()
    }

    /// `beginStop` and `join` for one sink, with one second of grace after the drain deadline.
    package func stop(drainTimeout: Int64) async {
        let deadline = monotonicNanoseconds().addingSaturating(drainTimeout)
        beginStop(deadline: deadline)
        if await !join(until: deadline.addingSaturating(1_000_000_000)) { _ = abandon() }
    }

    package struct Stats {
        package var name: String
        package var type: String
        package var accepted: UInt64
        package var written: UInt64
        /// Every event lost, by reason: in the queue and in the sink.
        package var lost: LossCounts
        package var depth: Int
        package var highWater: Int
        /// Delivered cut short (see `SinkContext.truncated`).
        package var truncated: UInt64
        /// Written, in the kernel's send queue at exit (see `SinkContext.unconfirmed`).
        package var unconfirmed: UInt64
        /// Not sent for want of a client (see `SinkContext.noClient`).
        package var noClient: UInt64
        /// `TransportEvent`s by name, the non-zero ones.
        package var transport: [String: UInt64]
        /// An output plugin's: where it runs, its runners that ended and the
        /// new ones started (nil for other sinks).
        package var isolation: Isolation?
        package var crashes: UInt64?
        package var restarts: UInt64?
        /// An output plugin's writes answered RETRY (in whole or in part),
        /// and the events answered RETRY in them (written again).
        package var retries: UInt64?
        package var retriedEvents: UInt64?
        /// Why an output plugin's sink failed for good, once it has.
        package var failedForGood: String?
        /// Lost before the sink had them (queue full, or closed at shutdown).
        package var dropped: UInt64 { lost.queueFull + lost.shutdown + lost.bufferFull }
        /// Lost by the sink.
        package var failed: UInt64 { lost.writeFailed + lost.kernelBuffer + lost.tooLarge + lost.rejected }
    }

    package var stats: Stats {
        let q = queue.counters
        var lost = context.lost.counts
        lost.queueFull += q.queueFull
        lost.shutdown += q.shutdown
        let output = sink.outputRunner
        return Stats(name: config.name, type: config.type, accepted: q.accepted,
                     written: context.written.load(ordering: .relaxed), lost: lost, depth: q.depth, highWater: q.highWater,
                     truncated: context.truncated.load(ordering: .relaxed),
                     unconfirmed: context.unconfirmed.load(ordering: .relaxed),
                     noClient: context.noClient.load(ordering: .relaxed),
                     transport: context.transportEvents.snapshot, isolation: output?.isolation,
                     crashes: output?.runnerCrashes.load(ordering: .relaxed),
                     restarts: output?.runnerRestarts.load(ordering: .relaxed),
                     retries: output?.retries.load(ordering: .relaxed),
                     retriedEvents: output?.retriedEvents.load(ordering: .relaxed),
                     failedForGood: output?.failedForGood)
    }
}
