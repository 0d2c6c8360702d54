/// Reads back one line of Vigil's JSON Lines into an `Event` and its host
/// name, keeping field types exact (an integer stays `.int`, `1.0` is
/// `.double`, `null` — a NaN or infinity on the way out — reads as `.double(.nan)`).
/// Used by `vigil tail` and by tests; strict: anything that is not valid JSON
/// of the event schema is an error.
public struct JSONLineDecoder: Sendable {
    public struct DecodingError: Error, Sendable, CustomStringConvertible {
        public var offset: Int
        public var reason: String
        public var description: String { "invalid event JSON at byte \(offset): \(reason)" }
    }

    public init() {}

    public func decode(_ line: some StringProtocol) throws(DecodingError) -> (host: String, event: Event) {
        try decode(Array(line.utf8))
    }

    public func decode(_ bytes: [UInt8]) throws(DecodingError) -> (host: String, event: Event) {
        var p = Parser(bytes: bytes)
        let value = try p.parseValue()
        p.skipSpace()
        guard p.i == bytes.count else { throw DecodingError(offset: p.i, reason: "trailing characters") }
        guard case .object(let members) = value else { throw DecodingError(offset: 0, reason: "not an object") }
        func member(_ name: String) -> JSON? { members.first { $0.0 == name }?.1 }
        func string(_ name: String) throws(DecodingError) -> String {
            guard case .string(let s)? = member(name) else { throw DecodingError(offset: 0, reason: "missing string '\(name)'") }
            return s
        }
        guard case .number(let seqText, _)? = member("seq"), let seq = UInt64(seqText) else {
            throw DecodingError(offset: 0, reason: "missing integer 'seq'")
        }
        let timeText = try string("time")
        guard let time = Self.parseTimestamp(timeText) else { throw DecodingError(offset: 0, reason: "bad time '\(timeText)'") }
        let severityName = try string("severity")
        guard let severity = Severity(name: severityName) else { throw DecodingError(offset: 0, reason: "bad severity '\(severityName)'") }
        guard case .object(let fieldMembers)? = member("fields") else { throw DecodingError(offset: 0, reason: "missing object 'fields'") }
        var fields: [Field] = []
        for (name, value) in fieldMembers {
            switch value {
            case .string(let s): fields.append(Field(name, .string(s)))
            case .bool(let b): fields.append(Field(name, .bool(b)))
            case .null: fields.append(Field(name, .double(.nan)))
            case .number(let text, let integral):
                if integral, let i = Int64(text) { fields.append(Field(name, .int(i))) }
                else if let d = Double(text) { fields.append(Field(name, .double(d))) }
                else { throw DecodingError(offset: 0, reason: "bad number '\(text)' in field '\(name)'") }
            default: throw DecodingError(offset: 0, reason: "field '\(name)' is not a scalar")
            }
        }
        let event = Event(time: time, monitor: try string("monitor"), plugin: try string("plugin"), kind: try string("kind"),
                          severity: severity, seq: seq, fields: fields)
        return (try string("host"), event)
    }

    /// Nanoseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.fraction]Z`.
    public static func parseTimestamp(_ s: String) -> Int64? {
        let b = Array(s.utf8)
        guard b.count >= 20, b.last == UInt8(ascii: "Z"), b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"),
              b[10] == UInt8(ascii: "T"), b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":") else { return nil }
        func num(_ r: Range<Int>) -> Int64? {
            var v: Int64 = 0
            for i in r {
                guard b[i] >= 48, b[i] <= 57 else { return nil }
                v = v * 10 + Int64(b[i] - 48)
            }
            return v
        }
        guard let y = num(0..<4), let mo = num(5..<7), let d = num(8..<10), let h = num(11..<13),
              let mi = num(14..<16), let sec = num(17..<19) else { return nil }
        var nanos: Int64 = 0
        if b[19] == UInt8(ascii: ".") {
            let digits = b.count - 1 - 20
            guard digits >= 1, digits <= 9, let f = num(20..<(b.count - 1)) else { return nil }
            nanos = f
            for _ in digits..<9 { nanos *= 10 }
        } else if b.count != 20 {
            return nil
        }
        // Days from civil (inverse of JSONLineEncoder.civil).
        let yy = mo <= 2 ? y - 1 : y
        let era = (yy >= 0 ? yy : yy - 399) / 400
        let yoe = yy - era * 400
        let doy = (153 * (mo > 2 ? mo - 3 : mo + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        // Years outside 1677…2262 do not fit in Int64 nanoseconds: nil, not an overflow trap.
        // A negative second with a fraction is scaled from one second later so Int64.min itself fits.
        var seconds = days * 86_400 + h * 3600 + mi * 60 + sec
        if seconds < 0 && nanos > 0 {
            seconds += 1
            nanos -= 1_000_000_000
        }
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, overflow2) = scaled.addingReportingOverflow(nanos)
        return overflow || overflow2 ? nil : total
    }
}

indirect enum JSON {
    case object([(String, JSON)])
    case array([JSON])
    case string(String)
    /// The number's text, and whether it has no fraction or exponent.
    case number(String, Bool)
    case bool(Bool)
    case null
}

private struct Parser {
    let bytes: [UInt8]
    var i = 0
    /// Objects and arrays open now. An event is three deep; a line from a
    /// socket or a disk buffer nested deeper than `maxDepth` is refused, so
    /// it cannot take the stack (each level is a call).
    var depth = 0
    static let maxDepth = 32

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func skipSpace() {
        while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0A || bytes[i] == 0x0D { i += 1 }
    }

    func fail(_ reason: String) -> JSONLineDecoder.DecodingError { .init(offset: i, reason: reason) }

    mutating func parseValue() throws(JSONLineDecoder.DecodingError) -> JSON {
        skipSpace()
        guard i < bytes.count else { throw fail("unexpected end") }
        switch bytes[i] {
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            depth += 1
            defer { depth -= 1 }
            guard depth <= Self.maxDepth else { throw fail("nested deeper than \(Self.maxDepth) levels") }
            return bytes[i] == UInt8(ascii: "{") ? try parseObject() : try parseArray()
        case UInt8(ascii: "\""):
            return .string(try parseString())
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "n"): return try literal("null", .null)
        default:
            return try parseNumber()
        }
    }

    mutating func parseObject() throws(JSONLineDecoder.DecodingError) -> JSON {
        do {
            i += 1
            var members: [(String, JSON)] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            while true {
                skipSpace()
                guard case .string(let key) = try parseValue() else { throw fail("expected a key") }
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                i += 1
                members.append((key, try parseValue()))
                skipSpace()
                guard i < bytes.count else { throw fail("unterminated object") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
                throw fail("expected ',' or '}'")
            }
        }
    }

    mutating func parseArray() throws(JSONLineDecoder.DecodingError) -> JSON {
        do {
            i += 1
            var items: [JSON] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            while true {
                items.append(try parseValue())
                skipSpace()
                guard i < bytes.count else { throw fail("unterminated array") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
                throw fail("expected ',' or ']'")
            }
        }
    }

    mutating func parseNumber() throws(JSONLineDecoder.DecodingError) -> JSON {
        do {
            let start = i
            var integral = true
            if bytes[i] == UInt8(ascii: "-") { i += 1 }
            while i < bytes.count {
                let c = bytes[i]
                if c >= 48 && c <= 57 { i += 1; continue }
                if c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") || c == UInt8(ascii: "+") || c == UInt8(ascii: "-") {
                    integral = false
                    i += 1
                    continue
                }
                break
            }
            let text = String(decoding: bytes[start..<i], as: UTF8.self)
            guard i > start, text != "-", Double(text) != nil else { throw fail("unexpected character") }
            return .number(text, integral)
        }
    }

    mutating func literal(_ word: String, _ value: JSON) throws(JSONLineDecoder.DecodingError) -> JSON {
        let w = Array(word.utf8)
        guard i + w.count <= bytes.count, Array(bytes[i..<(i + w.count)]) == w else { throw fail("unexpected literal") }
        i += w.count
        return value
    }

    mutating func parseString() throws(JSONLineDecoder.DecodingError) -> String {
        i += 1
        var out: [UInt8] = []
        while i < bytes.count {
            let c = bytes[i]
            if c == UInt8(ascii: "\"") { i += 1; return String(decoding: out, as: UTF8.self) }
            if c < 0x20 { throw fail("unescaped control character") }
            if c != UInt8(ascii: "\\") { out.append(c); i += 1; continue }
            i += 1
            guard i < bytes.count else { break }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var code = try hex4()
                if code >= 0xD800 && code < 0xDC00, i + 6 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") {
                    let next = i
                    i += 2
                    let low = try hex4()
                    if low >= 0xDC00 && low < 0xE000 {
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else {
                        i = next  // not a low surrogate: the high one stands alone (U+FFFD), read the next escape by itself
                    }
                }
                let scalar = Unicode.Scalar(code) ?? "\u{FFFD}"
                UTF8.encode(scalar) { out.append($0) }
            default: throw fail("bad escape")
            }
        }
        throw fail("unterminated string")
    }

    mutating func hex4() throws(JSONLineDecoder.DecodingError) -> UInt32 {
        guard i + 4 <= bytes.count, let v = UInt32(String(decoding: bytes[i..<(i + 4)], as: UTF8.self), radix: 16) else {
            throw fail("bad \\u escape")
        }
        i += 4
        return v
    }
}
