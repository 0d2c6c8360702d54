import Foundation
import Synchronization
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
    private let lock = NSLockish()
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
    private var mutex = pthread_mutex_t()
    private var notEmpty = pthread_cond_t()
    private var notFull = pthread_cond_t()
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
        pthread_mutex_init(&mutex, nil)
        // Timed waits measure monotonic time: a wall clock step must not stall a sink.
        var attr = pthread_condattr_t()
        pthread_condattr_init(&attr)
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)
        pthread_cond_init(&notEmpty, &attr)
        pthread_cond_init(&notFull, &attr)
        pthread_condattr_destroy(&attr)
    }

    deinit {
        pthread_cond_destroy(&notEmpty)
        pthread_cond_destroy(&notFull)
        pthread_mutex_destroy(&mutex)
    }

    /// Adds an event without waiting, applying the overflow policy when full
    /// (`force`: a blocking queue takes it over its bound instead).
    func push(_ event: Event, force: Bool = false) {
        pthread_mutex_lock(&mutex)
        if closed {
            droppedAtShutdown &+= 1
            pthread_mutex_unlock(&mutex)
            return
        }
        if count + reserved >= capacity && !force {
            switch overflow {
            case .dropNewest, .block:
                droppedFull &+= 1
                pthread_mutex_unlock(&mutex)
                return
            case .dropOldest:
                if count == 0 {
                    droppedFull &+= 1
                    pthread_mutex_unlock(&mutex)
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
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        producersWaiting += 1
        defer { producersWaiting -= 1 }
        while count + reserved >= capacity {
            if closed || monotonicNanoseconds() >= giveUpAt { return false }
            var deadline = Self.deadline(after: 100_000_000)
            pthread_cond_timedwait(&notFull, &mutex, &deadline)
        }
        if closed { return false }
        reserved += 1
        return true
    }

    /// Adds an event for which `reserve` promised room.
    func pushReserved(_ event: Event) {
        pthread_mutex_lock(&mutex)
        reserved -= 1
        if closed {
            droppedAtShutdown &+= 1
            pthread_mutex_unlock(&mutex)
            return
        }
        appendLocked(event)
    }

    /// Counts an event a producer gave up waiting to queue at shutdown.
    func countLostAtShutdown() {
        pthread_mutex_lock(&mutex)
        droppedAtShutdown &+= 1
        pthread_mutex_unlock(&mutex)
    }

    func giveUpWaiting(at deadline: Int64) {
        pthread_mutex_lock(&mutex)
        giveUpAt = deadline
        pthread_mutex_unlock(&mutex)
        pthread_cond_broadcast(&notFull)
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
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&notEmpty) }
    }

    /// Monotonic time `ns` from now, for a timed wait; saturates (a wait of
    /// `Int64.max` ns ends in some hundreds of years, not in a trap).
    static func deadline(after ns: Int64) -> timespec {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let wait = max(0, ns)
        ts.tv_sec = Int(Int64(ts.tv_sec).addingSaturating(wait / 1_000_000_000))
        let total = Int64(ts.tv_nsec) + wait % 1_000_000_000
        ts.tv_sec = Int(Int64(ts.tv_sec).addingSaturating(total / 1_000_000_000))
        ts.tv_nsec = Int(total % 1_000_000_000)
        return ts
    }

    /// Moves every queued event into `batch` (which must be empty; its
    /// storage is handed back to the producers), waiting up to `timeout` ns
    /// for the first. Returns false once the queue is closed and empty.
    func pop(into batch: inout [Event], timeout: Int64) -> Bool {
        precondition(batch.isEmpty)
        pthread_mutex_lock(&mutex)
        if count == 0 && !closed {
            var deadline = Self.deadline(after: timeout)
            consumerWaiting = true
            while count == 0 && !closed && !wakeRequested {
                if pthread_cond_timedwait(&notEmpty, &mutex, &deadline) == ETIMEDOUT { break }
            }
            consumerWaiting = false
        }
        if fastArrivals && count > 0 && count < Self.batchThreshold && !closed && producersWaiting == 0 {
            // A few events: give the producers a moment to make it a batch.
            var deadline = Self.deadline(after: Self.lingerNanoseconds)
            consumerWaiting = true
            consumerLingering = true
            while count < Self.batchThreshold && !closed {
                if pthread_cond_timedwait(&notEmpty, &mutex, &deadline) == ETIMEDOUT { break }
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
        pthread_mutex_unlock(&mutex)
        if skip > 0 { batch.removeFirst(skip) }
        if wakeProducers { pthread_cond_broadcast(&notFull) }
        return more || n > 0
    }

    /// Wakes the consumer without an event (a sink has other work to do).
    func wake() {
        pthread_mutex_lock(&mutex)
        wakeRequested = true
        pthread_mutex_unlock(&mutex)
        pthread_cond_signal(&notEmpty)
    }

    /// Whether `wake` was called since the last time this was asked.
    func takeWakeRequest() -> Bool {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        let requested = wakeRequested
        wakeRequested = false
        return requested
    }

    /// Whether more than `count` events were dropped for a full queue (cheap to ask).
    func hasDrops(since count: UInt64) -> Bool {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return droppedFull > count
    }

    /// Stops accepting events; the consumer drains what is queued.
    func close() {
        pthread_mutex_lock(&mutex)
        closed = true
        pthread_mutex_unlock(&mutex)
        pthread_cond_broadcast(&notEmpty)
        pthread_cond_broadcast(&notFull)
    }

    /// Discards everything still queued (a sink that gave up at shutdown);
    /// returns how many.
    func discardAll() -> Int {
        pthread_mutex_lock(&mutex)
        let n = count
        pending.removeAll()
        head = 0
        droppedAtShutdown &+= UInt64(n)
        pthread_mutex_unlock(&mutex)
        pthread_cond_broadcast(&notFull)
        return n
    }

    var depth: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
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
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return Counters(accepted: accepted, queueFull: droppedFull, shutdown: droppedAtShutdown, depth: count, highWater: highWater)
    }
}
