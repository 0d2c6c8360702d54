import Foundation
import VigilABI

/// The control API over TCP (`vigil run --control-tcp tcp://127.0.0.1:PORT`),
/// besides the unix socket: the same API, the same connection limits, and a
/// bearer token on every request, read from a file only its owner may read.
/// Plain HTTP, no TLS: a loopback address is the default and the only one
/// taken without `--control-tcp-allow-remote`.

/// `tcp://HOST:PORT`: HOST an IPv4 address, an IPv6 address in brackets, or
/// `localhost` (127.0.0.1); never a name to resolve. PORT 1…65535, or 0 for
/// a listener (the kernel picks one; the log says which).
public struct ControlTCPAddress: Sendable, Equatable, CustomStringConvertible {
    /// The address as an IP literal (`127.0.0.1`, `::1`).
    public var host: String
    public var port: Int

    public init(parsing text: String, allowPortZero: Bool = false) throws {
        guard text.hasPrefix("tcp://") else { throw ControlError("a TCP control address is tcp://HOST:PORT, not '\(text)'") }
        let rest = text.dropFirst(6)
        let hostPart: Substring, portPart: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]"), rest[rest.index(after: close)...].hasPrefix(":") else {
                throw ControlError("'\(text)': an IPv6 address is written in brackets, with the port after: tcp://[::1]:7070")
            }
            hostPart = rest[rest.index(after: rest.startIndex)..<close]
            portPart = rest[rest.index(close, offsetBy: 2)...]
        } else {
            guard let colon = rest.lastIndex(of: ":") else { throw ControlError("'\(text)' has no port: tcp://HOST:PORT") }
            hostPart = rest[..<colon]
            portPart = rest[rest.index(after: colon)...]
        }
        guard !portPart.isEmpty, portPart.count <= 5, portPart.allSatisfy({ $0.isASCII && $0.isNumber }),
              let port = Int(portPart), port <= 65535, port > 0 || allowPortZero else {
            throw ControlError("'\(text)': the port must be a number from 1 to 65535\(allowPortZero ? " (or 0: any free port)" : "")")
        }
        let host = hostPart == "localhost" ? "127.0.0.1" : String(hostPart)
        guard Self.family(of: host) != nil else {
            throw ControlError("'\(text)': '\(hostPart)' is not an IP address (IPv4, [IPv6], or localhost); names are not resolved")
        }
        self.host = host
        self.port = port
    }

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    static func family(of host: String) -> Int32? {
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return AF_INET }
        if inet_pton(AF_INET6, host, &v6) == 1 { return AF_INET6 }
        return nil
    }

    /// 127.0.0.0/8, ::1, and ::ffff:127.0.0.0/104: only this machine reaches it.
    public var isLoopback: Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: &v6) { Array($0) }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
        return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
    }

    public var description: String { host.contains(":") ? "tcp://[\(host)]:\(port)" : "tcp://\(host):\(port)" }
}

/// A bearer token: 16 to 1024 visible ASCII characters (0x21…0x7E). Held
/// as bytes and compared in time that depends on its own length only.
public struct ControlToken: Sendable {
    static let minLength = 16
    static let maxLength = 1024
    /// The most bytes read of a token file.
    static let maxFileBytes = 4096

    let bytes: [UInt8]
    /// The token as sent (visible ASCII).
    package var text: String { String(decoding: bytes, as: UTF8.self) }

    public init(_ text: String, from source: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let bytes = Array(trimmed.utf8)
        guard !bytes.isEmpty else { throw ControlError("\(source): the token is empty") }
        guard bytes.allSatisfy({ $0 >= 0x21 && $0 <= 0x7E }) else {
            throw ControlError("\(source): a token is visible ASCII characters (no spaces, no control characters) on one line")
        }
        guard bytes.count >= Self.minLength, bytes.count <= Self.maxLength else {
            throw ControlError("\(source): the token is \(bytes.count) characters; it must have \(Self.minLength) to \(Self.maxLength)")
        }
        self.bytes = bytes
    }

    /// Whether `header`, an Authorization header's value, is `Bearer TOKEN`
    /// with this token. The scheme's case does not matter (RFC 6750).
    public func accepts(header: String) -> Bool {
        let value = Array(header.utf8)
        guard value.count >= 7, String(decoding: value[0..<6], as: UTF8.self).lowercased() == "bearer", value[6] == 0x20 else {
            return false
        }
        var given = value[7...]
        while given.first == 0x20 { given = given.dropFirst() }
        while given.last == 0x20 || given.last == 0x09 { given = given.dropLast() }
        return matches(Array(given))
    }

    /// Constant time in `given`'s content: every byte of the token is
    /// compared whatever differs first.
    func matches(_ given: [UInt8]) -> Bool {
        var difference: UInt8 = given.count == bytes.count ? 0 : 1
        for i in 0..<bytes.count {
            difference |= bytes[i] ^ (i < given.count ? given[i] : 0)
        }
        return difference == 0
    }

    /// The token in `path`, which must be a regular file of this user (or
    /// root) that neither group nor others may read or write. With
    /// `create`, a missing file is made (mode 0600) with a new random token,
    /// and `created` says so.
    public static func load(path: String, create: Bool = false) throws -> (token: ControlToken, created: Bool) {
        // O_NONBLOCK: a FIFO in its place must not hang the start; it is refused below.
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        if fd < 0 && errno == ENOENT && create { return (try generate(into: path), true) }
        guard fd >= 0 else {
            let why = errno == ELOOP ? "it is a symbolic link" : String(cString: strerror(errno))
            throw ControlError("token file \(path): cannot open it: \(why)")
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ControlError("token file \(path): \(String(cString: strerror(errno)))") }
        guard st.st_mode & S_IFMT == S_IFREG else { throw ControlError("token file \(path): not a regular file") }
        guard st.st_mode & 0o077 == 0 else {
            throw ControlError("token file \(path): group or others may read or write it (mode \(String(st.st_mode & 0o777, radix: 8))); the token is a password: chmod 600 \(path)")
        }
        guard st.st_uid == geteuid() || st.st_uid == 0 else {
            throw ControlError("token file \(path): owned by uid \(st.st_uid), not by this user (\(geteuid())) or root")
        }
        var buffer = [UInt8](repeating: 0, count: maxFileBytes + 1)
        var count = 0
        while count < buffer.count {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n > 0 { count += n } else if n < 0 && errno == EINTR { continue } else { break }
        }
        guard count <= maxFileBytes else { throw ControlError("token file \(path): larger than \(maxFileBytes) bytes; a token file holds one token") }
        return (try ControlToken(String(decoding: buffer[0..<count], as: UTF8.self), from: "token file \(path)"), false)
    }

    /// 32 random bytes as 64 hex digits, written to a new file of mode 0600.
    static func generate(into path: String) throws -> ControlToken {
        // The system's generator: getrandom(2), cryptographically secure.
        var generator = SystemRandomNumberGenerator()
        let hex = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        // Its folder is made when missing (0700: the token's alone), as a
        // file sink makes its own: a first run names `.vigil/token` before
        // any sink has made `.vigil`.
        let folder = (path as NSString).deletingLastPathComponent
        if !folder.isEmpty, !FileManager.default.fileExists(atPath: folder) {
            try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ControlError("token file \(path): cannot create it: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let line = Array((hex + "\n").utf8)
        var written = 0
        while written < line.count {
            let n = line.withUnsafeBytes { write(fd, $0.baseAddress! + written, $0.count - written) }
            if n > 0 { written += n } else if n < 0 && errno == EINTR { continue } else {
                let why = String(cString: strerror(errno))
                unlink(path)
                throw ControlError("token file \(path): cannot write it: \(why)")
            }
        }
        guard fsync(fd) == 0 || errno == EINVAL else {
            let why = String(cString: strerror(errno))
            unlink(path)
            throw ControlError("token file \(path): cannot write it: \(why)")
        }
        return try ControlToken(hex, from: "token file \(path)")
    }
}

/// What `vigil run` serves on TCP: where, with which token, from which file.
public struct ControlTCPListener: Sendable {
    public var address: ControlTCPAddress
    public var token: ControlToken
    public var tokenFile: String

    /// Checks the address against `allowRemote` and loads (or creates) the token.
    public init(address: ControlTCPAddress, tokenFile: String, allowRemote: Bool, log: (String) -> Void) throws {
        guard address.isLoopback || allowRemote else {
            throw ControlError("--control-tcp \(address): not a loopback address, so other machines could reach the control API, in clear text (no TLS) with its token; add --control-tcp-allow-remote to mean it")
        }
        let (token, created) = try ControlToken.load(path: tokenFile, create: true)
        if created { log("control API token created in \(tokenFile) (mode 0600): give it to clients with --token-file \(tokenFile)") }
        self.address = address
        self.token = token
        self.tokenFile = tokenFile
    }
}
