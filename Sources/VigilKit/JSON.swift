/// A JSON value, as the host hands over options of type `.json` (see
/// `Options.json(_:)`). Objects keep their keys in the order written, as an
/// array of pairs rather than a dictionary: a plugin's first dictionary of its
/// own types makes the Swift runtime scan every loaded image's conformance
/// tables, which costs more at plugin load than a linear search of a few keys.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    /// Parses one JSON text (RFC 8259), strictly: no comments, no trailing
    /// commas, no single quotes, no leading zeros or `+`, no NaN or infinity,
    /// no control characters in strings, no unpaired surrogates, no duplicate
    /// keys in an object, nothing after the value but whitespace, and at most
    /// `maxDepth` nested arrays and objects.
    public static func parse(_ text: String) throws(JSONError) -> JSONValue {
        var parser = JSONParser(bytes: Array(text.utf8))
        return try parser.document()
    }

    /// How deep arrays and objects may nest.
    public static let maxDepth = 512

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x), .number(let y)): x == y
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)):
            x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }
}

// MARK: - accessors

extension JSONValue {
    public var isNull: Bool { if case .null = self { true } else { false } }
    public var bool: Bool? { if case .bool(let v) = self { v } else { nil } }
    public var number: Double? { if case .number(let v) = self { v } else { nil } }
    public var string: String? { if case .string(let v) = self { v } else { nil } }
    public var array: [JSONValue]? { if case .array(let v) = self { v } else { nil } }
    public var object: [(key: String, value: JSONValue)]? { if case .object(let v) = self { v } else { nil } }

    /// The number as an integer, when it is one exactly and fits.
    public var int64: Int64? {
        guard case .number(let d) = self, d.rounded(.towardZero) == d,
              d >= -9_223_372_036_854_775_808.0, d < 9_223_372_036_854_775_808.0 else { return nil }
        return Int64(d)
    }

    /// The value of `key` in an object (nil for a missing key or a non-object).
    public subscript(key: String) -> JSONValue? {
        guard case .object(let entries) = self else { return nil }
        for entry in entries where entry.key == key { return entry.value }
        return nil
    }

    /// The element at `index` of an array (nil when out of range or not an array).
    public subscript(index: Int) -> JSONValue? {
        guard case .array(let items) = self, items.indices.contains(index) else { return nil }
        return items[index]
    }

    /// What the value is, for messages: "null", "a boolean", "a number",
    /// "a string", "a list", "an object".
    public var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "a list"
        case .object: "an object"
        }
    }

    /// The value as compact JSON text. Integral numbers below 2^53 are written
    /// without a fraction; others as Swift prints a Double.
    public var jsonText: String {
        var out = ""
        write(to: &out)
        return out
    }

    private func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let d): out += JSONValue.format(d)
        case .string(let s): JSONValue.quote(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.write(to: &out)
            }
            out += "]"
        case .object(let entries):
            out += "{"
            for (i, entry) in entries.enumerated() {
                if i > 0 { out += "," }
                JSONValue.quote(entry.key, to: &out)
                out += ":"
                entry.value.write(to: &out)
            }
            out += "}"
        }
    }

    /// A number as JSON writes it: `300`, `-1.5`, `1e+300`.
    public static func format(_ d: Double) -> String {
        if d.rounded(.towardZero) == d, abs(d) < 9_007_199_254_740_992 { return String(Int64(d)) }
        return d.isFinite ? "\(d)" : "null"
    }

    static func quote(_ s: String, to out: inout String) {
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

// MARK: - errors

/// Why a text is not JSON: where (a byte offset into its UTF-8) and what was
/// expected there.
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset into the text's UTF-8 where the problem is.
    public var offset: Int
    /// What would have been valid there: "a value", "',' or ']'", "end of input"…
    public var expected: String
    /// What was there instead: "'x'", "end of input"; empty when beside the point.
    public var found: String

    public init(offset: Int, expected: String, found: String = "") {
        self.offset = offset
        self.expected = expected
        self.found = found
    }

    public var description: String {
        "at offset \(offset): expected \(expected)" + (found.isEmpty ? "" : ", found \(found)")
    }
}

// MARK: - parser

/// A recursive-descent parser over UTF-8 bytes.
struct JSONParser {
    let bytes: [UInt8]
    var i = 0
    var depth = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func document() throws(JSONError) -> JSONValue {
        skipSpace()
        let value = try value()
        skipSpace()
        guard i == bytes.count else { throw error("end of input") }
        return value
    }

    /// The byte at the cursor, described for messages.
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

    func error(_ expected: String, at offset: Int? = nil) -> JSONError {
        let at = offset ?? i
        return JSONError(offset: at, expected: expected, found: found(at: at))
    }

    mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return
            }
        }
    }

    mutating func value() throws(JSONError) -> JSONValue {
        guard i < bytes.count else { throw error("a value") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return try object()
        case UInt8(ascii: "["): return try array()
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
        default: throw error("a value")
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONError) {
        let start = i
        let count = word.utf8CodeUnitCount
        for k in 0..<count {
            guard i < bytes.count, bytes[i] == word.utf8Start[k] else {
                throw error("'\(word)'", at: start)
            }
            i += 1
        }
    }

    mutating func nest() throws(JSONError) {
        depth += 1
        guard depth <= JSONValue.maxDepth else {
            throw JSONError(offset: i, expected: "arrays and objects nested at most \(JSONValue.maxDepth) deep")
        }
    }

    mutating func array() throws(JSONError) -> JSONValue {
        try nest()
        i += 1  // [
        var items: [JSONValue] = []
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
            guard i < bytes.count else { throw error("',' or ']'") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "]") { i += 1; break }
            throw error("',' or ']'")
        }
        depth -= 1
        return .array(items)
    }

    mutating func object() throws(JSONError) -> JSONValue {
        try nest()
        i += 1  // {
        var entries: [(key: String, value: JSONValue)] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
            i += 1
            depth -= 1
            return .object(entries)
        }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw error("a string key") }
            let keyOffset = i
            let key = try string()
            if entries.contains(where: { $0.key == key }) {
                var quoted = ""
                JSONValue.quote(key, to: &quoted)
                throw JSONError(offset: keyOffset, expected: "a key not used before in this object", found: quoted)
            }
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw error("':'") }
            i += 1
            skipSpace()
            entries.append((key, try value()))
            skipSpace()
            guard i < bytes.count else { throw error("',' or '}'") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            if bytes[i] == UInt8(ascii: "}") { i += 1; break }
            throw error("',' or '}'")
        }
        depth -= 1
        return .object(entries)
    }

    /// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, and finite as a Double.
    mutating func number() throws(JSONError) -> Double {
        let start = i
        func isDigit(_ k: Int) -> Bool { k < bytes.count && bytes[k] >= 0x30 && bytes[k] <= 0x39 }
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        guard isDigit(i) else { throw error("a digit") }
        if bytes[i] == UInt8(ascii: "0") {
            i += 1
            if isDigit(i) { throw error("'.', 'e' or the end of the number (no leading zeros)") }
        } else {
            while isDigit(i) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            guard isDigit(i) else { throw error("a digit after '.'") }
            while isDigit(i) { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard isDigit(i) else { throw error("a digit in the exponent") }
            while isDigit(i) { i += 1 }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        guard let d = Double(text), d.isFinite else {
            throw JSONError(offset: start, expected: "a number within the range of a double", found: text)
        }
        return d
    }

    mutating func string() throws(JSONError) -> String {
        i += 1  // "
        var out: [UInt8] = []
        while true {
            guard i < bytes.count else { throw error("'\"' to end the string") }
            let b = bytes[i]
            switch b {
            case UInt8(ascii: "\""):
                i += 1
                return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                let escapeStart = i
                i += 1
                guard i < bytes.count else { throw error("an escape character") }
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
                    var code = try hexQuad()
                    if code >= 0xDC00 && code <= 0xDFFF {
                        throw JSONError(offset: escapeStart, expected: "a high surrogate before a low one",
                                        found: "\\u" + hex4(code))
                    }
                    if code >= 0xD800 && code <= 0xDBFF {
                        guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                            throw error("'\\u' and a low surrogate after \\u" + hex4(code))
                        }
                        let lowStart = i
                        i += 2
                        let low = try hexQuad()
                        guard low >= 0xDC00 && low <= 0xDFFF else {
                            throw JSONError(offset: lowStart, expected: "a low surrogate (\\uDC00 to \\uDFFF)",
                                            found: "\\u" + hex4(low))
                        }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    UTF8.encode(Unicode.Scalar(code)!) { out.append($0) }
                default:
                    throw error("one of \" \\ / b f n r t u after '\\'", at: i - 1)
                }
            default:
                guard b >= 0x20 else { throw error("a character (control characters must be escaped)") }
                out.append(b)
                i += 1
            }
        }
    }

    mutating func hexQuad() throws(JSONError) -> UInt32 {
        var code: UInt32 = 0
        for _ in 0..<4 {
            guard i < bytes.count else { throw error("four hex digits after '\\u'") }
            let b = bytes[i]
            let digit: UInt8
            switch b {
            case 0x30...0x39: digit = b - 0x30
            case 0x41...0x46: digit = b - 0x41 + 10
            case 0x61...0x66: digit = b - 0x61 + 10
            default: throw error("four hex digits after '\\u'")
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
