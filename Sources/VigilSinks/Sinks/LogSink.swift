import Foundation
import Logging
import Synchronization
import SystemPackage
import VigilABI
import VigilCore

/// One readable line per event through swift-log (text), or JSON Lines, on
/// stderr or stdout.
package final class LogSink: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread only
    private let config: LogSinkConfig
    private var encoder: JSONLineEncoder
    private var logger: Logger
    private var buffer: [UInt8] = []

    init(config: LogSinkConfig, host: String) {
        self.config = config
        self.encoder = JSONLineEncoder(host: host)
        let fd: Int32 = config.stream == .stdout ? 1 : 2
        var logger = Logger(label: "events") { label in VigilLogHandler(label: label, fileDescriptor: fd, showLabel: false) }
        logger.logLevel = .trace
        self.logger = logger
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        switch config.format {
        case .json:
            // The host's own log lines share this stream. Writes of at most
            // PIPE_BUF bytes, cut at line ends, are atomic on a pipe, so a host
            // line never lands inside an event line.
            let fd = FileDescriptor(rawValue: config.stream == .stdout ? 1 : 2)
            buffer.removeAll(keepingCapacity: true)
            for event in batch {
                let before = buffer.count
                encoder.encode(event, into: &buffer)
                if buffer.count > Int(PIPE_BUF) && before > 0 {
                    try fd.writeAll(buffer[..<before])
                    buffer.removeFirst(before)
                }
            }
            try fd.writeAll(buffer)
        case .text:
            for event in batch {
                logger.log(level: event.severity.logLevel, "\(LogSink.text(event))")
            }
        }
    }

    /// `cpu/sample usage=0.12 user=0.08 message="two words"`
    package static func text(_ event: Event) -> String {
        var s = "\(event.monitor)/\(event.kind)"
        for field in event.fields {
            s += " \(field.name)="
            switch field.value {
            case .double(let d): s += readable(d)
            case .int(let i): s += "\(i)"
            case .bool(let b): s += b ? "true" : "false"
            case .string(let str):
                if str.isEmpty || str.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline || $0.asciiValue.map { $0 < 0x20 } == true }) {
                    var quoted: [UInt8] = []
                    JSONLineEncoder.appendString(str, to: &quoted)
                    s += String(decoding: quoted, as: UTF8.self)
                } else {
                    s += str
                }
            }
        }
        return s
    }

    /// A double as a person reads it in a log line: six significant digits,
    /// without trailing zeros (0.601520, not 0.6015195397151164); an exponent
    /// only below 0.0001 or from 10^15 on; nan and inf as such. The JSON
    /// format and the other sinks keep every digit.
    package static func readable(_ d: Double) -> String {
        guard d.isFinite else { return "\(d)" }
        if d == 0 { return "0" }
        let magnitude = abs(d)
        if magnitude < 1e-4 || magnitude >= 1e15 { return String(format: "%.6g", d) }
        let whole = Int(log10(magnitude).rounded(.down)) + 1  // digits before the point; ≤ 0 below 1
        var text = String(format: "%.\(max(0, 6 - whole))f", d)
        if text.contains(".") {
            while text.hasSuffix("0") { text.removeLast() }
            if text.hasSuffix(".") { text.removeLast() }
        }
        return text
    }

    package func shutdown(context: SinkContext) {}
}

/// `type: log`: `stream: stderr | stdout`, `format: text | json`.
package struct LogSinkConfig: Sendable {
    package enum Stream: String, Sendable, CaseIterable { case stderr, stdout }
    package enum Format: String, Sendable, CaseIterable { case text, json }
    package var stream: Stream = .stderr
    package var format: Format = .text
    package init() {}
}

extension LogSinkConfig: SinkType {
    package static let type = "log"
    package static let keys = ["stream", "format"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> LogSinkConfig? {
        let keys = sink.keys
        var config = LogSinkConfig()
        if let stream = keys["stream"] {
            config.stream = d.choice(stream, what: "'stream'", of: LogSinkConfig.Stream.self) ?? .stderr
        }
        if let format = keys["format"] {
            config.format = d.choice(format, what: "'format'", of: LogSinkConfig.Format.self) ?? .text
        }
        return config
    }

    package func makeSink(_ build: SinkBuild) -> any EventSink { LogSink(config: self, host: build.host) }
}
