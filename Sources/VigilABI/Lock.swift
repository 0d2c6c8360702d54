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

/// A condition variable on the monotonic clock, used with a `Lock` (a
/// queue's "not empty" and "not full" share one lock): waits with a deadline
/// are neither stretched nor cut short when the wall clock is set.
package struct ConditionVariable: @unchecked Sendable {
    private let storage: ConditionStorage

    package init() { storage = ConditionStorage.make() }

    /// Wakes every waiter. With or without the lock held.
    @inline(__always)
    package func broadcast() { storage.withUnsafeMutablePointerToElements { _ = pthread_cond_broadcast($0) } }

    /// Wakes one waiter. With or without the lock held.
    @inline(__always)
    package func signal() { storage.withUnsafeMutablePointerToElements { _ = pthread_cond_signal($0) } }

    /// Waits, with `lock` held, until woken.
    package func wait(_ lock: Lock) {
        lock.withMutex { m in storage.withUnsafeMutablePointerToElements { _ = pthread_cond_wait($0, m) } }
    }

    /// Waits, with `lock` held, until woken or `deadline` (monotonic ns) has
    /// passed. Returns false on time-out. A spurious wake-up returns true:
    /// callers re-check their condition, as with any condition variable.
    @discardableResult
    package func wait(_ lock: Lock, until deadline: Int64) -> Bool {
        let clamped = max(0, deadline)
        var ts = timespec(tv_sec: Int(clamped / 1_000_000_000), tv_nsec: Int(clamped % 1_000_000_000))
        return lock.withMutex { m in
            storage.withUnsafeMutablePointerToElements { pthread_cond_timedwait($0, m, &ts) != ETIMEDOUT }
        }
    }
}

/// A lock with one condition variable.
package struct ConditionLock: @unchecked Sendable {
    package let mutex: Lock
    private let condition: ConditionVariable

    package init() {
        mutex = Lock()
        condition = ConditionVariable()
    }

    package func lock() { mutex.lock() }
    package func unlock() { mutex.unlock() }
    package func withLock<T>(_ body: () throws -> T) rethrows -> T { try mutex.withLock(body) }
    package func broadcast() { condition.broadcast() }
    package func signal() { condition.signal() }
    package func wait() { condition.wait(mutex) }
    @discardableResult
    package func wait(until deadline: Int64) -> Bool { condition.wait(mutex, until: deadline) }
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
