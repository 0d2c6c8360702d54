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
    /// A value that works on any machine, written as the default is (ABI
    /// 1.3): what `vigil plugins check` gives the option when it is given
    /// nothing, so that a plugin whose create needs a value is checked as
    /// shipped. nil: none (the check uses the default).
    public var exampleValue: String?

    public init(_ name: String, _ type: OptionType, default defaultValue: String? = nil, required: Bool = false,
                example exampleValue: String? = nil, doc: String) {
        self.name = name
        self.type = type
        self.defaultValue = defaultValue
        self.doc = doc
        self.required = required
        self.exampleValue = exampleValue
    }
}

public struct FieldDecl: Sendable {
    public var name: String
    public var type: FieldType
    public var unit: String
    public var doc: String
    /// For numbers in a kind emitted on change: the least change (absolute)
    /// that counts as one. 0: any change.
    public var minChange: Double
    /// Says which thing the event is about (ABI 1.4 `VIGIL_FIELD_IDENTITY`).
    /// The fields of an `EventDecl.key` are identities without saying so.
    public var identity: Bool
    /// Only grows, but for resets (ABI 1.4 `VIGIL_FIELD_COUNTER`): a total,
    /// where a field without it is a level.
    public var counter: Bool

    public init(_ name: String, _ type: FieldType, unit: String = "", minChange: Double = 0, doc: String = "",
                identity: Bool = false, counter: Bool = false) {
        self.name = name
        self.type = type
        self.unit = unit
        self.minChange = minChange
        self.doc = doc
        self.identity = identity
        self.counter = counter
    }
}

/// When the SDK passes an event of a kind on to the host.
public enum EmitPolicy: Sendable {
    /// A snapshot on start, then only when a field changed (by at least its
    /// `minChange`), per entity (see `EventDecl.key`). The default.
    case changes
    /// Every event: values sampled each interval (rates, usage shares).
    case samples
}

public struct EventDecl: Sendable {
    public var kind: String
    public var doc: String
    public var fields: [FieldDecl]
    public var policy: EmitPolicy
    /// The fields that name the entity an event is about (a CPU, a mount, a
    /// device), so changes are tracked per entity. Empty: one entity.
    public var key: [String]
    /// Fields beyond `fields` are named by the instance's options.
    public var dynamicFields: Bool

    public init(_ kind: String, doc: String, fields: [FieldDecl], policy: EmitPolicy = .changes, key: [String] = [],
                dynamicFields: Bool = false) {
        self.kind = kind
        self.doc = doc
        self.fields = fields
        self.policy = policy
        self.key = key
        self.dynamicFields = dynamicFields
    }

    /// An event of occurrences (a device added, a clock step): every one is passed on.
    public static func occurrence(_ kind: String, doc: String, fields: [FieldDecl]) -> EventDecl {
        EventDecl(kind, doc: doc, fields: fields, policy: .samples)
    }
}

/// What a plugin says about itself.
public struct PluginSpec: Sendable {
    public var name: String
    public var version: String
    public var summary: String
    /// Nanoseconds between polls when the manifest gives no interval.
    public var defaultInterval: Int64
    /// Options declared by hand (monitors taking `RawOptions`); typed options
    /// (`DeclaredOptions`) declare themselves and come first.
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

/// A value of an event field. Literals work: `["count": 3, "ratio": 0.5, "up": true, "name": "eth0"]`.
public enum Value: Sendable, Equatable, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
                   ExpressibleByBooleanLiteral, ExpressibleByStringLiteral {
    case double(Double)
    case int(Int64)
    case bool(Bool)
    case string(String)

    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(stringLiteral value: String) { self = .string(value) }

    /// A count or size that may exceed Int64 (clamped).
    public static func int<T: BinaryInteger>(clamping value: T) -> Value { .int(Int64(clamping: value)) }
    /// A whole number computed in Double (a rate, an estimate), rounded and
    /// clamped to Int64's range; nil for NaN. `Int64(double)` traps past it.
    public static func int(rounding value: Double) -> Value? {
        Saturating.int64(value).map { .int($0) }
    }
    /// A text from outside (a check's output, a family's HELP, a label):
    /// as it is when it fits a field (`VIGIL_MAX_STRING_BYTES`), else cut on
    /// a character boundary and ending in `…`, so that the event is not
    /// refused for it. Names and identities are not cut: a plugin refuses
    /// those itself (two cut names could be one).
    public static func text(_ text: String) -> Value {
        let most = Int(VIGIL_MAX_STRING_BYTES)
        guard text.utf8.count > most else { return .string(text) }
        var out = ""
        var bytes = 0
        for c in text.unicodeScalars {
            let width = UTF8.width(c)
            if bytes + width > most - 3 { break }
            out.unicodeScalars.append(c)
            bytes += width
        }
        return .string(out + "…")
    }

    /// A duration, in seconds.
    public static func seconds(_ value: Duration) -> Value {
        let (s, atto) = value.components
        return .double(Double(s) + Double(atto) / 1e18)
    }

    var type: FieldType {
        switch self {
        case .double: .double
        case .int: .int
        case .bool: .bool
        case .string: .string
        }
    }
}

public enum Severity: UInt32, Sendable {
    case debug = 0, info, notice, warning, error, critical
}


/// Arithmetic on numbers a plugin read from outside (/proc, /sys, a
/// check's output), where Swift's operators trap on overflow and take the
/// host down with the plugin: each result saturates at Int64's ends.
public enum Saturating {
    public static func sum(_ a: Int64, _ b: Int64) -> Int64 {
        let (r, overflow) = a.addingReportingOverflow(b)
        return overflow ? (b > 0 ? .max : .min) : r
    }

    public static func difference(_ a: Int64, _ b: Int64) -> Int64 {
        let (r, overflow) = a.subtractingReportingOverflow(b)
        return overflow ? (b < 0 ? .max : .min) : r
    }

    public static func product(_ a: Int64, _ b: Int64) -> Int64 {
        let (r, overflow) = a.multipliedReportingOverflow(by: b)
        return overflow ? ((a < 0) == (b < 0) ? .max : .min) : r
    }

    /// |a|; Int64.min, whose magnitude Int64 cannot hold, gives .max.
    public static func magnitude(_ a: Int64) -> Int64 { a == .min ? .max : abs(a) }

    /// `value` rounded to the nearest whole number and clamped to Int64; nil for NaN.
    public static func int64(_ value: Double) -> Int64? {
        guard !value.isNaN else { return nil }
        let rounded = value.rounded()
        if rounded >= 9_223_372_036_854_775_807 { return .max }  // 2^63 as a Double
        if rounded <= -9_223_372_036_854_775_808 { return .min }
        return Int64(rounded)
    }
}
