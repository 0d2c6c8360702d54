import Glibc
import Synchronization
import VigilABI

/// An immutable object that many threads read on a hot path and a writer
/// now and then replaces: read without a lock, replaced in one atomic step,
/// and the object replaced released only once no reader can still hold it.
///
/// Reclamation is by counting readers per epoch (a read-copy-update of two
/// epochs). A reader adds itself to the counter of the current epoch, checks
/// that the epoch did not move meanwhile (else it leaves and tries again),
/// then loads the pointer; it leaves by taking itself off that counter. A
/// writer stores the new pointer, flips the epoch, and waits until the old
/// epoch's counters are zero. Every step is sequentially consistent, so a
/// reader either counted itself in the old epoch before the writer looked
/// (and is waited for), or sees the flipped epoch, retries, and then loads
/// the new pointer. The counters are striped by thread, each stripe on a
/// cache line of its own, so that producers on different cores do not pass
/// one line between them for every event.
///
/// A reader's section is one event's publish, which never waits (a producer
/// that must wait for room in a blocking sink leaves the section first), so
/// a writer waits for at most one event of each reader; readers never wait.
/// Writers are serialized by a mutex of their own.
package final class SnapshotCell<Value: AnyObject & Sendable>: @unchecked Sendable {  // the pointer and counters are atomics
    private let current: Atomic<UnsafeRawPointer>
    private let epoch = Atomic<Int>(0)
    /// `2 × stripes` counters, `stride` apart: epoch e's stripe s is at `e * stripes + s`.
    private let counters: UnsafeMutablePointer<Atomic<Int>>
    private static var stripes: Int { 16 }
    private static var stride: Int { 64 / MemoryLayout<Atomic<Int>>.stride }
    private let writer = Lock()

    init(_ initial: Value) {
        current = Atomic(UnsafeRawPointer(Unmanaged.passRetained(initial).toOpaque()))
        let count = 2 * Self.stripes * Self.stride
        let raw = UnsafeMutableRawPointer.allocate(byteCount: count * MemoryLayout<Atomic<Int>>.stride, alignment: 64)
        counters = raw.bindMemory(to: Atomic<Int>.self, capacity: count)
        for i in 0..<count { (counters + i).initialize(to: Atomic(0)) }
    }

    deinit {
        Unmanaged<Value>.fromOpaque(current.load(ordering: .acquiring)).release()
        counters.deinitialize(count: 2 * Self.stripes * Self.stride)
        UnsafeMutableRawPointer(counters).deallocate()
    }

    /// A reader's place: the counter it added itself to.
    package struct Section {
        fileprivate let counter: UnsafeMutablePointer<Atomic<Int>>
    }

    @inline(__always)
    private func counter(epoch e: Int, stripe s: Int) -> UnsafeMutablePointer<Atomic<Int>> {
        counters + (e * Self.stripes + s) * Self.stride
    }

    /// The calling thread's stripe: its thread pointer, hashed.
    @inline(__always)
    private static func stripe() -> Int {
        let t = UInt64(UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))))
        return Int(truncatingIfNeeded: ((t >> 12) &* 0x9E37_79B9_7F4A_7C15) >> 60) & (stripes - 1)
    }

    /// Enters a read section: until `leave`, the value `value(in:)` returns
    /// stays alive. Keep the section short and never wait inside it.
    @inline(__always)
    func enter() -> Section {
        let s = Self.stripe()
        while true {
            let e = epoch.load(ordering: .sequentiallyConsistent)
            let c = counter(epoch: e, stripe: s)
            c.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
            if epoch.load(ordering: .sequentiallyConsistent) == e { return Section(counter: c) }
            c.pointee.wrappingSubtract(1, ordering: .releasing)
        }
    }

    /// The value in force, for use inside the section (neither retained
    /// nor released: the section keeps it alive).
    @inline(__always)
    func withValue<R>(in section: Section, _ body: (Value) throws -> R) rethrows -> R {
        let raw = current.load(ordering: .sequentiallyConsistent)
        return try Unmanaged<Value>.fromOpaque(raw)._withUnsafeGuaranteedRef(body)
    }

    @inline(__always)
    func leave(_ section: Section) {
        section.counter.pointee.wrappingSubtract(1, ordering: .releasing)
    }

    /// The value in force, retained (for callers off the hot path).
    var value: Value {
        let section = enter()
        defer { leave(section) }
        return withValue(in: section) { $0 }
    }

    /// Builds the next value from the one in force and puts it in force;
    /// returns once no reader can still be reading the one it replaced,
    /// which is then released (after `update` returns, outside the
    /// writers' mutex). Writers run one at a time.
    @discardableResult
    func update<R>(_ next: (Value) throws -> (Value, R)) rethrows -> R {
        let (old, result) = try writer.withLock { () -> (Value, R) in
            let before = Unmanaged<Value>.fromOpaque(current.load(ordering: .acquiring)).takeUnretainedValue()
            let (value, result) = try next(before)
            let replaced = current.exchange(UnsafeRawPointer(Unmanaged.passRetained(value).toOpaque()),
                                            ordering: .sequentiallyConsistent)
            let e = epoch.load(ordering: .relaxed)  // writers are serialized: nobody else moves it
            epoch.store(e ^ 1, ordering: .sequentiallyConsistent)
            waitForReaders(epoch: e)
            return (Unmanaged<Value>.fromOpaque(replaced).takeRetainedValue(), result)
        }
        withExtendedLifetime(old) {}
        return result
    }

    /// Waits until no reader is counted in epoch `e`: spins a little (a
    /// section is one event), then yields, then sleeps in short steps (a
    /// reader preempted inside its section).
    private func waitForReaders(epoch e: Int) {
        var rounds = 0
        for s in 0..<Self.stripes {
            let c = counter(epoch: e, stripe: s)
            while c.pointee.load(ordering: .sequentiallyConsistent) != 0 {
                rounds += 1
                if rounds < 100 {
                    continue
                } else if rounds < 1000 {
                    sched_yield()
                } else {
                    var ts = timespec(tv_sec: 0, tv_nsec: 50_000)
                    nanosleep(&ts, nil)
                }
            }
        }
    }
}
