@preconcurrency import CVigilPlugin
import Glibc
import Synchronization
import VigilCore

/// Why the host refused an emitted event, in the words of its counters. Each
/// refused emit is counted under one reason, per monitor, and reported by
/// `vigil run` (exit log, `--summary`).
package enum EmitRefusal: Int, CaseIterable, Sendable {
    /// Outside start…stop (VIGIL_E_STOPPED).
    case stopped
    /// After the instance was destroyed (or its create failed).
    case afterDestroy
    /// NULL event, a size below 1.0, NULL pointers with lengths, empty names.
    case malformed
    case badSeverity
    case badTime
    /// A kind the host emits itself (`availability`, `threshold`, `rule`).
    case reservedKind
    case duplicateField
    /// An option-only type (DURATION, SIZE, JSON, NONE) in a field.
    case badFieldType
    /// A value type newer than this host (VIGIL_E_UNSUPPORTED).
    case unsupportedType
    /// Past the header's limits: fields, name or string lengths.
    case tooLarge

    /// The counter's name in reports.
    package var name: String {
        switch self {
        case .stopped: "stopped"
        case .afterDestroy: "after_destroy"
        case .malformed: "malformed"
        case .badSeverity: "bad_severity"
        case .badTime: "bad_time"
        case .reservedKind: "reserved_kind"
        case .duplicateField: "duplicate_field"
        case .badFieldType: "bad_field_type"
        case .unsupportedType: "unsupported_type"
        case .tooLarge: "too_large"
        }
    }
}

/// A malformed event: the status `emit` answers, the counter it goes to, and
/// a message for a plugin author.
package struct EventDefect: Error, Equatable, Sendable, CustomStringConvertible {
    package var reason: EmitRefusal
    package var message: String

    package var status: vigil_status {
        switch reason {
        case .stopped, .afterDestroy: VIGIL_E_STOPPED
        case .unsupportedType: VIGIL_E_UNSUPPORTED
        default: VIGIL_E_INVALID_ARGUMENT
        }
    }

    package var description: String { message }

    package init(reason: EmitRefusal, message: String) {
        self.reason = reason
        self.message = message
    }
}

/// Where an accepted event differs from what the plugin declared. The host
/// routes such events all the same; the checker and the test kit report them.
package enum DeclarationMismatch: Equatable, Sendable, CustomStringConvertible {
    case undeclaredKind(String)
    case undeclaredField(kind: String, field: String)
    case fieldType(kind: String, field: String, emitted: ValueType, declared: ValueType)

    package var description: String {
        switch self {
        case .undeclaredKind(let kind): "kind '\(shownText(kind))' is not declared"
        case .undeclaredField(let kind, let field): "field '\(shownText(field))' of kind '\(shownText(kind))' is not declared"
        case .fieldType(let kind, let field, let emitted, let declared):
            "field '\(shownText(field))' of kind '\(shownText(kind))' is \(emitted.withArticle), declared \(declared.withArticle)"
        }
    }
}

/// The limits the header states (`VIGIL_MAX_*`), which the decoder enforces.
package enum EventLimits {
    package static let fields = Int(VIGIL_MAX_EVENT_FIELDS)
    package static let nameBytes = Int(VIGIL_MAX_NAME_BYTES)
    package static let stringBytes = Int(VIGIL_MAX_STRING_BYTES)
    /// Event kinds the host emits itself; a plugin may neither declare nor emit them.
    package static let reservedKinds = PluginDescription.reservedKinds
}

/// The one reader of a plugin's `vigil_event`: copies it into an `Event`
/// (names of declared kinds and fields shared, not allocated), or says why
/// not. The runtime refuses and counts, the checker reports, the test kit
/// records — all from the same verdict.
package struct EventDecoder: Sendable {
    package let monitor: String
    package let plugin: String
    // The declarations as flat arrays, indexed by kind: looking a name up
    // copies no struct (no retain of a name or a field list per event).
    private let kindNames: [String]
    /// Every declared kind's field names, one kind after another: kind k's
    /// are `fieldNames[fieldStart[k]..<fieldStart[k + 1]]` (one flat array,
    /// so that no inner array is retained per event).
    private let fieldNames: [String]
    private let fieldStart: [Int]
    private let fieldTypes: [[ValueType]]
    private let dynamicFields: [Bool]
    /// The same names' bytes, at addresses of their own (`declaredKind`,
    /// `declaredField`): `nameBytes` is owned by `names` (kept for that
    /// alone: reading through the class would retain it per event), name i
    /// is `nameStarts[i]..<nameStarts[i + 1]` of it.
    private let names: DeclaredNames
    private nonisolated(unsafe) let nameBytes: UnsafePointer<CChar>
    private let nameStarts: [Int]

    package init(monitor: String, plugin: String, events: [EventSpec]) {
        self.monitor = monitor
        self.plugin = plugin
        self.kindNames = events.map(\.kind)
        self.fieldNames = events.flatMap { $0.fields.map(\.name) }
        self.fieldStart = events.reduce(into: [0]) { starts, event in starts.append(starts.last! + event.fields.count) }
        self.fieldTypes = events.map { $0.fields.map(\.type) }
        self.dynamicFields = events.map(\.dynamicFields)
        self.names = DeclaredNames(kindNames + fieldNames)
        self.nameBytes = names.bytes
        self.nameStarts = names.starts
    }

    /// The declared kind `index` as a string whose address the decoder
    /// knows: an event that names its kind with it is matched without its
    /// bytes being compared (the isolation runner's records name declared
    /// kinds and fields by index). Nil past the declarations.
    package func declaredKind(_ index: Int) -> vigil_str? {
        index >= 0 && index < kindNames.count ? declaredName(index) : nil
    }

    /// Field `index` of declared kind `kind`, as `declaredKind` gives kinds.
    package func declaredField(kind: Int, _ index: Int) -> vigil_str? {
        guard kind >= 0 && kind < kindNames.count, index >= 0, index < fieldStart[kind + 1] - fieldStart[kind] else { return nil }
        return declaredName(kindNames.count + fieldStart[kind] + index)
    }

    /// Declared name `i` (kinds, then every kind's fields) as the decoder's own copy.
    @inline(__always)
    private func declaredName(_ i: Int) -> vigil_str {
        vigil_str(ptr: nameBytes + nameStarts[i], len: nameStarts[i + 1] - nameStarts[i])
    }

    /// Decodes `event`, or throws why the host refuses it. `now` gives the
    /// time for an event that has none (time_ns 0). `kindIndex` is set to
    /// the declared kind's index, or -1. With `mismatches`, differences from
    /// the declarations are appended.
    /// `storage`: empty field storage to fill (the runtime's recycled
    /// storage, so that an event costs no allocation).
    package func decode(_ event: UnsafePointer<vigil_event>?, now: () -> Int64, kindIndex: inout Int,
                        mismatches: UnsafeMutablePointer<[DeclarationMismatch]>? = nil,
                        storage: consuming [Field] = []) throws(EventDefect) -> Event {
        var assembly = EventAssembly(fields: storage)
        try decode(event, now: now, kindIndex: &kindIndex, mismatches: mismatches, into: &assembly)
        return assembly.event(monitor: monitor, plugin: plugin)
    }

    /// Checks `event` as `decode` does and hands its parts to `parts` (the
    /// isolation runner writes them into its ring record as they come,
    /// without making an `Event`). One pass over the plugin's memory; inlined
    /// into each caller, so that a receiver's parts cost no call or copy.
    @inline(__always)
    package func decode<Parts: DecodedEventParts>(_ event: UnsafePointer<vigil_event>?, now: () -> Int64,
                                                  kindIndex: inout Int,
                                                  mismatches: UnsafeMutablePointer<[DeclarationMismatch]>? = nil,
                                                  into parts: inout Parts) throws(EventDefect) {
        kindIndex = -1
        guard let event else { throw EventDefect(reason: .malformed, message: "emit was called with a NULL event") }
        let size = Int(UnsafeRawPointer(event).loadUnaligned(as: UInt32.self))
        guard size >= ABISizes.event else {
            throw EventDefect(reason: .malformed,
                              message: "an event's size field is \(size); an ABI 1.0 event is at least \(ABISizes.event) bytes")
        }
        // A newer plugin's larger event is read up to our size; an older,
        // smaller one is copied into a zeroed struct.
        let e = size >= MemoryLayout<vigil_event>.size ? event.pointee
                                                       : PluginLoader.copyStruct(vigil_event.self, from: event, size: size)
        // The kind.
        let k = e.kind
        if k.len > 0 && k.ptr == nil {
            throw EventDefect(reason: .malformed, message: "an event's kind has length \(k.len) but a NULL pointer")
        }
        guard k.len > 0 else { throw EventDefect(reason: .malformed, message: "an event has an empty kind") }
        guard k.len <= EventLimits.nameBytes else {
            throw EventDefect(reason: .tooLarge, message: "an event's kind is \(k.len) bytes long (\(EventLimits.nameBytes) at most)")
        }
        var declaredIndex = -1
        for i in kindNames.indices where matches(k, declared: i, kindNames[i]) {
            declaredIndex = i
            break
        }
        kindIndex = declaredIndex
        let kind = declaredIndex >= 0 ? kindNames[declaredIndex] : pluginString(k)
        if declaredIndex < 0 {
            if EventLimits.reservedKinds.contains(kind) {
                throw EventDefect(reason: .reservedKind, message: "kind '\(kind)' is the host's own; a plugin may not emit it")
            }
            mismatches?.pointee.append(.undeclaredKind(kind))
        }
        // Severity and time.
        guard e.severity <= UInt32(VIGIL_SEVERITY_CRITICAL.rawValue), let severity = Severity(rawValue: UInt8(e.severity)) else {
            throw EventDefect(reason: .badSeverity,
                              message: "an event of kind '\(shownText(kind))' has severity \(e.severity); severities are 0 (debug) to 5 (critical)")
        }
        guard e.time_ns >= 0 else {
            throw EventDefect(reason: .badTime,
                              message: "an event of kind '\(shownText(kind))' has time_ns \(e.time_ns); times are 0 (now) or nanoseconds since 1970")
        }
        // Fields.
        var pointer: UnsafePointer<vigil_field>?
        if e.field_count > 0 {
            guard let fields = e.fields else {
                throw EventDefect(reason: .malformed,
                                  message: "an event of kind '\(shownText(kind))' has \(e.field_count) fields but a NULL fields pointer")
            }
            guard e.field_count <= EventLimits.fields else {
                throw EventDefect(reason: .tooLarge,
                                  message: "an event of kind '\(shownText(kind))' has \(e.field_count) fields (\(EventLimits.fields) at most)")
            }
            pointer = fields
        }
        let fieldCount = pointer == nil ? 0 : e.field_count
        // The kind goes to `parts` (moved, not copied); a message after
        // this names it from the plugin's bytes again.
        parts.begin(kind: kind, declared: declaredIndex, time: e.time_ns != 0 ? e.time_ns : now(), severity: severity,
                    fieldCount: fieldCount)
        guard let pointer else { return }
        let declared = declaredIndex >= 0 ? fieldStart[declaredIndex]..<fieldStart[declaredIndex + 1] : 0..<0
        let declaredCount = declared.count
        // Declared fields seen so far, by index (duplicates), for the first 64.
        var seenDeclared: UInt64 = 0
        // The names of the others, compared among themselves: rare and few.
        var others: [vigil_str] = []
        for i in 0..<fieldCount {
            let f = pointer[i]
            if f.name.len > 0 && f.name.ptr == nil {
                throw EventDefect(reason: .malformed,
                                  message: "field #\(i + 1) of kind '\(shownText(pluginString(k)))' has a name of length \(f.name.len) but a NULL pointer")
            }
            guard f.name.len > 0 else {
                throw EventDefect(reason: .malformed, message: "field #\(i + 1) of kind '\(shownText(pluginString(k)))' has an empty name")
            }
            guard f.name.len <= EventLimits.nameBytes else {
                throw EventDefect(reason: .tooLarge,
                                  message: "field #\(i + 1) of kind '\(shownText(pluginString(k)))' has a name of \(f.name.len) bytes (\(EventLimits.nameBytes) at most)")
            }
            // Plugins emit fields in declared order: try that position first.
            let first = kindNames.count + declared.lowerBound
            var index = i < declaredCount && matches(f.name, declared: first + i, fieldNames[declared.lowerBound + i]) ? i : -1
            if index < 0 {
                for j in 0..<declaredCount where matches(f.name, declared: first + j, fieldNames[declared.lowerBound + j]) {
                    index = j
                    break
                }
            }
            let declaredName = index >= 0 ? fieldNames[declared.lowerBound + index] : nil
            if index >= 0 && index < 64 {
                let bit: UInt64 = 1 << UInt64(index)
                if seenDeclared & bit != 0 { throw Self.duplicate(f.name, k) }
                seenDeclared |= bit
            } else {
                for other in others where Self.same(other, f.name) { throw Self.duplicate(f.name, k) }
                others.append(f.name)
            }
            let type: ValueType
            switch f.value.type {
            case UInt32(VIGIL_TYPE_DOUBLE.rawValue): type = .double
            case UInt32(VIGIL_TYPE_INT.rawValue): type = .int
            case UInt32(VIGIL_TYPE_BOOL.rawValue): type = .bool
            case UInt32(VIGIL_TYPE_STRING.rawValue):
                type = .string
                let s = f.value.as.str
                if s.len > 0 && s.ptr == nil {
                    throw EventDefect(reason: .malformed,
                                      message: "string field '\(shownText(pluginString(f.name)))' of kind '\(shownText(pluginString(k)))' has length \(s.len) but a NULL pointer")
                }
                guard s.len <= EventLimits.stringBytes else {
                    throw EventDefect(reason: .tooLarge,
                                      message: "string field '\(shownText(pluginString(f.name)))' of kind '\(shownText(pluginString(k)))' is \(s.len) bytes (\(EventLimits.stringBytes) at most)")
                }
            default:
                // Option-only types are a mistake; types past JSON are from a newer ABI.
                let newer = f.value.type > UInt32(VIGIL_TYPE_JSON.rawValue)
                throw EventDefect(reason: newer ? .unsupportedType : .badFieldType,
                                  message: "field '\(shownText(pluginString(f.name)))' of kind '\(shownText(pluginString(k)))' has value type \(f.value.type); event fields are bool (1), int (2), double (3) or string (4)")
            }
            if let mismatches, declaredIndex >= 0 {
                if index >= 0 {
                    let declaredType = fieldTypes[declaredIndex][index]
                    if declaredType != type {
                        mismatches.pointee.append(.fieldType(kind: pluginString(k), field: fieldNames[declared.lowerBound + index], emitted: type, declared: declaredType))
                    }
                } else if !dynamicFields[declaredIndex] {
                    mismatches.pointee.append(.undeclaredField(kind: pluginString(k), field: pluginString(f.name)))
                }
            }
            parts.field(name: f.name, declared: index, declaredName: declaredName, value: f.value)
        }
    }

    private static func duplicate(_ name: vigil_str, _ kind: vigil_str) -> EventDefect {
        EventDefect(reason: .duplicateField,
                    message: "field '\(shownText(pluginString(name)))' appears twice in an event of kind '\(shownText(pluginString(kind)))'; field names are unique")
    }

    /// Whether two plugin strings (checked: a pointer wherever a length) have the same bytes.
    private static func same(_ a: vigil_str, _ b: vigil_str) -> Bool {
        a.len == b.len && (a.len == 0 || memcmp(a.ptr!, b.ptr!, a.len) == 0)
    }

    /// Whether a plugin's string has exactly the bytes of `name`, the
    /// declared name `declared` (of `names`): at once when it is that
    /// name's own copy.
    @inline(__always)
    private func matches(_ s: vigil_str, declared: Int, _ name: String) -> Bool {
        if s.ptr == nameBytes + nameStarts[declared] { return s.len == nameStarts[declared + 1] - nameStarts[declared] }
        return Self.matches(s, name)
    }

    /// Whether a plugin's string has exactly the bytes of `name`.
    @inline(__always)
    static func matches(_ s: vigil_str, _ name: String) -> Bool {
        guard let ptr = s.ptr, name.utf8.count == s.len else { return false }
        let equal = name.utf8.withContiguousStorageIfAvailable { memcmp($0.baseAddress!, ptr, s.len) == 0 }
        return equal ?? name.utf8.elementsEqual(UnsafeRawBufferPointer(start: ptr, count: s.len))
    }
}

/// Receives an accepted event from `EventDecoder.decode(_:into:)`, piece by
/// piece: `begin` once, then `field` for each field in the plugin's order,
/// each piece already checked. A later piece can still make the decoder
/// refuse the event: a receiver's work counts only once `decode` returned.
package protocol DecodedEventParts {
    /// The kind (the declared name, or the plugin's), its declared index or
    /// -1, the event's time (stamped now when it had none) and severity,
    /// and how many fields follow.
    mutating func begin(kind: consuming String, declared: Int, time: Int64, severity: Severity, fieldCount: Int)
    /// A field: the plugin's name, its index among the kind's declared
    /// fields (or -1) and that declared name, and its value, whose type is
    /// one of the four event types and whose string (if any) is in bounds.
    mutating func field(name: vigil_str, declared: Int, declaredName: consuming String?, value: vigil_value)
}

/// The host's receiver: an `Event` (declared names shared, not copied).
private struct EventAssembly: DecodedEventParts {
    var fields: [Field]
    var kind = ""
    var time: Int64 = 0
    var severity = Severity.info

    @inline(__always)
    init(fields: consuming [Field]) {
        self.fields = fields
        if !self.fields.isEmpty { self.fields.removeAll(keepingCapacity: true) }
    }

    @inline(__always)
    mutating func begin(kind: consuming String, declared: Int, time: Int64, severity: Severity, fieldCount: Int) {
        self.kind = kind
        self.time = time
        self.severity = severity
        if fieldCount > 0 { fields.reserveCapacity(fieldCount) }
    }

    /// The event, its kind and fields moved out (not copied: no retain).
    @inline(__always)
    mutating func event(monitor: String, plugin: String) -> Event {
        var taken = Event(time: time, monitor: monitor, plugin: plugin, kind: "", severity: severity)
        swap(&taken.kind, &kind)
        swap(&taken.fields, &fields)
        return taken
    }

    @inline(__always)
    mutating func field(name: vigil_str, declared: Int, declaredName: consuming String?, value: vigil_value) {
        let fieldValue: FieldValue
        switch value.type {
        case UInt32(VIGIL_TYPE_DOUBLE.rawValue): fieldValue = .double(value.as.f64)
        case UInt32(VIGIL_TYPE_INT.rawValue): fieldValue = .int(value.as.i64)
        case UInt32(VIGIL_TYPE_BOOL.rawValue): fieldValue = .bool(value.as.boolean != 0)
        default: fieldValue = .string(pluginString(value.as.str))
        }
        fields.append(Field(declaredName ?? pluginString(name), fieldValue))
    }
}

/// Names' bytes in one allocation that lives as long as the decoders
/// sharing it: addresses the decoder recognizes. Immutable once made.
private final class DeclaredNames: @unchecked Sendable {  // immutable once made
    let bytes: UnsafePointer<CChar>
    let starts: [Int]

    init(_ names: [String]) {
        var starts = [0]
        for name in names { starts.append(starts.last! + name.utf8.count) }
        let bytes = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, starts.last!))
        for (i, name) in names.enumerated() {
            for (j, byte) in name.utf8.enumerated() { bytes[starts[i] + j] = CChar(bitPattern: byte) }
        }
        self.bytes = UnsafePointer(bytes)
        self.starts = starts
    }

    deinit { UnsafeMutablePointer(mutating: bytes).deallocate() }
}

extension FieldValue {
    package var valueType: ValueType {
        switch self {
        case .double: .double
        case .int: .int
        case .bool: .bool
        case .string: .string
        }
    }
}

/// Refused emits of one instance, by reason, with the first message of each
/// reason kept for the log. Refusals are the unusual path: a lock is fine.
package final class RefusalCounters: Sendable {
    private let state = Mutex<(counts: [UInt64], firstMessages: [String?])>(
        (Array(repeating: 0, count: EmitRefusal.allCases.count), Array(repeating: nil, count: EmitRefusal.allCases.count)))

    package init() {}

    /// Counts one refusal; returns true the first time this reason is seen
    /// (the caller logs that one, and only that one).
    @discardableResult
    package func count(_ reason: EmitRefusal, message: String? = nil, by n: UInt64 = 1) -> Bool {
        state.withLock { state in
            state.counts[reason.rawValue] &+= n
            guard state.firstMessages[reason.rawValue] == nil else { return false }
            state.firstMessages[reason.rawValue] = message ?? reason.name
            return true
        }
    }

    /// Every reason with a non-zero count, in declaration order.
    package var snapshot: [(reason: EmitRefusal, count: UInt64)] {
        let counts = state.withLock { $0.counts }
        return EmitRefusal.allCases.compactMap { counts[$0.rawValue] > 0 ? ($0, counts[$0.rawValue]) : nil }
    }

    package var total: UInt64 { state.withLock { $0.counts.reduce(0, &+) } }

    package func firstMessage(_ reason: EmitRefusal) -> String? { state.withLock { $0.firstMessages[reason.rawValue] } }
}
