import CYaml

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

/// The manifest as a tree of located nodes: what the YAML parser read, with `${ENV}`
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
/// on the way: bytes that are not text, syntax errors, tags, duplicate keys,
/// aliases that would expand past `ManifestLimits`, nesting too deep, unset
/// environment variables.
///
/// The tree is composed here from libyaml's events rather than by
/// `Yams.compose`, because Yams expands nothing but hashes every mapping key
/// whole to find duplicates (a key that is an alias of a billion-node tree
/// hangs it) and gives no place for an alias. Composing from events counts
/// what each alias brings in before anything is spent on it, reports it at
/// the alias, and finds every duplicate key in one pass. libyaml is the
/// `CYaml` module of the Yams package: the same parser, its events instead
/// of its tree.
public struct ConfigParser {
    public var file: String
    public var environment: [String: String]

    public init(file: String, environment: [String: String]) {
        self.file = file
        self.environment = environment
    }

    public func parse(_ text: String) -> (ConfigNode?, [Diagnostic]) {
        var text = text
        return text.withUTF8 { parse(utf8: $0) }
    }

    /// Parses the bytes of a manifest as they are: a NUL or an invalid byte is
    /// reported where it is, never cut or replaced.
    public func parse(utf8 bytes: UnsafeBufferPointer<UInt8>) -> (ConfigNode?, [Diagnostic]) {
        let problems = ManifestText.check(bytes, file: file)
        guard problems.isEmpty else { return (nil, problems) }
        if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) {
            return (nil, [Diagnostic(at: loc(1, 1), "the manifest is empty",
                                     hint: "a manifest needs at least a 'monitors:' mapping; see manifests/default.yaml")])
        }
        var composer = Composer(parser: self, bytes: bytes)
        return composer.run()
    }

    func loc(_ line: Int, _ column: Int) -> SourceLocation {
        SourceLocation(file: file, line: line, column: column)
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
            if let sep = body.firstRange(of: ":-") {
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

}

/// Builds `ConfigNode`s from libyaml's events, one document, with the limits
/// of `ManifestLimits`.
private struct Composer {
    let parser: ConfigParser
    let bytes: UnsafeBufferPointer<UInt8>
    var diagnostics: [Diagnostic] = []

    /// A list or mapping being built.
    struct Frame {
        var isMapping: Bool
        var location: SourceLocation
        var anchor: String?
        var items: [ConfigNode] = []
        var entries: [ConfigEntry] = []
        /// In a mapping: the next node is a key.
        var expectingKey = true
        /// The key of the value to come; nil when the key was refused (its value is skipped).
        var key: ConfigScalar?
        var seen: [String: SourceLocation] = [:]
        /// Nodes in this subtree, aliases expanded, and its height.
        var count = 1
        var height = 1
    }

    struct Built {
        var node: ConfigNode
        var count: Int
        var height: Int
    }

    var stack: [Frame] = []
    var anchors: [String: Built] = [:]
    var aliasNodes = 0
    var root: ConfigNode?
    var documents = 0
    var bomLength = 0

    init(parser: ConfigParser, bytes: UnsafeBufferPointer<UInt8>) {
        self.parser = parser
        self.bytes = bytes
    }

    private enum Step { case next, done, failed }

    mutating func run() -> (ConfigNode?, [Diagnostic]) {
        let yaml = UnsafeMutablePointer<yaml_parser_t>.allocate(capacity: 1)
        defer { yaml.deallocate() }
        guard yaml_parser_initialize(yaml) == 1 else {
            return (nil, [Diagnostic(at: parser.loc(1, 1), "cannot parse the manifest: out of memory")])
        }
        defer { yaml_parser_delete(yaml) }
        // With the encoding given, libyaml would read a BOM as text: skip it, as its own detection does.
        bomLength = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        yaml_parser_set_encoding(yaml, YAML_UTF8_ENCODING)
        yaml_parser_set_input_string(yaml, bytes.baseAddress.map { $0 + bomLength }, bytes.count - bomLength)
        var event = yaml_event_t()
        while true {
            guard yaml_parser_parse(yaml, &event) == 1 else {
                diagnostics.append(error(of: yaml.pointee))
                return (nil, diagnostics)
            }
            let step = handle(event)
            yaml_event_delete(&event)
            switch step {
            case .next: continue
            case .done: return (root, diagnostics)
            case .failed: return (nil, diagnostics)
            }
        }
    }

    private func location(_ mark: yaml_mark_t) -> SourceLocation {
        parser.loc(Int(mark.line) + 1, Int(mark.column) + 1)
    }

    private mutating func handle(_ event: yaml_event_t) -> Step {
        let at = location(event.start_mark)
        switch event.type {
        case YAML_STREAM_START_EVENT, YAML_DOCUMENT_END_EVENT:
            return .next
        case YAML_DOCUMENT_START_EVENT:
            guard documents == 0 else {
                diagnostics.append(Diagnostic(at: at, "a manifest is one YAML document, and a second one starts here",
                                              hint: "remove this '---' and what follows, or move it to another file"))
                return .failed
            }
            documents += 1
            return .next
        case YAML_STREAM_END_EVENT:
            guard documents > 0, root != nil else {
                diagnostics.append(Diagnostic(at: parser.loc(1, 1), "the manifest holds no YAML document",
                                              hint: "a manifest needs at least a 'monitors:' mapping"))
                return .failed
            }
            return .done
        case YAML_ALIAS_EVENT:
            let name = string(event.data.alias.anchor) ?? ""
            guard let target = anchors[name] else {
                diagnostics.append(Diagnostic(at: at, "alias '*\(name)' refers to no anchor before it",
                                              hint: "define '&\(name)' on a value above this line; an anchor cannot refer to itself"))
                return add(Built(node: .scalar(ConfigScalar("", at: at)), count: 1, height: 1))
            }
            aliasNodes += target.count
            if aliasNodes > ManifestLimits.maxAliasNodes {
                diagnostics.append(Diagnostic(at: at, "alias '*\(name)' would make the manifest more than \(ManifestLimits.maxAliasNodes) nodes of repeated values (\(aliasNodes) with this one)",
                                              hint: "anchors and aliases are for sharing a few settings; write the values out, or share smaller ones"))
                return .failed
            }
            if stack.count + target.height > ManifestLimits.maxDepth {
                diagnostics.append(Diagnostic(at: at, "alias '*\(name)' nests values more than \(ManifestLimits.maxDepth) levels deep"))
                return .failed
            }
            return add(target)
        case YAML_SCALAR_EVENT:
            let s = event.data.scalar
            checkTag(s.tag, at: at)
            let text = String(decoding: UnsafeBufferPointer(start: s.value, count: Int(s.length)), as: UTF8.self)
            let quoted = s.style != YAML_PLAIN_SCALAR_STYLE
            let isKey = stack.last.map { $0.isMapping && $0.expectingKey } ?? false
            var value = text
            if text.utf8.contains(0) {
                diagnostics.append(Diagnostic(at: at, "a value holds a NUL character (an escape such as \"\\0\")",
                                              hint: "a NUL would cut the value short where it is used; remove it"))
            } else if !isKey {
                value = parser.interpolate(text, at: at, diagnostics: &diagnostics)
            }
            let built = Built(node: .scalar(ConfigScalar(value, quoted: quoted, at: at)), count: 1, height: 1)
            if let anchor = string(s.anchor) { anchors[anchor] = built }
            return add(built)
        case YAML_SEQUENCE_START_EVENT, YAML_MAPPING_START_EVENT:
            let isMapping = event.type == YAML_MAPPING_START_EVENT
            let tag = isMapping ? event.data.mapping_start.tag : event.data.sequence_start.tag
            let anchor = isMapping ? event.data.mapping_start.anchor : event.data.sequence_start.anchor
            checkTag(tag, at: at)
            guard stack.count < ManifestLimits.maxDepth else {
                diagnostics.append(Diagnostic(at: at, "lists and mappings nest more than \(ManifestLimits.maxDepth) levels deep here",
                                              hint: "a manifest is a few levels deep; check the indentation and the brackets"))
                return .failed
            }
            stack.append(Frame(isMapping: isMapping, location: at, anchor: string(anchor)))
            return .next
        case YAML_SEQUENCE_END_EVENT, YAML_MAPPING_END_EVENT:
            guard let frame = stack.popLast() else { return .failed }
            let node: ConfigNode = frame.isMapping ? .mapping(frame.entries, frame.location) : .sequence(frame.items, frame.location)
            let built = Built(node: node, count: frame.count, height: frame.height)
            if let anchor = frame.anchor { anchors[anchor] = built }
            return add(built)
        default:
            return .next
        }
    }

    /// Puts a finished node into its parent, or makes it the root.
    private mutating func add(_ built: Built) -> Step {
        guard !stack.isEmpty else {
            root = built.node
            return .next
        }
        let top = stack.count - 1
        stack[top].count += built.count
        stack[top].height = max(stack[top].height, built.height + 1)
        guard stack[top].isMapping else {
            stack[top].items.append(built.node)
            return .next
        }
        if stack[top].expectingKey {
            stack[top].expectingKey = false
            stack[top].key = nil
            guard case .scalar(let key) = built.node else {
                diagnostics.append(Diagnostic(at: built.node.location, "a key must be a plain name, not \(built.node.kindName)"))
                return .next
            }
            if let first = stack[top].seen[key.text] {
                diagnostics.append(Diagnostic(at: key.location, "duplicate key '\(key.text)': names must be unique",
                                              hint: "first defined at \(first)"))
                return .next
            }
            stack[top].seen[key.text] = key.location
            stack[top].key = key
        } else {
            stack[top].expectingKey = true
            if let key = stack[top].key { stack[top].entries.append(ConfigEntry(key: key, value: built.node)) }
        }
        return .next
    }

    /// Tags are refused: a manifest is plain data, typed by the keys that hold it.
    private mutating func checkTag(_ tag: UnsafeMutablePointer<yaml_char_t>?, at: SourceLocation) {
        guard let text = string(tag) else { return }
        let shown = text.hasPrefix("tag:yaml.org,2002:") ? "!!" + text.dropFirst(18) : text
        diagnostics.append(Diagnostic(at: at, "tag '\(shown)': a manifest takes no YAML tags",
                                      hint: "remove the tag; quote a value to make it a string"))
    }

    private func string(_ pointer: UnsafeMutablePointer<yaml_char_t>?) -> String? {
        guard let pointer else { return nil }
        var length = 0
        while pointer[length] != 0 { length += 1 }
        return String(decoding: UnsafeBufferPointer(start: pointer, count: length), as: UTF8.self)
    }

    private func error(of yaml: yaml_parser_t) -> Diagnostic {
        let problem = yaml.problem.map { String(cString: $0) } ?? "unknown error"
        switch yaml.error {
        case YAML_MEMORY_ERROR:
            return Diagnostic(at: parser.loc(1, 1), "cannot parse the manifest: out of memory")
        case YAML_READER_ERROR:
            return Diagnostic(at: ManifestText.location(ofByte: yaml.problem_offset + bomLength, in: bytes, file: parser.file),
                              "not a YAML text file: \(problem)")
        case YAML_PARSER_ERROR where problem.hasPrefix("Maximum nesting level reached"):
            // libyaml's own limit (1000), met first when its scanner reads a long run of brackets ahead.
            return Diagnostic(at: location(yaml.problem_mark), "lists and mappings nest more than \(ManifestLimits.maxDepth) levels deep here",
                              hint: "a manifest is a few levels deep; check the indentation and the brackets")
        default:
            var message = "invalid YAML: \(problem)"
            if let context = yaml.context {
                message += " (\(String(cString: context)) at \(yaml.context_mark.line + 1):\(yaml.context_mark.column + 1))"
            }
            return Diagnostic(at: location(yaml.problem_mark), message)
        }
    }
}

extension String {
    func replacingUnderscores() -> String {
        contains("_") ? String(filter { $0 != "_" }) : self
    }
}
