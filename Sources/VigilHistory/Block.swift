/// A value of a field in the history: integers (counters, integer
/// gauges, booleans as 0 and 1) kept as integers, the rest as doubles.
package enum HistoryValue: Sendable, Equatable {
    case int(Int64)
    case double(Double)
}

/// One stream's points over a span (a stream is one monitor's events of
/// one kind and identity): the times once, in milliseconds, and a
/// compressed column per field, so the fields of one event share their
/// time. A field an event lacks is marked absent, at no cost until the
/// first absence.
package struct HistoryBlock: Sendable {
    /// Each field's column type.
    /// `int`: a level (kept as differences); `counter`: a cumulative
    /// count (differences of differences); `double`: XOR'd.
    package enum Kind: Sendable, Equatable { case int, counter, double }

    package private(set) var times = IntColumn()
    package private(set) var columns: [FieldColumn]
    /// The first and last time (ms); 0 while empty.
    package private(set) var first: Int64 = 0
    package private(set) var last: Int64 = 0

    package init(kinds: [Kind]) {
        columns = kinds.map { FieldColumn(kind: $0) }
    }

    /// A sealed block read back from a file: nil unless every column has a
    /// value for each point its presence says it has.
    package init?(restoring times: IntColumn, columns: [FieldColumn], first: Int64, last: Int64) {
        guard times.count > 0, first <= last, columns.allSatisfy({ $0.fits(points: times.count) }) else { return nil }
        self.times = times
        self.columns = columns
        self.first = first
        self.last = last
    }

    package var count: Int { times.count }

    /// Adds a point at `time` (ms): a value for each field, in the
    /// block's order, nil where the event had none. A value of the other
    /// kind is converted (an int to a double; a double that is a whole
    /// number in range to an int, another one is absent).
    package mutating func append(time: Int64, _ values: [HistoryValue?]) {
        if times.count == 0 { first = time }
        last = time
        let point = times.count
        times.append(time)
        for index in columns.indices {
            columns[index].append(index < values.count ? values[index] : nil, at: point)
        }
    }

    /// A field that joins after the block's first point: absent before.
    package mutating func addColumn(_ kind: Kind) {
        columns.append(FieldColumn(kind: kind, absentBefore: count))
    }

    /// The values it holds, every column's (what "points" count in figures).
    package var values: Int { columns.reduce(0) { $0 + $1.valueCount } }

    /// The bytes the block holds in its columns.
    package var bytes: Int { times.bits.bytes + columns.reduce(0) { $0 + $1.bytes } }

    /// The block in storage of exactly its size: once it takes no more points.
    package func sealed() -> HistoryBlock {
        var copy = self
        copy.times = times.sealed()
        copy.columns = columns.map { $0.sealed() }
        return copy
    }

    /// The points of field `field`: (time ms, value), in time order, absent ones left out.
    package func points(field: Int) -> [(time: Int64, value: HistoryValue)] {
        guard columns.indices.contains(field) else { return [] }
        let column = columns[field]
        var out: [(time: Int64, value: HistoryValue)] = []
        out.reserveCapacity(count)
        var clock = IntColumn.Reader(times)
        switch column.values {
        case .int(let values):
            var reader = IntColumn.Reader(values)
            for point in 0..<count {
                guard let time = clock.next() else { break }
                if column.has(point), let value = reader.next() { out.append((time, .int(value))) }
            }
        case .double(let values):
            var reader = DoubleColumn.Reader(values)
            for point in 0..<count {
                guard let time = clock.next() else { break }
                if column.has(point), let value = reader.next() { out.append((time, .double(value))) }
            }
        }
        return out
    }
}

/// One field's values in a block, and which points have one.
package struct FieldColumn: Sendable {
    package let kind: HistoryBlock.Kind
    /// The column of its kind (the other stays empty, and holds nothing).
    private var ints = IntColumn()
    private var doubles = DoubleColumn()
    /// Bit i set: point i has a value. Nil while every point has one.
    private var presence: [UInt64]?

    /// A column read back from a file.
    package init(kind: HistoryBlock.Kind, ints: IntColumn, doubles: DoubleColumn, presence: [UInt64]?) {
        self.kind = kind
        self.ints = ints
        self.doubles = doubles
        self.presence = presence
    }

    var valueCount: Int { kind == .double ? doubles.count : ints.count }

    /// The raw parts, for `HistoryFile`.
    package var parts: (ints: IntColumn, doubles: DoubleColumn, presence: [UInt64]?) { (ints, doubles, presence) }

    /// Whether it holds a value for each of `points` points its presence names, and no more.
    func fits(points: Int) -> Bool {
        let present: Int
        if let presence {
            guard presence.count >= points / 64 + 1 else { return false }
            present = (0..<points).count { has($0) }
        } else {
            present = points
        }
        let held = kind == .double ? doubles.count : ints.count
        let other = kind == .double ? ints.count : doubles.count
        return held == present && other == 0 && (kind == .double || ints.secondOrder == (kind == .counter))
    }

    init(kind: HistoryBlock.Kind, absentBefore points: Int = 0) {
        self.kind = kind
        ints = IntColumn(secondOrder: kind == .counter)
        if points > 0 { presence = [UInt64](repeating: 0, count: points / 64 + 1) }
    }

    package enum Values: Sendable {
        case int(IntColumn)
        case double(DoubleColumn)
    }

    package var values: Values { kind == .double ? .double(doubles) : .int(ints) }

    /// Whether point `point` has a value.
    func has(_ point: Int) -> Bool {
        guard let presence else { return true }
        return presence[point >> 6] & (1 << UInt64(point & 63)) != 0
    }

    mutating func append(_ value: HistoryValue?, at point: Int) {
        var stored = true
        switch (kind, value) {
        case (.int, .int(let v)?), (.counter, .int(let v)?):
            ints.append(v)
        case (.int, .double(let v)?), (.counter, .double(let v)?):
            // A whole number within Int64's range is kept; another is absent.
            if let whole = Int64(exactly: v) { ints.append(whole) } else { stored = false }
        case (.double, .double(let v)?):
            doubles.append(v)
        case (.double, .int(let v)?):
            doubles.append(Double(v))
        case (_, nil):
            stored = false
        }
        mark(point, present: stored)
    }

    private mutating func mark(_ point: Int, present: Bool) {
        if presence == nil {
            guard !present else { return }
            // The first absence: every point before had a value.
            presence = [UInt64](repeating: ~0, count: point / 64 + 1)
        }
        while presence!.count <= point >> 6 { presence!.append(0) }
        if present {
            presence![point >> 6] |= 1 << UInt64(point & 63)
        } else {
            presence![point >> 6] &= ~(1 << UInt64(point & 63))
        }
    }

    var bytes: Int { ints.bits.bytes + doubles.bits.bytes + (presence?.count ?? 0) * 8 }

    func sealed() -> FieldColumn {
        var copy = self
        copy.ints = ints.sealed()
        copy.doubles = doubles.sealed()
        if let presence { copy.presence = Array(presence) }
        return copy
    }
}
