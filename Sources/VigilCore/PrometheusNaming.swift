/// How the `prometheus` sink names what events carry: one series per numeric
/// or boolean field, named from the plugin, the kind and the field, with the
/// declared unit turned into a base unit and a suffix, as Prometheus' naming
/// practice asks (`vigil_memory_available_bytes`, `vigil_cpu_usage_ratio`,
/// `vigil_network_reachability_latency_seconds`). Pure: the sink and its
/// tests share it.
public enum PrometheusNaming {
    public enum MetricKind: String, Sendable {
        case gauge, counter
        /// A figure of unknown kind (node_exporter's raw /proc/net/netstat and
        /// /proc/vmstat ones): `untyped` in the text format, `unknown` in OpenMetrics.
        case untyped
        /// A whole histogram or summary whose samples (`_bucket`, `_sum`,
        /// `_count`, quantiles) pass through a sink as an exporter gave them.
        case histogram, summary

        /// The type as OpenMetrics names it.
        public var openMetricsName: String { self == .untyped ? "unknown" : rawValue }

        /// Samples of several names in one family.
        public var isWhole: Bool { self == .histogram || self == .summary }
    }

    /// One field as a metric family.
    public struct Shape: Sendable, Equatable {
        /// The samples' name (`…_total` for a counter).
        public var name: String
        /// The family's name in OpenMetrics (a counter's without `_total`).
        public var family: String
        public var kind: MetricKind
        /// What the field's value is multiplied by to be in the base unit
        /// (percent → ratio: 0.01; ms → seconds: 0.001).
        public var scale: Double
        public var help: String

        public init(name: String, family: String, kind: MetricKind, scale: Double, help: String) {
            self.name = name
            self.family = family
            self.kind = kind
            self.scale = scale
            self.help = help
        }
    }

    /// The family a `names:` entry makes of a field (`spec` nil: a field
    /// the plugin does not declare). Its type is the entry's, else a counter
    /// for a counter field named `…_total`, else untyped for a counter named
    /// otherwise (a counter's samples end in `_total`), else a gauge; its
    /// scale the entry's, else its declared unit's.
    public static func shape(mapped entry: PrometheusNameMap.Entry, spec: FieldSpec?, valueIsBool: Bool) -> Shape {
        let declaredCounter = spec?.counter == true && !valueIsBool
        let kind = entry.type ?? (declaredCounter ? (entry.name.hasSuffix("_total") ? .counter : .untyped) : .gauge)
        let scale = entry.scale ?? (valueIsBool ? 1 : baseUnit(spec?.unit ?? "").scale)
        let family = kind == .counter ? String(entry.name.dropLast(6)) : entry.name
        var help = entry.help ?? spec.map { $0.doc.isEmpty ? "" : $0.doc } ?? ""
        let source = "\(entry.plugin) \(entry.kind)" + (entry.field.map { ".\($0)" } ?? "")
        help = help.isEmpty ? source : entry.help == nil ? help + " (" + source + ")" : help
        return Shape(name: entry.name, family: family, kind: kind, scale: scale, help: help)
    }

    /// The unit as Prometheus names it, and the factor into it; nil suffix:
    /// a count of things, which takes no suffix.
    public static func baseUnit(_ unit: String) -> (suffix: String?, scale: Double) {
        switch unit.lowercased() {
        case "", "count", "tasks", "processes", "threads", "inodes", "packets", "cpus", "radios", "modes",
             "beacons", "events", "intervals", "items", "entries", "files", "connections":
            return (nil, 1)
        case "bytes", "byte", "b": return ("bytes", 1)
        case "kib": return ("bytes", 1024)
        case "mib": return ("bytes", 1_048_576)
        case "seconds", "second", "s", "sec": return ("seconds", 1)
        case "ms", "milliseconds": return ("seconds", 1e-3)
        case "microseconds", "us", "µs": return ("seconds", 1e-6)
        case "ns", "nanoseconds": return ("seconds", 1e-9)
        case "ratio": return ("ratio", 1)
        case "percent", "%": return ("ratio", 0.01)
        case "celsius", "°c", "degc": return ("celsius", 1)
        case "pa", "pascal", "pascals": return ("pascals", 1)
        case "kpa": return ("pascals", 1e3)
        case "hz", "hertz": return ("hertz", 1)
        case "khz": return ("hertz", 1e3)
        case "mhz": return ("hertz", 1e6)
        case "ghz": return ("hertz", 1e9)
        case "mbit/s", "mbps": return ("bytes_per_second", 1e6 / 8)
        case "m", "meters", "metres": return ("meters", 1)
        case "m/s²", "m/s^2", "m/s2": return ("meters_per_second_squared", 1)
        case "rad/s": return ("radians_per_second", 1)
        case "v", "volts": return ("volts", 1)
        case "a", "amperes": return ("amperes", 1)
        case "w", "watts": return ("watts", 1)
        case "j", "joules": return ("joules", 1)
        default:
            let s = sanitize(unit.lowercased().split(separator: "/", omittingEmptySubsequences: false).joined(separator: "_per_"))
            return (s.isEmpty || s == "_" ? nil : s, 1)
        }
    }

    /// The family of a field of `kind` from `plugin`, or nil for a field
    /// that is no number (a string; an identity, which is a label).
    public static func shape(plugin: String, kind: String, field: String, spec: FieldSpec?, valueIsBool: Bool) -> Shape? {
        if let spec, spec.identity || spec.type == .string { return nil }
        let counter = spec?.counter == true && !valueIsBool
        let unit: (suffix: String?, scale: Double) = valueIsBool ? (nil, 1) : baseUnit(spec?.unit ?? "")
        let plugin = sanitize(plugin), kind = sanitize(kind)
        var fieldPart = sanitize(field)
        var parts = ["vigil", plugin]
        // `sample` is most plugins' one periodic kind; a kind named as its
        // plugin (`radio`), or a field named as its kind, says nothing twice.
        if kind != "sample" && kind != plugin { parts.append(kind) }
        if let suffix = unit.suffix {
            // A field that names its unit already (`used_ratio`, `latency_ms`,
            // `free_percent`) has it replaced, not repeated.
            for own in [suffix, "percent", "pct", "ms", "us", "ns", "kpa", "mhz"]
            where fieldPart.hasSuffix("_" + own) && fieldPart.count > own.count + 1 {
                if own == suffix || baseUnit(own).suffix == suffix {
                    fieldPart.removeLast(own.count + 1)
                    break
                }
            }
        }
        if counter && fieldPart.hasSuffix("_total") { fieldPart.removeLast(6) }
        // `_total` ends a counter's name only: a level named so (`inodes_total`) loses it.
        if !counter && unit.suffix == nil {
            if fieldPart == "total" { fieldPart = "total_value" } else if fieldPart.hasSuffix("_total") { fieldPart.removeLast(6) }
        }
        if fieldPart != kind || parts.count == 2 { parts.append(fieldPart) }
        var family = parts.joined(separator: "_")
        if let suffix = unit.suffix { family += "_" + suffix }

        var help = "\(plugin) \(kind).\(field)"
        if let doc = spec?.doc, !doc.isEmpty { help = doc + " (" + help + ")" }
        if let declared = spec?.unit, !declared.isEmpty, unit.scale != 1 {
            help += ", declared in \(declared)"
        }
        return Shape(name: counter ? family + "_total" : family, family: family, kind: counter ? .counter : .gauge,
                     scale: unit.scale, help: help)
    }

    /// The info gauge of a kind's strings that are no identity:
    /// `vigil_PLUGIN[_KIND]_info`, value 1, the strings as labels (as
    /// node_exporter's `node_uname_info`).
    public static func infoShape(plugin: String, kind: String, doc: String) -> Shape? {
        let plugin = sanitize(plugin), kind = sanitize(kind)
        var parts = ["vigil", plugin]
        if kind != "sample" && kind != plugin { parts.append(kind) }
        let name = parts.joined(separator: "_") + "_info"
        let help = (doc.isEmpty ? "" : doc + " ") + "(\(plugin) \(kind): its strings, as labels)"
        return Shape(name: name, family: name, kind: .gauge, scale: 1, help: help)
    }

    /// A label name for an identity field: `[a-zA-Z_][a-zA-Z0-9_]*`, never
    /// `__…` (Prometheus' own), never one of the sink's (`monitor`, `host`).
    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`, as the exposition formats allow.
    public static func isValidMetricName(_ name: String) -> Bool {
        guard let first = name.utf8.first else { return false }
        func letter(_ c: UInt8) -> Bool { (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7A || c == UInt8(ascii: "_") || c == UInt8(ascii: ":") }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }

    public static func labelName(_ field: String) -> String {
        var name = sanitize(field)
        while name.hasPrefix("__") { name.removeFirst() }
        if name == "monitor" || name == "host" || name == "_" || name.isEmpty { name = "field_" + name }
        return name
    }

    /// `[a-z0-9_]`, other characters as `_`, never starting with a digit.
    static func sanitize(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"):
                out.append(Character(Unicode.Scalar(b)))
            case UInt8(ascii: "A")...UInt8(ascii: "Z"):
                out.append(Character(Unicode.Scalar(b + 32)))
            default:
                if !out.hasSuffix("_") { out.append("_") }
            }
        }
        if let first = out.utf8.first, first >= UInt8(ascii: "0"), first <= UInt8(ascii: "9") { out = "_" + out }
        return out
    }
}
