import Glibc

/// The one lock of the host: a pthread mutex in storage of its own (a
/// tail-allocated buffer, as swift-nio's `NIOLock`), so that its address never
/// moves and it is never copied, whatever holds the `Lock`. A `Lock` is a
/// reference: copies lock the same mutex.
///
/// Public and `@inlinable`, like `LockedState`: `package` bodies are not
/// inlined across modules, and the event path locks per event.
///
/// Use `withLock` where the critical section is a closure; `lock()`/`unlock()`
/// only where a section must end on another path (the event bus's publish).
public struct Lock: @unchecked Sendable {  // a reference to a pthread mutex, made to be shared
    @usableFromInline let storage: LockStorage<Void>

    public init() { storage = LockStorage.make(()) }

    @inlinable
    public func lock() { storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_lock($0) } }

    @inlinable
    public func unlock() { storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_unlock($0) } }

    @inlinable
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        lock()
        defer { unlock() }
        return try body()
    }

    /// The mutex, for a condition variable's wait (see `ConditionLock`).
    fileprivate func withMutex<T>(_ body: (UnsafeMutablePointer<pthread_mutex_t>) -> T) -> T {
        storage.withUnsafeMutablePointerToElements(body)
    }
}

/// A mutex and the state it guards in one allocation: the state is reached
/// through a pointer while the mutex is held, so its accesses need no
/// run-time exclusivity checks (the lock is the proof), and the mutex never
/// moves. Hot shared state (a sink's queue) lives in one of these rather than
/// in a class's stored properties.
public struct LockedState<State>: @unchecked Sendable {  // the state is reached only with its mutex held
    @usableFromInline let storage: LockStorage<State>

    public init(_ initial: State) { storage = LockStorage.make(initial) }

    /// Runs `body` with the lock held and the state to change.
    @inlinable
    public func withLock<R>(_ body: (inout State) throws -> R) rethrows -> R {
        try storage.withUnsafeMutablePointers { state, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(&state.pointee)
        }
    }

    /// Runs `body` with the lock held and a pointer to the state: for a
    /// section that waits on a condition variable, where other threads change
    /// the state while it waits (through the pointer each read is fresh;
    /// an `inout` would let the compiler assume nobody else writes it).
    @inlinable
    public func withLockedPointer<R>(_ body: (UnsafeMutablePointer<State>) throws -> R) rethrows -> R {
        try storage.withUnsafeMutablePointers { state, mutex in
            pthread_mutex_lock(mutex)
            defer { pthread_mutex_unlock(mutex) }
            return try body(state)
        }
    }

    /// Locks without a closure: for a section over several locks taken in
    /// a fixed order (the event bus queueing one event for several sinks).
    /// Between `lock` and `unlock`, the state is `lockedState`'s.
    @inlinable
    public func lock() { storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_lock($0) } }

    @inlinable
    public func unlock() { storage.withUnsafeMutablePointerToElements { _ = pthread_mutex_unlock($0) } }

    /// The state, valid while the lock is held (`lock`…`unlock`): the
    /// storage never moves while this `LockedState` exists.
    @inlinable
    public var lockedState: UnsafeMutablePointer<State> { storage.withUnsafeMutablePointerToHeader { $0 } }

    fileprivate func withMutex<T>(_ body: (UnsafeMutablePointer<pthread_mutex_t>) -> T) -> T {
        storage.withUnsafeMutablePointerToElements(body)
    }
}

@usableFromInline
final class LockStorage<State>: ManagedBuffer<State, pthread_mutex_t> {
    @usableFromInline
    static func make(_ initial: State) -> LockStorage {
        let buffer = create(minimumCapacity: 1) { _ in initial }
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

    // The state (the header) is destroyed by ManagedBuffer itself.
    deinit { withUnsafeMutablePointerToElements { _ = pthread_mutex_destroy($0) } }
}

/// A condition variable on the monotonic clock, used with a `Lock` (a
/// queue's "not empty" and "not full" share one lock): waits with a deadline
/// are neither stretched nor cut short when the wall clock is set.
public struct ConditionVariable: @unchecked Sendable {  // a reference to a pthread condition variable, made to be shared
    @usableFromInline let storage: ConditionStorage

    public init() { storage = ConditionStorage.make() }

    /// Wakes every waiter. With or without the lock held.
    @inlinable
    public func broadcast() { storage.withUnsafeMutablePointerToElements { _ = pthread_cond_broadcast($0) } }

    /// Wakes one waiter. With or without the lock held.
    @inlinable
    public func signal() { storage.withUnsafeMutablePointerToElements { _ = pthread_cond_signal($0) } }

    /// Waits, with `lock` held, until woken.
    package func wait(_ lock: Lock) {
        lock.withMutex { m in storage.withUnsafeMutablePointerToElements { _ = pthread_cond_wait($0, m) } }
    }

    /// Waits, inside `state.withLockedPointer`, until woken or `deadline`
    /// (monotonic ns) has passed; false on time-out (see the other `wait`).
    @discardableResult
    package func wait<State>(_ state: LockedState<State>, until deadline: Int64) -> Bool {
        state.withMutex { m in wait(mutex: m, until: deadline) }
    }

    /// Waits, with `lock` held, until woken or `deadline` (monotonic ns) has
    /// passed. Returns false on time-out. A spurious wake-up returns true:
    /// callers re-check their condition, as with any condition variable.
    @discardableResult
    package func wait(_ lock: Lock, until deadline: Int64) -> Bool {
        lock.withMutex { m in wait(mutex: m, until: deadline) }
    }

    private func wait(mutex: UnsafeMutablePointer<pthread_mutex_t>, until deadline: Int64) -> Bool {
        let clamped = max(0, deadline)
        var ts = timespec(tv_sec: Int(clamped / 1_000_000_000), tv_nsec: Int(clamped % 1_000_000_000))
        return storage.withUnsafeMutablePointerToElements { pthread_cond_timedwait($0, mutex, &ts) != ETIMEDOUT }
    }
}

/// A lock with one condition variable.
package struct ConditionLock: @unchecked Sendable {  // a Lock and a ConditionVariable, both made to be shared
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

@usableFromInline
final class ConditionStorage: ManagedBuffer<Void, pthread_cond_t> {
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
