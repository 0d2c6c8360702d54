internal import VigilJSON

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

    /// Parses one JSON text (RFC 8259) with Vigil's one JSON reader
    /// (VigilJSON's `JSONReader`), strictly: no comments, no trailing
    /// commas, no single quotes, no leading zeros or `+`, no NaN or infinity,
    /// no control characters in strings, no unpaired surrogates, no duplicate
    /// keys in an object, nothing after the value but whitespace, and at most
    /// `maxDepth` nested arrays and objects.
    public static func parse(_ text: String) throws(JSONError) -> JSONValue {
        do throws(JSONReadError) {
            return JSONValue(try JSONReader.read(Array(text.utf8), maxDepth: maxDepth))
        } catch {
            throw JSONError(offset: error.offset, expected: error.expected, found: error.found)
        }
    }

    /// What the reader read, with each number as its Double.
    private init(_ node: JSONNode) {
        switch node {
        case .null: self = .null
        case .bool(let b): self = .bool(b)
        case .number(let n): self = .number(n.double)
        case .string(let s): self = .string(s)
        case .array(let items): self = .array(items.map { JSONValue($0) })
        case .object(let entries): self = .object(entries.map { (key: $0.key, value: JSONValue($0.value)) })
        }
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
        case .string(let s): JSONNode.quote(s, to: &out)
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
                JSONNode.quote(entry.key, to: &out)
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
