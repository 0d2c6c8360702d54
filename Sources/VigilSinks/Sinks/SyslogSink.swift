import Glibc
import VigilCore

/// `type: syslog`: RFC 5424 messages to a syslog daemon (`connect:` unix,
/// udp or tcp; octet counting on a stream), through SocketConnectSink with
/// the syslog framing.
package struct SyslogSinkConfig: Sendable {
    package var address: SocketAddress
    package var appName = "vigil"
    package var facility: SyslogEncoder.Facility = .daemon
    /// The longest message sent; longer ones are cut (counted). nil: the
    /// transport's (`defaultMaxMessageSize`).
    package var maxMessageSize: Int?
    package var reconnectMin: Int64 = 100_000_000
    package var reconnectMax: Int64 = 30_000_000_000
    package var addressLocation: SourceLocation?
    package var buffer: SinkBufferConfig?

    package init(address: SocketAddress) { self.address = address }

    /// 2048 over UDP (RFC 5426 asks receivers for that much, no more), 8 KiB
    /// on a stream or /dev/log (rsyslog's and syslog-ng's default).
    package var effectiveMaxMessageSize: Int {
        if let maxMessageSize { return maxMessageSize }
        if case .udp = address { return 2048 }
        return 8192
    }
}

extension SyslogSinkConfig: SinkType, DiskBufferable {
    package static let type = "syslog"
    package static let keys = ["connect", "app_name", "facility", "max_message_size", "retry_min", "retry_max", "reconnect_min",
                               "reconnect_max"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> SyslogSinkConfig? {
        let keys = sink.keys, name = sink.name, at = sink.location
        guard let node = keys["connect"] else {
            d.error(at, "syslog sink '\(name)' needs 'connect'",
                    hint: "connect: \"unix:/dev/log\", \"udp://127.0.0.1:514\" or \"tcp://logs.example:601\"")
            return nil
        }
        guard let address = d.address(node, what: "'connect'") else { return nil }
        var config = SyslogSinkConfig(address: address)
        config.addressLocation = node.location
        if let n = keys["app_name"], let text = d.string(n, what: "'app_name'") {
            if text.isEmpty || text.utf8.count > 48 || !text.utf8.allSatisfy({ $0 >= 33 && $0 <= 126 }) {
                d.error(n.location, "'app_name' must be 1 to 48 printable ASCII characters without spaces (RFC 5424's APP-NAME), not '\(text)'")
            } else {
                config.appName = text
            }
        }
        if let n = keys["facility"], let text = d.string(n, what: "'facility'") {
            if let facility = SyslogEncoder.Facility.named(text) {
                config.facility = facility
            } else {
                let names = SyslogEncoder.Facility.allCases.map { "\($0)" }
                d.error(n.location, "'facility' must be one of \(names.joined(separator: ", ")), not '\(text)'",
                        hint: Suggest.hint(for: text, in: names))
            }
        }
        if let n = keys["max_message_size"],
           let bytes = d.size(n, what: "'max_message_size'", atMost: 1 << 20, limitText: "1MiB") {
            if bytes < Int64(SyslogEncoder.minimumSize) {
                d.error(n.location, "'max_message_size' must be at least \(SyslogEncoder.minimumSize) bytes (RFC 5424's least), not \(bytes)")
            } else if case .udp = address, bytes > 65_507 {
                d.error(n.location, "'max_message_size' over UDP is at most 65507 bytes (one datagram), not \(bytes)")
            } else {
                config.maxMessageSize = Int(bytes)
            }
        }
        ManifestLoader.backoff(keys, min: &config.reconnectMin, max: &config.reconnectMax, &d)
        return config
    }

    package var diskBufferRefusal: String? {
        if case .tcp = address { return nil }
        return "a disk buffer is for sinks that connect over a stream and for output plugins; syslog over unix datagrams or udp takes no acknowledgement"
    }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        var socket = SocketSinkConfig(mode: .connect(address))
        socket.reconnectMin = reconnectMin
        socket.reconnectMax = reconnectMax
        let stream: Bool = if case .tcp = address { true } else { false }
        let encoder = SyslogEncoder(facility: facility, appName: appName, host: build.host, procID: getpid(),
                                    maxSize: effectiveMaxMessageSize)
        return SocketConnectSink(address: address, config: socket, framing: SyslogFraming(encoder: encoder, octetCounting: stream),
                                 unixDatagram: !stream)
    }
}
