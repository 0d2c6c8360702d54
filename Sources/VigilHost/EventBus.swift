import DequeModule
import Foundation
import Synchronization
import VigilCore

/// Where every event goes after a plugin's `emit` has copied it: a sequence
/// number is assigned and the event is pushed onto the queue of every sink its
/// route selects. Producers never wait on a sink unless that sink's overflow
/// policy is `block`.
public final class EventBus: @unchecked Sendable {
    let sinks: [SinkRunner]
    private let lock = NSLockish()
    private var seq: UInt64 = 0
    /// Events that matched no sink.
    let unrouted = Atomic<UInt64>(0)

    init(sinks: [SinkRunner]) {
        self.sinks = sinks
    }

    /// Stamps `event` with the next sequence number and queues it for `targets`.
    /// Sequence order is queue order, so every sink sees increasing `seq`.
    @inline(__always)
    func publish(_ event: inout Event, to targets: SinkSet) {
        lock.lock()
        seq &+= 1
        event.seq = seq
        if targets.isEmpty {
            lock.unlock()
            unrouted.add(1, ordering: .relaxed)
            return
        }
        targets.forEach { sinks[$0].queue.push(event) }
        lock.unlock()
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
    private var producersWaiting = 0
    private var closed = false

    // Counters, read by stats; written under the mutex.
    private(set) var accepted: UInt64 = 0
    private(set) var dropped: UInt64 = 0
    private(set) var highWater = 0

    init(capacity: Int, overflow: OverflowPolicy) {
        self.capacity = capacity
        self.overflow = overflow
        self.buffer = Deque(minimumCapacity: min(capacity, 4096))
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&notEmpty, nil)
        pthread_cond_init(&notFull, nil)
    }

    deinit {
        pthread_cond_destroy(&notEmpty)
        pthread_cond_destroy(&notFull)
        pthread_mutex_destroy(&mutex)
    }

    /// Adds an event, applying the overflow policy when full.
    func push(_ event: Event) {
        pthread_mutex_lock(&mutex)
        if buffer.count >= capacity && !closed {
            switch overflow {
            case .dropNewest:
                dropped &+= 1
                pthread_mutex_unlock(&mutex)
                return
            case .dropOldest:
                buffer.removeFirst()
                dropped &+= 1
            case .block:
                producersWaiting += 1
                while buffer.count >= capacity && !closed { pthread_cond_wait(&notFull, &mutex) }
                producersWaiting -= 1
            }
        }
        if closed {
            dropped &+= 1
            pthread_mutex_unlock(&mutex)
            return
        }
        buffer.append(event)
        accepted &+= 1
        if buffer.count > highWater { highWater = buffer.count }
        let wake = consumerWaiting
        pthread_mutex_unlock(&mutex)
        if wake { pthread_cond_signal(&notEmpty) }
    }

    /// Moves up to `max` events into `batch`, waiting up to `timeout` ns for the
    /// first. Returns false once the queue is closed and empty.
    func pop(into batch: inout [Event], max: Int, timeout: Int64) -> Bool {
        pthread_mutex_lock(&mutex)
        if buffer.isEmpty && !closed {
            var deadline = timespec()
            clock_gettime(CLOCK_REALTIME, &deadline)
            let total = Int64(deadline.tv_nsec) + timeout
            deadline.tv_sec += Int(total / 1_000_000_000)
            deadline.tv_nsec = Int(total % 1_000_000_000)
            consumerWaiting = true
            while buffer.isEmpty && !closed {
                if pthread_cond_timedwait(&notEmpty, &mutex, &deadline) == ETIMEDOUT { break }
            }
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
