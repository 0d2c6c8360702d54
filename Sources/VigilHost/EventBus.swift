import Foundation
import Synchronization
import VigilABI
import VigilCore

/// A source of events as the bus knows it: a monitor, the host (`vigil`), a
/// monitor's thresholds or a rule. Made by `EventBus.route` (or `routes`),
/// which compiles its routes into the snapshot in force before handing it
/// out; its `id` indexes the snapshot's compiled routes.
final class Route: Sendable {
    /// The name `match` patterns are matched against.
    let source: String
    /// Declared kinds, in the order of the indexes passed to `publish`.
    let kinds: [String]
    fileprivate let id: Int
    /// Its bus's registry (not the bus: a weak reference to the bus would
    /// give it a side table, and every retain of it on the event path the
    /// slow path).
    private let registry: RouteRegistry

    fileprivate init(source: String, kinds: [String], id: Int, registry: RouteRegistry) {
        self.source = source
        self.kinds = kinds
        self.id = id
        self.registry = registry
    }

    deinit { registry.unregister(id) }
}

/// The routes a bus handed out, by id, for compiling them against new
/// sinks; ids given back by a route's deinit are used again.
final class RouteRegistry: Sendable {
    struct Entries {
        var sources: [(source: String, kinds: [String])?] = []
        var free: [Int] = []
    }
    let entries = LockedState(Entries())

    /// A route was released: its id may serve another. Its compiled entry
    /// stays in the snapshot in force (nobody can publish through it) until
    /// the id is handed out again, which compiles it anew.
    func unregister(_ id: Int) {
        entries.withLock { r in
            r.sources[id] = nil
            r.free.append(id)
        }
    }
}

/// One source's routes compiled against one snapshot's sinks: the sinks for
/// each declared kind and severity are an array index away. Kinds the
/// source did not declare are matched once each and kept (at most 1024).
final class CompiledRoute: Sendable {
    let routes: MonitorRoutes
    private let undeclared = LockedState<[String: SinkSet]>([:])

    init(_ routes: MonitorRoutes) { self.routes = routes }

    @inline(__always)
    func targets(kindIndex: Int, kind: String, severity: Severity) -> SinkSet {
        if kindIndex >= 0 && kindIndex < routes.kinds.count {
            return routes.sinks(kindIndex: kindIndex, severity: severity)
        }
        return undeclaredTargets(kind: kind) & routes.severityMask(severity)
    }

    private func undeclaredTargets(kind: String) -> SinkSet {
        if let known = undeclared.withLock({ $0[kind] }) { return known }
        let sinks = routes.sinks(kind: kind)
        undeclared.withLock { cache in if cache.count < 1024 { cache[kind] = sinks } }
        return sinks
    }
}

/// What the event path reads, all of it immutable: the sinks' queues by
/// slot (a `SinkSet` bit each), which of them block, and every source's
/// routes compiled against them. A reload builds the next one aside and
/// puts it in force in one step (`EventBus.reconfigure`).
final class RoutingSnapshot: Sendable {
    let runners: [SinkRunner?]
    let queues: [SinkQueue?]
    /// Slots whose sink's overflow policy is `block`.
    let blocking: SinkSet
    let compiler: RouteCompiler
    /// By `Route.id`; nil for an id no route holds.
    let routes: [CompiledRoute?]

    init(runners: [SinkRunner?], compiler: RouteCompiler, routes: [CompiledRoute?]) {
        precondition(runners.count == SinkSet.capacity)
        self.runners = runners
        self.queues = runners.map { $0?.queue }
        var blocking = SinkSet()
        for (i, runner) in runners.enumerated() where runner?.queue.overflow == .block { blocking.insert(i) }
        self.blocking = blocking
        self.compiler = compiler
        self.routes = routes
    }

    /// The sinks an event of `route` goes to.
    @inline(__always)
    func targets(_ route: Route, kindIndex: Int, kind: String, severity: Severity) -> SinkSet {
        if route.id < routes.count, let compiled = routes[route.id] {
            return compiled.targets(kindIndex: kindIndex, kind: kind, severity: severity)
        }
        // Not reached: a route is compiled into the snapshot before it is handed out.
        return CompiledRoute(compiler.routes(monitor: route.source, kinds: route.kinds))
            .targets(kindIndex: kindIndex, kind: kind, severity: severity)
    }
}

/// Where every event goes after a plugin's `emit` has copied it: a sequence
/// number is assigned and the event is moved onto the queue of every sink
/// its route selects.
///
/// The event path takes no lock of the bus's: it reads the routing snapshot
/// in force (`SnapshotCell`: no lock, no reference count touched) and locks
/// only the queues it pushes to. The sequence number is taken while the
/// target queues are locked (several in slot order, a queue never changing
/// its slot), so every sink sees increasing `seq`. The cost per event is
/// the event's own: its route is an array index, its targets a bit set, and
/// sinks, monitors or rules that do not concern it are never looked at.
///
/// Producers never wait on a sink unless that sink's overflow policy is
/// `block`, and then they wait only for that sink, outside every lock and
/// outside the snapshot's read section (so a reload never waits for them): a
/// full blocking sink stalls the producers that route to it, never the others.
///
/// A reload (`reconfigure`) builds the next snapshot aside, puts it in force
/// in one atomic step, and returns once no producer can still be pushing
/// through the old one, so a sink it removed can be closed at once without
/// an event slipping in behind. A sink that did not change keeps its slot
/// and its queue, one added takes a free slot. The sequence goes on across
/// reloads.
public final class EventBus: @unchecked Sendable {  // state: atomics, the snapshot cell, the registry's lock
    private let routing: SnapshotCell<RoutingSnapshot>
    /// The last sequence number given.
    private let sequence = Atomic<UInt64>(0)
    /// Events that matched no sink.
    let unrouted = Atomic<UInt64>(0)

    private let registry = RouteRegistry()

    /// `sinks` take slots 0…; `compiler` is compiled from them in that order.
    init(sinks: [SinkRunner], compiler: RouteCompiler) {
        precondition(sinks.count <= SinkSet.capacity)
        var slots = [SinkRunner?](repeating: nil, count: SinkSet.capacity)
        for (i, sink) in sinks.enumerated() { slots[i] = sink }
        routing = SnapshotCell(RoutingSnapshot(runners: slots, compiler: compiler, routes: []))
    }

    /// A route for `source`, whose declared kinds are `kinds` (in the order
    /// of the indexes `publish` is given).
    func route(source: String, kinds: [String]) -> Route {
        routes([(source, kinds)])[0]
    }

    /// Routes for several sources, compiled into one new snapshot.
    func routes(_ sources: [(source: String, kinds: [String])]) -> [Route] {
        routing.update { snapshot in
            let ids = registry.entries.withLock { r in
                sources.map { source -> Int in
                    if let id = r.free.popLast() {
                        r.sources[id] = source
                        return id
                    }
                    r.sources.append(source)
                    return r.sources.count - 1
                }
            }
            var compiled = snapshot.routes
            if let last = ids.max(), last >= compiled.count {
                compiled += [CompiledRoute?](repeating: nil, count: last + 1 - compiled.count)
            }
            for (id, source) in zip(ids, sources) {
                compiled[id] = CompiledRoute(snapshot.compiler.routes(monitor: source.source, kinds: source.kinds))
            }
            let next = RoutingSnapshot(runners: snapshot.runners, compiler: snapshot.compiler, routes: compiled)
            return (next, zip(ids, sources).map { Route(source: $1.source, kinds: $1.kinds, id: $0, registry: registry) })
        }
    }

    /// Puts `slots` (index = `SinkSet` bit) and routes compiled by `compiler`
    /// in force at once, and returns once no producer is still queueing
    /// through the sinks in force before: sinks left out get no more events.
    func reconfigure(slots: [SinkRunner?], compiler: RouteCompiler) {
        precondition(slots.count == SinkSet.capacity)
        routing.update { snapshot in
            // Several queues are locked in slot order: a queue keeps its slot for its life.
            for (i, runner) in slots.enumerated() {
                guard let runner else { continue }
                if let j = snapshot.runners.firstIndex(where: { $0 === runner }) { precondition(i == j, "a sink moved slots") }
            }
            let sources = registry.entries.withLock { $0.sources }
            let compiled = sources.map { entry in entry.map { CompiledRoute(compiler.routes(monitor: $0.source, kinds: $0.kinds)) } }
            return (RoutingSnapshot(runners: slots, compiler: compiler, routes: compiled), ())
        }
    }

    /// Stamps `event` with the next sequence number and moves it onto the
    /// queues of the sinks `route` selects (kind `kindIndex` of its declared
    /// kinds, or by the event's kind when negative). With `wait: false` (the
    /// host's own events) a full blocking sink takes the event over its
    /// bound rather than making the host wait. Returns the event's `seq`.
    @inline(__always) @discardableResult
    func publish(_ event: consuming Event, route: Route, kindIndex: Int = -1, wait: Bool = true) -> UInt64 {
        var event = event
        var seq: UInt64 = 0
        let section = routing.enter()
        let queued = routing.withValue(in: section) { snapshot -> Bool in
            let targets = snapshot.targets(route, kindIndex: kindIndex, kind: event.kind, severity: event.severity)
            if targets.isEmpty {
                seq = sequence.wrappingAdd(1, ordering: .relaxed).newValue
                unrouted.wrappingAdd(1, ordering: .relaxed)
                return true
            }
            let mustWait = wait ? targets & snapshot.blocking : SinkSet()
            if targets.bits & (targets.bits &- 1) == 0 {
                // One sink, the common case.
                guard let queue = snapshot.queues[targets.bits.trailingZeroBitCount] else {
                    // Not reached: routes are compiled over the slots in force.
                    seq = sequence.wrappingAdd(1, ordering: .relaxed).newValue
                    unrouted.wrappingAdd(1, ordering: .relaxed)
                    return true
                }
                return queue.push(&event, seq: &seq, sequence: sequence, force: !wait, mayWait: !mustWait.isEmpty)
            }
            var none: [SinkQueue] = []
            return Self.push(&event, to: targets, of: snapshot, mustWait: mustWait, force: !wait,
                             reserved: &none, seq: &seq, sequence: sequence) == nil
        }
        routing.leave(section)
        if !queued { return publishWaiting(&event, route: route, kindIndex: kindIndex) }
        return seq
    }

    /// Queues `event` for `targets` of `snapshot`, their queues locked in
    /// slot order: a copy each, the last one the event itself. Blocking
    /// targets (`mustWait`) must all have room, or room reserved
    /// (`reserved`, taken up here); when one has none nothing is queued and
    /// the full ones are returned. `force`: over the bound instead.
    private static func push(_ event: inout Event, to targets: SinkSet, of snapshot: RoutingSnapshot, mustWait: SinkSet,
                             force: Bool, reserved: inout [SinkQueue], seq: inout UInt64,
                             sequence: borrowing Atomic<UInt64>) -> [SinkQueue]? {
        targets.forEach { i in snapshot.queues[i]?.lockForPush() }
        // Sequence order is queue order in every one of them.
        var full: [SinkQueue] = []
        mustWait.forEach { i in
            guard let queue = snapshot.queues[i], !queue.hasRoomLocked,
                  !reserved.contains(where: { $0 === queue }) else { return }
            full.append(queue)
        }
        if !full.isEmpty {
            targets.forEach { i in snapshot.queues[i]?.unlockForPush(wake: false) }
            return full
        }
        seq = sequence.wrappingAdd(1, ordering: .relaxed).newValue
        event.seq = seq
        var wakes = SinkSet()
        var rest = targets
        while rest.bits != 0 {
            let i = rest.bits.trailingZeroBitCount
            rest.bits &= rest.bits &- 1
            guard let queue = snapshot.queues[i] else { continue }
            let reservation = reserved.firstIndex { $0 === queue }
            if let reservation { reserved.remove(at: reservation) }
            let holdsReservation = reservation != nil
            var wake: Bool
            if rest.bits == 0 {
                wake = queue.appendLocked(taking: &event, force: force, reserved: holdsReservation)
            } else {
                var copy = event
                wake = queue.appendLocked(taking: &copy, force: force, reserved: holdsReservation)
            }
            if wake { wakes.insert(i) }
        }
        targets.forEach { i in snapshot.queues[i]?.unlockForPush(wake: wakes.contains(i)) }
        return nil
    }

    /// `publish` when a blocking target had no room: room is reserved in each
    /// full one, waiting outside every lock and outside the read section (a
    /// reload does not wait for this producer), then the event is queued
    /// through the snapshot in force by then. Reservations in sinks no longer
    /// targeted are given back; a wait given up at shutdown is counted lost.
    private func publishWaiting(_ event: inout Event, route: Route, kindIndex: Int) -> UInt64 {
        var seq: UInt64 = 0
        var reserved: [SinkQueue] = []
        var gaveUp: [SinkQueue] = []
        while true {
            let section = routing.enter()
            let full = routing.withValue(in: section) { snapshot -> [SinkQueue]? in
                let targets = snapshot.targets(route, kindIndex: kindIndex, kind: event.kind, severity: event.severity)
                var mustWait = SinkSet(), lost = SinkSet()
                (targets & snapshot.blocking).forEach { i in
                    guard let queue = snapshot.queues[i] else { return }
                    if gaveUp.contains(where: { $0 === queue }) { lost.insert(i) } else { mustWait.insert(i) }
                }
                let queueTo = targets.subtracting(lost)
                if queueTo.isEmpty {
                    seq = sequence.wrappingAdd(1, ordering: .relaxed).newValue
                } else if let full = Self.push(&event, to: queueTo, of: snapshot, mustWait: mustWait, force: false,
                                               reserved: &reserved, seq: &seq, sequence: sequence) {
                    return full
                }
                // The wait was given up at shutdown.
                lost.forEach { i in snapshot.queues[i]?.countLostAtShutdown() }
                if targets.isEmpty { unrouted.wrappingAdd(1, ordering: .relaxed) }
                return nil
            }
            routing.leave(section)
            guard let full else {
                // Reservations in sinks no longer targeted go back.
                for queue in reserved { queue.cancelReservation() }
                return seq
            }
            for queue in full {
                if queue.reserve() { reserved.append(queue) } else { gaveUp.append(queue) }
            }
        }
    }

    /// From now on, producers waiting for room in a blocking sink give up at
    /// `deadline` (monotonic ns) and their events are counted as lost to the
    /// shutdown.
    func beginShutdown(deadline: Int64) {
        for queue in routing.value.queues.compactMap({ $0 }) where queue.overflow == .block {
            queue.giveUpWaiting(at: deadline)
        }
    }

    var lastSequence: UInt64 { sequence.load(ordering: .relaxed) }
}

/// A sink's bounded queue: many producers, one consumer (the sink's thread).
///
/// Producers append to an array; the consumer swaps the whole array out in
/// O(1), so events move from producer to sink without being copied or
/// retained again. `drop_oldest` skips a prefix (`head`) rather than removing
/// it, compacting once that prefix reaches the capacity. All of it is one
/// `State` behind one lock (no class properties on this path, so no run-time
/// exclusivity checks).
final class SinkQueue: Sendable {  // all state behind its lock
    let capacity: Int
    let overflow: OverflowPolicy
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
    func push(_ event: inout Event, seq: inout UInt64, sequence: borrowing Atomic<UInt64>, force: Bool,
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
    func lockForPush() { state.lock() }

    /// Unlocks, then wakes the consumer when `appendLocked` said to.
    @inline(__always)
    func unlockForPush(wake: Bool) {
        state.unlock()
        if wake { notEmpty.signal() }
    }

    /// Whether a blocking producer may queue now without waiting (a closed
    /// queue counts its loss instead). Locked.
    var hasRoomLocked: Bool {
        let s = state.lockedState
        return s.pointee.closed || s.pointee.count + s.pointee.reserved < capacity
    }

    /// Moves `event` in (leaving an empty one behind), applying the overflow
    /// policy, or using the room `reserve` promised (`reserved`); whether
    /// the consumer must be woken. Locked.
    @inline(__always)
    func appendLocked(taking event: inout Event, force: Bool, reserved: Bool) -> Bool {
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

/// JSON Lines of a batch of events, one after another: line i is
/// `bytes[start(i)..<ends[i]]`, empty for an event whose line was not made
/// (the sink makes it).
public struct EncodedLines: Sendable {
    var bytes: [UInt8] = []
    var ends: [Int] = []

    @inline(__always)
    func line(_ i: Int) -> ArraySlice<UInt8> { bytes[(i == 0 ? 0 : ends[i - 1])..<ends[i]] }

    mutating func removeFirst(_ n: Int) {
        guard n > 0 else { return }
        let cut = ends[n - 1]
        bytes.removeFirst(cut)
        ends.removeFirst(n)
        for i in ends.indices { ends[i] -= cut }
    }

    mutating func removeAll(keepingCapacity: Bool) {
        bytes.removeAll(keepingCapacity: keepingCapacity)
        ends.removeAll(keepingCapacity: keepingCapacity)
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
struct LineLane: Sendable {
    var encoder: JSONLineEncoder
    var lines = EncodedLines()

    @inline(__always)
    mutating func add(_ event: borrowing Event, make: Bool) {
        if make { encoder.encode(event, into: &lines.bytes) }
        lines.ends.append(lines.bytes.count)
    }
}
