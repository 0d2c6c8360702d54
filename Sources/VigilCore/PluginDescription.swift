/// The type of an option or field, as declared by a plugin. Raw values are
/// those of `vigil_type` in the C header.
public enum ValueType: UInt32, Sendable, CaseIterable, CustomStringConvertible {
    case bool = 1, int, double, string, duration, size, json

    public var description: String {
        switch self {
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .string: "string"
        case .duration: "duration"
        case .size: "size"
        case .json: "json"
        }
    }

    /// "an int", "a duration": for messages.
    public var withArticle: String {
        switch self {
        case .int: "an int"
        case .json: "a JSON value"
        default: "a \(self)"
        }
    }

    /// Types an event field may have.
    public var isFieldType: Bool { rawValue <= ValueType.string.rawValue }
}

public struct OptionSpec: Sendable, Equatable, Codable {
    public var name: String
    public var type: ValueType
    /// The default as YAML text; nil when there is none.
    public var defaultText: String?
    public var doc: String
    public var required: Bool
    /// A value that works on any machine, as YAML text (ABI 1.3): what
    /// `vigil plugins check` gives the option when it is given nothing.
    /// Never used by `run` or `validate`. nil when there is none.
    public var exampleText: String?

    /// Its JSON keys (PluginDescriptionJSON.swift).
    enum CodingKeys: String, CodingKey {
        case name, type, doc, required
        case defaultText = "default_text"
        case exampleText = "example_text"
    }

    public init(name: String, type: ValueType, defaultText: String?, doc: String, required: Bool = false,
                exampleText: String? = nil) {
        self.name = name
        self.type = type
        self.defaultText = defaultText
        self.doc = doc
        self.required = required
        self.exampleText = exampleText
    }
}

public struct FieldSpec: Sendable, Equatable, Codable {
    public var name: String
    public var type: ValueType
    public var unit: String
    public var doc: String
    /// Says which thing the event is about (ABI 1.4 `VIGIL_FIELD_IDENTITY`):
    /// an interface's name, a mount point. A string or int field.
    public var identity: Bool
    /// Only grows, but for resets (ABI 1.4 `VIGIL_FIELD_COUNTER`); else a
    /// gauge. An int or double field, never an identity.
    public var counter: Bool

    public init(name: String, type: ValueType, unit: String = "", doc: String = "",
                identity: Bool = false, counter: Bool = false) {
        self.name = name
        self.type = type
        self.unit = unit
        self.doc = doc
        self.identity = identity
        self.counter = counter
    }

    enum CodingKeys: String, CodingKey {
        case name, type, unit, doc, identity, counter
    }

    /// `identity` and `counter` may be absent (false), as in a 1.3 plugin's
    /// description.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        type = try c.decode(ValueType.self, forKey: .type)
        unit = try c.decode(String.self, forKey: .unit)
        doc = try c.decode(String.self, forKey: .doc)
        identity = try c.decodeIfPresent(Bool.self, forKey: .identity) ?? false
        counter = try c.decodeIfPresent(Bool.self, forKey: .counter) ?? false
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(type, forKey: .type)
        try c.encode(unit, forKey: .unit)
        try c.encode(doc, forKey: .doc)
        if identity { try c.encode(true, forKey: .identity) }
        if counter { try c.encode(true, forKey: .counter) }
    }
}

public struct EventSpec: Sendable, Equatable, Codable {
    public var kind: String
    public var doc: String
    public var fields: [FieldSpec]
    /// Fields beyond `fields` are named by the instance's options (ABI 1.2
    /// `VIGIL_EVENT_DYNAMIC_FIELDS`): `fields` lists only those always present.
    public var dynamicFields: Bool
    /// A snapshot on start, then only on change (ABI 1.4
    /// `VIGIL_EVENT_ON_CHANGE`): silence means the last values still hold.
    public var onChange: Bool

    /// Its JSON keys (PluginDescriptionJSON.swift).
    enum CodingKeys: String, CodingKey {
        case kind, doc, fields
        case dynamicFields = "dynamic_fields"
        case onChange = "on_change"
    }

    public init(kind: String, doc: String, fields: [FieldSpec], dynamicFields: Bool = false, onChange: Bool = false) {
        self.kind = kind
        self.doc = doc
        self.onChange = onChange
        self.fields = fields
        self.dynamicFields = dynamicFields
    }

    /// `on_change` may be absent (false), as in a 1.3 plugin's description.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        kind = try c.decode(String.self, forKey: .kind)
        doc = try c.decode(String.self, forKey: .doc)
        fields = try c.decode([FieldSpec].self, forKey: .fields)
        dynamicFields = try c.decode(Bool.self, forKey: .dynamicFields)
        onChange = try c.decodeIfPresent(Bool.self, forKey: .onChange) ?? false
    }
}

extension PluginDescription {
    /// The poll interval an instance gets: the manifest's, else the plugin's
    /// default, else 10 s; 0 for push-only plugins.
    public func effectiveInterval(_ configured: Int64?) -> Int64 {
        guard polled else { return 0 }
        if let configured { return configured }
        guard defaultInterval > 0 else { return 10_000_000_000 }
        // A plugin's default is held to the manifest's bounds: 1 ns would
        // poll without pause, 2^63 would overflow every deadline.
        return min(max(defaultInterval, Self.intervalBounds.lowerBound), Self.intervalBounds.upperBound)
    }

    /// The default interval as the host will poll at it, and what the plugin
    /// declared when that differs: "10s", "1ms (it declares 1ns; the host
    /// polls at most every 1ms)", "10s (the host's default; it declares
    /// none)". What `plugins describe` and `plugins check` show.
    public var defaultIntervalShown: String {
        let used = effectiveInterval(nil)
        let shown = Units.formatDuration(used)
        if defaultInterval <= 0 { return "\(shown) (the host's default; it declares none)" }
        if used == defaultInterval { return shown }
        let bound = used < defaultInterval ? "at least every \(Units.formatDuration(Self.intervalBounds.upperBound))"
                                           : "at most every \(Units.formatDuration(Self.intervalBounds.lowerBound))"
        return "\(shown) (it declares \(Units.formatDuration(defaultInterval)); the host polls \(bound))"
    }

    /// The poll intervals the host runs: from 1 ms (the manifest's floor) to
    /// 365 days.
    public static let intervalBounds: ClosedRange<Int64> = 1_000_000...(365 * 86_400 * 1_000_000_000)
}

/// What a plugin says about itself: enough to validate a manifest and to
/// document the plugin, without starting anything. Read from a plugin's
/// descriptor in the process that loaded it (`PluginLoader`), or from that
/// process's JSON (`init(json:)`, PluginDescriptionJSON.swift); both are held
/// to `problems()`.
public struct PluginDescription: Sendable, Equatable, Codable {
    public var name: String
    public var version: String
    public var summary: String
    public var abiMajor: Int
    public var abiMinor: Int
    public var options: [OptionSpec]
    public var events: [EventSpec]
    /// Nanoseconds; 0 for push-only plugins.
    public var defaultInterval: Int64
    /// Whether the host polls it (it has a `poll` callback).
    public var polled: Bool
    public var path: String
    /// "output" for an output; absent (a monitor) otherwise, so that JSON of
    /// hosts before outputs still reads.
    private var kindName: String?

    /// What the plugin is: a monitor (emits events) or an output (ABI 1.5:
    /// takes them, as a sink of `type: plugin`).
    public enum Kind: String, Sendable, Equatable {
        case monitor, output
    }

    public var kind: Kind {
        get { kindName.flatMap(Kind.init(rawValue:)) ?? .monitor }
        set { kindName = newValue == .monitor ? nil : newValue.rawValue }
    }

    /// Its JSON keys (PluginDescriptionJSON.swift).
    enum CodingKeys: String, CodingKey {
        case name, version, summary, options, events, polled, path
        case abiMajor = "abi_major", abiMinor = "abi_minor", defaultInterval = "default_interval_ns"
        case kindName = "kind"
    }

    public init(name: String, version: String, summary: String, abiMajor: Int, abiMinor: Int,
                options: [OptionSpec], events: [EventSpec], defaultInterval: Int64, polled: Bool, path: String,
                kind: Kind = .monitor) {
        self.kindName = kind == .monitor ? nil : kind.rawValue
        self.name = name
        self.version = version
        self.summary = summary
        self.abiMajor = abiMajor
        self.abiMinor = abiMinor
        self.options = options
        self.events = events
        self.defaultInterval = defaultInterval
        self.polled = polled
        self.path = path
    }

    /// Kinds the host emits on behalf of every monitor.
    public static let hostKinds = [
        EventSpec(kind: "availability", doc: "The monitor's source appeared or went away (emitted by the host).",
                  fields: [FieldSpec(name: "available", type: .bool), FieldSpec(name: "reason", type: .string)],
                  onChange: true),
    ]

    /// Kinds the host emits on a monitor's behalf (`MONITOR/availability`,
    /// `MONITOR/threshold`) or under a rule's name (`RULE/rule`): a plugin
    /// may neither declare nor emit them, so that it cannot forge them.
    public static let reservedKinds: Set<String> = ["availability", "threshold", "rule"]

    /// The longest text a description may hold (a name, a doc, a default):
    /// 64 KiB of UTF-8.
    public static let maxTextBytes = 65_536
    /// The most options, event kinds, or fields of one kind, a description
    /// may declare.
    public static let maxDeclarations = 4096

    /// Problems with the description itself (names, types, defaults that do
    /// not type-check, texts and lists over the limits). Empty for a
    /// well-formed description. The one judge of a description, wherever it
    /// was read.
    public func problems() -> [String] {
        var problems = sizeProblems()
        if let kindName, Kind(rawValue: kindName) == nil { problems.append("plugin kind '\(kindName)' is not monitor or output") }
        if kind == .output && (!events.isEmpty || polled) { problems.append("an output declares no event kinds and is not polled") }
        if !Self.isIdentifier(name, allowDash: true) { problems.append("plugin name '\(name)' is not [a-z][a-z0-9_-]*") }
        var seen = Set<String>()
        for option in options {
            if !Self.isIdentifier(option.name) { problems.append("option name '\(option.name)' is not [a-z][a-z0-9_]*") }
            if !seen.insert(option.name).inserted { problems.append("option '\(option.name)' is declared twice") }
            // Defaults and examples are YAML text of the option's type.
            for (what, text) in [("default", option.defaultText), ("example", option.exampleText)] {
                guard let text else { continue }
                if case .failure(let why) = Self.value(of: text, as: option.type, path: path) {
                    problems.append(option.type == .json
                        ? "\(what) '\(text)' of json option '\(option.name)' does not parse: \(why)"
                        : "\(what) '\(text)' of option '\(option.name)' is not \(option.type.withArticle): \(why)")
                }
            }
        }
        seen.removeAll()
        for event in events {
            if !Self.isIdentifier(event.kind) { problems.append("event kind '\(event.kind)' is not [a-z][a-z0-9_]*") }
            if !seen.insert(event.kind).inserted { problems.append("event kind '\(event.kind)' is declared twice") }
            if Self.reservedKinds.contains(event.kind) {
                problems.append("event kind '\(event.kind)' is the host's own (reserved: \(Self.reservedKinds.sorted().joined(separator: ", ")))")
            }
            var fieldNames = Set<String>()
            for field in event.fields {
                if field.name.isEmpty { problems.append("a field of kind '\(event.kind)' has no name") }
                if !field.type.isFieldType { problems.append("field '\(field.name)' of kind '\(event.kind)' has type \(field.type); fields are bool, int, double or string") }
                if !fieldNames.insert(field.name).inserted { problems.append("field '\(field.name)' of kind '\(event.kind)' is declared twice") }
                if field.identity && field.type != .string && field.type != .int {
                    problems.append("field '\(field.name)' of kind '\(event.kind)' is an identity but \(field.type.withArticle); identities are string or int")
                }
                if field.counter && (field.identity || (field.type != .int && field.type != .double)) {
                    problems.append("field '\(field.name)' of kind '\(event.kind)' is a counter but \(field.identity ? "also an identity" : field.type.withArticle); counters are int or double")
                }
            }
        }
        if defaultInterval < 0 { problems.append("default interval is negative") }
        return problems
    }

    /// Texts over `maxTextBytes` and lists over `maxDeclarations`. A
    /// descriptor read in-process never has them (the loader stops reading
    /// at these limits); a description that arrives as JSON might.
    func sizeProblems() -> [String] {
        var problems: [String] = []
        func text(_ s: String?, _ what: @autoclosure () -> String) {
            if let s, s.utf8.count > Self.maxTextBytes {
                problems.append("\(what()) is \(s.utf8.count) bytes long (\(Units.formatSize(Int64(Self.maxTextBytes))) at most)")
            }
        }
        func list(_ count: Int, _ what: @autoclosure () -> String) {
            if count > Self.maxDeclarations { problems.append("\(count) \(what())s declared (\(Self.maxDeclarations) at most)") }
        }
        text(name, "name")
        text(version, "version")
        text(summary, "description")
        list(options.count, "option")
        list(events.count, "event kind")
        for option in options {
            text(option.name, "option name")
            text(option.defaultText, "option default")
            text(option.exampleText, "option example")
            text(option.doc, "option doc")
        }
        for event in events {
            text(event.kind, "event kind")
            text(event.doc, "event doc")
            list(event.fields.count, "field of '\(event.kind.prefix(64))'")
            for field in event.fields {
                text(field.name, "field name")
                text(field.unit, "field unit")
                text(field.doc, "field doc")
            }
        }
        return problems
    }

    static func isIdentifier(_ s: String, allowDash: Bool = false) -> Bool {
        guard let first = s.unicodeScalars.first, ("a"..."z").contains(first) else { return false }
        return s.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || (allowDash && $0 == "-")
        }
    }
}

/// An option's value after checking it against the plugin's declaration.
public enum OptionValue: Sendable, Equatable, CustomStringConvertible {
    case none
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    /// Nanoseconds.
    case duration(Int64)
    /// Bytes.
    case size(Int64)
    /// JSON text.
    case json(String)

    public var description: String {
        switch self {
        case .none: "(none)"
        case .bool(let b): "\(b)"
        case .int(let i): "\(i)"
        case .double(let d): "\(d)"
        case .string(let s): s
        case .duration(let ns): Units.formatDuration(ns)
        case .size(let b): Units.formatSize(b)
        case .json(let j): j
        }
    }
}

public struct BoundOption: Sendable, Equatable {
    public var name: String
    public var value: OptionValue

    public init(name: String, value: OptionValue) {
        self.name = name
        self.value = value
    }
}

extension PluginDescription {
    /// A declared default or example, which is YAML text, as a value of
    /// `type` (json: parsed, so `[]` is a list), or why it is not one.
    public static func value(of text: String, as type: ValueType, path: String) -> Result<OptionValue, OptionBinder.ConversionError> {
        if type == .json {
            let (node, parseProblems) = ConfigParser(file: path, environment: [:]).parse(text)
            guard let node, !parseProblems.contains(where: { $0.level == .error }) else {
                return .failure(.init(parseProblems.first { $0.level == .error }?.message ?? "it is empty"))
            }
            return OptionBinder.convert(node, to: type)
        }
        return OptionBinder.convert(.scalar(ConfigScalar(text, at: SourceLocation(file: path, line: 0, column: 0))), to: type)
    }
}

/// Checks a monitor's `options:` against a plugin's declared options and
/// produces every declared option's value, defaults filled in.
public enum OptionBinder {
    public static func bind(_ monitor: MonitorConfig, to plugin: PluginDescription) -> ([BoundOption], [Diagnostic]) {
        bind(monitor.options, at: monitor.optionsLocation, of: "monitor '\(monitor.name)'", to: plugin)
    }

    /// `options` (written at `location`, of `owner`: "monitor 'cpu'", "sink 'out'") against the plugin's declarations.
    public static func bind(_ options: [ConfigEntry], at location: SourceLocation, of owner: String,
                            to plugin: PluginDescription) -> ([BoundOption], [Diagnostic]) {
        var diagnostics: [Diagnostic] = []
        let declared = plugin.options.map(\.name)
        for entry in options where !declared.contains(entry.key.text) {
            let hint = Suggest.hint(for: entry.key.text, in: declared)
                ?? (declared.isEmpty ? "plugin '\(plugin.name)' takes no options"
                                     : "options of '\(plugin.name)': \(declared.joined(separator: ", "))")
            diagnostics.append(Diagnostic(at: entry.key.location,
                                          "unknown option '\(entry.key.text)' for plugin '\(plugin.name)' in \(owner)",
                                          hint: hint))
        }
        var bound: [BoundOption] = []
        for spec in plugin.options {
            if let entry = options.first(where: { $0.key.text == spec.name }) {
                switch convert(entry.value, to: spec.type) {
                case .success(let value): bound.append(BoundOption(name: spec.name, value: value))
                case .failure(let why):
                    diagnostics.append(Diagnostic(at: entry.value.location,
                                                  "option '\(spec.name)' of plugin '\(plugin.name)' must be \(spec.type.withArticle): \(why)",
                                                  hint: spec.doc.isEmpty ? nil : "\(spec.name): \(spec.doc)"))
                }
            } else if let text = spec.defaultText,
                      case .success(let value) = convert(defaultNode(text, type: spec.type, at: location), to: spec.type) {
                bound.append(BoundOption(name: spec.name, value: value))
            } else if spec.required {
                diagnostics.append(Diagnostic(at: location,
                                              "\(owner) needs option '\(spec.name)' (\(spec.type)) for plugin '\(plugin.name)'",
                                              hint: spec.doc.isEmpty ? nil : spec.doc))
            } else {
                bound.append(BoundOption(name: spec.name, value: .none))
            }
        }
        return (bound, diagnostics)
    }

    /// A declared default, which is YAML text: parsed for json options (`[]` is an
    /// empty list, not the string "[]"), a plain scalar for every other type.
    static func defaultNode(_ text: String, type: ValueType, at location: SourceLocation) -> ConfigNode {
        if type == .json, case (let node?, let problems) = ConfigParser(file: location.file, environment: [:]).parse(text),
           problems.isEmpty {
            return node
        }
        return .scalar(ConfigScalar(text, at: location))
    }

    public static func convert(_ node: ConfigNode, to type: ValueType) -> Result<OptionValue, ConversionError> {
        if type == .json { return .success(.json(node.json)) }
        guard case .scalar(let s) = node else { return .failure(ConversionError("found \(node.kindName)")) }
        switch type {
        case .bool:
            if let b = s.bool { return .success(.bool(b)) }
            return .failure(ConversionError("'\(s.text)' is not true or false"))
        case .int:
            if let i = s.int { return .success(.int(i)) }
            return .failure(ConversionError("'\(s.text)' is not a whole number"))
        case .double:
            if let d = s.double { return .success(.double(d)) }
            return .failure(ConversionError("'\(s.text)' is not a number"))
        case .string:
            return .success(.string(s.text))
        case .duration:
            // Held to the manifest's own bounds, so a plugin is never handed
            // a duration that overflows its deadlines.
            guard let ns = Units.parseDuration(s.text) else {
                return .failure(ConversionError("'\(s.text)' is not a duration such as 250ms, 5s or 1m"))
            }
            guard ns >= 0, ns <= ManifestLimits.maxDuration else {
                return .failure(ConversionError("'\(s.text)' is longer than the limit of \(ManifestLimits.maxDurationText)"))
            }
            return .success(.duration(ns))
        case .size:
            guard let b = Units.parseSize(s.text) else {
                return .failure(ConversionError("'\(s.text)' is not a size such as 4096, 64KiB or 1GB"))
            }
            guard b >= 0, b <= ManifestLimits.maxSize else {
                return .failure(ConversionError("'\(s.text)' is larger than the limit of \(ManifestLimits.maxSizeText)"))
            }
            return .success(.size(b))
        case .json:
            return .success(.json(node.json))
        }
    }

    public struct ConversionError: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }
}
