import Glibc

/// One kernel uevent, as the kernel sends it on NETLINK_KOBJECT_UEVENT:
///
///     add@/devices/pci0000:00/0000:00:14.0/usb1/1-3\0ACTION=add\0DEVPATH=/devices/…\0SUBSYSTEM=usb\0…
///
/// a header `ACTION@DEVPATH`, then NUL-separated `KEY=value` pairs.
public struct Uevent: Equatable, Sendable {
    public var action: String
    public var devpath: String
    public var subsystem: String
    public var devtype: String?
    /// Every `KEY=value` pair, in order (ACTION, DEVPATH and SUBSYSTEM included).
    public var properties: [(key: String, value: String)]

    public subscript(key: String) -> String? {
        for p in properties where p.key == key { return p.value }
        return nil
    }

    public static func == (a: Uevent, b: Uevent) -> Bool {
        a.action == b.action && a.devpath == b.devpath && a.subsystem == b.subsystem && a.devtype == b.devtype
            && a.properties.map(\.key) == b.properties.map(\.key) && a.properties.map(\.value) == b.properties.map(\.value)
    }

    /// A USB device's `PRODUCT=vendor/product/bcdDevice` (hex, no leading
    /// zeros: `781/5567/100`) as the four-digit ids sysfs shows (`0781`, `5567`).
    public var usbIDs: (vendor: String, product: String)? {
        guard let text = self["PRODUCT"] else { return nil }
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return nil }
        func pad(_ s: Substring) -> String? {
            guard !s.isEmpty, s.count <= 4, s.allSatisfy(\.isHexDigit) else { return nil }
            return String(repeating: "0", count: 4 - s.count) + s.lowercased()
        }
        guard let vendor = pad(parts[0]), let product = pad(parts[1]) else { return nil }
        return (vendor, product)
    }
}

public enum UeventParser {
    /// Larger datagrams are refused (the kernel's own buffer is 2 KiB of
    /// environment plus the header).
    public static let maxMessage = 16 << 10
    public static let maxProperties = 128
    public static let actions: Set<String> = ["add", "remove", "change", "move", "online", "offline", "bind", "unbind"]

    public enum Failure: Error, Equatable, CustomStringConvertible {
        /// A libudev (udevd) message, not the kernel's: skipped, not an error.
        case libudev
        case empty
        case tooLong(Int)
        case badHeader
        case missing(String)
        case mismatch(String)
        case tooManyProperties

        public var description: String {
            switch self {
            case .libudev: "a libudev message, not a kernel uevent"
            case .empty: "an empty message"
            case .tooLong(let n): "\(n) bytes, more than \(UeventParser.maxMessage)"
            case .badHeader: "no ACTION@DEVPATH header"
            case .missing(let key): "no \(key)="
            case .mismatch(let key): "\(key)= disagrees with the header"
            case .tooManyProperties: "more than \(UeventParser.maxProperties) properties"
            }
        }
    }

    /// Parses one datagram. Pure: no I/O, no state.
    public static func parse(_ bytes: some Collection<UInt8>) -> Result<Uevent, Failure> {
        guard !bytes.isEmpty else { return .failure(.empty) }
        guard bytes.count <= maxMessage else { return .failure(.tooLong(bytes.count)) }
        if bytes.starts(with: Array("libudev".utf8)) { return .failure(.libudev) }
        // NUL-separated records; a trailing NUL (or several) ends the message.
        let records = bytes.split(separator: 0, omittingEmptySubsequences: true)
            .map { String(decoding: $0, as: UTF8.self) }
        guard let header = records.first, let at = header.firstIndex(of: "@") else { return .failure(.badHeader) }
        let headerAction = String(header[..<at])
        let headerPath = String(header[header.index(after: at)...])
        guard !headerAction.isEmpty, headerPath.hasPrefix("/"), !headerAction.contains("=") else {
            return .failure(.badHeader)
        }
        var properties: [(key: String, value: String)] = []
        for record in records.dropFirst() {
            guard let eq = record.firstIndex(of: "="), eq != record.startIndex else { continue }  // not KEY=value: skipped
            guard properties.count < maxProperties else { return .failure(.tooManyProperties) }
            properties.append((String(record[..<eq]), String(record[record.index(after: eq)...])))
        }
        func value(_ key: String) -> String? { properties.first { $0.key == key }?.value }
        guard let action = value("ACTION") else { return .failure(.missing("ACTION")) }
        guard let devpath = value("DEVPATH") else { return .failure(.missing("DEVPATH")) }
        guard action == headerAction else { return .failure(.mismatch("ACTION")) }
        guard devpath == headerPath else { return .failure(.mismatch("DEVPATH")) }
        // A few kernel events (a module's) have no SUBSYSTEM; they are reported with an empty one.
        return .success(Uevent(action: action, devpath: devpath, subsystem: value("SUBSYSTEM") ?? "",
                               devtype: value("DEVTYPE"), properties: properties))
    }
}

/// Where uevents are read from: the kernel's NETLINK_KOBJECT_UEVENT socket
/// (bound to group 1, the kernel's own messages), or a unix datagram socket
/// bound at a path, to which anything may send uevent-format datagrams (tests
/// feed recorded events this way). Non-blocking; `drain` reads what is queued.
public final class UeventSocket: @unchecked Sendable {  // fd is immutable; drain runs on one worker
    public let fd: Int32
    /// The unix socket's path, removed by `close`; nil for netlink.
    public let path: String?

    public enum OpenError: Error, CustomStringConvertible {
        /// The path exists and is something else (a configuration error).
        case notASocket(String)
        /// The socket could not be opened or bound (EPERM in some containers, EADDRINUSE…).
        case failed(String)

        public var description: String {
            switch self {
            case .notASocket(let path): "\(path) exists and is not a socket"
            case .failed(let message): message
            }
        }
    }

    private init(fd: Int32, path: String?) {
        self.fd = fd
        self.path = path
    }

    deinit { Glibc.close(fd) }

    /// Removes the unix socket's path (the descriptor is closed on deinit).
    public func unlinkPath() {
        if let path { unlink(path) }
    }

    /// struct sockaddr_nl.
    private struct NetlinkAddress {
        var family = UInt16(16)  // AF_NETLINK
        var pad = UInt16(0)
        var pid = UInt32(0)
        var groups = UInt32(0)
    }

    private static func errorText() -> String { String(cString: strerror(errno)) }

    /// The kernel's uevents.
    public static func kernel() -> Result<UeventSocket, OpenError> {
        let s = socket(16 /* AF_NETLINK */, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                       15 /* NETLINK_KOBJECT_UEVENT */)
        guard s >= 0 else { return .failure(.failed("cannot open a NETLINK_KOBJECT_UEVENT socket: \(errorText())")) }
        var size: Int32 = 1 << 20
        _ = setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = NetlinkAddress(groups: 1)
        let ok = withUnsafePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<NetlinkAddress>.size)) }
        }
        guard ok == 0 else {
            let text = errorText()
            Glibc.close(s)
            return .failure(.failed("cannot bind the NETLINK_KOBJECT_UEVENT socket to the kernel's group: \(text)"))
        }
        return .success(UeventSocket(fd: s, path: nil))
    }

    /// A unix datagram socket bound at `path` (a stale socket there is replaced).
    public static func unix(_ path: String) -> Result<UeventSocket, OpenError> {
        var st = stat()
        if lstat(path, &st) == 0 {
            guard st.st_mode & S_IFMT == S_IFSOCK else { return .failure(.notASocket(path)) }
            unlink(path)  // a stale socket of an earlier run
        }
        let s = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard s >= 0 else { return .failure(.failed("socket(AF_UNIX): \(errorText())")) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in path.utf8.prefix(raw.count - 1).enumerated() { raw[i] = b }
        }
        let ok = withUnsafePointer(to: &address) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard ok == 0 else {
            let text = errorText()
            Glibc.close(s)
            return .failure(.failed("cannot bind a unix datagram socket at \(path): \(text)"))
        }
        return .success(UeventSocket(fd: s, path: path))
    }

    /// What one queued datagram was.
    public enum Datagram {
        case event(Uevent)
        /// Not a kernel uevent, or malformed (libudev's messages among them); `size` bytes.
        case skipped(UeventParser.Failure, size: Int)
        /// The receive queue overflowed (ENOBUFS): events were lost; re-read the state.
        case overflowed
    }

    /// Reads every queued datagram, in order. On netlink, messages not sent by
    /// the kernel (a process spoofing the group) are dropped.
    public func drain(_ each: (Datagram) -> Void) {
        var buffer = [UInt8](repeating: 0, count: UeventParser.maxMessage + 1)
        let netlink = path == nil
        while true {
            var sender = NetlinkAddress()
            var length = socklen_t(MemoryLayout<NetlinkAddress>.size)
            let n = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &sender) { p in
                    p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                        withUnsafeMutablePointer(to: &length) { lp in
                            recvfrom(fd, raw.baseAddress, raw.count, Int32(MSG_DONTWAIT), netlink ? sa : nil, netlink ? lp : nil)
                        }
                    }
                }
            }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == ENOBUFS { each(.overflowed); continue }
                return  // EAGAIN: drained
            }
            if netlink && sender.pid != 0 { continue }  // not from the kernel
            switch UeventParser.parse(buffer[0..<n]) {
            case .success(let event): each(.event(event))
            case .failure(let why): each(.skipped(why, size: n))
            }
        }
    }
}
