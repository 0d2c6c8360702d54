import CVigilSys
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
/// `State` in one `Mutex` (no class properties on this path, so no run-time
/// exclusivity checks). Who waits (the consumer for events, producers of a
/// blocking sink for room) is counted in the state and sleeps on a
/// `Wakeup` outside the lock.
package final class SinkQueue: Sendable {
    let capacity: Int
    package let overflow: OverflowPolicy
    private let state: Mutex<State>
    /// The consumer sleeps on this one, producers waiting for room on the
    /// other; both wait until monotonic deadlines (a wall clock step must
    /// not stall a sink).
    private let notEmpty = Wakeup()
    private let notFull = Wakeup()
    /// The depth that ends the consumer's linger (`BatchLinger`) early.
    static let batchThreshold = 512

    package struct State {
        var pending: [Event] = []
        /// Events at the front of `pending` dropped by `drop_oldest`.
        var head = 0
        var count: Int { pending.count - head }
        /// The consumer sleeps on `notEmpty` (the count `Wakeup` takes: 0 or 1).
        var consumerWaiting = false
        /// The consumer woke to a few events and waits a moment for more, so
        /// it drains in batches instead of taking turns with the producer per event.
        var consumerLingering = false
        /// Producers in `reserve`, and how many of them sleep on `notFull` now.
        var producersWaiting = 0
        var producersAsleep = 0
        /// The consumer's estimate of the arrival rate: whether to linger.
        var linger = BatchLinger()
        /// Slots promised to producers of a blocking sink (see `reserve`).
        var reserved = 0
        var closed = false
        var wakeRequested = false
        /// The sink is woken only to read (`EventSink.needsEventsPromptly`
        /// false): not for each event, only for a batch's worth, a `wake`,
        /// its tick or the close.
        var lazy = false
        /// Pops so far (each numbered), and what waits for the events queued
        /// before it to be written: done after the pop numbered `after` is.
        var pops: UInt64 = 0
        var drains: [(after: UInt64, done: @Sendable () -> Void)] = []
        /// The consumer has ended: a drain asked now is done at once.
        var consumerEnded = false
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
            let wake = consumerWaiting && ((!consumerLingering && !lazy) || depth >= SinkQueue.batchThreshold)
            if wake { consumerWaiting = false }
            return wake
        }

        /// Producers asleep for room, all of them woken (the count taken).
        mutating func takeAsleep() -> Int {
            defer { producersAsleep = 0 }
            return producersAsleep
        }
    }

    /// Runs `body` with the state locked (see `vigil_tsan_acquire`: the
    /// queue is the host's most contended lock).
    @inline(__always)
    private func locked<R>(_ body: (inout State) -> R) -> R {
        state.withLock { s in
            let address = Unmanaged.passUnretained(self).toOpaque()
            vigil_tsan_acquire(address)
            defer { vigil_tsan_release(address) }
            return body(&s)
        }
    }

    /// `lines`: the encoder of a sink that takes its events' JSON Lines
    /// made by the producers (`EventSink.producerLines`).
    init(capacity: Int, overflow: OverflowPolicy, lines: JSONLineEncoder? = nil, lazy: Bool = false) {
        self.capacity = capacity
        self.overflow = overflow
        var initial = State()
        initial.lazy = lazy
        initial.lane = lines.map { LineLane(encoder: $0) }
        initial.pending.reserveCapacity(min(capacity, 4096))
        state = Mutex(initial)
    }

    /// Queues the one sink's event (`EventBus.publish`): stamps it with the
    /// next sequence number under the queue's lock and moves it in, applying
    /// the overflow policy when full (`force`: a blocking queue takes it
    /// over its bound instead). With `mayWait`, a full blocking queue takes
    /// nothing and returns false: the producer waits for room outside.
    @inline(__always)
    package func push(_ event: inout Event, seq: inout UInt64, sequence: borrowing Atomic<UInt64>, force: Bool,
                      mayWait: Bool) -> Bool {
        let (queued, wake) = locked { s -> (Bool, Bool) in
            if mayWait && !hasRoom(s) { return (false, false) }
            seq = sequence.wrappingAdd(1, ordering: .relaxed).newValue
            event.seq = seq
            return (true, append(&s, taking: &event, force: force, reserved: false))
        }
        if wake { notEmpty.wake() }
        return queued
    }

    /// Adds an event as it is (its `seq` unchanged), applying the overflow
    /// policy when full (`force`: a blocking queue takes it over its bound).
    func push(_ event: Event, force: Bool = false) {
        var event = event
        if locked({ append(&$0, taking: &event, force: force, reserved: false) }) { notEmpty.wake() }
    }

    /// Adds an event for which `reserve` promised room.
    func pushReserved(_ event: Event) {
        var event = event
        if locked({ append(&$0, taking: &event, force: false, reserved: true) }) { notEmpty.wake() }
    }

    /// Runs `body` with the queue locked (`EventBus` queueing one event for
    /// several sinks, their queues locked together in slot order), then
    /// wakes the consumer when `body` says an append asked for it.
    @inline(__always)
    package func withLocked<R>(_ body: (inout State) -> (R, wake: Bool)) -> R {
        let (result, wake) = locked { body(&$0) }
        if wake { notEmpty.wake() }
        return result
    }

    /// Whether a blocking producer may queue now without waiting (a closed
    /// queue counts its loss instead).
    @inline(__always)
    package func hasRoom(_ s: borrowing State) -> Bool {
        s.closed || s.count + s.reserved < capacity
    }

    /// Moves `event` in (leaving an empty one behind), applying the overflow
    /// policy, or using the room `reserve` promised (`reserved`); whether
    /// the consumer must be woken.
    @inline(__always)
    package func append(_ s: inout State, taking event: inout Event, force: Bool, reserved: Bool) -> Bool {
        if reserved { s.reserved -= 1 }
        if s.closed {
            s.droppedAtShutdown &+= 1
            return false
        }
        if !reserved && s.count + s.reserved >= capacity && !force {
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
                    s.lane?.lines.removeFirst(s.head)
                    s.head = 0
                }
            }
        }
        var taken = Event(time: 0, monitor: "", plugin: "", kind: "")
        swap(&taken, &event)
        return s.append(consume taken)
    }

    /// Waits until the queue has room for one more event and promises it to
    /// the caller. False when the queue closed or the shutdown deadline passed.
    package func reserve() -> Bool {
        locked { $0.producersWaiting += 1 }
        defer { locked { $0.producersWaiting -= 1 } }
        while true {
            let verdict = locked { s -> Bool? in
                if s.closed { return false }
                if s.count + s.reserved < capacity {
                    s.reserved += 1
                    return true
                }
                if monotonicNanoseconds() >= s.giveUpAt { return false }
                s.producersAsleep += 1
                return nil
            }
            if let verdict { return verdict }
            if !notFull.wait(until: monotonicNanoseconds().addingSaturating(100_000_000)) {
                // Timed out: the count back, if no waker took it (see `Wakeup`).
                locked { s in if s.producersAsleep > 0 { s.producersAsleep -= 1 } }
            }
        }
    }

    /// Gives back a slot `reserve` promised (the sink was reconfigured away).
    package func cancelReservation() {
        let asleep = locked { s -> Int in
            s.reserved -= 1
            return s.takeAsleep()
        }
        notFull.wake(asleep)
    }

    /// Counts an event a producer gave up waiting to queue at shutdown.
    package func countLostAtShutdown() {
        locked { $0.droppedAtShutdown &+= 1 }
    }

    package func giveUpWaiting(at deadline: Int64) {
        let asleep = locked { s -> Int in
            s.giveUpAt = deadline
            return s.takeAsleep()
        }
        notFull.wake(asleep)
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
        var number: UInt64 = 0
        return pop(into: &batch, lines: &lines, timeout: timeout, number: &number)
    }

    /// `number`: the pop's, for `finishDrains`.
    func pop(into batch: inout [Event], lines: inout EncodedLines, timeout: Int64, number: inout UInt64) -> Bool {
        precondition(batch.isEmpty)
        // The first event: asleep until one is queued, the queue closes or
        // the sink asks to be woken, or until the deadline.
        let deadline = monotonicNanoseconds().addingSaturating(timeout)
        sleep(until: deadline) { s in s.count == 0 && !s.closed && !s.wakeRequested }
        // A few events: give the producers a moment to make it a batch.
        let lingers = locked { s -> Bool in
            s.linger.fast && s.count > 0 && s.count < Self.batchThreshold && !s.closed && s.producersWaiting == 0
        }
        if lingers {
            sleep(until: monotonicNanoseconds().addingSaturating(BatchLinger.nanoseconds), lingering: true) { s in
                s.count < Self.batchThreshold && !s.closed
            }
        }
        let (more, n, skip, asleep) = locked { s -> (Bool, Int, Int, Int) in
            s.pops &+= 1
            number = s.pops
            let n = s.count
            let skip = s.head
            if n > 0 || skip > 0 {
                swap(&batch, &s.pending)
                if s.lane != nil { swap(&lines, &s.lane!.lines) }
                s.head = 0
            }
            s.linger.took(n, now: monotonicNanoseconds())
            let more = !(s.closed && s.count == 0)
            return (more, n, skip, n > 0 ? s.takeAsleep() : 0)
        }
        if skip > 0 {
            batch.removeFirst(skip)
            if !lines.ends.isEmpty { lines.removeFirst(skip) }
        }
        notFull.wake(asleep)
        return more || n > 0
    }

    /// The consumer sleeps while `waiting` holds, until `deadline`: it
    /// counts itself as waiting under the lock, and a producer whose append
    /// wakes it takes that count (`State.append`).
    private func sleep(until deadline: Int64, lingering: Bool = false, while waiting: (borrowing State) -> Bool) {
        while true {
            let asleep = locked { s -> Bool in
                guard waiting(s), monotonicNanoseconds() < deadline else { return false }
                s.consumerWaiting = true
                s.consumerLingering = lingering
                return true
            }
            guard asleep else { return }
            let woken = notEmpty.wait(until: deadline)
            locked { s in
                // Timed out: the count back, if no producer took it (see `Wakeup`).
                if !woken { s.consumerWaiting = false }
                s.consumerLingering = false
            }
        }
    }

    /// Wakes the consumer without an event (a sink has other work to do).
    func wake() {
        let asleep = locked { s -> Bool in
            s.wakeRequested = true
            defer { s.consumerWaiting = false }
            return s.consumerWaiting
        }
        if asleep { notEmpty.wake() }
    }

    /// Runs `done` once every event queued before this call has been
    /// written (or lost): after the consumer's next pop has been through the
    /// sink. The consumer is woken for it. Any thread; `done` runs on the
    /// consumer's thread, or on this one when the consumer has ended.
    func requestDrain(_ done: @escaping @Sendable () -> Void) {
        let (now, asleep) = locked { s -> (Bool, Bool) in
            if s.consumerEnded { return (true, false) }
            s.drains.append((s.pops &+ 1, done))
            s.wakeRequested = true
            defer { s.consumerWaiting = false }
            return (false, s.consumerWaiting)
        }
        if now { done() }
        if asleep { notEmpty.wake() }
    }

    /// The consumer has written what pop `number` took: the drains that
    /// waited for it are done. `ended`: the consumer stops; every drain is
    /// done, now and from now on.
    func finishDrains(throughPop number: UInt64, ended: Bool = false) {
        let done = locked { s -> [@Sendable () -> Void] in
            if ended { s.consumerEnded = true }
            guard !s.drains.isEmpty else { return [] }
            var done: [@Sendable () -> Void] = []
            s.drains.removeAll { drain in
                guard ended || drain.after <= number else { return false }
                done.append(drain.done)
                return true
            }
            return done
        }
        for d in done { d() }
    }

    /// Whether `wake` was called since the last time this was asked.
    func takeWakeRequest() -> Bool {
        locked { s in
            defer { s.wakeRequested = false }
            return s.wakeRequested
        }
    }

    /// Whether more than `count` events were dropped for a full queue (cheap to ask).
    func hasDrops(since count: UInt64) -> Bool {
        locked { $0.droppedFull > count }
    }

    /// Stops accepting events; the consumer drains what is queued.
    func close() {
        let (consumer, producers) = locked { s -> (Bool, Int) in
            s.closed = true
            defer { s.consumerWaiting = false }
            return (s.consumerWaiting, s.takeAsleep())
        }
        if consumer { notEmpty.wake() }
        notFull.wake(producers)
    }

    /// Discards everything still queued (a sink that gave up at shutdown);
    /// returns how many.
    func discardAll() -> Int {
        let (n, asleep) = locked { s -> (Int, Int) in
            let n = s.count
            s.pending.removeAll()
            s.lane?.lines.removeAll(keepingCapacity: false)
            s.head = 0
            s.droppedAtShutdown &+= UInt64(n)
            return (n, s.takeAsleep())
        }
        notFull.wake(asleep)
        return n
    }

    package var depth: Int { locked { $0.count } }

    /// Whether the consumer sleeps waiting for events (what a test waits for).
    package var consumerWaiting: Bool { locked { $0.consumerWaiting } }

    package struct Counters {
        var accepted: UInt64
        var queueFull: UInt64
        var shutdown: UInt64
        var depth: Int
        var highWater: Int
        var dropped: UInt64 { queueFull + shutdown }
    }

    var counters: Counters {
        locked { s in
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
