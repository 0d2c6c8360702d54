import Foundation
import NIOHTTP1
import Synchronization
import VigilCore

/// What the sinks that post to an HTTP endpoint share (`otlp`,
/// `remote_write`): the endpoint's form, the headers a manifest adds, the
/// credentials sent with each request, how long to wait when an answer asks
/// for a retry, and how a server's words are shown in the log.
package enum HTTPPosting {
    /// `http://HOST[:PORT][/PATH]`: plain http (no TLS in this build).
    package struct Endpoint: Sendable, Equatable {
        package var host: String
        package var port: UInt16
        /// Without a trailing `/` ("" for none).
        package var path: String

        /// As the log shows it.
        package var shown: String { "http://\(host.contains(":") ? "[\(host)]" : host):\(port)\(path)" }
    }

    /// `text` as an endpoint, `defaultPort` when it names none; why not when it is not one.
    package static func parse(_ text: String, defaultPort: UInt16) -> Result<Endpoint, EndpointError> {
        if text.hasPrefix("https://") { return .failure(.https) }
        guard text.hasPrefix("http://") else { return .failure(.scheme) }
        var rest = Substring(text.dropFirst(7))
        var path = ""
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        while path.hasSuffix("/") { path.removeLast() }
        // Printable ASCII only (a request line carries it as it is; percent-encode the rest).
        if path.utf8.contains(where: { $0 < 0x21 || $0 >= 0x7F || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) {
            return .failure(.path)
        }
        // user:password@host is not taken: credentials go in their own keys, never in a URL that is logged.
        if rest.contains("@") { return .failure(.host) }
        var host = rest
        var port = defaultPort
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(.host) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = UInt16(after.dropFirst()), p > 0 else { return .failure(.port) }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            let digits = rest[rest.index(after: colon)...]
            guard digits.allSatisfy({ $0 >= "0" && $0 <= "9" }), let p = UInt16(digits), p > 0 else { return .failure(.port) }
            port = p
        }
        // A name (letters, digits, '-', '.', '_') or an address; IPv6 in brackets.
        let bracketed = rest.hasPrefix("[")
        guard !host.isEmpty, host.count <= 253, host.utf8.allSatisfy({ b in
            (b >= 0x30 && b <= 0x39) || (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
                || b == UInt8(ascii: "_") || (bracketed && (b == UInt8(ascii: ":") || b == UInt8(ascii: "%")))
        }) else { return .failure(.host) }
        return .success(Endpoint(host: String(host), port: port, path: path))
    }

    package enum EndpointError: Error, CustomStringConvertible {
        case https, scheme, host, port, path
        package var description: String {
            switch self {
            case .https: "https is not supported by this build (no TLS library): send to a receiver on loopback or through a TLS-terminating proxy"
            case .scheme: "an endpoint is http://HOST[:PORT][/PATH]"
            case .host: "the endpoint has no host (credentials go in basic_auth or headers, not in the URL)"
            case .port: "the endpoint's port is not 1-65535"
            case .path: "the endpoint's path may not hold a query, a fragment, spaces or characters other than printable ASCII (percent-encode them)"
            }
        }
    }

    /// The headers every request sends that a manifest may not set: the
    /// sink writes them itself, and a second one makes a request receivers refuse.
    static let ownHeaders = ["content-length", "content-type", "content-encoding", "transfer-encoding", "host", "connection"]

    /// A sink's `headers:` (a mapping of names to values): each name an
    /// RFC 9110 token, none the sink's own, each value printable ASCII.
    /// `own` adds names the sink sets itself (`x-prometheus-remote-write-version`).
    package static func readHeaders(_ n: ConfigNode, own: [String] = [], ownHint: String, example: String,
                                    _ d: inout Diags) -> [(String, String)] {
        guard case .mapping(let entries, _) = n else {
            d.error(n.location, "'headers' must be a mapping of names to values, not \(n.kindName)", hint: example)
            return []
        }
        var headers: [(String, String)] = []
        for entry in entries {
            let key = entry.key.text
            let tokenOK = !key.isEmpty && key.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "!#$%&'*+-.^_`|~".utf8.contains(b)
            }
            guard tokenOK else {
                d.error(entry.key.location, "\(ManifestLoader.shown(key)) is not an HTTP header name")
                continue
            }
            guard !(ownHeaders + own).contains(key.lowercased()) else {
                d.error(entry.key.location, "header '\(key)' is the sink's own to set", hint: ownHint)
                continue
            }
            guard let value = d.string(entry.value, what: "header '\(key)'") else { continue }
            if value.utf8.contains(where: { $0 < 0x20 && $0 != 0x09 || $0 >= 0x7F }) {
                d.error(entry.value.location, "header '\(key)' must be printable ASCII (a line break, a control character or non-ASCII text cannot be sent as is)")
                continue
            }
            headers.append((key, value))
        }
        return headers
    }

    /// The wait an answer's `Retry-After` asks for (seconds, or an HTTP
    /// date), at most ten minutes; nil when it has none that reads.
    package static func retryAfter(_ headers: HTTPHeaders?) -> Int64? {
        guard let value = headers?["Retry-After"].first?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        var seconds: Double?
        if let n = Int64(value), n >= 0 { seconds = Double(n) }
        else if let date = httpDate(value) { seconds = max(0, date.timeIntervalSinceNow) }
        return seconds.map { Int64(min($0, 600) * 1e9) }
    }

    /// An IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`).
    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text)
    }

    /// A server's words for the log: at most 300 characters, on one line.
    package static func shown(_ bytes: [UInt8]) -> String {
        var text = String(decoding: bytes.prefix(300), as: UTF8.self)
        text = String(text.map { $0.isNewline ? " " : $0 })
        return bytes.count > 300 ? text + "…" : text
    }

    /// A server's answer's first line, for the log (a receiver's reason
    /// for refusing a request is on it: "out of order sample", "too old").
    package static func firstLine(_ bytes: [UInt8]) -> String {
        let line = bytes.prefix { $0 != UInt8(ascii: "\n") && $0 != UInt8(ascii: "\r") }
        return shown(Array(line)) + (line.count < bytes.count && line.count <= 300 ? " …" : "")
    }
}

/// `basic_auth:` or `bearer_token_file:` of a sink that posts: the
/// `Authorization` header each request sends. A password or token kept in
/// a file is read again when the file changes (a rotated token is used
/// from the next request on), never logged.
package struct HTTPCredentials: Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        case basic(username: String, password: String?, passwordFile: String?)
        case bearerFile(String)
    }

    package var kind: Kind

    package init(_ kind: Kind) { self.kind = kind }

    /// The files it reads, for `preflight`.
    package var files: [(key: String, path: String)] {
        switch kind {
        case .basic(_, _, let file?): [("basic_auth.password_file", file)]
        case .basic: []
        case .bearerFile(let path): [("bearer_token_file", path)]
        }
    }

    /// Reads `basic_auth` (`username`, and `password` or `password_file`)
    /// and `bearer_token_file` from a sink's keys: one of them at most, and
    /// neither beside an `Authorization` in `headers`.
    package static func read(_ keys: Keys, headers: [(String, String)], _ d: inout Diags) -> HTTPCredentials? {
        var found: HTTPCredentials?
        var at: SourceLocation?
        if let n = keys["basic_auth"],
           let b = Keys(nested: n, what: "'basic_auth'", of: keys.context, known: ["username", "password", "password_file"],
                        example: "basic_auth: { username: vigil, password_file: /etc/vigil/central.password }", &d) {
            at = n.location
            let username = b["username"].flatMap { d.string($0, what: "'basic_auth.username'") }
            let password = b["password"].flatMap { d.string($0, what: "'basic_auth.password'") }
            let file = b["password_file"].flatMap { d.string($0, what: "'basic_auth.password_file'") }
            if let username {
                if username.contains(":") || username.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
                    d.error(b["username"]!.location, "'basic_auth.username' may not hold ':' or control characters (RFC 7617)")
                } else if password != nil && file != nil {
                    d.error(n.location, "'basic_auth' has both 'password' and 'password_file': give one")
                } else {
                    found = HTTPCredentials(.basic(username: username, password: password, passwordFile: file))
                }
            } else if b["username"] == nil {
                d.error(n.location, "'basic_auth' needs 'username'", hint: "basic_auth: { username: vigil, password_file: /etc/vigil/central.password }")
            }
        }
        if let n = keys["bearer_token_file"], let path = d.string(n, what: "'bearer_token_file'") {
            if found != nil || at != nil {
                d.error(n.location, "'bearer_token_file' and 'basic_auth' both set the Authorization header: give one")
            } else if path.isEmpty {
                d.error(n.location, "'bearer_token_file' is empty")
            } else {
                found = HTTPCredentials(.bearerFile(path))
                at = n.location
            }
        }
        if let at, headers.contains(where: { $0.0.lowercased() == "authorization" }) {
            d.error(at, "'headers' has an Authorization already: give the credentials one way")
        }
        return found
    }

    /// What is wrong with its files now (unreadable, empty), for `preflight`.
    package func problems() -> [(key: String, problem: String)] {
        files.compactMap { key, path in
            do {
                _ = try HTTPCredentialReader.readSecret(path)
                return nil
            } catch {
                return (key, "\(error)")
            }
        }
    }
}

/// Makes the `Authorization` header of `HTTPCredentials` for each request,
/// reading a file again only when its size or modification time changed.
/// Used by one sender at a time (each of a sink's shards has its own).
package final class HTTPCredentialReader: @unchecked Sendable {  // one thread at a time: its sender's
    let credentials: HTTPCredentials?
    private var cached: (stamp: [Int64], value: String)?

    package init(_ credentials: HTTPCredentials?) { self.credentials = credentials }

    package struct Failure: Error, CustomStringConvertible {
        package let description: String
    }

    /// The header's value; nil without credentials; thrown when a file
    /// cannot be read (the request is not sent without what was asked).
    package func authorization() throws -> String? {
        guard let credentials else { return nil }
        switch credentials.kind {
        case .basic(let user, let password?, _):
            return "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        case .basic(let user, nil, let file?):
            let password = try secret(file)
            return "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        case .basic(let user, nil, nil):
            return "Basic " + Data("\(user):".utf8).base64EncodedString()
        case .bearerFile(let path):
            return "Bearer " + (try secret(path))
        }
    }

    private func secret(_ path: String) throws -> String {
        var st = stat()
        guard stat(path, &st) == 0 else {
            throw Failure(description: "cannot read \(path): \(String(cString: strerror(errno)))")
        }
        guard st.st_mode & S_IFMT == S_IFREG else { throw Failure(description: "\(path) is not a regular file") }
        let stamp = [Int64(st.st_size), Int64(st.st_mtim.tv_sec), Int64(st.st_mtim.tv_nsec), Int64(st.st_ino)]
        if let cached, cached.stamp == stamp { return cached.value }
        let value = try Self.readSecret(path)
        cached = (stamp, value)
        return value
    }

    /// The file's first line, without its line break; refused when empty,
    /// larger than 64 KiB or not printable ASCII (it goes in a header).
    static func readSecret(_ path: String) throws -> String {
        // Opened without waiting (a FIFO would block the open until a
        // writer came) and read only if it is a regular file.
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(description: "cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            throw Failure(description: "\(path) is not a regular file")
        }
        var data: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while data.count <= 65_536 {
            let n = read(fd, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw Failure(description: "cannot read \(path): \(String(cString: strerror(errno)))") }
            if n == 0 { break }
            data += chunk[0..<n]
        }
        guard data.count <= 65_536 else { throw Failure(description: "\(path) is larger than 64KiB: not a secret") }
        let line = data.prefix { $0 != UInt8(ascii: "\n") && $0 != UInt8(ascii: "\r") }
        guard !line.isEmpty else { throw Failure(description: "\(path) is empty") }
        guard line.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else {
            throw Failure(description: "\(path) holds control characters or non-ASCII text, which a header cannot carry")
        }
        return String(decoding: line, as: UTF8.self)
    }
}
