import Foundation
import Synchronization
import VigilABI
import VigilCore

/// Where every event goes after a plugin's `emit` has copied it: a sequence
/// number is assigned and the event is pushed onto the queue of every sink its
/// route selects. Producers never wait on a sink unless that sink's overflow
/// policy is `block`, and then they wait only for that sink, outside the bus
/// lock: a full blocking sink stalls the producers that route to it, never the
/// others.
public final class EventBus: @unchecked Sendable {
    let sinks: [SinkRunner]
    /// Sinks whose overflow policy is `block`.
    private let blocking: SinkSet
    /// The last sequence number given; the bus lock is this state's.
    private let seq = LockedState<UInt64>(0)
    /// Events that matched no sink.
    let unrouted = Atomic<UInt64>(0)

    init(sinks: [SinkRunner]) {
        self.sinks = sinks
        var blocking = SinkSet()
        for (i, sink) in sinks.enumerated() where sink.queue.overflow == .block { blocking.insert(i) }
        self.blocking = blocking
    }

    /// Stamps `event` with the next sequence number and queues it for `targets`.
    /// Sequence order is queue order, so every sink sees increasing `seq`.
    /// With `wait: false` (the host's own events) a full blocking sink takes
    /// the event over its bound rather than making the host wait.
    @inline(__always)
    func publish(_ event: inout Event, to targets: SinkSet, wait: Bool = true) {
        // Room in blocking sinks is reserved first, without the bus lock held.
        var reserved = SinkSet()
        let mustWait = targets & blocking
        if wait && !mustWait.isEmpty {
            mustWait.forEach { if sinks[$0].queue.reserve() { reserved.insert($0) } }
        }
        if targets.isEmpty {
            event.seq = seq.withLock { seq in
                seq &+= 1
                return seq
            }
            unrouted.add(1, ordering: .relaxed)
            return
        }
        seq.withLock { seq in
            seq &+= 1
            event.seq = seq
            targets.forEach { i in
                if reserved.contains(i) {
                    sinks[i].queue.pushReserved(event)
                } else if mustWait.contains(i) && wait {
                    sinks[i].queue.countLostAtShutdown()  // the wait was given up at shutdown
                } else {
                    sinks[i].queue.push(event, force: !wait)
                }
            }
        }
    }

    /// From now on, producers waiting for room in a blocking sink give up at
    /// `deadline` (monotonic ns) and their events are counted as lost to the
    /// shutdown.
    func beginShutdown(deadline: Int64) {
        blocking.forEach { sinks[$0].queue.giveUpWaiting(at: deadline) }
    }

    var lastSequence: UInt64 { seq.withLock { $0 } }
}

/// A sink's bounded queue: many producers, one consumer (the sink's thread).
///
/// Producers append to an array; the consumer swaps the whole array out in
/// O(1), so events move from producer to sink without being copied or
/// retained again. `drop_oldest` skips a prefix (`head`) rather than removing
/// it, compacting once that prefix reaches the capacity. All of it is one
/// `State` behind one lock (no class properties on this path, so no run-time
/// exclusivity checks).
final class SinkQueue: Sendable {
    let capacity: Int
    let overflow: OverflowPolicy
    private let state: LockedState<State>
    /// Both on the monotonic clock: a wall clock step must not stall a sink.
    private let notEmpty = ConditionVariable()
    private let notFull = ConditionVariable()
    /// How long the consumer lingers, and the depth that ends the linger early.
    static let lingerNanoseconds: Int64 = 200_000
    static let batchThreshold = 512
    /// Lingering pays only when events come fast: below this rate (events/s)
    /// each event is taken at once, so low rates see no added latency.
    static let lingerAboveRate = 100_000

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
        /// Events popped in the current measuring window, and when it began:
        /// the consumer's estimate of the arrival rate.
        var windowEvents = 0
        var windowStart = monotonicNanoseconds()
        var fastArrivals = false
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

        /// Appends; whether the consumer must be woken. A consumer waiting on
        /// an empty queue is woken at once; one lingering for a batch only
        /// when the batch is there.
        @inline(__always)
        mutating func append(_ event: Event) -> Bool {
            pending.append(event)
            accepted &+= 1
            let depth = count
            if depth > highWater { highWater = depth }
            let wake = consumerWaiting && (!consumerLingering || depth >= SinkQueue.batchThreshold)
            if wake { consumerWaiting = false }
            return wake
        }
    }

    init(capacity: Int, overflow: OverflowPolicy) {
        self.capacity = capacity
        self.overflow = overflow
        var initial = State()
        initial.pending.reserveCapacity(min(capacity, 4096))
        state = LockedState(initial)
    }

    /// Adds an event without waiting, applying the overflow policy when full
    /// (`force`: a blocking queue takes it over its bound instead).
    func push(_ event: Event, force: Bool = false) {
        let wake = state.withLock { s -> Bool in
            if s.closed {
                s.droppedAtShutdown &+= 1
                return false
            }
            if s.count + s.reserved >= capacity && !force {
                switch overflow {
                case .dropNewest, .block:
                    s.droppedFull &+= 1
                    return false
                case .dropOldest:
                    s.droppedFull &+= 1
                    if s.count == 0 { return false }
                    s.head += 1
                    if s.head >= capacity {
                        // Amortised: one O(capacity) compaction per `capacity` drops.
                        s.pending.removeFirst(s.head)
                        s.head = 0
                    }
                }
            }
            return s.append(event)
        }
        if wake { notEmpty.signal() }
    }

    /// Waits until the queue has room for one more event and promises it to
    /// the caller. False when the queue closed or the shutdown deadline passed.
    func reserve() -> Bool {
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

    /// Adds an event for which `reserve` promised room.
    func pushReserved(_ event: Event) {
        let wake = state.withLock { s -> Bool in
            s.reserved -= 1
            if s.closed {
                s.droppedAtShutdown &+= 1
                return false
            }
            return s.append(event)
        }
        if wake { notEmpty.signal() }
    }

    /// Counts an event a producer gave up waiting to queue at shutdown.
    func countLostAtShutdown() {
        state.withLock { $0.droppedAtShutdown &+= 1 }
    }

    func giveUpWaiting(at deadline: Int64) {
        state.withLock { $0.giveUpAt = deadline }
        notFull.broadcast()
    }

    /// Moves every queued event into `batch` (which must be empty; its
    /// storage is handed back to the producers), waiting up to `timeout` ns
    /// for the first. Returns false once the queue is closed and empty.
    func pop(into batch: inout [Event], timeout: Int64) -> Bool {
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
            if s.pointee.fastArrivals && s.pointee.count > 0 && s.pointee.count < Self.batchThreshold
                && !s.pointee.closed && s.pointee.producersWaiting == 0 {
                // A few events: give the producers a moment to make it a batch.
                let deadline = monotonicNanoseconds().addingSaturating(Self.lingerNanoseconds)
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
                s.pointee.head = 0
            }
            // Re-estimate the arrival rate every 10 ms of popping.
            s.pointee.windowEvents += n
            let now = monotonicNanoseconds()
            if now - s.pointee.windowStart >= 10_000_000 {
                s.pointee.fastArrivals = s.pointee.windowEvents * 1_000_000_000 / Int(now - s.pointee.windowStart) >= Self.lingerAboveRate
                s.pointee.windowEvents = 0
                s.pointee.windowStart = now
            }
            let more = !(s.pointee.closed && s.pointee.count == 0)
            return (more, n, skip, s.pointee.producersWaiting > 0 && n > 0)
        }
        if skip > 0 { batch.removeFirst(skip) }
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
            s.head = 0
            s.droppedAtShutdown &+= UInt64(n)
            return n
        }
        notFull.broadcast()
        return n
    }

    var depth: Int { state.withLock { $0.count } }

    struct Counters {
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
