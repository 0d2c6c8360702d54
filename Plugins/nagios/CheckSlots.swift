import Dispatch
import Glibc
import Synchronization

/// The bound on checks running at once, shared by every `nagios` instance of
/// this process: a check waits for a slot, and slots go to the waiting
/// checks in the order they asked, so a hung check delays the others by at
/// most its timeout and starves none.
///
/// The bound is the smallest `concurrency` the running instances give (0
/// gives none), and without one the number of online cores.
///
/// A slot that frees is handed to the first waiter at once and that waiter
/// woken, the others left asleep: with a thousand checks waiting, each
/// looking every 20 ms for its turn, a slot went to the head of the line
/// only at its next look (about 34 checks a second of 0.6 ms each, with 8
/// slots).
final class CheckSlots: Sendable {
    static let shared = CheckSlots()

    /// One waiting check: woken by the release that granted it a slot.
    private final class Waiter: Sendable {
        let woken = DispatchSemaphore(value: 0)
    }

    private struct State {
        var running = 0
        var limit = 0
        /// In the order they asked; `head` is the first still waiting.
        var waiting: [Waiter] = []
        var head = 0
        /// Waiters granted a slot and not yet woken to take it.
        var granted: Set<ObjectIdentifier> = []
        var limits: [ObjectIdentifier: Int] = [:]
    }
    private let state: Mutex<State>
    private let cores = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))

    init() {
        state = Mutex(State(limit: cores))
    }

    var limit: Int { state.withLock { $0.limit } }

    func register(_ owner: AnyObject, concurrency: Int) {
        let woken = state.withLock { state -> [Waiter] in
            state.limits[ObjectIdentifier(owner)] = concurrency
            state.limit = state.limits.values.filter { $0 > 0 }.min() ?? cores
            return grant(&state)
        }
        for waiter in woken { waiter.woken.signal() }
    }

    func unregister(_ owner: AnyObject) {
        let woken = state.withLock { state -> [Waiter] in
            state.limits.removeValue(forKey: ObjectIdentifier(owner))
            state.limit = state.limits.values.filter { $0 > 0 }.min() ?? cores
            return grant(&state)
        }
        for waiter in woken { waiter.woken.signal() }
    }

    /// Waits for a slot; false when `isCancelled` says to stop first
    /// (looked at every 20 ms while it waits).
    func acquire(isCancelled: () -> Bool) -> Bool {
        let waiter = Waiter()
        let now = state.withLock { state -> Bool in
            if state.head == state.waiting.count && state.running < state.limit {
                state.running += 1
                return true
            }
            state.waiting.append(waiter)
            return false
        }
        if now { return true }
        let id = ObjectIdentifier(waiter)
        while true {
            if waiter.woken.wait(timeout: .now() + .milliseconds(20)) == .success {
                return state.withLock { $0.granted.remove(id) != nil }
            }
            guard isCancelled() else { continue }
            // Granted in the meantime: given back, to the next.
            let woken = state.withLock { state -> [Waiter] in
                if state.granted.remove(id) != nil {
                    state.running -= 1
                    return grant(&state)
                }
                if let i = state.waiting[state.head...].firstIndex(where: { $0 === waiter }) { state.waiting.remove(at: i) }
                return []
            }
            for other in woken { other.woken.signal() }
            return false
        }
    }

    func release() {
        let woken = state.withLock { state -> [Waiter] in
            state.running = max(0, state.running - 1)
            return grant(&state)
        }
        for waiter in woken { waiter.woken.signal() }
    }

    /// Hands the free slots to the first waiters; returns them, to be
    /// woken outside the lock.
    private func grant(_ state: inout State) -> [Waiter] {
        var woken: [Waiter] = []
        while state.running < state.limit, state.head < state.waiting.count {
            let next = state.waiting[state.head]
            state.head += 1
            state.running += 1
            state.granted.insert(ObjectIdentifier(next))
            woken.append(next)
        }
        // The line's front is dropped now and then, not at each grant.
        if state.head > 64 && state.head * 2 > state.waiting.count {
            state.waiting.removeFirst(state.head)
            state.head = 0
        }
        return woken
    }
}
