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
/// The time is RFC 3339 in UTC with exactly nine fractional digits. Every
/// `Int64` a plugin may send is a valid time: the range of nanoseconds since
/// 1970 is 1677-09-21T00:12:43.145224192Z (`Int64.min`) to
/// 2262-04-11T23:47:16.854775807Z (`Int64.max`), well inside the four-digit
/// years of RFC 3339, so nothing is clamped and nothing can overflow.
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
    ///
    /// The line is written with raw pointer stores into scratch memory sized
    /// for the worst case (every string byte escaped to six), then appended
    /// to `out` at once: one capacity check per event instead of one per piece.
    public mutating func encode(_ event: Event, into out: inout [UInt8]) {
        var capacity = 160 + hostMember.count + Self.bound(event.monitor) + Self.bound(event.plugin) + Self.bound(event.kind)
        for field in event.fields { capacity += Self.bound(field.name) + Self.bound(field.value) + 2 }
        let (second, fraction) = Self.split(event.time)
        if second != cachedSecond {
            // The date and time of day are formatted only when the second changes.
            cachedPrefix.removeAll(keepingCapacity: true)
            // From whole seconds, never `second * 1e9`: for times near
            // Int64.min the rounded-down second times 1e9 is below Int64.min.
            Self.appendTimestamp(seconds: second, fraction: 0, to: &cachedPrefix)
            cachedPrefix.removeLast(10)  // "000000000Z"
            cachedSecond = second
        }
        let prefix = cachedPrefix, host = hostMember
        Self.write(capacity: capacity, to: &out) { w in
            w.bytes(#"{"time":""#)
            w.bytes(prefix)
            w.nineDigits(fraction)
            w.bytes(#"Z","#)
            w.bytes(host)
            w.bytes(#""monitor":"#)
            w.string(event.monitor)
            w.bytes(#","plugin":"#)
            w.string(event.plugin)
            w.bytes(#","kind":"#)
            w.string(event.kind)
            w.bytes(#","severity":""#)
            w.bytes(Self.severityNames[Int(event.severity.rawValue)])
            w.bytes(#"","seq":"#)
            w.integer(event.seq)
            w.bytes(#","fields":{"#)
            var first = true
            for field in event.fields {
                if !first { w.byte(UInt8(ascii: ",")) }
                first = false
                w.string(field.name)
                w.byte(UInt8(ascii: ":"))
                w.value(field.value)
            }
            w.bytes("}}\n")
        }
    }

    /// Bytes a string may need: quoted, every byte escaped as `\u00XX`.
    @inline(__always)
    static func bound(_ s: String) -> Int { s.utf8.count * 6 + 2 }

    @inline(__always)
    static func bound(_ v: FieldValue) -> Int {
        if case .string(let s) = v { return bound(s) }
        return 32  // the longest double, integer or boolean
    }

    /// Runs `body` with a writer over `capacity` bytes of scratch memory and
    /// appends what it wrote to `out`.
    @inline(__always)
    static func write(capacity: Int, to out: inout [UInt8], _ body: (inout RawWriter) -> Void) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { scratch in
            var writer = RawWriter(scratch.baseAddress!)
            body(&writer)
            precondition(writer.count <= capacity, "JSON line bound exceeded")
            out.append(contentsOf: UnsafeBufferPointer(start: scratch.baseAddress, count: writer.count))
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
        write(capacity: bound(value), to: &out) { $0.value(value) }
    }

    public static func appendDouble(_ d: Double, to out: inout [UInt8]) {
        write(capacity: 32, to: &out) { $0.double(d) }
    }

    public static func appendInteger<T: BinaryInteger>(_ value: T, to out: inout [UInt8]) {
        write(capacity: 32, to: &out) { $0.integer(value) }
    }

    public static func appendString(_ s: String, to out: inout [UInt8]) {
        write(capacity: bound(s), to: &out) { $0.string(s) }
    }

    /// `2026-11-21T21:50:29.123456789Z` for nanoseconds since the epoch.
    public static func appendTimestamp(_ ns: Int64, to out: inout [UInt8]) {
        let (seconds, fraction) = split(ns)
        appendTimestamp(seconds: seconds, fraction: fraction, to: &out)
    }

    /// The same from whole seconds since the epoch and nanoseconds past them
    /// (0 ≤ fraction < 1e9). Any second an `Int64` of nanoseconds can hold is
    /// within years 1677…2262; seconds beyond years 0000…9999 are clamped
    /// there rather than trapping.
    static func appendTimestamp(seconds unclamped: Int64, fraction: Int64, to out: inout [UInt8]) {
        // 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
        let seconds = max(-62_167_219_200, min(253_402_300_799, unclamped))
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

/// Writes JSON through a raw pointer into memory sized beforehand for the
/// worst case (see `JSONLineEncoder.write`): no capacity checks per byte.
struct RawWriter {
    private let start: UnsafeMutablePointer<UInt8>
    private var p: UnsafeMutablePointer<UInt8>

    init(_ base: UnsafeMutablePointer<UInt8>) {
        start = base
        p = base
    }

    var count: Int { p - start }

    @inline(__always)
    mutating func byte(_ b: UInt8) {
        p.initialize(to: b)
        p += 1
    }

    @inline(__always)
    mutating func bytes(_ s: StaticString) {
        p.initialize(from: s.utf8Start, count: s.utf8CodeUnitCount)
        p += s.utf8CodeUnitCount
    }

    @inline(__always)
    mutating func bytes(_ buffer: UnsafeBufferPointer<UInt8>) {
        guard let base = buffer.baseAddress else { return }
        p.initialize(from: base, count: buffer.count)
        p += buffer.count
    }

    @inline(__always)
    mutating func bytes(_ array: [UInt8]) {
        array.withUnsafeBufferPointer { bytes($0) }
    }

    /// A quoted, escaped JSON string.
    mutating func string(_ s: String) {
        byte(UInt8(ascii: "\""))
        if s.utf8.withContiguousStorageIfAvailable({ escaped($0) }) == nil {
            let copy = Array(s.utf8)
            copy.withUnsafeBufferPointer { escaped($0) }
        }
        byte(UInt8(ascii: "\""))
    }

    private static let hex: StaticString = "0123456789abcdef"

    /// UTF-8 bytes with JSON escapes (RFC 8259, and U+007F), clean runs copied whole.
    mutating func escaped(_ bytes: UnsafeBufferPointer<UInt8>) {
        var runStart = 0
        for i in 0..<bytes.count {
            let b = bytes[i]
            if b >= 0x20 && b != 0x22 && b != 0x5C && b != 0x7F { continue }
            if runStart < i { self.bytes(UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
            runStart = i + 1
            byte(0x5C)
            switch b {
            case 0x22: byte(0x22)
            case 0x5C: byte(0x5C)
            case 0x0A: byte(UInt8(ascii: "n"))
            case 0x0D: byte(UInt8(ascii: "r"))
            case 0x09: byte(UInt8(ascii: "t"))
            case 0x08: byte(UInt8(ascii: "b"))
            case 0x0C: byte(UInt8(ascii: "f"))
            default:
                self.bytes("u00")
                byte(Self.hex.utf8Start[Int(b >> 4)])
                byte(Self.hex.utf8Start[Int(b & 0xF)])
            }
        }
        if runStart < bytes.count { self.bytes(UnsafeBufferPointer(rebasing: bytes[runStart...])) }
    }

    mutating func value(_ value: FieldValue) {
        switch value {
        case .double(let d): double(d)
        case .int(let i): integer(i)
        case .bool(let b): if b { bytes("true") } else { bytes("false") }
        case .string(let s): string(s)
        }
    }

    /// NaN and infinities as `null`; otherwise the shortest form that reads
    /// back to the same value, which Swift's `description` gives and which is
    /// valid JSON for every finite double ("1.0", "1e-05", "5e+20").
    mutating func double(_ d: Double) {
        guard d.isFinite else {
            bytes("null")
            return
        }
        // Whole numbers below 2^53 (counters, sizes, most gauges) are
        // written as `description` writes them ("42.0"), without its
        // shortest-digits search: exact, since such a double is an integer.
        if d == d.rounded(.towardZero) && d.magnitude < 9_007_199_254_740_992 {
            if d == 0 && d.sign == .minus { byte(UInt8(ascii: "-")) }
            integer(Int64(d))
            bytes(".0")
            return
        }
        var text = d.description
        text.withUTF8 { bytes($0) }
    }

    mutating func integer<T: BinaryInteger>(_ value: T) {
        if value == 0 {
            byte(UInt8(ascii: "0"))
            return
        }
        if value < 0 { byte(UInt8(ascii: "-")) }
        // Magnitude of Int64.min does not fit Int64; go through UInt64.
        var n = UInt64(value.magnitude)
        var digits = 0
        var probe = n
        while probe > 0 {
            digits += 1
            probe /= 10
        }
        var i = digits
        while n > 0 {
            i -= 1
            (p + i).initialize(to: UInt8(ascii: "0") &+ UInt8(n % 10))
            n /= 10
        }
        p += digits
    }

    /// Nine digits of a fraction of a second, zero-padded.
    mutating func nineDigits(_ fraction: Int64) {
        var f = fraction
        for i in stride(from: 8, through: 0, by: -1) {
            (p + i).initialize(to: UInt8(ascii: "0") &+ UInt8(f % 10))
            f /= 10
        }
        p += 9
    }
}
