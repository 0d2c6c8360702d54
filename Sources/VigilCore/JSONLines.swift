/// Encodes events as JSON Lines, the one wire format of every JSON sink:
///
///     {"time":"2026-11-21T21:50:29.123456789Z","host":"web-1","monitor":"cpu","plugin":"cpu",
///      "kind":"sample","severity":"info","seq":1042,"fields":{"usage":0.12}}
///
/// Every line is valid JSON whatever a plugin sent:
/// - strings are escaped per RFC 8259: `"` `\` and every control character
///   (U+0000–U+001F as `\n`, `\t`… or `\u00XX`, and U+007F as `\u007f`);
///   invalid UTF-8 never reaches the encoder (the host decodes plugin strings
///   with replacement, so bad bytes arrive here as U+FFFD);
/// - NaN and ±infinity, which JSON cannot express, are written as `null`;
/// - integers are written exactly; doubles in the shortest form that reads
///   back to the same value (`0.1`, `1e-05`, `5e+20`), integral ones with `.0`.
///
/// The time is RFC 3339 in UTC with exactly nine fractional digits.
public struct JSONLineEncoder: Sendable {
    /// `"host":"…",` pre-encoded once per run.
    private let hostMember: [UInt8]
    /// The timestamp up to the seconds (`2026-11-21T21:50:29.`), for the last
    /// second seen: consecutive events mostly share it.
    private var cachedSecond = Int64.min
    private var cachedPrefix: [UInt8] = []

    // Constant parts as StaticStrings: appended from their fixed address, with
    // no lazy initialisation check and no reference counting per event.
    private static let severityNames: [StaticString] = ["debug", "info", "notice", "warning", "error", "critical"]

    public init(host: String) {
        var member: [UInt8] = []
        member.append(contentsOf: #""host":"#.utf8)
        JSONLineEncoder.appendString(host, to: &member)
        member.append(UInt8(ascii: ","))
        self.hostMember = member
    }

    /// Appends one line (with its trailing `\n`) to `out`.
    public mutating func encode(_ event: Event, into out: inout [UInt8]) {
        Self.append(#"{"time":""#, to: &out)
        appendCachedTimestamp(event.time, to: &out)
        Self.append(#"","#, to: &out)
        out.append(contentsOf: hostMember)
        Self.append(#""monitor":"#, to: &out)
        Self.appendString(event.monitor, to: &out)
        Self.append(#","plugin":"#, to: &out)
        Self.appendString(event.plugin, to: &out)
        Self.append(#","kind":"#, to: &out)
        Self.appendString(event.kind, to: &out)
        Self.append(#","severity":""#, to: &out)
        Self.append(Self.severityNames[Int(event.severity.rawValue)], to: &out)
        Self.append(#"","seq":"#, to: &out)
        Self.appendInteger(event.seq, to: &out)
        Self.append(#","fields":{"#, to: &out)
        var first = true
        for field in event.fields {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            Self.appendString(field.name, to: &out)
            out.append(UInt8(ascii: ":"))
            Self.appendValue(field.value, to: &out)
        }
        Self.append("}}\n", to: &out)
    }

    @inline(__always)
    static func append(_ s: StaticString, to out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: s.utf8Start, count: s.utf8CodeUnitCount))
    }

    /// The timestamp, formatting the date and time of day only when the second changes.
    private mutating func appendCachedTimestamp(_ ns: Int64, to out: inout [UInt8]) {
        let (second, fraction) = Self.split(ns)
        if second != cachedSecond {
            cachedPrefix.removeAll(keepingCapacity: true)
            Self.appendTimestamp(second * 1_000_000_000, to: &cachedPrefix)
            cachedPrefix.removeLast(10)  // "000000000Z"
            cachedSecond = second
        }
        out.append(contentsOf: cachedPrefix)
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 10) { digits in
            var f = fraction
            for i in stride(from: 8, through: 0, by: -1) {
                digits[i] = UInt8(ascii: "0") &+ UInt8(f % 10)
                f /= 10
            }
            digits[9] = UInt8(ascii: "Z")
            out.append(contentsOf: digits)
        }
    }

    /// One event as a `String` line, without the trailing newline.
    public func line(_ event: Event) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        var encoder = self
        encoder.encode(event, into: &bytes)
        bytes.removeLast()
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: - pieces

    public static func appendValue(_ value: FieldValue, to out: inout [UInt8]) {
        switch value {
        case .double(let d): appendDouble(d, to: &out)
        case .int(let i): appendInteger(i, to: &out)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .string(let s): appendString(s, to: &out)
        }
    }

    public static func appendDouble(_ d: Double, to out: inout [UInt8]) {
        guard d.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        // Swift's description is the shortest round-tripping form and is valid
        // JSON for every finite value ("1.0", "1e-05", "-0.0", "5e+20").
        out.append(contentsOf: d.description.utf8)
    }

    public static func appendInteger<T: BinaryInteger>(_ value: T, to out: inout [UInt8]) {
        if value == 0 {
            out.append(UInt8(ascii: "0"))
            return
        }
        var digits: (UInt64, Bool)
        if value < 0 {
            // Magnitude of Int64.min does not fit Int64; go through UInt64.
            digits = (UInt64(value.magnitude), true)
        } else {
            digits = (UInt64(value), false)
        }
        if digits.1 { out.append(UInt8(ascii: "-")) }
        var buffer: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes of scratch
        withUnsafeMutableBytes(of: &buffer) { scratch in
            var n = digits.0
            var i = scratch.count
            while n > 0 {
                i -= 1
                scratch[i] = UInt8(ascii: "0") &+ UInt8(n % 10)
                n /= 10
            }
            out.append(contentsOf: scratch[i...])
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    public static func appendString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        if s.utf8.withContiguousStorageIfAvailable({ appendEscaped($0, to: &out) }) == nil {
            let copy = Array(s.utf8)
            copy.withUnsafeBufferPointer { appendEscaped($0, to: &out) }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends UTF-8 bytes with JSON escapes, copying clean runs whole.
    @inline(__always)
    static func appendEscaped(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        var runStart = 0
        for i in 0..<bytes.count {
            let b = bytes[i]
            if b >= 0x20 && b != 0x22 && b != 0x5C && b != 0x7F { continue }
            if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
            runStart = i + 1
            switch b {
            case 0x22: out.append(0x5C); out.append(0x22)
            case 0x5C: out.append(0x5C); out.append(0x5C)
            case 0x0A: out.append(0x5C); out.append(UInt8(ascii: "n"))
            case 0x0D: out.append(0x5C); out.append(UInt8(ascii: "r"))
            case 0x09: out.append(0x5C); out.append(UInt8(ascii: "t"))
            case 0x08: out.append(0x5C); out.append(UInt8(ascii: "b"))
            case 0x0C: out.append(0x5C); out.append(UInt8(ascii: "f"))
            default:
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                        hex[Int(b >> 4)], hex[Int(b & 0xF)]])
            }
        }
        if runStart < bytes.count {
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
    }

    /// `2026-11-21T21:50:29.123456789Z` for nanoseconds since the epoch.
    public static func appendTimestamp(_ ns: Int64, to out: inout [UInt8]) {
        let (seconds, fraction) = split(ns)
        var days = seconds / 86_400
        var secondOfDay = seconds % 86_400
        if secondOfDay < 0 {
            secondOfDay += 86_400
            days -= 1
        }
        let (year, month, day) = civil(fromDays: days)
        func two(_ v: Int64) {
            out.append(UInt8(ascii: "0") &+ UInt8(v / 10))
            out.append(UInt8(ascii: "0") &+ UInt8(v % 10))
        }
        let y = max(0, min(9999, year))
        two(y / 100); two(y % 100)
        out.append(UInt8(ascii: "-")); two(month)
        out.append(UInt8(ascii: "-")); two(day)
        out.append(UInt8(ascii: "T")); two(secondOfDay / 3600)
        out.append(UInt8(ascii: ":")); two(secondOfDay / 60 % 60)
        out.append(UInt8(ascii: ":")); two(secondOfDay % 60)
        out.append(UInt8(ascii: "."))
        var divisor: Int64 = 100_000_000
        while divisor > 0 {
            out.append(UInt8(ascii: "0") &+ UInt8(fraction / divisor % 10))
            divisor /= 10
        }
        out.append(UInt8(ascii: "Z"))
    }

    /// Whole seconds (rounded down, also before 1970) and the nanoseconds past them.
    @inline(__always)
    static func split(_ ns: Int64) -> (seconds: Int64, fraction: Int64) {
        let fraction = ns % 1_000_000_000
        return fraction < 0 ? (ns / 1_000_000_000 - 1, fraction + 1_000_000_000) : (ns / 1_000_000_000, fraction)
    }

    /// Proleptic Gregorian date of a day count since 1970-01-01
    /// (the well-known era-based algorithm: 400-year eras of 146 097 days).
    static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
