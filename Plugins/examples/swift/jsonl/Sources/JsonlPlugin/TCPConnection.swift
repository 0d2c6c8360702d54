import Glibc

/// A TCP connection to a listener, in the few calls an output needs:
/// connect within a timeout, send all or say how much went, and notice a
/// peer that closed. Plain sockets: the plugin stays free of Foundation.
final class TCPConnection {
    private(set) var fd: Int32

    private init(fd: Int32) { self.fd = fd }

    deinit { close() }

    func close() {
        if fd >= 0 { _ = Glibc.close(fd) }
        fd = -1
    }

    /// Connects to the first address `host` resolves to that answers within
    /// `timeout`; sends give up after `timeout` too.
    static func connect(host: String, port: UInt16, timeout: Duration) throws(ConnectionError) -> TCPConnection {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        let resolved = getaddrinfo(host, String(port), &hints, &list)
        guard resolved == 0 else { throw ConnectionError("cannot resolve \(host): \(String(cString: gai_strerror(resolved)))") }
        defer { freeaddrinfo(list) }
        var last = ConnectionError("\(host) resolves to no address")
        var candidate = list
        while let a = candidate {
            candidate = a.pointee.ai_next
            do throws(ConnectionError) {
                return try connect(a.pointee, timeout: timeout)
            } catch {
                last = error
            }
        }
        throw last
    }

    private static func connect(_ a: addrinfo, timeout: Duration) throws(ConnectionError) -> TCPConnection {
        let fd = socket(a.ai_family, a.ai_socktype | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), a.ai_protocol)
        guard fd >= 0 else { throw ConnectionError(errno: errno) }
        let connection = TCPConnection(fd: fd)
        if Glibc.connect(fd, a.ai_addr, a.ai_addrlen) != 0 {
            guard errno == EINPROGRESS else { throw ConnectionError(errno: errno) }
            var p = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let ready = poll(&p, 1, Int32(clamping: milliseconds(timeout)))
            guard ready > 0 else { throw ConnectionError(ready == 0 ? "timed out" : String(cString: strerror(errno))) }
            var failure: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &failure, &length)
            guard failure == 0 else { throw ConnectionError(errno: failure) }
        }
        // Blocking from here on, each send bounded by the timeout.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        let ms = milliseconds(timeout)
        var limit = timeval(tv_sec: Int(ms / 1000), tv_usec: Int(ms % 1000) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var on: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
        return connection
    }

    /// Sends all of `bytes`; returns how many went, and why not all.
    func send(_ bytes: [UInt8]) -> (sent: Int, error: ConnectionError?) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                sent += n
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                let error = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                    ? ConnectionError("send timed out") : ConnectionError(errno: n < 0 ? errno : EPIPE)
                return (sent, error)
            }
        }
        return (sent, nil)
    }

    /// Whether the peer closed the connection: a send into a closed
    /// connection succeeds once, into the kernel's buffer, and is lost, so
    /// look before sending. A listener does not talk back; bytes it sends
    /// anyway are left unread.
    var peerClosed: Bool {
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
        if n == 0 { return true }
        return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR
    }

    private static func milliseconds(_ d: Duration) -> Int64 {
        let (s, atto) = d.components
        return s * 1000 + atto / 1_000_000_000_000_000
    }
}

/// Why a connection failed or broke, as a person reads it.
struct ConnectionError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) { self.description = description }
    init(errno code: Int32) { description = String(cString: strerror(code)) }
}
