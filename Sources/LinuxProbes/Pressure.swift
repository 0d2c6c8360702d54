/// One line of a PSI (pressure stall information) file.
public struct PressureLine: Sendable, Equatable {
    /// Share of wall time stalled, in percent as written, averaged over 10 s.
    public var avg10: Double
    /// Same over 60 s.
    public var avg60: Double
    /// Same over 300 s.
    public var avg300: Double
    /// Cumulative stall time in microseconds.
    public var total: UInt64

    /// Creates a value.
    public init(avg10: Double, avg60: Double, avg300: Double, total: UInt64) {
        self.avg10 = avg10
        self.avg60 = avg60
        self.avg300 = avg300
        self.total = total
    }
}

/// The contents of `/proc/pressure/{cpu,memory,io}` (Linux 4.20+, `CONFIG_PSI`).
///
/// The directory is missing on kernels without PSI, and reading may fail with
/// `EOPNOTSUPP` when PSI is disabled at boot; see `ProbeError.isUnavailable`.
public struct Pressure: Sendable, Equatable {
    /// Time some tasks were stalled.
    public var some: PressureLine
    /// Time all non-idle tasks were stalled at once. Absent from
    /// `pressure/cpu` before Linux 5.13.
    public var full: PressureLine?

    /// Creates a value.
    public init(some: PressureLine, full: PressureLine? = nil) {
        self.some = some
        self.full = full
    }

    /// Parses a PSI file: `some avg10=… avg60=… avg300=… total=…` and an
    /// optional `full …` line. Unknown lines and unknown `key=value` fields
    /// are ignored; the four known fields are required.
    /// - Parameter path: used in error messages only.
    public static func parse(_ text: String, path: String = "/proc/pressure") throws(ProbeError) -> Pressure {
        try text.withUTF8Bytes { bytes in parse(bytes, path: path) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String) -> Result<Pressure, ProbeError> {
        var some: PressureLine?
        var full: PressureLine?
        var lines = LineIterator(bytes)
        while let (lineNumber, fieldsStart) = lines.next() {
            var fields = fieldsStart
            guard let kind = fields.next() else { continue }
            let isSome = bytes.matches(kind, "some")
            guard isSome || bytes.matches(kind, "full") else { continue }

            var avg10: Double?, avg60: Double?, avg300: Double?, total: UInt64?
            while let field = fields.next() {
                var cursor = FieldCursor(bytes, field)
                guard let key = cursor.upTo(UInt8(ascii: "=")) else {
                    return .failure(.malformed(
                        path: path, line: lineNumber,
                        reason: "expected key=value, found '\(bytes.excerpt(field))'"))
                }
                let value = cursor.position..<field.upperBound
                var ok = true
                if bytes.matches(key, "avg10") {
                    avg10 = bytes.parseDecimal(value); ok = avg10 != nil
                } else if bytes.matches(key, "avg60") {
                    avg60 = bytes.parseDecimal(value); ok = avg60 != nil
                } else if bytes.matches(key, "avg300") {
                    avg300 = bytes.parseDecimal(value); ok = avg300 != nil
                } else if bytes.matches(key, "total") {
                    total = bytes.parseUInt64(value); ok = total != nil
                }
                guard ok else {
                    return .failure(.malformed(
                        path: path, line: lineNumber,
                        reason: "invalid number in '\(bytes.excerpt(field))'"))
                }
            }
            guard let avg10, let avg60, let avg300, let total else {
                return .failure(.malformed(
                    path: path, line: lineNumber,
                    reason: "expected avg10=, avg60=, avg300= and total= fields"))
            }
            let line = PressureLine(avg10: avg10, avg60: avg60, avg300: avg300, total: total)
            if isSome { some = line } else { full = line }
        }
        guard let some else {
            return .failure(.malformed(path: path, line: 0, reason: "no 'some' line"))
        }
        return .success(Pressure(some: some, full: full))
    }
}
