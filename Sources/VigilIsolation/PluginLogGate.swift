import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore

/// How many of a monitor's plugin log lines reach the host's log: a token
/// bucket per instance, a burst of `burst` lines and then `perSecond`. A
/// plugin may call the host's `log` from any thread as fast as it likes (an
/// outside sender made collectd's network plugin warn 26,000 times a
/// second); the lines over the rate are dropped and counted, and a note says
/// how many: when a line comes a second or more after the first one dropped,
/// from a timer when none comes, and at stop. The policy alone (pure: time
/// is passed in); `PluginLogGate` applies it.
package struct PluginLogLimit: Sendable {
    package struct Config: Sendable {
        /// Lines written at once after a quiet spell.
        var burst: Double = 100
        /// Lines written a second after the burst.
        var perSecond: Double = 20
        /// How long dropped lines are counted before their note is due.
        var noteAfter: Int64 = 1_000_000_000
    }

    /// What was dropped: how many lines, over how long.
    package struct Note: Equatable, Sendable {
        var count: UInt64
        var nanoseconds: Int64

    }

    /// "N log lines of monitor M suppressed in the last T s", and the limit;
    /// `owner` is "monitor M" or "sink S".
    static func text(of note: Note, owner: String, config: Config) -> String {
        let seconds = Double(note.nanoseconds) / 1e9
        let shown = seconds < 10 ? String(format: "%.1f", seconds) : String(Int(seconds.rounded()))
        return "\(note.count) log lines of \(owner) suppressed in the last \(shown) s"
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

/// The one gate a plugin's log lines pass on their way to the host's log,
/// a monitor's and an output's alike, in process or from a runner: the cut
/// is counted, the line kept among the last few (for a crash report), held
/// to the rate (`PluginLogLimit`), and the lines dropped are counted and
/// said in a note: by the next line, by a timer when none comes, at stop.
package final class PluginLogGate: Sendable {
    /// "monitor cpu", "sink graphite": whose lines these are, as notes say it.
    let owner: String
    private let logger: Logger
    /// The plugin's name for the lines' metadata, once it is known.
    private let plugin: Mutex<String>
    private let state: Mutex<State>
    /// Lines cut at `HostLimits.logMessageBytes`.
    package let cuts = Atomic<UInt64>(0)
    /// Lines dropped over the rate.
    package let suppressed = Atomic<UInt64>(0)
    static let config = PluginLogLimit.Config()
    /// Lines kept for a crash report.
    static let recentLines = 5

    private struct State {
        var limit: PluginLogLimit
        var recent: [String] = []
    }

    package init(owner: String, plugin: String = "", logger: Logger) {
        self.owner = owner
        self.logger = logger
        self.plugin = Mutex(plugin)
        self.state = Mutex(State(limit: PluginLogLimit(config: Self.config, now: monotonicNanoseconds())))
    }

    /// Names the plugin in the lines' metadata (an output's is known once it loaded).
    package func setPlugin(_ name: String) { plugin.withLock { $0 = name } }

    /// The last lines the plugin logged, dropped ones included, oldest first.
    package var recentLines: [String] { state.withLock { $0.recent } }

    /// "; its last log lines: a | b", or "".
    package var lastWords: String {
        let lines = recentLines
        return lines.isEmpty ? "" : "; its last log lines: \(lines.joined(separator: " | "))"
    }

    /// One line from the plugin, any thread. `cut`: bytes the host table
    /// cut from it (the note uses the log handler's words for a cut).
    package func log(level: Int, message: String, cut: Int) {
        if cut > 0 { cuts.add(1, ordering: .relaxed) }
        let text = cut > 0 ? "\(message)… [cut \(cut) bytes]" : message
        let now = monotonicNanoseconds()
        let verdict = state.withLock { state in
            if state.recent.count == Self.recentLines { state.recent.removeFirst() }
            state.recent.append(String(decoding: text.utf8.prefix(512), as: UTF8.self))
            return state.limit.admit(now: now)
        }
        if let note = verdict.note { write(note) }
        guard verdict.write else {
            suppressed.add(1, ordering: .relaxed)
            if verdict.startedDropping { scheduleNote(at: now.addingSaturating(Self.config.noteAfter)) }
            return
        }
        let severity = Severity(rawValue: UInt8(clamping: max(0, min(level, 5)))) ?? .info
        logger.log(level: severity.logLevel, "\(text)", metadata: ["plugin": "\(plugin.withLock { $0 })"])
    }

    /// At stop: the note of lines dropped and not yet said.
    package func flush() {
        if let note = state.withLock({ $0.limit.takeNote(now: monotonicNanoseconds(), force: true) }) { write(note) }
    }

    /// Writes the note of dropped lines at `due` (monotonic ns) if no line
    /// has written it by then; again later if lines dropped since are not due yet.
    private func scheduleNote(at due: Int64) {
        let wait = max(0, due - monotonicNanoseconds())
        DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: wait))) { [weak self] in
            guard let self else { return }
            let (note, next) = state.withLock { ($0.limit.takeNote(now: monotonicNanoseconds()), $0.limit.noteDue) }
            if let note { write(note) }
            if let next { scheduleNote(at: next) }
        }
    }

    private func write(_ note: PluginLogLimit.Note) {
        logger.warning("\(PluginLogLimit.text(of: note, owner: owner, config: Self.config))",
                       metadata: ["plugin": "\(plugin.withLock { $0 })"])
    }
}

extension Severity {
    /// The swift-log level a line or an event of this severity is logged at:
    /// a plugin's lines here, the log sink's events, and the level the host's
    /// own log is set to.
    package var logLevel: Logger.Level {
        switch self {
        case .debug: .debug
        case .info: .info
        case .notice: .notice
        case .warning: .warning
        case .error: .error
        case .critical: .critical
        }
    }
}
