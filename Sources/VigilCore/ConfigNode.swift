import Yams

/// A scalar of the manifest with where it was written.
public struct ConfigScalar: Sendable, Equatable {
    public var text: String
    /// Written in quotes: always a string, never a number, boolean or null.
    public var quoted: Bool
    public var location: SourceLocation

    public init(_ text: String, quoted: Bool = false, at location: SourceLocation) {
        self.text = text
        self.quoted = quoted
        self.location = location
    }

    /// `~`, `null` or nothing at all, unquoted.
    public var isNull: Bool { !quoted && (text.isEmpty || text == "~" || text == "null" || text == "Null" || text == "NULL") }

    /// YAML 1.2 core-schema booleans (and the 1.1 yes/no/on/off people still write).
    public var bool: Bool? {
        guard !quoted else { return nil }
        switch text {
        case "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON": return true
        case "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF": return false
        default: return nil
        }
    }

    public var int: Int64? {
        guard !quoted else { return nil }
        let t = text.replacingUnderscores()
        if t.hasPrefix("0x") { return Int64(t.dropFirst(2), radix: 16) }
        return Int64(t)
    }

    public var double: Double? {
        guard !quoted else { return nil }
        switch text {
        case ".inf", ".Inf", "+.inf": return .infinity
        case "-.inf", "-.Inf": return -.infinity
        case ".nan", ".NaN": return .nan
        default:
            // Swift's Double() also reads "nan", "inf", "infinity" and hex floats ("0x1p3"); in YAML
            // those are strings (NaN and infinity are spelled .nan and .inf, handled above).
            guard !text.contains(where: { $0.isLetter && $0 != "e" && $0 != "E" }) else { return nil }
            return Double(text.replacingUnderscores())
        }
    }
}

/// The manifest as a tree of located nodes: what Yams composed, with `${ENV}`
/// expanded in scalar values and every node knowing its line and column.
public indirect enum ConfigNode: Sendable {
    case scalar(ConfigScalar)
    case sequence([ConfigNode], SourceLocation)
    case mapping([ConfigEntry], SourceLocation)

    public var location: SourceLocation {
        switch self {
        case .scalar(let s): s.location
        case .sequence(_, let l), .mapping(_, let l): l
        }
    }

    public var scalar: ConfigScalar? {
        if case .scalar(let s) = self { return s }
        return nil
    }

    /// A word for error messages: "a string", "a list", "a mapping".
    public var kindName: String {
        switch self {
        case .scalar(let s):
            if s.isNull { return "nothing (null)" }
            if s.bool != nil { return "a boolean" }
            if s.int != nil || s.double != nil { return "a number" }
            return "a string"
        case .sequence: return "a list"
        case .mapping: return "a mapping"
        }
    }

    /// The value as JSON text (for options of type json), with YAML's
    /// core-schema typing of unquoted scalars.
    public var json: String {
        var out: [UInt8] = []
        appendJSON(to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private func appendJSON(to out: inout [UInt8]) {
        switch self {
        case .scalar(let s):
            if s.isNull { out.append(contentsOf: "null".utf8) }
            else if let b = s.bool { out.append(contentsOf: (b ? "true" : "false").utf8) }
            else if let i = s.int { JSONLineEncoder.appendInteger(i, to: &out) }
            else if let d = s.double { JSONLineEncoder.appendDouble(d, to: &out) }
            else { JSONLineEncoder.appendString(s.text, to: &out) }
        case .sequence(let items, _):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.appendJSON(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .mapping(let entries, _):
            out.append(UInt8(ascii: "{"))
            for (i, entry) in entries.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONLineEncoder.appendString(entry.key.text, to: &out)
                out.append(UInt8(ascii: ":"))
                entry.value.appendJSON(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }
}

public struct ConfigEntry: Sendable {
    public var key: ConfigScalar
    public var value: ConfigNode
}

/// Turns manifest text into a `ConfigNode`, collecting every problem found
/// on the way (syntax errors, duplicate keys, unset environment variables).
public struct ConfigParser {
    public var file: String
    public var environment: [String: String]

    public init(file: String, environment: [String: String]) {
        self.file = file
        self.environment = environment
    }

    public func parse(_ text: String) -> (ConfigNode?, [Diagnostic]) {
        var diagnostics: [Diagnostic] = []
        if text.allSatisfy({ $0.isWhitespace }) {
            diagnostics.append(Diagnostic(at: loc(1, 1), "the manifest is empty",
                                          hint: "a manifest needs at least a 'monitors:' mapping; see manifests/default.yaml"))
            return (nil, diagnostics)
        }
        var text = text
        var masked: [SourceLocation: String] = [:]
        var placeholder: UInt32 = 0xE000
        for _ in 0..<64 {
            do {
                guard let root = try Yams.compose(yaml: text) else {
                    diagnostics.append(Diagnostic(at: loc(1, 1), "the manifest holds no YAML document",
                                                  hint: "a manifest needs at least a 'monitors:' mapping"))
                    return (nil, diagnostics)
                }
                let node = convert(root, isKey: false, diagnostics: &diagnostics, masked: masked)
                return (node, diagnostics)
            } catch let YamlError.duplicatedKeysInMapping(duplicates, context) {
                // Yams stops at the first mapping with a repeated key and names its
                // first occurrence. Find the repeats ourselves, report them, hide them
                // behind placeholders of the same length (so every other line and
                // column stays put) and parse again, to report everything in one run.
                // Yams's mark is the first occurrence of the first key in `duplicates`; other
                // repeated keys may have occurred before it, so they wait for the next round.
                let found = DuplicateFinder.find(keys: Array(duplicates.prefix(1)), firstAt: context.mark, in: text)
                if found.isEmpty {
                    let names = duplicates.map { "'\($0)'" }.joined(separator: ", ")
                    diagnostics.append(Diagnostic(at: loc(context.mark.line, context.mark.column),
                                                  "duplicate key \(names) in one mapping"))
                    return (nil, diagnostics)
                }
                for dup in found {
                    diagnostics.append(Diagnostic(at: loc(dup.line, dup.column),
                                                  "duplicate key '\(dup.key)': names must be unique",
                                                  hint: "first defined at \(loc(dup.firstLine, dup.firstColumn))"))
                    let mask = String(repeating: Character(Unicode.Scalar(placeholder)!), count: dup.key.unicodeScalars.count)
                    placeholder += 1
                    text = DuplicateFinder.replace(in: text, line: dup.line, column: dup.column,
                                                   length: dup.key.unicodeScalars.count, with: mask)
                    masked[loc(dup.line, dup.column)] = dup.key
                }
            } catch let error as YamlError {
                diagnostics.append(diagnostic(for: error))
                return (nil, diagnostics)
            } catch {
                diagnostics.append(Diagnostic(at: loc(1, 1), "cannot parse the manifest: \(error)"))
                return (nil, diagnostics)
            }
        }
        return (nil, diagnostics)
    }

    private func loc(_ line: Int, _ column: Int) -> SourceLocation {
        SourceLocation(file: file, line: line, column: column)
    }

    private func location(of node: Node) -> SourceLocation {
        node.mark.map { loc($0.line, $0.column) } ?? loc(1, 1)
    }

    private func convert(_ node: Node, isKey: Bool, diagnostics: inout [Diagnostic],
                         masked: [SourceLocation: String]) -> ConfigNode {
        switch node {
        case .scalar(let s):
            let where_ = location(of: node)
            let quoted = s.style == .singleQuoted || s.style == .doubleQuoted || s.style == .literal || s.style == .folded
            if isKey { return .scalar(ConfigScalar(s.string, quoted: quoted, at: where_)) }
            let expanded = interpolate(s.string, at: where_, diagnostics: &diagnostics)
            return .scalar(ConfigScalar(expanded, quoted: quoted, at: where_))
        case .sequence(let seq):
            return .sequence(seq.map { convert($0, isKey: false, diagnostics: &diagnostics, masked: masked) },
                             location(of: node))
        case .mapping(let map):
            var entries: [ConfigEntry] = []
            for (k, v) in map {
                let key = convert(k, isKey: true, diagnostics: &diagnostics, masked: masked)
                guard case .scalar(let keyScalar) = key else {
                    diagnostics.append(Diagnostic(at: key.location, "a key must be a plain name, not \(key.kindName)"))
                    continue
                }
                if masked[keyScalar.location] != nil { continue }  // a reported duplicate
                entries.append(ConfigEntry(key: keyScalar,
                                           value: convert(v, isKey: false, diagnostics: &diagnostics, masked: masked)))
            }
            return .mapping(entries, location(of: node))
        case .alias(let alias):
            // Yams resolves aliases while composing; an unresolved one is an error.
            diagnostics.append(Diagnostic(at: location(of: node), "unresolved alias '*\(alias.anchor)'"))
            return .scalar(ConfigScalar("", at: location(of: node)))
        }
    }

    /// Expands `${NAME}` and `${NAME:-default}`; `$${` stands for a literal `${`.
    func interpolate(_ text: String, at where_: SourceLocation, diagnostics: inout [Diagnostic]) -> String {
        guard text.contains("$") else { return text }
        var out = ""
        var rest = Substring(text)
        while let dollar = rest.firstIndex(of: "$") {
            out += rest[..<dollar]
            let after = rest[rest.index(after: dollar)...]
            if after.hasPrefix("${") {  // escaped
                out += "${"
                rest = after.dropFirst(2)
                continue
            }
            guard after.hasPrefix("{") else {
                out += "$"
                rest = after
                continue
            }
            guard let close = after.firstIndex(of: "}") else {
                diagnostics.append(Diagnostic(at: where_, "unterminated '${' in \"\(text)\"",
                                              hint: "write ${NAME} or ${NAME:-default}; $${ gives a literal ${"))
                return text
            }
            let body = after[after.index(after: after.startIndex)..<close]
            rest = after[after.index(after: close)...]
            let name: Substring
            var fallback: Substring?
            if let sep = body.range(of: ":-") {
                name = body[..<sep.lowerBound]
                fallback = body[sep.upperBound...]
            } else {
                name = body
            }
            guard let first = name.first, first == "_" || first.isLetter,
                  name.allSatisfy({ $0 == "_" || $0.isLetter || $0.isNumber }) else {
                diagnostics.append(Diagnostic(at: where_, "'${\(body)}' is not a valid environment variable reference",
                                              hint: "names are letters, digits and '_', as in ${HOME} or ${LOG_DIR:-/var/log}"))
                out += "${\(body)}"  // kept as written: one error, not a second one for an empty value
                continue
            }
            if let value = environment[String(name)], !(fallback != nil && value.isEmpty) {
                out += value
            } else if let fallback {
                out += fallback
            } else {
                diagnostics.append(Diagnostic(at: where_, "environment variable '\(name)' is not set",
                                              hint: "set it, or give a default: ${\(name):-VALUE}"))
                out += "${\(body)}"  // kept as written: one error, not a second one for an empty value
            }
        }
        out += rest
        return out
    }

    private func diagnostic(for error: YamlError) -> Diagnostic {
        switch error {
        case let .scanner(context, problem, mark, _),
             let .parser(context, problem, mark, _),
             let .composer(context, problem, mark, _):
            var message = "invalid YAML: \(problem)"
            if let context { message += " (\(context.text) at \(context.mark.line):\(context.mark.column))" }
            return Diagnostic(at: loc(mark.line, mark.column), message)
        case let .reader(problem, offset, _, yaml):
            // Yams gives the offset in Characters (not bytes); columns count scalars, as libyaml's do.
            var line = 1, column = 1
            if let offset {
                for character in yaml.prefix(offset) {
                    if character == "\n" || character == "\r\n" { line += 1; column = 1 } else { column += character.unicodeScalars.count }
                }
            }
            return Diagnostic(at: loc(line, column), "not a YAML text file: \(problem)")
        default:
            return Diagnostic(at: loc(1, 1), "invalid YAML: \(error)")
        }
    }
}

/// Locates repeated keys of one block mapping in the text.
enum DuplicateFinder {
    struct Duplicate {
        var key: String
        var line: Int, column: Int
        var firstLine: Int, firstColumn: Int
    }

    static func find(keys: [String], firstAt mark: Mark, in text: String) -> [Duplicate] {
        let lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false)
        guard mark.line >= 1, mark.line <= lines.count else { return [] }
        let indent = mark.column - 1
        var firstSeen: [String: (Int, Int)] = [:]
        var found: [Duplicate] = []
        var lineNumber = mark.line
        while lineNumber <= lines.count {
            var line = Array(lines[lineNumber - 1])
            if line.last == "\r" { line.removeLast() }
            defer { lineNumber += 1 }
            // The mapping's first line may start with "- " or other text before the key.
            let start: Int
            if lineNumber == mark.line {
                start = indent
            } else {
                let lead = line.prefix(while: { $0 == " " }).count
                if lead == line.count || line[lead] == "#" { continue }  // blank or comment
                if lead < indent { break }  // the mapping ended
                if lead > indent { continue }  // nested content
                start = lead
            }
            guard start < line.count else { continue }
            var key = String(String.UnicodeScalarView(line[start...].prefix(while: { $0 != ":" })))
            while key.hasSuffix(" ") { key.removeLast() }
            guard keys.contains(key), start + key.unicodeScalars.count < line.count else { continue }
            if let first = firstSeen[key] {
                found.append(Duplicate(key: key, line: lineNumber, column: start + 1,
                                       firstLine: first.0, firstColumn: first.1))
            } else {
                firstSeen[key] = (lineNumber, start + 1)
            }
        }
        return found
    }

    static func replace(in text: String, line: Int, column: Int, length: Int, with mask: String) -> String {
        var lines = text.unicodeScalars.split(separator: "\n", omittingEmptySubsequences: false).map { Array($0) }
        let start = column - 1
        guard line - 1 < lines.count, start + length <= lines[line - 1].count else { return text }
        lines[line - 1].replaceSubrange(start..<start + length, with: Array(mask.unicodeScalars))
        return lines.map { String(String.UnicodeScalarView($0)) }.joined(separator: "\n")
    }
}

extension String {
    func replacingUnderscores() -> String {
        contains("_") ? String(filter { $0 != "_" }) : self
    }
}
