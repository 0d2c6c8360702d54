import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

/// A monitor's counters as values: read from a running instance, or what
/// is left of the instances a reload retired (summed by name), so that a
/// retired instance is freed and leaves only these. Every counter of the
/// exit summary, `GET /metrics` and `ctl status` per monitor is here.
package struct MonitorFigures: Sendable {
    package var name: String
    package var emitted: UInt64 = 0
    /// Emits refused, by reason name.
    package var refusedBy: [String: UInt64] = [:]
    var lateCalls: UInt64 = 0
    var logCuts: UInt64 = 0
    package var logSuppressed: UInt64 = 0
    package var polls: UInt64 = 0
    package var pollErrors: UInt64 = 0
    var pollNanoseconds: UInt64 = 0
    package var crashes: UInt64 = 0
    package var restarts: UInt64 = 0
    /// Call durations by call.
    package var callTimes: [String: CallTimes.Histogram] = [:]

    init(name: String) { self.name = name }

    var refused: UInt64 { refusedBy.values.reduce(0, &+) }

    /// `other`'s counts added (saturating where they could wrap).
    mutating func add(_ other: MonitorFigures) {
        emitted &+= other.emitted
        for (reason, n) in other.refusedBy { refusedBy[reason, default: 0] &+= n }
        lateCalls &+= other.lateCalls
        logCuts &+= other.logCuts
        logSuppressed &+= other.logSuppressed
        polls &+= other.polls
        pollErrors &+= other.pollErrors
        pollNanoseconds &+= other.pollNanoseconds
        crashes &+= other.crashes
        restarts &+= other.restarts
        for (call, h) in other.callTimes { callTimes[call, default: CallTimes.Histogram()].add(h) }
    }

    /// One entry per name, in the order names first appear, each the sum of its entries.
    static func merged(_ figures: [MonitorFigures]) -> [MonitorFigures] {
        mergedByName(figures, name: \.name) { $0.add($1) }
    }
}

extension MonitorInstance {
    /// Its counters now.
    var figures: MonitorFigures {
        var f = MonitorFigures(name: name)
        f.emitted = emitted.load(ordering: .relaxed)
        for entry in refusals.snapshot { f.refusedBy[entry.reason.name, default: 0] &+= entry.count }
        f.lateCalls = lateCalls
        f.logCuts = logGate.cuts.load(ordering: .relaxed)
        f.logSuppressed = logGate.suppressed.load(ordering: .relaxed)
        f.polls = polls.load(ordering: .relaxed)
        f.pollErrors = pollErrors.load(ordering: .relaxed)
        f.pollNanoseconds = pollNanoseconds.load(ordering: .relaxed)
        f.crashes = crashes.load(ordering: .relaxed)
        f.restarts = restarts.load(ordering: .relaxed)
        f.callTimes = callTimes.snapshot
        return f
    }
}

/// Counters of one name, kept in the order names first appear, each the
/// sum of its entries (what a reload retired, then what runs).
package func mergedByName<Figures>(_ entries: [Figures], name: (Figures) -> String, add: (inout Figures, Figures) -> Void) -> [Figures] {
    var order: [String] = []
    var byName: [String: Figures] = [:]
    for entry in entries {
        let key = name(entry)
        if var sum = byName[key] {
            add(&sum, entry)
            byName[key] = sum
        } else {
            order.append(key)
            byName[key] = entry
        }
    }
    return order.map { byName[$0]! }
}
