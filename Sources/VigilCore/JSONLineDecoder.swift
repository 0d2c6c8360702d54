internal import VigilJSON

/// Reads back one line of Vigil's JSON Lines into an `Event` and its host
/// name, keeping field types exact (an integer stays `.int`, `1.0` is
/// `.double`, `null` — a NaN or infinity on the way out — reads as `.double(.nan)`).
/// Used by `vigil tail`, the disk buffer and tests; strict: anything that is
/// not valid JSON (read by `JSONReader`, as the SDK reads options) of the
/// event schema is an error.
public struct JSONLineDecoder: Sendable {
    public struct DecodingError: Error, Sendable, CustomStringConvertible {
        public var offset: Int
        public var reason: String
        public var description: String { "invalid event JSON at byte \(offset): \(reason)" }
    }

    /// An event is three deep; a line from a socket or a disk buffer nested
    /// deeper than this is refused, so it cannot take the stack.
    private static let maxDepth = 32

    public init() {}

    public func decode(_ line: some StringProtocol) throws(DecodingError) -> (host: String, event: Event) {
        try decode(Array(line.utf8))
    }

    public func decode(_ bytes: [UInt8]) throws(DecodingError) -> (host: String, event: Event) {
        let value: JSONNode
        do throws(JSONReadError) {
            // An unpaired surrogate escape reads as U+FFFD: Vigil never writes
            // one, but a line another program wrote may hold one and be JSON.
            value = try JSONReader.read(bytes, maxDepth: Self.maxDepth, replacingUnpairedSurrogates: true)
        } catch {
            throw DecodingError(offset: error.offset, reason: Self.reason(error))
        }
        guard case .object(let members) = value else { throw DecodingError(offset: 0, reason: "not an object") }
        func member(_ name: String) -> JSONNode? { members.first { $0.key == name }?.value }
        func string(_ name: String) throws(DecodingError) -> String {
            guard case .string(let s)? = member(name) else { throw DecodingError(offset: 0, reason: "missing string '\(name)'") }
            return s
        }
        guard case .number(let seqNumber)? = member("seq"), let seq = UInt64(seqNumber.text) else {
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
            case .number(let n): fields.append(Field(name, n.int64.map { .int($0) } ?? .double(n.double)))
            default: throw DecodingError(offset: 0, reason: "field '\(name)' is not a scalar")
            }
        }
        let event = Event(time: time, monitor: try string("monitor"), plugin: try string("plugin"), kind: try string("kind"),
                          severity: severity, seq: seq, fields: fields)
        return (try string("host"), event)
    }

    /// The reader's error in this decoder's words.
    private static func reason(_ error: JSONReadError) -> String {
        switch error.code {
        case .unexpectedEnd: "unexpected end"
        case .unterminatedString: "unterminated string"
        case .unterminatedArray: "unterminated array"
        case .unterminatedObject: "unterminated object"
        case .controlCharacter: "unescaped control character"
        case .badEscape: "bad escape"
        case .badUnicodeEscape: "bad \\u escape"
        case .keyExpected: "expected a key"
        case .colonExpected: "expected ':'"
        case .arraySeparatorExpected: "expected ',' or ']'"
        case .objectSeparatorExpected: "expected ',' or '}'"
        case .duplicateKey: "duplicate key \(error.found)"
        case .tooDeep: "nested deeper than \(maxDepth) levels"
        case .trailingCharacters: "trailing characters"
        case .valueExpected, .badLiteral, .badNumber, .numberOutOfRange, .unpairedSurrogate:
            "unexpected \(error.found), expected \(error.expected)"
        }
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
