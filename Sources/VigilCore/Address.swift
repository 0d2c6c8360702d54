/// A socket address as written in manifests and on the command line:
/// `unix:/run/vigil/events.sock`, `tcp://127.0.0.1:5170`, `tcp://[::1]:5170`,
/// `tcp://collector.example:5170`, `udp://127.0.0.1:8125`.
public enum SocketAddress: Sendable, Equatable, CustomStringConvertible {
    case unix(path: String)
    case tcp(host: String, port: UInt16)
    case udp(host: String, port: UInt16)

    public enum ParseError: Error, Equatable, CustomStringConvertible {
        case unknownScheme(String)
        case missingPath
        case missingPort
        case badPort(String)
        case missingHost
        /// A unix path longer than `sun_path` holds (its byte count).
        case pathTooLong(Int)

        public var description: String {
            switch self {
            case .unknownScheme(let s): "unknown scheme '\(s)'; use unix:/PATH, tcp://HOST:PORT or udp://HOST:PORT"
            case .missingPath: "unix: address needs a path, as in unix:/run/vigil/events.sock"
            case .pathTooLong(let n):
                "the unix socket path is \(n) bytes; the kernel takes at most \(ManifestLimits.maxUnixPathBytes) (sun_path); use a shorter path or a symlinked directory"
            case .missingPort: "address needs a port, as in tcp://127.0.0.1:5170"
            case .badPort(let p): "'\(p)' is not a port (1-65535)"
            case .missingHost: "address needs a host, as in tcp://127.0.0.1:5170"
            }
        }
    }

    public static func parse(_ text: String) throws(ParseError) -> SocketAddress {
        if text.hasPrefix("unix:") {
            var path = String(text.dropFirst(5))
            if path.hasPrefix("//") { path.removeFirst(2) }
            guard !path.isEmpty else { throw .missingPath }
            guard path.utf8.count <= ManifestLimits.maxUnixPathBytes else { throw .pathTooLong(path.utf8.count) }
            return .unix(path: path)
        }
        let isTCP = text.hasPrefix("tcp://")
        guard isTCP || text.hasPrefix("udp://") else {
            let scheme = text.split(separator: ":", maxSplits: 1).first.map(String.init) ?? text
            throw .unknownScheme(scheme)
        }
        let rest = text.dropFirst(6)
        let host: Substring
        let portText: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { throw .missingHost }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            guard after.hasPrefix(":") else { throw .missingPort }
            portText = after.dropFirst()
        } else {
            guard let colon = rest.lastIndex(of: ":") else { throw .missingPort }
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        }
        guard !host.isEmpty else { throw .missingHost }
        guard !portText.isEmpty else { throw .missingPort }
        guard let port = UInt16(portText), port > 0 else { throw .badPort(String(portText)) }
        return isTCP ? .tcp(host: String(host), port: port) : .udp(host: String(host), port: port)
    }

    public var description: String {
        switch self {
        case .unix(let path): "unix:\(path)"
        case .tcp(let host, let port): "tcp://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        case .udp(let host, let port): "udp://\(host.contains(":") ? "[\(host)]" : host):\(port)"
        }
    }
}
