import Foundation
import Synchronization
import VigilABI
import VigilCore

/// Where one source's events go: a monitor, the host (`vigil`), a monitor's
/// thresholds or a rule. It holds its routes compiled against the sinks in
/// force, and is read only under the bus lock; a reload bumps the bus's
/// generation and each route compiles itself again on its next event, so
/// every event after a reload sees the new sinks and routes together, and
/// none sees half of each.
final class Route: @unchecked Sendable {
    /// The name `match` patterns are matched against.
    let source: String
    /// Declared kinds, in the order of the indexes passed to `publish`.
    let kinds: [String]

    private struct Compiled {
        var generation: UInt64
        var routes: MonitorRoutes
        /// Routes of kinds not declared, computed once each (at most 1024).
        var undeclared: [String: SinkSet] = [:]
    }

    /// Outside Swift's exclusivity checks (a pointer, not a property): the
    /// bus lock is what serializes it.
    private let compiled: UnsafeMutablePointer<Compiled>

    init(source: String, kinds: [String]) {
        self.source = source
        self.kinds = kinds
        compiled = .allocate(capacity: 1)
        compiled.initialize(to: Compiled(generation: .max, routes: RouteCompiler(sinks: []).routes(monitor: source, kinds: kinds)))
    }

    deinit {
        compiled.deinitialize(count: 1)
        compiled.deallocate()
    }

    /// Sinks for an event of declared kind `kindIndex` (or, when negative,
    /// of `kind`) at `severity`. Under the bus lock.
    @inline(__always)
    fileprivate func targets(kindIndex: Int, kind: String, severity: Severity, compiler: RouteCompiler,
                             generation: UInt64) -> SinkSet {
        if compiled.pointee.generation != generation {
            compiled.pointee = Compiled(generation: generation, routes: compiler.routes(monitor: source, kinds: kinds))
        }
        if kindIndex >= 0 && kindIndex < kinds.count {
            return compiled.pointee.routes.sinks(kindIndex: kindIndex, severity: severity)
        }
        let mask = compiled.pointee.routes.severityMask(severity)
        if let known = compiled.pointee.undeclared[kind] { return known & mask }
        let sinks = compiled.pointee.routes.sinks(kind: kind)
        if compiled.pointee.undeclared.count < 1024 { compiled.pointee.undeclared[kind] = sinks }
        return sinks & mask
    }
}

/// Where every event goes after a plugin's `emit` has copied it: a sequence
/// number is assigned and the event is pushed onto the queue of every sink its
/// route selects. Producers never wait on a sink unless that sink's overflow
/// policy is `block`, and then they wait only for that sink, outside the bus
/// lock: a full blocking sink stalls the producers that route to it, never the
/// others.
///
/// The sinks sit in slots (a `SinkSet` bit each) that a reload replaces
/// under the bus lock (`reconfigure`): a sink that did not change keeps its
/// slot and its queue, one added takes a free slot, one removed leaves its
/// slot at once and drains what it already holds. The sequence goes on
/// across reloads.
public final class EventBus: @unchecked Sendable {
    private struct State {
        /// The last sequence number given.
        var seq: UInt64 = 0
        var slots: [SinkRunner?]
        /// Slots whose sink's overflow policy is `block`.
        var blocking = SinkSet()
        var compiler: RouteCompiler
        /// Bumped by each reconfiguration: routes compiled before are stale.
        var generation: UInt64 = 0
    }

    /// The bus lock is this state's.
    private let state: LockedState<State>
    /// Whether any slot holds a blocking sink: the slow path of `publish`.
    private let anyBlocking = Atomic<Bool>(false)
    /// Events that matched no sink.
    let unrouted = Atomic<UInt64>(0)

    /// `sinks` take slots 0…; `compiler` is compiled from them in that order.
    init(sinks: [SinkRunner], compiler: RouteCompiler) {
        precondition(sinks.count <= SinkSet.capacity)
        var slots = [SinkRunner?](repeating: nil, count: SinkSet.capacity)
        for (i, sink) in sinks.enumerated() { slots[i] = sink }
        state = LockedState(State(slots: slots, compiler: compiler))
        let blocking = Self.blocking(in: slots)
        state.withLock { $0.blocking = blocking }
        anyBlocking.store(!blocking.isEmpty, ordering: .releasing)
    }

    private static func blocking(in slots: [SinkRunner?]) -> SinkSet {
        var set = SinkSet()
        for (i, sink) in slots.enumerated() where sink?.queue.overflow == .block { set.insert(i) }
        return set
    }

    /// Puts `slots` (index = `SinkSet` bit) and routes compiled by `compiler`
    /// in force at once. Sinks left out get no more events.
    func reconfigure(slots: [SinkRunner?], compiler: RouteCompiler) {
        precondition(slots.count == SinkSet.capacity)
        let blocking = Self.blocking(in: slots)
        state.withLock { s in
            s.slots = slots
            s.blocking = blocking
            s.compiler = compiler
            s.generation &+= 1
        }
        anyBlocking.store(!blocking.isEmpty, ordering: .releasing)
    }

    /// Stamps `event` with the next sequence number and queues it for the
    /// sinks `route` selects (kind `kindIndex` of its declared kinds, or
    /// by the event's kind when negative). Sequence order is queue order, so
    /// every sink sees increasing `seq`. With `wait: false` (the host's own
    /// events) a full blocking sink takes the event over its bound rather
    /// than making the host wait.
    @inline(__always)
    func publish(_ event: inout Event, route: Route, kindIndex: Int = -1, wait: Bool = true) {
        if wait && anyBlocking.load(ordering: .relaxed) {
            publishWaiting(&event, route: route, kindIndex: kindIndex)
            return
        }
        let delivered = state.withLock { s -> Bool in
            let targets = route.targets(kindIndex: kindIndex, kind: event.kind, severity: event.severity,
                                        compiler: s.compiler, generation: s.generation)
            s.seq &+= 1
            event.seq = s.seq
            if targets.isEmpty { return false }
            let force = !wait
            targets.forEach { i in s.slots[i]?.queue.push(event, force: force) }
            return true
        }
        if !delivered { unrouted.add(1, ordering: .relaxed) }
    }

    /// `publish` when a blocking sink may be among the targets: room in
    /// those is reserved first, without the bus lock held, then the event is
    /// queued under it. A reconfiguration in between is seen: a reservation
    /// in a sink no longer targeted is given back.
    private func publishWaiting(_ event: inout Event, route: Route, kindIndex: Int) {
        let toReserve = state.withLock { s -> [(Int, SinkRunner)] in
            let targets = route.targets(kindIndex: kindIndex, kind: event.kind, severity: event.severity,
                                        compiler: s.compiler, generation: s.generation)
            var list: [(Int, SinkRunner)] = []
            (targets & s.blocking).forEach { i in if let sink = s.slots[i] { list.append((i, sink)) } }
            return list
        }
        var reserved: [(Int, SinkRunner)] = []
        var gaveUp: [SinkRunner] = []
        for (i, sink) in toReserve {
            if sink.queue.reserve() { reserved.append((i, sink)) } else { gaveUp.append(sink) }
        }
        let (delivered, unused) = state.withLock { s -> (Bool, [SinkRunner]) in
            let targets = route.targets(kindIndex: kindIndex, kind: event.kind, severity: event.severity,
                                        compiler: s.compiler, generation: s.generation)
            s.seq &+= 1
            event.seq = s.seq
            var unused: [SinkRunner] = []
            for (i, sink) in reserved where !(targets.contains(i) && s.slots[i] === sink) { unused.append(sink) }
            targets.forEach { i in
                guard let sink = s.slots[i] else { return }
                if reserved.contains(where: { $0.0 == i && $0.1 === sink }) {
                    sink.queue.pushReserved(event)
                } else if gaveUp.contains(where: { $0 === sink }) {
                    sink.queue.countLostAtShutdown()  // the wait was given up at shutdown
                } else {
                    sink.queue.push(event)
                }
            }
            return (!targets.isEmpty, unused)
        }
        for sink in unused { sink.queue.cancelReservation() }
        if !delivered { unrouted.add(1, ordering: .relaxed) }
    }

    /// From now on, producers waiting for room in a blocking sink give up at
    /// `deadline` (monotonic ns) and their events are counted as lost to the
    /// shutdown.
    func beginShutdown(deadline: Int64) {
        let sinks = state.withLock { s in s.slots.compactMap { $0 } }
        for sink in sinks where sink.queue.overflow == .block { sink.queue.giveUpWaiting(at: deadline) }
    }

    var lastSequence: UInt64 { state.withLock { $0.seq } }
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

    /// Gives back a slot `reserve` promised (the sink was reconfigured away).
    func cancelReservation() {
        state.withLock { $0.reserved -= 1 }
        notFull.signal()
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
