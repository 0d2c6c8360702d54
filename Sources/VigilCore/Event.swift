/// How bad an event is. Ordered; a sink's `min_severity` keeps events at or above it.
/// The raw values are those of `vigil_severity` in the C header.
public enum Severity: UInt8, Sendable, CaseIterable, Comparable, CustomStringConvertible {
    case debug = 0, info, notice, warning, error, critical

    public init?(name: String) {
        switch name {
        case "debug": self = .debug
        case "info": self = .info
        case "notice": self = .notice
        case "warning", "warn": self = .warning
        case "error": self = .error
        case "critical", "crit": self = .critical
        default: return nil
        }
    }

    public var name: String {
        switch self {
        case .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "critical"
        }
    }

    public var description: String { name }

    public static func < (a: Severity, b: Severity) -> Bool { a.rawValue < b.rawValue }

    /// The names accepted in manifests, for error messages.
    public static let names = allCases.map(\.name)
}

/// A typed value of an event field.
public enum FieldValue: Sendable, Equatable {
    case double(Double)
    case int(Int64)
    case bool(Bool)
    case string(String)
}

/// One named value of an event.
public struct Field: Sendable, Equatable {
    public var name: String
    public var value: FieldValue

    public init(_ name: String, _ value: FieldValue) {
        self.name = name
        self.value = value
    }
}

/// One event, as the host holds it after copying it out of a plugin's `emit`.
///
/// The host name is not stored per event: it is the same for every event of a
/// run and is given to the encoders once.
public struct Event: Sendable, Equatable {
    /// Wall time, nanoseconds since the Unix epoch (UTC).
    public var time: Int64
    /// The manifest's name of the monitor instance that emitted it.
    public var monitor: String
    /// The plugin's self-described name.
    public var plugin: String
    public var kind: String
    public var severity: Severity
    /// Increasing per host run, assigned when the event enters the router.
    public var seq: UInt64
    public var fields: [Field]

    public init(time: Int64, monitor: String, plugin: String, kind: String,
                severity: Severity = .info, seq: UInt64 = 0, fields: [Field] = []) {
        self.time = time
        self.monitor = monitor
        self.plugin = plugin
        self.kind = kind
        self.severity = severity
        self.seq = seq
        self.fields = fields
    }

    /// The value of the first field called `name`.
    public subscript(field name: String) -> FieldValue? {
        fields.first(where: { $0.name == name })?.value
    }
}
