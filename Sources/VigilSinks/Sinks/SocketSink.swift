import VigilCore

/// `type: socket`: JSON Lines to a peer it connects to (`connect:`, unix,
/// tcp or udp, reconnecting with backoff), or to every client of an address
/// it listens on (`listen:`, unix or tcp). The sinks are SocketConnectSink
/// and SocketListenSink.
package struct SocketSinkConfig: Sendable {
    package enum Mode: Sendable, Equatable {
        case connect(SocketAddress)
        case listen(SocketAddress)
    }
    package var mode: Mode
    /// First and largest wait between reconnection attempts (connect mode).
    package var reconnectMin: Int64 = 100_000_000
    package var reconnectMax: Int64 = 30_000_000_000
    /// Bytes a listening sink holds for one client before disconnecting it.
    package var clientBuffer: Int64 = 4 << 20
    /// Where the `connect` or `listen` address is written.
    package var addressLocation: SourceLocation?
    /// `buffer: { type: disk }` (connect only).
    package var buffer: SinkBufferConfig?
    package init(mode: Mode) { self.mode = mode }
}

extension SocketSinkConfig: SinkType, DiskBufferable {
    package static let type = "socket"
    package static let keys = ["connect", "listen", "retry_min", "retry_max", "reconnect_min", "reconnect_max", "client_buffer"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> SocketSinkConfig? {
        let keys = sink.keys, name = sink.name, at = sink.location
        let connect = keys["connect"], listen = keys["listen"]
        let mode: SocketSinkConfig.Mode
        switch (connect, listen) {
        case (nil, nil):
            d.error(at, "socket sink '\(name)' needs 'connect' or 'listen'",
                    hint: "connect: \"tcp://127.0.0.1:5170\" or listen: \"unix:/run/vigil/events.sock\"")
            return nil
        case (.some(let c), .some(let l)):
            d.error(l.location, "socket sink '\(name)' has both 'connect' (line \(c.location.line)) and 'listen'; use one sink for each")
            return nil
        case (.some(let node), nil):
            guard let address = d.address(node, what: "'connect'") else { return nil }
            mode = .connect(address)
        case (nil, .some(let node)):
            guard let address = d.address(node, what: "'listen'") else { return nil }
            if case .udp = address {
                d.error(node.location, "'listen' takes unix:/PATH or tcp://ADDR:PORT; udp is only for 'connect'")
                return nil
            }
            mode = .listen(address)
        }
        var config = SocketSinkConfig(mode: mode)
        config.addressLocation = (connect ?? listen)?.location
        ManifestLoader.backoff(keys, min: &config.reconnectMin, max: &config.reconnectMax, &d)
        if let n = keys["client_buffer"],
           let bytes = d.size(n, what: "'client_buffer'", atMost: ManifestLimits.maxClientBuffer, limitText: "1GiB (it is held in memory for each client)") {
            config.clientBuffer = max(bytes, 4096)
        }
        return config
    }

    package var diskBufferRefusal: String? {
        switch mode {
        case .listen:
            "a disk buffer is for sinks that connect over a stream and for output plugins; a listening socket's clients take events as they come"
        case .connect(.udp):
            "a disk buffer is for sinks that connect over a stream and for output plugins; over udp no peer says what it took"
        case .connect:
            nil
        }
    }

    package var exclusiveResources: [String] {
        guard case .listen(let address) = mode else { return [] }
        return ["listen address \(address)"]
    }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        switch mode {
        case .connect(let address):
            SocketConnectSink(address: address, config: self, framing: JSONLinesFraming(host: build.host))
        case .listen(let address):
            SocketListenSink(address: address, config: self, host: build.host)
        }
    }
}
