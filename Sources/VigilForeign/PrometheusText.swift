/// The Prometheus exposition formats, read as Prometheus reads them: text
/// format 0.0.4 (what node_exporter, its textfile directory and most
/// exporters write) and OpenMetrics 1.0 (`application/openmetrics-text`).
/// A file or a scrape is taken whole or not at all, as Prometheus takes a
/// scrape and node_exporter's textfile collector a file: the first problem
/// is thrown with its line and column, and nothing of it is kept.
///
/// Bounded: at most `maxSeries` samples are read (more is an error), and
/// every number, name and label is read from the bytes given without any
/// allocation larger than they are.
public struct PrometheusExposition: Sendable {
    public enum Format: Sendable { case text, openMetrics }

    public enum MetricType: String, Sendable {
        case counter, gauge, histogram, summary, untyped
        /// OpenMetrics only.
        case info, stateset, gaugehistogram, unknown
    }

    public struct Sample: Sendable, Equatable {
        /// The sample's own name (`x_bucket`, `x_total`, `x_created`).
        public var name: String
        public var labels: [Label]
        public var value: Double
        /// Milliseconds since the epoch, when the line gave one.
        public var timestamp: Int64?
    }

    public struct Label: Sendable, Equatable, Hashable {
        public var name: String
        public var value: String
    }

    public struct Family: Sendable {
        public var name: String
        public var type: MetricType
        public var help: String?
        public var unit: String?
        public var samples: [Sample]
    }

    public var families: [Family]
    public var sampleCount: Int { families.reduce(0) { $0 + $1.samples.count } }

    public struct ParseError: Error, Sendable, CustomStringConvertible, Equatable {
        public var line: Int
        public var column: Int
        public var message: String
        public var description: String { "\(line):\(column): \(message)" }
    }

    public static func parse(_ bytes: [UInt8], format: Format = .text, maxSeries: Int = 1_000_000) throws(ParseError) -> PrometheusExposition {
        var reader = Reader(bytes: bytes, format: format, maxSeries: maxSeries)
        try reader.read()
        return PrometheusExposition(families: reader.families)
    }

    /// Labels as the exposition writes them: `a="x",b="y\"z"`, ordered by
    /// name (as Prometheus' clients and node_exporter order them), `\\`,
    /// `\"` and `\n` escaped. The one writer of a label set a plugin passes
    /// on (textfile, scrape) and the form the prometheus sink accepts.
    public static func labelText(_ labels: [Label]) -> String {
        var out = ""
        for label in labels.sorted(by: { $0.name < $1.name }) { appendLabel(label.name, label.value, to: &out) }
        return out
    }

    /// Appends `name="value"` to a label set, after a comma when it is not
    /// the first: the value escaped as both formats say (`\\`, `\"`, `\n`).
    public static func appendLabel(_ name: String, _ value: String, to labels: inout String) {
        if !labels.isEmpty { labels += "," }
        labels += name
        labels += "=\""
        for c in value.unicodeScalars {
            switch c {
            case "\\": labels += "\\\\"
            case "\"": labels += "\\\""
            case "\n": labels += "\\n"
            default: labels.unicodeScalars.append(c)
            }
        }
        labels += "\""
    }

    /// `application/openmetrics-text` by the Content-Type of a reply; else text.
    public static func format(contentType: String) -> Format {
        contentType.lowercased().hasPrefix("application/openmetrics-text") ? .openMetrics : .text
    }
}

private struct Reader {
    typealias E = PrometheusExposition
    let bytes: [UInt8]
    let format: E.Format
    let maxSeries: Int
    var families: [E.Family] = []
    /// Family name → index in `families`.
    var index: [String: Int] = [:]
    /// Families that have had samples (a TYPE or HELP after them is an error).
    var sampled: Set<String> = []
    /// Series seen: the name and labels of each sample, for duplicates.
    var series: Set<SeriesKey> = []
    var count = 0
    var line = 1
    var lineStart = 0
    var i = 0
    /// OpenMetrics: the family the last lines belonged to, and those done.
    var current: String?
    var finished: Set<String> = []

    struct SeriesKey: Hashable {
        var name: String
        var labels: [E.Label]
    }

    init(bytes: [UInt8], format: E.Format, maxSeries: Int) {
        self.bytes = bytes
        self.format = format
        self.maxSeries = maxSeries
    }

    func fail(_ message: String, at position: Int? = nil) -> E.ParseError {
        E.ParseError(line: line, column: (position ?? i) - lineStart + 1, message: message)
    }

    var om: Bool { format == .openMetrics }

    mutating func read() throws(E.ParseError) {
        var sawEOF = false
        while i < bytes.count {
            if sawEOF { throw fail("nothing may follow # EOF") }
            let start = i
            var end = i
            while end < bytes.count, bytes[end] != 0x0A { end += 1 }
            if end == bytes.count && om { throw fail("the last line has no newline") }
            if bytes[start..<end].contains(0) { throw fail("a NUL byte", at: bytes[start..<end].firstIndex(of: 0)) }
            try readLine(end: end, sawEOF: &sawEOF)
            i = end + 1
            line += 1
            lineStart = i
        }
        if om && !sawEOF { throw fail("OpenMetrics must end with # EOF") }
    }

    static func isBlank(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 }

    mutating func skipBlanks(_ end: Int) {
        while i < end, Self.isBlank(bytes[i]) { i += 1 }
    }

    mutating func readLine(end: Int, sawEOF: inout Bool) throws(E.ParseError) {
        skipBlanks(end)
        if i == end {
            if om { throw fail("an empty line") }
            return
        }
        if bytes[i] == UInt8(ascii: "#") {
            try readComment(end: end, sawEOF: &sawEOF)
        } else {
            try readSample(end: end)
        }
    }

    /// The word from `i` to the next blank or the end.
    mutating func word(_ end: Int) -> String {
        let from = i
        while i < end, !Self.isBlank(bytes[i]) { i += 1 }
        return String(decoding: bytes[from..<i], as: UTF8.self)
    }

    mutating func readComment(end: Int, sawEOF: inout Bool) throws(E.ParseError) {
        i += 1
        if om {
            guard i < end, bytes[i] == 0x20 else { throw fail("a comment: OpenMetrics has only # HELP, # TYPE, # UNIT and # EOF") }
            i += 1
        } else {
            skipBlanks(end)
        }
        let keywordAt = i
        let keyword = word(end)
        if om && keyword == "EOF" {
            guard i == end else { throw fail("# EOF with more on its line") }
            sawEOF = true
            return
        }
        guard keyword == "HELP" || keyword == "TYPE" || (om && keyword == "UNIT") else {
            if om { throw fail("'# \(keyword)': OpenMetrics has only # HELP, # TYPE, # UNIT and # EOF", at: keywordAt) }
            return  // text format: any other comment
        }
        guard i < end else { throw fail("# \(keyword) without a metric name") }
        i += 1  // one blank
        if !om { skipBlanks(end) }
        let nameAt = i
        let name = word(end)
        guard Self.isMetricName(name) else { throw fail("'\(name)' is not a metric name", at: nameAt) }
        var rest = ""
        if i < end {
            i += 1
            if !om { skipBlanks(end) }
            rest = try unescapedText(end: end, quotes: om)
        }
        if om, let current, current != name, finished.contains(name) {
            throw fail("metric family \(name) appears again after \(current): a family's lines must be together", at: nameAt)
        }
        let at = family(named: name, startingAt: nameAt)
        switch keyword {
        case "HELP":
            guard families[at].help == nil else { throw fail("a second # HELP for \(name)", at: keywordAt) }
            guard !sampled.contains(name) || om else { throw fail("# HELP for \(name) after its samples", at: keywordAt) }
            families[at].help = rest
        case "TYPE":
            guard let type = E.MetricType(rawValue: rest), om ? type != .untyped : [.counter, .gauge, .histogram, .summary, .untyped].contains(type) else {
                throw fail("'\(rest)' is not a metric type", at: nameAt)
            }
            guard !sampled.contains(name) else { throw fail("# TYPE for \(name) after its samples", at: keywordAt) }
            guard !typed.contains(name) else { throw fail("a second # TYPE for \(name)", at: keywordAt) }
            typed.insert(name)
            families[at].type = type
        default:  // UNIT
            guard families[at].unit == nil else { throw fail("a second # UNIT for \(name)", at: keywordAt) }
            guard rest.isEmpty || name.hasSuffix("_" + rest) else {
                throw fail("unit '\(rest)' is not the suffix of \(name)", at: nameAt)
            }
            families[at].unit = rest
        }
    }

    var typed: Set<String> = []

    /// The family `name`, made (untyped, or unknown in OpenMetrics) if new.
    mutating func family(named name: String, startingAt: Int) -> Int {
        if om, current != name {
            if let current { finished.insert(current) }
            current = name
        }
        if let at = index[name] { return at }
        families.append(E.Family(name: name, type: om ? .unknown : .untyped, help: nil, unit: nil, samples: []))
        index[name] = families.count - 1
        return families.count - 1
    }

    /// The rest of a HELP line: `\\` and `\n` (and in OpenMetrics `\"`).
    mutating func unescapedText(end: Int, quotes: Bool) throws(E.ParseError) -> String {
        var out: [UInt8] = []
        while i < end {
            let c = bytes[i]
            if c == UInt8(ascii: "\\") {
                guard i + 1 < end else { throw fail("a \\ at the end of the line") }
                switch bytes[i + 1] {
                case UInt8(ascii: "\\"): out.append(c)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "\"") where quotes: out.append(UInt8(ascii: "\""))
                default:
                    // The text format keeps an unknown escape as written (Prometheus' text parser does).
                    guard !quotes else { throw fail("an unknown escape \\\(Character(Unicode.Scalar(bytes[i + 1])))") }
                    out.append(c)
                    out.append(bytes[i + 1])
                }
                i += 2
                continue
            }
            out.append(c)
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    static func isMetricName(_ s: String) -> Bool {
        guard let first = s.utf8.first, isNameStart(first) || first == UInt8(ascii: ":") else { return false }
        return s.utf8.allSatisfy { isNameStart($0) || isDigit($0) || $0 == UInt8(ascii: ":") }
    }

    static func isLabelName(_ s: String) -> Bool {
        guard let first = s.utf8.first, isNameStart(first) else { return false }
        return s.utf8.allSatisfy { isNameStart($0) || isDigit($0) }
    }

    static func isNameStart(_ c: UInt8) -> Bool { (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7A || c == UInt8(ascii: "_") }
    static func isDigit(_ c: UInt8) -> Bool { c >= 0x30 && c <= 0x39 }

    mutating func readSample(end: Int) throws(E.ParseError) {
        let nameAt = i
        while i < end, Self.isNameStart(bytes[i]) || Self.isDigit(bytes[i]) || bytes[i] == UInt8(ascii: ":") { i += 1 }
        let name = String(decoding: bytes[nameAt..<i], as: UTF8.self)
        guard Self.isMetricName(name) else { throw fail("a sample without a metric name", at: nameAt) }
        var labels: [E.Label] = []
        let afterName = i
        if !om { skipBlanks(end) }
        if i < end, bytes[i] == UInt8(ascii: "{") {
            i += 1
            labels = try readLabels(end: end)
            let afterLabels = i
            if om { if i < end, bytes[i] == 0x20 { i += 1 } } else { skipBlanks(end) }
            guard i > afterLabels else { throw fail(i < end ? "a blank before the value" : "a sample without a value") }
        } else {
            if om, i < end, bytes[i] == 0x20 { i += 1 }
            guard i > afterName else { throw fail(i < end ? "a blank before the value" : "a sample without a value") }
        }
        guard i < end else { throw fail("a sample without a value") }
        let valueAt = i
        let valueText = word(end)
        guard let value = Self.number(valueText) else { throw fail("'\(valueText)' is not a number", at: valueAt) }
        var timestamp: Int64?
        if !om { skipBlanks(end) } else if i < end { i += 1 }
        if i < end, bytes[i] != UInt8(ascii: "#") {
            let at = i
            let text = word(end)
            if om {
                guard let seconds = Self.number(text), seconds.isFinite, abs(seconds) < 9.2e15 else {
                    throw fail("'\(text)' is not a timestamp", at: at)
                }
                timestamp = Int64((seconds * 1000).rounded())
            } else {
                guard let ms = Int64(text) else { throw fail("'\(text)' is not a timestamp in milliseconds", at: at) }
                timestamp = ms
            }
            if !om { skipBlanks(end) } else if i < end { i += 1 }
        }
        if i < end {
            // An exemplar (OpenMetrics), read for its form and dropped.
            guard om, bytes[i] == UInt8(ascii: "#") else { throw fail("more after the value and timestamp") }
            try skipExemplar(end: end)
        }
        try add(E.Sample(name: name, labels: labels, value: value, timestamp: timestamp), at: nameAt)
    }

    mutating func skipExemplar(end: Int) throws(E.ParseError) {
        i += 1
        guard i < end, bytes[i] == 0x20 else { throw fail("an exemplar needs '# {'") }
        i += 1
        guard i < end, bytes[i] == UInt8(ascii: "{") else { throw fail("an exemplar needs '# {'") }
        i += 1
        _ = try readLabels(end: end)
        guard i < end, bytes[i] == 0x20 else { throw fail("an exemplar without a value") }
        i += 1
        let at = i
        let text = word(end)
        guard Self.number(text) != nil else { throw fail("'\(text)' is not a number", at: at) }
        if i < end {
            i += 1
            let at = i
            let ts = word(end)
            guard Self.number(ts) != nil else { throw fail("'\(ts)' is not a timestamp", at: at) }
        }
        guard i == end else { throw fail("more after the exemplar") }
    }

    /// After `{`: `name="value"` pairs, a trailing comma allowed (text), up to `}`.
    mutating func readLabels(end: Int) throws(E.ParseError) -> [E.Label] {
        var labels: [E.Label] = []
        while true {
            if !om { skipBlanks(end) }
            guard i < end else { throw fail("the labels are not closed with }") }
            if bytes[i] == UInt8(ascii: "}") { i += 1; break }
            let at = i
            while i < end, Self.isNameStart(bytes[i]) || Self.isDigit(bytes[i]) { i += 1 }
            let name = String(decoding: bytes[at..<i], as: UTF8.self)
            guard Self.isLabelName(name) else { throw fail("a label name was expected", at: at) }
            if !om { skipBlanks(end) }
            guard i < end, bytes[i] == UInt8(ascii: "=") else { throw fail("'=' after label \(name) was expected") }
            i += 1
            if !om { skipBlanks(end) }
            guard i < end, bytes[i] == UInt8(ascii: "\"") else { throw fail("the value of label \(name) must be quoted") }
            i += 1
            var value: [UInt8] = []
            var closed = false
            while i < end {
                let c = bytes[i]
                if c == UInt8(ascii: "\"") { closed = true; i += 1; break }
                if c == UInt8(ascii: "\\") {
                    guard i + 1 < end else { break }
                    switch bytes[i + 1] {
                    case UInt8(ascii: "\\"): value.append(c)
                    case UInt8(ascii: "\""): value.append(UInt8(ascii: "\""))
                    case UInt8(ascii: "n"): value.append(0x0A)
                    default: throw fail("an unknown escape in the value of label \(name)")
                    }
                    i += 2
                    continue
                }
                value.append(c)
                i += 1
            }
            guard closed else { throw fail("the value of label \(name) is not closed") }
            if name == "__name__" || labels.contains(where: { $0.name == name }) {
                throw fail(name == "__name__" ? "label __name__ is the metric's name" : "label \(name) is given twice", at: at)
            }
            labels.append(E.Label(name: name, value: String(decoding: value, as: UTF8.self)))
            if !om { skipBlanks(end) }
            guard i < end else { throw fail("the labels are not closed with }") }
            if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
            guard bytes[i] == UInt8(ascii: "}") else { throw fail("',' or '}' after label \(name) was expected") }
        }
        return labels
    }

    /// Go's ParseFloat as the text parser uses it: decimal, with an
    /// exponent, and Inf, +Inf, -Inf, NaN in any case.
    static func number(_ text: String) -> Double? {
        switch text.lowercased() {
        case "nan": return .nan
        case "inf", "+inf", "infinity", "+infinity": return .infinity
        case "-inf", "-infinity": return -.infinity
        default: break
        }
        guard let first = text.utf8.first, isDigit(first) || first == UInt8(ascii: "-") || first == UInt8(ascii: "+") || first == UInt8(ascii: ".") else {
            return nil
        }
        guard text.utf8.allSatisfy({ isDigit($0) || "+-.eE".utf8.contains($0) }) else { return nil }
        return Double(text)
    }

    /// The family a sample belongs to: the one of its name, or for the
    /// suffixes of histograms, summaries and counters the one they extend.
    mutating func add(_ sample: E.Sample, at position: Int) throws(E.ParseError) {
        var familyName = sample.name
        for suffix in ["_bucket", "_count", "_sum", "_created", "_total", "_gcount", "_gsum", "_info"] where sample.name.hasSuffix(suffix) {
            let base = String(sample.name.dropLast(suffix.count))
            guard let at = index[base] else { continue }
            let type = families[at].type
            let fits: Bool
            switch suffix {
            case "_bucket": fits = type == .histogram || type == .gaugehistogram
            case "_count", "_sum": fits = type == .histogram || type == .summary
            case "_gcount", "_gsum": fits = type == .gaugehistogram
            case "_created": fits = type == .histogram || type == .summary || type == .counter
            case "_total": fits = type == .counter && om
            default: fits = type == .info && om
            }
            if fits { familyName = base; break }
        }
        if om, let at = index[familyName], families[at].type == .counter, familyName == sample.name {
            throw fail("a counter's sample is named \(familyName)_total", at: position)
        }
        if om, let current, current != familyName, finished.contains(familyName) {
            throw fail("metric family \(familyName) appears again after \(current): a family's lines must be together", at: position)
        }
        let at = family(named: familyName, startingAt: position)
        let type = families[at].type
        if sample.name.hasSuffix("_bucket") && familyName != sample.name {
            guard let le = sample.labels.first(where: { $0.name == "le" }), Self.number(le.value) != nil else {
                throw fail("a histogram bucket without a number in its 'le' label", at: position)
            }
        }
        if type == .summary && familyName == sample.name {
            guard let q = sample.labels.first(where: { $0.name == "quantile" }), Self.number(q.value) != nil else {
                throw fail("a summary quantile without a number in its 'quantile' label", at: position)
            }
        }
        let key = SeriesKey(name: sample.name, labels: sample.labels.sorted { $0.name < $1.name })
        guard series.insert(key).inserted else {
            throw fail("\(sample.name)\(Self.text(sample.labels)) is given twice", at: position)
        }
        count += 1
        guard count <= maxSeries else { throw fail("more than \(maxSeries) series", at: position) }
        sampled.insert(familyName)
        families[at].samples.append(sample)
    }

    static func text(_ labels: [E.Label]) -> String {
        labels.isEmpty ? "" : "{" + labels.map { "\($0.name)=\"\($0.value)\"" }.joined(separator: ",") + "}"
    }
}
