import Foundation
import Logging
import VigilCore

/// A thin layer over the BSD socket calls the sinks and `vigil tail` need.
public enum Sockets {
    public struct Failure: Error, CustomStringConvertible {
        public var what: String
        public var code: Int32
        public var description: String { "\(what): \(String(cString: strerror(code)))" }
    }

    /// A connected socket for `address`: a stream for unix and tcp, a connected
    /// datagram socket for udp. Blocking, close-on-exec.
    public static func connect(_ address: SocketAddress, timeoutMs: Int32 = 5000) throws -> Int32 {
        switch address {
        case .unix(let path):
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
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
                if let probe = try? connect(.unix(path: path)) {
                    close(probe)
                    throw Failure(what: "listen on unix:\(path): another process is listening there", code: EADDRINUSE)
                }
                unlink(path)
            }
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw Failure(what: "socket", code: errno) }
            try? FileSink.makeParentDirectories(of: path)
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
            guard rc == 0, chmod(bound, 0o600) == 0, !staging || rename(bound, path) == 0 else {
                let e = errno; unlink(bound); close(fd); throw Failure(what: "bind unix:\(path)", code: e)
            }
            guard Glibc.listen(fd, backlog) == 0 else { let e = errno; close(fd); throw Failure(what: "listen on unix:\(path)", code: e) }
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

    static func setNonBlocking(_ fd: Int32, _ on: Bool) {
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

/// Streams JSON Lines to a peer it connects to (`unix:`, `tcp://`, `udp://`).
/// While the peer is away it reconnects with capped exponential backoff; the
/// events wait in the sink's queue (bounded by `queue_size`, then the
/// overflow policy) and in the batch being retried. Sends never block without
/// a deadline: a peer that stops reading is waited for in short steps, and
/// given up at shutdown after the drain timeout.
///
/// Delivery over a stream is at least once: after a broken connection the
/// batch is sent again from the start of the line that was cut, so a peer may
/// see a line it already had (the same `seq`), never half a line.
final class SocketConnectSink: EventSink, @unchecked Sendable {
    private let address: SocketAddress
    private let config: SocketSinkConfig
    private var encoder: JSONLineEncoder
    private var fd: Int32 = -1
    private var backoff: Int64
    private var nextAttempt: Int64 = 0
    private var buffer: [UInt8] = []
    private var loggedDown = false
    private var isDatagram: Bool { if case .udp = address { true } else { false } }

    init(address: SocketAddress, config: SocketSinkConfig, host: String) {
        self.address = address
        self.config = config
        self.encoder = JSONLineEncoder(host: host)
        self.backoff = config.reconnectMin
    }

    /// While connected, notice a peer that went away (once a second).
    var tickInterval: Int64 { fd >= 0 && !isDatagram ? 1_000_000_000 : SinkTicks.never }

    func write(_ batch: [Event], context: SinkContext) throws {
        buffer.removeAll(keepingCapacity: true)
        if isDatagram {
            try sendDatagrams(batch, context: context)
            return
        }
        for event in batch { encoder.encode(event, into: &buffer) }
        // A peer that closed while we were idle would swallow the first send
        // (the kernel takes it, then the connection resets): check first.
        dropIfPeerClosed()
        var offset = 0
        while offset < buffer.count {
            if fd < 0 { try waitForConnection(context: context) }
            do {
                try sendSome(from: &offset, context: context)
            } catch let error as Sockets.Failure where error.code == ETIMEDOUT {
                throw error  // given up at shutdown
            } catch {
                context.logger.warning("connection to \(address) lost: \(error); reconnecting")
                close(fd)
                fd = -1
                // Start again at the beginning of the line that was cut.
                offset = (buffer[..<offset].lastIndex(of: UInt8(ascii: "\n")).map { $0 + 1 }) ?? 0
            }
        }
    }

    /// Sends from `offset` until the buffer is out, waiting for the socket in
    /// short steps so a shutdown deadline is noticed.
    private func sendSome(from offset: inout Int, context: SinkContext) throws {
        try buffer.withUnsafeBytes { raw in
            while offset < raw.count {
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                if n > 0 { offset += n; continue }
                if n < 0 && errno == EINTR { continue }
                guard n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) else {
                    throw Sockets.Failure(what: "send", code: n == 0 ? EPIPE : errno)
                }
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                while poll(&pfd, 1, 100) == 0 {
                    if context.shouldAbandon {
                        throw Sockets.Failure(what: "gave up sending to \(address) at shutdown", code: ETIMEDOUT)
                    }
                    context.whileWaiting()
                }
            }
        }
    }

    private func sendDatagrams(_ batch: [Event], context: SinkContext) throws {
        if fd < 0 { try waitForConnection(context: context) }
        var failures = 0
        var firstError: Int32 = 0
        for event in batch {
            buffer.removeAll(keepingCapacity: true)
            encoder.encode(event, into: &buffer)
            // One event per datagram, never retried: UDP has no delivery guarantee.
            let n = buffer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                failures += 1
                if firstError == 0 { firstError = errno }
            }
        }
        if failures > 0 {
            context.countFailed(failures)
            context.logger.debug("\(failures) datagrams to \(address) not sent: \(String(cString: strerror(firstError)))")
        }
    }

    /// Blocks until connected, retrying with backoff; throws when the host is
    /// shutting down and the drain deadline has passed.
    private func waitForConnection(context: SinkContext) throws {
        while fd < 0 {
            if context.shouldAbandon {
                throw Sockets.Failure(what: "gave up on \(address) at shutdown", code: ETIMEDOUT)
            }
            let now = monotonicNanoseconds()
            if now >= nextAttempt {
                do {
                    fd = try Sockets.connect(address, timeoutMs: 2000)
                    Sockets.setNonBlocking(fd, true)
                    // Room for whole batches in the kernel: fewer stalls and
                    // wake-ups of the peer per batch (the kernel caps the size).
                    var size: Int32 = 4 << 20
                    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
                    if loggedDown { context.logger.notice("connected to \(address)") }
                    loggedDown = false
                    backoff = config.reconnectMin
                    return
                } catch {
                    if !loggedDown {
                        context.logger.warning("cannot connect to \(address): \(error); retrying with backoff up to \(Units.formatDuration(config.reconnectMax))")
                        loggedDown = true
                    }
                    // Both from the manifest: any Int64 saturates, never traps.
                    nextAttempt = monotonicNanoseconds().addingSaturating(max(0, backoff))
                    backoff = min(backoff.multipliedSaturating(by: 2), config.reconnectMax)
                }
            }
            context.whileWaiting()
            // Sleep in short steps so a shutdown is noticed promptly.
            let wait = max(1_000_000, min(nextAttempt.subtractingSaturating(monotonicNanoseconds()), 50_000_000))
            var ts = timespec(tv_sec: 0, tv_nsec: Int(wait))
            nanosleep(&ts, nil)
        }
    }

    func tick(context: SinkContext) {
        dropIfPeerClosed()
    }

    /// Closes the connection if the peer has closed its end (EOF or an error
    /// pending), so the next send goes to a new connection.
    private func dropIfPeerClosed() {
        guard fd >= 0, !isDatagram else { return }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        if poll(&pfd, 1, 0) == 1 {
            var scratch = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT))
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                close(fd)
                fd = -1
            }
        }
    }

    func shutdown(context: SinkContext) {
        if fd >= 0 { close(fd) }
        fd = -1
    }
}

/// Listens on `unix:` or `tcp://` and streams every routed event to each
/// connected client. A client that falls more than `client_buffer` bytes
/// behind is disconnected; the sink never waits for one.
final class SocketListenSink: EventSink, @unchecked Sendable {
    private struct Client {
        var fd: Int32
        var pending: [UInt8] = []
        var sent = 0
    }

    private let address: SocketAddress
    private let config: SocketSinkConfig
    private var encoder: JSONLineEncoder
    private var listener: Int32 = -1
    /// Device and inode of the socket file we bound, to remove only that one.
    private var boundNode: (dev_t, ino_t)?
    private var clients: [Client] = []
    private var buffer: [UInt8] = []
    private var lastBindAttempt: Int64 = 0
    private var loggedBindFailure = false

    /// Clients accepted by the accept thread, not yet taken by the sink's
    /// thread; and the function that wakes the sink's thread. Guarded by `lock`.
    private let lock = NSLockish()
    private var accepted: [Int32] = []
    private var wake: @Sendable () -> Void = {}
    private var acceptThread: Thread?
    private let acceptDone = DispatchSemaphore(value: 0)

    init(address: SocketAddress, config: SocketSinkConfig, host: String) {
        self.address = address
        self.config = config
        self.encoder = JSONLineEncoder(host: host)
    }

    /// Ticks only to retry a failed bind or to flush clients with data pending:
    /// an idle listening sink does not wake at all.
    var tickInterval: Int64 {
        if listener < 0 { return 5_000_000_000 }
        return clients.contains { $0.sent < $0.pending.count } ? 50_000_000 : SinkTicks.never
    }

    func attach(wake: @escaping @Sendable () -> Void) {
        lock.withLock { self.wake = wake }
    }

    /// Binds now, so a bad address is reported when the host starts.
    func bind(logger: Logger) {
        openListener(logger: logger)
    }

    private func openListener(logger: Logger) {
        guard listener < 0 else { return }
        lastBindAttempt = monotonicNanoseconds()
        do {
            listener = try Sockets.listen(address)
            if case .unix(let path) = address {
                var st = stat()
                if lstat(path, &st) == 0 { boundNode = (st.st_dev, st.st_ino) }
            }
            startAccepting(listener)
            if loggedBindFailure { logger.notice("listening on \(address)") }
            loggedBindFailure = false
        } catch {
            if !loggedBindFailure { logger.error("cannot listen on \(address): \(error); retrying every 5s") }
            loggedBindFailure = true
        }
    }

    func write(_ batch: [Event], context: SinkContext) throws {
        acceptClients(context: context)
        guard !clients.isEmpty else { return }
        buffer.removeAll(keepingCapacity: true)
        for event in batch { encoder.encode(event, into: &buffer) }
        for i in clients.indices {
            if clients[i].sent == clients[i].pending.count {
                clients[i].pending.removeAll(keepingCapacity: true)
                clients[i].sent = 0
            } else if clients[i].sent > 1 << 20 {
                clients[i].pending.removeFirst(clients[i].sent)
                clients[i].sent = 0
            }
            clients[i].pending.append(contentsOf: buffer)
        }
        flushClients(context: context)
        // What a client could not take now waits for it, up to client_buffer
        // bytes; past that it is cut off, never waited for.
        for i in clients.indices where clients[i].pending.count - clients[i].sent > Int(config.clientBuffer) {
            context.logger.warning("a client of \(address) fell \(clients[i].pending.count - clients[i].sent) bytes behind (client_buffer \(Units.formatSize(config.clientBuffer))); disconnecting it")
            close(clients[i].fd)
            clients[i].fd = -1
        }
        clients.removeAll { $0.fd < 0 }
    }

    func tick(context: SinkContext) {
        if listener < 0, monotonicNanoseconds() - lastBindAttempt >= 5_000_000_000 { openListener(logger: context.logger) }
        acceptClients(context: context)
        flushClients(context: context)
    }

    /// A thread blocked in accept(2): new clients wait for the sink's thread,
    /// which is woken to take them.
    private func startAccepting(_ fd: Int32) {
        let thread = Thread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    break  // the listener was shut down
                }
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                Sockets.setNonBlocking(client, true)
                let wake = lock.withLock { accepted.append(client); return self.wake }
                wake()
            }
            acceptDone.signal()
        }
        thread.name = "vigil-accept"
        thread.stackSize = 128 << 10
        acceptThread = thread
        thread.start()
    }

    private func acceptClients(context: SinkContext) {
        let new = lock.withLock { () -> [Int32] in defer { accepted.removeAll() }; return accepted }
        for fd in new {
            clients.append(Client(fd: fd))
            context.logger.debug("client connected to \(address)")
        }
    }

    /// Writes what each client can take now, without blocking; drops clients
    /// that hung up.
    private func flushClients(context: SinkContext) {
        for i in clients.indices where clients[i].fd >= 0 && clients[i].sent < clients[i].pending.count {
            let fd = clients[i].fd
            let result: Int = clients[i].pending.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + clients[i].sent, raw.count - clients[i].sent, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if result > 0 {
                clients[i].sent += result
            } else if result < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
                close(fd)
                clients[i].fd = -1
            }
        }
        clients.removeAll { $0.fd < 0 }
    }

    func shutdown(context: SinkContext) {
        // Give connected clients a moment to take what is pending.
        let deadline = monotonicNanoseconds() + 1_000_000_000
        while clients.contains(where: { $0.sent < $0.pending.count }), monotonicNanoseconds() < deadline {
            flushClients(context: context)
            var ts = timespec(tv_sec: 0, tv_nsec: 5_000_000)
            nanosleep(&ts, nil)
        }
        for client in clients { close(client.fd) }
        clients.removeAll()
        if listener >= 0 {
            // Unblocks the accept thread (accept fails once the socket is shut down).
            Glibc.shutdown(listener, Int32(SHUT_RDWR))
            if acceptThread != nil { _ = acceptDone.wait(timeout: .now() + 1) }
            close(listener)
            for fd in lock.withLock({ accepted }) { close(fd) }
        }
        listener = -1
        var st = stat()
        if case .unix(let path) = address, let node = boundNode, lstat(path, &st) == 0,
           st.st_dev == node.0, st.st_ino == node.1 {
            unlink(path)
        }
    }
}
