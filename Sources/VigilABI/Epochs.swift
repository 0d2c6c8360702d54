import Dispatch
import Glibc
import Synchronization

/// Read sections and grace periods: memory that threads reach on a hot path
/// without a lock (the routing snapshot an event is queued through, the
/// callbacks a plugin's context leads to) is freed only once no thread can
/// still be reading it.
///
/// A reader enters a section, reads, and leaves; it never waits inside.
/// A writer unlinks what it replaces, then waits for a grace period (every
/// section entered before the unlink has left) before freeing it. One
/// domain serves the whole host (`Epochs.host`), so that a plugin's emit
/// enters one section and the event is routed inside it: the section the
/// host table enters is the one `EventBus.publish` uses, and an event pays
/// for one.
///
/// Reclamation is by counting readers per epoch (a read-copy-update of two
/// epochs). A reader adds itself to the counter of the current epoch, checks
/// that the epoch did not move meanwhile (else it leaves and tries again),
/// and leaves by taking itself off that counter. A grace period flips the
/// epoch and waits until the old epoch's counters are zero. Every step is
/// sequentially consistent, so a reader either counted itself in the old
/// epoch before the writer looked (and is waited for), or sees the flipped
/// epoch, retries, and then reads what the writer left. The counters are
/// striped by thread, each stripe on a cache line of its own, so that
/// producers on different cores do not pass one line between them for every
/// event. Sections nest (a counter counts both).
///
/// Public and `@inlinable` where the event path enters and leaves: `package`
/// bodies are not inlined across modules.
public final class Epochs: @unchecked Sendable {  // the epoch and counters are atomics; the rest is behind its mutexes
    /// The host's one domain.
    public static let host = Epochs()

    @usableFromInline let epoch = Atomic<Int>(0)
    /// `2 × stripes` counters, `stride` apart: epoch e's stripe s is at `e * stripes + s`.
    @usableFromInline let counters: UnsafeMutablePointer<Atomic<Int>>
    @usableFromInline static var stripes: Int { 16 }
    @usableFromInline static var stride: Int { 64 / MemoryLayout<Atomic<Int>>.stride }
    /// Grace periods one at a time: each flips the epoch once.
    private let writer = Mutex(())
    /// Work waiting for a grace period (`afterGrace`), and whether a drain is on its way.
    private let pending = Mutex<(work: [@Sendable () -> Void], draining: Bool)>(([], false))

    package init() {
        let count = 2 * Self.stripes * Self.stride
        let raw = UnsafeMutableRawPointer.allocate(byteCount: count * MemoryLayout<Atomic<Int>>.stride, alignment: 64)
        counters = raw.bindMemory(to: Atomic<Int>.self, capacity: count)
        for i in 0..<count { (counters + i).initialize(to: Atomic(0)) }
    }

    deinit {
        counters.deinitialize(count: 2 * Self.stripes * Self.stride)
        UnsafeMutableRawPointer(counters).deallocate()
    }

    /// A reader's place: the counter it added itself to.
    public struct Section {
        @usableFromInline let counter: UnsafeMutablePointer<Atomic<Int>>

        @inlinable init(counter: UnsafeMutablePointer<Atomic<Int>>) { self.counter = counter }
    }

    @inlinable @inline(__always)
    func counter(epoch e: Int, stripe s: Int) -> UnsafeMutablePointer<Atomic<Int>> {
        counters + (e * Self.stripes + s) * Self.stride
    }

    /// The calling thread's stripe: its thread pointer, hashed.
    @inlinable @inline(__always)
    static func stripe() -> Int {
        let t = UInt64(UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))))
        return Int(truncatingIfNeeded: ((t >> 12) &* 0x9E37_79B9_7F4A_7C15) >> 60) & (stripes - 1)
    }

    /// Enters a read section: until `leave`, nothing unlinked after this
    /// call is freed. Keep the section short and never wait inside it.
    @inlinable @inline(__always)
    public func enter() -> Section {
        let s = Self.stripe()
        while true {
            let e = epoch.load(ordering: .sequentiallyConsistent)
            let c = counter(epoch: e, stripe: s)
            c.pointee.wrappingAdd(1, ordering: .sequentiallyConsistent)
            if epoch.load(ordering: .sequentiallyConsistent) == e { return Section(counter: c) }
            c.pointee.wrappingSubtract(1, ordering: .releasing)
        }
    }

    @inlinable @inline(__always)
    public func leave(_ section: Section) {
        section.counter.pointee.wrappingSubtract(1, ordering: .releasing)
    }

    /// Waits until every section entered before this call has left. Never
    /// from inside a section (it would wait for itself).
    package func synchronize() {
        writer.withLock { _ in
            let e = epoch.load(ordering: .relaxed)  // grace periods are serialized: nobody else moves it
            epoch.store(e ^ 1, ordering: .sequentiallyConsistent)
            waitForReaders(epoch: e)
        }
    }

    /// Runs `work` on a thread of its own once every section entered before
    /// this call has left: the free of something a reader may still hold.
    /// Returns at once (callable inside a section, and under any lock).
    package func afterGrace(_ work: @escaping @Sendable () -> Void) {
        let drain = pending.withLock { p -> Bool in
            p.work.append(work)
            defer { p.draining = true }
            return !p.draining
        }
        if drain { DispatchQueue.global(qos: .utility).async { self.drain() } }
    }

    /// One grace period for all the work queued before it began.
    private func drain() {
        while true {
            let batch = pending.withLock { p -> [@Sendable () -> Void] in
                defer { p.work = [] }
                if p.work.isEmpty { p.draining = false }
                return p.work
            }
            if batch.isEmpty { return }
            synchronize()
            for work in batch { work() }
        }
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
