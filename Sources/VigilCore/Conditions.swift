/// The small expression language of rules: comparisons of one monitor's
/// latest field value with a literal, combined by `all`, `any` and `none`.
///
///     comparison := reference operator literal
///     reference  := MONITOR "." FIELD | MONITOR "." KIND "." FIELD
///     operator   := "<" | "<=" | ">" | ">=" | "==" | "!="
///     literal    := number | "string" | 'string' | true | false
///
/// A reference is split on dots here and resolved against the manifest's
/// monitors and their plugins' self-descriptions later (`ConditionResolver`),
/// since a monitor name may itself contain dots.

/// A comparison operator.
public enum ComparisonOperator: String, Sendable, CaseIterable {
    case less = "<", lessOrEqual = "<=", greater = ">", greaterOrEqual = ">=", equal = "==", notEqual = "!="

    /// Whether it orders its operands (and so cannot compare booleans).
    public var isOrdering: Bool { self != .equal && self != .notEqual }

    func holds<T: Comparable>(_ a: T, _ b: T) -> Bool {
        switch self {
        case .less: a < b
        case .lessOrEqual: a <= b
        case .greater: a > b
        case .greaterOrEqual: a >= b
        case .equal: a == b
        case .notEqual: a != b
        }
    }
}

/// The right-hand side of a comparison.
public enum Literal: Sendable, Equatable, CustomStringConvertible {
    case number(Double)
    case string(String)
    case bool(Bool)

    public var description: String {
        switch self {
        case .number(let n): n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .string(let s): "\"\(s)\""
        case .bool(let b): String(b)
        }
    }

    /// "a number", "a string", "a boolean": for messages.
    public var typeName: String {
        switch self {
        case .number: "a number"
        case .string: "a string"
        case .bool: "a boolean"
        }
    }
}

/// `power.level < 20` as parsed: the reference still as written.
public struct ParsedComparison: Sendable, Equatable {
    /// The reference's dot-separated parts: [monitor…, kind?, field].
    public var reference: [String]
    public var op: ComparisonOperator
    public var literal: Literal
    /// The comparison's text, and where the reference starts.
    public var text: String
    public var location: SourceLocation

    public var referenceText: String { reference.joined(separator: ".") }
}

/// A parse error with the column it was found at.
public struct ConditionSyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    /// Zero-based offset in the text, in characters.
    public var offset: Int
    public var description: String { message }
}

/// Parses one comparison. Pure; reports the first error with its offset.
public enum ConditionParser {
    public static func parse(_ text: String, at location: SourceLocation) -> Result<ParsedComparison, ConditionSyntaxError> {
        var scanner = Scanner(Array(text))
        scanner.skipSpaces()
        var referenceStart = location
        referenceStart.column += scanner.position
        // The reference: names joined by dots.
        var parts: [String] = []
        while true {
            let start = scanner.position
            let name = scanner.take { $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }
            guard !name.isEmpty else {
                let found = scanner.peek.map { "'\($0)'" } ?? "the end"
                let what = parts.isEmpty ? "a reference like power.level" : "a name after '\(parts.joined(separator: "."))."
                return .failure(ConditionSyntaxError(message: "expected \(what)\(parts.isEmpty ? "" : "'"), found \(found)", offset: start))
            }
            parts.append(name)
            guard scanner.peek == "." else { break }
            scanner.advance()
        }
        guard parts.count >= 2 else {
            return .failure(ConditionSyntaxError(
                message: "'\(parts[0])' names no field: write MONITOR.FIELD (or MONITOR.KIND.FIELD)",
                offset: referenceStart.column - location.column))
        }
        scanner.skipSpaces()
        let opStart = scanner.position
        let opText = scanner.take { "<>=!".contains($0) }
        guard let op = ComparisonOperator(rawValue: opText) else {
            let found = opText.isEmpty ? (scanner.peek.map { "'\($0)'" } ?? "the end") : "'\(opText)'"
            let hint = opText == "=" ? " ('=' is written '==')" : ""
            return .failure(ConditionSyntaxError(
                message: "expected a comparison (< <= > >= == !=) after '\(parts.joined(separator: "."))', found \(found)\(hint)",
                offset: opStart))
        }
        scanner.skipSpaces()
        let literalStart = scanner.position
        let literal: Literal
        switch scanner.peek {
        case "\"", "'":
            guard let s = scanner.quoted() else {
                return .failure(ConditionSyntaxError(message: "a string that is not closed", offset: literalStart))
            }
            literal = .string(s)
        case nil:
            return .failure(ConditionSyntaxError(message: "expected a value after '\(op.rawValue)'", offset: literalStart))
        default:
            let word = scanner.take { !$0.isWhitespace }
            if word == "true" || word == "false" {
                literal = .bool(word == "true")
            } else if let n = Double(word), n.isFinite, word.first != "+" || word.count > 1 {
                literal = .number(n)
            } else {
                return .failure(ConditionSyntaxError(
                    message: "'\(word)' is not a number, a quoted string, true or false", offset: literalStart))
            }
        }
        scanner.skipSpaces()
        if let extra = scanner.peek {
            return .failure(ConditionSyntaxError(
                message: "unexpected '\(extra)' after the comparison; combine comparisons with all:, any: or none:",
                offset: scanner.position))
        }
        return .success(ParsedComparison(reference: parts, op: op, literal: literal, text: text, location: referenceStart))
    }

    private struct Scanner {
        let chars: [Character]
        var position = 0
        init(_ chars: [Character]) { self.chars = chars }
        var peek: Character? { position < chars.count ? chars[position] : nil }
        mutating func advance() { position += 1 }
        mutating func skipSpaces() { while let c = peek, c.isWhitespace { advance() } }
        mutating func take(while ok: (Character) -> Bool) -> String {
            let start = position
            while let c = peek, ok(c) { advance() }
            return String(chars[start..<position])
        }
        /// A string in matching quotes; `\` escapes the next character.
        mutating func quoted() -> String? {
            guard let quote = peek else { return nil }
            advance()
            var out = ""
            while let c = peek {
                advance()
                if c == quote { return out }
                if c == "\\" {
                    guard let next = peek else { return nil }
                    advance()
                    out.append(next)
                } else {
                    out.append(c)
                }
            }
            return nil
        }
    }
}

/// A rule's condition as written: comparisons nested in all/any/none.
public indirect enum ConditionTree<Leaf: Sendable>: Sendable {
    case leaf(Leaf)
    case all([ConditionTree])
    case any([ConditionTree])
    case none([ConditionTree])

    /// Every leaf, depth first.
    public var leaves: [Leaf] {
        switch self {
        case .leaf(let l): [l]
        case .all(let c), .any(let c), .none(let c): c.flatMap(\.leaves)
        }
    }

    public func map<T>(_ transform: (Leaf) throws -> T) rethrows -> ConditionTree<T> {
        switch self {
        case .leaf(let l): .leaf(try transform(l))
        case .all(let c): .all(try c.map { try $0.map(transform) })
        case .any(let c): .any(try c.map { try $0.map(transform) })
        case .none(let c): .none(try c.map { try $0.map(transform) })
        }
    }

    /// `all` of nothing is true, `any` of nothing false, `none` of nothing true.
    public func evaluate(_ leaf: (Leaf) -> Bool) -> Bool {
        switch self {
        case .leaf(let l): leaf(l)
        case .all(let c): c.allSatisfy { $0.evaluate(leaf) }
        case .any(let c): c.contains { $0.evaluate(leaf) }
        case .none(let c): !c.contains { $0.evaluate(leaf) }
        }
    }
}
