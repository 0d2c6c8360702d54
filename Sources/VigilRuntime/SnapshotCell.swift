import Synchronization
import VigilABI

/// An immutable object that many threads read on a hot path and a writer
/// now and then replaces: read without a lock inside a section of the
/// host's epochs (`Epochs.host`), replaced in one atomic step, and the
/// object replaced released only after a grace period, once no reader can
/// still hold it.
///
/// A reader's section is one event's emit and publish, which never waits
/// (a producer that must wait for room in a blocking sink leaves the
/// section first), so a writer waits for at most one event of each reader;
/// readers never wait. Writers of one cell are serialized by its mutex.
package final class SnapshotCell<Value: AnyObject & Sendable>: @unchecked Sendable {  // the pointer is an atomic; readers are counted by `epochs`
    private let current: Atomic<UnsafeRawPointer>
    let epochs: Epochs
    private let writer = Mutex(())

    init(_ initial: Value, epochs: Epochs = .host) {
        current = Atomic(UnsafeRawPointer(Unmanaged.passRetained(initial).toOpaque()))
        self.epochs = epochs
    }

    deinit {
        Unmanaged<Value>.fromOpaque(current.load(ordering: .acquiring)).release()
    }

    /// Enters a read section (see `Epochs.enter`).
    @inline(__always)
    func enter() -> Epochs.Section { epochs.enter() }

    @inline(__always)
    func leave(_ section: Epochs.Section) { epochs.leave(section) }

    /// The value in force, for use inside a section of `epochs` (neither
    /// retained nor released: the section keeps it alive).
    @inline(__always)
    func withValue<R>(in section: Epochs.Section, _ body: (Value) throws -> R) rethrows -> R {
        let raw = current.load(ordering: .sequentiallyConsistent)
        return try Unmanaged<Value>.fromOpaque(raw)._withUnsafeGuaranteedRef(body)
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
    /// writers' mutex). Writers run one at a time. Never from inside a
    /// section.
    @discardableResult
    func update<R>(_ next: (Value) throws -> (Value, R)) rethrows -> R {
        let (old, result) = try writer.withLock { _ -> (Value, R) in
            let before = Unmanaged<Value>.fromOpaque(current.load(ordering: .acquiring)).takeUnretainedValue()
            let (value, result) = try next(before)
            let replaced = current.exchange(UnsafeRawPointer(Unmanaged.passRetained(value).toOpaque()),
                                            ordering: .sequentiallyConsistent)
            epochs.synchronize()
            return (Unmanaged<Value>.fromOpaque(replaced).takeRetainedValue(), result)
        }
        withExtendedLifetime(old) {}
        return result
    }
}
