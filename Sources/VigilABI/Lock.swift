import Glibc

/// The one lock of the host: a pthread mutex in storage of its own (a
/// tail-allocated buffer, as swift-nio's `NIOLock`), so that its address never
/// moves and it is never copied, whatever holds the `Lock`. A `Lock` is a
/// reference: copies lock the same mutex.
///
/// Use `withLock` where the critical section is a closure; `lock()`/`unlock()`
/// only where a section must end on another path (the event bus's publish).
package struct Lock: @unchecked Sendable {
    private let storage: LockStorage

    package init() { storage = LockStorage.make() }

    @inline(__always)
    package func lock() { storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_lock($0) } }

    @inline(__always)
    package func unlock() { storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_unlock($0) } }

    @inline(__always)
    package func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    /// The mutex, for a condition variable's wait (see `ConditionLock`).
    fileprivate func withMutex<T>(_ body: (UnsafeMutablePointer<pthread_mutex_t>) -> T) -> T {
        storage.withUnsafeMutablePointerToElements(body)
    }
}

private final class LockStorage: ManagedBuffer<Void, pthread_mutex_t> {
    static func make() -> LockStorage {
        let buffer = create(minimumCapacity: 1) { _ in () }
        let storage = unsafeDowncast(buffer, to: LockStorage.self)
        storage.withUnsafeMutablePointerToElements { mutex in
            var attributes = pthread_mutexattr_t()
            pthread_mutexattr_init(&attributes)
            pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_NORMAL))
            pthread_mutex_init(mutex, &attributes)
            pthread_mutexattr_destroy(&attributes)
        }
        return storage
    }

    deinit { withUnsafeMutablePointerToElements { _ = pthread_mutex_destroy($0) } }
}

/// A lock with a condition variable on the monotonic clock: waits with a
/// deadline are not stretched or cut short when the wall clock is set.
package struct ConditionLock: @unchecked Sendable {
    package let mutex: Lock
    private let condition: ConditionStorage

    package init() {
        mutex = Lock()
        condition = ConditionStorage.make()
    }

    package func lock() { mutex.lock() }
    package func unlock() { mutex.unlock() }
    package func withLock<T>(_ body: () throws -> T) rethrows -> T { try mutex.withLock(body) }

    /// Wakes every waiter. Call with or without the lock held.
    package func broadcast() { condition.withUnsafeMutablePointerToElements { _ = pthread_cond_broadcast($0) } }
    package func signal() { condition.withUnsafeMutablePointerToElements { _ = pthread_cond_signal($0) } }

    /// Waits, with the lock held, until woken.
    package func wait() {
        mutex.withMutex { m in condition.withUnsafeMutablePointerToElements { _ = pthread_cond_wait($0, m) } }
    }

    /// Waits, with the lock held, until woken or `deadline` (monotonic ns)
    /// has passed. Returns false on time-out.
    @discardableResult
    package func wait(until deadline: Int64) -> Bool {
        let clamped = max(0, deadline)
        var ts = timespec(tv_sec: Int(clamped / 1_000_000_000), tv_nsec: Int(clamped % 1_000_000_000))
        return mutex.withMutex { m in
            condition.withUnsafeMutablePointerToElements { pthread_cond_timedwait($0, m, &ts) != ETIMEDOUT }
        }
    }
}

private final class ConditionStorage: ManagedBuffer<Void, pthread_cond_t> {
    static func make() -> ConditionStorage {
        let storage = unsafeDowncast(create(minimumCapacity: 1) { _ in () }, to: ConditionStorage.self)
        storage.withUnsafeMutablePointerToElements { cond in
            var attributes = pthread_condattr_t()
            pthread_condattr_init(&attributes)
            pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
            pthread_cond_init(cond, &attributes)
            pthread_condattr_destroy(&attributes)
        }
        return storage
    }

    deinit { withUnsafeMutablePointerToElements { _ = pthread_cond_destroy($0) } }
}
