/// What a Monitoring Plugins check (`check_*`, run by Nagios, Icinga,
/// Naemon, Sensu) prints, read as the plugin guidelines define it
/// (monitoring-plugin-guidelines, 03.Output and 01.range_expressions; the
/// multi-line form of the Nagios 3 plugin API):
///
///     TEXT OUTPUT | OPTIONAL PERFDATA
///     LONG TEXT LINE 1
///     LONG TEXT LINE 2 | PERFDATA LINE 2
///     PERFDATA LINE 3
///
/// Perfdata are space-separated `'label'=value[UOM];[warn];[crit];[min];[max]`.
/// Each datum is read on its own: one that is malformed is dropped and said
/// in `errors`, the others are kept. Nothing here traps on any input.
public struct NagiosOutput: Sendable, Equatable {
    /// The first line, without its perfdata; trimmed.
    public var text: String
    /// The lines after the first, up to the `|` that starts the rest of
    /// the perfdata, joined with "\n".
    public var longOutput: String
    public var perfdata: [NagiosPerfdatum]
    /// One line per datum that could not be read: what, and why.
    public var errors: [String]

    public init(text: String = "", longOutput: String = "", perfdata: [NagiosPerfdatum] = [], errors: [String] = []) {
        self.text = text
        self.longOutput = longOutput
        self.perfdata = perfdata
        self.errors = errors
    }

    /// Reads a check's standard output. `cut`: the output was cut at a size
    /// limit, so its last line is incomplete and is left out; when that is
    /// its only line, its text is kept as far as it came (as Nagios keeps
    /// the start of an output too long for it), its perfdata is not (a datum
    /// cut in the middle would read as another).
    public static func parse(_ bytes: some Collection<UInt8>, cut: Bool = false) -> NagiosOutput {
        var bytes = Array(bytes)
        var firstLineCut = false
        if cut {
            if let end = bytes.lastIndex(of: UInt8(ascii: "\n")) {
                bytes.removeSubrange(end...)
            } else {
                firstLineCut = true
            }
        }
        // Split as bytes: "\r\n" is one Character to String.
        var lines: [Substring] = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            String(decoding: line.last == UInt8(ascii: "\r") ? line.dropLast() : line, as: UTF8.self)[...]
        }
        while let last = lines.last, last.allSatisfy(\.isWhitespace) { lines.removeLast() }
        var result = NagiosOutput()
        guard let first = lines.first else { return result }

        var perfText: [Substring] = []
        if let bar = first.firstIndex(of: "|") {
            result.text = trim(first[..<bar])
            if !firstLineCut { perfText.append(first[first.index(after: bar)...]) }
        } else {
            result.text = trim(first)
        }
        var long: [Substring] = []
        var inPerfdata = false
        for line in lines.dropFirst() {
            if inPerfdata { perfText.append(line); continue }
            if let bar = line.firstIndex(of: "|") {
                long.append(line[..<bar])
                perfText.append(line[line.index(after: bar)...])
                inPerfdata = true
            } else {
                long.append(line)
            }
        }
        while let last = long.last, last.allSatisfy(\.isWhitespace) { long.removeLast() }
        result.longOutput = long.map { String($0.reversed().drop(while: \.isWhitespace).reversed()) }.joined(separator: "\n")
        for text in perfText { parsePerfdata(text, into: &result) }
        return result
    }

    static func trim(_ s: Substring) -> String {
        String(s.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }

    /// The data of one line of perfdata.
    static func parsePerfdata(_ line: Substring, into result: inout NagiosOutput) {
        let chars = Array(line.unicodeScalars)
        var i = 0
        func isBlank(_ c: Unicode.Scalar) -> Bool { c == " " || c == "\t" || c == "\r" || c == "\u{0B}" || c == "\u{0C}" }
        while i < chars.count {
            while i < chars.count, isBlank(chars[i]) { i += 1 }
            guard i < chars.count else { return }
            let tokenStart = i
            var label = ""
            if chars[i] == "'" {
                // 'quoted label', with '' for a quote inside.
                i += 1
                var closed = false
                while i < chars.count {
                    if chars[i] == "'" {
                        if i + 1 < chars.count, chars[i + 1] == "'" { label.unicodeScalars.append("'"); i += 2; continue }
                        closed = true
                        i += 1
                        break
                    }
                    label.unicodeScalars.append(chars[i])
                    i += 1
                }
                guard closed else {
                    result.errors.append("'\(String(String.UnicodeScalarView(chars[tokenStart...])))': the label's quote is not closed")
                    return
                }
                guard i < chars.count, chars[i] == "=" else {
                    while i < chars.count, !isBlank(chars[i]) { i += 1 }
                    result.errors.append("'\(String(String.UnicodeScalarView(chars[tokenStart..<i])))': no '=' after the label")
                    continue
                }
            } else {
                while i < chars.count, chars[i] != "=", !isBlank(chars[i]) { label.unicodeScalars.append(chars[i]); i += 1 }
                guard i < chars.count, chars[i] == "=" else {
                    result.errors.append("'\(String(String.UnicodeScalarView(chars[tokenStart..<i])))': not label=value")
                    continue
                }
            }
            i += 1  // '='
            let dataStart = i
            while i < chars.count, !isBlank(chars[i]) { i += 1 }
            let token = String(String.UnicodeScalarView(chars[tokenStart..<i]))
            let data = String(String.UnicodeScalarView(chars[dataStart..<i]))
            guard !label.isEmpty else { result.errors.append("'\(token)': the label is empty"); continue }
            switch NagiosPerfdatum.parse(label: label, data: data) {
            case .success(let datum): result.perfdata.append(datum)
            case .failure(let why): result.errors.append("'\(token)': \(why.text)")
            }
        }
    }
}

/// One perfdata datum.
public struct NagiosPerfdatum: Sendable, Equatable {
    public var label: String
    /// As written; nil for `U` (the check could not determine it).
    public var value: Double?
    /// The unit of measure as written ("", "s", "ms", "%", "KB", "c", …).
    public var uom: String
    public var warn: NagiosRange?
    public var crit: NagiosRange?
    public var min: Double?
    public var max: Double?

    public init(label: String, value: Double?, uom: String = "", warn: NagiosRange? = nil, crit: NagiosRange? = nil,
                min: Double? = nil, max: Double? = nil) {
        self.label = label
        self.value = value
        self.uom = uom
        self.warn = warn
        self.crit = crit
        self.min = min
        self.max = max
    }

    public struct Refusal: Error, Sendable { public var text: String }

    /// `value[UOM][;warn[;crit[;min[;max]]]]`.
    public static func parse(label: String, data: String) -> Result<NagiosPerfdatum, Refusal> {
        let parts = data.split(separator: ";", omittingEmptySubsequences: false)
        guard parts.count <= 5 else { return .failure(Refusal(text: "more than value;warn;crit;min;max")) }
        let first = parts[0]
        guard !first.isEmpty else { return .failure(Refusal(text: "no value")) }
        var datum = NagiosPerfdatum(label: label, value: nil)
        if first == "U" {
            datum.value = nil
        } else {
            guard let (number, rest) = NagiosNumber.prefix(first) else {
                return .failure(Refusal(text: "value '\(first)' is not a number"))
            }
            guard rest.allSatisfy({ $0.isLetter || $0 == "%" || $0 == "/" }) else {
                return .failure(Refusal(text: "unit '\(rest)' of value '\(first)' is not a unit of measure"))
            }
            datum.value = number
            datum.uom = String(rest)
        }
        func range(_ index: Int, _ name: String) -> Result<NagiosRange?, Refusal> {
            guard index < parts.count, !parts[index].isEmpty else { return .success(nil) }
            guard let range = NagiosRange.parse(parts[index]) else {
                return .failure(Refusal(text: "\(name) '\(parts[index])' is not a range ([@][start:][end])"))
            }
            return .success(range)
        }
        func number(_ index: Int, _ name: String) -> Result<Double?, Refusal> {
            guard index < parts.count, !parts[index].isEmpty else { return .success(nil) }
            guard let (n, rest) = NagiosNumber.prefix(parts[index]), rest.isEmpty || rest == datum.uom[...] else {
                return .failure(Refusal(text: "\(name) '\(parts[index])' is not a number"))
            }
            return .success(n)
        }
        switch range(1, "warn") { case .success(let r): datum.warn = r; case .failure(let e): return .failure(e) }
        switch range(2, "crit") { case .success(let r): datum.crit = r; case .failure(let e): return .failure(e) }
        switch number(3, "min") { case .success(let n): datum.min = n; case .failure(let e): return .failure(e) }
        switch number(4, "max") { case .success(let n): datum.max = n; case .failure(let e): return .failure(e) }
        return .success(datum)
    }

    /// The value in the base unit of its UOM, and that unit: seconds for
    /// s/ms/us/ns, bytes for B/KB/MB/GB/TB/PB (powers of 1024, as the
    /// Monitoring Plugins mean them: check_disk's and check_swap's MB are
    /// MiB) and KiB/MiB/…, percent for %, counter for c, else the UOM as
    /// written with the value unchanged.
    public var base: (value: Double?, unit: String, scale: Double) {
        let (unit, scale) = Self.baseUnit(of: uom)
        return (value.map { $0 * scale }, unit, scale)
    }

    public static func baseUnit(of uom: String) -> (unit: String, scale: Double) {
        switch uom {
        case "s": ("seconds", 1)
        case "ms": ("seconds", 1e-3)
        case "us", "µs", "μs": ("seconds", 1e-6)
        case "ns": ("seconds", 1e-9)
        case "%": ("percent", 1)
        case "B": ("bytes", 1)
        case "KB", "kB", "KiB": ("bytes", 1024)
        case "MB", "MiB": ("bytes", 1_048_576)
        case "GB", "GiB": ("bytes", 1_073_741_824)
        case "TB", "TiB": ("bytes", 1_099_511_627_776)
        case "PB", "PiB": ("bytes", 1_125_899_906_842_624)
        case "c": ("counter", 1)
        default: (uom, 1)
        }
    }
}

/// A threshold range `[@][start:][end]`: `~` for a start of −∞, an omitted
/// start is 0 and an omitted end +∞. Without `@` a value alerts when it is
/// outside the range (ends included in the range); with `@`, when inside.
public struct NagiosRange: Sendable, Equatable {
    public var start: Double
    public var end: Double
    public var inside: Bool
    /// As written.
    public var text: String

    public static func parse(_ text: Substring) -> NagiosRange? {
        var rest = text
        let inside = rest.hasPrefix("@")
        if inside { rest = rest.dropFirst() }
        guard !rest.isEmpty else { return nil }
        var start = 0.0
        var end = Double.infinity
        if let colon = rest.firstIndex(of: ":") {
            let a = rest[..<colon], b = rest[rest.index(after: colon)...]
            if a == "~" {
                start = -.infinity
            } else if !a.isEmpty {
                guard let (n, tail) = NagiosNumber.prefix(a), tail.isEmpty else { return nil }
                start = n
            }
            if !b.isEmpty {
                guard let (n, tail) = NagiosNumber.prefix(b), tail.isEmpty else { return nil }
                end = n
            }
        } else {
            guard let (n, tail) = NagiosNumber.prefix(rest), tail.isEmpty else { return nil }
            end = n
        }
        guard start <= end else { return nil }
        return NagiosRange(start: start, end: end, inside: inside, text: String(text))
    }

    /// Whether `value` raises the alert this range stands for.
    public func alerts(_ value: Double) -> Bool {
        let within = value >= start && value <= end
        return inside ? within : !within
    }
}

/// Decimal numbers as perfdata write them: `[+-]digits[.digits][e[+-]digits]`,
/// or with a comma for the point (some locales' checks), never inf, nan or hex.
enum NagiosNumber {
    /// The longest number at the start of `text`, and what follows it.
    static func prefix(_ text: Substring) -> (Double, Substring)? {
        let scalars = Array(text.utf8)
        var i = 0
        func digits() -> Int {
            let from = i
            while i < scalars.count, scalars[i] >= 0x30, scalars[i] <= 0x39 { i += 1 }
            return i - from
        }
        if i < scalars.count, scalars[i] == UInt8(ascii: "-") || scalars[i] == UInt8(ascii: "+") { i += 1 }
        var count = digits()
        var point = -1
        if i < scalars.count, scalars[i] == UInt8(ascii: ".") || scalars[i] == UInt8(ascii: ",") {
            let save = i
            i += 1
            let fraction = digits()
            if fraction == 0 && count == 0 { i = save } else { point = save; count += fraction }
        }
        guard count > 0 else { return nil }
        if i < scalars.count, scalars[i] == UInt8(ascii: "e") || scalars[i] == UInt8(ascii: "E") {
            let save = i
            i += 1
            if i < scalars.count, scalars[i] == UInt8(ascii: "-") || scalars[i] == UInt8(ascii: "+") { i += 1 }
            if digits() == 0 { i = save }
        }
        var literal = scalars[0..<i]
        if point >= 0 { literal[point] = UInt8(ascii: ".") }
        guard let value = Double(String(decoding: literal, as: UTF8.self)), value.isFinite else { return nil }
        let rest = text.utf8.index(text.startIndex, offsetBy: i)
        return (value, text[rest...])
    }
}
