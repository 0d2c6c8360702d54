import Glibc
import Synchronization
import VigilForeign
import VigilKit

/// A statsd listener (Etsy's statsd and DogStatsD clients), on UDP and TCP:
/// what arrives between two flushes is aggregated per key (name and tags)
/// and each key is one event at each flush: counters summed (scaled by
/// their sample rate) with their rate per second, gauges' last value (with
/// signed values as changes), timers, histograms and distributions as
/// count, sum, min, max, mean and the chosen percentiles (from a sketch
/// whose error is stated: 1 %), sets as their count of members.
///
/// Bounded: at most `max_keys` keys between flushes (a new key past it is
/// dropped and counted), at most `max_set_members` members per set, a
/// packet or TCP line longer than `max_packet` is dropped and counted; a
/// bad line is counted, never trusted. What the kernel dropped before the
/// socket was read (its receive queue full) is the socket's drop count
/// (SO_MEMINFO), told in `stats`.
final class StatsdMonitor: PushMonitor, @unchecked Sendable {  // shared state is behind `state`; the rest is set in init or start
    static let spec = PluginSpec(
        name: "statsd", version: "1.1.0",
        summary: "A statsd and DogStatsD listener (UDP, TCP): counters, gauges, timers, histograms, distributions and sets, one event per key per flush",
        events: [
            EventDecl("counter", doc: "One per counter key at each flush.", fields: [
                FieldDecl("name", .string, identity: true), FieldDecl("tags", .string, doc: "DogStatsD tags, sorted: key:value,…", identity: true),
                FieldDecl("value", .double, doc: "the sum over the flush interval, each value divided by its sample rate"),
                FieldDecl("rate", .double, unit: "per second", doc: "value over the flush interval's seconds"),
            ], policy: .samples),
            EventDecl("gauge", doc: "One per gauge key at each flush.", fields: [
                FieldDecl("name", .string, identity: true), FieldDecl("tags", .string, identity: true), FieldDecl("value", .double),
            ], policy: .samples),
            EventDecl("timer", doc: """
                One per timer, histogram or distribution key at each flush; beside the declared fields, one per \
                percentile of `percentiles`, named p50, p99, p99_9.
                """, fields: [
                FieldDecl("name", .string, identity: true), FieldDecl("tags", .string, identity: true),
                FieldDecl("type", .string, doc: "ms, h or d, as sent"),
                FieldDecl("count", .double, doc: "values received, each counted as 1 / its sample rate"),
                FieldDecl("sum", .double), FieldDecl("min", .double), FieldDecl("max", .double), FieldDecl("mean", .double),
            ], policy: .samples, dynamicFields: true),
            EventDecl("set", doc: "One per set key at each flush.", fields: [
                FieldDecl("name", .string, identity: true), FieldDecl("tags", .string, identity: true),
                FieldDecl("count", .int, doc: "distinct members received"),
            ], policy: .samples),
            EventDecl("stats", doc: "One per flush: what the listener received and what it refused.", fields: [
                FieldDecl("metrics", .int, doc: "metrics read"),
                FieldDecl("packets", .int, doc: "UDP packets and TCP lines read"),
                FieldDecl("bad_lines", .int), FieldDecl("unsupported", .int, doc: "DogStatsD events and service checks"),
                FieldDecl("oversized", .int, doc: "packets or TCP lines longer than max_packet, dropped"),
                FieldDecl("dropped_keys", .int, doc: "metrics of new keys past max_keys, dropped"),
                FieldDecl("dropped_members", .int, doc: "new members of sets already holding max_set_members, dropped"),
                FieldDecl("keys", .int, doc: "keys flushed"),
                FieldDecl("kernel_drops", .int, doc: "datagrams the kernel dropped on the UDP sockets since they opened (their buffer full, or from a stop on, its filter; /proc/net/udp's drops)"),
                FieldDecl("unread_at_stop", .int, doc: "datagrams and TCP lines a stop took off unparsed, or cut (in the last flush only)"),
            ], policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var listen: [String] = ["udp://127.0.0.1:8125"]
        var flushInterval: Duration = .seconds(10)
        var percentiles: JSONValue = .array([.number(50), .number(90), .number(95), .number(99)])
        var maxKeys = 10_000
        var maxSetMembers = 10_000
        var maxPacket: ByteCount = .kib(64)
        var deleteIdle = true
        var readBuffer: ByteCount?
        static let schema = OptionSchema<Options>(
            .option("listen", \.listen, doc: "udp://HOST:PORT and tcp://HOST:PORT addresses (HOST an address; [::1] for IPv6)."),
            .option("flush_interval", \.flushInterval, doc: "Between two flushes: what arrived meanwhile is one event per key."),
            .option("percentiles", \.percentiles, doc: "The percentiles of timers, histograms and distributions (0 to 100)."),
            .option("max_keys", \.maxKeys, doc: "Keys held between flushes; a new key's metrics past it are dropped and counted."),
            .option("max_set_members", \.maxSetMembers, doc: "Members held per set between flushes."),
            .option("max_packet", \.maxPacket, doc: "A UDP packet or TCP line longer than this is dropped and counted."),
            .option("delete_idle", \.deleteIdle, doc: "A key that received nothing since the last flush is not flushed (false: counters flush 0, gauges their last value)."),
            .optional("read_buffer", \.readBuffer, example: "8MiB",
                      doc: "The UDP sockets' receive buffer (SO_RCVBUF; as root past net.core.rmem_max): what a burst may queue before the kernel drops (default: the kernel's)."))
    }

    struct Listen: Equatable {
        var udp: Bool
        var family: Int32
        var address: [UInt8]
        var port: UInt16
    }

    private let context: MonitorContext
    private let options: Options
    private let listens: [Listen]
    private let percentiles: [(q: Double, field: String)]
    private let state: Mutex<Aggregate>

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.listen.isEmpty else { throw .invalidOption("listen", "give at least one address, as udp://127.0.0.1:8125") }
        var listens: [Listen] = []
        for (i, text) in options.listen.enumerated() {
            guard let listen = Self.parse(text) else {
                throw .invalidOption("listen[\(i)]", "'\(text)' is not udp://ADDRESS:PORT or tcp://ADDRESS:PORT")
            }
            listens.append(listen)
        }
        guard options.flushInterval >= .milliseconds(100) else { throw .invalidOption("flush_interval", "must be at least 100ms") }
        guard case .array(let items) = options.percentiles, items.count <= 32 else {
            throw .invalidOption("percentiles", "must be a list of at most 32 numbers from 0 to 100")
        }
        var percentiles: [(Double, String)] = []
        for item in items {
            guard case .number(let p) = item, p > 0, p <= 100 else {
                throw .invalidOption("percentiles", "must be numbers above 0 and at most 100")
            }
            let name = "p" + (p == p.rounded() ? String(Int(p)) : String(String(p).map { $0 == "." ? "_" : $0 }))
            percentiles.append((p / 100, name))
        }
        guard options.maxKeys > 0, options.maxSetMembers > 0 else { throw .invalidOption("max_keys", "must be more than 0") }
        guard options.maxPacket.bytes >= 512, options.maxPacket.bytes <= 1 << 20 else {
            throw .invalidOption("max_packet", "must be from 512B to 1MiB")
        }
        if let buffer = options.readBuffer, buffer.bytes < 4096 || buffer.bytes > 1 << 30 {
            throw .invalidOption("read_buffer", "must be from 4KiB to 1GiB")
        }
        self.context = context
        self.options = options
        self.listens = listens
        self.percentiles = percentiles
        self.state = Mutex(Aggregate(maxKeys: options.maxKeys, maxSetMembers: options.maxSetMembers))
    }

    static func parse(_ text: String) -> Listen? {
        let udp = text.hasPrefix("udp://")
        guard udp || text.hasPrefix("tcp://") else { return nil }
        let rest = text.dropFirst(6)
        guard let colon = rest.lastIndex(of: ":"), let port = UInt16(rest[rest.index(after: colon)...]) else { return nil }
        var host = String(rest[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var v4 = in_addr(), v6 = in6_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return Listen(udp: udp, family: AF_INET, address: withUnsafeBytes(of: v4) { Array($0) }, port: port)
        }
        if inet_pton(AF_INET6, host, &v6) == 1 {
            return Listen(udp: udp, family: AF_INET6, address: withUnsafeBytes(of: v6) { Array($0) }, port: port)
        }
        return nil
    }

    func start() throws(MonitorError) {
        var sockets: [(fd: Int32, udp: Bool)] = []
        for listen in listens {
            switch Self.open(listen) {
            case .success(let fd): sockets.append((fd, listen.udp))
            case .failure(let why):
                for socket in sockets { close(socket.fd) }
                throw .unavailable("cannot listen on \(listen.udp ? "udp" : "tcp") port \(listen.port): \(why.text)")
            }
        }
        for socket in sockets where socket.udp {
            if let asked = options.readBuffer { setReadBuffer(socket.fd, Int32(clamping: asked.bytes)) }
        }
        intake.withLock { $0 = Intake(udp: sockets.filter(\.udp).map(\.fd)) }
        flushing.withLock { $0 = false }
        state.withLock { $0 = Aggregate(maxKeys: options.maxKeys, maxSetMembers: options.maxSetMembers) }
        let limit = Int(clamping: options.maxPacket.bytes)
        // The UDP sockets and TCP connections are closed by stop, the TCP
        // listener by its worker when it ends.
        for socket in sockets {
            if socket.udp {
                context.spawn("statsd-udp") { [self] token in receiveUDP(socket.fd, limit: limit, token: token) }
            } else {
                context.spawn("statsd-tcp") { [self] token in serveTCP(socket.fd, limit: limit, token: token) }
            }
        }
        lastFlush.withLock { $0 = Worker.monotonicNow() }
        context.spawn("statsd-flush") { [self] token in
            while token.wait(options.flushInterval) { flushNow(final: nil) }
        }
    }

    /// What arrived since the last flush is flushed now, so a stop (or a
    /// reload) loses none of it. Each UDP socket first gets a filter that
    /// drops whatever reaches it from then on, counted in its drops, so what
    /// it holds can only shrink; the datagrams it held are read and parsed
    /// for at most 2 s, and what still waits then (a machine too loaded to
    /// parse it all: 648 of 5,000 datagrams of 100 lines were seen left) is
    /// taken off unparsed and counted in `unread_at_stop`, for at most 3 s
    /// more. The TCP connections' received bytes are read too, and a line
    /// the stop cuts is counted unread. Then the drop counts are read and
    /// the sockets closed, in that order and under the lock the workers
    /// read under: a datagram cannot land in between unseen (one that
    /// reached a socket after its last reading and before its close was
    /// lost unsaid, and a worker that closed its socket first made the
    /// flush read no drop count at all).
    func stop() {
        let limit = Int(clamping: options.maxPacket.bytes)
        var buffer = [UInt8](repeating: 0, count: limit + 1)
        var unread = 0, left = false, drops: Int64 = 0
        intake.withLock { intake in
            intake.stopped = true
            for fd in intake.udp { Self.dropFromNowOn(fd) }
            let deadline = Worker.monotonicNow() + 2_000_000_000
            for fd in intake.udp {
                while Worker.monotonicNow() <= deadline, readDatagrams(fd, into: &buffer, limit: limit, upTo: 1) == 1 {}
            }
            let discarding = max(deadline, Worker.monotonicNow()) + 3_000_000_000
            for i in intake.tcp.indices {
                while Worker.monotonicNow() <= deadline, readTCP(&intake.tcp[i], into: &buffer, limit: limit) == .more {}
                // Past the deadline the rest is read unparsed: its lines counted.
                var cut = !intake.tcp[i].skipping && !intake.tcp[i].pending.isEmpty
                while Worker.monotonicNow() <= discarding {
                    let n = buffer.withUnsafeMutableBytes { Glibc.read(intake.tcp[i].fd, $0.baseAddress, $0.count) }
                    if n < 0, errno == EINTR { continue }
                    guard n > 0 else { break }
                    for j in 0..<n where buffer[j] == 0x0A { unread += 1 }
                    cut = buffer[n - 1] != 0x0A
                }
                if cut { unread += 1 }
                close(intake.tcp[i].fd)
            }
            intake.tcp = []
            func discard(_ fd: Int32) {
                while !left, buffer.withUnsafeMutableBytes({ recv(fd, $0.baseAddress, 1, Int32(MSG_DONTWAIT)) }) >= 0 {
                    unread += 1
                    if unread % 1024 == 0, Worker.monotonicNow() > discarding { left = true }
                }
            }
            for fd in intake.udp { discard(fd) }
            // Connected to itself, a socket takes no datagram from anyone
            // else: what comes now is refused by the port (the sender is
            // told, /proc/net/snmp counts NoPorts), where between the last
            // count of its drops and its close one was dropped unsaid (1 or
            // 2 in 300,000 under a flood). A datagram the kernel matched to
            // the socket just before lands or is dropped within the moment
            // waited, and is read or counted below.
            for fd in intake.udp { Self.connectToItself(fd) }
            usleep(1000)
            for fd in intake.udp {
                discard(fd)
                drops &+= Self.drops(fd)
                close(fd)
            }
            intake.udp = []
        }
        if unread > 0 {
            state.withLock { $0.counts.unreadAtStop += unread }
            context.log(.warning, """
                statsd: \(unread) datagrams or TCP lines were still waiting when the stop had parsed for 2s, or were cut \
                by it; they are counted in unread_at_stop\(left ? ", and more were still queued 5s into the stop: those were neither read nor counted" : "")
                """)
        }
        flushNow(final: drops)
    }

    /// Attaches a classic BPF program of one instruction, `ret #0`: every
    /// datagram that reaches the socket from now on is dropped by the
    /// kernel and counted in the socket's drops (UDP counts a filter's drop
    /// as it counts a full buffer's).
    private static func dropFromNowOn(_ fd: Int32) {
        withUnsafeTemporaryAllocation(byteCount: 8 + 16, alignment: 8) { raw in
            raw.initializeMemory(as: UInt8.self, repeating: 0)
            let base = raw.baseAddress!
            base.storeBytes(of: UInt16(0x06), as: UInt16.self)  // BPF_RET | BPF_K, k = 0: keep no byte
            let program = base + 8  // struct sock_fprog: unsigned short len, struct sock_filter *filter
            program.storeBytes(of: UInt16(1), as: UInt16.self)
            program.storeBytes(of: base, toByteOffset: 8, as: UnsafeMutableRawPointer.self)
            _ = setsockopt(fd, SOL_SOCKET, Self.soAttachFilter, program, 16)
        }
    }

    private static func connectToItself(_ fd: Int32) {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        withUnsafeMutablePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { a in
                if getsockname(fd, a, &length) == 0 { _ = connect(fd, a, length) }
            }
        }
    }

    /// The socket's drop count (SO_MEMINFO's SK_MEMINFO_DROPS, the last
    /// column of /proc/net/udp): datagrams the kernel dropped on it since it
    /// was opened, its buffer full or, from the stop on, its filter.
    private static func drops(_ fd: Int32) -> Int64 {
        var info = [UInt32](repeating: 0, count: 9)
        var length = socklen_t(9 * MemoryLayout<UInt32>.size)
        let got = info.withUnsafeMutableBytes { getsockopt(fd, SOL_SOCKET, Self.soMeminfo, $0.baseAddress, &length) }
        guard got == 0, length >= socklen_t(9 * MemoryLayout<UInt32>.size) else { return 0 }
        return Int64(info[8])
    }

    /// <asm-generic/socket.h>'s numbers (x86-64, arm64 and the others that use it).
    static let soAttachFilter: Int32 = 26
    static let soMeminfo: Int32 = 55

    /// When the last flush was (monotonic ns): the flush worker's and stop's.
    private let lastFlush = Mutex<Int64>(0)

    /// One flush at a time: a flush worker's that waited for the stop's is skipped.
    private let flushing = Mutex(false)

    /// `final`: the stop's, with the sockets' last drop count; nil for the
    /// flush worker's, which reads the drop counts of the open sockets.
    private func flushNow(final: Int64?) {
        flushing.withLock { done in
            guard !done else { return }
            if final != nil { done = true }
            guard let drops = final ?? intake.withLock({ $0.stopped ? nil : $0.udp.reduce(Int64(0)) { $0 &+ Self.drops($1) } }) else { return }
            flush(kernelDrops: drops)
        }
    }

    struct Refusal: Error { var text: String }

    static func open(_ listen: Listen) -> Result<Int32, Refusal> {
        let type = Int32(listen.udp ? SOCK_DGRAM.rawValue : SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        let fd = Glibc.socket(listen.family, type, 0)
        guard fd >= 0 else { return .failure(Refusal(text: String(cString: strerror(errno)))) }
        var one: Int32 = 1
        // TCP only: on UDP it lets another socket, another user's too, bind
        // the same port and take the datagrams (Linux gives them to the
        // later one), and a listen given twice bind without complaint.
        if !listen.udp { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size)) }
        var bound: Int32
        if listen.family == AF_INET {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = listen.port.bigEndian
            withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: listen.address) }
            bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        } else {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = listen.port.bigEndian
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: listen.address) }
            bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
        }
        if bound == 0, !listen.udp { bound = Glibc.listen(fd, 128) }
        guard bound == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            return .failure(Refusal(text: why))
        }
        return .success(fd)
    }

    /// SO_RCVBUFFORCE (root, or CAP_NET_ADMIN, past rmem_max), else
    /// SO_RCVBUF, which the kernel caps at net.core.rmem_max; what it gave
    /// (it doubles what is asked, for its bookkeeping) is said when less.
    private func setReadBuffer(_ fd: Int32, _ asked: Int32) {
        var value = asked
        let size = socklen_t(MemoryLayout<Int32>.size)
        if setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &value, size) != 0 {
            _ = setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, size)
        }
        var got: Int32 = 0
        var length = size
        // The kernel keeps at most INT_MAX / 2 (and doubles it): 1 GiB asked is 1 byte less.
        if getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &length) == 0, got / 2 < min(asked, Int32.max / 2) {
            context.log(.notice, "statsd: read_buffer \(asked) bytes asked, the kernel gave \(got / 2) (net.core.rmem_max caps it without CAP_NET_ADMIN)")
        }
    }

    // MARK: receiving

    private func receiveUDP(_ fd: Int32, limit: Int, token: Worker.Token) {
        var buffer = [UInt8](repeating: 0, count: limit + 1)
        while !token.isCancelled {
            if token.waitFor(fd: fd, events: Int16(POLLIN), timeout: nil) == .cancelled { return }
            // Up to 256 datagrams or 256 KiB per wake (the stop waits for a
            // batch: 256 datagrams of 10,000 metrics kept a loaded debug
            // build's stop waiting past the host's 10 s), none once stopped.
            let stopped = intake.withLock { intake in
                if !intake.stopped { _ = readDatagrams(fd, into: &buffer, limit: limit, upTo: 256, bytes: 256 << 10) }
                return intake.stopped
            }
            if stopped { return }
        }
    }

    /// What the workers share with the stop, under one lock that each
    /// worker reads under: once `stopped`, no worker reads, so nothing a
    /// worker read reaches the aggregate after the last flush, where it
    /// would be lost unsaid (seen under load: a batch read just before the
    /// flush). The stop closes the UDP sockets and the TCP connections.
    private let intake = Mutex(Intake())

    struct Intake {
        var stopped = false
        var udp: [Int32] = []
        var tcp: [TCPConnection] = []
    }

    /// A TCP client and the start of its line that has not ended yet.
    struct TCPConnection {
        var fd: Int32
        var pending: [UInt8] = []
        /// Inside a line past max_packet, dropped up to its newline.
        var skipping = false
    }

    /// Reads and aggregates datagrams waiting on `fd`, each under one lock,
    /// until none waits, `most` were read or `bytes` (at least) were;
    /// returns how many were read.
    private func readDatagrams(_ fd: Int32, into buffer: inout [UInt8], limit: Int, upTo most: Int, bytes: Int = .max) -> Int {
        var read = 0, taken = 0
        while read < most, taken < bytes {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            if n < 0 { break }
            read += 1
            taken += n
            if n > limit {
                state.withLock { $0.counts.oversized += 1 }
                continue
            }
            buffer.withUnsafeBytes { bytes in
                let packet = UnsafeRawBufferPointer(rebasing: bytes[0..<n])
                state.withLock { aggregate in aggregate.add(packet) }
            }
        }
        return read
    }

    /// TCP connections served at once.
    static let maxConnections = 1024

    private func serveTCP(_ listener: Int32, limit: Int, token: Worker.Token) {
        defer { close(listener) }
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !token.isCancelled {
            // Only this worker changes the connections until the stop, so
            // the i-th polled is the i-th when they are read.
            guard let polled = intake.withLock({ $0.stopped ? nil : $0.tcp.map(\.fd) }) else { return }
            // At the most connections, new ones wait in the listener's backlog
            // (the kernel refuses them past it) until one ends: the listener
            // is not polled, or it would be ready on every poll.
            let accepting = polled.count < Self.maxConnections
            var fds = [pollfd(fd: token.cancelFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: listener, events: accepting ? Int16(POLLIN) : 0, revents: 0)]
            fds += polled.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&fds, nfds_t(fds.count), -1) >= 0 || errno == EINTR else { return }
            if fds[0].revents != 0 || token.isCancelled { return }
            let stopped = intake.withLock { intake -> Bool in
                if intake.stopped { return true }
                var gone: [Int] = []
                for i in polled.indices where fds[i + 2].revents != 0 {
                    if readTCP(&intake.tcp[i], into: &buffer, limit: limit) == .ended { gone.append(i) }
                }
                for i in gone.reversed() {
                    close(intake.tcp[i].fd)
                    intake.tcp.remove(at: i)
                }
                // One accepted now waits for the next poll; the stop closes it.
                if fds[1].revents != 0, accepting {
                    let fd = accept(listener, nil, nil)
                    if fd >= 0 {
                        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                        _ = fcntl(fd, F_SETFL, O_NONBLOCK)
                        intake.tcp.append(TCPConnection(fd: fd))
                    }
                }
                return false
            }
            if stopped { return }
        }
    }

    enum TCPRead { case more, empty, ended }

    /// One read of a connection: its whole lines to the aggregate, a line
    /// past the limit dropped whole (the stream goes on at the next line).
    /// At the end of the stream a last line without its newline is a line
    /// (as statsd's and Telegraf's TCP servers read it), unless skipped.
    private func readTCP(_ c: inout TCPConnection, into buffer: inout [UInt8], limit: Int) -> TCPRead {
        let n = buffer.withUnsafeMutableBytes { Glibc.read(c.fd, $0.baseAddress, $0.count) }
        if n < 0, errno == EINTR { return .more }
        if n < 0, errno == EAGAIN { return .empty }
        guard n > 0 else {
            if n == 0, !c.skipping, !c.pending.isEmpty { c.pending.withUnsafeBytes { line in state.withLock { $0.add(line) } } }
            c.pending.removeAll()
            return .ended
        }
        var start = 0
        for j in 0..<n where buffer[j] == 0x0A {
            if c.skipping {
                c.skipping = false
            } else {
                c.pending += buffer[start..<j]
                if c.pending.count > limit {
                    state.withLock { $0.counts.oversized += 1 }
                } else {
                    c.pending.withUnsafeBytes { line in state.withLock { $0.add(line) } }
                }
            }
            c.pending.removeAll(keepingCapacity: true)
            start = j + 1
        }
        if !c.skipping {
            c.pending += buffer[start..<n]
            if c.pending.count > limit {
                state.withLock { $0.counts.oversized += 1 }
                c.pending.removeAll()
                c.skipping = true
            }
        }
        return .more
    }

    // MARK: flushing

    /// The rates are over the time between this take of the aggregate and
    /// the last one (it was taken from before a flush waited for the lock,
    /// and set by a flush the stop made skip: a rate 1.9 times too high).
    private func flush(kernelDrops: Int64) {
        let (entries, counts, now) = state.withLock { aggregate in
            let (entries, counts) = aggregate.take(deleteIdle: options.deleteIdle)
            return (entries, counts, Worker.monotonicNow())
        }
        let seconds = Double(lastFlush.withLock { last -> Int64 in
            defer { last = now }
            return now - last
        }) / 1e9
        for (key, entry) in entries {
            let name: Value = .string(key.name), tags: Value = .string(key.tags)
            switch entry {
            case .counter(let sum):
                context.emit("counter", ["name": name, "tags": tags, "value": .double(sum), "rate": .double(seconds > 0 ? Statsd.saturating(sum / seconds) : 0)])
            case .gauge(let value):
                context.emit("gauge", ["name": name, "tags": tags, "value": .double(value)])
            case .timer(let kind, let sketch, let weighted):
                guard sketch.count > 0 else { continue }
                var fields: [(String, Value)] = [("name", name), ("tags", tags), ("type", .string(kind)), ("count", .double(weighted)),
                                                 ("sum", .double(sketch.sum)), ("min", .double(sketch.min)), ("max", .double(sketch.max)),
                                                 ("mean", .double(Statsd.saturating(sketch.sum / Double(sketch.count))))]
                for (q, field) in percentiles { if let v = sketch.quantile(q) { fields.append((field, .double(v))) } }
                context.emit("timer", fields: fields)
            case .set(let members):
                context.emit("set", ["name": name, "tags": tags, "count": .int(Int64(members.count))])
            }
        }
        context.emit("stats", [
            "metrics": .int(Int64(counts.metrics)), "packets": .int(Int64(counts.packets)), "bad_lines": .int(Int64(counts.badLines)),
            "unsupported": .int(Int64(counts.unsupported)), "oversized": .int(Int64(counts.oversized)),
            "dropped_keys": .int(Int64(counts.droppedKeys)), "dropped_members": .int(Int64(counts.droppedMembers)),
            "keys": .int(Int64(entries.count)),
            "kernel_drops": .int(kernelDrops), "unread_at_stop": .int(Int64(counts.unreadAtStop)),
        ])
    }

}

/// What arrived since the last flush, per key.
struct Aggregate {
    /// A name with its tags, of one type: as statsd keeps counters, gauges,
    /// timers and sets apart, `a:1|c` and `a:5|g` are two keys, not one
    /// that the later type takes over.
    struct Key: Hashable {
        var name: String
        var tags: String
        var type: KeyType
    }

    enum KeyType: Hashable {
        /// Timers, histograms and distributions are one (statsd reads `h` as `ms`).
        case counter, gauge, timer, set
    }

    enum Entry {
        case counter(Double)
        case gauge(Double)
        /// ms, h or d; the values; their count weighted by sample rates.
        case timer(String, QuantileSketch, Double)
        /// Only the members' count is sent: a member is held as a 64-bit
        /// hash of its bytes, so a member's length costs nothing.
        case set(Set<Int>)
    }

    struct Counts {
        var metrics = 0, packets = 0, badLines = 0, unsupported = 0, oversized = 0, droppedKeys = 0, droppedMembers = 0, unreadAtStop = 0
    }

    let maxKeys: Int
    let maxSetMembers: Int
    var entries: [Key: Entry] = [:]
    /// Gauges' last values and the kind of every key seen, kept across
    /// flushes (a gauge's change applies to its last value).
    var gauges: [Key: Double] = [:]
    /// Counters seen, kept across flushes when idle keys flush 0.
    var counters: Set<Key> = []
    var counts = Counts()

    init(maxKeys: Int, maxSetMembers: Int) {
        self.maxKeys = maxKeys
        self.maxSetMembers = maxSetMembers
    }

    mutating func add(_ packet: UnsafeRawBufferPointer) {
        counts.packets += 1
        let read = Statsd.parse(packet) { metric in add(metric) }
        counts.badLines += read.badLines
        counts.unsupported += read.unsupported
    }

    mutating func add(_ metric: Statsd.Metric) {
        let type: KeyType = switch metric.kind {
        case .counter: .counter
        case .gauge: .gauge
        case .timer, .histogram, .distribution: .timer
        case .set: .set
        }
        let key = Key(name: String(decoding: metric.name, as: UTF8.self), tags: Self.tags(metric.tags), type: type)
        if entries[key] == nil {
            guard entries.count < maxKeys else {
                counts.droppedKeys += 1
                return
            }
        }
        counts.metrics += 1
        switch metric.kind {
        case .counter:
            if counters.count < maxKeys { counters.insert(key) }
            let value = Statsd.saturating(metric.value / metric.sampleRate)
            if case .counter(let sum)? = entries[key] { entries[key] = .counter(Statsd.saturating(sum + value)) } else { entries[key] = .counter(value) }
        case .gauge:
            let last = gauges[key] ?? 0
            let value = metric.delta ? Statsd.saturating(last + metric.value) : metric.value
            if gauges[key] != nil || gauges.count < maxKeys { gauges[key] = value }
            entries[key] = .gauge(value)
        case .timer, .histogram, .distribution:
            let code = metric.kind == .timer ? "ms" : metric.kind == .histogram ? "h" : "d"
            var sketch = QuantileSketch()
            var weighted = 0.0
            if case .timer(_, let known, let w)? = entries[key] { sketch = known; weighted = w }
            entries[key] = nil  // keep the sketch uniquely referenced while it grows
            sketch.add(metric.value)
            entries[key] = .timer(code, sketch, Statsd.saturating(weighted + 1 / metric.sampleRate))
        case .set:
            var members: Set<Int> = []
            if case .set(let known)? = entries[key] { members = known }
            entries[key] = nil
            var hasher = Hasher()
            hasher.combine(bytes: metric.member)
            let member = hasher.finalize()
            if members.count < maxSetMembers || members.contains(member) {
                members.insert(member)
            } else {
                counts.droppedMembers += 1
            }
            entries[key] = .set(members)
        }
    }

    /// Tags sorted: `key:value,key`.
    static func tags(_ tags: [(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)]) -> String {
        guard !tags.isEmpty else { return "" }
        return tags.map { tag in
            let key = String(decoding: tag.key, as: UTF8.self)
            return tag.value.isEmpty ? key : key + ":" + String(decoding: tag.value, as: UTF8.self)
        }.sorted().joined(separator: ",")
    }

    /// The keys to flush, and the counts, both started again. Without
    /// `deleteIdle`, counters that received nothing flush 0 and gauges their
    /// last value.
    mutating func take(deleteIdle: Bool) -> ([(Key, Entry)], Counts) {
        var out = entries.map { ($0.key, $0.value) }
        if deleteIdle {
            // As statsd's deleteGauges: a change after the flush starts from 0.
            gauges.removeAll(keepingCapacity: true)
            counters.removeAll(keepingCapacity: true)
        } else {
            for (key, value) in gauges where entries[key] == nil { out.append((key, .gauge(value))) }
            for key in counters where entries[key] == nil { out.append((key, .counter(0))) }
        }
        out.sort { ($0.0.name, $0.0.tags, $0.0.type.order) < ($1.0.name, $1.0.tags, $1.0.type.order) }
        let counts = self.counts
        entries.removeAll(keepingCapacity: true)
        self.counts = Counts()
        return (out, counts)
    }
}

extension Aggregate.KeyType {
    /// Flushed in this order within one name and tags.
    var order: Int {
        switch self {
        case .counter: 0
        case .gauge: 1
        case .timer: 2
        case .set: 3
        }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(StatsdMonitor.self, a, r) }
