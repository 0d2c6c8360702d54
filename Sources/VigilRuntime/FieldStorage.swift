import Synchronization
import VigilABI
import VigilCore

/// Field storage that the sinks' threads hand back once they have written
/// their events, for the fields of the next events.
///
/// An event's `[Field]` is the one allocation the event path makes, and it
/// is made on a plugin's thread and freed on a sink's: with glibc that is
/// the slow path on both sides (the chunk goes back to the producer's arena
/// under the arena's lock, and the producer's next allocation misses its
/// thread cache). Measured: a quarter of a producer's time in
/// `flood -> null`. Storage that goes round instead keeps both threads out
/// of malloc. Swift's value semantics keep it safe: storage still shared
/// (an event queued for several sinks) is copied, never changed, when it is
/// emptied.
///
/// One pool for the process, bounded (`limit` arrays of at most
/// `maxCapacity` fields), and holding no more than the producers borrowed:
/// an event queued for several sinks comes back once per sink, and keeping
/// every copy would fill the pool from the host's own events, reload after
/// reload, with storage nobody takes. What does not fit is freed as before.
package final class FieldStorage: Sendable {  // the pool is behind its lock
    package static let shared = FieldStorage()
    static let limit = 4096
    static let maxCapacity = 16

    private struct Pool {
        /// Batches of empty storage, as the sinks handed them back.
        var batches: [[[Field]]] = []
        var count = 0
        /// Storage handed out by `take` and not seen back yet (at most
        /// `limit`: an event dropped or refused never comes back).
        var lent = 0
    }
    private let pool = Mutex(Pool())

    /// Empty storage, with room for some fields when any came back.
    @inline(__always)
    package func take() -> [Field] {
        pool.withLock { p in
            p.lent = min(p.lent + 1, Self.limit)
            guard let last = p.batches.indices.last else { return [] }
            let storage = p.batches[last].removeLast()
            if p.batches[last].isEmpty { p.batches.removeLast() }
            p.count -= 1
            return storage
        }
    }

    /// Takes the field storage of the events of `batch` (written: they are
    /// about to be dropped), empties it, and keeps what fits. Sink threads.
    func recycle(_ batch: inout [Event]) {
        var harvested: [[Field]] = []
        harvested.reserveCapacity(min(batch.count, Self.limit))
        for i in batch.indices {
            guard harvested.count < Self.limit else { break }
            let capacity = batch[i].fields.capacity
            guard capacity > 0 && capacity <= Self.maxCapacity else { continue }
            var fields: [Field] = []
            swap(&fields, &batch[i].fields)
            fields.removeAll(keepingCapacity: true)
            harvested.append(fields)
        }
        guard !harvested.isEmpty else { return }
        pool.withLock { p in
            let room = min(Self.limit - p.count, p.lent)
            guard room > 0 else { return }
            if harvested.count > room { harvested.removeLast(harvested.count - room) }
            p.count += harvested.count
            p.lent -= harvested.count
            p.batches.append(harvested)
        }
    }

    /// `fields` in storage from the pool, for an event the host makes
    /// itself (its own events, availability, thresholds): so that it, too,
    /// borrows what its sinks give back.
    package func take(holding fields: [Field]) -> [Field] {
        guard !fields.isEmpty, fields.count <= Self.maxCapacity else { return fields }
        var storage = take()
        storage.append(contentsOf: fields)
        return storage
    }
}
