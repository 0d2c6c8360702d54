/// One line of `/proc/diskstats` (Documentation/admin-guide/iostats.rst):
///
///     254       0 vda 1323220 56189 37535850 1711144 1138155 551154 83834592 433404 0 165464 2202482 658585 3 66419360 47611 232685 10321
///
/// major, minor, device name, then the statistics: 11 before Linux 4.18, 15
/// from 4.18 (discards), 17 from 5.5 (flushes). A newer kernel's extra
/// columns are kept in `stats` as they are.
///
/// The values are the kernel's raw figures. Some are 32-bit on older kernels
/// (the times in milliseconds were `unsigned int` until 5.x): they wrap at
/// 2^32, and a reader sees the wrap as a counter reset.
public struct DiskStatsLine: Sendable, Equatable {
    public var major: UInt32
    public var minor: UInt32
    /// The kernel's name of the device (`sda`, `nvme0n1p2`, `dm-0`).
    public var name: String
    /// Every statistic after the name, in file order (at least 11).
    public var stats: [UInt64]

    public init(major: UInt32, minor: UInt32, name: String, stats: [UInt64]) {
        self.major = major
        self.minor = minor
        self.name = name
        self.stats = stats
    }

    /// The statistic in column `index` after the name (0-based), or nil when
    /// this kernel does not write it.
    public subscript(_ column: Column) -> UInt64? {
        column.rawValue < stats.count ? stats[column.rawValue] : nil
    }

    /// The columns after the name, as iostats.rst numbers them (field 1 is 0 here).
    public enum Column: Int, Sendable, CaseIterable {
        case readsCompleted = 0, readsMerged, sectorsRead, readTime
        case writesCompleted, writesMerged, sectorsWritten, writeTime
        case inProgress, ioTime, weightedIOTime
        /// Linux 4.18+.
        case discardsCompleted, discardsMerged, sectorsDiscarded, discardTime
        /// Linux 5.5+.
        case flushesCompleted, flushTime
    }

    /// The statistics a line must have: those of kernels before 4.18.
    public static let minimumStats = 11
}

/// The contents of `/proc/diskstats`.
public struct DiskStats: Sendable, Equatable {
    /// The devices, in file order.
    public var lines: [DiskStatsLine]
    /// The 1-based numbers of lines that did not parse (skipped): too few
    /// columns (such as 2.6 kernels' 4-figure partition lines), a field that
    /// is not a number, a number beyond 2^64.
    public var malformed: [Int]

    public init(lines: [DiskStatsLine], malformed: [Int] = []) {
        self.lines = lines
        self.malformed = malformed
    }

    /// Parses the text of `/proc/diskstats`. A garbled line is skipped and
    /// listed in `malformed`; the file as a whole never fails to parse.
    public static func parse(_ text: String) -> DiskStats {
        var copy = text
        return copy.withUTF8 { parse($0) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> DiskStats {
        var result = DiskStats(lines: [])
        var lines = LineIterator(bytes)
        while let (number, fieldsStart) = lines.next() {
            var fields = fieldsStart
            if fields.isAtEnd { continue }
            guard let majorRange = fields.next(), let minorRange = fields.next(), let nameRange = fields.next(),
                  let major = bytes.parseUInt64(majorRange).flatMap(UInt32.init(exactly:)),
                  let minor = bytes.parseUInt64(minorRange).flatMap(UInt32.init(exactly:)) else {
                result.malformed.append(number)
                continue
            }
            var stats: [UInt64] = []
            stats.reserveCapacity(20)
            var ok = true
            while let field = fields.next() {
                guard let value = bytes.parseUInt64(field) else { ok = false; break }
                stats.append(value)
            }
            guard ok, stats.count >= DiskStatsLine.minimumStats else {
                result.malformed.append(number)
                continue
            }
            result.lines.append(DiskStatsLine(major: major, minor: minor, name: bytes.string(nameRange), stats: stats))
        }
        return result
    }
}
