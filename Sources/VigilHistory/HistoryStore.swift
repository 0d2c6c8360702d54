import Synchronization

/// What the history keeps and for how long.
package struct HistoryLimits: Sendable, Equatable {
    /// How long every point is kept (ms).
    package var retention: Int64 = 3_600_000
    /// How long the per-minute min, max, mean and last are kept (ms).
    package var minuteRetention: Int64 = 86_400_000
    /// The bytes the history may hold: past them the oldest blocks go first.
    package var maxMemory = 64 << 20
    /// The series it may hold: a field that would be one more is not kept.
    package var maxSeries = 50_000
    /// Points in a block before it is sealed (and may be dropped as one).
    package var blockPoints = 120

    package init() {}
}

/// A stream: one monitor's events of one kind and identity.
package struct StreamKey: Hashable, Sendable, Comparable {
    package let monitor: String
    package let kind: String
    /// Identity fields, sorted by name.
    package let identity: [Identity]

    package struct Identity: Hashable, Sendable, Comparable {
        package let name: String
        package let value: String
        package init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
        package static func < (a: Identity, b: Identity) -> Bool { (a.name, a.value) < (b.name, b.value) }
    }

    package init(monitor: String, kind: String, identity: [Identity] = []) {
        self.monitor = monitor
        self.kind = kind
        self.identity = identity.sorted()
    }

    package static func < (a: StreamKey, b: StreamKey) -> Bool {
        if a.monitor != b.monitor { return a.monitor < b.monitor }
        if a.kind != b.kind { return a.kind < b.kind }
        return a.identity.lexicographicallyPrecedes(b.identity)
    }
}

/// One series: a field of a stream.
package struct SeriesKey: Hashable, Sendable {
    package let stream: StreamKey
    package let field: String
    package init(stream: StreamKey, field: String) {
        self.stream = stream
        self.field = field
    }
}

/// A field of an event, as the history takes it.
package struct HistoryField: Sendable {
    package let name: String
    package let value: HistoryValue
    /// A cumulative counter (shown as a rate).
    package let counter: Bool
    package init(_ name: String, _ value: HistoryValue, counter: Bool = false) {
        self.name = name
        self.value = value
        self.counter = counter
    }
}

/// What the history dropped or refused, by reason.
package struct HistoryLosses: Sendable, Equatable {
    /// Points in blocks dropped because `maxMemory` was reached.
    package var memoryPoints: UInt64 = 0
    /// Fields not kept because `maxSeries` was reached.
    package var seriesRefused: UInt64 = 0
    /// Points older than the stream's last (time went back): not kept.
    package var outOfOrder: UInt64 = 0
    package init() {}
}

/// Every point of every series the history sink is given, in compressed
/// blocks (`HistoryBlock`): every point for `retention`, per-minute min,
/// max, mean and last for `minuteRetention`, within `maxMemory` and
/// `maxSeries`. Time is the events' own (the newest seen is "now"), so it
/// is tested without a clock. Appends come from the sink's thread, queries
/// from the control API's: blocks are values, so a query copies what it
/// needs under the lock and decodes outside it.
public final class HistoryStore: Sendable {
    package let limits: HistoryLimits
    private let state: Mutex<State>

    /// What went wrong with the store's file (refused at start, not
    /// written at stop), for status; nil when nothing did.
    private let fileProblem = Mutex<String?>(nil)

    package init(limits: HistoryLimits = HistoryLimits()) {
        self.limits = limits
        state = Mutex(State(limits: limits))
    }

    package var problem: String? {
        get { fileProblem.withLock { $0 } }
        set { fileProblem.withLock { $0 = newValue } }
    }

    /// Adds an event's numeric fields at `time` (ns since the epoch).
    package func append(_ stream: StreamKey, time: Int64, fields: [HistoryField]) {
        state.withLock { $0.append(stream, time: floorDiv(time, 1_000_000), fields: fields) }
    }

    /// Adds many events' fields under one taking of the lock (a sink's batch).
    package func append(_ points: [(stream: StreamKey, time: Int64, fields: [HistoryField])]) {
        guard !points.isEmpty else { return }
        state.withLock { state in
            for point in points { state.append(point.stream, time: floorDiv(point.time, 1_000_000), fields: point.fields) }
        }
    }

    /// What the history holds and has dropped, for status and /metrics.
    package struct Figures: Sendable, Equatable {
        package var series = 0
        package var streams = 0
        /// Points held at every point's resolution, and minutes held (per series).
        package var points = 0
        package var minutes = 0
        package var bytes = 0
        package var losses = HistoryLosses()
    }

    package var figures: Figures {
        state.withLock { state in
            var figures = Figures(series: state.seriesCount, streams: state.streams.count, bytes: state.bytes, losses: state.losses)
            for stream in state.streams {
                figures.points += stream.sealed.reduce(stream.open?.values ?? 0) { $0 + $1.values }
                // Four columns a field in a minute block: min, max, mean, last.
                figures.minutes += stream.minuteSealed.reduce(stream.minuteOpen?.values ?? 0) { $0 + $1.values } / 4
            }
            return figures
        }
    }

    /// Points its sink passed over before giving them (one a millisecond a
    /// stream is kept): counted as those the store refuses.
    package func countOutOfOrder(_ fields: Int) {
        state.withLock { $0.losses.outOfOrder += UInt64(fields) }
    }

    /// The bytes held now (blocks and the bookkeeping of streams and series).
    package var bytes: Int { state.withLock { $0.bytes } }
    package var losses: HistoryLosses { state.withLock { $0.losses } }
    package var seriesCount: Int { state.withLock { $0.seriesCount } }

    /// A series as listed.
    package struct SeriesInfo: Sendable, Equatable {
        /// Its name in this store for as long as the store lives ("12.3":
        /// its stream's number and its field's): what the console asks by.
        package let id: String
        package let key: SeriesKey
        package let counter: Bool
        /// Its oldest and newest point kept (ms); nil when none is left.
        package let first: Int64?
        package let last: Int64?
    }

    /// The series whose stream and field `matches` says yes to, in order
    /// of stream then field, at most `limit` of them (and whether more matched).
    package func series(limit: Int = .max, matching matches: (SeriesKey) -> Bool = { _ in true })
        -> (series: [SeriesInfo], more: Bool) {
        state.withLock { state in
            var out: [SeriesInfo] = []
            for (number, stream) in state.streams.enumerated().sorted(by: { $0.element.key < $1.element.key }) {
                for (fieldNumber, field) in stream.fields.enumerated() {
                    let key = SeriesKey(stream: stream.key, field: field.name)
                    guard matches(key) else { continue }
                    guard out.count < limit else { return (out, true) }
                    let first = stream.sealed.first?.first ?? stream.open?.first
                    let last = stream.open.map(\.last) ?? stream.sealed.last?.last
                    out.append(SeriesInfo(id: "\(number).\(fieldNumber)", key: key, counter: field.counter, first: first, last: last))
                }
            }
            return (out, false)
        }
    }

    /// The series named `id` (as `series` lists it), if there is one.
    package func series(id: String) -> SeriesKey? {
        let parts = id.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let s = Int(parts[0]), let f = Int(parts[1]) else { return nil }
        return state.withLock { state in
            guard state.streams.indices.contains(s), state.streams[s].fields.indices.contains(f) else { return nil }
            return SeriesKey(stream: state.streams[s].key, field: state.streams[s].fields[f].name)
        }
    }

    /// The time of `series`' newest point kept (ms); nil when it has none
    /// or does not exist.
    package func last(of series: SeriesKey) -> Int64? {
        state.withLock { state in
            guard let index = state.index[series.stream], state.streams[index].fieldIndex[series.field] != nil else { return nil }
            let stream = state.streams[index]
            return stream.open.map(\.last) ?? stream.sealed.last?.last
        }
    }

    /// The newest time given (ms), nil before any.
    package var newest: Int64? { state.withLock { $0.newest == .min ? nil : $0.newest } }

    /// A point of a query: the value at `time`, or over the step that
    /// begins there (ms).
    package struct Bucket: Sendable, Equatable {
        package let time: Int64
        package let min: Double
        package let max: Double
        package let mean: Double
        package let last: Double
        package let count: Int
    }

    /// What a query gives back.
    package struct Answer: Sendable, Equatable {
        package let counter: Bool
        /// The step used (ms): the one asked for, or a larger one so that
        /// no more than `maxBuckets` come back; 0 for every point as kept.
        package let step: Int64
        /// Whether the minute tier answered (the span reached past `retention`, or the step is a minute or more).
        package let minutes: Bool
        package let buckets: [Bucket]
    }

    /// The most buckets a query gives back.
    package static let maxBuckets = 11_000

    /// `series` from `from` to `to` (ms, inclusive), every point (`step`
    /// 0) or aggregated per `step` ms; counters as their rate per second
    /// when `rate` (a fall is a reset: the new value is the increase).
    /// Nil when the series does not exist.
    package func query(_ series: SeriesKey, from: Int64, to: Int64, step: Int64 = 0, rate: Bool = true) -> Answer? {
        typealias Found = (field: Int, counter: Bool, blocks: [HistoryBlock], minutes: [HistoryBlock], oldest: Int64?)
        let found: Found? = state.withLock { state in
            guard let index = state.index[series.stream] else { return nil }
            let stream = state.streams[index]
            guard let field = stream.fieldIndex[series.field] else { return nil }
            let overlapping = { (block: HistoryBlock) in block.count > 0 && block.last >= from && block.first <= to }
            var blocks = stream.sealed.filter(overlapping)
            if let open = stream.open, overlapping(open) { blocks.append(open) }
            var minutes = stream.minuteSealed.filter(overlapping)
            if let open = stream.minuteOpen, overlapping(open) { minutes.append(open) }
            return (field, stream.fields[field].counter, blocks, minutes, stream.sealed.first?.first ?? stream.open?.first)
        }
        guard let found else { return nil }
        let asRate = found.counter && rate
        // Every point kept in the span, at the latest one (the minute tier
        // answers before them); the span cut to what the series holds.
        var points: [(time: Int64, value: Double)] = []
        for block in found.blocks {
            for point in block.points(field: found.field) where point.time >= from && point.time <= to {
                points.append((point.time, point.value.double))
            }
        }
        // The minute tier answers a step of a minute or more, and a span
        // that begins before the oldest point kept where it has whole
        // minutes before that point.
        let useMinutes = step >= 60_000
            || from < (found.oldest ?? .max) && (found.minutes.first.map { saturating($0.first, plus: 60_000) <= (found.oldest ?? .max) } ?? false)
        var minuteBuckets: [Bucket] = []
        if useMinutes {
            minuteBuckets = Self.minutes(found.minutes, field: found.field, from: from, to: to, rate: asRate)
            // The minutes not closed yet come from every point.
            if let lastMinute = minuteBuckets.last?.time { points.removeAll { $0.time < saturating(lastMinute, plus: 60_000) } }
        }
        if asRate { points = Self.rates(points) }
        let first = minuteBuckets.first?.time ?? points.first?.time ?? from
        let last = points.last?.time ?? minuteBuckets.last?.time ?? to
        let span = max(0, saturating(last, minus: first))
        var step = max(0, step, useMinutes ? 60_000 : 0)
        if step == 0 && points.count > Self.maxBuckets || step > 0 && span / step >= Int64(Self.maxBuckets) {
            step = span / Int64(Self.maxBuckets - 1) + 1
        }
        guard step > 0 else {
            return Answer(counter: found.counter, step: 0, minutes: false,
                          buckets: points.map { Bucket(time: $0.time, min: $0.value, max: $0.value, mean: $0.value, last: $0.value, count: 1) })
        }
        // Steps on multiples of the step since the epoch: every series' buckets line up.
        let grid = saturating(floorDiv(max(from, first), step), times: step)
        let merged = Self.merge(minuteBuckets, from: grid, step: step)
            + Self.merge(points.map { Bucket(time: $0.time, min: $0.value, max: $0.value, mean: $0.value, last: $0.value, count: 1) },
                         from: grid, step: step)
        return Answer(counter: found.counter, step: step, minutes: useMinutes, buckets: Self.merge(merged, from: grid, step: step))
    }

    /// Per-second rates between consecutive points of a counter, at the later one's time.
    static func rates(_ points: [(time: Int64, value: Double)]) -> [(time: Int64, value: Double)] {
        guard points.count > 1 else { return [] }
        var out: [(time: Int64, value: Double)] = []
        out.reserveCapacity(points.count - 1)
        for (a, b) in zip(points, points.dropFirst()) where b.time > a.time {
            let increase = b.value >= a.value ? b.value - a.value : b.value
            out.append((b.time, increase * 1000 / (Double(b.time) - Double(a.time))))
        }
        return out
    }

    /// Buckets gathered into steps of `step` ms from `from`: min of the
    /// mins, max of the maxes, the mean weighted by count, the last last.
    static func merge(_ buckets: [Bucket], from: Int64, step: Int64) -> [Bucket] {
        var out: [Bucket] = []
        for bucket in buckets {
            let start = saturating(from, plus: saturating(bucket.time, minus: from) / step * step)
            if let c = out.last, c.time == start {
                let count = c.count + bucket.count
                out[out.count - 1] = Bucket(time: start, min: Swift.min(c.min, bucket.min), max: Swift.max(c.max, bucket.max),
                                            // Weights, not sums: no overflow near the largest double.
                                            mean: c.mean * (Double(c.count) / Double(count)) + bucket.mean * (Double(bucket.count) / Double(count)),
                                            last: bucket.last, count: count)
            } else {
                out.append(Bucket(time: start, min: bucket.min, max: bucket.max, mean: bucket.mean, last: bucket.last, count: bucket.count))
            }
        }
        return out
    }

    /// The minute tier's minutes of `field` in the span; a counter's as the
    /// rate between their last values.
    static func minutes(_ blocks: [HistoryBlock], field: Int, from: Int64, to: Int64, rate: Bool) -> [Bucket] {
        var minutes: [Bucket] = []
        for block in blocks {
            let mins = block.points(field: field * 4), maxes = block.points(field: field * 4 + 1)
            let means = block.points(field: field * 4 + 2), lasts = block.points(field: field * 4 + 3)
            guard mins.count == lasts.count, maxes.count == lasts.count, means.count == lasts.count else { continue }
            for i in lasts.indices where lasts[i].time >= from && lasts[i].time <= to {
                minutes.append(Bucket(time: lasts[i].time, min: mins[i].value.double, max: maxes[i].value.double,
                                      mean: means[i].value.double, last: lasts[i].value.double, count: 60))
            }
        }
        guard rate else { return minutes }
        return Self.rates(minutes.map { ($0.time, $0.last) }).map {
            Bucket(time: $0.time, min: $0.value, max: $0.value, mean: $0.value, last: $0.value, count: 60)
        }
    }
}

// Times come from events and from files: arithmetic on them saturates.
func saturating(_ a: Int64, plus b: Int64) -> Int64 {
    let (r, o) = a.addingReportingOverflow(b)
    return o ? (b > 0 ? .max : .min) : r
}

func saturating(_ a: Int64, minus b: Int64) -> Int64 {
    let (r, o) = a.subtractingReportingOverflow(b)
    return o ? (b < 0 ? .max : .min) : r
}

func saturating(_ a: Int64, times b: Int64) -> Int64 {
    let (r, o) = a.multipliedReportingOverflow(by: b)
    return o ? ((a < 0) != (b < 0) ? .min : .max) : r
}

/// `a / b` rounded down (times before 1970 go to the earlier millisecond and minute).
func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return a % b < 0 ? q - 1 : q
}

extension HistoryValue {
    package var double: Double {
        switch self {
        case .int(let v): Double(v)
        case .double(let v): v
        }
    }
}

// MARK: - the state behind the lock

struct FieldInfo {
    let name: String
    let kind: HistoryBlock.Kind
    let counter: Bool
}

/// A minute's aggregate of one field.
struct MinuteAggregate {
    var min = Double.infinity
    var max = -Double.infinity
    var sum = 0.0
    var count = 0
    var last = 0.0
    /// Once the sum of finite values would overflow (values near the
    /// largest double), the mean is kept instead, each value weighted in.
    var runningMean: Double?

    mutating func add(_ value: Double) {
        min = Swift.min(min, value)
        max = Swift.max(max, value)
        count += 1
        last = value
        let next = sum + value
        if runningMean == nil && (next.isFinite || !value.isFinite || !sum.isFinite) {
            sum = next
        } else {
            let before = runningMean ?? sum / Double(count - 1)
            runningMean = before * (Double(count - 1) / Double(count)) + value / Double(count)
        }
    }

    var mean: Double { runningMean ?? sum / Double(count) }
}

struct Stream {
    let key: StreamKey
    var fields: [FieldInfo] = []
    var fieldIndex: [String: Int] = [:]
    var open: HistoryBlock?
    var sealed: [HistoryBlock] = []
    /// The minute being gathered (its start, ms) and each field's aggregate.
    var minute: Int64 = .min
    var aggregates: [MinuteAggregate] = []
    var minuteOpen: HistoryBlock?
    var minuteSealed: [HistoryBlock] = []
    var lastTime: Int64 = .min

    init(key: StreamKey) { self.key = key }
}

/// Blocks in the order they were sealed: the oldest go first.
struct SealOrder {
    private var entries: [(stream: Int, end: Int64)] = []
    private var head = 0

    var isEmpty: Bool { head == entries.count }
    var front: (stream: Int, end: Int64)? { isEmpty ? nil : entries[head] }

    mutating func push(stream: Int, end: Int64) { entries.append((stream, end)) }

    mutating func pop() {
        head += 1
        if head > 1024 && head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
    }
}

struct State {
    let limits: HistoryLimits
    var streams: [Stream] = []
    var index: [StreamKey: Int] = [:]
    var blockBytes = 0
    var seriesCount = 0
    var newest: Int64 = .min
    var losses = HistoryLosses()
    var order = SealOrder()
    var minuteOrder = SealOrder()

    init(limits: HistoryLimits) { self.limits = limits }

    /// An estimate of what each stream and series costs beside its blocks
    /// (keys, dictionaries, aggregates), so that `maxMemory` bounds the whole.
    static let streamOverhead = 512
    static let seriesOverhead = 160

    var bytes: Int { blockBytes + streams.count * Self.streamOverhead + seriesCount * Self.seriesOverhead }

    mutating func append(_ key: StreamKey, time: Int64, fields: [HistoryField]) {
        let s: Int
        if let known = index[key] {
            s = known
        } else {
            // A stream is made only for a series it can hold: a flood of
            // new identities past `maxSeries` makes nothing.
            guard seriesCount < limits.maxSeries else {
                losses.seriesRefused += UInt64(fields.count)
                return
            }
            s = streams.count
            streams.append(Stream(key: key))
            index[key] = s
        }
        guard time > streams[s].lastTime else {
            losses.outOfOrder += UInt64(fields.count)
            return
        }
        streams[s].lastTime = time
        newest = max(newest, time)

        // The point's values in the stream's field order; new fields join.
        var values = [HistoryValue?](repeating: nil, count: streams[s].fields.count)
        for field in fields {
            if let f = streams[s].fieldIndex[field.name] {
                values[f] = field.value
                continue
            }
            guard seriesCount < limits.maxSeries else {
                losses.seriesRefused += 1
                continue
            }
            let kind: HistoryBlock.Kind = if case .int = field.value { field.counter ? .counter : .int } else { .double }
            streams[s].fieldIndex[field.name] = streams[s].fields.count
            streams[s].fields.append(FieldInfo(name: field.name, kind: kind, counter: field.counter))
            streams[s].aggregates.append(MinuteAggregate())
            seriesCount += 1
            values.append(field.value)
            addColumn(kind, stream: s)
        }

        minuteTier(stream: s, time: time, values: values)

        let before = streams[s].open?.bytes ?? 0
        if streams[s].open == nil { streams[s].open = HistoryBlock(kinds: streams[s].fields.map(\.kind)) }
        streams[s].open!.append(time: time, values)
        blockBytes += streams[s].open!.bytes - before
        if streams[s].open!.count >= limits.blockPoints { seal(stream: s) }
        expire()
    }

    /// A field that joins mid-block gets a column in the open blocks, absent before.
    private mutating func addColumn(_ kind: HistoryBlock.Kind, stream s: Int) {
        if streams[s].open != nil { streams[s].open!.addColumn(kind) }
        if streams[s].minuteOpen != nil { for _ in 0..<4 { streams[s].minuteOpen!.addColumn(.double) } }
    }

    private mutating func seal(stream s: Int) {
        guard let open = streams[s].open else { return }
        let sealed = open.sealed()
        blockBytes += sealed.bytes - open.bytes
        streams[s].open = nil
        streams[s].sealed.append(sealed)
        order.push(stream: s, end: sealed.last)
    }

    /// At a new minute, the one before goes into the minute tier as its
    /// fields' min, max, mean and last.
    private mutating func minuteTier(stream s: Int, time: Int64, values: [HistoryValue?]) {
        let minute = saturating(floorDiv(time, 60_000), times: 60_000)
        if minute != streams[s].minute {
            if streams[s].minute != .min { closeMinute(stream: s) }
            streams[s].minute = minute
        }
        for (i, value) in values.enumerated() {
            if let value { streams[s].aggregates[i].add(value.double) }
        }
    }

    private mutating func closeMinute(stream s: Int) {
        var row: [HistoryValue?] = []
        row.reserveCapacity(streams[s].aggregates.count * 4)
        for aggregate in streams[s].aggregates {
            if aggregate.count == 0 {
                row.append(contentsOf: [nil, nil, nil, nil])
            } else {
                row.append(contentsOf: [.double(aggregate.min), .double(aggregate.max),
                                        .double(aggregate.mean), .double(aggregate.last)])
            }
        }
        for i in streams[s].aggregates.indices { streams[s].aggregates[i] = MinuteAggregate() }
        let before = streams[s].minuteOpen?.bytes ?? 0
        if streams[s].minuteOpen == nil {
            streams[s].minuteOpen = HistoryBlock(kinds: [HistoryBlock.Kind](repeating: .double, count: streams[s].fields.count * 4))
        }
        streams[s].minuteOpen!.append(time: streams[s].minute, row)
        blockBytes += streams[s].minuteOpen!.bytes - before
        if streams[s].minuteOpen!.count >= limits.blockPoints {
            let open = streams[s].minuteOpen!
            let sealed = open.sealed()
            blockBytes += sealed.bytes - open.bytes
            streams[s].minuteOpen = nil
            streams[s].minuteSealed.append(sealed)
            minuteOrder.push(stream: s, end: sealed.last)
        }
    }

    /// What `expire` does after a restore: blocks past their retention go
    /// (each stream's oldest first, as the seal order has them).
    mutating func expireRestored() { expire() }

    /// Blocks past their retention go, then the oldest while over `maxMemory`
    /// (every point first, then minutes); the latter are counted as lost.
    private mutating func expire() {
        while let front = order.front, front.end < saturating(newest, minus: limits.retention) { dropOldest(tier: 0, counted: false) }
        while let front = minuteOrder.front, front.end < saturating(newest, minus: limits.minuteRetention) { dropOldest(tier: 1, counted: false) }
        while bytes > limits.maxMemory {
            if !order.isEmpty {
                dropOldest(tier: 0, counted: true)
            } else if !minuteOrder.isEmpty {
                dropOldest(tier: 1, counted: true)
            } else {
                break  // only open blocks: sealed as they fill, dropped then
            }
        }
    }

    private mutating func dropOldest(tier: Int, counted: Bool) {
        let front = tier == 0 ? order.front! : minuteOrder.front!
        if tier == 0 { order.pop() } else { minuteOrder.pop() }
        let s = front.stream
        let block = tier == 0 ? streams[s].sealed.removeFirst() : streams[s].minuteSealed.removeFirst()
        blockBytes -= block.bytes
        if counted { losses.memoryPoints += UInt64(tier == 0 ? block.values : block.values / 4) }
    }
}

// MARK: - to and from a file

extension HistoryStore {
    /// Everything held, as `HistoryFile` bytes (the blocks being filled
    /// are written as sealed; a minute still being gathered is not).
    package func fileBytes() -> [UInt8] {
        var payload = ByteWriter()
        state.withLock { state in
            payload.u32(UInt32(state.streams.count))
            for stream in state.streams {
                payload.string(stream.key.monitor)
                payload.string(stream.key.kind)
                payload.u32(UInt32(stream.key.identity.count))
                for identity in stream.key.identity {
                    payload.string(identity.name)
                    payload.string(identity.value)
                }
                payload.u32(UInt32(stream.fields.count))
                for field in stream.fields {
                    payload.string(field.name)
                    payload.u8(field.kind == .int ? 0 : field.kind == .counter ? 1 : 2)
                    payload.u8(field.counter ? 1 : 0)
                }
                payload.i64(stream.lastTime)
                let blocks = stream.sealed + (stream.open.map { [$0.sealed()] } ?? [])
                payload.u32(UInt32(blocks.count))
                for block in blocks { payload.block(block) }
                let minutes = stream.minuteSealed + (stream.minuteOpen.map { [$0.sealed()] } ?? [])
                payload.u32(UInt32(minutes.count))
                for block in minutes { payload.block(block) }
            }
        }
        var file = ByteWriter()
        file.bytes = HistoryFile.magic
        file.u32(HistoryFile.version)
        file.u64(UInt64(payload.bytes.count))
        file.u64(HistoryFile.checksum(payload.bytes[...]))
        file.bytes += payload.bytes
        return file.bytes
    }

    /// A store holding what `bytes` (a `HistoryFile`) held, within `limits`
    /// (what is past the retention or the memory goes as it would have).
    /// Throws, with the reason, for anything that is not such a file whole.
    package static func load(_ bytes: [UInt8], limits: HistoryLimits) throws(HistoryFileError) -> HistoryStore {
        guard bytes.count >= HistoryFile.headerSize, Array(bytes.prefix(8)) == HistoryFile.magic else {
            throw HistoryFileError("not a history file (no VIGILHST header)")
        }
        var header = ByteReader(bytes, at: 8)
        let version = try header.u32("the version")
        guard version == HistoryFile.version else {
            throw HistoryFileError("a history file of version \(version); this vigil reads version \(HistoryFile.version)")
        }
        let length = try header.u64("the length"), sum = try header.u64("the checksum")
        guard length == UInt64(header.left) else {
            throw HistoryFileError("its payload is \(header.left) bytes where its header says \(length): cut short or grown")
        }
        guard HistoryFile.checksum(bytes[header.at...]) == sum else {
            throw HistoryFileError("its checksum does not match: the file was altered or damaged")
        }
        var r = ByteReader(bytes, at: header.at)
        var streams: [Stream] = []
        let streamCount = try r.count("the streams", itemSize: 24)
        for n in 0..<streamCount {
            let what = "stream \(n)"
            let monitor = try r.string(what), kind = try r.string(what)
            var identity: [StreamKey.Identity] = []
            for _ in 0..<(try r.count(what, itemSize: 8)) { identity.append(.init(try r.string(what), try r.string(what))) }
            var stream = Stream(key: StreamKey(monitor: monitor, kind: kind, identity: identity))
            for _ in 0..<(try r.count(what, itemSize: 6)) {
                let name = try r.string(what)
                let tag = try r.u8(what)
                guard tag <= 2, stream.fieldIndex[name] == nil else { throw HistoryFileError("\(what): field '\(name)' twice or of kind \(tag)") }
                let counter = try r.u8(what) == 1
                stream.fieldIndex[name] = stream.fields.count
                stream.fields.append(FieldInfo(name: name, kind: tag == 0 ? .int : tag == 1 ? .counter : .double, counter: counter))
                stream.aggregates.append(MinuteAggregate())
            }
            stream.lastTime = try r.i64(what)
            for _ in 0..<(try r.count(what, itemSize: 32)) {
                let block = try r.block(what)
                guard block.columns.count <= stream.fields.count else { throw HistoryFileError("\(what): a block of more columns than fields") }
                stream.sealed.append(block)
            }
            for _ in 0..<(try r.count(what, itemSize: 32)) {
                let block = try r.block(what)
                guard block.columns.count <= stream.fields.count * 4 else { throw HistoryFileError("\(what): a minute block of more columns than fields") }
                stream.minuteSealed.append(block)
            }
            guard !streams.contains(where: { $0.key == stream.key }) else { throw HistoryFileError("\(what): a stream twice") }
            streams.append(stream)
        }
        guard r.left == 0 else { throw HistoryFileError("\(r.left) bytes after the last stream") }
        let store = HistoryStore(limits: limits)
        store.state.withLock { $0.restore(streams) }
        return store
    }
}

extension State {
    /// Takes restored streams into an empty store, within the limits.
    mutating func restore(_ restored: [Stream]) {
        var ends: [(stream: Int, end: Int64)] = [], minuteEnds: [(stream: Int, end: Int64)] = []
        for var stream in restored {
            guard seriesCount + stream.fields.count <= limits.maxSeries else {
                losses.seriesRefused += UInt64(stream.fields.count)
                continue
            }
            let s = streams.count
            seriesCount += stream.fields.count
            newest = max(newest, stream.lastTime)
            // New points start a block of their own, with every field's column.
            stream.open = nil
            stream.minuteOpen = nil
            for block in stream.sealed {
                blockBytes += block.bytes
                ends.append((s, block.last))
            }
            for block in stream.minuteSealed {
                blockBytes += block.bytes
                minuteEnds.append((s, block.last))
            }
            index[stream.key] = s
            streams.append(stream)
        }
        // The oldest first, as they would have been sealed.
        for entry in ends.sorted(by: { $0.end < $1.end }) { order.push(stream: entry.stream, end: entry.end) }
        for entry in minuteEnds.sorted(by: { $0.end < $1.end }) { minuteOrder.push(stream: entry.stream, end: entry.end) }
        expireRestored()
    }
}
