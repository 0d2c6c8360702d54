import Glibc
import Synchronization

/// The bound on checks running at once, shared by every `nagios` instance of
/// this process: a check waits for a slot, and slots go to the waiting
/// checks in the order they asked (tickets), so a hung check delays the
/// others by at most its timeout and starves none.
///
/// The bound is the smallest `concurrency` the running instances give (0
/// gives none), and without one the number of online cores.
final class CheckSlots: Sendable {
    static let shared = CheckSlots()

    private struct State {
        var running = 0
        var nextTicket: UInt64 = 0
        var waiting: [UInt64] = []
        var limits: [ObjectIdentifier: Int] = [:]
    }
    private let state = Mutex(State())
    private let cores = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))

    var limit: Int {
        state.withLock { Self.limit(of: $0, cores: cores) }
    }

    private static func limit(of state: State, cores: Int) -> Int {
        state.limits.values.filter { $0 > 0 }.min() ?? cores
    }

    func register(_ owner: AnyObject, concurrency: Int) {
        state.withLock { $0.limits[ObjectIdentifier(owner)] = concurrency }
    }

    func unregister(_ owner: AnyObject) {
        _ = state.withLock { $0.limits.removeValue(forKey: ObjectIdentifier(owner)) }
    }

    /// Waits for a slot; false when `cancelled` said to stop first. `sleep`
    /// waits a little and returns false when cancelled.
    func acquire(sleep: () -> Bool) -> Bool {
        let ticket = state.withLock { state -> UInt64 in
            defer { state.nextTicket &+= 1 }
            state.waiting.append(state.nextTicket)
            return state.nextTicket
        }
        while true {
            let granted = state.withLock { state -> Bool in
                guard state.running < Self.limit(of: state, cores: cores), state.waiting.first == ticket else { return false }
                state.waiting.removeFirst()
                state.running += 1
                return true
            }
            if granted { return true }
            if !sleep() {
                state.withLock { state in state.waiting.removeAll { $0 == ticket } }
                return false
            }
        }
    }

    func release() {
        state.withLock { $0.running = max(0, $0.running - 1) }
    }
}
