/// A `prometheus` sink's `names:` file: which Prometheus family each field
/// of which plugin's kind becomes, under which labels. It is how the sink
/// serves node_exporter's names (`dist/prometheus/node-exporter.yaml`) while
/// the same events keep their native names in every other sink; the plugins
/// know nothing of it.
///
/// ```yaml
/// families:
///   - name: node_network_receive_bytes_total
///     from: netdev.interface.receive_bytes     # PLUGIN.KIND.FIELD
///     labels: {device: interface}              # the exact label set
///   - name: node_cpu_seconds_total
///     from: cpu.seconds.idle
///     labels: {cpu: cpu, mode: "=idle"}        # "=…": a constant
///   - name: node_uname_info                    # PLUGIN.KIND: an info gauge, value 1
///     from: system.device
///     labels: {release: kernel_release, nodename: hostname}
/// ```
///
/// A label's value is the event's field of that name (an identity, a
/// string, a number written as Prometheus would), or the empty string when
/// the event lacks it. Without `labels:` a family has the sink's usual ones:
/// `monitor`, `host` and every identity under its own name.
/// Optional: `type:` (counter, gauge or untyped; by default a counter when
/// the plugin declares the field one, else a gauge), `scale:` (the factor
/// into the family's unit; by default the one of the field's declared unit,
/// as for native names), `help:` (by default the field's doc).
///
/// Pure: read from a parsed node, so that the manifest's loader reports
/// every problem at its FILE:LINE:COLUMN.
public struct PrometheusNameMap: Sendable, Equatable {
    public enum LabelSource: Sendable, Equatable {
        case field(String)
        case constant(String)
    }

    public struct Label: Sendable, Equatable {
        public var name: String
        public var source: LabelSource
    }

    public struct Entry: Sendable, Equatable {
        /// The samples' name, as scraped.
        public var name: String
        public var plugin: String
        public var kind: String
        /// Nil: an info gauge of the kind (value 1, labels from its fields).
        public var field: String?
        /// Nil: the sink's usual labels.
        public var labels: [Label]?
        public var type: PrometheusNaming.MetricKind?
        public var scale: Double?
        public var help: String?
        public var location: SourceLocation
    }

    public var entries: [Entry]
    /// `absent:`: families of the exporter a file stands in for that no
    /// Vigil plugin makes, each with the reason (`vigil validate` lists them).
    public var absent: [(name: String, why: String)] = []
    /// Entries by plugin, then kind (the sink's plan looks them up once per kind).
    private var index: [String: [String: [Int]]]

    public init(entries: [Entry]) {
        self.entries = entries
        var index: [String: [String: [Int]]] = [:]
        for (i, entry) in entries.enumerated() { index[entry.plugin, default: [:]][entry.kind, default: []].append(i) }
        self.index = index
    }

    public static func == (a: Self, b: Self) -> Bool {
        a.entries == b.entries && a.absent.map(\.name) == b.absent.map(\.name) && a.absent.map(\.why) == b.absent.map(\.why)
    }

    /// The entries for a plugin's kind, in the file's order.
    public func entries(plugin: String, kind: String) -> [Entry] {
        (index[plugin]?[kind] ?? []).map { entries[$0] }
    }

    /// The families the file names, in its order, each once.
    public var families: [String] {
        var seen = Set<String>()
        return entries.compactMap { seen.insert($0.name).inserted ? $0.name : nil }
    }

    static let keys = ["families", "absent"]
    static let entryKeys = ["name", "from", "labels", "type", "scale", "help"]

    /// Reads a names file's root node; every problem is reported, and the
    /// entries that could be read are kept.
    package static func read(_ root: ConfigNode, _ d: inout Diags) -> PrometheusNameMap {
        guard case .mapping(let top, _) = root else {
            d.error(root.location, "a names file is a mapping with 'families:', not \(root.kindName)",
                    hint: "families:\n  - name: node_load1\n    from: load.sample.load1")
            return PrometheusNameMap(entries: [])
        }
        let keys = Keys(top, context: "a names file", known: keys)
        keys.reportUnknown(into: &d)
        guard let list = keys["families"] else {
            d.error(root.location, "a names file needs 'families:', a list of families")
            return PrometheusNameMap(entries: [])
        }
        guard case .sequence(let items, _) = list else {
            d.error(list.location, "'families' must be a list, not \(list.kindName)", hint: "families:\n  - name: node_load1\n    from: load.sample.load1")
            return PrometheusNameMap(entries: [])
        }
        var entries: [Entry] = []
        var types: [String: (PrometheusNaming.MetricKind, SourceLocation)] = [:]
        for item in items {
            guard let entry = readEntry(item, &d) else { continue }
            if let type = entry.type, let (other, at) = types[entry.name], other != type {
                d.error(item.location, "family \(entry.name) is \(type.rawValue) here but \(other.rawValue) at \(at)",
                        hint: "one family has one type")
                continue
            }
            if let type = entry.type, types[entry.name] == nil { types[entry.name] = (type, entry.location) }
            entries.append(entry)
        }
        var map = PrometheusNameMap(entries: entries)
        if let node = keys["absent"] {
            // `absent: {node_textfile_scrape_error: "why"}`
            guard case .mapping(let pairs, _) = node else {
                d.error(node.location, "'absent' must be a mapping of family names to the reason Vigil has none, not \(node.kindName)")
                return map
            }
            for pair in pairs {
                guard isMetricName(pair.key.text) else {
                    d.error(pair.key.location, "'\(pair.key.text)' is not a Prometheus metric name")
                    continue
                }
                if let why = d.string(pair.value, what: "the reason for '\(pair.key.text)'") { map.absent.append((pair.key.text, why)) }
            }
        }
        return map
    }

    private static func readEntry(_ node: ConfigNode, _ d: inout Diags) -> Entry? {
        let example = "- name: node_load1\n  from: load.sample.load1"
        guard let keys = Keys(nested: node, what: "a family", of: "'families'", known: entryKeys, example: example, &d) else { return nil }
        guard let nameNode = keys["name"], let fromNode = keys["from"] else {
            d.error(node.location, "a family needs 'name' (the Prometheus name) and 'from' (PLUGIN.KIND.FIELD, or PLUGIN.KIND for an info gauge)",
                    hint: example)
            return nil
        }
        guard let name = d.string(nameNode, what: "'name'"), let from = d.string(fromNode, what: "'from'") else { return nil }
        guard isMetricName(name) else {
            d.error(nameNode.location, "'\(name)' is not a Prometheus metric name", hint: "letters, digits, '_' and ':', not starting with a digit")
            return nil
        }
        let parts = from.split(separator: ".", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 2, parts.allSatisfy({ !$0.isEmpty }) else {
            d.error(fromNode.location, "'from' is PLUGIN.KIND.FIELD (or PLUGIN.KIND for an info gauge), not '\(from)'",
                    hint: "from: load.sample.load1")
            return nil
        }
        var entry = Entry(name: name, plugin: parts[0], kind: parts[1], field: parts.count == 3 ? parts[2] : nil, labels: nil,
                          type: nil, scale: nil, help: nil, location: nameNode.location)
        if let node = keys["labels"] {
            guard case .mapping(let pairs, _) = node else {
                d.error(node.location, "'labels' must be a mapping of label names to fields (or \"=constant\"), not \(node.kindName)",
                        hint: "labels: {device: interface, mode: \"=idle\"}")
                return nil
            }
            var labels: [Label] = []
            for pair in pairs {
                let label = pair.key.text
                guard isLabelName(label) else {
                    d.error(pair.key.location, "'\(label)' is not a Prometheus label name",
                            hint: "letters, digits and '_', not starting with a digit or '__'")
                    continue
                }
                guard let value = d.string(pair.value, what: "label '\(label)'") else { continue }
                if value.hasPrefix("=") {
                    labels.append(Label(name: label, source: .constant(String(value.dropFirst()))))
                } else if value.isEmpty {
                    d.error(pair.value.location, "label '\(label)' names no field", hint: "a field of the event, or \"=value\" for a constant")
                } else {
                    labels.append(Label(name: label, source: .field(value)))
                }
            }
            entry.labels = labels
        }
        if let node = keys["type"], let type = d.choice(node, what: "'type'", from: ["counter", "gauge", "untyped"]) {
            entry.type = PrometheusNaming.MetricKind(rawValue: type)
            if entry.type == .counter, !name.hasSuffix("_total") {
                d.error(node.location, "a counter's name ends in _total, as Prometheus' naming asks: \(name)_total",
                        hint: "or say type: untyped, as node_exporter does for the raw figures of /proc/net/netstat")
                return nil
            }
        }
        if entry.field == nil, let type = entry.type, type != .gauge {
            d.error(keys["type"]!.location, "an info gauge (from PLUGIN.KIND, no field) is a gauge of value 1, not \(type.rawValue)")
            return nil
        }
        if let node = keys["scale"] {
            guard case .scalar(let s) = node, let scale = s.double, scale.isFinite, scale != 0 else {
                d.error(node.location, "'scale' must be a finite number other than 0, not \(node.kindName)")
                return nil
            }
            entry.scale = scale
        }
        if let node = keys["help"] { entry.help = d.string(node, what: "'help'") }
        return entry
    }

    static func isMetricName(_ s: String) -> Bool {
        guard let first = s.utf8.first, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
        return s.utf8.allSatisfy { b in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || b == UInt8(ascii: "_") || b == UInt8(ascii: ":")
        }
    }

    static func isLabelName(_ s: String) -> Bool {
        !s.hasPrefix("__") && !s.contains(":") && isMetricName(s)
    }
}
