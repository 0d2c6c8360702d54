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

    public init(host: String) {
        var member: [UInt8] = []
        member.append(contentsOf: #""host":"#.utf8)
        JSONLineEncoder.appendString(host, to: &member)
        member.append(UInt8(ascii: ","))
        self.hostMember = member
    }

    /// Appends one line (with its trailing `\n`) to `out`.
    public func encode(_ event: Event, into out: inout [UInt8]) {
        out.append(contentsOf: #"{"time":""#.utf8)
        Self.appendTimestamp(event.time, to: &out)
        out.append(contentsOf: #"","#.utf8)
        out.append(contentsOf: hostMember)
        out.append(contentsOf: #""monitor":"#.utf8)
        Self.appendString(event.monitor, to: &out)
        out.append(contentsOf: #","plugin":"#.utf8)
        Self.appendString(event.plugin, to: &out)
        out.append(contentsOf: #","kind":"#.utf8)
        Self.appendString(event.kind, to: &out)
        out.append(contentsOf: #","severity":""#.utf8)
        out.append(contentsOf: event.severity.name.utf8)
        out.append(contentsOf: #"","seq":"#.utf8)
        Self.appendInteger(event.seq, to: &out)
        out.append(contentsOf: #","fields":{"#.utf8)
        var first = true
        for field in event.fields {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            Self.appendString(field.name, to: &out)
            out.append(UInt8(ascii: ":"))
            Self.appendValue(field.value, to: &out)
        }
        out.append(contentsOf: "}}\n".utf8)
    }

    /// One event as a `String` line, without the trailing newline.
    public func line(_ event: Event) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        encode(event, into: &bytes)
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
        var s = s
        s.withUTF8 { bytes in
            var runStart = 0
            for i in 0..<bytes.count {
                let b = bytes[i]
                if b >= 0x20 && b != 0x22 && b != 0x5C && b != 0x7F { continue }
                if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
                runStart = i + 1
                switch b {
                case 0x22: out.append(contentsOf: #"\""#.utf8)
                case 0x5C: out.append(contentsOf: #"\\"#.utf8)
                case 0x0A: out.append(contentsOf: #"\n"#.utf8)
                case 0x0D: out.append(contentsOf: #"\r"#.utf8)
                case 0x09: out.append(contentsOf: #"\t"#.utf8)
                case 0x08: out.append(contentsOf: #"\b"#.utf8)
                case 0x0C: out.append(contentsOf: #"\f"#.utf8)
                default:
                    out.append(contentsOf: #"\u00"#.utf8)
                    out.append(hex[Int(b >> 4)])
                    out.append(hex[Int(b & 0xF)])
                }
            }
            if runStart < bytes.count {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `2026-11-21T21:50:29.123456789Z` for nanoseconds since the epoch.
    public static func appendTimestamp(_ ns: Int64, to out: inout [UInt8]) {
        var seconds = ns / 1_000_000_000
        var fraction = ns % 1_000_000_000
        if fraction < 0 {
            fraction += 1_000_000_000
            seconds -= 1
        }
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
