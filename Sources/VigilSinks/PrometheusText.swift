
/// Prometheus' text exposition format (0.0.4), written into a byte buffer:
/// `# HELP` and `# TYPE` once per family, then its samples, label values
/// escaped as the format says (backslash, double quote, newline). Names are
/// the caller's (fixed in the code); values from outside (monitor and sink
/// names) only ever appear as label values.
package struct PrometheusText {
    package static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    package enum Kind: String { case counter, gauge, histogram }

    package private(set) var bytes: [UInt8] = []

    package init() {}

    package mutating func family(_ name: String, _ kind: Kind, _ help: String) {
        bytes += Array("# HELP \(name) ".utf8)
        for b in help.utf8 {
            switch b {
            case UInt8(ascii: "\\"): bytes += Array("\\\\".utf8)
            case UInt8(ascii: "\n"): bytes += Array("\\n".utf8)
            default: bytes.append(b)
            }
        }
        bytes += Array("\n# TYPE \(name) \(kind.rawValue)\n".utf8)
    }

    package mutating func sample(_ name: String, _ labels: KeyValuePairs<String, String> = [:], _ value: Double) {
        sample(name, labels.map { ($0.key, $0.value) }, value)
    }

    package mutating func sample(_ name: String, _ labels: [(String, String)], _ value: Double) {
        bytes += Array(name.utf8)
        if !labels.isEmpty {
            // The same escaping as the prometheus sink's series.
            var text = ""
            for (key, value) in labels { PrometheusSeries.appendLabel(key, value, to: &text) }
            bytes.append(UInt8(ascii: "{"))
            bytes += text.utf8
            bytes.append(UInt8(ascii: "}"))
        }
        bytes.append(UInt8(ascii: " "))
        bytes += Array(Self.number(value).utf8)
        bytes.append(UInt8(ascii: "\n"))
    }

    package static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }
}
