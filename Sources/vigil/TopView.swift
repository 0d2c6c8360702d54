import VigilControl
import Foundation
import VigilABI
import VigilCore

/// What `vigil top` shows of a running host: the host's `GET /v1/status`
/// answers, one a second, turned into rates and drawn into lines of a given
/// terminal size. Pure (time is passed in, text comes out), so that the
/// drawing is tested without a terminal; the terminal itself (raw mode, the
/// alternate screen, keys, SIGWINCH) is the CLI's `Top`.

/// The part of `/v1/status` that `vigil top` reads. Every text in it came
/// from outside (a manifest's names, a plugin's error text) and is shown
/// through `shownText`, so it cannot drive the terminal.
public struct TopStatus: Decodable, Sendable, Equatable {
    public struct Monitor: Decodable, Sendable, Equatable {
        public var name: String
        public var state: String
        public var plugin: String
        public var events: UInt64
        public var polls: UInt64
        public var pollErrors: UInt64
        public var crashes: UInt64
        public var available: Bool
        public var unavailableReason: String?
        public var lastError: String?
    }

    public struct Sink: Decodable, Sendable, Equatable {
        public var name: String
        public var type: String
        public var queueDepth: Int
        public var queueCapacity: Int
        public var written: UInt64
        public var dropped: UInt64
        public var lost: [String: UInt64]
    }

    public var pid: Int32
    public var version: String
    public var uptimeS: Double
    public var events: UInt64
    public var monitors: [Monitor]
    public var sinks: [Sink]

    /// The status from an answer's body, or what is wrong with it.
    public static func decode(_ body: [UInt8]) throws -> TopStatus {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        do {
            return try decoder.decode(TopStatus.self, from: Data(body))
        } catch let DecodingError.keyNotFound(key, context) {
            throw ControlError("the host's status has no '\(key.stringValue)'\(where_(context))")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            throw ControlError("the host's status has an unexpected value\(where_(context))")
        } catch let DecodingError.dataCorrupted(context) {
            throw ControlError("the host's status cannot be read\(where_(context)): \(context.debugDescription)")
        }
    }

    private static func where_(_ context: DecodingError.Context) -> String {
        let path = context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        return path.isEmpty ? "" : " at \(path)"
    }
}

/// The answers of the last few seconds and what lies between them: events
/// and writes per second, per monitor, per sink and in all, averaged over up
/// to `window` (between two answers a second apart, a monitor polled every
/// second showed 0 and 1 by turns). A counter that went down (the host was
/// restarted: another pid, or its counts began again) has no rate until the
/// next answer.
public struct TopModel: Sendable {
    public enum Connection: Sendable, Equatable {
        /// No answer yet.
        case waiting
        case live
        /// The last attempt failed, with why, since this monotonic time (ns).
        case unreachable(String, since: Int64)
    }

    /// How far back the rates look (ns).
    public static let window: Int64 = 10_000_000_000

    public private(set) var connection: Connection = .waiting
    /// The newest answer and when it came (monotonic ns).
    public private(set) var current: (status: TopStatus, at: Int64)?
    /// Earlier answers of the same host run, oldest first, none older than `window` but the newest of them.
    private var earlier: [(status: TopStatus, at: Int64)] = []

    public init() {}

    public mutating func update(_ status: TopStatus, at now: Int64) {
        if let current, current.status.pid == status.pid, current.at < now {
            earlier.append(current)
        } else {
            earlier.removeAll()
        }
        // Keep the oldest answer that still covers the window, no older one.
        while earlier.count > 1, now.subtractingSaturating(earlier[1].at) >= Self.window { earlier.removeFirst() }
        current = (status, now)
        connection = .live
    }

    public mutating func failed(_ reason: String, at now: Int64) {
        if case .unreachable(_, let since) = connection {
            connection = .unreachable(reason, since: since)
        } else {
            connection = .unreachable(reason, since: now)
        }
    }

    /// Per second between two answers; nil without two answers of one
    /// host run, or when the count went down.
    static func rate(_ now: UInt64, _ then: UInt64, seconds: Double) -> Double? {
        guard now >= then, seconds > 0 else { return nil }
        return Double(now - then) / seconds
    }

    private var span: (TopStatus, TopStatus, Double)? {
        guard let current, let oldest = earlier.first, current.at > oldest.at else { return nil }
        return (current.status, oldest.status, Double(current.at.subtractingSaturating(oldest.at)) / 1e9)
    }

    public var eventsPerSecond: Double? {
        guard let (now, then, seconds) = span else { return nil }
        return Self.rate(now.events, then.events, seconds: seconds)
    }

    /// Events per second of the monitor named `name` (names are unique in a manifest).
    public func eventsPerSecond(monitor name: String) -> Double? {
        guard let (now, then, seconds) = span,
              let a = now.monitors.first(where: { $0.name == name }),
              let b = then.monitors.first(where: { $0.name == name }) else { return nil }
        return Self.rate(a.events, b.events, seconds: seconds)
    }

    public func writtenPerSecond(sink name: String) -> Double? {
        guard let (now, then, seconds) = span,
              let a = now.sinks.first(where: { $0.name == name }),
              let b = then.sinks.first(where: { $0.name == name }) else { return nil }
        return Self.rate(a.written, b.written, seconds: seconds)
    }
}

/// The screen of `vigil top`: at most `rows` lines, none wider than
/// `columns` characters, with no control character in them.
public enum TopScreen {
    public static func render(_ model: TopModel, address: String, columns: Int, rows: Int, now: Int64) -> [String] {
        let columns = max(1, min(columns, 4096)), rows = max(1, min(rows, 4096))
        var lines: [String] = []
        let footer = "q: quit    \(shown(address))    every 1 s"
        switch (model.connection, model.current) {
        case (.waiting, _):
            lines.append("vigil top: asking \(shown(address))…")
        case (.unreachable(let why, let since), let last):
            let seconds = max(0, now.subtractingSaturating(since)) / 1_000_000_000
            lines.append("unreachable for \(seconds) s, retrying every 1 s:")
            lines.append("  \(shown(why))")
            if let last {
                let age = max(0, now.subtractingSaturating(last.at)) / 1_000_000_000
                lines.append("the last answer, \(age) s old:")
                lines += body(last.status, model: model, withRates: false)
            }
        case (.live, let current?):
            lines += body(current.status, model: model, withRates: true)
        case (.live, nil):
            lines.append("vigil top: asking \(shown(address))…")
        }
        // The footer keeps the last row; what does not fit above it is cut, and said so.
        if lines.count > rows - 1 {
            let keep = max(0, rows - 2)
            let cut = lines.count - keep
            lines = Array(lines.prefix(keep))
            if rows >= 2 { lines.append("… \(counted(cut, "more line")); a taller terminal shows them") }
        }
        lines = lines.map { fit($0, columns) }
        // The footer on the last row.
        if lines.count < rows { lines += Array(repeating: "", count: rows - 1 - lines.count) + [fit(footer, columns)] }
        return Array(lines.prefix(rows))
    }

    static func body(_ s: TopStatus, model: TopModel, withRates: Bool) -> [String] {
        let total = withRates ? model.eventsPerSecond : nil
        var lines = ["vigil \(shown(s.version)) (pid \(s.pid))   up \(duration(s.uptimeS))   \(s.events) events   \(rate(total)) events/s   \(counted(s.monitors.count, "monitor"))   \(counted(s.sinks.count, "sink"))", ""]
        var table = [["MONITOR", "STATE", "EVENTS/S", "EVENTS", "POLLS", "ERRORS", "PLUGIN", "LAST ERROR"]]
        for m in s.monitors {
            var state = shown(m.state)
            if !m.available { state += " (unavailable)" }
            let note = m.lastError ?? (m.available ? nil : m.unavailableReason.map { "unavailable: \($0)" })
            table.append([shown(m.name), state, rate(withRates ? model.eventsPerSecond(monitor: m.name) : nil),
                          "\(m.events)", "\(m.polls)", "\(m.pollErrors.addingSaturating(m.crashes))",
                          shown(m.plugin), shown(note ?? "")])
        }
        lines += Self.table(table)
        lines.append("")
        table = [["SINK", "TYPE", "QUEUE", "WRITTEN/S", "WRITTEN", "DROPPED", "LOST BY REASON"]]
        for k in s.sinks {
            let lost = k.lost.filter { $0.value > 0 }.sorted { $0.key < $1.key }
                .map { "\(shown($0.key))=\($0.value)" }.joined(separator: " ")
            table.append([shown(k.name), shown(k.type), "\(k.queueDepth)/\(k.queueCapacity)",
                          rate(withRates ? model.writtenPerSecond(sink: k.name) : nil),
                          "\(k.written)", "\(k.dropped)", lost])
        }
        lines += Self.table(table)
        return lines
    }

    /// Columns padded to their widest cell (at most 40), the last left ragged.
    static func table(_ rows: [[String]]) -> [String] {
        guard let count = rows.first?.count else { return [] }
        var widths = Array(repeating: 0, count: count)
        for row in rows { for (i, cell) in row.enumerated() where i < count { widths[i] = min(40, max(widths[i], cell.count)) } }
        return rows.map { row in
            row.enumerated().map { i, cell in
                guard i < count - 1 else { return cell }
                let cut = cell.count > widths[i] ? String(cell.prefix(widths[i] - 1)) + "…" : cell
                return cut.padding(toLength: widths[i], withPad: " ", startingAt: 0)
            }.joined(separator: "  ").trimmingTrailingSpaces()
        }
    }


    /// `text` cut to `columns` terminal cells, with `…` where it was cut.
    static func fit(_ text: String, _ columns: Int) -> String {
        guard width(text) > columns else { return text }
        var out = "", used = 0
        let room = columns <= 1 ? columns : columns - 1
        for character in text {
            let w = width(String(character))
            if used + w > room { break }
            out.append(character)
            used += w
        }
        return columns <= 1 ? out : out + "…"
    }

    /// Terminal cells: 2 for East Asian wide characters and emoji, 0 for
    /// combining marks, 1 for the rest (the common cases of wcwidth).
    static func width(_ text: String) -> Int {
        var cells = 0
        for scalar in text.unicodeScalars {
            switch scalar.properties.generalCategory {
            case .nonspacingMark, .enclosingMark: continue
            default: break
            }
            switch scalar.value {
            case 0x1100...0x115F, 0x2E80...0xA4CF, 0xAC00...0xD7A3, 0xF900...0xFAFF, 0xFE30...0xFE4F, 0xFF00...0xFF60,
                 0xFFE0...0xFFE6, 0x1F300...0x1F64F, 0x1F900...0x1F9FF, 0x20000...0x3FFFD: cells += 2
            default: cells += 1
            }
        }
        return cells
    }

    /// Text from outside as one line: controls escaped (`shownText`), and
    /// format characters too (bidirectional overrides, zero-width ones),
    /// which could reorder or hide what is on screen.
    static func shown(_ text: String) -> String {
        let escaped = shownText(text)
        guard escaped.unicodeScalars.contains(where: { $0.properties.generalCategory == .format }) else { return escaped }
        var out = ""
        for scalar in escaped.unicodeScalars {
            if scalar.properties.generalCategory == .format {
                out += "\\u{" + String(scalar.value, radix: 16) + "}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// `12.5`, `4.2k`, `1.3M`; `-` without a rate.
    static func rate(_ value: Double?) -> String {
        guard let value, value.isFinite, value >= 0 else { return "-" }
        switch value {
        case ..<1000: return String(format: "%.1f", value)
        case ..<1e6: return String(format: "%.1fk", value / 1e3)
        case ..<1e9: return String(format: "%.1fM", value / 1e6)
        default: return String(format: "%.1fG", value / 1e9)
        }
    }

    /// `42s`, `5m03s`, `2h05m`, `3d04h`; `?` for what is not a time.
    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0, seconds < 1e12 else { return "?" }
        let s = Int64(seconds)
        switch s {
        case ..<60: return "\(s)s"
        case ..<3600: return "\(s / 60)m\(pad(s % 60))s"
        case ..<86400: return "\(s / 3600)h\(pad(s % 3600 / 60))m"
        default: return "\(s / 86400)d\(pad(s % 86400 / 3600))h"
        }
    }

    private static func pad(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
}

extension UInt64 {
    fileprivate func addingSaturating(_ other: UInt64) -> UInt64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? .max : sum
    }
}

extension String {
    fileprivate func trimmingTrailingSpaces() -> String {
        var s = Substring(self)
        while s.last == " " { s = s.dropLast() }
        return String(s)
    }
}
