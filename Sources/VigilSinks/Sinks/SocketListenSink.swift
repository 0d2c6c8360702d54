import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation

/// Listens on `unix:` or `tcp://` and streams every routed event to each
/// connected client. A client that falls more than `client_buffer` bytes
/// behind is disconnected; the sink never waits for one.
package final class SocketListenSink: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread; the accept thread hands clients over through `handover`
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
    /// Our claim on a unix socket path, taken before binding it.
    private var pathLock: SocketPathLock?
    private var clients: [Client] = []
    private var buffer: [UInt8] = []
    private var lastBindAttempt: Int64 = 0
    private var loggedBindFailure = false

    /// Clients accepted by the accept thread, not yet taken by the sink's
    /// thread; and the function that wakes the sink's thread.
    private let handover = Mutex<(accepted: [Int32], wake: @Sendable () -> Void)>(([], {}))
    /// The accept thread was started (not the Thread itself: its closure holds the sink).
    private var accepting = false
    private let acceptDone = DispatchSemaphore(value: 0)

    init(address: SocketAddress, config: SocketSinkConfig, host: String) {
        self.address = address
        self.config = config
        self.encoder = JSONLineEncoder(host: host)
    }

    /// Ticks only to retry a failed bind or to flush clients with data pending:
    /// an idle listening sink does not wake at all.
    package var tickInterval: Int64 {
        if listener < 0 { return 5_000_000_000 }
        return clients.contains { $0.sent < $0.pending.count } ? 50_000_000 : SinkTicks.never
    }

    package func attach(wake: @escaping @Sendable () -> Void) {
        handover.withLock { $0.wake = wake }
    }

    /// Binds now, so a bad address is reported when the host starts.
    package func bind(logger: Logger) {
        openListener(logger: logger)
    }

    private func openListener(logger: Logger) {
        guard listener < 0 else { return }
        lastBindAttempt = monotonicNanoseconds()
        do {
            if case .unix(let path) = address, pathLock == nil { pathLock = try SocketPathLock.claim(path) }
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

    package func write(_ batch: [Event], context: SinkContext) throws {
        acceptClients(context: context)
        // Nobody to write to: not written, and not lost either (no one asked).
        guard !clients.isEmpty else { return context.countNoClient(batch.count) }
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
            context.count(.clientCut)
            close(clients[i].fd)
            clients[i].fd = -1
        }
        clients.removeAll { $0.fd < 0 }
    }

    package func tick(context: SinkContext) {
        if listener < 0, monotonicNanoseconds() - lastBindAttempt >= 5_000_000_000 { openListener(logger: context.logger) }
        acceptClients(context: context)
        flushClients(context: context)
    }

    /// A thread blocked in accept(2): new clients wait for the sink's thread,
    /// which is woken to take them.
    private func startAccepting(_ fd: Int32) {
        accepting = true
        startHostThread(named: "vigil-accept", stackSize: 128 << 10) { [self] in
            while true {
                let client = Sockets.accept(fd)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    break  // the listener was shut down
                }
                Sockets.setNonBlocking(client, true)
                let wake = handover.withLock { handover in
                    handover.accepted.append(client)
                    return handover.wake
                }
                wake()
            }
            acceptDone.signal()
        }
    }

    private func acceptClients(context: SinkContext) {
        let new = handover.withLock { handover in
            defer { handover.accepted.removeAll() }
            return handover.accepted
        }
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

    package func shutdown(context: SinkContext) {
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
            if accepting { _ = acceptDone.wait(timeout: .now() + 1) }
            close(listener)
            for fd in handover.withLock({ $0.accepted }) { close(fd) }
        }
        listener = -1
        var st = stat()
        if case .unix(let path) = address, let node = boundNode, lstat(path, &st) == 0,
           st.st_dev == node.0, st.st_ino == node.1 {
            unlink(path)
        }
        pathLock?.release()
        pathLock = nil
    }
}
