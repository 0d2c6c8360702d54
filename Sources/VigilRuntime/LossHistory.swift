import Synchronization
import VigilABI
import VigilSinks

/// Every sink's lost count, sampled once a second by the watchdog's tick
/// (no wake-up of its own), so health can say what was lost in the last
/// minute. Sinks are told apart by runner (a reload may replace one under
/// the same name), by its serial: a retired runner is freed, and its
/// address may be a new one's.
package final class LossHistory: Sendable {
    package init() {}

    private let samples = Mutex<[(at: Int64, lost: [UInt64: LossCounts])]>([])

    package func sample(_ sinks: [SinkRunner], now: Int64 = monotonicNanoseconds()) {
        var lost: [UInt64: LossCounts] = [:]
        for sink in sinks { lost[sink.serial] = sink.stats.lost }
        samples.withLock { list in
            list.append((now, lost))
            // Keep one sample older than a minute: the base of the window.
            while list.count > 1, now - list[1].at >= 60_000_000_000 { list.removeFirst() }
        }
    }

    /// Per sink, what it lost since a minute ago (or since the oldest
    /// sample, or since it started when it came later).
    package func lostInLastMinute(_ sinks: [SinkRunner]) -> [(SinkRunner, LossCounts)] {
        let base = samples.withLock { $0.first?.lost } ?? [:]
        return sinks.map { sink in
            let now = sink.stats.lost
            let then = base[sink.serial] ?? LossCounts()
            var added = LossCounts()
            for reason in LossReason.allCases { added[reason] = now[reason] &- min(now[reason], then[reason]) }
            return (sink, added)
        }
    }
}
