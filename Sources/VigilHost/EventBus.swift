import DequeModule
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
                sinks[i].queue.countDropped()  // the wait was given up at shutdown
            } else {
                sinks[i].queue.push(event, force: !wait)
            }
        }
        lock.unlock()
    }

    /// From now on, producers waiting for room in a blocking sink give up at
    /// `deadline` (monotonic ns) and their events are counted as dropped.
    func beginShutdown(deadline: Int64) {
        blocking.forEach { sinks[$0].queue.giveUpWaiting(at: deadline) }
    }

    var lastSequence: UInt64 { lock.withLock { seq } }
}

/// A sink's bounded queue: many producers, one consumer (the sink's thread).
final class SinkQueue: @unchecked Sendable {
    let capacity: Int
    let overflow: OverflowPolicy
    private var buffer: Deque<Event>
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
    /// Slots promised to producers of a blocking sink (see `reserve`).
    private var reserved = 0
    private var closed = false
    private var giveUpAt = Int64.max

    // Counters, read by stats; written under the mutex.
    private(set) var accepted: UInt64 = 0
    private(set) var dropped: UInt64 = 0
    private(set) var highWater = 0

    init(capacity: Int, overflow: OverflowPolicy) {
        self.capacity = capacity
        self.overflow = overflow
        self.buffer = Deque(minimumCapacity: min(capacity, 4096))
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
            dropped &+= 1
            pthread_mutex_unlock(&mutex)
            return
        }
        if buffer.count + reserved >= capacity && !force {
            switch overflow {
            case .dropNewest, .block:
                dropped &+= 1
                pthread_mutex_unlock(&mutex)
                return
            case .dropOldest:
                if buffer.isEmpty {
                    dropped &+= 1
                    pthread_mutex_unlock(&mutex)
                    return
                }
                buffer.removeFirst()
                dropped &+= 1
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
        while buffer.count + reserved >= capacity {
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
            dropped &+= 1
            pthread_mutex_unlock(&mutex)
            return
        }
        appendLocked(event)
    }

    func countDropped() {
        pthread_mutex_lock(&mutex)
        dropped &+= 1
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
        buffer.append(event)
        accepted &+= 1
        if buffer.count > highWater { highWater = buffer.count }
        // Wake a consumer waiting on an empty queue at once; one lingering for
        // a batch only when the batch is there.
        let wake = consumerWaiting && (!consumerLingering || buffer.count >= Self.batchThreshold)
        if wake { consumerWaiting = false }
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&notEmpty) }
    }

    static func deadline(after ns: Int64) -> timespec {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        let total = Int64(ts.tv_nsec) + ns
        ts.tv_sec += Int(total / 1_000_000_000)
        ts.tv_nsec = Int(total % 1_000_000_000)
        return ts
    }

    /// Moves up to `max` events into `batch`, waiting up to `timeout` ns for the
    /// first. Returns false once the queue is closed and empty.
    func pop(into batch: inout [Event], max: Int, timeout: Int64) -> Bool {
        pthread_mutex_lock(&mutex)
        if buffer.isEmpty && !closed {
            var deadline = Self.deadline(after: timeout)
            consumerWaiting = true
            while buffer.isEmpty && !closed {
                if pthread_cond_timedwait(&notEmpty, &mutex, &deadline) == ETIMEDOUT { break }
            }
            consumerWaiting = false
        }
        if !buffer.isEmpty && buffer.count < Self.batchThreshold && !closed && producersWaiting == 0 {
            // A few events: give the producers a moment to make it a batch.
            var deadline = Self.deadline(after: Self.lingerNanoseconds)
            consumerWaiting = true
            consumerLingering = true
            while buffer.count < Self.batchThreshold && !closed {
                if pthread_cond_timedwait(&notEmpty, &mutex, &deadline) == ETIMEDOUT { break }
            }
            consumerLingering = false
            consumerWaiting = false
        }
        let n = Swift.min(max, buffer.count)
        if n > 0 {
            batch.append(contentsOf: buffer.prefix(n))
            buffer.removeFirst(n)
        }
        let more = !(closed && buffer.isEmpty)
        let wakeProducers = producersWaiting > 0 && n > 0
        pthread_mutex_unlock(&mutex)
        if wakeProducers { pthread_cond_broadcast(&notFull) }
        return more || n > 0
    }

    /// Stops accepting events; the consumer drains what is queued.
    func close() {
        pthread_mutex_lock(&mutex)
        closed = true
        pthread_mutex_unlock(&mutex)
        pthread_cond_broadcast(&notEmpty)
        pthread_cond_broadcast(&notFull)
    }

    /// Discards everything still queued (a sink that gave up); returns how many.
    func discardAll() -> Int {
        pthread_mutex_lock(&mutex)
        let n = buffer.count
        buffer.removeAll()
        dropped &+= UInt64(n)
        pthread_mutex_unlock(&mutex)
        pthread_cond_broadcast(&notFull)
        return n
    }

    var depth: Int {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return buffer.count
    }

    struct Counters { var accepted: UInt64; var dropped: UInt64; var depth: Int; var highWater: Int }
    var counters: Counters {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return Counters(accepted: accepted, dropped: dropped, depth: buffer.count, highWater: highWater)
    }
}
