import Foundation
import Logging
import VigilABI
import VigilCore

/// A swift-log handler writing one readable line per message to stderr or
/// stdout: `2026-11-21T21:50:29.123Z warning [vigil] message key=value`.
/// Lines are written whole with one `write(2)`, so concurrent loggers do not
/// interleave.
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

    /// The longest message written whole, in bytes (UTF-8).
    /// A plugin's message arrives cut at 8 KiB already (`HostLimits`, in
    /// the host table) with a note of the cut: room is left for the note and
    /// the attribution, so that one message is never cut twice.
    public static let maxMessageBytes = HostLimits.logMessageBytes + 256

    public init(label: String, fileDescriptor: Int32 = 2, showLabel: Bool = true) {
        self.label = label
        self.fd = fileDescriptor
        self.showLabel = showLabel
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var line: [UInt8] = []
        line.reserveCapacity(160)
        VigilLogHandler.appendTime(realtimeNanoseconds(), to: &line)
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: VigilLogHandler.levelName(event.level).utf8)
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

    static func levelName(_ level: Logger.Level) -> String {
        switch level {
        case .trace: "trace"
        case .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "critical"
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

extension Severity {
    var logLevel: Logger.Level {
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
