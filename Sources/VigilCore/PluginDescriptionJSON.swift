import FoundationEssentials

/// A plugin's self-description as JSON: what a process that loaded the plugin
/// (the probe child, later a plugin runner) tells the host, which never loads
/// the plugin itself. One object, keys in snake_case and stable:
///
///     {"name":"cpu","version":"1.0.0","summary":"…","abi_major":1,"abi_minor":2,
///      "default_interval_ns":1000000000,"polled":true,"path":"/…/libcpu.so",
///      "options":[{"name":"per_cpu","type":"bool","default_text":"false","doc":"…","required":false}],
///      "events":[{"kind":"sample","doc":"…","dynamic_fields":false,
///                 "fields":[{"name":"usage","type":"double","unit":"ratio","doc":"…"}]}]}
///
/// Types are the names `ValueType` prints (`bool`, `int`, `double`, `string`,
/// `duration`, `size`, `json`); `default_text` is left out when there is no
/// default. Keys a reader does not know are ignored, so a newer writer may add some.
extension PluginDescription {
    /// The most bytes of JSON `init(json:)` reads.
    public static let maxJSONBytes = 4 << 20

    /// This description as one line of JSON (no raw newline or tab in it),
    /// keys sorted.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Strings, integers and booleans only: encoding cannot fail.
        return String(decoding: try! encoder.encode(self), as: UTF8.self)
    }

    /// Reads a description from JSON sent by a process that may run hostile
    /// code: at most `maxJSONBytes`, every key of the schema present and of
    /// its type, and then held to `problems()` like a descriptor read in-process.
    public init(json: some StringProtocol) throws(JSONError) {
        let bytes = json.utf8.count
        guard bytes <= Self.maxJSONBytes else { throw .tooLarge(bytes: bytes) }
        do {
            self = try JSONDecoder().decode(PluginDescription.self, from: Data(json.utf8))
        } catch let error as DecodingError {
            throw .notADescription(JSONError.explain(error))
        } catch {
            throw .notADescription("\(error)")
        }
        let problems = problems()
        guard problems.isEmpty else { throw .malformed(problems) }
    }

    /// Why JSON is not a description to use.
    public enum JSONError: Error, Sendable, Equatable, CustomStringConvertible {
        /// Longer than `maxJSONBytes`.
        case tooLarge(bytes: Int)
        /// Not JSON, or not of the schema: where and why.
        case notADescription(String)
        /// A description, with the problems `problems()` found.
        case malformed([String])

        public var description: String {
            switch self {
            case .tooLarge(let bytes):
                "its JSON is \(bytes) bytes long (\(Units.formatSize(Int64(PluginDescription.maxJSONBytes))) at most)"
            case .notADescription(let why): "its JSON is not a plugin description: \(why)"
            case .malformed(let problems): problems.joined(separator: "; ")
            }
        }

        /// "events[0].fields[1].type: Expected to decode String but found number instead."
        static func explain(_ error: DecodingError) -> String {
            func at(_ path: [any CodingKey]) -> String {
                var out = ""
                for key in path {
                    if let index = key.intValue { out += "[\(index)]" } else { out += (out.isEmpty ? "" : ".") + key.stringValue }
                }
                return out.isEmpty ? "" : "\(out): "
            }
            switch error {
            case .keyNotFound(let key, let context):
                return "\(at(context.codingPath + [key]))missing"
            case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context):
                let detail = context.underlyingError.map { " (\($0))" } ?? ""
                return "\(at(context.codingPath))\(context.debugDescription)\(detail)"
            @unknown default:
                return "\(error)"
            }
        }
    }
}

/// By name (`"duration"`), not by the C enum's number.
extension ValueType: Codable {
    public init(from decoder: any Decoder) throws {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let type = ValueType.allCases.first(where: { $0.description == name }) else {
            throw DecodingError.dataCorrupted(DecodingError.Context(
                codingPath: decoder.codingPath,
                debugDescription: "unknown type '\(name.prefix(64))' (\(ValueType.allCases.map(\.description).joined(separator: ", ")))"))
        }
        self = type
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
