import Foundation
import Logging
import VigilCore

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

    /// One event per datagram, never retried: UDP has no delivery guarantee,
    /// so a datagram the kernel took counts as written. Each one the kernel
    /// refused is counted lost, once: `too_large` for an event over the
    /// datagram limit (EMSGSIZE), `write_failed` for any other error (such
    /// as ECONNREFUSED, the report of an earlier datagram's ICMP "port
    /// unreachable": the peer is down).
    private func sendDatagrams(_ batch: [Event], context: SinkContext) throws {
        if fd < 0 { try waitForConnection(context: context) }
        var tooLarge = 0
        var failed = 0
        var firstError: Int32 = 0
        for event in batch {
            buffer.removeAll(keepingCapacity: true)
            encoder.encode(event, into: &buffer)
            var n: Int
            repeat {
                n = buffer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            } while n < 0 && errno == EINTR
            if n < 0 {
                if errno == EMSGSIZE { tooLarge += 1 } else { failed += 1 }
                if firstError == 0 { firstError = errno }
            }
        }
        context.countLost(tooLarge, .tooLarge)
        context.countLost(failed, .writeFailed)
        if tooLarge + failed > 0 {
            context.logger.debug("\(tooLarge + failed) datagrams to \(address) not sent: \(String(cString: strerror(firstError)))")
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
