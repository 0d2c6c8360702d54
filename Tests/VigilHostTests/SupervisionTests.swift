import Foundation
@preconcurrency import CVigilPlugin
import Testing
import VigilABI
import VigilCore
@testable import VigilHost

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

    @Test func anEventRecordRebuildsTheSameEvent() {
        let event = Event(time: 123, monitor: "m", plugin: "p", kind: "sample", severity: .warning,
                          fields: [Field("d", .double(1.5)), Field("i", .int(-3)), Field("b", .bool(true)),
                                   Field("s", .string("héllo\n"))])
        let n = RunnerWire.eventBytes(event)
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: n, alignment: 8)
        defer { buffer.deallocate() }
        RunnerWire.encodeEvent(event, at: buffer)
        let fields = UnsafeMutablePointer<vigil_field>.allocate(capacity: EventLimits.fields)
        defer { fields.deallocate() }
        let decoder = EventDecoder(monitor: "m", plugin: "p", events: [])
        var index = -1
        let decoded = RunnerWire.withEvent(UnsafeRawBufferPointer(start: buffer, count: n), fields: fields) { e in
            try? decoder.decode(e, now: { 0 }, kindIndex: &index)
        }
        #expect(decoded??.fields == event.fields)
        #expect(decoded??.time == 123)
        #expect(decoded??.severity == .warning)
    }

    /// Random and truncated records: a rebuilt event or nil, never a trap.
    @Test func randomRecordsNeverTrap() {
        var generator = SystemRandomNumberGenerator()
        let fields = UnsafeMutablePointer<vigil_field>.allocate(capacity: EventLimits.fields)
        defer { fields.deallocate() }
        let decoder = EventDecoder(monitor: "m", plugin: "p", events: [])
        let valid: [UInt8] = {
            let event = Event(time: 1, monitor: "m", plugin: "p", kind: "k", severity: .info,
                              fields: [Field("s", .string("abc")), Field("i", .int(1))])
            var bytes = [UInt8](repeating: 0, count: RunnerWire.eventBytes(event))
            bytes.withUnsafeMutableBytes { RunnerWire.encodeEvent(event, at: $0.baseAddress!) }
            return bytes
        }()
        for round in 0..<3000 {
            var bytes = valid
            if round % 3 == 0 {
                bytes = (0..<Int.random(in: 0..<64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            } else if round % 3 == 1 {
                bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &generator)))
            } else {
                for _ in 0..<3 { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            }
            bytes.withUnsafeBytes { raw in
                var index = -1
                _ = RunnerWire.withEvent(raw, fields: fields) { e in try? decoder.decode(e, now: { 0 }, kindIndex: &index) }
                var r = WireReader(raw)
                _ = RunnerWire.decodeCreate(&r)
            }
        }
    }
}
