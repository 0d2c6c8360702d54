import Foundation
import VigilABI
import VigilCore
import VigilHistory
import VigilRuntime

/// What the console reads beyond status and the history (issue 31), each
/// also plain JSON for anyone's scripts:
///
/// - `GET /v1/conditions`: every threshold (per entity it has seen) and
///   rule, with its state, value and when it last changed or fired.
/// - `GET /v1/manifest`: the manifest in force, file by file as read when
///   it was loaded, each monitor's section of it, and the last reload tried.
/// - `GET /v1/sparklines?from=-5m&step=10s`: each monitor's main series
///   (`mainRank`), over `from`, per `step` (the last value of each), for
///   the overview.
extension ControlAPI {
    struct Limit: Encodable {
        var direction: String
        var value: Double
        var clear: Double
    }

    struct ThresholdState: Encodable {
        var monitor: String
        var kind: String
        var field: String
        var per: [String: String]
        var state: String
        var value: Double?
        var since: String?
        var warning: Limit?
        var critical: Limit?
        var forS: Double?
        var staleAfterS: Double?
    }

    struct RuleState: Encodable {
        var name: String
        var condition: String
        var severity: String
        var active: Bool
        var pending: Bool
        var lastFired: String?
        var lastChange: String?
        var forS: Double?
    }

    struct Conditions: Encodable {
        var thresholds: [ThresholdState]
        var rules: [RuleState]
    }

    func conditions() -> ControlResponse {
        let snapshot = runtime.conditionStates
        let limit = { (l: ThresholdLimit?) in l.map { Limit(direction: $0.direction.rawValue, value: $0.value, clear: $0.clear) } }
        let seconds = { (ns: Int64?) -> Double? in ns.flatMap { $0 > 0 ? Double($0) / 1e9 : nil } }
        let thresholds = snapshot.thresholds.map { t in
            ThresholdState(monitor: t.spec.ref.monitor, kind: t.spec.ref.kind, field: t.spec.ref.field,
                           per: Dictionary(t.per.map { ($0.name, Self.text($0.value)) }, uniquingKeysWith: { a, _ in a }),
                           state: t.state.rawValue, value: t.value.flatMap { $0.isFinite ? $0 : nil }, since: t.since.map(timestamp),
                           warning: limit(t.spec.warning), critical: limit(t.spec.critical),
                           forS: seconds(t.spec.holdFor), staleAfterS: seconds(t.spec.staleAfter))
        }
        let rules = snapshot.rules.map { r in
            RuleState(name: r.spec.name, condition: Self.text(r.spec.condition), severity: r.spec.severity.name,
                      active: r.active, pending: r.pending, lastFired: r.lastFired.map(timestamp),
                      lastChange: r.lastChange.map(timestamp), forS: seconds(r.spec.holdFor))
        }
        return .json(200, Conditions(thresholds: thresholds, rules: rules))
    }

    static func text(_ value: FieldValue) -> String {
        switch value {
        case .double(let d): "\(d)"
        case .int(let i): "\(i)"
        case .bool(let b): "\(b)"
        case .string(let s): s
        }
    }

    /// A rule's condition as one line (`a.b > 1 and (c.d == true or …)`).
    static func text(_ tree: ConditionTree<RuleComparison>) -> String {
        func render(_ tree: ConditionTree<RuleComparison>, nested: Bool) -> String {
            switch tree {
            case .leaf(let c): return "\(c.name) \(c.op.rawValue) \(c.literal)"
            case .all(let parts), .any(let parts):
                let joiner: String
                if case .all = tree { joiner = " and " } else { joiner = " or " }
                let inner = parts.map { render($0, nested: true) }.joined(separator: joiner)
                return nested && parts.count > 1 ? "(\(inner))" : inner
            case .none(let parts):
                return "not (" + parts.map { render($0, nested: false) }.joined(separator: " or ") + ")"
            }
        }
        return render(tree, nested: false)
    }

    struct ManifestFile: Encodable {
        var path: String
        var text: String
    }

    struct MonitorSection: Encodable {
        var file: String
        var line: Int
        var text: String
    }

    struct LastReload: Encodable {
        var at: String
        var reason: String
        var result: ReloadResult
    }

    struct ManifestAnswer: Encodable {
        var file: String
        var files: [ManifestFile]
        var monitors: [String: MonitorSection]
        var lastReload: LastReload?
    }

    func manifestAnswer() -> ControlResponse {
        let manifest = runtime.manifest
        let texts = runtime.manifestTexts
        var lines: [String: [Substring]] = [:]
        for file in texts { lines[file.path] = file.text.split(separator: "\n", omittingEmptySubsequences: false) }
        var monitors: [String: MonitorSection] = [:]
        for monitor in manifest.monitors {
            guard let fileLines = lines[monitor.location.file] else { continue }
            monitors[monitor.name] = MonitorSection(file: monitor.location.file, line: monitor.location.line,
                                                    text: Self.section(fileLines, at: monitor.location.line))
        }
        let last = runtime.lastReload.map { LastReload(at: timestamp($0.at), reason: $0.reason, result: $0.result) }
        return .json(200, ManifestAnswer(file: manifest.file, files: texts.map { ManifestFile(path: $0.path, text: $0.text) },
                                         monitors: monitors, lastReload: last))
    }

    /// The lines of a YAML key's block: its line (1-based) and those after
    /// it indented deeper (blank lines and comments inside it too).
    static func section(_ lines: [Substring], at line: Int) -> String {
        guard line >= 1, line <= lines.count else { return "" }
        let indent = { (l: Substring) in l.prefix { $0 == " " }.count }
        let start = line - 1
        let base = indent(lines[start])
        var end = start + 1
        var lastContent = start
        while end < lines.count {
            let l = lines[end]
            let blank = l.allSatisfy { $0 == " " || $0 == "\t" || $0 == "\r" }
            if !blank {
                guard indent(l) > base else { break }
                lastContent = end
            }
            end += 1
        }
        return lines[start...lastContent].joined(separator: "\n") + "\n"
    }

    /// Fields that say most about a monitor at a glance, best first.
    static let mainFields = ["usage", "used_ratio", "utilization", "load1", "value", "rate", "latency", "duration", "used"]

    /// How good a monitor's main series `info` would be (lower is better):
    /// a series without identity fields before one with them; among them,
    /// the fields of `mainFields` in its order, then any but a total,
    /// then a total (which rarely moves).
    static func mainRank(_ info: HistoryStore.SeriesInfo) -> Int {
        let field = info.key.field
        let byName = mainFields.firstIndex(of: field)
            ?? (field == "total" || field.hasSuffix("_total") && !info.counter ? mainFields.count + 1 : mainFields.count)
        return (info.key.stream.identity.isEmpty ? 0 : 100) + byName
    }

    func sparklines(_ query: [String: String]) -> ControlResponse {
        let api = historyAPI
        let found: (name: String, store: HistoryStore, events: EventRing<Event>?)
        let from, step: Int64
        do throws(HistoryAPI.Refused) {
            found = try api.store(query)
            let now = realtimeNanoseconds() / 1_000_000
            from = try HistoryAPI.time(query["from"] ?? "-5m", now: now, default: now - 300_000)
            step = max(1000, try HistoryAPI.step(query["step"] ?? "10s"))
        } catch {
            return error.response
        }
        var main: [String: HistoryStore.SeriesInfo] = [:]
        for info in found.store.series().series where !info.key.stream.monitor.isEmpty {
            let monitor = info.key.stream.monitor
            if let kept = main[monitor], Self.mainRank(kept) <= Self.mainRank(info) { continue }
            main[monitor] = info
        }
        var out = Array("{\"sink\":".utf8)
        JSONLineEncoder.appendString(found.name, to: &out)
        out += Array(",\"from\":\(from),\"step_ms\":\(step),\"monitors\":{".utf8)
        for (i, (monitor, info)) in main.sorted(by: { $0.key < $1.key }).enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            JSONLineEncoder.appendString(monitor, to: &out)
            out += Array(":{\"series\":".utf8)
            JSONLineEncoder.appendString(info.id, to: &out)
            out += Array(",\"field\":".utf8)
            JSONLineEncoder.appendString(info.key.field, to: &out)
            out += Array(",\"counter\":\(info.counter),\"points\":[".utf8)
            HistoryAPI.appendPairs(found.store.query(info.key, from: from, to: .max, step: step, rate: true)?.buckets ?? [], to: &out)
            out += Array("]}".utf8)
        }
        out += Array("}}\n".utf8)
        return ControlResponse(status: 200, contentType: "application/json", body: out)
    }
}
