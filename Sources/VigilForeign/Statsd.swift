import Glibc

/// statsd's line protocol, as Etsy's statsd and DogStatsD clients send it:
///
///     <name>:<value>[:<value>…]|<type>[|@<rate>][|#<tag>[:<value>],…][|c:<container>][|T<timestamp>]
///
/// types `c` (counter), `g` (gauge; a value with a sign is a change unless
/// it is the only form the client has), `ms` (timer), `h` (histogram), `d`
/// (distribution), `s` (set). Several lines per packet, one per `\n`. A
/// line that is not one of these is counted, never trusted: a name that is
/// empty or too long, a value that is no finite number, an unknown type, a
/// rate outside (0, 1], a tag set too long. DogStatsD's events (`_e{…}`) and
/// service checks (`_sc|…`) are counted apart as unsupported.
///
/// Read from the bytes in place: nothing is allocated for a line but the
/// tags' array when it has tags.
public enum Statsd {
    /// A sum, product or quotient of numbers a client sent, kept finite:
    /// values and rates are finite one by one, but `big:1|c|@1e-310` or a
    /// run of sums past 1e308 would be infinite, which no sink can write.
    /// Saturates at the largest finite double, as the ABI's integers do at
    /// their bounds.
    @inline(__always)
    public static func saturating(_ x: Double) -> Double {
        x.isFinite ? x : x.isNaN ? 0 : x > 0 ? .greatestFiniteMagnitude : -.greatestFiniteMagnitude
    }

    public enum Kind: UInt8, Sendable {
        case counter, gauge, timer, histogram, distribution, set

        var code: String {
            switch self {
            case .counter: "c"
            case .gauge: "g"
            case .timer: "ms"
            case .histogram: "h"
            case .distribution: "d"
            case .set: "s"
            }
        }
    }

    /// Limits of one line: what is longer is a bad line, not a big allocation.
    public static let maxNameBytes = 1024
    public static let maxTags = 64
    public static let maxTagBytes = 1024

    /// One metric of a line (a line with several values gives several).
    public struct Metric {
        public var name: UnsafeRawBufferPointer
        public var kind: Kind
        /// The number (counters, gauges, timers…); NaN for a set.
        public var value: Double
        /// A gauge's value had a sign: a change of the gauge, not its value.
        public var delta: Bool
        /// A set's member, as sent.
        public var member: UnsafeRawBufferPointer
        /// 1 when none was sent.
        public var sampleRate: Double
        /// `key:value` or `key` (value empty), as sent.
        public var tags: [(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)]
    }

    /// What a packet held.
    public struct Counts: Sendable, Equatable {
        public var metrics = 0
        public var badLines = 0
        /// DogStatsD events and service checks.
        public var unsupported = 0
        public init() {}
    }

    /// Reads every line of `packet`, calling `metric` for each metric.
    @discardableResult
    public static func parse(_ packet: UnsafeRawBufferPointer, _ metric: (Metric) -> Void) -> Counts {
        var counts = Counts()
        var start = 0
        let count = packet.count
        while start < count {
            var end = start
            while end < count, packet[end] != 0x0A { end += 1 }
            var last = end
            if last > start, packet[last - 1] == 0x0D { last -= 1 }
            if last > start {
                let line = UnsafeRawBufferPointer(rebasing: packet[start..<last])
                if line.starts(with: "_e{".utf8) || line.starts(with: "_sc|".utf8) {
                    counts.unsupported += 1
                } else {
                    let n = parseLine(line, metric)
                    if n > 0 { counts.metrics += n } else { counts.badLines += 1 }
                }
            }
            start = end + 1
        }
        return counts
    }

    /// The metrics of one line (without its newline); 0 when it is bad.
    static func parseLine(_ line: UnsafeRawBufferPointer, _ metric: (Metric) -> Void) -> Int {
        guard let bar = line.firstIndex(of: UInt8(ascii: "|")) else { return 0 }
        let head = UnsafeRawBufferPointer(rebasing: line[0..<bar])
        guard let colon = head.firstIndex(of: UInt8(ascii: ":")), colon > 0, colon <= maxNameBytes else { return 0 }
        let name = UnsafeRawBufferPointer(rebasing: head[0..<colon])
        if name.contains(where: { $0 <= 0x20 || $0 == 0x7F }) { return 0 }
        // The sections after the values: type, then @rate, #tags, c:, T….
        var sections: [UnsafeRawBufferPointer] = []
        var from = bar + 1
        var i = from
        while i <= line.count {
            if i == line.count || line[i] == UInt8(ascii: "|") {
                sections.append(UnsafeRawBufferPointer(rebasing: line[from..<i]))
                from = i + 1
                if sections.count > 8 { return 0 }
            }
            i += 1
        }
        guard let typeText = sections.first, let kind = kind(of: typeText) else { return 0 }
        var rate = 1.0
        var tags: [(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)] = []
        for section in sections.dropFirst() {
            guard let first = section.first else { return 0 }
            switch first {
            case UInt8(ascii: "@"):
                guard let r = number(UnsafeRawBufferPointer(rebasing: section[1...])), r > 0, r <= 1 else { return 0 }
                rate = r
            case UInt8(ascii: "#"):
                guard section.count - 1 <= maxTagBytes else { return 0 }
                var tagFrom = 1
                for j in 1...section.count where j == section.count || section[j] == UInt8(ascii: ",") {
                    if j > tagFrom {
                        let tag = UnsafeRawBufferPointer(rebasing: section[tagFrom..<j])
                        if let c = tag.firstIndex(of: UInt8(ascii: ":")) {
                            tags.append((UnsafeRawBufferPointer(rebasing: tag[0..<c]), UnsafeRawBufferPointer(rebasing: tag[(c + 1)...])))
                        } else {
                            tags.append((tag, UnsafeRawBufferPointer(rebasing: tag[tag.count...])))
                        }
                        guard tags.count <= maxTags else { return 0 }
                    }
                    tagFrom = j + 1
                }
            case UInt8(ascii: "c"), UInt8(ascii: "T"), UInt8(ascii: "e"):
                continue  // container id, client timestamp, external data: not kept
            default:
                return 0
            }
        }
        // The values: one, or several separated by ':' (DogStatsD 1.1).
        var made = 0
        var valueFrom = colon + 1
        var pending: [Metric] = []
        for j in (colon + 1)...head.count where j == head.count || head[j] == UInt8(ascii: ":") {
            let text = UnsafeRawBufferPointer(rebasing: head[valueFrom..<j])
            valueFrom = j + 1
            guard !text.isEmpty else { return 0 }
            if kind == .set {
                pending.append(Metric(name: name, kind: kind, value: .nan, delta: false, member: text, sampleRate: rate, tags: tags))
            } else {
                guard let value = number(text) else { return 0 }
                let signed = text[0] == UInt8(ascii: "+") || text[0] == UInt8(ascii: "-")
                pending.append(Metric(name: name, kind: kind, value: value, delta: kind == .gauge && signed, member: text,
                                      sampleRate: rate, tags: tags))
            }
            made += 1
            if made > 64 { return 0 }
        }
        for m in pending { metric(m) }
        return made
    }

    static func kind(of text: UnsafeRawBufferPointer) -> Kind? {
        switch text.count {
        case 1:
            switch text[0] {
            case UInt8(ascii: "c"): return .counter
            case UInt8(ascii: "g"): return .gauge
            case UInt8(ascii: "h"): return .histogram
            case UInt8(ascii: "d"): return .distribution
            case UInt8(ascii: "s"): return .set
            default: return nil
            }
        case 2: return text[0] == UInt8(ascii: "m") && text[1] == UInt8(ascii: "s") ? .timer : nil
        default: return nil
        }
    }

    /// A finite decimal number: `[+-]digits[.digits][e[+-]digits]`.
    static func number(_ text: UnsafeRawBufferPointer) -> Double? {
        guard !text.isEmpty, text.count <= 64 else { return nil }
        var i = 0
        var negative = false
        if text[0] == UInt8(ascii: "+") || text[0] == UInt8(ascii: "-") {
            negative = text[0] == UInt8(ascii: "-")
            i = 1
        }
        var mantissa: UInt64 = 0
        var digits = 0, scale = 0
        var seenPoint = false
        var exact = true
        while i < text.count {
            let c = text[i]
            if c >= 0x30 && c <= 0x39 {
                if mantissa < 1_000_000_000_000_000_000 {
                    mantissa = mantissa * 10 + UInt64(c - 0x30)
                    if seenPoint { scale -= 1 }
                } else {
                    exact = false
                    if !seenPoint { scale += 1 }
                }
                digits += 1
            } else if c == UInt8(ascii: "."), !seenPoint {
                seenPoint = true
            } else {
                break
            }
            i += 1
        }
        guard digits > 0 else { return nil }
        if i < text.count {
            // An exponent, or anything else: the slow, exact way.
            guard text[i] == UInt8(ascii: "e") || text[i] == UInt8(ascii: "E") else { return nil }
            guard text.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "e")
                                    || $0 == UInt8(ascii: "E") || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") }),
                  let value = Double(String(decoding: text, as: UTF8.self)), value.isFinite else { return nil }
            return value
        }
        // Exact integers and powers of ten: one correctly rounded operation.
        guard exact, mantissa <= 1 << 53, abs(scale) <= 22 else {
            guard let value = Double(String(decoding: text, as: UTF8.self)), value.isFinite else { return nil }
            return value
        }
        var value = Double(mantissa)
        if scale < 0 {
            value /= pow10(-scale)
        } else if scale > 0 {
            value *= pow10(scale)
        }
        guard value.isFinite else { return nil }
        return negative ? -value : value
    }

    static func pow10(_ n: Int) -> Double {
        var result = 1.0
        var n = n
        while n > 0 { result *= 10; n -= 1 }
        return result
    }
}

/// Quantiles of a stream with a stated error: every quantile it answers is
/// within `relativeAccuracy` (by default 1 %) of the true value's magnitude
/// (DDSketch: logarithmic buckets of ratio γ = (1+α)/(1−α)). Bounded: at
/// most `maxBuckets` buckets per sign; past that the smallest are merged,
/// which loses accuracy only at the low end. Count, sum, min and max are exact.
public struct QuantileSketch: Sendable {
    public let relativeAccuracy: Double
    public let maxBuckets: Int
    private let logGamma: Double
    private let gamma: Double
    /// Index → count, for positive values and for the magnitudes of negative ones.
    private var positive: [Int32: UInt64] = [:]
    private var negative: [Int32: UInt64] = [:]
    private var zeros: UInt64 = 0
    public private(set) var count: UInt64 = 0
    public private(set) var sum = 0.0
    public private(set) var min = Double.infinity
    public private(set) var max = -Double.infinity

    /// Values smaller than this in magnitude are counted as zero.
    static let smallest = 1e-9

    public init(relativeAccuracy: Double = 0.01, maxBuckets: Int = 2048) {
        self.relativeAccuracy = relativeAccuracy
        self.maxBuckets = maxBuckets
        gamma = (1 + relativeAccuracy) / (1 - relativeAccuracy)
        logGamma = log(gamma)
    }

    public mutating func add(_ value: Double, weight: UInt64 = 1) {
        guard value.isFinite, weight > 0 else { return }
        count &+= weight
        sum = Statsd.saturating(sum + value * Double(weight))
        if value < min { min = value }
        if value > max { max = value }
        let magnitude = abs(value)
        if magnitude < Self.smallest {
            zeros &+= weight
            return
        }
        let index = Int32(clamping: Int((log(magnitude) / logGamma).rounded(.up)))
        if value > 0 {
            positive[index, default: 0] &+= weight
            if positive.count > maxBuckets { Self.collapse(&positive, to: collapsedBuckets) }
        } else {
            negative[index, default: 0] &+= weight
            if negative.count > maxBuckets { Self.collapse(&negative, to: collapsedBuckets) }
        }
    }

    /// What a collapse leaves: an eighth of the buckets fewer, so that values
    /// spread over more than `maxBuckets` buckets sort the keys once per
    /// `maxBuckets / 8` new buckets, not once per value.
    private var collapsedBuckets: Int { Swift.max(1, maxBuckets - Swift.max(1, maxBuckets / 8)) }

    /// Merges the smallest buckets into the smallest one kept, leaving `target`.
    private static func collapse(_ buckets: inout [Int32: UInt64], to target: Int) {
        let keys = buckets.keys.sorted()
        guard keys.count > target, target >= 1 else { return }
        let kept = keys.count - target
        var merged: UInt64 = 0
        for key in keys[..<kept] { merged &+= buckets.removeValue(forKey: key) ?? 0 }
        buckets[keys[kept], default: 0] &+= merged
    }

    /// The value at quantile `q` (0…1); nil when empty. q 0 and 1 are the
    /// exact min and max.
    public func quantile(_ q: Double) -> Double? {
        guard count > 0, q >= 0, q <= 1 else { return nil }
        if q == 0 { return min }
        if q == 1 { return max }
        let rank = UInt64((q * Double(count - 1)).rounded(.down))
        var seen: UInt64 = 0
        for index in negative.keys.sorted(by: >) {
            seen += negative[index] ?? 0
            if seen > rank { return Swift.max(min, -value(at: index)) }
        }
        seen += zeros
        if seen > rank { return 0 }
        for index in positive.keys.sorted() {
            seen += positive[index] ?? 0
            if seen > rank { return Swift.min(max, value(at: index)) }
        }
        return max
    }

    /// The value a bucket stands for: within α of every value in it.
    private func value(at index: Int32) -> Double {
        // Divided first: γ^i alone is finite up to the largest double, twice it not.
        pow(gamma, Double(index)) * (2 / (gamma + 1))
    }
}
