import Synchronization

/// The last events a history sink was given, whole, for `/v1/events` and
/// the console's events view: at most `capacity` events and about
/// `maxBytes` (by each entry's `size`); the oldest go first. Kept as they
/// came (`Payload`: the sink's events), made into text only when asked for.
public final class EventRing<Payload: Sendable>: Sendable {
    package struct Entry: Sendable {
        package let seq: UInt64
        /// ns since the epoch.
        package let time: Int64
        package let monitor: String
        package let kind: String
        /// 0 debug … 5 critical.
        package let severity: UInt8
        /// About the bytes it holds.
        package let size: Int
        package let payload: Payload

        package init(seq: UInt64, time: Int64, monitor: String, kind: String, severity: UInt8, size: Int, payload: Payload) {
            self.seq = seq
            self.time = time
            self.monitor = monitor
            self.kind = kind
            self.severity = severity
            self.size = size
            self.payload = payload
        }
    }

    package let capacity: Int
    package let maxBytes: Int
    /// The host name its events are written with.
    package let host: String
    private let state: Mutex<State>

    private struct State {
        var slots: [Entry?]
        /// Where the next entry goes.
        var next = 0
        var count = 0
        var bytes = 0
        var evicted: UInt64 = 0
    }

    package init(capacity: Int = 10_000, maxBytes: Int = 8 << 20, host: String = "") {
        self.host = host
        self.capacity = max(1, capacity)
        self.maxBytes = max(1, maxBytes)
        state = Mutex(State(slots: [Entry?](repeating: nil, count: max(1, capacity))))
    }

    package func append(_ entries: [Entry]) {
        guard !entries.isEmpty else { return }
        state.withLock { state in
            for entry in entries {
                if let old = state.slots[state.next] {
                    state.bytes -= old.size
                    state.count -= 1
                    state.evicted += 1
                }
                state.slots[state.next] = entry
                state.bytes += entry.size
                state.count += 1
                state.next = (state.next + 1) % capacity
                // Past the bytes: the oldest go until it fits (the newest stays).
                while state.bytes > maxBytes && state.count > 1 {
                    let oldest = (state.next - state.count + capacity * 2) % capacity
                    if let old = state.slots[oldest] { state.bytes -= old.size }
                    state.slots[oldest] = nil
                    state.count -= 1
                    state.evicted += 1
                }
            }
        }
    }

    /// The newest `limit` events (oldest first) that `keep` says yes to,
    /// after sequence number `since`.
    package func recent(limit: Int, since: UInt64 = 0, _ keep: (Entry) -> Bool = { _ in true }) -> [Entry] {
        state.withLock { state in
            var out: [Entry] = []
            var index = (state.next - 1 + capacity) % capacity
            for _ in 0..<state.count {
                guard out.count < limit, let entry = state.slots[index], entry.seq > since else { break }
                if keep(entry) { out.append(entry) }
                index = (index - 1 + capacity) % capacity
            }
            return out.reversed()
        }
    }

    /// The oldest `limit` events after sequence number `since` that `keep`
    /// says yes to (oldest first); the sequence number of the oldest event
    /// held (0: none), by which a reader that fell behind sees that events
    /// it had not read were let go; and the last sequence number looked at
    /// (where the next call goes on from).
    package func after(_ since: UInt64, limit: Int, _ keep: (Entry) -> Bool = { _ in true }) -> (entries: [Entry], oldest: UInt64, scanned: UInt64) {
        state.withLock { state in
            guard state.count > 0 else { return ([], 0, 0) }
            let first = (state.next - state.count + capacity * 2) % capacity
            let newestIndex = (state.next - 1 + capacity) % capacity
            let oldest = state.slots[first]?.seq ?? 0, newest = state.slots[newestIndex]?.seq ?? 0
            guard newest > since else { return ([], oldest, newest) }
            // The first after `since`: sequence numbers rise along the ring, so a binary search.
            var low = 0, high = state.count
            while low < high {
                let mid = (low + high) / 2
                if (state.slots[(first + mid) % capacity]?.seq ?? 0) <= since { low = mid + 1 } else { high = mid }
            }
            var out: [Entry] = []
            var i = low
            while i < state.count, out.count < limit {
                if let entry = state.slots[(first + i) % capacity], keep(entry) { out.append(entry) }
                i += 1
            }
            return (out, oldest, i < state.count ? (state.slots[(first + i - 1) % capacity]?.seq ?? newest) : newest)
        }
    }

    package var figures: (count: Int, bytes: Int, evicted: UInt64) {
        state.withLock { ($0.count, $0.bytes, $0.evicted) }
    }
}
