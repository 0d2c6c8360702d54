/// One named number of a /proc/net statistics file: `Tcp` `ActiveOpens` 12050
/// from /proc/net/snmp, `Ip6` `InOctets` 256 from /proc/net/snmp6, `TCP`
/// `inuse` 5 from /proc/net/sockstat.
public struct NetCounter: Sendable, Equatable {
    /// The table or line label without its colon (`Tcp`, `TcpExt`, `Ip6`, `TCP`, `sockets`).
    public var section: String
    /// The counter's name as the kernel writes it (`ActiveOpens`, `InOctets`, `inuse`).
    public var name: String
    /// The value. The kernel writes unsigned longs (and a few signed ones, such
    /// as Tcp MaxConn -1); a value beyond Int64 saturates at `Int64.max`, one
    /// below saturates at `Int64.min`.
    public var value: Int64

    /// Creates a value.
    public init(section: String, name: String, value: Int64) {
        self.section = section
        self.name = name
        self.value = value
    }
}

/// Parsers of the three text layouts of the kernel's network statistics.
/// None of them fails on content: a line that does not fit its layout, or a
/// value that is not a number, is skipped (the counters it held are absent),
/// so that a kernel that adds tables, columns or odd lines costs only what it
/// changed.
public enum NetCounters {
    /// `/proc/net/snmp` and `/proc/net/netstat`: each table is two lines with
    /// the same label, the names then the values:
    ///
    ///     Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens …
    ///     Tcp: 1 200 120000 -1 12050 …
    ///
    /// Names and values are paired by position; a names line without its
    /// values line (or with a different label) is skipped, and surplus names
    /// or values on either line are ignored.
    public static func parseTables(_ text: String) -> [NetCounter] {
        var out: [NetCounter] = []
        var pending: (label: Range<Int>, names: FieldCursor)?
        LineIterator.forEachLine(of: text) { bytes, fields in
            guard let label = fields.next(), label.count > 1, bytes[label.upperBound - 1] == UInt8(ascii: ":") else {
                pending = nil
                return
            }
            let bare = label.lowerBound..<(label.upperBound - 1)
            if let (prior, names) = pending, bytes.string(prior) == bytes.string(bare) {
                pending = nil
                let section = bytes.string(bare)
                var nameCursor = names
                while let name = nameCursor.next(), let value = fields.next() {
                    guard let number = bytes.parseSaturatingInt64(value) else { continue }
                    out.append(NetCounter(section: section, name: bytes.string(name), value: number))
                }
            } else {
                pending = (bare, fields)
            }
        }
        return out
    }

    /// `/proc/net/snmp6`: one `NameValue` pair a line, the section being the
    /// name up to and including its first `6` (`Ip6InReceives 2` is section
    /// `Ip6`, name `InReceives`; `UdpLite6InErrors` is `UdpLite6`,
    /// `InErrors`). A name without a `6` has an empty section.
    public static func parseSNMP6(_ text: String) -> [NetCounter] {
        var out: [NetCounter] = []
        LineIterator.forEachLine(of: text) { bytes, fields in
            guard let key = fields.next(), let value = fields.next(),
                  let number = bytes.parseSaturatingInt64(value) else { return }
            var split = key.lowerBound
            while split < key.upperBound, bytes[split] != UInt8(ascii: "6") { split += 1 }
            if split == key.upperBound { split = key.lowerBound } else { split += 1 }
            out.append(NetCounter(section: bytes.string(key.lowerBound..<split),
                                  name: bytes.string(split..<key.upperBound), value: number))
        }
        return out
    }

    /// `/proc/net/sockstat` and `sockstat6`: a label then name-value pairs,
    /// `TCP: inuse 5 orphan 0 tw 0 alloc 5 mem 52`. A pair whose value is not
    /// a number is skipped; so is a trailing name without a value.
    public static func parsePairs(_ text: String) -> [NetCounter] {
        var out: [NetCounter] = []
        LineIterator.forEachLine(of: text) { bytes, fields in
            guard let label = fields.next(), label.count > 1, bytes[label.upperBound - 1] == UInt8(ascii: ":") else { return }
            let section = bytes.string(label.lowerBound..<(label.upperBound - 1))
            while let name = fields.next(), let value = fields.next() {
                guard let number = bytes.parseSaturatingInt64(value) else { continue }
                out.append(NetCounter(section: section, name: bytes.string(name), value: number))
            }
        }
        return out
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// Parses an optionally signed decimal integer, saturating at the bounds
    /// of Int64 rather than failing; nil when the range is empty or holds
    /// anything but a sign and digits.
    func parseSaturatingInt64(_ range: Range<Int>) -> Int64? {
        guard !range.isEmpty else { return nil }
        var digits = range
        let negative = self[range.lowerBound] == UInt8(ascii: "-")
        if negative || self[range.lowerBound] == UInt8(ascii: "+") { digits = (range.lowerBound + 1)..<range.upperBound }
        guard !digits.isEmpty else { return nil }
        var magnitude: UInt64 = 0
        var saturated = false
        for i in digits {
            let d = self[i] &- 0x30
            guard d < 10 else { return nil }
            if saturated { continue }
            let (m, o1) = magnitude.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(UInt64(d))
            if o1 || o2 { saturated = true } else { magnitude = s }
        }
        if negative {
            if saturated || magnitude > UInt64(Int64.max) + 1 { return .min }
            return magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude)
        }
        return saturated || magnitude > UInt64(Int64.max) ? .max : Int64(magnitude)
    }
}
