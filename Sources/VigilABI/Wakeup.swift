import Dispatch

/// How a thread waits for state kept in a `Mutex` to change, as a
/// `Mutex` has no condition variable. Not a lock: the state, and who waits
/// for it, stay in the `Mutex`.
///
/// The waiter, with the lock held, finds its condition false and counts
/// itself as waiting in the state; it leaves the lock and `wait`s. Whoever
/// changes the state, with the lock held, takes that count (and sets it to
/// zero); it leaves the lock and `wake`s as many. So a change made after
/// the waiter looked is never missed. A wait that timed out takes its
/// count back (one, if any is left) when it takes the lock again; if a
/// waker took it first, its wake-up stays in the semaphore and ends a later
/// wait early: a spurious wake-up, as with a condition variable, so waiters
/// re-check their condition in a loop.
package final class Wakeup: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)

    package init() {}

    /// Waits until woken or `deadline` (monotonic ns, as
    /// `monotonicNanoseconds()`) has passed; false on time-out. Measured
    /// on a monotonic clock: neither stretched nor cut short when the wall
    /// clock is set.
    @discardableResult
    package func wait(until deadline: Int64) -> Bool {
        let (left, overflow) = deadline.subtractingReportingOverflow(monotonicNanoseconds())
        // Past 2^62 ns (146 years) the deadline is no deadline.
        if !overflow, left >= 1 << 62 {
            wait()
            return true
        }
        let timeout = DispatchTime.now() + .nanoseconds(overflow ? 0 : Int(max(0, left)))
        return semaphore.wait(timeout: timeout) == .success
    }

    /// Waits until woken.
    package func wait() { semaphore.wait() }

    /// Wakes `waiters` waits (those counted in the state): with the lock
    /// left, so that they find it free.
    package func wake(_ waiters: Int = 1) {
        for _ in 0..<max(0, waiters) { semaphore.signal() }
    }
}
