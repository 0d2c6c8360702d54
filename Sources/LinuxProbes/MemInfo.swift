/// The contents of `/proc/meminfo`.
public struct MemInfo: Sendable, Equatable {
    /// Every entry by its key (e.g. `"MemTotal"`, `"Active(anon)"`).
    /// Values with a `kB` unit (which means KiB) are converted to bytes;
    /// values without a unit (e.g. `HugePages_Total`) are plain counts.
    public var entries: [String: UInt64]
    /// Every line in file order, with whether its value was in kB
    /// (`entries` keeps the last of a key given twice; `lines` keeps both).
    public var lines: [Line]

    /// One `Key: value [kB]` line.
    public struct Line: Sendable, Equatable {
        /// The key as the kernel writes it (`Active(anon)`).
        public var key: String
        /// The value: bytes when `inKiB`, else the plain number.
        public var value: UInt64
        /// Whether the line had the `kB` unit (the value was converted to bytes).
        public var inKiB: Bool

        public init(key: String, value: UInt64, inKiB: Bool) {
            self.key = key
            self.value = value
            self.inKiB = inKiB
        }
    }

    /// Creates a value; `lines` defaults to none.
    public init(entries: [String: UInt64], lines: [Line] = []) {
        self.entries = entries
        self.lines = lines
    }

    /// The entry `key` (bytes or count, see `entries`).
    public subscript(key: String) -> UInt64? { entries[key] }

    /// `MemTotal`, in bytes.
    public var total: UInt64? { entries["MemTotal"] }
    /// `MemFree`, in bytes.
    public var free: UInt64? { entries["MemFree"] }
    /// `Buffers`, in bytes.
    public var buffers: UInt64? { entries["Buffers"] }
    /// `Cached`, in bytes.
    public var cached: UInt64? { entries["Cached"] }
    /// `SwapTotal`, in bytes.
    public var swapTotal: UInt64? { entries["SwapTotal"] }
    /// `SwapFree`, in bytes.
    public var swapFree: UInt64? { entries["SwapFree"] }

    /// Memory available for new work without swapping, in bytes: `MemAvailable`,
    /// or on kernels before 3.14 the estimate `MemFree + Buffers + Cached`.
    public var available: UInt64? {
        if let value = entries["MemAvailable"] { return value }
        guard let free else { return nil }
        return free &+ (buffers ?? 0) &+ (cached ?? 0)
    }

    /// True when `available` is the pre-3.14 estimate rather than `MemAvailable`.
    public var availableIsEstimated: Bool { entries["MemAvailable"] == nil }

    /// `(total - available) / total` in `0...1`; nil without `MemTotal` or when it is 0.
    public var usedRatio: Double? {
        guard let total, total > 0, let available else { return nil }
        return Double(total - min(available, total)) / Double(total)
    }

    /// `(swapTotal - swapFree) / swapTotal` in `0...1`; nil when there is no swap.
    public var swapUsedRatio: Double? {
        guard let swapTotal, swapTotal > 0, let swapFree else { return nil }
        return Double(swapTotal - min(swapFree, swapTotal)) / Double(swapTotal)
    }

    /// Parses the text of `/proc/meminfo` (`Key:   value [kB]` lines).
    /// - Parameter path: used in error messages only.
    /// - Throws: `ProbeError.malformed` with the line number of the first bad line.
    public static func parse(_ text: String, path: String = "/proc/meminfo") throws(ProbeError) -> MemInfo {
        try text.withUTF8Bytes { bytes in parse(bytes, path: path) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String) -> Result<MemInfo, ProbeError> {
        var entries: [String: UInt64] = [:]
        entries.reserveCapacity(64)
        var parsed: [Line] = []
        parsed.reserveCapacity(64)
        var lines = LineIterator(bytes)
        while let (lineNumber, fieldsStart) = lines.next() {
            var fields = fieldsStart
            if fields.isAtEnd { continue }
            func fail(_ reason: String) -> Result<MemInfo, ProbeError> {
                .failure(.malformed(path: path, line: lineNumber, reason: reason))
            }
            guard var key = fields.upTo(UInt8(ascii: ":")) else {
                return fail("expected 'Key: value [kB]'")
            }
            while key.lowerBound < key.upperBound, bytes[key.lowerBound].isFieldSeparator {
                key = (key.lowerBound + 1)..<key.upperBound
            }
            guard !key.isEmpty, !bytes[key.upperBound - 1].isFieldSeparator else {
                return fail("expected 'Key: value [kB]'")
            }
            guard let valueRange = fields.next() else {
                return fail("missing value for '\(bytes.excerpt(key))'")
            }
            guard var value = bytes.parseUInt64(valueRange) else {
                return fail("invalid number '\(bytes.excerpt(valueRange))' for '\(bytes.excerpt(key))'")
            }
            var inKiB = false
            if let unit = fields.next() {
                inKiB = true
                guard bytes.matches(unit, "kB") else {
                    return fail("unknown unit '\(bytes.excerpt(unit))' for '\(bytes.excerpt(key))'")
                }
                let (scaled, overflow) = value.multipliedReportingOverflow(by: 1024)
                guard !overflow else {
                    return fail("value of '\(bytes.excerpt(key))' overflows")
                }
                value = scaled
                guard fields.isAtEnd else {
                    return fail("unexpected text after the unit of '\(bytes.excerpt(key))'")
                }
            }
            let name = bytes.string(key)
            entries[name] = value
            parsed.append(Line(key: name, value: value, inKiB: inKiB))
        }
        return .success(MemInfo(entries: entries, lines: parsed))
    }
}
