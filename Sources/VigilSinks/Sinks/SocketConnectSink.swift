import Foundation
import Logging
import VigilABI
import VigilCore
import VigilIsolation

/// Streams JSON Lines to a peer it connects to (`unix:`, `tcp://`, `udp://`).
/// While the peer is away it reconnects with capped exponential backoff; the
/// events wait in the sink's queue (bounded by `queue_size`, then the
/// overflow policy) and in the batch being retried. Sends never block without
/// a deadline: a peer that stops reading is waited for in short steps, and
/// given up at shutdown after the drain timeout.
///
/// Delivery over a stream: bytes the kernel took are not yet delivered. The
/// sink keeps the stream offsets where recent events end, and when a
/// connection breaks (or is given up at shutdown) asks the kernel how much
/// of what it was handed never left the send queue (SIOCOUTQ): events of the
/// batch in hand that the peer did not get are sent again, from their first
/// byte, on the next connection; events of earlier batches, already counted
/// written, are taken back as lost (`kernel_buffer`). At shutdown the sink
/// waits, until the drain deadline, for the peer to take all it was sent;
/// what the kernel still holds then, on a connection the peer has not closed
/// or reset, is handed on by the kernel after vigil has ended: those events
/// are written and counted `unconfirmed`, not lost. A deadline that falls in
/// the middle of an event gives the kernel the rest of it first (for up to
/// 300 ms more), so the stream ends where an event does, not in a torn
/// line.
///
/// Over TCP the count is exact as far as the peer's kernel: bytes it
/// acknowledged but its program never read (it died with them in its
/// receive buffer) cannot be seen from here. Over a unix socket the kernel
/// reports unread memory, not bytes, and forgets it when the peer closes, so
/// the sink counts from its last look: it may count as lost an event the
/// peer read just before it died, never the other way round.
///
/// What goes on the wire is the `Framing`'s: JSON Lines for `type: socket`,
/// RFC 5424 messages (octet-counted on a stream) for `type: syslog`.
package final class SocketConnectSink<Framing: EventFraming>: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread only
    private let address: SocketAddress
    private let config: SocketSinkConfig
    private var framing: Framing
    /// Datagrams on a unix socket (syslog's /dev/log), where `unix:` is
    /// otherwise a stream.
    private let unixDatagram: Bool
    private var fd: Int32 = -1
    private var backoff: Backoff
    private var nextAttempt: Int64 = 0
    private var buffer: [UInt8] = []
    private var loggedDown = false
    /// A connection was made before: the next one is a reconnection.
    private var everConnected = false
    private var isDatagram: Bool {
        switch address {
        case .udp: true
        case .unix: unixDatagram
        case .tcp: false
        }
    }
    private var isUnix: Bool { if case .unix = address { true } else { false } }

    // Stream accounting, per connection.
    /// Bytes handed to the kernel on this connection.
    private var streamSent: Int64 = 0
    /// Bytes of this connection known to have reached the peer.
    private var confirmed: Int64 = 0
    /// Stream offsets where events of earlier batches end, past `confirmed`
    /// when last looked at: written, but maybe still in the kernel.
    private var pastEnds: [Int64] = []
    private var pastHead = 0
    /// Buffer offsets where the events of the batch in hand end.
    private var eventEnds: [Int] = []

    init(address: SocketAddress, config: SocketSinkConfig, framing: Framing, unixDatagram: Bool = false) {
        self.address = address
        self.config = config
        self.framing = framing
        self.unixDatagram = unixDatagram
        self.backoff = Backoff(min: config.reconnectMin, max: config.reconnectMax)
    }

    /// JSON Lines on a stream are made by the producers (the sink's thread
    /// only sends); datagrams and syslog are framed here.
    package var producerLines: JSONLineEncoder? {
        isDatagram ? nil : (framing as? JSONLinesFraming)?.encoder
    }

    /// While connected, notice a peer that went away (once a second), and
    /// while the peer has not taken all it was sent, look at the send queue
    /// often (a unix socket's says nothing once the peer is gone).
    package var tickInterval: Int64 {
        guard fd >= 0 && !isDatagram else { return SinkTicks.never }
        return pastHead < pastEnds.count ? 50_000_000 : 1_000_000_000
    }

    /// Says `aboutToSend` once connected, before the batch's first send.
    package var reportsSending: Bool { true }

    package func write(_ batch: [Event], context: SinkContext) throws {
        buffer.removeAll(keepingCapacity: true)
        if isDatagram {
            try sendDatagrams(batch, context: context)
            return
        }
        eventEnds.removeAll(keepingCapacity: true)
        let lines = context.lines
        var cut = 0
        for i in batch.indices {
            // A line the producer made, or made here.
            if let line = lines?.line(i), !line.isEmpty {
                buffer.append(contentsOf: line)
            } else if framing.frame(batch[i], into: &buffer) {
                cut += 1
            }
            eventEnds.append(buffer.count)
        }
        context.countTruncated(cut)
        // A peer that closed while we were idle would swallow the first send
        // (the kernel takes it, then the connection resets): check first.
        dropIfPeerClosed(context: context)
        var offset = 0
        /// The stream offset of `buffer[0]` on the current connection.
        var base = streamSent
        while offset < buffer.count {
            if fd < 0 {
                do {
                    try waitForConnection(context: context)
                } catch {
                    throw SinkWriteError(delivered: eventsEnding(atOrBefore: offset), reason: .shutdown, error)
                }
                base = streamSent - Int64(offset)
            }
            context.aboutToSend()
            do {
                try sendSome(from: &offset, context: context)
            } catch let error as Sockets.Failure where error.code == ETIMEDOUT {
                // Given up at shutdown, the peer reading slowly or not at
                // all. The event the kernel has part of is finished first;
                // what the kernel holds is handed on after vigil ends
                // (unconfirmed); what it never had is lost.
                let whole = finishEvent(at: &offset)
                let handed = eventsEnding(atOrBefore: offset)
                let reached = disconnect(context: context, peerGone: false, atExit: true)
                context.countUnconfirmed(handed - min(handed, eventsEnding(atOrBefore: Int(clamping: max(0, reached - base)))))
                if !whole {
                    context.logger.warning("the stream to \(address) ends inside an event: the peer took nothing for 300 ms past the drain deadline")
                }
                throw SinkWriteError(delivered: handed, reason: .shutdown, error)
            } catch {
                context.logger.warning("connection to \(address) lost: \(error); reconnecting")
                let reached = disconnect(context: context, peerGone: true)
                // Send again from the first event the peer did not get whole.
                let done = eventsEnding(atOrBefore: min(offset, max(0, Int(clamping: reached - base))))
                offset = done == 0 ? 0 : eventEnds[done - 1]
            }
        }
        remember(base: base)
    }

    /// How many events of the batch in hand end at or before buffer offset `limit`.
    private func eventsEnding(atOrBefore limit: Int) -> Int {
        var lo = 0, hi = eventEnds.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if eventEnds[mid] <= limit { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// The batch went to the kernel whole: keep where its events end, as far
    /// as the peer has not taken them yet.
    private func remember(base: Int64) {
        lookAtSendQueue()
        if pastHead < pastEnds.count && pastEnds[pastEnds.count - 1] <= confirmed {
            pastEnds.removeAll(keepingCapacity: true)
            pastHead = 0
        } else {
            while pastHead < pastEnds.count && pastEnds[pastHead] <= confirmed { pastHead += 1 }
        }
        let first = eventsEnding(atOrBefore: Int(clamping: max(0, confirmed - base)))
        guard first < eventEnds.count else { return }
        if pastHead > 4096 && pastHead * 2 > pastEnds.count {
            pastEnds.removeFirst(pastHead)
            pastHead = 0
        }
        for i in first..<eventEnds.count { pastEnds.append(base + Int64(eventEnds[i])) }
    }

    /// Bytes handed to the kernel that the peer has not taken (SIOCOUTQ);
    /// nil if the kernel cannot say.
    private func unsentBytes() -> Int64? {
        var n: Int32 = 0
        return ioctl(fd, UInt(TIOCOUTQ), &n) == 0 ? Int64(max(0, n)) : nil
    }

    /// Moves `confirmed` up to what the send queue says the peer has taken.
    private func lookAtSendQueue() {
        guard fd >= 0, let unsent = unsentBytes() else { return }
        confirmed = max(confirmed, streamSent - min(unsent, streamSent))
    }

    /// Closes the connection and settles its account: events of earlier
    /// batches the peer did not get are counted lost (`kernel_buffer`), or,
    /// `atExit` on a connection the peer has not closed, unconfirmed: the
    /// close is a graceful one, and the kernel goes on sending them.
    /// Returns the stream offset the peer got to.
    /// `peerGone`: the connection broke, so a unix socket's send queue no
    /// longer says anything (the kernel freed it); the last look stands.
    private func disconnect(context: SinkContext, peerGone: Bool, atExit: Bool = false) -> Int64 {
        if fd >= 0 && !(isUnix && peerGone) { lookAtSendQueue() }
        let lost = pastEnds[pastHead...].reduce(0) { $0 + ($1 > confirmed ? 1 : 0) }
        if lost > 0 && atExit && !peerGone {
            context.countUnconfirmed(lost)
            context.logger.notice("\(lost) events sent to \(address) were still in the kernel's send queue at exit; the kernel goes on sending them (unconfirmed)")
        } else if lost > 0 {
            context.countLostAfterWrite(lost, .kernelBuffer)
            context.logger.warning("\(lost) events sent to \(address) never left the kernel's send queue; counted lost (kernel_buffer)")
        }
        let reached = confirmed
        if fd >= 0 { close(fd) }
        fd = -1
        pastEnds.removeAll(keepingCapacity: true)
        pastHead = 0
        streamSent = 0
        confirmed = 0
        return reached
    }

    /// Sends from `offset` until the buffer is out, waiting for the socket in
    /// short steps so a shutdown deadline is noticed.
    private func sendSome(from offset: inout Int, context: SinkContext) throws {
        try buffer.withUnsafeBytes { raw in
            while offset < raw.count {
                let n = send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                if n > 0 {
                    offset += n
                    streamSent += Int64(n)
                    continue
                }
                if n < 0 && errno == EINTR { continue }
                guard n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) else {
                    throw Sockets.Failure(what: "send", code: n == 0 ? EPIPE : errno)
                }
                var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                while poll(&pfd, 1, 100) == 0 {
                    if context.shouldAbandon {
                        throw Sockets.Failure(what: "gave up sending to \(address) at shutdown", code: ETIMEDOUT)
                    }
                    // A unix socket's queue is readable only while the peer lives: look now.
                    if isUnix { lookAtSendQueue() }
                    context.whileWaiting()
                }
            }
        }
    }

    /// How long past the drain deadline the rest of a torn event is offered.
    static var finishGrace: Int64 { 300_000_000 }

    /// At the drain deadline, with an event partly handed to the kernel:
    /// hands it the rest of that event, waiting for room up to 300 ms, so
    /// that the stream ends where an event ends. False when the peer took
    /// nothing meanwhile (or the connection failed): the event stays torn.
    private func finishEvent(at offset: inout Int) -> Bool {
        let done = eventsEnding(atOrBefore: offset)
        let started = done == 0 ? 0 : eventEnds[done - 1]
        guard done < eventEnds.count && started < offset else { return true }
        let end = eventEnds[done]
        // Well inside the host's one second of grace past the drain deadline
        // (`SinkRunner.stop`), after which it gives up on the sink.
        let deadline = monotonicNanoseconds().addingSaturating(Self.finishGrace)
        while offset < end {
            let n = buffer.withUnsafeBytes { raw in
                send(fd, raw.baseAddress! + offset, end - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if n > 0 {
                offset += n
                streamSent += Int64(n)
                continue
            }
            if n < 0 && errno == EINTR { continue }
            guard n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) else { return false }
            let left = deadline - monotonicNanoseconds()
            guard left > 0 else { return false }
            var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            _ = poll(&pfd, 1, Int32(clamping: min(left / 1_000_000 + 1, 100)))
        }
        return true
    }

    /// One event per datagram. UDP has no delivery guarantee, so a datagram
    /// the kernel took counts as written. Each one the kernel refused is
    /// counted lost, once: `too_large` for an event over the datagram limit
    /// (EMSGSIZE), `write_failed` for any other error (such as ECONNREFUSED,
    /// the report of an earlier datagram's ICMP "port unreachable": the peer
    /// is down). A unix datagram peer (syslog's /dev/log) is waited for as a
    /// stream's is: while its queue is full the send waits for room, and when
    /// it went away (restarted) the socket connects again, with backoff, and
    /// the event is sent then; both give up only at the drain deadline.
    private func sendDatagrams(_ batch: [Event], context: SinkContext) throws {
        var tooLarge = 0
        var failed = 0
        var cut = 0
        var firstError: Int32 = 0
        defer {
            context.countTruncated(cut)
            if tooLarge + failed > 0 {
                context.logger.debug("\(tooLarge + failed) datagrams to \(address) not sent: \(String(cString: strerror(firstError)))")
            }
        }
        for (index, event) in batch.enumerated() {
            buffer.removeAll(keepingCapacity: true)
            if framing.frame(event, into: &buffer) { cut += 1 }
            while true {
                if fd < 0 {
                    do {
                        try waitForConnection(context: context)
                    } catch {
                        context.countLost(tooLarge, .tooLarge)
                        context.countLost(failed, .writeFailed)
                        let lost = tooLarge + failed
                        (tooLarge, failed) = (0, 0)
                        throw SinkWriteError(delivered: index - lost, reason: .shutdown, error)
                    }
                }
                context.aboutToSend()
                let n = buffer.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                if n >= 0 { break }
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK {
                    if context.shouldAbandon {
                        context.countLost(tooLarge, .tooLarge)
                        context.countLost(failed, .writeFailed)
                        let lost = tooLarge + failed
                        (tooLarge, failed) = (0, 0)
                        throw SinkWriteError(delivered: index - lost, reason: .shutdown,
                                             Sockets.Failure(what: "gave up sending to \(address) at shutdown", code: code))
                    }
                    var pfd = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    if poll(&pfd, 1, 100) == 0 { context.whileWaiting() }
                    continue
                }
                if isUnix && (code == ECONNREFUSED || code == ENOTCONN || code == ENOENT) {
                    // The daemon went away or restarted with a new socket: connect again.
                    context.logger.warning("\(address) refused a message (\(String(cString: strerror(code)))); reconnecting")
                    close(fd)
                    fd = -1
                    continue
                }
                if code == EMSGSIZE { tooLarge += 1 } else { failed += 1 }
                if firstError == 0 { firstError = code }
                break
            }
        }
        context.countLost(tooLarge, .tooLarge)
        context.countLost(failed, .writeFailed)
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
                    fd = try Sockets.connect(address, timeoutMs: 2000, unixDatagram: unixDatagram)
                    streamSent = 0
                    confirmed = 0
                    Sockets.setNonBlocking(fd, true)
                    // Room for whole batches in the kernel: fewer stalls and
                    // wake-ups of the peer per batch (the kernel caps the size).
                    var size: Int32 = 4 << 20
                    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
                    if loggedDown || everConnected {
                        context.logger.notice("connected to \(address)\(everConnected ? " again" : "")")
                    }
                    if everConnected { context.count(.reconnected) }
                    everConnected = true
                    loggedDown = false
                    backoff.reset()
                    return
                } catch {
                    if !loggedDown {
                        context.logger.warning("cannot connect to \(address): \(error); retrying with backoff up to \(Units.formatDuration(config.reconnectMax))")
                        loggedDown = true
                    }
                    // Half the wait is jitter, so hosts that lost one peer
                    // together do not all come back to it at the same instant.
                    nextAttempt = monotonicNanoseconds().addingSaturating(backoff.next())
                }
            }
            context.whileWaiting()
            // Sleep in short steps so a shutdown is noticed promptly.
            let wait = max(1_000_000, min(nextAttempt.subtractingSaturating(monotonicNanoseconds()), 50_000_000))
            var ts = timespec(tv_sec: 0, tv_nsec: Int(wait))
            nanosleep(&ts, nil)
        }
    }

    package func tick(context: SinkContext) {
        dropIfPeerClosed(context: context)
        guard fd >= 0, pastHead < pastEnds.count else { return }
        lookAtSendQueue()
        while pastHead < pastEnds.count && pastEnds[pastHead] <= confirmed { pastHead += 1 }
        if pastHead == pastEnds.count {
            pastEnds.removeAll(keepingCapacity: true)
            pastHead = 0
        }
    }

    /// Closes the connection if the peer has closed its end (EOF or an error
    /// pending), so the next send goes to a new connection.
    private func dropIfPeerClosed(context: SinkContext) {
        guard fd >= 0, !isDatagram else { return }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        if poll(&pfd, 1, 0) == 1 {
            var scratch = [UInt8](repeating: 0, count: 4096)
            let n = recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT))
            if n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                let why = n == 0 ? "closed the connection" : "reset the connection (\(String(cString: strerror(errno))))"
                context.logger.notice("\(address) \(why); connecting again for the next events")
                context.count(.peerClosed)
                _ = disconnect(context: context, peerGone: true)
            }
        }
    }

    /// Waits, until the drain deadline, for the peer to take everything the
    /// kernel still holds for it; what it did not take is lost (`kernel_buffer`).
    package func shutdown(context: SinkContext) {
        guard fd >= 0 else { return }
        if !isDatagram {
            var gone = false
            waiting: while let unsent = unsentBytes(), unsent > 0, !context.shouldAbandon {
                if isUnix { lookAtSendQueue() }
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if poll(&pfd, 1, 10) == 1 {
                    // The peer closed or reset, or wrote something (read and dropped).
                    var scratch = [UInt8](repeating: 0, count: 4096)
                    while true {
                        let n = recv(fd, &scratch, scratch.count, Int32(MSG_DONTWAIT))
                        if n > 0 { continue }
                        if n < 0 && errno == EINTR { continue }
                        if n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) {
                            gone = true
                            break waiting
                        }
                        break
                    }
                }
            }
            _ = disconnect(context: context, peerGone: gone, atExit: true)
        } else {
            close(fd)
            fd = -1
        }
    }
}

/// How a connecting sink puts an event on the wire.
package protocol EventFraming: Sendable {
    /// Appends one event as its peer reads it; true when it was cut to fit
    /// (counted as truncated, not lost).
    mutating func frame(_ event: Event, into out: inout [UInt8]) -> Bool
}

/// JSON Lines: one object and a newline per event (`type: socket`).
package struct JSONLinesFraming: EventFraming {
    var encoder: JSONLineEncoder
    init(host: String) { encoder = JSONLineEncoder(host: host) }

    @inline(__always)
    package mutating func frame(_ event: Event, into out: inout [UInt8]) -> Bool {
        encoder.encode(event, into: &out)
        return false
    }
}

/// RFC 5424 messages (`type: syslog`): bare in a datagram, octet-counted
/// (`LEN SP MSG`, RFC 6587) on a stream.
package struct SyslogFraming: EventFraming {
    let encoder: SyslogEncoder
    let octetCounting: Bool
    private var scratch: [UInt8] = []

    init(encoder: SyslogEncoder, octetCounting: Bool) {
        self.encoder = encoder
        self.octetCounting = octetCounting
    }

    package mutating func frame(_ event: Event, into out: inout [UInt8]) -> Bool {
        guard octetCounting else { return encoder.append(event, to: &out) }
        scratch.removeAll(keepingCapacity: true)
        let cut = encoder.append(event, to: &scratch)
        out += String(scratch.count).utf8
        out.append(UInt8(ascii: " "))
        out += scratch
        return cut
    }
}
