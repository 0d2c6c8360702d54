import Glibc
import VigilKit

/// Netlink messages and attributes (linux/netlink.h), parsed as pure
/// functions over bytes so that recorded streams can be replayed in tests:
///
///     struct nlmsghdr { __u32 nlmsg_len; __u16 nlmsg_type; __u16 nlmsg_flags; __u32 nlmsg_seq; __u32 nlmsg_pid; };
///     struct nlattr   { __u16 nla_len; __u16 nla_type; };
///
/// Both are in host byte order. A length counts its header and its payload,
/// not the padding that follows to the next multiple of 4 (NLMSG_ALIGN,
/// NLA_ALIGN). A length that runs past the end of the bytes, or that is
/// shorter than its own header, is an error, never a crash.
enum Netlink {
    static let messageHeaderSize = 16
    static let attributeHeaderSize = 4

    // nlmsg_type values reserved by netlink itself (below NLMSG_MIN_TYPE, 0x10).
    static let noop: UInt16 = 1
    static let error: UInt16 = 2
    static let done: UInt16 = 3
    static let overrun: UInt16 = 4

    // nlmsg_flags.
    static let request: UInt16 = 0x1
    static let multi: UInt16 = 0x2
    static let ack: UInt16 = 0x4
    static let dumpInterrupted: UInt16 = 0x10
    static let dump: UInt16 = 0x300  // NLM_F_ROOT | NLM_F_MATCH

    // nla_type flags.
    static let nestedFlag: UInt16 = 0x8000
    static let byteOrderFlag: UInt16 = 0x4000

    static func align(_ n: Int) -> Int { (n + 3) & ~3 }

    /// One netlink message: its header's fields and the payload after the header.
    struct Message: Equatable {
        var type: UInt16
        var flags: UInt16
        var seq: UInt32
        var pid: UInt32
        var payload: [UInt8]
    }

    /// One attribute: its type (without the nested and byte-order flags) and value.
    struct Attribute: Equatable {
        var type: UInt16
        var nested: Bool
        var value: [UInt8]

        var u16: UInt16? { value.count == 2 ? Netlink.load(value, 0) : nil }
        var u32: UInt32? { value.count == 4 ? Netlink.load(value, 0) : nil }
        var i32: Int32? { value.count == 4 ? Netlink.load(value, 0) : nil }
        /// A NLA_STRING or NLA_NUL_STRING: the bytes up to the first NUL.
        var text: String { String(decoding: value.prefix { $0 != 0 }, as: UTF8.self) }
        /// The attributes nested in this one.
        func children() throws(Failure) -> [Attribute] { try Netlink.attributes(value) }
    }

    enum Failure: Error, Equatable, CustomStringConvertible {
        /// A header or a length runs past the end of the bytes.
        case truncated(what: String, at: Int, needed: Int, left: Int)
        /// A length shorter than its own header.
        case badLength(what: String, at: Int, length: Int)
        /// The kernel answered a request with NLMSG_ERROR (or NLMSG_DONE) carrying −errno.
        case kernel(errno: Int32, request: String)
        /// The replies ended before the request's NLMSG_DONE (a recorded stream cut short).
        case incomplete(request: String)
        /// No complete reply within the exchange's deadline.
        case timedOut(request: String)
        /// NLMSG_OVERRUN, or a datagram larger than the receive buffer.
        case overrun(request: String)
        /// A system call failed.
        case system(call: String, errno: Int32)
        /// A reply without something it must have.
        case malformed(String)

        var description: String {
            switch self {
            case .truncated(let what, let at, let needed, let left):
                "\(what) at byte \(at) needs \(needed) bytes, \(left) left (truncated)"
            case .badLength(let what, let at, let length): "\(what) at byte \(at) has length \(length), shorter than its header"
            case .kernel(let errno, let request): "\(request): the kernel answered \(Netlink.errnoName(errno))"
            case .incomplete(let request): "\(request): the replies ended before NLMSG_DONE"
            case .timedOut(let request): "\(request): no complete reply in time"
            case .overrun(let request): "\(request): replies were lost (overrun)"
            case .system(let call, let errno): "\(call): \(String(cString: strerror(errno)))"
            case .malformed(let message): message
            }
        }
    }

    static func errnoName(_ code: Int32) -> String {
        switch code {
        case ENOENT: "ENOENT (\(String(cString: strerror(code))))"
        case ENODEV: "ENODEV (\(String(cString: strerror(code))))"
        case EOPNOTSUPP: "EOPNOTSUPP (\(String(cString: strerror(code))))"
        case EPERM: "EPERM (\(String(cString: strerror(code))))"
        default: "errno \(code) (\(String(cString: strerror(code))))"
        }
    }

    /// A fixed-width integer in host byte order at `offset`; the caller checked the bounds.
    static func load<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int) -> T {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: T.self) }
    }

    static func store<T: FixedWidthInteger>(_ value: T, into bytes: inout [UInt8]) {
        withUnsafeBytes(of: value) { bytes.append(contentsOf: $0) }
    }

    // MARK: parsing

    /// The message starting at `offset`, and the offset of the next one
    /// (aligned; the last message of a datagram may end unpadded).
    static func message(in bytes: [UInt8], at offset: Int) throws(Failure) -> (Message, next: Int) {
        let left = bytes.count - offset
        guard left >= messageHeaderSize else {
            throw .truncated(what: "a message header", at: offset, needed: messageHeaderSize, left: left)
        }
        let length = Int(load(bytes, offset) as UInt32)
        guard length >= messageHeaderSize else { throw .badLength(what: "a message", at: offset, length: length) }
        guard length <= left else { throw .truncated(what: "a message", at: offset, needed: length, left: left) }
        let message = Message(type: load(bytes, offset + 4), flags: load(bytes, offset + 6), seq: load(bytes, offset + 8),
                              pid: load(bytes, offset + 12), payload: Array(bytes[(offset + messageHeaderSize)..<(offset + length)]))
        return (message, min(offset + align(length), bytes.count))
    }

    /// Every message in `bytes` (one datagram, or a recorded stream of them).
    static func messages(_ bytes: [UInt8]) throws(Failure) -> [Message] {
        var result: [Message] = []
        var offset = 0
        while offset < bytes.count {
            let (message, next) = try message(in: bytes, at: offset)
            result.append(message)
            offset = next
        }
        return result
    }

    /// Every attribute in `bytes` (a message's payload after its family
    /// header, or a nested attribute's value).
    static func attributes(_ bytes: [UInt8]) throws(Failure) -> [Attribute] {
        var result: [Attribute] = []
        var offset = 0
        while offset < bytes.count {
            let left = bytes.count - offset
            guard left >= attributeHeaderSize else {
                throw .truncated(what: "an attribute header", at: offset, needed: attributeHeaderSize, left: left)
            }
            let length = Int(load(bytes, offset) as UInt16)
            let type: UInt16 = load(bytes, offset + 2)
            guard length >= attributeHeaderSize else { throw .badLength(what: "an attribute", at: offset, length: length) }
            guard length <= left else { throw .truncated(what: "an attribute", at: offset, needed: length, left: left) }
            result.append(Attribute(type: type & ~(nestedFlag | byteOrderFlag), nested: type & nestedFlag != 0,
                                    value: Array(bytes[(offset + attributeHeaderSize)..<(offset + length)])))
            offset = min(offset + align(length), bytes.count)
        }
        return result
    }

    /// The messages that answer one request, fed one by one as they are
    /// read: those with the request's sequence number (others are late
    /// answers to something earlier, and skipped) up to the reply's end,
    /// which is NLMSG_DONE, NLMSG_ERROR (an acknowledgement when its error
    /// is 0), or a message without NLM_F_MULTI. Pure: no I/O.
    struct Reply {
        let seq: UInt32
        let request: String
        private(set) var messages: [Message] = []
        private(set) var complete = false
        /// A dump changed while it was read (NLM_F_DUMP_INTR): its contents may be inconsistent.
        private(set) var interrupted = false

        init(seq: UInt32, request: String) {
            self.seq = seq
            self.request = request
        }

        mutating func add(_ message: Message) throws(Failure) {
            guard !complete, message.seq == seq else { return }
            switch message.type {
            case Netlink.noop: return
            case Netlink.overrun: throw .overrun(request: request)
            case Netlink.error:
                // struct nlmsgerr { int error; struct nlmsghdr msg; … }
                guard message.payload.count >= 4 else {
                    throw .truncated(what: "an NLMSG_ERROR payload", at: 0, needed: 4, left: message.payload.count)
                }
                let code: Int32 = Netlink.load(message.payload, 0)
                if code < 0 { throw .kernel(errno: -code, request: request) }
                complete = true
            case Netlink.done:
                // A dump that failed part-way ends with NLMSG_DONE carrying −errno.
                if message.payload.count >= 4, case let code: Int32 = Netlink.load(message.payload, 0), code < 0 {
                    throw .kernel(errno: -code, request: request)
                }
                complete = true
            default:
                if message.flags & Netlink.dumpInterrupted != 0 { interrupted = true }
                messages.append(message)
                if message.flags & Netlink.multi == 0 { complete = true }
            }
        }
    }

    // MARK: building

    /// One message: header, payload, padding.
    static func message(type: UInt16, flags: UInt16, seq: UInt32, pid: UInt32 = 0, payload: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        store(UInt32(messageHeaderSize + payload.count), into: &bytes)
        store(type, into: &bytes)
        store(flags, into: &bytes)
        store(seq, into: &bytes)
        store(pid, into: &bytes)
        bytes += payload
        bytes += [UInt8](repeating: 0, count: align(bytes.count) - bytes.count)
        return bytes
    }

    /// One attribute: header, value, padding.
    static func attribute(_ type: UInt16, _ value: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        store(UInt16(attributeHeaderSize + value.count), into: &bytes)
        store(type, into: &bytes)
        bytes += value
        bytes += [UInt8](repeating: 0, count: align(bytes.count) - bytes.count)
        return bytes
    }

    static func attribute(_ type: UInt16, u32 value: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        store(value, into: &bytes)
        return attribute(type, bytes)
    }

    /// A NUL-terminated string attribute.
    static func attribute(_ type: UInt16, string: String) -> [UInt8] { attribute(type, Array(string.utf8) + [0]) }
}

/// Where the replies to netlink requests come from: a socket, or a recorded stream.
protocol NetlinkTransport {
    /// Sends one request (a whole message whose sequence number is `seq`)
    /// and reads until its reply is complete; returns the reply's messages,
    /// its NLMSG_DONE or acknowledgement left out.
    mutating func exchange(_ request: [UInt8], seq: UInt32, name: String) throws(Netlink.Failure) -> Netlink.Reply
}

/// A NETLINK_GENERIC socket; every exchange is bounded by a deadline (a
/// read never blocks the caller for longer).
struct GenericNetlinkSocket: NetlinkTransport {
    static let receiveBuffer = 64 << 10
    let fd: Int32
    let timeout: Duration
    private var buffer: [UInt8]

    /// Opens and binds a socket (the kernel picks the port id); closed by `close()`.
    init(timeout: Duration) throws(Netlink.Failure) {
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 16 /* NETLINK_GENERIC */)
        guard fd >= 0 else { throw .system(call: "socket(AF_NETLINK, NETLINK_GENERIC)", errno: errno) }
        // struct sockaddr_nl { sa_family_t nl_family; unsigned short nl_pad; __u32 nl_pid; __u32 nl_groups; }
        var address: (UInt16, UInt16, UInt32, UInt32) = (UInt16(AF_NETLINK), 0, 0, 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, 12) }
        }
        guard bound == 0 else {
            let saved = errno
            Glibc.close(fd)
            throw .system(call: "bind(NETLINK_GENERIC)", errno: saved)
        }
        // Belt and braces: the exchange polls with a deadline and never blocks in recv or send.
        let ns = max(timeout.nanoseconds, 1_000_000)
        var limit = timeval(tv_sec: Int(ns / 1_000_000_000), tv_usec: Int(ns % 1_000_000_000 / 1000))
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        self.fd = fd
        self.timeout = timeout
        self.buffer = [UInt8](repeating: 0, count: Self.receiveBuffer)
    }

    func close() { Glibc.close(fd) }

    mutating func exchange(_ request: [UInt8], seq: UInt32, name: String) throws(Netlink.Failure) -> Netlink.Reply {
        let deadline = Worker.monotonicNow() + timeout.nanoseconds
        while true {
            let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
            if sent == request.count { break }
            if sent < 0 && errno == EINTR { continue }
            throw .system(call: "send(\(name))", errno: sent < 0 ? errno : EMSGSIZE)
        }
        var reply = Netlink.Reply(seq: seq, request: name)
        while !reply.complete {
            let left = deadline - Worker.monotonicNow()
            guard left > 0 else { throw .timedOut(request: name) }
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0)]
            let ready = Glibc.poll(&fds, 1, Int32(clamping: (left + 999_999) / 1_000_000))
            if ready < 0 && errno == EINTR { continue }
            guard ready >= 0 else { throw .system(call: "poll(\(name))", errno: errno) }
            guard ready > 0 else { throw .timedOut(request: name) }
            // MSG_TRUNC: recv returns the datagram's real length, so one larger than the buffer is seen.
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT) | Int32(MSG_TRUNC)) }
            if n < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                if errno == ENOBUFS { throw .overrun(request: name) }
                throw .system(call: "recv(\(name))", errno: errno)
            }
            guard n <= buffer.count else { throw .overrun(request: name) }
            for message in try Netlink.messages(Array(buffer[0..<n])) { try reply.add(message) }
        }
        return reply
    }
}

/// A recorded stream of the kernel's replies, as recv(2) would have read
/// them one after the other: each exchange reads on from where the last one
/// stopped. Requests are not sent anywhere; the sequence numbers in the
/// stream must be those the requests carry (1, 2, 3… in a session).
struct RecordedNetlinkStream: NetlinkTransport {
    let bytes: [UInt8]
    private(set) var offset = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func exchange(_ request: [UInt8], seq: UInt32, name: String) throws(Netlink.Failure) -> Netlink.Reply {
        var reply = Netlink.Reply(seq: seq, request: name)
        while !reply.complete {
            guard offset < bytes.count else { throw .incomplete(request: name) }
            let (message, next) = try Netlink.message(in: bytes, at: offset)
            offset = next
            try reply.add(message)
        }
        return reply
    }
}
