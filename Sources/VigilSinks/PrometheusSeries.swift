import Synchronization
import VigilCore
import VigilForeign

/// The series a `prometheus` sink serves: one per numeric or boolean field
/// and identity, each kept as the exposition line a scrape sends. An event
/// rewrites the lines of the fields it carries; a scrape sends what is there
/// (the whole exposition is cached until an event or an expiry changes it),
/// so a scrape computes nothing an event did not change.
///
/// Written by the sink's thread, read by the HTTP server's: every access is
/// under one lock, taken once per batch by the writer.
package final class PrometheusSeries: Sendable {
    /// One family's series, in the order they appeared.
    package final class Family {
        private(set) var shape: PrometheusNaming.Shape
        private(set) var textHeader: [UInt8] = []
        private(set) var openMetricsHeader: [UInt8] = []
        var series: [String: Int] = [:]
        var lines: [Series] = []
        /// Of an info family: per entity (its identity labels), the labels
        /// of its one series, so that a changed string replaces it.
        var infoOf: [String: String] = [:]
        /// No longer served (its last series expired): a writer that kept
        /// it (`PrometheusSink.Output`) looks its family up again.
        var retired = false

        init(shape: PrometheusNaming.Shape) {
            self.shape = shape
            writeHeaders()
        }

        /// The help a later sample brings: events that name their own
        /// series carry their family's help on the first sample of each poll
        /// only (a sink added between polls may see another sample first),
        /// and a target may change it.
        func takeHelp(from other: PrometheusNaming.Shape) {
            guard !other.help.isEmpty, shape.help != other.help else { return }
            shape.help = other.help
            writeHeaders()
        }

        private func writeHeaders() {
            let help = PrometheusSeries.escapedHelp(shape.help, quote: false)
            // A histogram's or summary's samples are named apart from their family.
            let name = shape.kind.isWhole ? shape.family : shape.name
            textHeader = Array("# HELP \(name) \(help)\n# TYPE \(name) \(shape.kind.rawValue)\n".utf8)
            let omHelp = PrometheusSeries.escapedHelp(shape.help, quote: true)
            openMetricsHeader = Array("# TYPE \(shape.family) \(shape.kind.openMetricsName)\n# HELP \(shape.family) \(omHelp)\n".utf8)
        }
    }

    package struct Series {
        /// `name{labels} value\n`; the value starts at `prefix`.
        var line: [UInt8]
        var prefix: Int
        /// Monotonic time of the last event that carried it.
        var updated: Int64
        /// Nanoseconds without an event after which it goes.
        var ttl: Int64
        var monitor: String
        /// Its labels as in `line`, the key of `Family.series`.
        var key: String
        /// Of a kind emitted on change: kept while its monitor runs.
        var onChange: Bool
        var removed = false

        /// A new value (and time) in place, in one access to the family's array.
        @inline(__always)
        mutating func rewrite(_ value: ArraySlice<UInt8>, now: Int64, ttl: Int64) {
            line.removeSubrange(prefix...)
            line += value
            line.append(UInt8(ascii: "\n"))
            updated = now
            self.ttl = ttl
        }
    }

    fileprivate struct State {
        var families: [String: Family] = [:]
        var order: [Family] = []
        var count = 0
        var text: [UInt8]?
        var openMetrics: [UInt8]?
        /// Series refused because `maxSeries` were held.
        var refused: UInt64 = 0
    }

    private let state = Mutex(State())
    let maxSeries: Int

    init(maxSeries: Int) {
        self.maxSeries = maxSeries
    }

    var count: Int { state.withLock { $0.count } }
    var refused: UInt64 { state.withLock { $0.refused } }

    /// One batch of updates, under one lock.
    func update(_ body: (inout Updater) -> Void) {
        state.withLock { s in
            var updater = Updater(state: s)
            body(&updater)
            s = updater.state
        }
    }

    package struct Updater {
        fileprivate var state: State
        fileprivate var changed = false

        /// One of no series: what a writer holds while it is swapped out (see `PrometheusSink.write`).
        package static var empty: Updater { Updater(state: State()) }

        /// Sets the series `labels` (already escaped: `a="x",b="y"`) of the
        /// family `shape` names to `value`; returns false when the series is
        /// new and `limit` series are held (it is not made).
        mutating func set(_ shape: PrometheusNaming.Shape, labels: String, value: ArraySlice<UInt8>, now: Int64,
                          ttl: Int64, monitor: String, onChange: Bool, limit: Int) -> Bool {
            var known: Family?
            return set(shape, family: &known, labels: labels, value: value, now: now, ttl: ttl, monitor: monitor,
                       onChange: onChange, limit: limit)
        }

        /// `set`, with the family `shape` names as the caller kept it from
        /// an earlier call (nil, or retired: looked up, and kept for the next).
        mutating func set(_ shape: PrometheusNaming.Shape, family kept: inout Family?, labels: String, value: ArraySlice<UInt8>,
                          now: Int64, ttl: Int64, monitor: String, onChange: Bool, limit: Int) -> Bool {
            let family: Family
            // A histogram's or summary's samples share one family, each
            // series known by its sample's name and labels.
            let whole = shape.kind.isWhole
            let labels = whole ? shape.name + "{" + labels : labels
            if let kept, !kept.retired {
                family = kept
            } else if let known = state.families[whole ? shape.family : shape.name] {
                family = known
                kept = known
            } else {
                guard state.count < limit else {
                    refuse()
                    return false
                }
                family = Family(shape: shape)
                state.families[whole ? shape.family : shape.name] = family
                state.order.append(family)
                kept = family
            }
            // Mostly the same storage (a comparison of two words); a
            // histogram's names each hold a copy of their family's help
            // (one memcmp); a rewrite only when the help changed.
            if !shape.help.isEmpty && family.shape.help != shape.help {
                family.takeHelp(from: shape)
                state.text = nil
                state.openMetrics = nil
            }
            if let index = family.series[labels] {
                family.lines[index].rewrite(value, now: now, ttl: ttl)
            } else {
                guard state.count < limit else {
                    refuse()
                    return false
                }
                var line = Array(shape.name.utf8)
                let shown = whole ? labels.dropFirst(shape.name.utf8.count + 1) : labels[...]
                if !shown.isEmpty {
                    line.append(UInt8(ascii: "{"))
                    line += shown.utf8
                    line.append(UInt8(ascii: "}"))
                }
                line.append(UInt8(ascii: " "))
                let prefix = line.count
                line += value
                line.append(UInt8(ascii: "\n"))
                family.series[labels] = family.lines.count
                family.lines.append(Series(line: line, prefix: prefix, updated: now, ttl: ttl, monitor: monitor, key: labels,
                                          onChange: onChange))
                state.count += 1
            }
            changed = true
            state.text = nil
            state.openMetrics = nil
            return true
        }

        /// Sets the one info series of an entity (`entity`: its identity
        /// labels) to 1 under `labels`; a series it had under other labels
        /// (a string that changed) goes.
        mutating func setInfo(_ shape: PrometheusNaming.Shape, entity: String, labels: String, now: Int64, ttl: Int64,
                              monitor: String, onChange: Bool, limit: Int) {
            if let family = state.families[shape.name], let old = family.infoOf[entity], old != labels,
               let index = family.series[old] {
                family.lines.remove(at: index)
                family.series.removeAll(keepingCapacity: true)
                for (i, series) in family.lines.enumerated() { family.series[series.key] = i }
                state.count -= 1
            }
            if set(shape, labels: labels, value: [UInt8(ascii: "1")], now: now, ttl: ttl, monitor: monitor, onChange: onChange, limit: limit) {
                state.families[shape.name]?.infoOf[entity] = labels
            }
        }

        private mutating func refuse() {
            state.refused &+= 1
            state.text = nil
            state.openMetrics = nil
        }
    }

    /// Removes the series no event renewed within their ttl; a series of an
    /// on-change kind counts as renewed while `running(monitor)`. Returns
    /// how many went.
    @discardableResult
    func expire(now: Int64, running: (String) -> Bool) -> Int {
        state.withLock { s in
            guard s.count > 0 else { return 0 }
            var gone = 0
            var alive: [String: Bool] = [:]
            for family in s.order {
                var dropped = false
                for i in family.lines.indices {
                    if family.lines[i].onChange {
                        let monitor = family.lines[i].monitor
                        let up = alive[monitor] ?? { let r = running(monitor); alive[monitor] = r; return r }()
                        if up {
                            family.lines[i].updated = now
                            continue
                        }
                    }
                    if now.subtractingSaturating(family.lines[i].updated) > family.lines[i].ttl {
                        family.lines[i].removed = true
                        dropped = true
                    }
                }
                guard dropped else { continue }
                let before = family.lines.count
                family.lines.removeAll { $0.removed }
                gone += before - family.lines.count
                family.series.removeAll(keepingCapacity: true)
                for (i, series) in family.lines.enumerated() { family.series[series.key] = i }
                if !family.infoOf.isEmpty { family.infoOf = family.infoOf.filter { family.series[$0.value] != nil } }
            }
            if gone > 0 {
                s.count -= gone
                for family in s.order where family.lines.isEmpty {
                    s.families[family.shape.kind.isWhole ? family.shape.family : family.shape.name] = nil
                    family.retired = true
                }
                s.order.removeAll { $0.lines.isEmpty }
                s.text = nil
                s.openMetrics = nil
            }
            return gone
        }
    }

    /// The exposition: Prometheus' text format 0.0.4, or OpenMetrics 1.0
    /// (with `# EOF`). Built once per change, then handed out as is.
    func exposition(openMetrics: Bool) -> [UInt8] {
        state.withLock { s in
            if openMetrics, let cached = s.openMetrics { return cached }
            if !openMetrics, let cached = s.text { return cached }
            var size = openMetrics ? 6 : 0
            for family in s.order {
                size += openMetrics ? family.openMetricsHeader.count : family.textHeader.count
                family.lines.withUnsafeBufferPointer { lines in
                    for i in lines.indices { size += lines[i].line.count }
                }
            }
            var out: [UInt8] = []
            out.reserveCapacity(size)
            for family in s.order where !family.lines.isEmpty {
                out += openMetrics ? family.openMetricsHeader : family.textHeader
                // Each line by its place: a `Series` taken whole would be
                // copied (its strings retained and released) line by line.
                family.lines.withUnsafeBufferPointer { lines in
                    for i in lines.indices { out += lines[i].line }
                }
            }
            if s.refused > 0 {
                let name = "vigil_prometheus_series_refused"
                out += (openMetrics ? "# TYPE \(name) counter\n# HELP \(name) Series not made because max_series were held.\n\(name)_total \(s.refused)\n"
                    : "# HELP \(name)_total Series not made because max_series were held.\n# TYPE \(name)_total counter\n\(name)_total \(s.refused)\n").utf8
            }
            if openMetrics {
                out += "# EOF\n".utf8
                s.openMetrics = out
            } else {
                s.text = out
            }
            return out
        }
    }

    /// HELP text: backslash and newline escaped (and the double quote, for OpenMetrics).
    static func escapedHelp(_ text: String, quote: Bool) -> String {
        var out = ""
        for c in text.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\"" where quote: out += "\\\""
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    /// Appends `name="value"` (the value escaped as the formats say) to a label set.
    static func appendLabel(_ name: String, _ value: String, to labels: inout String) {
        PrometheusExposition.appendLabel(name, value, to: &labels)
    }
}
