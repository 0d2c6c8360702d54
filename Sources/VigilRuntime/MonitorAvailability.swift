/// A monitor's availability as a value: what the plugin declared
/// (`set_availability`), what the host inferred from an UNAVAILABLE status
/// (cleared by the next success), and what was last reported. A source is
/// taken as available until said otherwise, so nothing is reported for a
/// monitor that always was. Changes are reported at most `burst` at once,
/// then one a second: a flapping source changes its state, not the log.
/// The instance keeps it behind its lock and routes what `report` says.
struct MonitorAvailability: Sendable {
    static let burst = 10.0

    private var declared: (available: Bool, reason: String)?
    private var inferred: (available: Bool, reason: String)?
    private var published: (available: Bool, reason: String)?
    private var tokens = MonitorAvailability.burst
    private var refilled: Int64
    /// Changes not reported since the last report.
    private var suppressed = 0
    /// A report is scheduled for when a token is there again.
    private var deferred = false

    init(now: Int64) { refilled = now }

    /// The availability in force: the host's inference over the plugin's word.
    var effective: (available: Bool, reason: String) { inferred ?? declared ?? (true, "") }

    /// Whether the host inferred the source unavailable (a success clears it).
    var inferredUnavailable: Bool { inferred != nil }

    mutating func declare(available: Bool, reason: String) { declared = (available, available ? "" : reason) }

    mutating func infer(available: Bool, reason: String) { inferred = available ? nil : (false, reason) }

    enum Report: Equatable {
        /// Nothing changed since the last report, or a report is already scheduled.
        case nothing
        /// Report this, with how many changes in between were not.
        case now(available: Bool, reason: String, skipped: Int)
        /// Out of tokens: ask again after this many nanoseconds (then `deferredReport`).
        case later(nanoseconds: Int64)
    }

    /// What to report at `now` (monotonic ns), after a change.
    mutating func report(now: Int64) -> Report {
        let current = effective
        let previous = published ?? (true, "")
        guard current.available != previous.available || current.reason != previous.reason else { return .nothing }
        // A token per report, refilled one a second up to the burst.
        tokens = min(Self.burst, tokens + Double(max(0, now - refilled)) / 1e9)
        refilled = now
        guard tokens >= 1 else {
            suppressed += 1
            if deferred { return .nothing }
            deferred = true
            return .later(nanoseconds: Int64((1 - tokens) * 1e9) + 1)
        }
        tokens -= 1
        published = current
        defer { suppressed = 0 }
        return .now(available: current.available, reason: current.reason, skipped: suppressed)
    }

    /// The report `later` asked for, at `now`: the state as it is then.
    mutating func deferredReport(now: Int64) -> Report {
        deferred = false
        return report(now: now)
    }
}
