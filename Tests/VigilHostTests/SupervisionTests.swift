import Foundation
@preconcurrency import CVigilPlugin
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

@Suite struct SupervisionTests {
    func budget(_ restart: RestartPolicy = .onFailure, min: Int64 = 1_000_000_000, max: Int64 = 8_000_000_000,
                restarts: Int = 5, window: Int64 = 600_000_000_000) -> RestartBudget {
        var config = SupervisionConfig()
        config.restart = restart
        config.backoffMin = min
        config.backoffMax = max
        config.maxRestarts = restarts
        config.restartWindow = window
        return RestartBudget(config: config)
    }

    @Test func backoffDoublesFromMinToMaxThenQuarantines() {
        var b = budget()
        let s: Int64 = 1_000_000_000
        var delays: [RestartBudget.Decision] = []
        for i in 0..<6 { delays.append(b.decide(now: Int64(i) * s, jitter: 0)) }
        #expect(delays == [.restart(after: 1 * s), .restart(after: 2 * s), .restart(after: 4 * s),
                           .restart(after: 8 * s), .restart(after: 8 * s), .quarantine])
    }

    @Test func anOutputAlwaysRestartsDoublingInARowAndStartsOverAfterASuccess() {
        var config = SupervisionConfig()
        config.restart = .never  // a monitor's policy: an output's runner restarts all the same
        config.backoffMin = 1_000_000_000
        config.backoffMax = 4_000_000_000
        config.maxRestarts = 2
        var b = RestartBudget.output(config)
        let s: Int64 = 1_000_000_000
        var delays: [RestartBudget.Decision] = []
        for i in 0..<5 { delays.append(b.decide(now: Int64(i) * s, jitter: 0)) }
        // Never quarantined, never stopped, whatever max_restarts and restart say.
        #expect(delays == [.restart(after: 1 * s), .restart(after: 2 * s), .restart(after: 4 * s),
                           .restart(after: 4 * s), .restart(after: 4 * s)])
        b.succeeded()
        #expect(b.decide(now: 10 * s, jitter: 0) == .restart(after: 1 * s))
        // A monitor's budget does not start over on success: its window does.
        var m = budget(restarts: 5)
        _ = m.decide(now: 0, jitter: 0)
        m.succeeded()
        #expect(m.decide(now: s, jitter: 0) == .restart(after: 2 * s))
    }

    @Test func jitterTakesAtMostAFifthOffTheDelay() {
        var b = budget()
        #expect(b.decide(now: 0, jitter: 0.999_999) == .restart(after: 800_000_200))
        var c = budget()
        #expect(c.decide(now: 0, jitter: 7) == .restart(after: 800_000_000))  // out of range: clamped
    }

    @Test func restartsOutsideTheWindowAreForgotten() {
        var b = budget(restarts: 2, window: 10_000_000_000)
        #expect(b.decide(now: 0, jitter: 0) != .quarantine)
        #expect(b.decide(now: 1_000_000_000, jitter: 0) != .quarantine)
        #expect(b.decide(now: 2_000_000_000, jitter: 0) == .quarantine)
        // Ten seconds after the first two, the window is empty again, and the backoff starts over.
        #expect(b.decide(now: 12_000_000_000, jitter: 0) == .restart(after: 1_000_000_000))
    }

    @Test func neverStopsAndOnFailureDoesNotRestartAFinishedPlugin() {
        var never = budget(.never)
        #expect(never.decide(now: 0, jitter: 0) == .stop)
        var onFailure = budget(.onFailure)
        #expect(onFailure.decide(now: 0, jitter: 0, finished: true) == .stop)
        var always = budget(.always)
        #expect(always.decide(now: 0, jitter: 0, finished: true) == .restart(after: 1_000_000_000))
    }

    @Test func hugeBackoffsSaturate() {
        var b = budget(min: ManifestLimits.maxDuration, max: ManifestLimits.maxDuration, restarts: 1000)
        for i in 0..<100 { _ = b.decide(now: Int64(i), jitter: 0) }
        #expect(b.decide(now: 101, jitter: 0) == .restart(after: ManifestLimits.maxDuration))
    }

    @Test func maxRestartsZeroQuarantinesAtTheFirstFailure() {
        var b = budget(restarts: 0)
        #expect(b.decide(now: 0, jitter: 0) == .quarantine)
    }
}

/// The channel's readers are fed what a hostile runner could write.
@Suite struct RunnerWireTests {
    @Test func optionsOfEveryTypeRoundTrip() {
        let options: [BoundOption] = [
            BoundOption(name: "a", value: .none), BoundOption(name: "b", value: .bool(true)),
            BoundOption(name: "c", value: .int(-7)), BoundOption(name: "d", value: .double(2.5)),
            BoundOption(name: "e", value: .string("x\u{0}y")), BoundOption(name: "f", value: .duration(5)),
            BoundOption(name: "g", value: .size(1 << 40)), BoundOption(name: "h", value: .json("[1]")),
        ]
        let bytes = RunnerWire.encodeCreate(name: "m", options: options, interval: 42)
        let request = bytes.withUnsafeBytes { raw -> RunnerWire.CreateRequest? in
            var r = WireReader(raw)
            _ = r.u8()
            return RunnerWire.decodeCreate(&r)
        }
        #expect(request?.name == "m")
        #expect(request?.interval == 42)
        #expect(request?.options == options)
    }

    /// The plugin's `vigil_event` for `event` (C copies of its strings),
    /// handed to `body`, as a plugin would emit it.
    func withPluginEvent<R>(_ event: Event, _ body: (UnsafePointer<vigil_event>) -> R) -> R {
        var copies: [UnsafeMutablePointer<CChar>] = []
        defer { copies.forEach { free($0) } }
        func c(_ text: String) -> vigil_str {
            let copy = strdup(text)!
            copies.append(copy)
            return vigil_str(ptr: copy, len: text.utf8.count)
        }
        var fields = event.fields.map { field -> vigil_field in
            var value = vigil_value()
            switch field.value {
            case .double(let d): value.type = UInt32(VIGIL_TYPE_DOUBLE.rawValue); value.as.f64 = d
            case .int(let i): value.type = UInt32(VIGIL_TYPE_INT.rawValue); value.as.i64 = i
            case .bool(let b): value.type = UInt32(VIGIL_TYPE_BOOL.rawValue); value.as.boolean = b ? 1 : 0
            case .string(let text): value.type = UInt32(VIGIL_TYPE_STRING.rawValue); value.as.str = c(text)
            }
            return vigil_field(name: c(field.name), value: value)
        }
        return fields.withUnsafeMutableBufferPointer { buffer in
            var e = vigil_event()
            e.size = UInt32(MemoryLayout<vigil_event>.size)
            e.kind = c(event.kind)
            e.severity = UInt32(event.severity.rawValue)
            e.time_ns = event.time
            e.field_count = buffer.count
            e.fields = UnsafePointer(buffer.baseAddress)
            return body(&e)
        }
    }

    /// The ring record the runner writes for `event`, decoded by `decoder`
    /// (as the runner does), into `capacity` bytes: the record, or nil and
    /// the length it needs.
    func record(_ event: Event, _ decoder: EventDecoder, capacity: Int = 4096) -> (bytes: [UInt8]?, length: Int) {
        var room = [UInt8](repeating: 0, count: capacity)
        return room.withUnsafeMutableBytes { raw in
            var record = RunnerWire.EventRecord(into: raw.baseAddress!, capacity: capacity)
            var index = -1
            withPluginEvent(event) { try! decoder.decode($0, now: { 7 }, kindIndex: &index, into: &record) }
            return (record.fits ? Array(raw.prefix(record.length)) : nil, record.length)
        }
    }

    /// The host's rebuilding of `bytes` and its decoder's verdict.
    func rebuild(_ bytes: [UInt8], _ decoder: EventDecoder?) -> Event? {
        let fields = UnsafeMutablePointer<vigil_field>.allocate(capacity: EventLimits.fields)
        defer { fields.deallocate() }
        var rebuilt = vigil_event()
        guard bytes.withUnsafeBytes({ RunnerWire.rebuildEvent($0, into: &rebuilt, fields: fields, decoder: decoder) }) else {
            return nil
        }
        var index = -1
        return try? (decoder ?? EventDecoder(monitor: "m", plugin: "p", events: [])).decode(&rebuilt, now: { 0 }, kindIndex: &index)
    }

    static let declaredEvents = [
        EventSpec(kind: "other", doc: "", fields: [FieldSpec(name: "x", type: .int, unit: "")]),
        EventSpec(kind: "sample", doc: "", fields: [FieldSpec(name: "d", type: .double, unit: ""),
                                                     FieldSpec(name: "i", type: .int, unit: "")]),
    ]

    @Test func anEventRecordRebuildsTheSameEvent() {
        let event = Event(time: 123, monitor: "m", plugin: "p", kind: "sample", severity: .warning,
                          fields: [Field("d", .double(1.5)), Field("i", .int(-3)), Field("b", .bool(true)),
                                   Field("s", .string("héllo\n"))])
        // Undeclared: every name crosses as its bytes.
        let plain = EventDecoder(monitor: "m", plugin: "p", events: [])
        let decoded = rebuild(record(event, plain).bytes!, plain)
        #expect(decoded?.fields == event.fields)
        #expect(decoded?.kind == "sample")
        #expect(decoded?.time == 123)
        #expect(decoded?.severity == .warning)
        // Declared: the kind and d, i cross as indexes (4 bytes each, no
        // name), b and s as bytes; the host's decoder gives the same event.
        let declared = EventDecoder(monitor: "m", plugin: "p", events: Self.declaredEvents)
        let short = record(event, declared)
        #expect(short.length == record(event, plain).length - "sample".utf8.count - 1 - 1)
        let again = rebuild(short.bytes!, declared)
        #expect(again?.fields == event.fields)
        #expect(again?.kind == "sample")
        // Indexes mean nothing without the declarations: the channel is broken.
        #expect(rebuild(short.bytes!, nil) == nil)
        #expect(rebuild(short.bytes!, EventDecoder(monitor: "m", plugin: "p", events: [])) == nil)
        // A time of 0 is stamped by the runner's clock.
        var untimed = event
        untimed.time = 0
        #expect(rebuild(record(untimed, declared).bytes!, declared)?.time == 7)
    }

    /// A record larger than the room given is counted, not written: the
    /// runner decodes it again into room of that size.
    @Test func aLargeRecordNeedsItsLength() {
        let big = String(repeating: "x", count: 5000)
        let event = Event(time: 1, monitor: "m", plugin: "p", kind: "k", severity: .info,
                          fields: [Field("s", .string(big)), Field("i", .int(2))])
        let decoder = EventDecoder(monitor: "m", plugin: "p", events: [])
        let small = record(event, decoder, capacity: 1024)
        #expect(small.bytes == nil)
        let whole = record(event, decoder, capacity: small.length)
        #expect(whole.length == small.length)
        #expect(rebuild(whole.bytes!, decoder)?.fields == event.fields)
    }

    /// Random and truncated records, and records naming declared names
    /// past the declarations: a rebuilt event or nil, never a trap.
    @Test func randomRecordsNeverTrap() {
        var generator = SystemRandomNumberGenerator()
        let fields = UnsafeMutablePointer<vigil_field>.allocate(capacity: EventLimits.fields)
        defer { fields.deallocate() }
        let decoder = EventDecoder(monitor: "m", plugin: "p", events: Self.declaredEvents)
        let valid = record(Event(time: 1, monitor: "m", plugin: "p", kind: "k", severity: .info,
                                 fields: [Field("s", .string("abc")), Field("i", .int(1))]), decoder).bytes!
        let indexed = record(Event(time: 1, monitor: "m", plugin: "p", kind: "sample", severity: .info,
                                   fields: [Field("d", .double(1)), Field("i", .int(1)), Field("z", .int(1))]), decoder).bytes!
        for round in 0..<4000 {
            var bytes = round % 2 == 0 ? valid : indexed
            if round % 3 == 0 {
                bytes = (0..<Int.random(in: 0..<64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            } else if round % 3 == 1 {
                bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &generator)))
            } else {
                for _ in 0..<3 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            }
            bytes.withUnsafeBytes { raw in
                var index = -1
                var rebuilt = vigil_event()
                if RunnerWire.rebuildEvent(raw, into: &rebuilt, fields: fields, decoder: decoder) {
                    _ = try? decoder.decode(&rebuilt, now: { 0 }, kindIndex: &index)
                }
                var r = WireReader(raw)
                _ = RunnerWire.decodeCreate(&r)
            }
        }
    }
}
