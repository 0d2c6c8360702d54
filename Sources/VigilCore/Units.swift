/// Parsing and printing of the manifest's durations, sizes and percentages.
///
/// Numbers are read exactly, in integer arithmetic: a value that does not fit
/// in Int64 nanoseconds or bytes is refused (nil), never rounded through a
/// Double and never trapped on. The manifest's own, tighter limits are in
/// `ManifestLimits`.
public enum Units {
    /// Nanoseconds per duration unit accepted in manifests.
    static let durationUnits: [(String, Int64)] = [
        ("ns", 1), ("us", 1_000), ("µs", 1_000), ("ms", 1_000_000), ("s", 1_000_000_000), ("m", 60_000_000_000),
        ("h", 3_600_000_000_000), ("d", 86_400_000_000_000),
    ]

    /// Parses `250ms`, `5s`, `1.5m`, `1h30m`, `100us`, `0`. Returns nanoseconds,
    /// or nil with no unit (other than a bare `0`), an unknown unit, a negative
    /// value or one past Int64 nanoseconds (about 106 751 days).
    public static func parseDuration(_ text: String) -> Int64? {
        let s = text.trimmingSpaces()
        if s == "0" { return 0 }
        var total: Int64 = 0
        var rest = Substring(s)
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let numberEnd = rest.firstIndex(where: { !Self.isNumberCharacter($0) }) ?? rest.endIndex
            let number = rest[rest.startIndex..<numberEnd]
            rest = rest[numberEnd...]
            let unitEnd = rest.firstIndex(where: Self.isNumberCharacter) ?? rest.endIndex
            let unit = rest[rest.startIndex..<unitEnd]
            rest = rest[unitEnd...]
            guard let scale = durationUnits.first(where: { $0.0 == unit })?.1,
                  let part = scaled(number, by: scale) else { return nil }
            let (sum, overflow) = total.addingReportingOverflow(part)
            guard !overflow else { return nil }
            total = sum
        }
        return total
    }

    /// `250ms`, `5s`, `90s`, `2h`: the largest unit that spells the duration exactly.
    public static func formatDuration(_ ns: Int64) -> String {
        if ns == 0 { return "0s" }
        let units: [(String, Int64)] = [("h", 3_600_000_000_000), ("m", 60_000_000_000), ("s", 1_000_000_000),
                                        ("ms", 1_000_000), ("us", 1_000)]
        for (name, size) in units where ns % size == 0 { return "\(ns / size)\(name)" }
        return "\(ns)ns"
    }

    static let sizeUnits: [(String, Int64)] = [
        ("", 1), ("b", 1), ("B", 1),
        ("k", 1_000), ("K", 1_000), ("kB", 1_000), ("KB", 1_000), ("M", 1_000_000), ("MB", 1_000_000),
        ("G", 1_000_000_000), ("GB", 1_000_000_000), ("T", 1_000_000_000_000), ("TB", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000), ("PB", 1_000_000_000_000_000),
        ("Ki", 1 << 10), ("KiB", 1 << 10), ("Mi", 1 << 20), ("MiB", 1 << 20),
        ("Gi", 1 << 30), ("GiB", 1 << 30), ("Ti", 1 << 40), ("TiB", 1 << 40), ("Pi", 1 << 50), ("PiB", 1 << 50),
    ]

    /// Parses `4096`, `64MiB`, `1.5GB`, `512 KiB`. Returns bytes, or nil for
    /// anything else or a size past Int64 bytes.
    public static func parseSize(_ text: String) -> Int64? {
        let s = Substring(text.trimmingSpaces())
        let numberEnd = s.firstIndex(where: { !Self.isNumberCharacter($0) }) ?? s.endIndex
        let unit = s[numberEnd...].trimmingSpaces()
        guard let scale = sizeUnits.first(where: { $0.0 == unit })?.1 else { return nil }
        return scaled(s[s.startIndex..<numberEnd], by: scale)
    }

    public static func formatSize(_ bytes: Int64) -> String {
        for (name, size) in [("PiB", Int64(1) << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        where bytes >= size && bytes % size == 0 {
            return "\(bytes / size)\(name)"
        }
        return "\(bytes)"
    }

    /// Parses `25%`, `150%`, `12.5%`, `25 %`: the number before the sign, or
    /// nil for anything else (a bare number included). A number too large for
    /// a Double is infinity, for the caller's range to refuse.
    public static func parsePercent(_ text: String) -> Double? {
        let s = text.trimmingSpaces()
        guard s.hasSuffix("%") else { return nil }
        let number = s.dropLast().trimmingSpaces()
        guard number.contains(where: { ("0"..."9").contains($0) }), number.allSatisfy(Self.isNumberCharacter),
              number.count(where: { $0 == "." }) <= 1 else { return nil }
        return Double(number)
    }

    /// `25%`, `12.5%`.
    public static func formatPercent(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? "\(Int64(value))%" : "\(value)%"
    }

    private static func isNumberCharacter(_ c: Character) -> Bool {
        c == "." || ("0"..."9").contains(c)
    }

    /// `DIGITS`, `DIGITS.DIGITS`, `DIGITS.` or `.DIGITS` times `scale`, rounded
    /// to the nearest whole unit; nil when malformed or past Int64.
    static func scaled(_ number: Substring, by scale: Int64) -> Int64? {
        let parts = number.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count <= 2, !number.isEmpty, number != "." else { return nil }
        var whole: Int64 = 0
        for c in parts[0].utf8 {
            let (times10, o1) = whole.multipliedReportingOverflow(by: 10)
            let (next, o2) = times10.addingReportingOverflow(Int64(c - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            whole = next
        }
        let (value, overflow) = whole.multipliedReportingOverflow(by: scale)
        guard !overflow else { return nil }
        guard parts.count == 2 else { return value }
        // The fraction, to 18 digits (10^18 fits in UInt64; further digits are far below a nanosecond or a byte).
        var fraction: UInt64 = 0, denominator: UInt64 = 1
        for c in parts[1].utf8.prefix(18) {
            fraction = fraction * 10 + UInt64(c - UInt8(ascii: "0"))
            denominator *= 10
        }
        // fraction / denominator < 1, so fraction * scale / denominator < scale: no overflow.
        let (quotient, remainder) = denominator.dividingFullWidth(UInt64(scale).multipliedFullWidth(by: fraction))
        let rounded = Int64(quotient) + (remainder >= denominator - remainder ? 1 : 0)
        let (sum, o3) = value.addingReportingOverflow(rounded)
        return o3 ? nil : sum
    }
}

extension StringProtocol {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return String(s)
    }
}

/// "1 monitor", "3 monitors", "0 monitors": a count with its noun, in the
/// plural unless it is one (`plural` where the noun's is not noun + "s").
public func counted(_ n: some BinaryInteger, _ noun: String, plural: String? = nil) -> String {
    "\(n) \(n == 1 ? noun : plural ?? noun + "s")"
}
