import Synchronization

/// How long calls into a monitor's plugin took, by call (create, start,
/// poll, stop): a histogram each, for `vigil_plugin_call_seconds`. Calls
/// are few (a poll an interval), so one lock is cheap here.
package final class CallTimes: Sendable {
    /// Upper bounds in seconds, as Prometheus' `le`.
    package static let bounds: [Double] = [0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10]

    package struct Histogram: Sendable {
        /// Counts per bound (not cumulative), then the count past the last.
        package var buckets = [UInt64](repeating: 0, count: CallTimes.bounds.count + 1)
        package var count: UInt64 = 0
        package var sumNanoseconds: UInt64 = 0

        package mutating func add(_ other: Histogram) {
            for i in buckets.indices { buckets[i] &+= other.buckets[i] }
            count &+= other.count
            sumNanoseconds &+= other.sumNanoseconds
        }
    }

    private let state = Mutex<[String: Histogram]>([:])

    func record(_ call: String, nanoseconds: Int64) {
        let ns = UInt64(max(0, nanoseconds))
        let seconds = Double(ns) / 1e9
        let bucket = Self.bounds.firstIndex { seconds <= $0 } ?? Self.bounds.count
        state.withLock { all in
            all[call, default: Histogram()].buckets[bucket] &+= 1
            all[call, default: Histogram()].count &+= 1
            all[call, default: Histogram()].sumNanoseconds &+= ns
        }
    }

    var snapshot: [String: Histogram] { state.withLock { $0 } }
}
