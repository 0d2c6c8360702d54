/// The contents of `/proc/loadavg`, e.g. `0.06 0.05 0.01 2/84 2845`.
public struct LoadAvg: Sendable, Equatable {
    /// Load average over 1 minute.
    public var load1: Double
    /// Load average over 5 minutes.
    public var load5: Double
    /// Load average over 15 minutes.
    public var load15: Double
    /// Currently runnable scheduling entities (the `2` in `2/84`).
    public var runnable: Int
    /// Existing scheduling entities, i.e. processes and threads (the `84` in `2/84`).
    public var entities: Int
    /// PID most recently assigned.
    public var lastPID: Int

    /// Creates a value.
    public init(load1: Double, load5: Double, load15: Double, runnable: Int, entities: Int, lastPID: Int) {
        self.load1 = load1
        self.load5 = load5
        self.load15 = load15
        self.runnable = runnable
        self.entities = entities
        self.lastPID = lastPID
    }

    /// Parses the text of `/proc/loadavg` (5 fields on the first line).
    /// - Parameter path: used in error messages only.
    public static func parse(_ text: String, path: String = "/proc/loadavg") throws(ProbeError) -> LoadAvg {
        try text.withUTF8Bytes { bytes in parse(bytes, path: path) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String) -> Result<LoadAvg, ProbeError> {
        var lines = LineIterator(bytes)
        let fieldsStart = lines.next()?.fields ?? FieldCursor(bytes, 0..<0)
        func fail(_ reason: String) -> Result<LoadAvg, ProbeError> {
            .failure(.malformed(path: path, line: 1, reason: reason))
        }
        let found = fieldsStart.remainingCount()
        var fields = fieldsStart
        guard found >= 5,
              let f1 = fields.next(), let f5 = fields.next(), let f15 = fields.next(),
              let tasks = fields.next(), let pid = fields.next()
        else { return fail("expected 5 fields, found \(found)") }

        guard let load1 = bytes.parseDecimal(f1),
              let load5 = bytes.parseDecimal(f5),
              let load15 = bytes.parseDecimal(f15)
        else { return fail("invalid load average in '\(bytes.excerpt(f1.lowerBound..<f15.upperBound))'") }

        var cursor = FieldCursor(bytes, tasks)
        guard let runRange = cursor.upTo(UInt8(ascii: "/")),
              let runnable = bytes.parseInt(runRange),
              let entities = bytes.parseInt(cursor.position..<tasks.upperBound)
        else { return fail("expected runnable/entities, found '\(bytes.excerpt(tasks))'") }

        guard let lastPID = bytes.parseInt(pid) else {
            return fail("invalid PID '\(bytes.excerpt(pid))'")
        }
        return .success(LoadAvg(
            load1: load1, load5: load5, load15: load15,
            runnable: runnable, entities: entities, lastPID: lastPID))
    }
}
