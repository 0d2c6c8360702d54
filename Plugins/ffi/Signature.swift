import VigilKit

/// A C type the plugin can pass or return by value.
enum CType: CaseIterable {
    case void, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, string

    var name: String {
        switch self {
        case .void: "void"
        case .bool: "bool"
        case .int8: "int8"
        case .int16: "int16"
        case .int32: "int32"
        case .int64: "int64"
        case .uint8: "uint8"
        case .uint16: "uint16"
        case .uint32: "uint32"
        case .uint64: "uint64"
        case .float: "float"
        case .double: "double"
        case .string: "string"
        }
    }

    init?(name: String) {
        guard let found = CType.allCases.first(where: { $0.name == name }) else { return nil }
        self = found
    }

    /// Bytes of one value in memory (a pointer for `string`; 0 for `void`).
    var size: Int {
        switch self {
        case .void: 0
        case .bool, .int8, .uint8: 1
        case .int16, .uint16: 2
        case .int32, .uint32, .float: 4
        case .int64, .uint64, .double: 8
        case .string: MemoryLayout<UnsafeRawPointer>.size
        }
    }

    var isNumber: Bool { self != .void && self != .bool && self != .string }

    /// The range of an integer type: at least `min` and below `end`, bounds
    /// that Doubles hold exactly (nil for the other types).
    var integerRange: (min: Double, end: Double, text: String)? {
        switch self {
        case .int8: (-0x1p7, 0x1p7, "-128 to 127")
        case .int16: (-0x1p15, 0x1p15, "-32768 to 32767")
        case .int32: (-0x1p31, 0x1p31, "-2147483648 to 2147483647")
        case .int64: (-0x1p63, 0x1p63, "-9223372036854775808 to 9223372036854775807")
        case .uint8: (0, 0x1p8, "0 to 255")
        case .uint16: (0, 0x1p16, "0 to 65535")
        case .uint32: (0, 0x1p32, "0 to 4294967295")
        case .uint64: (0, 0x1p64, "0 to 18446744073709551615")
        default: nil
        }
    }

    static func names(_ types: [CType]) -> String { types.map(\.name).joined(separator: ", ") }
    static let argumentTypes = allCases.filter { $0 != .void }
    static let outTypes = allCases.filter(\.isNumber)
}

/// An in-argument's value, converted for its type when the options are read.
enum InValue: Equatable {
    case signed(Int64)
    case unsigned(UInt64)
    case float(Float)
    case double(Double)
    case bool(Bool)
    /// nil passes NULL.
    case string(String?)
}

/// A pointer argument to `count` values the function writes (`int32`, `double[3]`).
struct OutSpec: Equatable {
    var type: CType
    var count: Int
    /// As written in the manifest, for messages.
    var text: String
}

enum Argument: Equatable {
    case input(CType, InValue)
    case output(OutSpec)
}

/// The function's signature and the names of the fields it yields, read from
/// the options `args`, `returns` and `fields`. Every problem is an
/// INVALID_CONFIG error whose message starts with the option's path.
struct Signature {
    static let maxOutCount = 4096
    /// The plugin's own field, which `fields` may not name.
    static let reservedField = "elapsed_us"

    var arguments: [Argument]
    var returns: CType
    /// In order: the return value (unless void), then each element of each out-argument.
    var fields: [String]

    static func parse(args: String, returns: String, fields: String) throws(MonitorError) -> Signature {
        let returnType = try parseReturn(returns)
        let arguments = try parseArguments(try json(args, option: "args"))
        let names = try parseFields(try json(fields, option: "fields"), returns: returnType, arguments: arguments)
        return Signature(arguments: arguments, returns: returnType, fields: names)
    }

    static func json(_ text: String, option: String) throws(MonitorError) -> JSONValue {
        do {
            return try JSONValue.parse(text)
        } catch {
            throw .invalidConfig("options.\(option): not valid JSON \(error)")
        }
    }

    static func parseReturn(_ text: String) throws(MonitorError) -> CType {
        guard let type = CType(name: text) else {
            throw .invalidConfig("options.returns: unknown type \(quoted(text)) (known: \(CType.names(CType.allCases)))")
        }
        return type
    }

    static func parseArguments(_ value: JSONValue) throws(MonitorError) -> [Argument] {
        guard let items = value.array else {
            throw .invalidConfig("options.args: expected a list of arguments such as [{int32: 3}, {out: \"double[3]\"}], got \(value.kindName)")
        }
        var arguments: [Argument] = []
        for (index, item) in items.enumerated() {
            let path = "options.args[\(index)]"
            guard let entries = item.object, entries.count == 1 else {
                let got = item.object.map { "an object with \($0.count) keys" } ?? item.kindName
                throw .invalidConfig("\(path): expected a one-key map such as {int32: 3} or {out: \"double[3]\"}, got \(got)")
            }
            let (key, content) = entries[0]
            if key == "out" {
                arguments.append(.output(try parseOut(content, path: path + ".out")))
                continue
            }
            guard let type = CType(name: key) else {
                throw .invalidConfig("\(path): unknown type \(quoted(key)) (known: \(CType.names(CType.argumentTypes)), out)")
            }
            guard type != .void else {
                throw .invalidConfig("\(path): void is a return type only (a function without arguments has args: [])")
            }
            arguments.append(.input(type, try convert(content, to: type, path: path + "." + key)))
        }
        return arguments
    }

    /// `TYPE` or `TYPE[COUNT]`, TYPE a number type.
    static func parseOut(_ value: JSONValue, path: String) throws(MonitorError) -> OutSpec {
        guard let text = value.string else {
            throw .invalidConfig("\(path): expected a type as a string such as \"double[3]\" or \"int32\", got \(value.kindName)")
        }
        var typeName = Substring(text)
        var count = 1
        if let open = text.firstIndex(of: "[") {
            typeName = text[..<open]
            let rest = text[text.index(after: open)...]
            guard rest.hasSuffix("]"), let n = Int(rest.dropLast()), rest.dropLast().allSatisfy(\.isASCII) else {
                throw .invalidConfig("\(path): \(quoted(text)) is not TYPE or TYPE[COUNT] (such as \"double[3]\" or \"int32\")")
            }
            guard n >= 1 && n <= maxOutCount else {
                throw .invalidConfig("\(path): \(quoted(text)): the count must be 1 to \(maxOutCount)")
            }
            count = n
        }
        guard let type = CType(name: String(typeName)) else {
            throw .invalidConfig("\(path): unknown type \(quoted(String(typeName))) (known for out-arguments: \(CType.names(CType.outTypes)))")
        }
        guard type.isNumber else {
            throw .invalidConfig("\(path): \(quoted(text)): out-arguments hold numbers (\(CType.names(CType.outTypes)))")
        }
        return OutSpec(type: type, count: count, text: text)
    }

    /// Beyond this, a JSON number (a Double) no longer holds every integer.
    static let exactIntegerLimit = 9_007_199_254_740_992.0

    static func convert(_ value: JSONValue, to type: CType, path: String) throws(MonitorError) -> InValue {
        func got() -> String { "\(value.kindName)" + (value.isNull ? "" : " (\(shortText(value)))") }
        switch type {
        case .void:
            preconditionFailure("void is refused before")
        case .bool:
            guard let b = value.bool else { throw .invalidConfig("\(path): expected true or false, got \(got())") }
            return .bool(b)
        case .string:
            if value.isNull { return .string(nil) }
            guard let s = value.string else { throw .invalidConfig("\(path): expected a string or null, got \(got())") }
            guard !s.utf8.contains(0) else {
                throw .invalidConfig("\(path): the string contains a NUL character, which a C string cannot hold")
            }
            return .string(s)
        case .float, .double:
            guard let d = value.number else { throw .invalidConfig("\(path): expected a number, got \(got())") }
            if type == .double { return .double(d) }
            guard abs(d) <= Double(Float.greatestFiniteMagnitude) else {
                throw .invalidConfig("\(path): \(JSONValue.format(d)) does not fit float (at most ±\(Float.greatestFiniteMagnitude))")
            }
            return .float(Float(d))
        case .int8, .int16, .int32, .int64, .uint8, .uint16, .uint32, .uint64:
            guard let d = value.number else { throw .invalidConfig("\(path): expected an integer, got \(got())") }
            guard d.rounded(.towardZero) == d else {
                throw .invalidConfig("\(path): \(JSONValue.format(d)) is not an integer")
            }
            let range = type.integerRange!
            guard d >= range.min, d < range.end else {
                throw .invalidConfig("\(path): \(JSONValue.format(d)) does not fit \(type.name) (\(range.text))")
            }
            guard abs(d) <= exactIntegerLimit else {
                throw .invalidConfig("\(path): \(JSONValue.format(d)) is beyond ±2^53 (9007199254740992), where JSON numbers are not exact integers")
            }
            return range.min < 0 ? .signed(Int64(d)) : .unsigned(UInt64(d))
        }
    }

    static func parseFields(_ value: JSONValue, returns: CType, arguments: [Argument]) throws(MonitorError) -> [String] {
        guard let items = value.array else {
            throw .invalidConfig("options.fields: expected a list of field names, got \(value.kindName)")
        }
        var names: [String] = []
        for (index, item) in items.enumerated() {
            guard let name = item.string, !name.isEmpty else {
                throw .invalidConfig("options.fields[\(index)]: expected a field name (a non-empty string), got \(item.string == nil ? item.kindName : "an empty string")")
            }
            guard name != reservedField else {
                throw .invalidConfig("options.fields[\(index)]: \(quoted(name)) is the plugin's own field (the call's duration)")
            }
            if let first = names.firstIndex(of: name) {
                throw .invalidConfig("options.fields[\(index)]: \(quoted(name)) is already the name of field \(first)")
            }
            names.append(name)
        }
        let outs = arguments.compactMap { if case .output(let o) = $0 { o } else { nil } }
        let needed = (returns == .void ? 0 : 1) + outs.reduce(0) { $0 + $1.count }
        guard names.count == needed else {
            let parts = (returns == .void ? [] : ["return value"]) + outs.map(\.text)
            let how = parts.isEmpty ? "the function returns void and has no out-arguments" : parts.joined(separator: " + ")
            throw .invalidConfig("options.fields: \(names.count) \(names.count == 1 ? "name" : "names") given, \(needed) needed (\(how))")
        }
        return names
    }

    static func quoted(_ s: String) -> String { JSONValue.string(s).jsonText }

    /// A value as JSON, cut short for messages.
    static func shortText(_ value: JSONValue) -> String {
        let text = value.jsonText
        return text.count <= 40 ? text : String(text.prefix(37)) + "..."
    }
}
