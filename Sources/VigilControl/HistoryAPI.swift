import VigilABI
import VigilCore
import VigilHistory

/// The control API's reading of a `history` sink (issue 31):
///
/// - `GET /v1/series?monitor=&kind=&field=&limit=&sink=`: the series kept,
///   each with its `id`, monitor, kind, identity, field, whether it is a
///   counter, and its first and last time (ms since the epoch). `monitor`,
///   `kind` and `field` are globs (`cpu*`); `limit` is 1,000 unless given
///   (10,000 at most), and `more` says when more matched.
/// - `GET /v1/query?series=ID&from=&to=&step=&rate=&sink=`: one series'
///   points from `from` to `to` (ms since the epoch, or `-5m`, `-1h`:
///   before now; `to` defaults to now, `from` to an hour before it),
///   every point kept (`step` 0 or absent) or per `step` (`10s`, or ms)
///   as `[time, min, max, mean, last]`; a counter as its rate per second
///   unless `rate=false`. 11,000 points at most: a larger step is taken
///   and said (`step_ms`).
///
/// - `GET /v1/events?monitor=&kind=&severity=&since=&limit=&sink=`: the
///   last events the sink was given, whole, oldest first: those of
///   `monitor` and `kind` (globs), at `severity` or worse, after sequence
///   number `since`; 100 unless `limit` says (10,000 at most). `last_seq`
///   is the newest's, to ask from next time.
///
/// Without a history sink each answers 404 saying so; with several, `sink`
/// names one (the first by default).
struct HistoryAPI {
    let sinks: [(name: String, store: HistoryStore, events: EventRing<Event>?)]

    /// A request answered with an error.
    struct Refused: Error {
        let response: ControlResponse
        init(_ status: Int, _ message: String) { response = .error(status, message) }
    }

    func store(_ query: [String: String]) throws(Refused) -> (name: String, store: HistoryStore, events: EventRing<Event>?) {
        guard let first = sinks.first else {
            throw Refused(404, "no history sink: add one to the manifest (sinks: { history: { type: history } })")
        }
        guard let name = query["sink"] else { return first }
        guard let named = sinks.first(where: { $0.name == name }) else {
            throw Refused(404, "no history sink '\(name)'; history sinks: \(sinks.map(\.name).joined(separator: ", "))")
        }
        return named
    }

    func series(_ query: [String: String]) -> ControlResponse {
        do throws(Refused) { return try listSeries(query) } catch { return error.response }
    }

    func query(_ query: [String: String]) -> ControlResponse {
        do throws(Refused) { return try points(query) } catch { return error.response }
    }

    func events(_ query: [String: String]) -> ControlResponse {
        do throws(Refused) { return try recentEvents(query) } catch { return error.response }
    }

    private func recentEvents(_ query: [String: String]) throws(Refused) -> ControlResponse {
        let found = try store(query)
        guard let ring = found.events else {
            throw Refused(404, "history sink '\(found.name)' keeps no events (events: 0)")
        }
        var limit = 100
        if let text = query["limit"] {
            guard let n = Int(text), (1...10_000).contains(n) else {
                throw Refused(400, "limit must be a whole number from 1 to 10000, not '\(text)'")
            }
            limit = n
        }
        var since: UInt64 = 0
        if let text = query["since"] {
            guard let n = UInt64(text) else { throw Refused(400, "since is a sequence number (last_seq of an earlier answer), not '\(text)'") }
            since = n
        }
        var atLeast: UInt8 = 0
        if let text = query["severity"] {
            guard let severity = Severity(name: text) else {
                throw Refused(400, "severity is one of \(Severity.allCases.map(\.name).joined(separator: ", ")), not '\(text)'")
            }
            atLeast = severity.rawValue
        }
        let globs = try Self.globs(query, "monitor", "kind")
        let (monitor, kind) = (globs[0], globs[1])
        let entries = ring.recent(limit: limit, since: since) { entry in
            entry.severity >= atLeast && (monitor?.matches(entry.monitor) ?? true) && (kind?.matches(entry.kind) ?? true)
        }
        var out = Array("{\"sink\":".utf8)
        JSONLineEncoder.appendString(found.name, to: &out)
        out += Array(",\"last_seq\":\(entries.last?.seq ?? since),\"events\":[".utf8)
        var encoder = JSONLineEncoder(host: ring.host)
        for (i, entry) in entries.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            encoder.encode(entry.payload, into: &out)
            out.removeLast()  // its newline
        }
        out += Array("]}\n".utf8)
        return ControlResponse(status: 200, contentType: "application/json", body: out)
    }

    private func listSeries(_ query: [String: String]) throws(Refused) -> ControlResponse {
        let found = try store(query)
        var limit = 1000
        if let text = query["limit"] {
            guard let n = Int(text), (1...10_000).contains(n) else {
                throw Refused(400, "limit must be a whole number from 1 to 10000, not '\(text)'")
            }
            limit = n
        }
        let globs = try Self.globs(query, "monitor", "kind", "field")
        let (monitor, kind, field) = (globs[0], globs[1], globs[2])
        let (list, more) = found.store.series(limit: limit) { key in
            (monitor?.matches(key.stream.monitor) ?? true) && (kind?.matches(key.stream.kind) ?? true)
                && (field?.matches(key.field) ?? true)
        }
        var out = Array("{\"sink\":".utf8)
        JSONLineEncoder.appendString(found.name, to: &out)
        out += Array(",\"more\":\(more),\"series\":[".utf8)
        for (i, info) in list.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out += Array("{\"id\":".utf8)
            JSONLineEncoder.appendString(info.id, to: &out)
            out += Array(",\"monitor\":".utf8)
            JSONLineEncoder.appendString(info.key.stream.monitor, to: &out)
            out += Array(",\"kind\":".utf8)
            JSONLineEncoder.appendString(info.key.stream.kind, to: &out)
            out += Array(",\"identity\":{".utf8)
            for (j, identity) in info.key.stream.identity.enumerated() {
                if j > 0 { out.append(UInt8(ascii: ",")) }
                JSONLineEncoder.appendString(identity.name, to: &out)
                out.append(UInt8(ascii: ":"))
                JSONLineEncoder.appendString(identity.value, to: &out)
            }
            out += Array("},\"field\":".utf8)
            JSONLineEncoder.appendString(info.key.field, to: &out)
            out += Array(",\"counter\":\(info.counter),\"first\":\(info.first.map(String.init) ?? "null"),\"last\":\(info.last.map(String.init) ?? "null")}".utf8)
        }
        out += Array("]}\n".utf8)
        return ControlResponse(status: 200, contentType: "application/json", body: out)
    }

    private func points(_ query: [String: String]) throws(Refused) -> ControlResponse {
        let found = try store(query)
        guard let id = query["series"] else { throw Refused(400, "series is missing: an id from /v1/series") }
        guard let key = found.store.series(id: id) else { throw Refused(404, "no series '\(id)' in history sink '\(found.name)'") }
        let now = realtimeNanoseconds() / 1_000_000
        let to = try Self.time(query["to"], now: now, default: now)
        let from = try Self.time(query["from"], now: now, default: to.subtractingSaturating(3_600_000))
        let step = try Self.step(query["step"])
        guard from <= to else { throw Refused(400, "from (\(from)) is after to (\(to))") }
        let rate = query["rate"] != "false"
        guard let answer = found.store.query(key, from: from, to: to, step: step, rate: rate) else {
            throw Refused(404, "no series '\(id)' in history sink '\(found.name)'")
        }
        var out = Array("{\"series\":".utf8)
        JSONLineEncoder.appendString(id, to: &out)
        out += Array(",\"field\":".utf8)
        JSONLineEncoder.appendString(key.field, to: &out)
        out += Array(",\"counter\":\(answer.counter),\"rate\":\(answer.counter && rate),\"from\":\(from),\"to\":\(to),\"step_ms\":\(answer.step),\"tier\":\"\(answer.minutes ? "minutes" : "points")\",\"points\":[".utf8)
        out.reserveCapacity(out.count + answer.buckets.count * (answer.step == 0 ? 32 : 96))
        if answer.step == 0 {
            Self.appendPairs(answer.buckets, to: &out)
        } else {
            for (i, bucket) in answer.buckets.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "["))
                JSONLineEncoder.appendInteger(bucket.time, to: &out)
                for value in [bucket.min, bucket.max, bucket.mean, bucket.last] {
                    out.append(UInt8(ascii: ","))
                    JSONLineEncoder.appendDouble(value, to: &out)
                }
                out.append(UInt8(ascii: "]"))
            }
        }
        out += Array("]}\n".utf8)
        return ControlResponse(status: 200, contentType: "application/json", body: out)
    }

    /// The longest glob taken (`monitor`, `kind`, `field`): a glob's match
    /// costs its length times the name's.
    static let maxGlob = 256

    /// The globs of `names` in `query`, refused when one is longer than `maxGlob`.
    static func globs(_ query: [String: String], _ names: String...) throws(Refused) -> [Glob?] {
        var out: [Glob?] = []
        for name in names {
            guard let text = query[name] else {
                out.append(nil)
                continue
            }
            guard text.utf8.count <= maxGlob else { throw Refused(400, "\(name) is a glob of at most \(maxGlob) bytes, not \(text.utf8.count)") }
            out.append(Glob(text))
        }
        return out
    }

    /// `[time,value],…`: each bucket's time and last value, as every
    /// answer that gives points one by one writes them.
    static func appendPairs(_ buckets: some Sequence<HistoryStore.Bucket>, to out: inout [UInt8]) {
        for (i, bucket) in buckets.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "["))
            JSONLineEncoder.appendInteger(bucket.time, to: &out)
            out.append(UInt8(ascii: ","))
            JSONLineEncoder.appendDouble(bucket.last, to: &out)
            out.append(UInt8(ascii: "]"))
        }
    }

    /// ms since the epoch, or a duration before `now` (`-5m`).
    static func time(_ text: String?, now: Int64, default value: Int64) throws(Refused) -> Int64 {
        guard let text, !text.isEmpty else { return value }
        if let ms = Int64(text) { return ms }
        if text.hasPrefix("-"), let ns = Units.parseDuration(String(text.dropFirst())) {
            return now.subtractingSaturating(ns / 1_000_000)
        }
        throw Refused(400, "a time is milliseconds since the epoch or a duration before now (-5m, -1h), not '\(text)'")
    }

    /// A step in ms: a whole number of them, or a duration (`10s`).
    static func step(_ text: String?) throws(Refused) -> Int64 {
        guard let text, !text.isEmpty else { return 0 }
        if let ms = Int64(text), ms >= 0 { return ms }
        if let ns = Units.parseDuration(text) { return ns / 1_000_000 }
        throw Refused(400, "step is milliseconds or a duration (10s, 1m), not '\(text)'")
    }
}
