@preconcurrency import CVigilPlugin

/// The type of a plugin option.
public enum OptionType: UInt32, Sendable {
    case bool = 1, int, double, string, duration, size, json
}

/// The type of an event field.
public enum FieldType: UInt32, Sendable {
    case bool = 1, int, double, string
}

/// One option a plugin accepts, as `vigil plugins describe` shows it.
public struct OptionDecl: Sendable {
    public var name: String
    public var type: OptionType
    /// The default as it would be written in YAML (`"false"`, `"/proc"`, `"1s"`); nil: none.
    public var defaultValue: String?
    public var doc: String
    public var required: Bool

    public init(_ name: String, _ type: OptionType, default defaultValue: String? = nil, required: Bool = false,
                doc: String) {
        self.name = name
        self.type = type
        self.defaultValue = defaultValue
        self.doc = doc
        self.required = required
    }
}

public struct FieldDecl: Sendable {
    public var name: String
    public var type: FieldType
    public var unit: String
    public var doc: String

    public init(_ name: String, _ type: FieldType, unit: String = "", doc: String = "") {
        self.name = name
        self.type = type
        self.unit = unit
        self.doc = doc
    }
}

public struct EventDecl: Sendable {
    public var kind: String
    public var doc: String
    public var fields: [FieldDecl]
    /// Fields beyond `fields` are named by the instance's options.
    public var dynamicFields: Bool

    public init(_ kind: String, doc: String, fields: [FieldDecl], dynamicFields: Bool = false) {
        self.kind = kind
        self.doc = doc
        self.fields = fields
        self.dynamicFields = dynamicFields
    }
}

/// What a plugin says about itself.
public struct PluginSpec: Sendable {
    public var name: String
    public var version: String
    public var summary: String
    /// Nanoseconds between polls when the manifest gives no interval.
    public var defaultInterval: Int64
    public var options: [OptionDecl]
    public var events: [EventDecl]

    public init(name: String, version: String, summary: String, defaultInterval: Duration = .seconds(10),
                options: [OptionDecl] = [], events: [EventDecl]) {
        self.name = name
        self.version = version
        self.summary = summary
        let (s, atto) = defaultInterval.components
        self.defaultInterval = s * 1_000_000_000 + atto / 1_000_000_000
        self.options = options
        self.events = events
    }
}

/// Why a call into a monitor failed. The status tells the host what to do.
public struct MonitorError: Error, Sendable, CustomStringConvertible {
    public enum Status: Sendable {
        /// Failed this time; retried at the next interval.
        case temporary
        /// The source is not on this machine (not an error; the host retries).
        case unavailable
        /// An option value is unusable.
        case invalidConfig
        /// Failed for good; the host stops the monitor.
        case fatal

        var raw: vigil_status {
            switch self {
            case .temporary: VIGIL_E_TEMPORARY
            case .unavailable: VIGIL_E_UNAVAILABLE
            case .invalidConfig: VIGIL_E_INVALID_CONFIG
            case .fatal: VIGIL_E_FATAL
            }
        }
    }

    public var status: Status
    public var message: String

    public init(_ status: Status, _ message: String) {
        self.status = status
        self.message = message
    }

    public static func temporary(_ message: String) -> MonitorError { .init(.temporary, message) }
    public static func unavailable(_ message: String) -> MonitorError { .init(.unavailable, message) }
    public static func invalidConfig(_ message: String) -> MonitorError { .init(.invalidConfig, message) }
    public static func fatal(_ message: String) -> MonitorError { .init(.fatal, message) }

    public var description: String { message }
}

/// A value of an event field.
public enum Value: Sendable, Equatable {
    case double(Double)
    case int(Int64)
    case bool(Bool)
    case string(String)
}

public enum Severity: UInt32, Sendable {
    case debug = 0, info, notice, warning, error, critical
}

/// The options the host passed to create, by name, defaults filled in.
public struct Options: Sendable {
    public enum Raw: Sendable, Equatable {
        case none, bool(Bool), int(Int64), double(Double), string(String), duration(Int64), size(Int64), json(String)
    }

    /// In the order the host gave them. An array, not a dictionary: a plugin's
    /// first `[String: Raw]` makes the Swift runtime instantiate generic
    /// metadata whose `Hashable` requirement is checked by scanning every
    /// loaded image's conformance table — tenths of a millisecond per plugin
    /// load, for a handful of options that a linear search finds faster.
    public private(set) var entries: [(name: String, value: Raw)]

    public init(_ entries: [(name: String, value: Raw)]) { self.entries = entries }

    /// The value named `name`, or `.none`.
    public subscript(name: String) -> Raw {
        for entry in entries where entry.name == name { return entry.value }
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
