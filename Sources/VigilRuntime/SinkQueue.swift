import Foundation
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

/// A sink's bounded queue: many producers, one consumer (the sink's thread).
///
/// Producers append to an array; the consumer swaps the whole array out in
/// O(1), so events move from producer to sink without being copied or
/// retained again. `drop_oldest` skips a prefix (`head`) rather than removing
/// it, compacting once that prefix reaches the capacity. All of it is one
/// `State` behind one lock (no class properties on this path, so no run-time
/// exclusivity checks).
package final class SinkQueue: Sendable {  // all state behind its lock
    let capacity: Int
    package let overflow: OverflowPolicy
    private let state: LockedState<State>
    /// Both on the monotonic clock: a wall clock step must not stall a sink.
    private let notEmpty = ConditionVariable()
    private let notFull = ConditionVariable()
    /// The depth that ends the consumer's linger (`BatchLinger`) early.
    static let batchThreshold = 512

    private struct State {
        var pending: [Event] = []
        /// Events at the front of `pending` dropped by `drop_oldest`.
        var head = 0
        var count: Int { pending.count - head }
        var consumerWaiting = false
        /// The consumer woke to a few events and waits a moment for more, so
        /// it drains in batches instead of taking turns with the producer per event.
        var consumerLingering = false
        var producersWaiting = 0
        /// The consumer's estimate of the arrival rate: whether to linger.
        var linger = BatchLinger()
        /// Slots promised to producers of a blocking sink (see `reserve`).
        var reserved = 0
        var closed = false
        var wakeRequested = false
        var giveUpAt = Int64.max
        var accepted: UInt64 = 0
        /// Events refused because the queue was full (`queue_full`).
        var droppedFull: UInt64 = 0
        /// Events refused or discarded because the host was shutting down:
        /// the queue had closed, a producer's wait was given up, or the sink gave up.
        var droppedAtShutdown: UInt64 = 0
        var highWater = 0
        /// The queued events' JSON Lines, when the sink takes them made.
        var lane: LineLane?

        /// Appends; whether the consumer must be woken. A consumer waiting on
        /// an empty queue is woken at once; one lingering for a batch only
        /// when the batch is there.
        @inline(__always)
        mutating func append(_ event: consuming Event) -> Bool {
            // The producer makes the line only while the sink's thread is
            // behind (a batch's worth queued): then the producer's core is
            // the spare one. Otherwise the sink's thread makes it.
            if lane != nil {
                let behind = count >= SinkQueue.batchThreshold
                lane!.add(event, make: behind)
            }
            pending.append(event)
            accepted &+= 1
            let depth = count
            if depth > highWater { highWater = depth }
            let wake = consumerWaiting && (!consumerLingering || depth >= SinkQueue.batchThreshold)
            if wake { consumerWaiting = false }
            return wake
        }
    }

    /// `lines`: the encoder of a sink that takes its events' JSON Lines
    /// made by the producers (`EventSink.producerLines`).
    init(capacity: Int, overflow: OverflowPolicy, lines: JSONLineEncoder? = nil) {
        self.capacity = capacity
        self.overflow = overflow
        var initial = State()
        initial.lane = lines.map { LineLane(encoder: $0) }
        initial.pending.reserveCapacity(min(capacity, 4096))
        state = LockedState(initial)
    }

    /// Queues the one sink's event (`EventBus.publish`): stamps it with the
    /// next sequence number under the queue's lock and moves it in, applying
    /// the overflow policy when full (`force`: a blocking queue takes it
    /// over its bound instead). With `mayWait`, a full blocking queue takes
    /// nothing and returns false: the producer waits for room outside.
    @inline(__always)
    package func push(_ event: inout Event, seq: inout UInt64, sequence: borrowing Atomic<UInt64>, force: Bool,
              mayWait: Bool) -> Bool {
        lockForPush()
        if mayWait && !hasRoomLocked {
            unlockForPush(wake: false)
            return false
        }
        seq = sequence.wrappingAdd(1, ordering: .relaxed).newValue
        event.seq = seq
        unlockForPush(wake: appendLocked(taking: &event, force: force, reserved: false))
        return true
    }

    /// Adds an event as it is (its `seq` unchanged), applying the overflow
    /// policy when full (`force`: a blocking queue takes it over its bound).
    func push(_ event: Event, force: Bool = false) {
        var event = event
        lockForPush()
        unlockForPush(wake: appendLocked(taking: &event, force: force, reserved: false))
    }

    /// Adds an event for which `reserve` promised room.
    func pushReserved(_ event: Event) {
        var event = event
        lockForPush()
        unlockForPush(wake: appendLocked(taking: &event, force: false, reserved: true))
    }

    /// Locks the queue for `appendLocked`; `unlockForPush` ends it.
    @inline(__always)
    package func lockForPush() { state.lock() }

    /// Unlocks, then wakes the consumer when `appendLocked` said to.
    @inline(__always)
    package func unlockForPush(wake: Bool) {
        state.unlock()
        if wake { notEmpty.signal() }
    }

    /// Whether a blocking producer may queue now without waiting (a closed
    /// queue counts its loss instead). Locked.
    package var hasRoomLocked: Bool {
        let s = state.lockedState
        return s.pointee.closed || s.pointee.count + s.pointee.reserved < capacity
    }

    /// Moves `event` in (leaving an empty one behind), applying the overflow
    /// policy, or using the room `reserve` promised (`reserved`); whether
    /// the consumer must be woken. Locked.
    @inline(__always)
    package func appendLocked(taking event: inout Event, force: Bool, reserved: Bool) -> Bool {
        let s = state.lockedState
        if reserved { s.pointee.reserved -= 1 }
        if s.pointee.closed {
            s.pointee.droppedAtShutdown &+= 1
            return false
        }
        if !reserved && s.pointee.count + s.pointee.reserved >= capacity && !force {
            switch overflow {
            case .dropNewest, .block:
                s.pointee.droppedFull &+= 1
                return false
            case .dropOldest:
                s.pointee.droppedFull &+= 1
                if s.pointee.count == 0 { return false }
                s.pointee.head += 1
                if s.pointee.head >= capacity {
                    // Amortised: one O(capacity) compaction per `capacity` drops.
                    s.pointee.pending.removeFirst(s.pointee.head)
                    s.pointee.lane?.lines.removeFirst(s.pointee.head)
                    s.pointee.head = 0
                }
            }
        }
        var taken = Event(time: 0, monitor: "", plugin: "", kind: "")
        swap(&taken, &event)
        return s.pointee.append(consume taken)
    }

    /// Waits until the queue has room for one more event and promises it to
    /// the caller. False when the queue closed or the shutdown deadline passed.
    package func reserve() -> Bool {
        state.withLockedPointer { s in
            s.pointee.producersWaiting += 1
            defer { s.pointee.producersWaiting -= 1 }
            while s.pointee.count + s.pointee.reserved >= capacity {
                if s.pointee.closed || monotonicNanoseconds() >= s.pointee.giveUpAt { return false }
                notFull.wait(state, until: monotonicNanoseconds().addingSaturating(100_000_000))
            }
            if s.pointee.closed { return false }
            s.pointee.reserved += 1
            return true
        }
    }

    /// Gives back a slot `reserve` promised (the sink was reconfigured away).
    package func cancelReservation() {
        state.withLock { $0.reserved -= 1 }
        notFull.signal()
    }

    /// Counts an event a producer gave up waiting to queue at shutdown.
    package func countLostAtShutdown() {
        state.withLock { $0.droppedAtShutdown &+= 1 }
    }

    package func giveUpWaiting(at deadline: Int64) {
        state.withLock { $0.giveUpAt = deadline }
        notFull.broadcast()
    }

    /// Moves every queued event into `batch` (which must be empty; its
    /// storage is handed back to the producers), waiting up to `timeout` ns
    /// for the first. Returns false once the queue is closed and empty.
    /// `pop` for a sink that takes no lines made.
    func pop(into batch: inout [Event], timeout: Int64) -> Bool {
        var none = EncodedLines()
        return pop(into: &batch, lines: &none, timeout: timeout)
    }

    /// With a sink that takes its lines made, `lines` (empty) gets theirs.
    func pop(into batch: inout [Event], lines: inout EncodedLines, timeout: Int64) -> Bool {
        precondition(batch.isEmpty)
        let (more, n, skip, wakeProducers) = state.withLockedPointer { s -> (Bool, Int, Int, Bool) in
            if s.pointee.count == 0 && !s.pointee.closed {
                let deadline = monotonicNanoseconds().addingSaturating(timeout)
                s.pointee.consumerWaiting = true
                while s.pointee.count == 0 && !s.pointee.closed && !s.pointee.wakeRequested {
                    if !notEmpty.wait(state, until: deadline) { break }
                }
                s.pointee.consumerWaiting = false
            }
            if s.pointee.linger.fast && s.pointee.count > 0 && s.pointee.count < Self.batchThreshold
                && !s.pointee.closed && s.pointee.producersWaiting == 0 {
                // A few events: give the producers a moment to make it a batch.
                let deadline = monotonicNanoseconds().addingSaturating(BatchLinger.nanoseconds)
                s.pointee.consumerWaiting = true
                s.pointee.consumerLingering = true
                while s.pointee.count < Self.batchThreshold && !s.pointee.closed {
                    if !notEmpty.wait(state, until: deadline) { break }
                }
                s.pointee.consumerLingering = false
                s.pointee.consumerWaiting = false
            }
            let n = s.pointee.count
            let skip = s.pointee.head
            if n > 0 || skip > 0 {
                swap(&batch, &s.pointee.pending)
                if s.pointee.lane != nil { swap(&lines, &s.pointee.lane!.lines) }
                s.pointee.head = 0
            }
            s.pointee.linger.took(n, now: monotonicNanoseconds())
            let more = !(s.pointee.closed && s.pointee.count == 0)
            return (more, n, skip, s.pointee.producersWaiting > 0 && n > 0)
        }
        if skip > 0 {
            batch.removeFirst(skip)
            if !lines.ends.isEmpty { lines.removeFirst(skip) }
        }
        if wakeProducers { notFull.broadcast() }
        return more || n > 0
    }

    /// Wakes the consumer without an event (a sink has other work to do).
    func wake() {
        state.withLock { $0.wakeRequested = true }
        notEmpty.signal()
    }

    /// Whether `wake` was called since the last time this was asked.
    func takeWakeRequest() -> Bool {
        state.withLock { s in
            defer { s.wakeRequested = false }
            return s.wakeRequested
        }
    }

    /// Whether more than `count` events were dropped for a full queue (cheap to ask).
    func hasDrops(since count: UInt64) -> Bool {
        state.withLock { $0.droppedFull > count }
    }

    /// Stops accepting events; the consumer drains what is queued.
    func close() {
        state.withLock { $0.closed = true }
        notEmpty.broadcast()
        notFull.broadcast()
    }

    /// Discards everything still queued (a sink that gave up at shutdown);
    /// returns how many.
    func discardAll() -> Int {
        let n = state.withLock { s -> Int in
            let n = s.count
            s.pending.removeAll()
            s.lane?.lines.removeAll(keepingCapacity: false)
            s.head = 0
            s.droppedAtShutdown &+= UInt64(n)
            return n
        }
        notFull.broadcast()
        return n
    }

    package var depth: Int { state.withLock { $0.count } }

    package struct Counters {
        var accepted: UInt64
        var queueFull: UInt64
        var shutdown: UInt64
        var depth: Int
        var highWater: Int
        var dropped: UInt64 { queueFull + shutdown }
    }

    var counters: Counters {
        state.withLock { s in
            Counters(accepted: s.accepted, queueFull: s.droppedFull, shutdown: s.droppedAtShutdown, depth: s.count, highWater: s.highWater)
        }
    }
}

/// A queue's producer side of `EncodedLines`: an event's line is made as
/// it is queued, under the queue's lock, with its seq, on the producer's
/// thread, when the sink's thread is behind. A sink that writes JSON Lines
/// spends most of its time encoding; a producer that waits for it has a
/// core to spare, and sharing the encoding uses both. Measured (issue 24):
/// encoding every line on the producers made the producer the bottleneck
/// instead (flood -> file 0.83x with 1 field, 1.15x with 4); sharing it by
/// the queue's depth settles where both threads are busy.
package struct LineLane: Sendable {
    var encoder: JSONLineEncoder
    var lines = EncodedLines()

    @inline(__always)
    mutating func add(_ event: borrowing Event, make: Bool) {
        if make { encoder.encode(event, into: &lines.bytes) }
        lines.ends.append(lines.bytes.count)
    }
}
