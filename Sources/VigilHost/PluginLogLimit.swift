import Foundation
import VigilCore

/// How many of a monitor's plugin log lines reach the host's log: a token
/// bucket per instance, a burst of `burst` lines and then `perSecond`. A
/// plugin may call the host's `log` from any thread as fast as it likes (an
/// outside sender made collectd's network plugin warn 26,000 times a
/// second); the lines over the rate are dropped and counted, and a note says
/// how many: when a line comes a second or more after the first one dropped,
/// from a timer when none comes, and at stop. In-process plugins and runners
/// alike: both log through `MonitorInstance.log`. Pure: time is passed in.
struct PluginLogLimit: Sendable {
    struct Config: Sendable {
        /// Lines written at once after a quiet spell.
        var burst: Double = 100
        /// Lines written a second after the burst.
        var perSecond: Double = 20
        /// How long dropped lines are counted before their note is due.
        var noteAfter: Int64 = 1_000_000_000
    }

    /// What was dropped: how many lines, over how long.
    struct Note: Equatable, Sendable {
        var count: UInt64
        var nanoseconds: Int64

    }

    /// "N log lines of monitor M suppressed in the last T s", and the limit.
    static func text(of note: Note, monitor: String, config: Config) -> String {
        let seconds = Double(note.nanoseconds) / 1e9
        let shown = seconds < 10 ? String(format: "%.1f", seconds) : String(Int(seconds.rounded()))
        return "\(note.count) log lines of monitor \(monitor) suppressed in the last \(shown) s"
            + " (at most \(Int(config.burst)) at once, then \(Int(config.perSecond)) a second)"
    }

    let config: Config
    private var tokens: Double
    private var refilled: Int64
    /// Lines dropped since the last note, and when the first of them was.
    private(set) var dropped: (count: UInt64, since: Int64)?

    init(config: Config = Config(), now: Int64) {
        self.config = config
        self.tokens = config.burst
        self.refilled = now
    }

    /// The verdict on one line at `now` (monotonic ns): whether it is
    /// written, the note of lines dropped before it when one is due (written
    /// first, whether the line is or not), and whether this line began a
    /// count of dropped lines (the caller sets a timer for its note).
    mutating func admit(now: Int64) -> (write: Bool, note: Note?, startedDropping: Bool) {
        tokens = min(config.burst, tokens + Double(max(0, now - refilled)) / 1e9 * config.perSecond)
        refilled = now
        let note = takeNote(now: now)
        if tokens >= 1 {
            tokens -= 1
            return (true, note, false)
        }
        let started = dropped == nil
        dropped = (count: (dropped?.count ?? 0) + 1, since: dropped?.since ?? now)
        return (false, note, started)
    }

    /// The note of the lines dropped so far, once it is due (or `force`d, at
    /// stop); nil when none was dropped or it is not due yet.
    mutating func takeNote(now: Int64, force: Bool = false) -> Note? {
        guard let dropped, force || now - dropped.since >= config.noteAfter else { return nil }
        self.dropped = nil
        return Note(count: dropped.count, nanoseconds: max(0, now - dropped.since))
    }

    /// When the note of the lines dropped so far is due, if any were.
    var noteDue: Int64? { dropped.map { $0.since.addingSaturating(config.noteAfter) } }
}
