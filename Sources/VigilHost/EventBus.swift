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
    private let lock = Lock()
    private var seq: UInt64 = 0
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
        lock.lock()
        seq &+= 1
        event.seq = seq
        if targets.isEmpty {
            lock.unlock()
            unrouted.add(1, ordering: .relaxed)
            return
        }
        targets.forEach { i in
            if reserved.contains(i) {
                sinks[i].queue.pushReserved(event)
            } else if mustWait.contains(i) && wait {
                sinks[i].queue.countLostAtShutdown()  // the wait was given up at shutdown
            } else {
                sinks[i].queue.push(event, force: !wait)
            }
        }
        lock.unlock()
    }

    /// From now on, producers waiting for room in a blocking sink give up at
    /// `deadline` (monotonic ns) and their events are counted as lost to the
    /// shutdown.
    func beginShutdown(deadline: Int64) {
        blocking.forEach { sinks[$0].queue.giveUpWaiting(at: deadline) }
    }

    var lastSequence: UInt64 { lock.withLock { seq } }
}

/// A sink's bounded queue: many producers, one consumer (the sink's thread).
///
/// Producers append to an array; the consumer swaps the whole array out in
/// O(1), so events move from producer to sink without being copied or
/// retained again. `drop_oldest` skips a prefix (`head`) rather than removing
/// it, compacting once that prefix reaches the capacity.
final class SinkQueue: @unchecked Sendable {
    let capacity: Int
    let overflow: OverflowPolicy
    private var pending: [Event] = []
    /// Events at the front of `pending` dropped by `drop_oldest`.
    private var head = 0
    private var count: Int { pending.count - head }
    private let mutex = Lock()
    /// Both on the monotonic clock: a wall clock step must not stall a sink.
    private let notEmpty = ConditionVariable()
    private let notFull = ConditionVariable()
    private var consumerWaiting = false
    /// The consumer woke to a few events and waits a moment for more, so it
    /// drains in batches instead of taking turns with the producer per event.
    private var consumerLingering = false
    private var producersWaiting = 0
    /// How long the consumer lingers, and the depth that ends the linger early.
    static let lingerNanoseconds: Int64 = 200_000
    static let batchThreshold = 512
    /// Lingering pays only when events come fast: below this rate (events/s)
    /// each event is taken at once, so low rates see no added latency.
    static let lingerAboveRate = 100_000
    /// Events popped in the current measuring window, and when it began: the
    /// consumer's estimate of the arrival rate. Consumer-side only.
    private var windowEvents = 0
    private var windowStart = monotonicNanoseconds()
    private var fastArrivals = false
    /// Slots promised to producers of a blocking sink (see `reserve`).
    private var reserved = 0
    private var closed = false
    private var wakeRequested = false
    private var giveUpAt = Int64.max

    // Counters, read by stats; written under the mutex.
    private(set) var accepted: UInt64 = 0
    /// Events refused because the queue was full (`queue_full`).
    private(set) var droppedFull: UInt64 = 0
    /// Events refused or discarded because the host was shutting down: the
    /// queue had closed, a producer's wait was given up, or the sink gave up.
    private(set) var droppedAtShutdown: UInt64 = 0
    private(set) var highWater = 0

    init(capacity: Int, overflow: OverflowPolicy) {
        self.capacity = capacity
        self.overflow = overflow
        pending.reserveCapacity(min(capacity, 4096))
    }


    /// Adds an event without waiting, applying the overflow policy when full
    /// (`force`: a blocking queue takes it over its bound instead).
    func push(_ event: Event, force: Bool = false) {
        mutex.lock()
        if closed {
            droppedAtShutdown &+= 1
            mutex.unlock()
            return
        }
        if count + reserved >= capacity && !force {
            switch overflow {
            case .dropNewest, .block:
                droppedFull &+= 1
                mutex.unlock()
                return
            case .dropOldest:
                if count == 0 {
                    droppedFull &+= 1
                    mutex.unlock()
                    return
                }
                head += 1
                droppedFull &+= 1
                if head >= capacity {
                    // Amortised: one O(capacity) compaction per `capacity` drops.
                    pending.removeFirst(head)
                    head = 0
                }
            }
        }
        appendLocked(event)
    }

    /// Waits until the queue has room for one more event and promises it to
    /// the caller. False when the queue closed or the shutdown deadline passed.
    func reserve() -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        producersWaiting += 1
        defer { producersWaiting -= 1 }
        while count + reserved >= capacity {
            if closed || monotonicNanoseconds() >= giveUpAt { return false }
            notFull.wait(mutex, until: monotonicNanoseconds().addingSaturating(100_000_000))
        }
        if closed { return false }
        reserved += 1
        return true
    }

    /// Adds an event for which `reserve` promised room.
    func pushReserved(_ event: Event) {
        mutex.lock()
        reserved -= 1
        if closed {
            droppedAtShutdown &+= 1
            mutex.unlock()
            return
        }
        appendLocked(event)
    }

    /// Counts an event a producer gave up waiting to queue at shutdown.
    func countLostAtShutdown() {
        mutex.lock()
        droppedAtShutdown &+= 1
        mutex.unlock()
    }

    func giveUpWaiting(at deadline: Int64) {
        mutex.lock()
        giveUpAt = deadline
        mutex.unlock()
        notFull.broadcast()
    }

    /// Appends and wakes the consumer; releases the mutex.
    @inline(__always)
    private func appendLocked(_ event: Event) {
        pending.append(event)
        accepted &+= 1
        let depth = count
        if depth > highWater { highWater = depth }
        // Wake a consumer waiting on an empty queue at once; one lingering for
        // a batch only when the batch is there.
        let wake = consumerWaiting && (!consumerLingering || depth >= Self.batchThreshold)
        if wake { consumerWaiting = false }
        mutex.unlock()
        if wake { notEmpty.signal() }
    }

    /// Moves every queued event into `batch` (which must be empty; its
    /// storage is handed back to the producers), waiting up to `timeout` ns
    /// for the first. Returns false once the queue is closed and empty.
    func pop(into batch: inout [Event], timeout: Int64) -> Bool {
        precondition(batch.isEmpty)
        mutex.lock()
        if count == 0 && !closed {
            let deadline = monotonicNanoseconds().addingSaturating(timeout)
            consumerWaiting = true
            while count == 0 && !closed && !wakeRequested {
                if !notEmpty.wait(mutex, until: deadline) { break }
            }
            consumerWaiting = false
        }
        if fastArrivals && count > 0 && count < Self.batchThreshold && !closed && producersWaiting == 0 {
            // A few events: give the producers a moment to make it a batch.
            let deadline = monotonicNanoseconds().addingSaturating(Self.lingerNanoseconds)
            consumerWaiting = true
            consumerLingering = true
            while count < Self.batchThreshold && !closed {
                if !notEmpty.wait(mutex, until: deadline) { break }
            }
            consumerLingering = false
            consumerWaiting = false
        }
        let n = count
        let skip = head
        if n > 0 || skip > 0 {
            swap(&batch, &pending)
            head = 0
        }
        // Re-estimate the arrival rate every 10 ms of popping.
        windowEvents += n
        let now = monotonicNanoseconds()
        if now - windowStart >= 10_000_000 {
            fastArrivals = windowEvents * 1_000_000_000 / Int(now - windowStart) >= Self.lingerAboveRate
            windowEvents = 0
            windowStart = now
        }
        let more = !(closed && count == 0)
        let wakeProducers = producersWaiting > 0 && n > 0
        mutex.unlock()
        if skip > 0 { batch.removeFirst(skip) }
        if wakeProducers { notFull.broadcast() }
        return more || n > 0
    }

    /// Wakes the consumer without an event (a sink has other work to do).
    func wake() {
        mutex.lock()
        wakeRequested = true
        mutex.unlock()
        notEmpty.signal()
    }

    /// Whether `wake` was called since the last time this was asked.
    func takeWakeRequest() -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        let requested = wakeRequested
        wakeRequested = false
        return requested
    }

    /// Whether more than `count` events were dropped for a full queue (cheap to ask).
    func hasDrops(since count: UInt64) -> Bool {
        mutex.lock()
        defer { mutex.unlock() }
        return droppedFull > count
    }

    /// Stops accepting events; the consumer drains what is queued.
    func close() {
        mutex.lock()
        closed = true
        mutex.unlock()
        notEmpty.broadcast()
        notFull.broadcast()
    }

    /// Discards everything still queued (a sink that gave up at shutdown);
    /// returns how many.
    func discardAll() -> Int {
        mutex.lock()
        let n = count
        pending.removeAll()
        head = 0
        droppedAtShutdown &+= UInt64(n)
        mutex.unlock()
        notFull.broadcast()
        return n
    }

    var depth: Int {
        mutex.lock()
        defer { mutex.unlock() }
        return count
    }

    struct Counters {
        var accepted: UInt64
        var queueFull: UInt64
        var shutdown: UInt64
        var depth: Int
        var highWater: Int
        var dropped: UInt64 { queueFull + shutdown }
    }

    var counters: Counters {
        mutex.lock()
        defer { mutex.unlock() }
        return Counters(accepted: accepted, queueFull: droppedFull, shutdown: droppedAtShutdown, depth: count, highWater: highWater)
    }
}
