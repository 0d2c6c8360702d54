import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation

/// What a sink with a buffer of its own reports beside the runner's counts.
public struct SinkBufferReport: Codable, Sendable, Equatable {
    /// Events on disk, not yet delivered (kept for the next start at exit).
    package var buffered = 0
    /// Events found on disk at start, from an earlier run, sent again.
    package var replayed = 0
    /// Of those, events that had been handed to the peer before that run
    /// ended: the peer may have them twice.
    package var possibleDuplicates = 0
    /// Segments (or their tails) skipped because they were corrupt, and their bytes.
    package var corruptSegments = 0
    package var corruptBytes: Int64 = 0
    /// Bytes on disk not yet delivered, and the most it may hold (`max_size`).
    package var bytes: Int64?
    package var maxBytes: Int64?
}

/// `buffer: { type: disk }` of a network sink: the sink's thread appends
/// each batch to a `DiskBuffer` (so the events survive a crash, kill -9 or
/// an outage of the peer) and returns; a delivery thread of its own reads
/// them back in order and hands them to the network sink (`inner`), and
/// removes them from disk only once the inner sink delivered them: an OTLP
/// receiver answered 2xx, or, for the socket and syslog sinks, the kernel
/// took them (at-least-once needs an acknowledging peer). After a crash the
/// events not acknowledged are sent again, and those that had been handed to
/// the peer are counted as possible duplicates. At shutdown the delivery
/// thread goes on until the drain deadline; what it could not deliver stays
/// on disk for the next start and is not lost.
///
/// `when_full` (the buffer at `max_size`): `block` makes the sink's write
/// wait for room (its queue then fills, under the queue's overflow policy);
/// `drop_oldest` removes the oldest segment (counted lost, `buffer_full`);
/// `drop_newest` refuses the new events (counted lost, `buffer_full`).
package final class DiskBufferedSink: EventSink, @unchecked Sendable {  // the sink's thread and the delivery thread share only `state` and the buffer, each behind its lock
    let inner: any EventSink
    let config: SinkBufferConfig
    /// Opened on the sink's thread at its first call, not when the sink is
    /// made: a reload makes a changed sink's replacement before the old one
    /// has let go of the directory.
    private var opened: DiskBuffer?
    private var openError: (any Error)?
    let whenFull: SinkBufferConfig.WhenFull
    private var encoder: JSONLineEncoder
    private let decoder = JSONLineDecoder()
    private let innerContext: SinkContext
    private var outer: SinkContext?
    private let signal = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private let state = Mutex(State())
    private var lastSync: Int64 = 0
    private var loggedFull = false
    static let deliveryBatch = 512
    /// The newest event time handed to the inner sink (delivery thread only).
    private var newestDelivered: Int64 = 0
    /// How old the events just delivered may be before the inner sink is
    /// told it is behind (`SinkContext.behindBuffer`).
    static let behindLag: Int64 = 2_000_000_000

    private struct State {
        var stopping = false
        var started = false
        var delivered = 0
    }

    /// What the buffer keeps of the monitors whose events it holds, and
    /// where the running ones are known.
    private let remembered: RememberedMonitors?
    private let live: MonitorDirectory?

    init(inner: any EventSink, config: SinkBufferConfig, name: String, host: String, logger: Logger,
         remembered: RememberedMonitors? = nil, live: MonitorDirectory? = nil) {
        self.inner = inner
        self.remembered = remembered
        self.live = live
        self.config = config
        self.whenFull = config.whenFull
        encoder = JSONLineEncoder(host: host)
        var logger = logger
        logger[metadataKey: "sink"] = "\(name)"
        innerContext = SinkContext(name: name, logger: logger)
    }

    /// The buffer, opened (and recovered) at the first call; nil, logged,
    /// when it cannot be.
    private func buffer(_ context: SinkContext) -> DiskBuffer? {
        if let opened { return opened }
        if openError != nil { return nil }
        do {
            let buffer = try DiskBuffer(directory: config.path, maxBytes: config.maxSize,
                                        fsync: DiskBuffer.Fsync(rawValue: config.fsync.rawValue) ?? .interval)
            state.withLock { _ in self.opened = buffer }
            let r = buffer.recovery
            if r.pending > 0 {
                context.logger.notice("disk buffer \(config.path): \(r.pending) events from an earlier run to send (\(r.possibleDuplicates) of them sent before, possibly received twice)")
            }
            if r.stateDistrusted {
                context.logger.warning("disk buffer \(config.path): its state points past its data; every record is sent again (each a possible duplicate)")
            }
            if r.missingRecords > 0 {
                context.logger.error("disk buffer \(config.path): \(r.missingRecords) records its state counted are not on disk (segments emptied or removed from under it); they are lost")
            }
            if r.truncatedBytes > 0 {
                context.logger.warning("disk buffer \(config.path): a record torn by a crash was cut off (\(r.truncatedBytes) bytes)")
            }
            return buffer
        } catch {
            openError = error
            context.logger.critical("cannot open the disk buffer \(config.path): \(error); this sink's events are counted lost")
            return nil
        }
    }

    package var bufferReport: SinkBufferReport? {
        guard let buffer = state.withLock({ _ in opened }) else { return SinkBufferReport() }
        let r = buffer.recovery
        return SinkBufferReport(buffered: buffer.waiting, replayed: r.pending, possibleDuplicates: r.possibleDuplicates,
                                corruptSegments: buffer.corruptSegments, corruptBytes: buffer.corruptBytes,
                                bytes: buffer.totalBytes, maxBytes: buffer.maxBytes)
    }

    package func attach(wake: @escaping @Sendable () -> Void) { inner.attach(wake: wake) }

    /// The delivery thread starts with the first call (it needs the context
    /// and the buffer).
    private func startDelivery(_ context: SinkContext) {
        guard let buffer = buffer(context) else { return }
        guard state.withLock({ s -> Bool in
            defer { s.started = true }
            return !s.started
        }) else { return }
        outer = context
        startHostThread(named: "vigil-buffer-\(context.name)", stackSize: 512 << 10) { [self] in
            deliver(buffer)
            finished.signal()
        }
    }

    /// At once until the buffer is open (what an earlier run left is sent
    /// without waiting for an event); then fsync on the `interval` policy.
    package var tickInterval: Int64 {
        if opened == nil && openError == nil { return 1_000_000 }
        return config.fsync == .interval && opened != nil ? 1_000_000_000 : SinkTicks.never
    }

    package func tick(context: SinkContext) {
        startDelivery(context)
        if config.fsync == .interval { opened?.syncIfDirty() }
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        startDelivery(context)
        guard let buffer = opened else {
            throw SinkWriteError(delivered: 0, reason: .writeFailed,
                                 DiskBuffer.Failure(description: "the disk buffer \(config.path) cannot be opened: \(openError.map { "\($0)" } ?? "")"))
        }
        // The monitors' descriptions go to disk before their events.
        if let remembered, let live {
            remembered.note(batch) { live.facts(of: $0) }
            if let problem = remembered.untold() {
                context.logger.warning("disk buffer \(config.path): \(problem); events replayed after a restart from a monitor no longer running are mapped without its plugin's description")
            }
        }
        // In parts of at most an eighth of max_size: a batch larger than the
        // whole buffer (the queue filled while the buffer was full) never
        // fits, and `block` waited for room for it until the drain deadline.
        let partBytes = max(1, config.maxSize / 8)
        var line: [UInt8] = []
        var stored = 0
        var start = 0
        while start < batch.count {
            var payloads: [[UInt8]] = []
            var bytes = 0
            var end = start
            while end < batch.count && (end == start || Int64(bytes) < partBytes) {
                line.removeAll(keepingCapacity: true)
                encoder.encode(batch[end], into: &line)
                bytes += line.count + DiskBuffer.headerBytes
                payloads.append(line)
                end += 1
            }
            if try store(payloads, bytes: bytes, in: buffer, context, storedBefore: stored) { stored += payloads.count }
            start = end
        }
    }

    /// Appends one part of a batch, under `when_full`; false when it was
    /// dropped (drop_newest, counted). A throw says how many of the batch
    /// went to disk before (`storedBefore`): those are written.
    private func store(_ payloads: [[UInt8]], bytes: Int, in buffer: DiskBuffer, _ context: SinkContext,
                       storedBefore: Int) throws -> Bool {
        while buffer.wouldOverflow(adding: bytes) {
            switch whenFull {
            case .dropNewest:
                context.countLost(payloads.count, .bufferFull)
                logFull(context, "new events are dropped (when_full: drop_newest)")
                return false
            case .dropOldest:
                let dropped = buffer.dropOldest()
                guard dropped > 0 || buffer.totalBytes > 0 else { break }
                // They were counted written when they entered the buffer.
                context.countLostAfterWrite(dropped, .bufferFull)
                logFull(context, "the oldest events are dropped (when_full: drop_oldest)")
                if dropped == 0 { break }
                continue
            case .block:
                logFull(context, "the sink waits for the peer (when_full: block)")
                if context.shouldAbandon {
                    throw SinkWriteError(delivered: storedBefore, reason: .shutdown,
                                         DiskBuffer.Failure(description: "the disk buffer stayed full until the drain deadline"))
                }
                signal.signal()
                context.pause(50_000_000)
                continue
            }
            break
        }
        let recreated = buffer.directoryRecreated
        do {
            _ = try buffer.append(payloads)
        } catch {
            // What the disk took before it refused is in the buffer, to be delivered.
            let written = (error as? DiskBuffer.Failure)?.written ?? 0
            if written > 0 { signal.signal() }
            throw SinkWriteError(delivered: storedBefore + written, reason: .writeFailed, error)
        }
        if buffer.directoryRecreated > recreated {
            context.logger.warning("disk buffer \(config.path) was removed while in use: made again (the events it held are lost, counted when they are read)")
        }
        signal.signal()
        return true
    }

    private func logFull(_ context: SinkContext, _ what: String) {
        guard !loggedFull else { return }
        loggedFull = true
        context.logger.warning("disk buffer \(config.path) is full (max_size \(Units.formatSize(config.maxSize))): \(what)")
    }

    /// The delivery thread: reads what waits on disk and hands it to the
    /// inner sink, acknowledging what it delivered, until shutdown.
    private func deliver(_ buffer: DiskBuffer) {
        var lastInnerTick = monotonicNanoseconds()
        while true {
            if inner.ticksBehindBuffer,
               monotonicNanoseconds() >= lastInnerTick.addingSaturating(inner.tickInterval) {
                // Behind: events wait on disk, and those delivered last are
                // seconds old (an outage's backlog, not the steady stream).
                let lag = realtimeNanoseconds() - newestDelivered
                innerContext.behindBuffer.store(buffer.waiting > 0 && lag > Self.behindLag, ordering: .relaxed)
                inner.tick(context: innerContext)
                lastInnerTick = monotonicNanoseconds()
            }
            let stopping = state.withLock { $0.stopping }
            if let outer, outer.isClosing, innerContext.abandonDeadline == .max {
                innerContext.beginClosing(drainDeadline: outer.abandonDeadline)
            }
            let corruptBefore = buffer.corruptSegments
            let records = buffer.read(max: Self.deliveryBatch)
            if buffer.corruptSegments > corruptBefore, let outer {
                outer.logger.error("disk buffer \(buffer.directory): \(buffer.corruptSegments - corruptBefore) corrupt or missing segment parts skipped (\(buffer.corruptBytes) bytes corrupt, \(buffer.missingSegments) segments missing so far); their events are lost")
            }
            if records.isEmpty {
                if stopping { return }
                _ = signal.wait(timeout: .now() + .milliseconds(200))
                continue
            }
            var events: [Event] = []
            events.reserveCapacity(records.count)
            var undecodable = 0
            for record in records {
                if let decoded = try? decoder.decode(String(decoding: record.payload, as: UTF8.self)) {
                    events.append(decoded.event)
                    newestDelivered = max(newestDelivered, decoded.event.time)
                } else {
                    undecodable += 1
                }
            }
            let end = records[records.count - 1].end
            // Sent (a possible duplicate after a crash) once its first byte
            // may have left: when the inner sink says so, else now.
            if inner.reportsSending {
                innerContext.onSending = { buffer.markSent(upTo: end) }
            } else {
                buffer.markSent(upTo: end)
            }
            defer { innerContext.onSending = nil }
            let before = innerContext.lost.counts
            var gaveUp = false
            do {
                if !events.isEmpty { try inner.write(events, context: innerContext) }
            } catch {
                // Only a shutdown past the drain deadline ends a network
                // sink's write: the events stay on disk for the next start.
                gaveUp = true
            }
            if let why = inner.outputRunner?.failedForGood {
                // An output that failed for good answered for nothing of this
                // batch: it stays on disk (sent again, as possibly seen, at
                // the next start), as does everything after it.
                outer?.logger.error("disk buffer \(buffer.directory): the output failed (\(why)); nothing more is delivered in this run, and the \(buffer.pendingRecords) events on disk stay there for the next start, or a reload that changes the sink")
                return
            }
            let after = innerContext.lost.counts
            if let outer {
                for reason in LossReason.allCases where reason != .shutdown {
                    let n = Int(after[reason] &- before[reason])
                    if n > 0 { outer.countLostAfterWrite(n, reason) }
                }
                if undecodable > 0 {
                    outer.countLostAfterWrite(undecodable, .writeFailed)
                    outer.logger.error("disk buffer \(buffer.directory): \(undecodable) records did not decode as events; skipped")
                }
            }
            if gaveUp || after.shutdown > before.shutdown {
                return
            }
            buffer.acknowledge(upTo: end, records: records.count)
            state.withLock { $0.delivered += records.count }
        }
    }

    package func shutdown(context: SinkContext) {
        startDelivery(context)
        guard let buffer = opened else {
            inner.shutdown(context: innerContext)
            return
        }
        state.withLock { $0.stopping = true }
        signal.signal()
        // The delivery thread ends when the buffer is empty, or gives up at
        // the drain deadline (the inner sink's writes end then).
        innerContext.beginClosing(drainDeadline: context.abandonDeadline)
        while finished.wait(timeout: .now() + .milliseconds(100)) == .timedOut {
            if context.shouldAbandon {
                innerContext.beginClosing(drainDeadline: monotonicNanoseconds())
            }
        }
        // The inner sink's own late losses (a socket's send queue at the end)
        // were acknowledged from the buffer already: they are the run's.
        let before = innerContext.lost.counts
        let unconfirmedBefore = innerContext.unconfirmed.load(ordering: .relaxed)
        inner.shutdown(context: innerContext)
        let after = innerContext.lost.counts
        for reason in LossReason.allCases {
            let n = Int(after[reason] &- before[reason])
            if n > 0 { context.countLostAfterWrite(n, reason) }
        }
        // And those it left in the kernel's send queue, acknowledged from the
        // buffer already: the kernel delivers them after the run.
        context.countUnconfirmed(Int(clamping: innerContext.unconfirmed.load(ordering: .relaxed) &- unconfirmedBefore))
        let left = buffer.pendingRecords
        buffer.close()
        if left > 0 {
            context.logger.notice("\(left) events kept in the disk buffer \(buffer.directory) for the next start")
        }
    }

    package func requestReopen() { inner.requestReopen() }
    package func bind(logger: Logger) { inner.bind(logger: logger) }
    package var outputRunner: (any OutputRunnerReporting)? { inner.outputRunner }
    package var sendQueue: SendQueueReport? { inner.sendQueue }
    package func appendExposition(to bytes: inout [UInt8]) { inner.appendExposition(to: &bytes) }
}
