import Foundation
import Testing
@testable import VigilCore

/// 2026-11-21T21:50:29.123456789Z in nanoseconds since the epoch (1795297829 s).
let exampleTime: Int64 = 1_795_297_829_123_456_789

func sampleEvent(fields: [Field], time: Int64 = exampleTime, monitor: String = "cpu", plugin: String = "cpu",
                 kind: String = "sample", severity: Severity = .info, seq: UInt64 = 1042) -> Event {
    Event(time: time, monitor: monitor, plugin: plugin, kind: kind, severity: severity, seq: seq, fields: fields)
}

/// The exact line of `sampleEvent` with `fields` as the JSON text between the braces of "fields".
func sampleLine(fields: String) -> String {
    #"{"time":"2026-11-21T21:50:29.123456789Z","host":"web-1","monitor":"cpu","plugin":"cpu","kind":"sample","severity":"info","seq":1042,"fields":{"#
        + fields + "}}\n"
}

/// Field values equal, doubles compared bit for bit (so -0.0 ≠ 0.0), any NaN equal to any NaN.
func identical(_ a: FieldValue, _ b: FieldValue) -> Bool {
    if case .double(let x) = a, case .double(let y) = b {
        return x.bitPattern == y.bitPattern || (x.isNaN && y.isNaN)
    }
    return a == b
}

/// What the decoder should give back for an encoded event: non-finite doubles were written as null
/// and read back as NaN.
func expectedRoundTrip(_ event: Event) -> Event {
    var e = event
    e.fields = e.fields.map { f in
        if case .double(let d) = f.value, !d.isFinite { return Field(f.name, .double(.nan)) }
        return f
    }
    return e
}

func expectSameEvent(_ a: Event, _ b: Event, sourceLocation: Testing.SourceLocation = #_sourceLocation) {
    #expect(a.time == b.time, sourceLocation: sourceLocation)
    #expect(a.monitor == b.monitor, sourceLocation: sourceLocation)
    #expect(a.plugin == b.plugin, sourceLocation: sourceLocation)
    #expect(a.kind == b.kind, sourceLocation: sourceLocation)
    #expect(a.severity == b.severity, sourceLocation: sourceLocation)
    #expect(a.seq == b.seq, sourceLocation: sourceLocation)
    #expect(a.fields.map(\.name) == b.fields.map(\.name), sourceLocation: sourceLocation)
    #expect(a.fields.count == b.fields.count, sourceLocation: sourceLocation)
    for (x, y) in zip(a.fields, b.fields) {
        #expect(identical(x.value, y.value), "field \(x.name): \(x.value) vs \(y.value)", sourceLocation: sourceLocation)
    }
}

/// Encodes `event`, checks the exact bytes of the line, that Foundation's JSONSerialization parses
/// it, and that JSONLineDecoder reads back the same event. Returns Foundation's "fields" object.
@discardableResult
func checkEncoding(_ event: Event, host: String = "web-1", is expected: String,
                   sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> [String: Any] {
    var encoder = JSONLineEncoder(host: host)
    var bytes: [UInt8] = []
    encoder.encode(event, into: &bytes)
    #expect(String(decoding: bytes, as: UTF8.self) == expected, sourceLocation: sourceLocation)
    #expect(bytes == Array(expected.utf8), sourceLocation: sourceLocation)
    #expect(bytes.last == UInt8(ascii: "\n"), sourceLocation: sourceLocation)
    #expect(bytes.filter { $0 == UInt8(ascii: "\n") }.count == 1, "exactly one newline, at the end",
            sourceLocation: sourceLocation)
    #expect(encoder.line(event) + "\n" == expected, sourceLocation: sourceLocation)

    let object = try JSONSerialization.jsonObject(with: Data(bytes), options: [])
    let dict = try #require(object as? [String: Any], sourceLocation: sourceLocation)
    #expect(dict["host"] as? String == host, sourceLocation: sourceLocation)
    #expect(dict["monitor"] as? String == event.monitor, sourceLocation: sourceLocation)
    #expect(dict["plugin"] as? String == event.plugin, sourceLocation: sourceLocation)
    #expect(dict["kind"] as? String == event.kind, sourceLocation: sourceLocation)
    #expect(dict["severity"] as? String == event.severity.name, sourceLocation: sourceLocation)
    let fields = try #require(dict["fields"] as? [String: Any], sourceLocation: sourceLocation)
    #expect(Set(fields.keys) == Set(event.fields.map(\.name)), sourceLocation: sourceLocation)

    let (decodedHost, decoded) = try JSONLineDecoder().decode(bytes)
    #expect(decodedHost == host, sourceLocation: sourceLocation)
    expectSameEvent(decoded, expectedRoundTrip(event), sourceLocation: sourceLocation)
    // The String overload decodes the same.
    let (_, again) = try JSONLineDecoder().decode(expected)
    expectSameEvent(again, expectedRoundTrip(event), sourceLocation: sourceLocation)
    return fields
}

func timestamp(_ ns: Int64) -> String {
    var out: [UInt8] = []
    JSONLineEncoder.appendTimestamp(ns, to: &out)
    return String(decoding: out, as: UTF8.self)
}

// MARK: - Encoder

@Suite("JSON Lines encoder")
struct JSONLineEncoderTests {
    @Test("whole doubles take a fast path that writes exactly what description writes")
    func wholeDoublesAreWrittenAsDescriptionWritesThem() {
        var values: [Double] = [0, -0.0, 1, -1, 42, 0.5, -2.5, 1e15, 9_007_199_254_740_991, 9_007_199_254_740_992,
                                -9_007_199_254_740_992, 1e16, 1e300, 5e-324, Double(Int64.max), Double(Int64.min)]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let magnitude = Double(UInt64.random(in: 0...(1 << 54), using: &generator))
            values.append(Bool.random(using: &generator) ? magnitude : -magnitude)
            values.append(magnitude / 4)
        }
        let encoder = JSONLineEncoder(host: "web-1")
        for d in values {
            let line = encoder.line(sampleEvent(fields: [Field("v", .double(d))]))
            #expect(line == String(sampleLine(fields: #""v":"# + d.description).dropLast()), "\(d)")
        }
    }

    @Test("the documented example line, exactly")
    func exampleLine() throws {
        let event = sampleEvent(fields: [Field("usage", .double(0.12))])
        let expected = #"{"time":"2026-11-21T21:50:29.123456789Z","host":"web-1","monitor":"cpu","plugin":"cpu","kind":"sample","severity":"info","seq":1042,"fields":{"usage":0.12}}"#
            + "\n"
        let fields = try checkEncoding(event, is: expected)
        #expect((fields["usage"] as? NSNumber)?.doubleValue == 0.12)
    }

    @Test("hostile characters in a string are escaped per RFC 8259")
    func hostileString() throws {
        let s = "q\"b\\s\nt\tc\u{01}x\u{1F}d\u{7F}n\u{0}end"
        let event = sampleEvent(fields: [Field("s", .string(s))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""s":"q\"b\\s\nt\tc\u0001x\u001fd\u007fn\u0000end""#))
        #expect(fields["s"] as? String == s)
    }

    @Test("the short escapes \\r \\b \\f and every other C0 control as \\u00XX")
    func controlCharacters() throws {
        let s = "\r\u{08}\u{0C}\u{0B}\u{1B}"
        let event = sampleEvent(fields: [Field("c", .string(s))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""c":"\r\b\f\u000b\u001b""#))
        #expect(fields["c"] as? String == s)

        // All of U+0000…U+001F and U+007F: each escaped, nothing raw below 0x20 in the output.
        let all = String(String.UnicodeScalarView((0..<0x20).map { Unicode.Scalar(UInt8($0)) } + ["\u{7F}"]))
        var bytes: [UInt8] = []
        JSONLineEncoder.appendString(all, to: &bytes)
        #expect(!bytes.contains { $0 < 0x20 || $0 == 0x7F })
        let parsed = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        #expect(parsed as? String == all)
    }

    @Test("non-ASCII text passes through as UTF-8")
    func unicodePassThrough() throws {
        let s = "é, e\u{301}, 日本, 🙂, 👩‍👩‍👧"
        let event = sampleEvent(fields: [Field("text", .string(s))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""text":""# + s + #"""#))
        #expect(fields["text"] as? String == s)
    }

    @Test("invalid UTF-8 decoded with replacement arrives as U+FFFD and is written as such")
    func invalidUTF8() throws {
        let s = String(decoding: [0xFF, 0xC3, 0x78] as [UInt8], as: UTF8.self)
        #expect(s == "\u{FFFD}\u{FFFD}x")
        let event = sampleEvent(fields: [Field("raw", .string(s))])
        let fields = try checkEncoding(event, is: sampleLine(fields: "\"raw\":\"\u{FFFD}\u{FFFD}x\""))
        #expect(fields["raw"] as? String == "\u{FFFD}\u{FFFD}x")
        var bytes: [UInt8] = []
        JSONLineEncoder.appendString(s, to: &bytes)
        #expect(bytes == [0x22, 0xEF, 0xBF, 0xBD, 0xEF, 0xBF, 0xBD, 0x78, 0x22])
    }

    @Test("NaN and infinities are written as null and read back as NaN")
    func nonFinite() throws {
        let event = sampleEvent(fields: [Field("nan", .double(.nan)), Field("pinf", .double(.infinity)),
                                         Field("ninf", .double(-.infinity)), Field("snan", .double(.signalingNaN))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""nan":null,"pinf":null,"ninf":null,"snan":null"#))
        #expect(fields["nan"] is NSNull)
        #expect(fields["ninf"] is NSNull)
        let (_, decoded) = try JSONLineDecoder().decode(sampleLine(fields: #""nan":null"#))
        guard case .double(let d)? = decoded[field: "nan"] else {
            Issue.record("null should decode as a double")
            return
        }
        #expect(d.isNaN)
    }

    @Test("doubles: shortest round-tripping form, integral ones with .0", arguments: [
        (-0.0, "-0.0"),
        (0.0, "0.0"),
        (1.0, "1.0"),
        (100.0, "100.0"),
        (-2.5, "-2.5"),
        (0.1, "0.1"),
        (0.12, "0.12"),
        (1e-05, "1e-05"),
        (5e+20, "5e+20"),
        (1e16, "1e+16"),
        (5e-324, "5e-324"),
        (Double.leastNormalMagnitude, "2.2250738585072014e-308"),
        (Double.greatestFiniteMagnitude, "1.7976931348623157e+308"),
        (-Double.greatestFiniteMagnitude, "-1.7976931348623157e+308"),
        (1.0 / 3.0, "0.3333333333333333"),
    ])
    func doubles(value: Double, text: String) throws {
        let event = sampleEvent(fields: [Field("d", .double(value))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""d":"# + text))
        let number = try #require(fields["d"] as? NSNumber)
        #expect(number.doubleValue == value)
        let (_, decoded) = try JSONLineDecoder().decode(sampleLine(fields: #""d":"# + text))
        guard case .double(let back)? = decoded[field: "d"] else {
            Issue.record("\(text) should decode as .double, got \(String(describing: decoded[field: "d"]))")
            return
        }
        #expect(back.bitPattern == value.bitPattern)
    }

    @Test("integers are exact, including the Int64 extremes", arguments: [
        (Int64.min, "-9223372036854775808"),
        (Int64.max, "9223372036854775807"),
        (0, "0"),
        (-1, "-1"),
        (42, "42"),
        (9_007_199_254_740_993, "9007199254740993"),  // 2^53 + 1: not representable as a double
    ])
    func integers(value: Int64, text: String) throws {
        let event = sampleEvent(fields: [Field("i", .int(value))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""i":"# + text))
        #expect((fields["i"] as? NSNumber)?.int64Value == value)
        let (_, decoded) = try JSONLineDecoder().decode(sampleLine(fields: #""i":"# + text))
        #expect(decoded[field: "i"] == .int(value))
    }

    @Test("appendInteger for unsigned and small types")
    func appendInteger() {
        func text<T: BinaryInteger>(_ v: T) -> String {
            var out: [UInt8] = []
            JSONLineEncoder.appendInteger(v, to: &out)
            return String(decoding: out, as: UTF8.self)
        }
        #expect(text(UInt64.max) == "18446744073709551615")
        #expect(text(Int8.min) == "-128")
        #expect(text(UInt8(7)) == "7")
        #expect(text(Int32(-2_147_483_648)) == "-2147483648")
    }

    @Test("booleans, several fields in order, no fields")
    func boolsAndOrder() throws {
        let event = sampleEvent(fields: [Field("up", .bool(true)), Field("down", .bool(false)),
                                         Field("n", .int(3)), Field("x", .double(1.5)), Field("s", .string(""))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""up":true,"down":false,"n":3,"x":1.5,"s":"""#))
        #expect((fields["up"] as? NSNumber)?.boolValue == true)
        #expect(fields["s"] as? String == "")
        try checkEncoding(sampleEvent(fields: []), is: sampleLine(fields: ""))
    }

    @Test("field names with quotes, backslashes and newlines are escaped")
    func hostileFieldNames() throws {
        let event = sampleEvent(fields: [Field("a\"b\nc", .int(1)), Field("back\\slash\t", .int(2)), Field("", .int(3))])
        let fields = try checkEncoding(event, is: sampleLine(fields: #""a\"b\nc":1,"back\\slash\t":2,"":3"#))
        #expect((fields["a\"b\nc"] as? NSNumber)?.intValue == 1)
        #expect((fields["back\\slash\t"] as? NSNumber)?.intValue == 2)
    }

    @Test("host, monitor, plugin and kind are escaped too")
    func hostileHeader() throws {
        let event = Event(time: 0, monitor: "m\"1", plugin: "p\\2", kind: "k\n3", severity: .critical, seq: 0)
        let expected = #"{"time":"1970-01-01T00:00:00.000000000Z","host":"h\"o\u0000st","monitor":"m\"1","plugin":"p\\2","kind":"k\n3","severity":"critical","seq":0,"fields":{}}"#
            + "\n"
        try checkEncoding(event, host: "h\"o\u{0}st", is: expected)
    }

    @Test("every severity is written by name", arguments: Severity.allCases)
    func severities(severity: Severity) throws {
        let event = Event(time: 0, monitor: "m", plugin: "p", kind: "k", severity: severity, seq: 1)
        let expected = #"{"time":"1970-01-01T00:00:00.000000000Z","host":"web-1","monitor":"m","plugin":"p","kind":"k","severity":""#
            + severity.name + #"","seq":1,"fields":{}}"# + "\n"
        try checkEncoding(event, is: expected)
    }

    @Test("seq is an exact unsigned integer")
    func seqExtremes() throws {
        let event = Event(time: 0, monitor: "m", plugin: "p", kind: "k", severity: .debug, seq: .max)
        let line = JSONLineEncoder(host: "h").line(event)
        #expect(line.contains(#","seq":18446744073709551615,"#))
        let (_, decoded) = try JSONLineDecoder().decode(line)
        #expect(decoded.seq == .max)
        #expect(try JSONSerialization.jsonObject(with: Data(line.utf8)) is [String: Any])
    }

    @Test("encode appends to what is already in the buffer")
    func appends() {
        var encoder = JSONLineEncoder(host: "web-1")
        var out: [UInt8] = Array("prefix\n".utf8)
        let a = sampleEvent(fields: [Field("usage", .double(0.12))])
        encoder.encode(a, into: &out)
        encoder.encode(a, into: &out)
        let text = String(decoding: out, as: UTF8.self)
        let line = sampleLine(fields: #""usage":0.12"#)
        #expect(text == "prefix\n" + line + line)
    }
}

// MARK: - Timestamps

@Suite("JSON Lines timestamps")
struct TimestampTests {
    static let cases: [(Int64, String)] = [
        (exampleTime, "2026-11-21T21:50:29.123456789Z"),
        (0, "1970-01-01T00:00:00.000000000Z"),
        (1_000, "1970-01-01T00:00:00.000001000Z"),
        (-1, "1969-12-31T23:59:59.999999999Z"),
        (-1_000_000_000, "1969-12-31T23:59:59.000000000Z"),
        (-86_400_000_000_000, "1969-12-31T00:00:00.000000000Z"),
        (-26_524_800_000_000_000, "1969-02-28T00:00:00.000000000Z"),
        (-57_974_401_000_000_000, "1968-02-29T23:59:59.000000000Z"),
        (951_782_400_000_000_000, "2000-02-29T00:00:00.000000000Z"),
        (951_782_399_999_999_999, "2000-02-28T23:59:59.999999999Z"),
        (951_868_800_000_000_000, "2000-03-01T00:00:00.000000000Z"),
        (1_709_164_800_000_000_000, "2024-02-29T00:00:00.000000000Z"),
        (1_709_251_200_000_000_000, "2024-03-01T00:00:00.000000000Z"),
        (1_735_689_599_999_999_999, "2024-12-31T23:59:59.999999999Z"),
        (1_735_689_600_000_000_000, "2025-01-01T00:00:00.000000000Z"),
        (-2_208_988_800_000_000_000, "1900-01-01T00:00:00.000000000Z"),
        (-2_203_891_201_000_000_000, "1900-02-28T23:59:59.000000000Z"),
        (-2_203_891_200_000_000_000, "1900-03-01T00:00:00.000000000Z"),  // 1900 is not a leap year
        (-8_515_238_400_000_000_000, "1700-03-01T00:00:00.000000000Z"),
        (-310_478_400_000_000_000, "1960-02-29T12:00:00.000000000Z"),
        (4_107_456_000_000_000_000, "2100-02-28T00:00:00.000000000Z"),
        (4_107_542_400_000_000_000, "2100-03-01T00:00:00.000000000Z"),   // nor is 2100
        (Int64.max, "2262-04-11T23:47:16.854775807Z"),
        (Int64.min, "1677-09-21T00:12:43.145224192Z"),
    ]

    @Test("RFC 3339 in UTC with nine fractional digits", arguments: cases)
    func format(ns: Int64, text: String) {
        #expect(timestamp(ns) == text)
    }

    @Test("parseTimestamp reads back what appendTimestamp wrote", arguments: cases)
    func parseBack(ns: Int64, text: String) {
        #expect(JSONLineDecoder.parseTimestamp(text) == ns)
    }

    @Test("round trip over the whole Int64 range")
    func roundTripRange() {
        var checked = 0
        // A coarse sweep plus a pseudo-random walk, including values just around midnight.
        var ns = Int64.min
        while true {
            #expect(JSONLineDecoder.parseTimestamp(timestamp(ns)) == ns, "\(ns) → \(timestamp(ns))")
            checked += 1
            let (next, overflow) = ns.addingReportingOverflow(97_654_321_987_654_321)
            if overflow { break }
            ns = next
        }
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<5_000 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            let value = Int64(bitPattern: state)
            #expect(JSONLineDecoder.parseTimestamp(timestamp(value)) == value, "\(value) → \(timestamp(value))")
            let day = value / 86_400_000_000_000 * 86_400_000_000_000
            for delta: Int64 in [-1, 0, 1] {
                let (v, o) = day.addingReportingOverflow(delta)
                if !o { #expect(JSONLineDecoder.parseTimestamp(timestamp(v)) == v) }
            }
            checked += 1
        }
        #expect(checked > 5_000)
    }

    @Test("parseTimestamp accepts 0 to 9 fractional digits", arguments: [
        ("2026-11-21T21:50:29Z", Int64(1_795_297_829_000_000_000)),
        ("2026-11-21T21:50:29.5Z", 1_795_297_829_500_000_000),
        ("2026-11-21T21:50:29.123Z", 1_795_297_829_123_000_000),
        ("2026-11-21T21:50:29.000000001Z", 1_795_297_829_000_000_001),
        ("1969-12-31T23:59:59.5Z", -500_000_000),
    ])
    func fractions(text: String, ns: Int64) {
        #expect(JSONLineDecoder.parseTimestamp(text) == ns)
    }

    @Test("parseTimestamp rejects what is not a timestamp", arguments: [
        "",
        "2026-11-21",
        "2026-11-21 21:50:29Z",
        "2026-11-21T21:50:29",
        "2026-11-21T21:50:29.Z",
        "2026-11-21T21:50:29.1234567890Z",
        "2026-11-21T21:50:29+00:00",
        "2026-11-21T21:50:2xZ",
        "2026/11/21T21:50:29Z",
        "2026-11-21T21:50:29.12a4Z",
        "9999-12-31T23:59:59Z",       // past the end of Int64 nanoseconds
        "1600-01-01T00:00:00Z",       // before its start
    ])
    func rejects(text: String) {
        #expect(JSONLineDecoder.parseTimestamp(text) == nil)
    }
}

// MARK: - Decoder

@Suite("JSON Lines decoder")
struct JSONLineDecoderTests {
    @Test("types are preserved: integers stay .int, 1.0 stays .double")
    func types() throws {
        let line = sampleLine(fields: #""i":1,"d":1.0,"e":1e3,"neg":-0,"big":9223372036854775808,"b":false,"s":"1""#)
        let (host, event) = try JSONLineDecoder().decode(line)
        #expect(host == "web-1")
        #expect(event.time == exampleTime)
        #expect(event.monitor == "cpu" && event.plugin == "cpu" && event.kind == "sample")
        #expect(event.severity == .info)
        #expect(event.seq == 1042)
        #expect(event[field: "i"] == .int(1))
        #expect(event[field: "d"] == .double(1.0))
        #expect(event[field: "e"] == .double(1000))
        #expect(event[field: "neg"] == .int(0))
        #expect(event[field: "big"] == .double(9.223372036854775808e18))  // too big for Int64
        #expect(event[field: "b"] == .bool(false))
        #expect(event[field: "s"] == .string("1"))
        #expect(event.fields.map(\.name) == ["i", "d", "e", "neg", "big", "b", "s"])
    }

    @Test("whitespace between tokens, a trailing newline and unknown members are accepted")
    func lenientWhitespace() throws {
        let line = """
            { "time" : "1970-01-01T00:00:01Z" , "host":"h", "extra": [1, {"x": null}], "monitor":"m","plugin":"p",
              "kind":"k","severity":"warn","seq":7,"fields":{ "a" : 2 } }

            """
        let (host, event) = try JSONLineDecoder().decode(line)
        #expect(host == "h")
        #expect(event.time == 1_000_000_000)
        #expect(event.severity == .warning)
        #expect(event.seq == 7)
        #expect(event[field: "a"] == .int(2))
    }

    @Test("escapes, including \\/ and \\u with surrogate pairs")
    func escapes() throws {
        let line = sampleLine(fields: #""s":"a\/b\u00e9\ud83d\ude00\u0041\"""#)
        let (_, event) = try JSONLineDecoder().decode(line)
        #expect(event[field: "s"] == .string("a/bé😀A\""))
    }

    @Test("lone or mismatched surrogates become U+FFFD instead of crashing", arguments: [
        (#"\ud800\u0041"#, "\u{FFFD}A"),
        (#"\ud800\ud800"#, "\u{FFFD}\u{FFFD}"),
        (#"\ud800\ud83d\ude00"#, "\u{FFFD}😀"),
        (#"\udc00x"#, "\u{FFFD}x"),
        (#"x\ud800"#, "x\u{FFFD}"),
    ])
    func loneSurrogates(escaped: String, text: String) throws {
        let (_, event) = try JSONLineDecoder().decode(sampleLine(fields: #""s":""# + escaped + #"""#))
        #expect(event[field: "s"] == .string(text))
    }

    @Test("malformed lines are errors with a reason", arguments: [
        ("", "unexpected end"),
        ("[]", "not an object"),
        ("not json", "unexpected"),
        (#"{"a":1} x"#, "trailing characters"),
        (#"{"a":1"#, "unterminated object"),
        (#"{"a" 1}"#, "expected ':'"),
        (#"{1:2}"#, "expected a key"),
        (#"{"s":"abc}"#, "unterminated string"),
        ("{\"s\":\"a\u{01}b\"}", "unescaped control character"),
        (#"{"s":"\q"}"#, "bad escape"),
        (#"{"s":"\u12"}"#, "bad \\u escape"),
        (#"{"time":"1970-01-01T00:00:00Z","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"info","fields":{}}"#,
         "missing integer 'seq'"),
        (#"{"time":"1970-01-01T00:00:00Z","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"info","seq":-1,"fields":{}}"#,
         "missing integer 'seq'"),
        (#"{"time":"yesterday","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"info","seq":1,"fields":{}}"#,
         "bad time 'yesterday'"),
        (#"{"time":"1970-01-01T00:00:00Z","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"loud","seq":1,"fields":{}}"#,
         "bad severity 'loud'"),
        (#"{"time":"1970-01-01T00:00:00Z","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"info","seq":1}"#,
         "missing object 'fields'"),
        (#"{"time":"1970-01-01T00:00:00Z","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"info","seq":1,"fields":{"a":[1]}}"#,
         "field 'a' is not a scalar"),
        (#"{"time":"1970-01-01T00:00:00Z","monitor":"m","plugin":"p","kind":"k","severity":"info","seq":1,"fields":{}}"#,
         "missing string 'host'"),
        (#"{"time":"1970-01-01T00:00:00Z","host":"h","plugin":"p","kind":"k","severity":"info","seq":1,"fields":{}}"#,
         "missing string 'monitor'"),
    ])
    func errors(line: String, reason: String) {
        do {
            let decoded = try JSONLineDecoder().decode(line)
            Issue.record("decoded \(decoded) from \(line)")
        } catch {
            #expect(error.reason.contains(reason), "\(error)")
            #expect(error.description.hasPrefix("invalid event JSON at byte \(error.offset): "))
        }
    }
}

@Suite("JSON Lines: the timestamp cache")
struct TimestampCacheTests {
    @Test("one encoder across seconds, days and back gives the same bytes as a fresh one each time")
    func cacheMatchesFreshEncoding() {
        var cached = JSONLineEncoder(host: "h")
        let times: [Int64] = [1_795_297_829_123_456_789, 1_795_297_829_999_999_999, 1_795_297_830_000_000_000,
                              1_795_297_830_000_000_001, 1_795_297_829_000_000_000, 0, -1, -1_000_000_001,
                              951_782_399_999_999_999, 951_782_400_000_000_000]
        for t in times {
            let e = Event(time: t, monitor: "m", plugin: "p", kind: "k")
            var viaCache: [UInt8] = []
            cached.encode(e, into: &viaCache)
            #expect(String(decoding: viaCache, as: UTF8.self) == JSONLineEncoder(host: "h").line(e) + "\n")
            #expect((try? JSONLineDecoder().decode(viaCache.dropLast().map { $0 }).event.time) == t)
        }
    }
}

/// A line from a socket or a disk buffer nested without end is refused,
/// never a stack overflow (hostile testing found a disk buffer record of
/// 300 nested arrays taking the host down on every start).
@Suite struct JSONLineDepthTests {
    @Test(arguments: [33, 300, 100_000])
    func deepNestingIsAnErrorNotACrash(depth: Int) {
        for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
            let value = String(repeating: open, count: depth) + "1" + String(repeating: close, count: depth)
            let line = #"{"time":"2026-11-26T00:00:00.000000000Z","host":"h","monitor":"m","plugin":"p","kind":"k","severity":"info","seq":1,"fields":{"x":"# + value + "}}"
            #expect(throws: JSONLineDecoder.DecodingError.self) { try JSONLineDecoder().decode(line) }
        }
    }
}
