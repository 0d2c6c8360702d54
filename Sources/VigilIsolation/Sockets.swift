import CVigilSys
import Foundation
import Logging
import VigilABI
import VigilCore

/// A thin layer over the BSD socket calls the sinks and `vigil tail` need.
public enum Sockets {
    public struct Failure: Error, CustomStringConvertible {
        public var what: String
        public var code: Int32
        public var description: String { "\(what): \(String(cString: strerror(code)))" }

        public init(what: String, code: Int32) {
            self.what = what
            self.code = code
        }
    }

    /// A connected socket for `address`: a stream for unix and tcp, a connected
    /// datagram socket for udp, and for unix with `unixDatagram` (syslog's
    /// /dev/log). Blocking, close-on-exec.
    public static func connect(_ address: SocketAddress, timeoutMs: Int32 = 5000, unixDatagram: Bool = false) throws -> Int32 {
        switch address {
        case .unix(let path):
            let type = unixDatagram ? SOCK_DGRAM : SOCK_STREAM
            let fd = socket(AF_UNIX, Int32(type.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw Failure(what: "socket", code: errno) }
            var addr = try unixAddress(path)
            let rc = withUnsafePointer(to: &addr) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            if rc != 0 {
                let e = errno
                close(fd)
                throw Failure(what: "connect to unix:\(path)", code: e)
            }
            return fd
        case .tcp(let host, let port), .udp(let host, let port):
            let isTCP: Bool = if case .tcp = address { true } else { false }
            return try withAddresses(host: host, port: port, stream: isTCP) { info in
                let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), info.pointee.ai_protocol)
                guard fd >= 0 else { throw Failure(what: "socket", code: errno) }
                if isTCP {
                    // Connect with a timeout: non-blocking connect, then poll.
                    setNonBlocking(fd, true)
                    var rc = Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
                    if rc != 0 && errno == EINPROGRESS {
                        var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                        rc = poll(&pfd, 1, timeoutMs) == 1 ? 0 : -1
                        var err: Int32 = rc == 0 ? 0 : ETIMEDOUT
                        var len = socklen_t(MemoryLayout<Int32>.size)
                        if rc == 0 { getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) }
                        if err != 0 { close(fd); throw Failure(what: "connect to \(address)", code: err) }
                    } else if rc != 0 {
                        let e = errno
                        close(fd)
                        throw Failure(what: "connect to \(address)", code: e)
                    }
                    setNonBlocking(fd, false)
                    if isConnectedToItself(fd) {
                        // Nobody listens on a local port in the ephemeral range, and the
                        // kernel chose that very port as ours: a TCP self-connect, which
                        // would swallow the events. It is a refusal.
                        close(fd)
                        throw Failure(what: "connect to \(address)", code: ECONNREFUSED)
                    }
                    var one: Int32 = 1
                    setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                } else if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) != 0 {
                    let e = errno
                    close(fd)
                    throw Failure(what: "connect to \(address)", code: e)
                }
                return fd
            }
        }
    }

    /// Whether a connected socket's local and peer addresses are the same.
    static func isConnectedToItself(_ fd: Int32) -> Bool {
        var local = sockaddr_storage(), peer = sockaddr_storage()
        var localLength = socklen_t(MemoryLayout<sockaddr_storage>.size), peerLength = localLength
        let ok = withUnsafeMutablePointer(to: &local) { l in
            withUnsafeMutablePointer(to: &peer) { p in
                l.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &localLength) } == 0
                    && p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &peerLength) } == 0
            }
        }
        return ok && localLength == peerLength && memcmp(&local, &peer, Int(localLength)) == 0
    }

    /// A listening stream socket. A unix socket file is created with mode
    /// 0600; a stale one (nobody listening) is replaced.
    public static func listen(_ address: SocketAddress, backlog: Int32 = 64) throws -> Int32 {
        switch address {
        case .unix(let path):
            _ = try unixAddress(path)  // the path fits
            var st = stat()
            if lstat(path, &st) == 0 {
                // Only a socket nobody listens on is replaced; any other file is left alone.
                guard st.st_mode & S_IFMT == S_IFSOCK else {
                    throw Failure(what: "listen on unix:\(path): a file that is not a socket is there; not touching it", code: EEXIST)
                }
                // A listener closed a moment ago may still answer: a child
                // between fork and exec holds copies of every descriptor until
                // its exec closes them (a runner being spawned while a reload
                // moves a sink's socket). Only one that answers for a second
                // is another process's.
                var answered = 0
                while let probe = try? connect(.unix(path: path)) {
                    close(probe)
                    answered += 1
                    guard answered < 20 else {
                        throw Failure(what: "listen on unix:\(path): another process is listening there", code: EADDRINUSE)
                    }
                    usleep(50_000)
                }
                unlink(path)
            }
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw Failure(what: "socket", code: errno) }
            _ = try? Paths.makeParentDirectories(of: path)
            // Bind inside a private directory, restrict the socket to 0600, then
            // move it into place: no moment where others can connect, and no
            // umask change (umask is process-wide and would race other threads).
            let parent = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
            var template = Array("\(parent.isEmpty ? "/" : parent)/.vigil-bind-XXXXXX".utf8CString)
            guard let tmp = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }).map({ String(cString: $0) }) else {
                let e = errno; close(fd); throw Failure(what: "bind unix:\(path): cannot make a private directory", code: e)
            }
            defer { rmdir(tmp) }
            // A staged path too long for sockaddr_un: bind in place, then restrict.
            let staging = (try? unixAddress(tmp + "/s")) != nil
            var target = try unixAddress(staging ? tmp + "/s" : path)
            let rc = withUnsafePointer(to: &target) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
            let bound = staging ? tmp + "/s" : path
            guard rc == 0, chmod(bound, 0o600) == 0 else {
                let e = errno; unlink(bound); close(fd); throw Failure(what: "bind unix:\(path)", code: e)
            }
            // Listening before the path appears: whoever sees the file (a
            // client waiting for the host, systemd) can connect at once,
            // where between the two it was refused (ECONNREFUSED).
            guard Glibc.listen(fd, backlog) == 0 else {
                let e = errno; unlink(bound); close(fd); throw Failure(what: "listen on unix:\(path)", code: e)
            }
            guard !staging || rename(bound, path) == 0 else {
                let e = errno; unlink(bound); close(fd); throw Failure(what: "bind unix:\(path)", code: e)
            }
            return fd
        case .tcp(let host, let port):
            return try withAddresses(host: host, port: port, stream: true, passive: true) { info in
                let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), info.pointee.ai_protocol)
                guard fd >= 0 else { throw Failure(what: "socket", code: errno) }
                var one: Int32 = 1
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
                guard bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 else {
                    let e = errno; close(fd); throw Failure(what: "bind \(address)", code: e)
                }
                guard Glibc.listen(fd, backlog) == 0 else { let e = errno; close(fd); throw Failure(what: "listen on \(address)", code: e) }
                return fd
            }
        case .udp:
            throw Failure(what: "listen on \(address): udp cannot listen", code: EINVAL)
        }
    }

    static func unixAddress(_ path: String) throws -> sockaddr_un {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        guard bytes.count < capacity else { throw Failure(what: "unix socket path '\(path)' is too long", code: ENAMETOOLONG) }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return addr
    }

    /// Tries each address `host:port` resolves to until `body` succeeds.
    static func withAddresses(host: String, port: UInt16, stream: Bool, passive: Bool = false,
                              _ body: (UnsafeMutablePointer<addrinfo>) throws -> Int32) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = stream ? Int32(SOCK_STREAM.rawValue) : Int32(SOCK_DGRAM.rawValue)
        hints.ai_flags = passive ? AI_PASSIVE : 0
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host == "*" ? nil : host, String(port), &hints, &list)
        guard rc == 0, let first = list else {
            throw Failure(what: "resolve '\(host)': \(String(cString: gai_strerror(rc)))", code: EHOSTUNREACH)
        }
        defer { freeaddrinfo(list) }
        var lastError: (any Error)?
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let info = cursor {
            do { return try body(info) } catch { lastError = error }
            cursor = info.pointee.ai_next
        }
        throw lastError ?? Failure(what: "no address for '\(host)'", code: EHOSTUNREACH)
    }

    /// The next connection on `listener`, close-on-exec from the start
    /// (`accept4(SOCK_CLOEXEC)`), so a child spawned meanwhile cannot hold
    /// it open; -1 with errno set, as accept(2).
    package static func accept(_ listener: Int32) -> Int32 { vigil_accept_cloexec(listener) }

    package static func setNonBlocking(_ fd: Int32, _ on: Bool) {
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, on ? flags | O_NONBLOCK : flags & ~O_NONBLOCK)
    }

    /// Sends all of `bytes` on a blocking socket without raising SIGPIPE.
    static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        var offset = 0
        while offset < bytes.count {
            let n = send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL))
            if n > 0 { offset += n; continue }
            if n < 0 && errno == EINTR { continue }
            throw Failure(what: "send", code: n == 0 ? EPIPE : errno)
        }
    }
}
