import Foundation
import Synchronization

/// A TCP socket on 127.0.0.1 for tests that play a peer. Bound at once (to
/// `port`, or a port of its own); listening at once, or only after
/// `listenNow()`: until then connections to it are refused, as to a peer
/// that is down, and no other socket can take the port meanwhile (a port
/// learned and let go may be handed to another test's socket).
final class TCPListener: @unchecked Sendable {
    let fd: Int32
    let port: Int

    init(port: Int = 0, listening: Bool = true) throws {
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard s >= 0 else { throw TestFailure("socket: errno \(errno)") }
        var one: Int32 = 1
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            let error = errno
            Glibc.close(s)
            throw TestFailure("cannot bind 127.0.0.1:\(port): errno \(error)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &length) }
        }
        fd = s
        self.port = Int(UInt16(bigEndian: address.sin_port))
        if listening { try listenNow() }
    }

    /// Starts accepting connections (the peer comes up).
    func listenNow() throws {
        guard listen(fd, 16) == 0 else { throw TestFailure("cannot listen on 127.0.0.1:\(port): errno \(errno)") }
    }

    func close() {
        shutdown(fd, Int32(SHUT_RDWR))
        _ = Glibc.close(fd)
    }
}

/// Everything sent to a listener, over any number of connections one after
/// another or at once: a carbon, a line protocol listener, a JSON Lines
/// receiver. Accepts until the listener is closed.
final class LineCollector: @unchecked Sendable {
    private struct State {
        var bytes: [UInt8] = []
        var accepted = 0
        var open = 0
    }
    private let state = Mutex(State())

    init(_ listener: TCPListener) {
        let listening = listener.fd
        Thread { [self] in
            while true {
                let client = accept(listening, nil, nil)
                if client < 0 { return }
                state.withLock { $0.accepted += 1; $0.open += 1 }
                Thread { [self] in
                    defer {
                        Glibc.close(client)
                        state.withLock { $0.open -= 1 }
                    }
                    var buffer = [UInt8](repeating: 0, count: 65_536)
                    while true {
                        let n = read(client, &buffer, buffer.count)
                        if n <= 0 { return }
                        state.withLock { $0.bytes += buffer[0..<n] }
                    }
                }.start()
            }
        }.start()
    }

    /// The complete lines received so far.
    func lines() -> [String] {
        var text = String(decoding: state.withLock { $0.bytes }, as: UTF8.self)
        if let last = text.lastIndex(of: "\n") { text = String(text[...last]) } else { text = "" }
        return text.split(separator: "\n").map(String.init)
    }

    /// The lines, once a connection came and every one has been closed by
    /// its sender (the host destroys its output at exit), or `timeout`
    /// passed.
    func linesWhenClosed(timeout: TimeInterval = 30) -> [String] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline, state.withLock({ $0.accepted == 0 || $0.open > 0 }) { usleep(10_000) }
        return lines()
    }
}
