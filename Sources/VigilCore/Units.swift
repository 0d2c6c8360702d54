/// Parsing and printing of the manifest's durations and sizes.
public enum Units {
    /// Nanoseconds per duration unit accepted in manifests.
    static let durationUnits: [(String, Double)] = [
        ("ns", 1), ("us", 1e3), ("µs", 1e3), ("ms", 1e6), ("s", 1e9), ("m", 60e9), ("h", 3600e9), ("d", 86400e9),
    ]

    /// Parses `250ms`, `5s`, `1.5m`, `1h30m`, `100us`, `0`. Returns nanoseconds,
    /// or nil with no unit (other than a bare `0`), an unknown unit or a negative value.
    public static func parseDuration(_ text: String) -> Int64? {
        let s = text.trimmingSpaces()
        if s == "0" { return 0 }
        var total = 0.0
        var rest = Substring(s)
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let numberEnd = rest.firstIndex(where: { !($0.isNumber || $0 == ".") }) ?? rest.endIndex
            guard numberEnd != rest.startIndex, let number = Double(rest[rest.startIndex..<numberEnd]) else { return nil }
            rest = rest[numberEnd...]
            let unitEnd = rest.firstIndex(where: { $0.isNumber || $0 == "." }) ?? rest.endIndex
            let unit = String(rest[rest.startIndex..<unitEnd])
            guard let scale = durationUnits.first(where: { $0.0 == unit })?.1 else { return nil }
            total += number * scale
            rest = rest[unitEnd...]
        }
        guard total.isFinite, total >= 0, total < 9.2e18 else { return nil }
        return Int64(total.rounded())
    }

    /// `250ms`, `5s`, `90s`, `2h`: the largest unit that spells the duration exactly.
    public static func formatDuration(_ ns: Int64) -> String {
        if ns == 0 { return "0s" }
        let units: [(String, Int64)] = [("h", 3_600_000_000_000), ("m", 60_000_000_000), ("s", 1_000_000_000),
                                        ("ms", 1_000_000), ("us", 1_000)]
        for (name, size) in units where ns % size == 0 { return "\(ns / size)\(name)" }
        return "\(ns)ns"
    }

    static let sizeUnits: [(String, Double)] = [
        ("", 1), ("b", 1), ("B", 1),
        ("k", 1e3), ("K", 1e3), ("kB", 1e3), ("KB", 1e3), ("M", 1e6), ("MB", 1e6), ("G", 1e9), ("GB", 1e9), ("T", 1e12), ("TB", 1e12),
        ("Ki", 1024), ("KiB", 1024), ("Mi", 1_048_576), ("MiB", 1_048_576),
        ("Gi", 1_073_741_824), ("GiB", 1_073_741_824), ("Ti", 1_099_511_627_776), ("TiB", 1_099_511_627_776),
    ]

    /// Parses `4096`, `64MiB`, `1.5GB`, `512 KiB`. Returns bytes.
    public static func parseSize(_ text: String) -> Int64? {
        let s = text.trimmingSpaces()
        let numberEnd = s.firstIndex(where: { !($0.isNumber || $0 == ".") }) ?? s.endIndex
        guard numberEnd != s.startIndex, let number = Double(s[s.startIndex..<numberEnd]) else { return nil }
        let unit = s[numberEnd...].trimmingSpaces()
        guard let scale = sizeUnits.first(where: { $0.0 == unit })?.1 else { return nil }
        let bytes = number * scale
        guard bytes.isFinite, bytes >= 0, bytes < 9.2e18 else { return nil }
        return Int64(bytes.rounded())
    }

    public static func formatSize(_ bytes: Int64) -> String {
        for (name, size) in [("TiB", Int64(1) << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        where bytes >= size && bytes % size == 0 {
            return "\(bytes / size)\(name)"
        }
        return "\(bytes)"
    }
}

extension StringProtocol {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return String(s)
    }
}
