import VigilABI
import VigilCore
import VigilHistory

/// What one client of `GET /v1/stream` is sent (issue 31), as
/// Server-Sent Events: the events a history sink is given from now on
/// (`events=1`; `monitor`, `kind` globs and `severity` at that or worse;
/// `Last-Event-ID` or `since` resumes after a sequence number), and the new
/// points of up to `maxSeries` series (`series=ID,ID`; counters as rates,
/// as `/v1/query` gives them). The HTTP layer calls `next` at each tick and
/// writes what it gives; this type does no I/O.
///
///     id: 1234
///     event: event
///     data: {"time":…,"monitor":"cpu",…}
///
///     event: points
///     data: {"series":"3.1","counter":true,"points":[[1764470000000,1.5]]}
final class EventStream {
    /// The most series one stream follows.
    static let maxSeries = 64
    /// The most events sent at one tick; more wait for the next.
    static let maxEventsPerTick = 2000

    private let ring: EventRing<Event>?
    private let store: HistoryStore
    private let host: String
    private let sinkName: String
    private let events: Bool
    private var lastSeq: UInt64
    private let monitor: Glob?, kind: Glob?
    private let atLeast: UInt8
    private var series: [(id: String, key: SeriesKey, counter: Bool, last: Int64)]
    /// The store's newest time at the last look: nothing newer, no query.
    private var seen: Int64?
    /// A `since` past the newest event (a client resuming against a vigil
    /// that started again, its numbers from 1): said at the first tick,
    /// and the stream goes on from the newest event.
    private var ahead: (asked: UInt64, newest: UInt64)?

    /// A stream for `query` on one of `sinks`, or why not.
    init(query: [String: String], lastEventID: String?, sinks: HistoryAPI) throws(HistoryAPI.Refused) {
        let found = try sinks.store(query)
        sinkName = found.name
        store = found.store
        ring = found.events
        host = found.events?.host ?? ""
        events = query["events"].map { $0 != "0" && $0 != "false" } ?? (query["series"] == nil)
        if events && ring == nil { throw HistoryAPI.Refused(404, "history sink '\(found.name)' keeps no events (events: 0)") }
        let globs = try HistoryAPI.globs(query, "monitor", "kind")
        monitor = globs[0]
        kind = globs[1]
        var atLeast: UInt8 = 0
        if let text = query["severity"] {
            guard let severity = Severity(name: text) else {
                throw HistoryAPI.Refused(400, "severity is one of \(Severity.allCases.map(\.name).joined(separator: ", ")), not '\(text)'")
            }
            atLeast = severity.rawValue
        }
        self.atLeast = atLeast
        if let text = lastEventID ?? query["since"] {
            guard let n = UInt64(text) else { throw HistoryAPI.Refused(400, "since (or Last-Event-ID) is a sequence number, not '\(text)'") }
            let newest = found.events?.recent(limit: 1).last?.seq ?? 0
            if n > newest {
                ahead = (n, newest)
                lastSeq = newest
            } else {
                lastSeq = n
            }
        } else {
            lastSeq = found.events?.recent(limit: 1).last?.seq ?? 0
        }
        var series: [(id: String, key: SeriesKey, counter: Bool, last: Int64)] = []
        let ids = (query["series"] ?? "").split(separator: ",").map(String.init)
        guard ids.count <= Self.maxSeries else {
            throw HistoryAPI.Refused(400, "a stream follows at most \(Self.maxSeries) series, not \(ids.count)")
        }
        for id in ids {
            guard let key = found.store.series(id: id) else { throw HistoryAPI.Refused(404, "no series '\(id)' in history sink '\(found.name)'") }
            let counter = found.store.series(limit: 1) { $0 == key }.series.first?.counter ?? false
            series.append((id, key, counter, found.store.last(of: key) ?? .min))
        }
        self.series = series
        seen = found.store.newest
    }

    /// The SSE text of what is new since the last call (empty when nothing
    /// is), or nil when the history sink it reads is no longer the one in
    /// force (a reload replaced or removed it): the stream ends, and a
    /// client asks again (its series' ids are the old sink's).
    func next(current sinks: HistoryAPI) -> [UInt8]? {
        guard let now = sinks.sinks.first(where: { $0.name == sinkName }), now.store === store else { return nil }
        var out: [UInt8] = []
        if let ahead, events {
            out += Array("event: resume\ndata: {\"after\":\(ahead.asked),\"newest\":\(ahead.newest)}\n\n".utf8)
            self.ahead = nil
        }
        if events, let ring {
            let (monitor, kind, atLeast) = (monitor, kind, atLeast)
            let found = ring.after(lastSeq, limit: Self.maxEventsPerTick) { entry in
                entry.severity >= atLeast && (monitor?.matches(entry.monitor) ?? true) && (kind?.matches(entry.kind) ?? true)
            }
            // Fell behind the ring: what it let go is said, never silently skipped.
            if found.oldest > lastSeq &+ 1 && lastSeq > 0 {
                out += Array("event: gap\ndata: {\"after\":\(lastSeq),\"resumed_at\":\(found.oldest)}\n\n".utf8)
            }
            if !found.entries.isEmpty {
                var encoder = JSONLineEncoder(host: host)
                for entry in found.entries {
                    out += Array("id: \(entry.seq)\nevent: event\ndata: ".utf8)
                    encoder.encode(entry.payload, into: &out)  // ends in its newline
                    out.append(0x0A)
                }
            }
            // Events the filter passed over still move the stream on.
            lastSeq = max(lastSeq, found.scanned)
        }
        let newest = store.newest
        guard !series.isEmpty, newest != seen else { return out }
        seen = newest
        for i in series.indices {
            let s = series[i]
            // A counter's rate needs the point before: asked from the last one sent.
            let from = s.counter ? s.last : s.last.addingReportingOverflow(1).partialValue
            guard let answer = store.query(s.key, from: s.last == .min ? .min : from, to: .max, step: 0, rate: true) else { continue }
            let fresh = answer.buckets.filter { $0.time > s.last }
            guard let last = fresh.last?.time else { continue }
            series[i].last = last
            out += Array("event: points\ndata: {\"series\":".utf8)
            JSONLineEncoder.appendString(s.id, to: &out)
            out += Array(",\"counter\":\(s.counter),\"points\":[".utf8)
            HistoryAPI.appendPairs(fresh, to: &out)
            out += Array("]}\n\n".utf8)
        }
        return out
    }
}
