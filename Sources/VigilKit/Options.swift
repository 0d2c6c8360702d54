/// The options the host passed to create, by name, defaults filled in, as the
/// host typed them. Monitors with typed options (`DeclaredOptions`) never see
/// this; it is there for plugins whose options are dynamic.
public struct RawOptions: Sendable {
    public enum Raw: Sendable, Equatable {
        case none, bool(Bool), int(Int64), double(Double), string(String), duration(Int64), size(Int64), json(String)
    }

    /// Names and values in the order the host gave them. Arrays, not a
    /// dictionary: a plugin's first `[String: Raw]` makes the Swift runtime
    /// instantiate generic metadata whose `Hashable` requirement is checked by
    /// scanning every loaded image's conformance table — tenths of a
    /// millisecond per plugin load, for a handful of options that a linear
    /// search finds faster. Two arrays rather than one of pairs: an array of
    /// tuples is two more types the runtime builds from their mangled names
    /// in every plugin's create.
    let names: [String]
    let values: [Raw]

    public var entries: [(name: String, value: Raw)] { names.indices.map { (names[$0], values[$0]) } }

    public init(_ entries: [(name: String, value: Raw)]) {
        names = entries.map(\.name)
        values = entries.map(\.value)
    }

    init(names: [String], values: [Raw]) {
        self.names = names
        self.values = values
    }

    /// The value named `name`, or `.none`.
    public subscript(name: String) -> Raw {
        for i in names.indices where names[i] == name { return values[i] }
        return .none
    }

    public func bool(_ name: String) -> Bool? { if case .bool(let v) = self[name] { v } else { nil } }
    public func int(_ name: String) -> Int64? { if case .int(let v) = self[name] { v } else { nil } }
    public func double(_ name: String) -> Double? { if case .double(let v) = self[name] { v } else { nil } }
    public func string(_ name: String) -> String? { if case .string(let v) = self[name] { v } else { nil } }
    /// Nanoseconds.
    public func duration(_ name: String) -> Int64? { if case .duration(let v) = self[name] { v } else { nil } }
    /// Bytes.
    public func size(_ name: String) -> Int64? { if case .size(let v) = self[name] { v } else { nil } }
    public func json(_ name: String) -> String? { if case .json(let v) = self[name] { v } else { nil } }
}

/// The raw options under their older name.
public typealias Options = RawOptions

/// What a monitor's `init` receives: declarations for the self-description,
/// and a decoder from what the host passed.
public protocol MonitorOptions: Sendable {
    /// The options as `vigil plugins describe` shows them.
    static var declarations: [OptionDecl] { get }
    init(decoding raw: RawOptions) throws(MonitorError)
}

extension RawOptions: MonitorOptions {
    /// Raw options are declared in `PluginSpec.options` by hand.
    public static var declarations: [OptionDecl] { [] }
    public init(decoding raw: RawOptions) { self = raw }
}

/// Options declared once, as typed Swift properties with their defaults; the
/// schema adds names and docs, and becomes both the self-description and the
/// decoder:
///
///     struct Options: DeclaredOptions {
///         var procfs = "/proc"
///         var perCPU = false
///         var period: Duration = .seconds(1)
///         static let schema = OptionSchema<Options>(
///             .option("procfs", \.procfs, doc: "Root of the proc filesystem."),
///             .option("per_cpu", \.perCPU, doc: "Also emit one event per CPU."),
///             .option("period", \.period, doc: "How often to look."))
///     }
///
/// The defaults written in the self-description are the property initial
/// values, so they cannot disagree with what `init()` gives.
public protocol DeclaredOptions: MonitorOptions {
    /// Every option at its default.
    init()
    static var schema: OptionSchema<Self> { get }
}

// The schema's code is inlinable, so that it is compiled into the plugin for
// its own options type: run generically from VigilKit, every declaration and
// decode instantiated `OptionEntry<Options>`, arrays of it and key path types
// by mangled name, in every plugin image. Specialized, a key path literal
// captured alone in a closure folds to a plain stored property access, and
// is never built at all.
extension DeclaredOptions {
    @inlinable public static var declarations: [OptionDecl] { schema.declarations }

    @inlinable public init(decoding raw: RawOptions) throws(MonitorError) {
        self = try Self.schema.decode(raw)
    }
}

/// The typed options of a monitor without options.
public struct NoOptions: DeclaredOptions {
    public init() {}
    public static let schema = OptionSchema<NoOptions>()
}

/// The options of a `DeclaredOptions` type: names, docs, and where each value goes.
public struct OptionSchema<Root: DeclaredOptions>: Sendable {
    public let entries: [OptionEntry<Root>]

    @inlinable public init(_ entries: OptionEntry<Root>...) { self.entries = entries }

    @inlinable public var declarations: [OptionDecl] {
        let defaults = Root()
        var declarations: [OptionDecl] = []
        declarations.reserveCapacity(entries.count)
        for entry in entries { declarations.append(entry.declaration(defaults)) }
        return declarations
    }

    /// The defaults, overwritten by every value the host gave.
    @inlinable public func decode(_ raw: RawOptions) throws(MonitorError) -> Root {
        var root = Root()
        for entry in entries {
            try entry.apply(&root, raw[entry.name])
        }
        return root
    }
}

/// One option: its name and doc, and how to read and write its property.
public struct OptionEntry<Root>: Sendable {
    public let name: String
    @usableFromInline let declaration: @Sendable (Root) -> OptionDecl
    @usableFromInline let apply: @Sendable (inout Root, RawOptions.Raw) throws(MonitorError) -> Void

    @usableFromInline init(name: String, declaration: @escaping @Sendable (Root) -> OptionDecl,
                           apply: @escaping @Sendable (inout Root, RawOptions.Raw) throws(MonitorError) -> Void) {
        self.name = name
        self.declaration = declaration
        self.apply = apply
    }

    /// An option stored in `property`; its default is the property's initial value.
    @inlinable public static func option<V: OptionValue>(_ name: String, _ property: @autoclosure @escaping @Sendable () -> WritableKeyPath<Root, V>,
                                                         example: String? = nil, doc: String) -> OptionEntry {
        let (get, set) = accessors(property)
        return OptionEntry(name: name, declaration: { defaults in
            OptionDecl(name, V.optionType, default: get(defaults).optionText, example: example, doc: doc)
        }, apply: { root, raw throws(MonitorError) in
            guard raw != .none else { return }
            set(&root, try value(name, raw))
        })
    }

    /// An option the manifest must give (no default).
    @inlinable public static func required<V: OptionValue>(_ name: String, _ property: @autoclosure @escaping @Sendable () -> WritableKeyPath<Root, V>,
                                                           example: String? = nil, doc: String) -> OptionEntry {
        let (_, set) = accessors(property)
        return OptionEntry(name: name, declaration: { _ in
            OptionDecl(name, V.optionType, required: true, example: example, doc: doc)
        }, apply: { root, raw throws(MonitorError) in
            guard raw != .none else { throw .invalidOption(name, "required, and not given") }
            set(&root, try value(name, raw))
        })
    }

    /// An option without a default: nil when the manifest does not give it.
    @inlinable public static func optional<V: OptionValue>(_ name: String, _ property: @autoclosure @escaping @Sendable () -> WritableKeyPath<Root, V?>,
                                                           example: String? = nil, doc: String) -> OptionEntry {
        let (_, set) = accessors(property)
        return OptionEntry(name: name, declaration: { _ in
            OptionDecl(name, V.optionType, example: example, doc: doc)
        }, apply: { root, raw throws(MonitorError) in
            guard raw != .none else { return }
            set(&root, .some(try value(name, raw) as V))
        })
    }

    /// Reading and writing `property`, each a closure that captures nothing
    /// else. The key path comes as an autoclosure, so that a literal
    /// (`\.procfs`) is code the optimizer sees where it is applied, and
    /// folds into a stored property access: no key path object is built.
    @inlinable static func accessors<V>(_ property: @escaping @Sendable () -> WritableKeyPath<Root, V>)
        -> (get: @Sendable (Root) -> V, set: @Sendable (inout Root, V) -> Void) {
        ({ root in root[keyPath: property()] }, { root, value in root[keyPath: property()] = value })
    }

    /// The host's value as a `V`, or the option's error.
    @inlinable static func value<V: OptionValue>(_ name: String, _ raw: RawOptions.Raw) throws(MonitorError) -> V {
        guard let value = V(option: raw) else {
            throw .invalidOption(name, "expected \(V.optionType.noun), got \(raw.noun)")
        }
        return value
    }
}

/// A Swift type an option can have.
public protocol OptionValue: Sendable {
    static var optionType: OptionType { get }
    /// The value as the host passed it; nil when it has another type.
    init?(option raw: RawOptions.Raw)
    /// The value written as YAML, for the self-description's default.
    var optionText: String { get }
}

extension Bool: OptionValue {
    public static var optionType: OptionType { .bool }
    public init?(option raw: RawOptions.Raw) { if case .bool(let v) = raw { self = v } else { return nil } }
    public var optionText: String { self ? "true" : "false" }
}

extension Int: OptionValue {
    public static var optionType: OptionType { .int }
    public init?(option raw: RawOptions.Raw) { if case .int(let v) = raw { self = Int(v) } else { return nil } }
    public var optionText: String { String(self) }
}

extension Int64: OptionValue {
    public static var optionType: OptionType { .int }
    public init?(option raw: RawOptions.Raw) { if case .int(let v) = raw { self = v } else { return nil } }
    public var optionText: String { String(self) }
}

extension Double: OptionValue {
    public static var optionType: OptionType { .double }
    public init?(option raw: RawOptions.Raw) {
        switch raw {
        case .double(let v): self = v
        case .int(let v): self = Double(v)
        default: return nil
        }
    }
    public var optionText: String { "\(self)" }
}

extension String: OptionValue {
    public static var optionType: OptionType { .string }
    public init?(option raw: RawOptions.Raw) { if case .string(let v) = raw { self = v } else { return nil } }
    public var optionText: String { self }
}

extension Duration: OptionValue {
    public static var optionType: OptionType { .duration }
    public init?(option raw: RawOptions.Raw) { if case .duration(let ns) = raw { self = .nanoseconds(ns) } else { return nil } }
    public var optionText: String { Duration.text(nanoseconds: nanoseconds) }

    /// Whole nanoseconds (saturating).
    public var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return product.addingReportingOverflow(attoseconds / 1_000_000_000).partialValue
    }

    /// The shortest exact spelling in the manifest's units: "1500ms", "2s", "1h".
    static func text(nanoseconds ns: Int64) -> String {
        let units: [(Int64, String)] = [(3_600_000_000_000, "h"), (60_000_000_000, "m"), (1_000_000_000, "s"),
                                        (1_000_000, "ms"), (1_000, "us")]
        if ns == 0 { return "0s" }
        for (size, suffix) in units where ns % size == 0 { return "\(ns / size)\(suffix)" }
        return "\(ns)ns"
    }
}

/// A number of bytes, written with binary or decimal units in manifests ("64MiB", "1GB").
public struct ByteCount: Sendable, Hashable, Comparable, CustomStringConvertible, OptionValue {
    public var bytes: Int64
    public init(_ bytes: Int64) { self.bytes = bytes }
    public static func kib(_ n: Int64) -> ByteCount { ByteCount(n << 10) }
    public static func mib(_ n: Int64) -> ByteCount { ByteCount(n << 20) }
    public static func gib(_ n: Int64) -> ByteCount { ByteCount(n << 30) }
    public static func < (a: ByteCount, b: ByteCount) -> Bool { a.bytes < b.bytes }

    public static var optionType: OptionType { .size }
    public init?(option raw: RawOptions.Raw) { if case .size(let v) = raw { bytes = v } else { return nil } }
    public var optionText: String {
        for (shift, suffix) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] where bytes != 0 && bytes % (1 << shift) == 0 {
            return "\(bytes >> shift)\(suffix)"
        }
        return "\(bytes)B"
    }
    public var description: String { optionText }
}

/// A JSON option (any YAML in the manifest: lists, maps), parsed.
extension JSONValue: OptionValue {
    public static var optionType: OptionType { .json }
    public init?(option raw: RawOptions.Raw) {
        guard case .json(let text) = raw, let value = try? JSONValue.parse(text) else { return nil }
        self = value
    }
    public var optionText: String { jsonText }
}

/// A list of strings (a YAML sequence in the manifest).
extension Array: OptionValue where Element == String {
    public static var optionType: OptionType { .json }
    public init?(option raw: RawOptions.Raw) {
        guard case .json(let text) = raw, case .array(let items)? = try? JSONValue.parse(text) else { return nil }
        var strings: [String] = []
        for item in items {
            guard case .string(let s) = item else { return nil }
            strings.append(s)
        }
        self = strings
    }
    public var optionText: String { JSONValue.array(map { .string($0) }).jsonText }
}

extension OptionType {
    @usableFromInline var noun: String {
        switch self {
        case .bool: "a boolean"
        case .int: "an integer"
        case .double: "a number"
        case .string: "a string"
        case .duration: "a duration"
        case .size: "a size"
        case .json: "a list or map"
        }
    }
}

extension RawOptions.Raw {
    /// The type the host gave the value as; nil for none.
    @usableFromInline var optionType: OptionType? {
        switch self {
        case .none: nil
        case .bool: .bool
        case .int: .int
        case .double: .double
        case .string: .string
        case .duration: .duration
        case .size: .size
        case .json: .json
        }
    }

    @usableFromInline var noun: String { optionType?.noun ?? "nothing" }
}

extension MonitorError {
    /// An unusable option value, reported by the host at the option's place in
    /// the manifest: `path` is the option's name, optionally followed by
    /// `[index]` or `.key` into a list or map option ("args[1]").
    public static func invalidOption(_ path: String, _ message: String) -> MonitorError {
        .init(.invalidConfig, "options.\(path): \(message)")
    }
}

