import Foundation
import Logging
import VigilABI
import VigilCore

/// A swift-log handler writing one readable line per message to stderr or
/// stdout: `2026-11-21T21:50:29.123Z warning [vigil] message key=value`.
/// Lines are written whole with one `write(2)`, so concurrent loggers do not
/// interleave.
///
/// Under systemd, when the stream is the journal's (`JournalStream`), a line
/// is `<4>warning [vigil] message key=value`: the syslog priority that
/// sd-daemon.h defines, which the journal takes as the line's priority, and
/// no time (the journal stamps every line itself).
///
/// A line cannot be forged from inside: every control character in the
/// message, metadata and label (newline, carriage return, ESC and the ANSI
/// sequences it starts, DEL, the C1 controls) is written escaped (`\n`, `\r`,
/// `\t`, `\x1b`, `\u0085`: `shownText`), so the only line starts are the
/// ones this handler writes. A message longer than `maxMessageBytes` is cut,
/// and the cut says how much went (`… [cut 1040384 bytes]`).
///
/// What a plugin logs (`vigil_host_api.log`, metadata `plugin`) is told
/// apart from the host's own lines: it comes after the host-written
/// attribution `monitor=NAME plugin=NAME: `, and since it cannot hold a line
/// break it can never start a line of its own.
public struct VigilLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    private let label: String
    private let fd: Int32
    private let showLabel: Bool
    /// `<N>` first and no time: the stream is the journal.
    private let journal: Bool

    /// The longest message written whole, in bytes (UTF-8).
    /// A plugin's message arrives cut at 8 KiB already (`HostLimits`, in
    /// the host table) with a note of the cut: room is left for the note and
    /// the attribution, so that one message is never cut twice.
    public static let maxMessageBytes = HostLimits.logMessageBytes + 256

    /// `journal`: whether lines are written for the journal; by default,
    /// whether the descriptor is the stream `$JOURNAL_STREAM` names.
    public init(label: String, fileDescriptor: Int32 = 2, showLabel: Bool = true, journal: Bool? = nil) {
        self.label = label
        self.fd = fileDescriptor
        self.showLabel = showLabel
        self.journal = journal ?? JournalStream.isJournal(fileDescriptor)
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var line: [UInt8] = []
        line.reserveCapacity(160)
        if journal {
            line.append(contentsOf: "<\(VigilLogHandler.syslogPriority(event.level))>".utf8)
        } else {
            VigilLogHandler.appendTime(realtimeNanoseconds(), to: &line)
            line.append(UInt8(ascii: " "))
        }
        line.append(contentsOf: event.level.rawValue.utf8)  // swift-log names its levels: "trace" … "critical"
        if showLabel {
            line.append(contentsOf: " [".utf8)
            appendShownText(label, to: &line)
            line.append(UInt8(ascii: "]"))
        }
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        // Attribution first, in a fixed order: monitor, sink, then the plugin
        // that wrote the message (its text follows a colon).
        for key in ["monitor", "sink", "plugin"] {
            guard let value = merged[key] else { continue }
            line.append(UInt8(ascii: " "))
            line.append(contentsOf: key.utf8)
            line.append(UInt8(ascii: "="))
            appendShownText("\(value)", to: &line)
        }
        line.append(contentsOf: (merged["plugin"] != nil ? ": " : " ").utf8)
        Self.appendMessage("\(event.message)", to: &line)
        for key in merged.keys.sorted() where key != "monitor" && key != "sink" && key != "plugin" {
            line.append(UInt8(ascii: " "))
            appendShownText(key, to: &line)
            line.append(UInt8(ascii: "="))
            appendShownText("\(merged[key]!)", to: &line)
        }
        line.append(UInt8(ascii: "\n"))
        VigilLogHandler.writeAll(fd, line)
    }

    /// A message, escaped, cut to `maxMessageBytes` (at a character boundary)
    /// with the cut counted.
    static func appendMessage(_ message: String, to out: inout [UInt8]) {
        var message = message
        message.withUTF8 { bytes in
            guard bytes.count > maxMessageBytes else {
                appendShownText(bytes, to: &out)
                return
            }
            // Back up over UTF-8 continuation bytes: never half a character.
            var keep = maxMessageBytes
            while keep > 0 && bytes[keep] & 0xC0 == 0x80 { keep -= 1 }
            appendShownText(UnsafeBufferPointer(rebasing: bytes[..<keep]), to: &out)
            out.append(contentsOf: "… [cut \(bytes.count - keep) bytes]".utf8)
        }
    }

    /// sd-daemon.h's `SD_DEBUG` (7) … `SD_CRIT` (2); the journal reads a line's
    /// priority from this prefix.
    static func syslogPriority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// `2026-11-21T21:50:29.123Z`: milliseconds are enough for a log line.
    static func appendTime(_ ns: Int64, to out: inout [UInt8]) {
        var full: [UInt8] = []
        JSONLineEncoder.appendTimestamp(ns, to: &full)
        out.append(contentsOf: full.prefix(23))
        out.append(UInt8(ascii: "Z"))
    }

    static func writeAll(_ fd: Int32, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = Glibc.write(fd, raw.baseAddress! + offset, raw.count - offset)
                if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { return }
            }
        }
    }
}

/// Whether a descriptor is connected to the journal: systemd sets
/// `JOURNAL_STREAM=DEVICE:INODE` for a service whose stdout or stderr it
/// connected to journald, and the stream is the journal's only while the
/// descriptor still has that device and inode (a redirection, or a shell in
/// between, changes them). The same test sd_journal's clients make.
/// Checked once per process for stdout and stderr.
public enum JournalStream {
    static let stdout = matches(fd: 1, value: getenv("JOURNAL_STREAM").map { String(cString: $0) })
    static let stderr = matches(fd: 2, value: getenv("JOURNAL_STREAM").map { String(cString: $0) })

    public static func isJournal(_ fd: Int32) -> Bool {
        switch fd {
        case 1: stdout
        case 2: stderr
        default: matches(fd: fd, value: getenv("JOURNAL_STREAM").map { String(cString: $0) })
        }
    }

    /// `value` is `DEVICE:INODE`, both decimal; anything else matches nothing.
    static func matches(fd: Int32, value: String?) -> Bool {
        guard let value, let colon = value.firstIndex(of: ":"),
              let device = decimal(value[..<colon]), let inode = decimal(value[value.index(after: colon)...]) else { return false }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        return UInt64(st.st_dev) == device && UInt64(st.st_ino) == inode
    }

    private static func decimal(_ text: Substring) -> UInt64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return UInt64(text)
    }
}

/// Sets up swift-log for the `vigil` process: every logger writes through
/// `VigilLogHandler` to stderr at `level`.
public enum HostLogging {
    public static func bootstrap(level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            var handler = VigilLogHandler(label: label)
            handler.logLevel = level
            return handler
        }
    }
}
