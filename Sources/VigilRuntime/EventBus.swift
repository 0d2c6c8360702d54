import Foundation
import Synchronization
import VigilABI
import VigilCore
import VigilSinks

/// A source of events as the bus knows it: a monitor, the host (`vigil`), a
/// monitor's thresholds or a rule. Made by `EventBus.route` (or `routes`),
/// which compiles its routes into the snapshot in force before handing it
/// out; its `id` indexes the snapshot's compiled routes.
package final class Route: Sendable {
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
package final class RouteRegistry: Sendable {
    package struct Entries {
        var sources: [(source: String, kinds: [String])?] = []
        var free: [Int] = []
    }
    let entries = Mutex(Entries())

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
package final class CompiledRoute: Sendable {
    let routes: MonitorRoutes
    private let undeclared = Mutex<[String: SinkSet]>([:])

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
package final class RoutingSnapshot: Sendable {
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
    package let unrouted = Atomic<UInt64>(0)

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
        let queued = publish(&event, route: route, kindIndex: kindIndex, wait: wait, seq: &seq, in: section)
        routing.leave(section)
        if !queued { return publishWaiting(&event, route: route, kindIndex: kindIndex) }
        return seq
    }

    /// `publish` inside a read section of `Epochs.host` the caller entered
    /// (a plugin's emit, through the host table). False when a blocking
    /// target had no room: nothing was queued, and the caller must leave
    /// the section and call `publishWaiting`.
    @inline(__always)
    func publish(_ event: inout Event, route: Route, kindIndex: Int, wait: Bool = true, seq: inout UInt64,
                 in section: Epochs.Section) -> Bool {
        routing.withValue(in: section) { snapshot -> Bool in
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
    }

    /// Queues `event` for `targets` of `snapshot`, their queues locked in
    /// slot order: a copy each, the last one the event itself. Blocking
    /// targets (`mustWait`) must all have room, or room reserved
    /// (`reserved`, taken up here); when one has none nothing is queued and
    /// the full ones are returned. `force`: over the bound instead.
    private static func push(_ event: inout Event, to targets: SinkSet, of snapshot: RoutingSnapshot, mustWait: SinkSet,
                             force: Bool, reserved: inout [SinkQueue], seq: inout UInt64,
                             sequence: borrowing Atomic<UInt64>) -> [SinkQueue]? {
        withUnsafeTemporaryAllocation(of: UnsafeMutablePointer<SinkQueue.State>.self, capacity: SinkSet.capacity) { held in
            lockingAll(targets, of: snapshot, held: held) { () -> ([SinkQueue]?, SinkSet) in
                // Sequence order is queue order in every one of them.
                var full: [SinkQueue] = []
                mustWait.forEach { i in
                    guard let queue = snapshot.queues[i], !queue.hasRoom(held[i].pointee),
                          !reserved.contains(where: { $0 === queue }) else { return }
                    full.append(queue)
                }
                if !full.isEmpty { return (full, SinkSet()) }
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
                        wake = queue.append(&held[i].pointee, taking: &event, force: force, reserved: holdsReservation)
                    } else {
                        var copy = event
                        wake = queue.append(&held[i].pointee, taking: &copy, force: force, reserved: holdsReservation)
                    }
                    if wake { wakes.insert(i) }
                }
                return (nil, wakes)
            }
        }
    }

    /// Runs `body` with the queues of `rest` locked, one inside the other in
    /// slot order (a queue keeps its slot for its life, so every producer
    /// takes them in one order), their states in `held` by slot; each
    /// consumer `body` says to wake is woken once its queue is unlocked.
    private static func lockingAll<R>(_ rest: SinkSet, of snapshot: RoutingSnapshot,
                                      held: UnsafeMutableBufferPointer<UnsafeMutablePointer<SinkQueue.State>>,
                                      _ body: () -> (R, SinkSet)) -> R {
        var remaining = rest
        while remaining.bits != 0 {
            let i = remaining.bits.trailingZeroBitCount
            remaining.bits &= remaining.bits &- 1
            guard let queue = snapshot.queues[i] else { continue }
            return queue.withLocked { state in
                withUnsafeMutablePointer(to: &state) { pointer in
                    held[i] = pointer
                    var wakes = SinkSet()
                    let result = lockingAll(remaining, of: snapshot, held: held) { () -> (R, SinkSet) in
                        let (result, asked) = body()
                        wakes = asked
                        return (result, asked)
                    }
                    return (result, wake: wakes.contains(i))
                }
            }
        }
        return body().0
    }

    /// `publish` when a blocking target had no room: room is reserved in each
    /// full one, waiting outside every lock and outside the read section (a
    /// reload does not wait for this producer), then the event is queued
    /// through the snapshot in force by then. Reservations in sinks no longer
    /// targeted are given back; a wait given up at shutdown is counted lost.
    @discardableResult
    func publishWaiting(_ event: inout Event, route: Route, kindIndex: Int) -> UInt64 {
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

    package var lastSequence: UInt64 { sequence.load(ordering: .relaxed) }
}
