import Foundation
import Logging
import VigilABI
import VigilCore

/// A swift-log handler writing one readable line per message to stderr or
/// stdout: `2026-11-21T21:50:29.123Z warning [vigil] message key=value`.
/// Lines are written whole with one `write(2)`, so concurrent loggers do not
/// interleave.
public struct VigilLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    private let label: String
    private let fd: Int32
    private let showLabel: Bool

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
            line.append(contentsOf: label.utf8)
            line.append(UInt8(ascii: "]"))
        }
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        for key in merged.keys.sorted() where key == "monitor" || key == "sink" {
            line.append(contentsOf: " \(key)=\(merged[key]!)".utf8)
        }
        line.append(UInt8(ascii: " "))
        line.append(contentsOf: "\(event.message)".utf8)
        for key in merged.keys.sorted() where key != "monitor" && key != "sink" {
            line.append(contentsOf: " \(key)=\(merged[key]!)".utf8)
        }
        line.append(UInt8(ascii: "\n"))
        VigilLogHandler.writeAll(fd, line)
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
