import VigilABI
import VigilCore
import VigilForeign

/// How events become Prometheus series: names after `PrometheusNaming`
/// (or the families a `names:` file makes), labels `monitor`, `host` and
/// the fields the plugin marks as identities, counters as counters, every
/// other number a gauge, a boolean 0 or 1; strings that are no identity an
/// info gauge; events that name their own series (`prometheus_name`) as
/// they say. Taken out of the `prometheus` sink, which serves each series'
/// latest value, so that the `remote_write` sink, which pushes every sample,
/// names and labels alike by being the same code.
///
/// Used by one sink's thread: its plans (one per monitor and kind, made
/// once per monitor instance) are kept without a lock.
package final class PrometheusMapping: @unchecked Sendable {  // its plans are read and written by its sink's thread only
    package struct Settings: Sendable {
        /// `names:`: the families fields become instead of their native names.
        package var names: PrometheusNameMap?
        /// `unmapped: drop`: with `names:`, a field the file does not name is not made.
        package var dropUnmapped = false
        /// How long a series lives without an event (ns); nil: five of its monitor's intervals.
        package var expireAfter: Int64?
        /// The `host` label.
        package var host: String

        package init(names: PrometheusNameMap? = nil, dropUnmapped: Bool = false, expireAfter: Int64? = nil, host: String) {
            self.names = names
            self.dropUnmapped = dropUnmapped
            self.expireAfter = expireAfter
            self.host = host
        }
    }

    /// Where one field's value goes: a family, under the usual labels
    /// (`labels` nil) or the ones a `names:` entry lists. A class, so that a
    /// value's way out is one reference, and the `prometheus` sink keeps in
    /// it the family it found, for the next value.
    package final class Output: @unchecked Sendable {  // `family` is read and written only by its sink's thread
        let shape: PrometheusNaming.Shape
        let labels: [PrometheusNameMap.Label]?
        var family: PrometheusSeries.Family?

        init(shape: PrometheusNaming.Shape, labels: [PrometheusNameMap.Label]?) {
            self.shape = shape
            self.labels = labels
        }
    }

    package final class KindPlan {
        let instance: ObjectIdentifier?
        /// Per field: where its value goes (none: not served).
        var fields: [String: [Output]] = [:]
        /// The same for the undeclared fields an event names as counters.
        var counterFields: [String: [Output]] = [:]
        /// The fields of the kind's last event in their order, and where
        /// each goes: a monitor emits a kind's fields in the same order
        /// poll after poll, so a field is found by its place (and its name
        /// compared), not hashed into `fields`.
        var layout: [(name: String, outputs: [Output])] = []
        let identities: [(field: String, label: String)]
        /// The info gauges `names:` makes of the kind.
        let infos: [Output]
        /// The native info gauge of a kind with strings that are no
        /// identity (`vigil_system_device_info{kernel_release=…}`), and those strings.
        let nativeInfo: (shape: PrometheusNaming.Shape, fields: [(field: String, label: String)])?
        let onChange: Bool
        let ttl: Int64
        let specs: [String: FieldSpec]
        let mapped: [PrometheusNameMap.Entry]
        /// Of a kind with dynamic fields (VIGIL_EVENT_DYNAMIC_FIELDS).
        let dynamic: Bool
        /// Of a kind whose events name their own series (`prometheus_name`,
        /// `prometheus_labels`: textfile, scrape): served as they say.
        let passThrough: Bool
        /// Pass-through families by sample name, and the label texts found valid.
        var passThroughShapes: [String: PrometheusNaming.Shape] = [:]
        var validLabels: Set<String> = []

        init(instance: ObjectIdentifier?, identities: [(field: String, label: String)], infos: [Output],
             nativeInfo: (shape: PrometheusNaming.Shape, fields: [(field: String, label: String)])?, onChange: Bool,
             ttl: Int64, specs: [String: FieldSpec], mapped: [PrometheusNameMap.Entry], dynamic: Bool, passThrough: Bool = false) {
            self.instance = instance
            self.identities = identities
            self.infos = infos
            self.nativeInfo = nativeInfo
            self.onChange = onChange
            self.ttl = ttl
            self.specs = specs
            self.mapped = mapped
            self.dynamic = dynamic
            self.passThrough = passThrough
        }
    }

    /// The fields by which an event names its own series.
    static let passThroughName = "prometheus_name", passThroughLabels = "prometheus_labels"

    /// The string field in which an event of a dynamic kind names its counters.
    static let countersField = "counters"

    let settings: Settings

    /// A sample's value as its event gave it (strings make no sample).
    package enum Value {
        case int(Int64)
        case double(Double)
        case bool(Bool)
    }

    /// A running monitor's facts, asked once per batch for each monitor in it.
    private let facts: MonitorFactsLookup
    /// Per monitor and kind: the family of each field, for the instance it was made for.
    private var plans: [String: [String: KindPlan]] = [:]

    package init(settings: Settings, facts: @escaping MonitorFactsLookup) {
        self.settings = settings
        self.facts = facts
    }

    /// Every sample `batch` makes, in order, handed to `sink`: the output
    /// it goes by (its family; or the family a series' event names), its
    /// labels (escaped as the exposition writes them: `a="x",b="y"`), its
    /// value as the event gave it (to be scaled by the family's `scale`),
    /// and the plan of its kind (ttl, on change); and each entity's one
    /// info series. The host's own events (monitor `vigil`) make none: their
    /// figures are the control API's /metrics. Generic, so that each sink's
    /// calls are direct (specialized), as if written in its own loop.
    package func map<Sink: PrometheusSampleSink>(_ batch: [Event], into sink: inout Sink) {
        // Per monitor, the plugin asked for and its answer: a batch's
        // events of one monitor come from one plugin but across a reload.
        var known: [String: (plugin: String, facts: MonitorFacts?)] = [:]
        func facts(of event: Event) -> MonitorFacts? {
            if let asked = known[event.monitor], asked.plugin == event.plugin { return asked.facts }
            let asked = self.facts(event.monitor, event.plugin)
            known[event.monitor] = (event.plugin, asked)
            return asked
        }
        for (index, event) in batch.enumerated() where event.monitor != Manifest.hostMonitorName {
            sink.begin(index)
            let plan = self.plan(for: event, facts: facts(of: event))
            if plan.passThrough {
                guard let (shape, labels, number) = Self.passThrough(event, plan: plan) else { continue }
                sink.named(shape, labels, number, plan, event)
                continue
            }
            // Each label set made once per event: the usual labels, and
            // each set a names file lists (the many families of one
            // kind mostly list the same, `device` or `cpu` and `mode`).
            var usual: String?
            var made: [(listed: [PrometheusNameMap.Label], text: String)] = []
            func labels(_ listed: [PrometheusNameMap.Label]?) -> String {
                guard let listed else {
                    if let usual { return usual }
                    let text = self.usualLabels(event, plan)
                    usual = text
                    return text
                }
                if let known = made.first(where: { $0.listed == listed }) { return known.text }
                let text = Self.labels(listed, of: event)
                made.append((listed, text))
                return text
            }
            if let native = plan.nativeInfo {
                let entity = labels(nil)
                var all = entity
                for (field, label) in native.fields {
                    PrometheusSeries.appendLabel(label, Self.labelText(event[field: field]), to: &all)
                }
                sink.info(native.shape, entity: entity, labels: all, plan, event)
            }
            for output in plan.infos {
                sink.sample(output, labels(output.labels), .int(1), plan, event)
            }
            // A kind with dynamic fields names its undeclared counters
            // in `counters` (VIGIL_EVENT_DYNAMIC_FIELDS): such a field is
            // planned apart from a gauge of the same name.
            var counters: Substring?
            if plan.dynamic, case .string(let list)? = event[field: Self.countersField] { counters = list[...] }
            for (place, field) in event.fields.enumerated() {
                let counter = counters.map { list in
                    plan.specs[field.name] == nil && list.split(separator: ",").contains { $0 == field.name }
                } ?? false
                let outputs: [Output]
                if counters == nil, place < plan.layout.count, plan.layout[place].name == field.name {
                    outputs = plan.layout[place].outputs
                } else {
                    if let known = counter ? plan.counterFields[field.name] : plan.fields[field.name] {
                        outputs = known
                    } else {
                        outputs = self.outputs(event: event, field: field, plan: plan, counter: counter)
                        if counter { plan.counterFields[field.name] = outputs } else { plan.fields[field.name] = outputs }
                    }
                    if counters == nil {
                        if place < plan.layout.count { plan.layout[place] = (field.name, outputs) } else { plan.layout.append((field.name, outputs)) }
                    }
                }
                guard !outputs.isEmpty else { continue }
                let value: Value
                switch field.value {
                case .int(let i): value = .int(i)
                case .double(let d): value = .double(d)
                case .bool(let b): value = .bool(b)
                case .string: continue
                }
                for output in outputs {
                    sink.sample(output, labels(output.labels), value, plan, event)
                }
            }
        }
    }

    /// A series an event names itself: its family (by `prometheus_name`,
    /// with the `type` and `help` fields), its labels exactly as
    /// `prometheus_labels` gives them, and its value; nil when the name or
    /// the labels are not valid in the exposition (checked once each, with
    /// the one reader of the format) or there is no number.
    static func passThrough(_ event: Event, plan: KindPlan) -> (PrometheusNaming.Shape, String, Double)? {
        guard case .string(let name)? = event[field: passThroughName],
              case .string(let labels)? = event[field: passThroughLabels] else { return nil }
        let number: Double
        switch event[field: "value"] {
        case .double(let d)?: number = d
        case .int(let i)?: number = Double(i)
        default: return nil
        }
        var shape: PrometheusNaming.Shape
        if let known = plan.passThroughShapes[name] {
            shape = known
            // Help comes with a name's first sample of a poll: one seen
            // first without it (a sink added between polls) gets it later,
            // and a help the target changed replaces the one before.
            if case .string(let text)? = event[field: "help"], !text.isEmpty, text != known.help {
                shape.help = text
                plan.passThroughShapes[name] = shape
            }
        } else {
            guard PrometheusNaming.isValidMetricName(name) else { return nil }
            var kind = PrometheusNaming.MetricKind.untyped
            if case .string(let type)? = event[field: "type"] { kind = PrometheusNaming.MetricKind(rawValue: type) ?? .untyped }
            var help = ""
            if case .string(let text)? = event[field: "help"] { help = text }
            var family = name
            if kind == .counter, name.hasSuffix("_total") { family = String(name.dropLast(6)) }
            if kind.isWhole, let suffix = ["_bucket", "_sum", "_count", "_created"].first(where: { name.hasSuffix($0) }) {
                family = String(name.dropLast(suffix.count))
            }
            shape = PrometheusNaming.Shape(name: name, family: family, kind: kind, scale: 1, help: help)
            if plan.passThroughShapes.count < 100_000 { plan.passThroughShapes[name] = shape }
        }
        if !plan.validLabels.contains(labels) {
            // Read back and written again by the one writer of such label sets: the same text or refused.
            guard let read = try? PrometheusExposition.parse(Array("x{\(labels)} 0\n".utf8)).families.first?.samples.first,
                  PrometheusExposition.labelText(read.labels) == labels else { return nil }
            if plan.validLabels.count < 100_000 { plan.validLabels.insert(labels) }
        }
        return (shape, labels, number)
    }

    /// `monitor`, `host`, then the kind's identities.
    private func usualLabels(_ event: Event, _ plan: KindPlan) -> String {
        var labels = ""
        PrometheusSeries.appendLabel("monitor", event.monitor, to: &labels)
        PrometheusSeries.appendLabel("host", settings.host, to: &labels)
        for (field, label) in plan.identities {
            PrometheusSeries.appendLabel(label, Self.labelText(event[field: field]), to: &labels)
        }
        return labels
    }

    /// The labels a `names:` entry lists, from the event's fields and constants.
    static func labels(_ listed: [PrometheusNameMap.Label], of event: Event) -> String {
        var labels = ""
        for label in listed {
            switch label.source {
            case .constant(let text): PrometheusSeries.appendLabel(label.name, text, to: &labels)
            case .field(let name): PrometheusSeries.appendLabel(label.name, labelText(event[field: name]), to: &labels)
            }
        }
        return labels
    }

    /// A field's value as a label's: a string (cut at `maxLabelBytes`), a
    /// number as the exposition writes one, a bool as 0 or 1; empty when absent.
    static func labelText(_ value: FieldValue?) -> String {
        switch value {
        case .string(let s): return labelValue(s)
        case .int(let i): return String(i)
        case .double(let d):
            var bytes: [UInt8] = []
            appendNumber(d, to: &bytes)
            return String(decoding: bytes, as: UTF8.self)
        case .bool(let b): return b ? "1" : "0"
        case nil: return ""
        }
    }

    /// The longest label value kept, in bytes: with `max_series` it bounds
    /// the memory a plugin's identities can take (a longer one is cut on a
    /// character boundary and ends in `…`).
    static let maxLabelBytes = 256

    static func labelValue(_ s: String) -> String {
        guard s.utf8.count > maxLabelBytes else { return s }
        var out = ""
        for c in s.unicodeScalars {
            if out.utf8.count + c.utf8.count > maxLabelBytes - 3 { break }
            out.unicodeScalars.append(c)
        }
        return out + "…"
    }

    /// How the fields of an event of this monitor and kind are exposed.
    private func plan(for event: Event, facts: MonitorFacts?) -> KindPlan {
        if let plan = plans[event.monitor]?[event.kind], plan.instance == facts?.instance { return plan }
        let spec = facts?.description.events.first { $0.kind == event.kind }
            ?? PluginDescription.hostKinds.first { $0.kind == event.kind && facts != nil }
        var specs: [String: FieldSpec] = [:]
        for field in spec?.fields ?? [] { specs[field.name] = field }
        let identities = (spec?.fields ?? []).filter(\.identity).map { ($0.name, PrometheusNaming.labelName($0.name)) }
        let interval = facts?.interval ?? 0
        let ttl = settings.expireAfter ?? (interval > 0 ? interval.multipliedSaturating(by: 5) : 300_000_000_000)
        let mapped = settings.names?.entries(plugin: event.plugin, kind: event.kind) ?? []
        let infos = mapped.filter { $0.field == nil }.map { entry in
            Output(shape: PrometheusNaming.Shape(name: entry.name, family: entry.name, kind: .gauge, scale: 1,
                                                 help: entry.help ?? (spec.map { $0.doc.isEmpty ? "" : $0.doc + " " } ?? "") + "(\(entry.plugin) \(entry.kind))"),
                   labels: entry.labels)
        }
        // A kind's strings that are no identity: one info gauge, unless a
        // names file says what to make of the kind or serves only what it names.
        var nativeInfo: (shape: PrometheusNaming.Shape, fields: [(field: String, label: String)])?
        let strings = (spec?.fields ?? []).filter { $0.type == .string && !$0.identity }
        if !strings.isEmpty, mapped.isEmpty, !(settings.names != nil && settings.dropUnmapped),
           let shape = PrometheusNaming.infoShape(plugin: event.plugin, kind: event.kind, doc: spec?.doc ?? "") {
            let taken = Set(["monitor", "host"] + identities.map(\.1))
            nativeInfo = (shape, strings.map { ($0.name, PrometheusNaming.labelName($0.name)) }.filter { !taken.contains($0.1) })
        }
        let plan = KindPlan(instance: facts?.instance, identities: identities, infos: infos, nativeInfo: nativeInfo,
                            onChange: spec?.onChange == true, ttl: ttl, specs: specs, mapped: mapped,
                            dynamic: spec?.dynamicFields == true,
                            passThrough: specs[Self.passThroughName]?.type == .string && specs[Self.passThroughLabels]?.type == .string)
        plans[event.monitor, default: [:]][event.kind] = plan
        return plan
    }

    /// Where a field goes: the families `names:` makes of it, else its
    /// native family (unless `unmapped: drop`); strings go nowhere.
    private func outputs(event: Event, field: Field, plan: KindPlan, counter: Bool = false) -> [Output] {
        var isBool = false
        switch field.value {
        case .string: return []
        case .bool: isBool = true
        default: break
        }
        let spec = plan.specs[field.name] ?? (counter ? FieldSpec(name: field.name, type: .int, counter: true) : nil)
        let entries = plan.mapped.filter { $0.field == field.name }
        if !entries.isEmpty {
            return entries.map { Output(shape: PrometheusNaming.shape(mapped: $0, spec: spec, valueIsBool: isBool), labels: $0.labels) }
        }
        if settings.names != nil && settings.dropUnmapped { return [] }
        guard let shape = PrometheusNaming.shape(plugin: event.plugin, kind: event.kind, field: field.name, spec: spec, valueIsBool: isBool)
        else { return [] }
        return [Output(shape: shape, labels: nil)]
    }

    /// A float as both formats read it: `NaN`, `+Inf`, `-Inf`, else the
    /// shortest text that reads back as the same Double.
    static func appendNumber(_ d: Double, to out: inout [UInt8]) {
        if d.isNaN { out += "NaN".utf8; return }
        if d.isInfinite { out += (d > 0 ? "+Inf" : "-Inf").utf8; return }
        if d == d.rounded(.towardZero), abs(d) < 1e15 {
            appendInteger(Int64(d), to: &out)
        } else {
            out += d.description.utf8
        }
    }

    /// An integer's decimal digits, written without making a String.
    static func appendInteger(_ i: Int64, to out: inout [UInt8]) {
        if i < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = i.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 20 digits at most, kept in 24 bytes
        let count = withUnsafeMutableBytes(of: &digits) { buffer -> Int in
            var n = 0
            repeat {
                buffer[buffer.count - 1 - n] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                n += 1
            } while magnitude > 0
            return n
        }
        withUnsafeBytes(of: &digits) { out += $0[($0.count - count)...] }
    }
}

/// What takes the samples of `PrometheusMapping.map`: the `prometheus`
/// sink's series, and the `remote_write` sink's batches.
package protocol PrometheusSampleSink {
    /// A field's sample (or a `names:` info gauge's 1): where it goes, its labels, its value.
    mutating func sample(_ output: PrometheusMapping.Output, _ labels: String, _ value: PrometheusMapping.Value,
                         _ plan: PrometheusMapping.KindPlan, _ event: Event)
    /// A sample of a series its event names itself (`prometheus_name`).
    mutating func named(_ shape: PrometheusNaming.Shape, _ labels: String, _ value: Double, _ plan: PrometheusMapping.KindPlan,
                        _ event: Event)
    /// An entity's one info series.
    mutating func info(_ shape: PrometheusNaming.Shape, entity: String, labels: String, _ plan: PrometheusMapping.KindPlan,
                       _ event: Event)
    /// The samples that follow are the batch's event at `index` (a sink
    /// that answers for each event's samples: `remote_write`).
    mutating func begin(_ index: Int)
}

extension PrometheusSampleSink {
    @inline(__always)
    package mutating func begin(_ index: Int) {}
}
