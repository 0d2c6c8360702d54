import Glibc

/// One `struct rfkill_event` as `/dev/rfkill` sends it (linux/rfkill.h),
/// in the machine's byte order:
///
///     __u32 idx; __u8 type; __u8 op; __u8 soft; __u8 hard;
///
/// 8 bytes: RFKILL_EVENT_SIZE_V1. Kernels since 5.11 append
/// `__u8 hard_block_reasons` (9 bytes), but a read returns at most the size
/// asked for, so asking for 8 bytes gets the same 8 bytes from every kernel.
struct RfkillEvent: Equatable {
    enum Op: UInt8 {
        /// A device was registered; also one per existing device right after open.
        case add = 0
        /// A device was unregistered.
        case del = 1
        /// A device's soft or hard block changed.
        case change = 2
        /// Every device of `type` (all of them for type 0) was soft-blocked
        /// or unblocked: what user space writes; the kernel answers with a
        /// `change` per device.
        case changeAll = 3
    }

    static let size = 8

    var index: UInt32
    /// RFKILL_TYPE_*: see `RadioType`.
    var type: UInt8
    var op: Op
    var soft: Bool
    var hard: Bool

    /// The event in 8 bytes; nil for an op this version does not know.
    init?(_ bytes: some Collection<UInt8>) {
        guard bytes.count >= Self.size else { return nil }
        let b = Array(bytes.prefix(Self.size))
        guard let op = Op(rawValue: b[5]) else { return nil }
        self.index = b.withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }  // host byte order
        self.type = b[4]
        self.op = op
        self.soft = b[6] != 0
        self.hard = b[7] != 0
    }

    init(index: UInt32, type: UInt8, op: Op, soft: Bool, hard: Bool) {
        self.index = index
        self.type = type
        self.op = op
        self.soft = soft
        self.hard = hard
    }

    /// The 8 bytes the kernel would send (for tests, and the inverse of `init?(_:)`).
    var bytes: [UInt8] {
        withUnsafeBytes(of: index) { Array($0) } + [type, op.rawValue, soft ? 1 : 0, hard ? 1 : 0]
    }
}

/// Reassembles events from reads: the character device returns one whole
/// event per read, a FIFO standing in for it (tests) may return part of one.
struct RfkillStream {
    private(set) var pending: [UInt8] = []

    /// How many bytes to ask for next: the rest of the current event, never
    /// more, so that each read of the device returns one event and a byte
    /// stream stays aligned.
    var wanted: Int { RfkillEvent.size - pending.count }

    enum Item: Equatable {
        case event(RfkillEvent)
        /// Eight bytes with an op this version does not know.
        case unknown(op: UInt8)
    }

    /// Adds the bytes of one read; returns the event they complete, if any.
    mutating func append(_ bytes: some Collection<UInt8>) -> Item? {
        pending += bytes
        guard pending.count >= RfkillEvent.size else { return nil }
        defer { pending.removeFirst(RfkillEvent.size) }
        if let event = RfkillEvent(pending) { return .event(event) }
        return .unknown(op: pending[5])
    }
}

/// The rfkill types, by the kernel's number (RFKILL_TYPE_*) and by the name
/// sysfs shows in `type`, as the names this plugin reports.
enum RadioType {
    /// Index: RFKILL_TYPE_*; 0 is RFKILL_TYPE_ALL, which no device has.
    static let names = ["unknown", "wlan", "bluetooth", "uwb", "wimax", "wwan", "gps", "fm", "nfc"]

    static func name(code: UInt8) -> String {
        Int(code) < names.count ? names[Int(code)] : "unknown"
    }

    /// sysfs says `ultrawideband` where the uapi says UWB; the others match.
    static func name(sysfs: String) -> String {
        if sysfs == "ultrawideband" { return "uwb" }
        return names.dropFirst().contains(sysfs) ? sysfs : "unknown"
    }

    /// The number `change_all` names a type by; nil for `unknown`.
    static func code(_ name: String) -> UInt8? {
        guard name != "unknown", let i = names.firstIndex(of: name) else { return nil }
        return UInt8(i)
    }
}

/// Opening the event device.
enum RfkillDevice {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Opens `path` for reading, non-blocking. A character device (the real
    /// one) or a FIFO (a test feeding recorded events) is accepted; anything
    /// else is refused with the reason.
    static func open(_ path: String) -> Result<Int32, Failure> {
        var fd: Int32
        repeat {
            fd = Glibc.open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        } while fd < 0 && errno == EINTR
        guard fd >= 0 else { return .failure(Failure(description: "cannot open \(path): \(errorText())")) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let text = errorText()
            close(fd)
            return .failure(Failure(description: "cannot stat \(path): \(text)"))
        }
        let kind = info.st_mode & S_IFMT
        guard kind == S_IFCHR || kind == S_IFIFO else {
            close(fd)
            return .failure(Failure(description: "\(path) is not a character device or a FIFO"))
        }
        return .success(fd)
    }

    enum ReadResult: Equatable {
        case bytes([UInt8])
        /// Nothing more for now (EAGAIN).
        case drained
        /// End of file: a FIFO whose last writer went away (the device never ends).
        case ended
        /// EIO, ENODEV…: the text of errno.
        case failed(String)
    }

    /// One read of at most `count` bytes; EINTR is retried.
    static func read(_ fd: Int32, count: Int) -> ReadResult {
        var buffer = [UInt8](repeating: 0, count: count)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, count) }
            if n > 0 { return .bytes(Array(buffer[0..<n])) }
            if n == 0 { return .ended }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .drained
            default: return .failed(errorText())
            }
        }
    }

    static func errorText() -> String { String(cString: strerror(errno)) }
}
