/// What a piece of configuration says, as text, leaving out where it was
/// written: two monitors (or sinks, thresholds, rules) with the same
/// fingerprint behave the same, whatever their line, column or file. A
/// reload compares fingerprints to leave what did not change untouched; a
/// fragment moved to conf.d, or a comment added above, changes nothing.
///
/// It walks the value's stored properties (Mirror), so a field added to a
/// configuration type later takes part without anyone remembering to list
/// it. Source locations are skipped, as are the properties named in
/// `skipping` at the top level; dictionaries and sets are written sorted.
public enum ConfigFingerprint {
    public static func of(_ value: Any, skipping: Set<String> = []) -> String {
        var out = ""
        write(value, skipping: skipping, into: &out)
        return out
    }

    private static func write(_ value: Any, skipping: Set<String>, into out: inout String) {
        if value is SourceLocation || value is [SourceLocation] || value is SourceLocation? { return }
        let mirror = Mirror(reflecting: value)
        switch mirror.displayStyle {
        case .struct?, .class?:
            out += "\(type(of: value)){"
            for child in mirror.children {
                guard let label = child.label, !skipping.contains(label) else { continue }
                if child.value is SourceLocation || child.value is SourceLocation? || child.value is [SourceLocation] { continue }
                out += label + ":"
                write(child.value, skipping: [], into: &out)
                out += ","
            }
            out += "}"
        case .enum?:
            if let payload = mirror.children.first {
                out += "\(type(of: value)).\(payload.label ?? "")("
                write(payload.value, skipping: [], into: &out)
                out += ")"
            } else {
                out += "\(type(of: value)).\(value)"
            }
        case .optional?:
            if let some = mirror.children.first {
                write(some.value, skipping: [], into: &out)
            } else {
                out += "nil"
            }
        case .tuple?:
            out += "("
            for child in mirror.children {
                out += (child.label ?? "") + ":"
                write(child.value, skipping: [], into: &out)
                out += ","
            }
            out += ")"
        case .collection?:
            out += "["
            for child in mirror.children {
                write(child.value, skipping: [], into: &out)
                out += ","
            }
            out += "]"
        case .dictionary?, .set?:
            var parts: [String] = []
            for child in mirror.children {
                var part = ""
                write(child.value, skipping: [], into: &part)
                parts.append(part)
            }
            out += "{" + parts.sorted().joined(separator: ",") + "}"
        default:
            // Numbers, strings, booleans: their own text, strings quoted so
            // that no value can pass for structure.
            if let text = value as? String {
                out += "\""
                for c in text {
                    if c == "\\" || c == "\"" { out += "\\" }
                    out.append(c)
                }
                out += "\""
            } else {
                out += "\(value)"
            }
        }
    }
}
