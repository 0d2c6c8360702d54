// vigil-history-bench: the history's figures for `scripts/bench --only
// history` (issue 31), on the store itself (a host would take an hour to
// make an hour of points): SERIES series (streams of ten fields, like a
// network interface's or a disk's) at 1 s for SECONDS with a few ms of
// jitter, of the kinds a host has (counters of bytes and packets, gauges
// with two decimals, levels that seldom change, states); then the bytes a
// point, the time an append takes, and queries of one series over the
// hour (every point) and over a day at one minute.
//
//     vigil-history-bench [SERIES] [SECONDS]     # 10000 3600; prints JSON
//     vigil-history-bench [SERIES] [SECONDS] --files DIR
//
// With --files the points end now rather than at a fixed date, and the two
// stores are written as history files (DIR/hour.vhst, DIR/day.vhst) that a
// history sink's `path:` reads at start: what `scripts/bench --only
// console` queries over HTTP.
import Dispatch
import Foundation
import VigilHistory

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let filesDirectory = CommandLine.arguments.firstIndex(of: "--files").flatMap {
    $0 + 1 < CommandLine.arguments.count ? CommandLine.arguments[$0 + 1] : nil
}
let seriesCount = arguments.first ?? 10_000
let seconds = arguments.dropFirst().first ?? 3600
let fieldsPerStream = 10
let streams = max(1, seriesCount / fieldsPerStream)
let names = (0..<fieldsPerStream).map { "f\($0)" }
/// A fixed day, or (for files a host reads) an hour before now, on a second.
let start: Int64 = filesDirectory == nil ? 1_764_460_800_000
    : (Int64(Date().timeIntervalSince1970) - Int64(seconds)) * 1000

/// One stream's state: what its next point says.
struct Source {
    var bytes: Int64 = 0, packets: Int64 = 0, errors: Int64 = 0, busy: Int64 = 0
    var percent = 40.0, temperature = 45.0
    var free: Int64 = 8 << 30
}

var rng = SplitMix(state: 42)
var sources = [Source](repeating: Source(), count: streams)
let keys = (0..<streams).map { StreamKey(monitor: "m\($0 % 20)", kind: "sample", identity: [.init("device", "d\($0)")]) }

func fields(_ s: inout Source, _ rng: inout SplitMix) -> [HistoryField] {
    s.bytes += Int64.random(in: 0...200_000, using: &rng)
    s.packets += Int64.random(in: 0...150, using: &rng)
    if Int.random(in: 0..<200, using: &rng) == 0 { s.errors += 1 }
    s.busy += Int64.random(in: 0...1000, using: &rng)
    if Int.random(in: 0..<3, using: &rng) == 0 { s.percent = min(100, max(0, s.percent + Double(Int.random(in: -100...100, using: &rng)) / 100)) }
    if Int.random(in: 0..<10, using: &rng) == 0 { s.temperature += Double(Int.random(in: -1...1, using: &rng)) }
    if Int.random(in: 0..<2, using: &rng) == 0 { s.free += Int64.random(in: -64...64, using: &rng) * 4096 }
    return [
        HistoryField(names[0], .int(s.bytes), counter: true), HistoryField(names[1], .int(s.packets), counter: true),
        HistoryField(names[2], .int(s.errors), counter: true), HistoryField(names[3], .int(s.busy), counter: true),
        HistoryField(names[4], .double((s.percent * 100).rounded() / 100)), HistoryField(names[5], .double(s.temperature)),
        HistoryField(names[6], .int(s.free)), HistoryField(names[7], .int(1500)),
        HistoryField(names[8], .int(1)), HistoryField(names[9], .double(10_000)),
    ]
}

var limits = HistoryLimits()
limits.retention = Int64(seconds) * 1000
limits.maxMemory = 1 << 40
limits.maxSeries = seriesCount + 10
let store = HistoryStore(limits: limits)
var appendNanoseconds: UInt64 = 0
for second in 0..<seconds {
    var batch: [(stream: StreamKey, time: Int64, fields: [HistoryField])] = []
    batch.reserveCapacity(streams)
    for s in 0..<streams {
        let time = (start + Int64(second) * 1000 + Int64.random(in: 0...5, using: &rng)) * 1_000_000
        batch.append((keys[s], time, fields(&sources[s], &rng)))
    }
    let began = now()
    store.append(batch)
    appendNanoseconds += now() - began
}
let points = streams * fieldsPerStream * seconds

/// Median of `runs` queries, in ms.
func median(_ runs: Int, _ body: (Int) -> Int) -> (ms: Double, points: Int) {
    var times: [Double] = []
    var count = 0
    for run in 0..<runs {
        let began = now()
        count = body(run)
        times.append(Double(now() - began) / 1e6)
    }
    return (times.sorted()[times.count / 2], count)
}

let series = store.series(limit: 1000) { $0.field == "f4" }.series
let hour = median(101) { run in
    store.query(series[run % series.count].key, from: start, to: start + Int64(seconds) * 1000)?.buckets.count ?? 0
}
let counterSeries = store.series(limit: 1000) { $0.field == "f0" }.series
let hourRate = median(101) { run in
    store.query(counterSeries[run % counterSeries.count].key, from: start, to: start + Int64(seconds) * 1000)?.buckets.count ?? 0
}

// A day at one minute: a store of 100 streams given 24 h at 10 s.
var dayLimits = HistoryLimits()
dayLimits.maxMemory = 1 << 40
let day = HistoryStore(limits: dayLimits)
var daySources = [Source](repeating: Source(), count: 100)
let dayStart = filesDirectory == nil ? start : start + Int64(seconds) * 1000 - 86_400_000
for step in 0..<(86_400 / 10) {
    day.append((0..<100).map { s in (keys[s], (dayStart + Int64(step) * 10_000) * 1_000_000, fields(&daySources[s], &rng)) })
}
let daySeries = day.series(limit: 100) { $0.field == "f4" }.series
let dayQuery = median(101) { run in
    day.query(daySeries[run % daySeries.count].key, from: dayStart, to: dayStart + 86_400_000, step: 60_000)?.buckets.count ?? 0
}

if let filesDirectory {
    for (name, kept) in [("hour.vhst", store), ("day.vhst", day)] {
        let path = filesDirectory + "/" + name
        guard FileManager.default.createFile(atPath: path, contents: Data(kept.fileBytes())) else {
            FileHandle.standardError.write(Data("vigil-history-bench: cannot write \(path)\n".utf8))
            exit(1)
        }
    }
}

let bytes = store.bytes
let result: [String: Any] = [
    "series": streams * fieldsPerStream, "seconds": seconds, "points": points, "bytes": bytes,
    "bytes_per_point": Double(bytes) / Double(points),
    "append_ns_per_point": Double(appendNanoseconds) / Double(points),
    "query_hour_ms": hour.ms, "query_hour_points": hour.points,
    "query_hour_rate_ms": hourRate.ms,
    "query_day_minutes_ms": dayQuery.ms, "query_day_points": dayQuery.points,
]
let json = try JSONSerialization.data(withJSONObject: result, options: [.sortedKeys])
print(String(decoding: json, as: UTF8.self))
