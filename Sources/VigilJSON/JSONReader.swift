/// Vigil's one JSON reader (RFC 8259), behind the Swift SDK's options of
/// type json (`JSONValue`) and the host's JSON Lines (`JSONLineDecoder`).
///
/// Strict: no comments, no trailing commas, no single quotes, no leading
/// zeros or `+`, no NaN or infinity, no number beyond a Double's range, no
/// control characters in strings, no key used twice in an object, nothing
/// after the value but whitespace, and at most `maxDepth` nested arrays and
/// objects, so a hostile text cannot take the stack (each level is a call).
///
/// Numbers keep their text and whether they are integral, so each caller
/// reads them as it needs: the SDK as a Double, the JSON Lines decoder as
/// an exact Int64 where one was written. Objects are arrays of pairs in the
/// order written, not dictionaries, and the target depends on nothing:
/// every Swift plugin carries a copy, and a dictionary of the reader's own
/// types would cost at each plugin's load (see VigilKit's `JSONValue`).
public struct JSONReader {
    /// Reads one JSON text: a value, with only whitespace around it.
    /// `replacingUnpairedSurrogates`: a `\u` escape of a surrogate that is
    /// not half of a pair reads as U+FFFD instead of being an error, for
    /// lines other programs wrote: RFC 8259's grammar allows such escapes
    /// (section 8.2), and JavaScript's `JSON.stringify` writes them.
    public static func read(_ bytes: [UInt8], maxDepth: Int,
                            replacingUnpairedSurrogates: Bool = false) throws(JSONReadError) -> JSONNode {
        var reader = JSONReader(bytes: bytes, maxDepth: maxDepth, replaceSurrogates: replacingUnpairedSurrogates)
        return try reader.document()
    }

    private let bytes: [UInt8]
    private let maxDepth: Int
    private let replaceSurrogates: Bool
    /// The offset of the next byte to read.
    private var i = 0
    /// Arrays and objects open now.
    private var depth = 0

    /// Up to this many keys an object's duplicate check compares the new
    /// key with each before it (no hashing, the common case); past it the
    /// keys go into a set, so an object of many keys reads in linear time.
    private static var keysComparedOneByOne: Int { 16 }

    private init(bytes: [UInt8], maxDepth: Int, replaceSurrogates: Bool) {
        self.bytes = bytes
        self.maxDepth = maxDepth
        self.replaceSurrogates = replaceSurrogates
    }
}

/// A JSON value as `JSONReader` read it.
public enum JSONNode: Sendable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONNode])
    case object([(key: String, value: JSONNode)])

    /// Appends `s` as a JSON string: quoted, with `"`, `\` and control
    /// characters escaped, everything else as it is.
    public static func quote(_ s: String, to out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}

/// A number as written, and its nearest Double.
public struct JSONNumber: Sendable {
    /// The number's text (`-0`, `1.50`, `1e3`), which holds integers a
    /// Double cannot (2^53 + 1).
    public let text: String
    /// Written without a fraction or an exponent: `1` is integral, `1.0`
    /// and `1e3` are not.
    public let isIntegral: Bool
    /// The nearest Double; finite, as the reader refuses any other.
    public let double: Double

    /// The integer written, when the number is integral and fits.
    public var int64: Int64? { isIntegral ? Int64(text) : nil }
}

/// Why a text is not JSON: where (a byte offset into it), the kind of
/// mistake, and what was expected there and found instead, in the words of
/// the SDK's `JSONError`. A caller with words of its own goes by `code`.
public struct JSONReadError: Error, Sendable {
    public enum Code: Sendable {
        /// The text ended where a value should start.
        case unexpectedEnd
        /// Something other than a value where one should start.
        case valueExpected
        /// `t`, `f` or `n` starting something other than true, false, null.
        case badLiteral
        /// Not a number's grammar: a sign, digit, fraction or exponent missing.
        case badNumber
        /// A number beyond a Double's range (`1e400`).
        case numberOutOfRange
        case unterminatedString
        /// An unescaped control character (U+0000 to U+001F) in a string.
        case controlCharacter
        /// `\` followed by something other than `" \ / b f n r t u`.
        case badEscape
        /// `\u` not followed by four hex digits.
        case badUnicodeEscape
        /// A surrogate escape that is not half of a pair, unless replaced.
        case unpairedSurrogate
        /// Something other than a string where an object's key should be.
        case keyExpected
        case colonExpected
        /// The text ended inside an array.
        case unterminatedArray
        /// Something other than `,` or `]` after an array's element.
        case arraySeparatorExpected
        /// The text ended inside an object.
        case unterminatedObject
        /// Something other than `,` or `}` after an object's member.
        case objectSeparatorExpected
        /// A key used before in the same object.
        case duplicateKey
        /// Arrays and objects nested deeper than `maxDepth`.
        case tooDeep
        /// More than whitespace after the value.
        case trailingCharacters
    }

    /// Byte offset into the text where the problem is.
    public var offset: Int
    public var code: Code
    /// What would have been valid there: "a value", "',' or ']'", "end of input"…
    public var expected: String
    /// What was there instead: "'x'", "end of input"; empty when beside the point.
    public var found: String
}

/// A recursive-descent parser over UTF-8 bytes: one call per level of nesting.
private extension JSONReader {
    mutating func document() throws(JSONReadError) -> JSONNode {
        skipSpace()
        let value = try value()
        skipSpace()
        guard i == bytes.count else { throw error(.trailingCharacters, "end of input") }
        return value
    }

    /// The byte at `offset`, described for messages.
    func found(at offset: Int) -> String {
        guard offset < bytes.count else { return "end of input" }
        let b = bytes[offset]
        if b < 0x20 || b == 0x7F { return "control character U+" + hex4(UInt32(b)) }
        if b < 0x80 { return "'\(Character(Unicode.Scalar(b)))'" }
        // The whole character, for a message that reads well.
        var end = offset + 1
        while end < bytes.count, end - offset < 4, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return "'" + String(decoding: bytes[offset..<end], as: UTF8.self) + "'"
    }

    func error(_ code: JSONReadError.Code, _ expected: String, at offset: Int? = nil) -> JSONReadError {
        let at = offset ?? i
        return JSONReadError(offset: at, code: code, expected: expected, found: found(at: at))
    }

    mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return
            }
        }
    }

    mutating func value() throws(JSONReadError) -> JSONNode {
        guard i < bytes.count else { throw error(.unexpectedEnd, "a value") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw error(.valueExpected, "a value")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONReadError) {
        let start = i
        let count = word.utf8CodeUnitCount
        for k in 0..<count {
            guard i < bytes.count, bytes[i] == word.utf8Start[k] else {
                throw error(.badLiteral, "'\(word)'", at: start)
            }
            i += 1
        }
    }

    mutating func nest() throws(JSONReadError) {
        depth += 1
        guard depth <= maxDepth else {
            throw JSONReadError(offset: i, code: .tooDeep, expected: "arrays and objects nested at most \(maxDepth) deep",
                                found: "")
        }
    }

    mutating func array() throws(JSONReadError) -> JSONNode {
        try nest()
        i += 1  // [
        var items: [JSONNode] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
            i += 1
            depth -= 1
            return .array(items)
        }
        while true {
            skipSpace()
            items.append(try value())
            skipSpace()
            guard i < bytes.count else { throw error(.unterminatedArray, "',' or ']'") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "]") { i += 1; break }
            throw error(.arraySeparatorExpected, "',' or ']'")
        }
        depth -= 1
        return .array(items)
    }

    mutating func object() throws(JSONReadError) -> JSONNode {
        try nest()
        i += 1  // {
        var entries: [(key: String, value: JSONNode)] = []
        var keys: Set<String>?
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
            i += 1
            depth -= 1
            return .object(entries)
        }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw error(.keyExpected, "a string key") }
            let keyOffset = i
            let key = try string()
            if entries.count == Self.keysComparedOneByOne { keys = Set(entries.map { $0.key }) }
            let repeated = if let inserted = keys?.insert(key).inserted { !inserted } else { entries.contains { $0.key == key } }
            if repeated {
                var quoted = ""
                JSONNode.quote(key, to: &quoted)
                throw JSONReadError(offset: keyOffset, code: .duplicateKey, expected: "a key not used before in this object",
                                    found: quoted)
            }
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw error(.colonExpected, "':'") }
            i += 1
            skipSpace()
            entries.append((key, try value()))
            skipSpace()
            guard i < bytes.count else { throw error(.unterminatedObject, "',' or '}'") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "}") { i += 1; break }
            throw error(.objectSeparatorExpected, "',' or '}'")
        }
        depth -= 1
        return .object(entries)
    }

    /// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and finite as a Double.
    mutating func number() throws(JSONReadError) -> JSONNumber {
        let start = i
        func isDigit(_ k: Int) -> Bool { k < bytes.count && bytes[k] >= 0x30 && bytes[k] <= 0x39 }
        var integral = true
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard isDigit(i) else { throw error(.badNumber, "a digit") }
        if bytes[i] == UInt8(ascii: "0") {
            i += 1
            if isDigit(i) { throw error(.badNumber, "'.', 'e' or the end of the number (no leading zeros)") }
        } else {
            while isDigit(i) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            integral = false
            i += 1
            guard isDigit(i) else { throw error(.badNumber, "a digit after '.'") }
            while isDigit(i) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            integral = false
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard isDigit(i) else { throw error(.badNumber, "a digit in the exponent") }
            while isDigit(i) { i += 1 }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        guard let d = Double(text), d.isFinite else {
            throw JSONReadError(offset: start, code: .numberOutOfRange, expected: "a number within the range of a double",
                                found: text)
        }
        return JSONNumber(text: text, isIntegral: integral, double: d)
    }

    mutating func string() throws(JSONReadError) -> String {
        i += 1  // "
        var out: [UInt8] = []
        while true {
            guard i < bytes.count else { throw error(.unterminatedString, "'\"' to end the string") }
            let b = bytes[i]
            switch b {
            case UInt8(ascii: "\""):
                i += 1
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                let escapeStart = i
                i += 1
                guard i < bytes.count else { throw error(.unterminatedString, "an escape character") }
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
                case UInt8(ascii: "u"): UTF8.encode(try unicodeEscape(at: escapeStart)) { out.append($0) }
                default:
                    throw error(.badEscape, "one of \" \\ / b f n r t u after '\\'", at: i - 1)
                }
            default:
                guard b >= 0x20 else { throw error(.controlCharacter, "a character (control characters must be escaped)") }
                out.append(b)
                i += 1
            }
        }
    }

    /// The character of a `\u` escape (the cursor after the `u`), and of the
    /// one after it when the two are a surrogate pair.
    mutating func unicodeEscape(at escapeStart: Int) throws(JSONReadError) -> Unicode.Scalar {
        let code = try hexQuad()
        if code >= 0xDC00 && code <= 0xDFFF {
            guard replaceSurrogates else {
                throw JSONReadError(offset: escapeStart, code: .unpairedSurrogate, expected: "a high surrogate before a low one",
                                    found: "\\u" + hex4(code))
            }
            return "\u{FFFD}"
        }
        guard code >= 0xD800 && code <= 0xDBFF else { return Unicode.Scalar(code)! }
        guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
            guard replaceSurrogates else {
                throw error(.unpairedSurrogate, "'\\u' and a low surrogate after \\u" + hex4(code))
            }
            return "\u{FFFD}"
        }
        let lowStart = i
        i += 2
        let low = try hexQuad()
        guard low >= 0xDC00 && low <= 0xDFFF else {
            guard replaceSurrogates else {
                throw JSONReadError(offset: lowStart, code: .unpairedSurrogate, expected: "a low surrogate (\\uDC00 to \\uDFFF)",
                                    found: "\\u" + hex4(low))
            }
            // The high surrogate stands alone; the escape after it is read by itself.
            i = lowStart
            return "\u{FFFD}"
        }
        return Unicode.Scalar(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))!
    }

    mutating func hexQuad() throws(JSONReadError) -> UInt32 {
        var code: UInt32 = 0
        for _ in 0..<4 {
            guard i < bytes.count else { throw error(.badUnicodeEscape, "four hex digits after '\\u'") }
            let b = bytes[i]
            let digit: UInt8
            switch b {
            case 0x30...0x39: digit = b - 0x30
            case 0x41...0x46: digit = b - 0x41 + 10
            case 0x61...0x66: digit = b - 0x61 + 10
            default: throw error(.badUnicodeEscape, "four hex digits after '\\u'")
            }
            code = code << 4 | UInt32(digit)
            i += 1
        }
        return code
    }
}

private func hex4(_ v: UInt32) -> String {
    let hex = String(v, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - hex.count)) + hex
}
