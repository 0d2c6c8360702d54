/// The per-interface counters of `/proc/net/dev`:
///
///     Inter-|   Receive                                                |  Transmit
///      face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
///         lo: 115547753  142219    0    0    0     0          0         0 115547753  142219    0    0    0     0       0          0
///
/// The column names come from the second header line, so a kernel that has
/// fewer columns (2.2 had no compressed or multicast) or more gives fewer or
/// more of them; values are the kernel's unsigned 64-bit counters as written.
public struct NetDev: Sendable, Equatable {
    /// One interface's line.
    public struct Interface: Sendable, Equatable {
        /// The interface name, as before the colon (`eth0`, `wlp2s0`, `veth1a2b@if5` never: the kernel writes the bare name).
        public var name: String
        /// The receive values, in the order of `NetDev.receiveColumns`.
        public var receive: [UInt64]
        /// The transmit values, in the order of `NetDev.transmitColumns`.
        public var transmit: [UInt64]

        public init(name: String, receive: [UInt64], transmit: [UInt64]) {
            self.name = name
            self.receive = receive
            self.transmit = transmit
        }
    }

    /// The receive columns' names as the header gives them (`bytes`, `packets`, `errs`, `drop`, `fifo`, `frame`, `compressed`, `multicast`).
    public var receiveColumns: [String]
    /// The transmit columns' names (`bytes`, `packets`, `errs`, `drop`, `fifo`, `colls`, `carrier`, `compressed`).
    public var transmitColumns: [String]
    /// The interfaces, in file order.
    public var interfaces: [Interface]
    /// The 1-based numbers of lines that were skipped as garbled (too few
    /// numbers, a value that is not one, no colon).
    public var skippedLines: [Int]

    public init(receiveColumns: [String], transmitColumns: [String], interfaces: [Interface], skippedLines: [Int] = []) {
        self.receiveColumns = receiveColumns
        self.transmitColumns = transmitColumns
        self.interfaces = interfaces
        self.skippedLines = skippedLines
    }

    /// Parses the text of `/proc/net/dev`. A garbled interface line is
    /// skipped (and listed in `skippedLines`), not fatal; extra values past
    /// the header's columns are ignored.
    /// - Throws: `ProbeError.malformed` when the header (line 2) is not
    ///   `face |receive columns|transmit columns`.
    public static func parse(_ text: String, path: String = "/proc/net/dev") throws(ProbeError) -> NetDev {
        try text.withUTF8Bytes { bytes in parse(bytes, path: path) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String) -> Result<NetDev, ProbeError> {
        var lines = LineIterator(bytes)
        _ = lines.next()
        guard let (_, header) = lines.next() else {
            return .failure(.malformed(path: path, line: 2, reason: "no column header"))
        }
        // " face |bytes packets …|bytes packets …"
        var cursor = header
        guard cursor.upTo(UInt8(ascii: "|")) != nil, let receive = cursor.upTo(UInt8(ascii: "|")) else {
            return .failure(.malformed(path: path, line: 2, reason: "expected 'face |receive|transmit' column names"))
        }
        let transmit = cursor.position..<cursor.end
        func names(_ range: Range<Int>) -> [String] {
            var fields = FieldCursor(bytes, range)
            var out: [String] = []
            while let f = fields.next() { out.append(bytes.string(f)) }
            return out
        }
        let receiveColumns = names(receive), transmitColumns = names(transmit)
        guard !receiveColumns.isEmpty, !transmitColumns.isEmpty else {
            return .failure(.malformed(path: path, line: 2, reason: "no receive or transmit columns"))
        }
        var interfaces: [Interface] = []
        var skipped: [Int] = []
        lines: while let (number, start) = lines.next() {
            var fields = start
            if fields.isAtEnd { continue }
            // The name may touch the first number on old kernels ("eth0:97048486").
            guard let nameRange = fields.upTo(UInt8(ascii: ":")) else { skipped.append(number); continue }
            var nameFields = FieldCursor(bytes, nameRange)
            guard let name = nameFields.next(), nameFields.isAtEnd else { skipped.append(number); continue }
            var rx: [UInt64] = []
            rx.reserveCapacity(receiveColumns.count)
            var tx: [UInt64] = []
            tx.reserveCapacity(transmitColumns.count)
            for _ in 0..<(receiveColumns.count + transmitColumns.count) {
                guard let field = fields.next(), let value = bytes.parseUInt64(field) else {
                    skipped.append(number)
                    continue lines
                }
                if rx.count < receiveColumns.count { rx.append(value) } else { tx.append(value) }
            }
            interfaces.append(Interface(name: bytes.string(name), receive: rx, transmit: tx))
        }
        return .success(NetDev(receiveColumns: receiveColumns, transmitColumns: transmitColumns,
                               interfaces: interfaces, skippedLines: skipped))
    }
}

extension FSRoot {
    /// Reads and parses `net/dev` under this root (the procfs root).
    public func netDev() throws(ProbeError) -> NetDev {
        try NetDev.parse(readText("net/dev"), path: path("net/dev"))
    }
}

/// Numbers as the kernel writes them in its network tables and sysfs
/// attributes: hexadecimal columns (`00011703` in softnet_stat, conntrack
/// statistics, the queues of /proc/net/udp) and `0x`-prefixed attributes
/// (`flags`, `dev_id`).
public enum KernelNumber {
    /// Parses unprefixed hexadecimal digits; nil when empty, on any other
    /// character, or past 64 bits (never traps).
    public static func hex(_ text: some StringProtocol) -> UInt64? {
        var value: UInt64 = 0
        var digits = 0
        for byte in text.utf8 {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            guard value >> 60 == 0 else { return nil }
            value = value << 4 | UInt64(digit)
            digits += 1
        }
        return digits > 0 ? value : nil
    }

    /// Parses a decimal integer (with an optional `-`) or a `0x`-prefixed
    /// hexadecimal one, as sysfs attributes come; nil when it is neither or
    /// does not fit in Int64.
    public static func integer(_ text: some StringProtocol) -> Int64? {
        if text.hasPrefix("0x") || text.hasPrefix("0X") {
            guard let value = hex(text.dropFirst(2)) else { return nil }
            return Int64(exactly: value)
        }
        return Int64(text)
    }
}
