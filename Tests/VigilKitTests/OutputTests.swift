import Synchronization
import Testing
import VigilCore
import VigilKit
import VigilKitTesting

// Outputs defined here run in-process through VigilKitTesting's test host,
// through the same C descriptor a host gets from `vigil_plugin_entry`: the
// batches are laid out by the host's encoder and the answers read by its
// decoder.

/// What the test output saw and did, shared with the test.
final class OutputLedger: Sendable {
    struct State {
        var batches: [EventBatch] = []
        var flushes: [Duration] = []
        var calls: [String] = []
    }
    let state = Mutex(State())
    static let shared = OutputLedger()
}

/// An output whose answers the options choose: reject events of one kind,
/// retry the first attempts, fail the call.
final class ScriptedOutput: Output {
    static let spec = OutputSpec(name: "scripted", version: "1.2.0", summary: "an output for tests")

    struct Options: DeclaredOptions {
        var rejectKind = ""
        var retryFirst = 0
        var retryAfter: Duration = .zero
        var fail = ""
        var limit = 10
        static let schema = OptionSchema<Options>(
            .option("reject_kind", \.rejectKind, doc: "events of this kind are rejected"),
            .option("retry_first", \.retryFirst, doc: "batches answered RETRY before any is taken"),
            .option("retry_after", \.retryAfter, example: "10ms", doc: "the wait asked for with RETRY"),
            .option("fail", \.fail, doc: "temporary or fatal: the call fails so"),
            .option("limit", \.limit, doc: "at most this many events per batch are taken; the rest retried"))
    }

    let options: Options
    let ledger = OutputLedger.shared
    var writes = 0

    init(options: Options, context: OutputContext) throws(PluginError) {
        guard options.limit > 0 else { throw .invalidOption("limit", "must be positive") }
        self.options = options
        context.log(.info, "opened \(context.sinkName)")
        ledger.state.withLock { $0.calls.append("open") }
    }

    func start() throws(PluginError) { ledger.state.withLock { $0.calls.append("start") } }
    func stop() { ledger.state.withLock { $0.calls.append("stop") } }
    func close() { ledger.state.withLock { $0.calls.append("close") } }

    func write(_ batch: EventBatch) throws(PluginError) -> WriteResult {
        ledger.state.withLock { $0.batches.append(batch) }
        writes += 1
        switch options.fail {
        case "temporary": throw .temporary("the peer is busy")
        case "fatal": throw .fatal("the disk is gone")
        default: break
        }
        if writes <= options.retryFirst { return .retry(after: options.retryAfter, reason: "not yet") }
        let verdicts = batch.enumerated().map { i, event -> WriteVerdict in
            if event.kind == options.rejectKind { return .reject }
            return i < options.limit ? .ok : .retry
        }
        return .perEvent(verdicts, retryAfter: options.retryAfter,
                         reason: verdicts.contains(.reject) ? "kind '\(options.rejectKind)' is not wanted" : "")
    }

    func flush(deadline: FlushDeadline) throws(PluginError) {
        ledger.state.withLock { $0.flushes.append(deadline.remaining) }
    }
}

/// An output that takes everything and says nothing else: the defaults.
final class QuietOutput: Output {
    static let spec = OutputSpec(name: "quiet", version: "0.1.0", summary: "takes everything")
    init(options: NoOptions, context: OutputContext) {}
    func write(_ batch: EventBatch) -> WriteResult { .ok }
}

@Suite(.serialized) struct OutputTests {
    init() { OutputLedger.shared.state.withLock { $0 = OutputLedger.State() } }

    static func event(_ kind: String = "sample", seq: UInt64 = 0, _ fields: [EventField] = [EventField("n", .int(1))]) -> OutputEvent {
        OutputEvent(monitor: "m", plugin: "p", seq: seq, kind: kind, fields: fields)
    }

    @Test func anOutputDescribesItselfAsOne() throws {
        let d = try PluginTestHost(ScriptedOutput.self).description
        #expect(d.kind == .output)
        #expect(d.name == "scripted" && d.version == "1.2.0" && d.abiMinor == 5)
        #expect(d.events.isEmpty && !d.polled)
        #expect(d.options.map(\.name) == ["reject_kind", "retry_first", "retry_after", "fail", "limit"])
        #expect(d.options.map(\.type) == [.string, .int, .duration, .string, .int])
        #expect(d.options.first { $0.name == "retry_after" }?.exampleText == "10ms")
        #expect(d.problems() == [])
        #expect(try PluginTestHost(QuietOutput.self).description.options.isEmpty)
    }

    /// Every part of an event reaches the output as it was given: the host's
    /// stamps, severity, each field type, text that is not ASCII.
    @Test func theOutputSeesTheEventsAsTheHostHasThem() throws {
        let host = try PluginTestHost(ScriptedOutput.self)
        let out = try host.output("sink-a", hostName: "web-1")
        try out.start()
        let fields = [EventField("ratio", .double(0.25)), EventField("count", .int(-7)), EventField("up", .bool(true)),
                      EventField("name", .string("é \"x\"\n")), EventField("nan", .double(.infinity))]
        let given = OutputEvent(monitor: "cpu-0", plugin: "cpu", seq: 42, time: 1_700_000_000_123_456_789,
                                severity: .warning, kind: "sample", fields: fields)
        let answer = try out.write([given, Self.event("tick")], attempt: 3)
        #expect(answer.verdicts == [.ok, .ok])
        #expect(answer.status == "ok" && answer.message.isEmpty)
        let batch = try #require(OutputLedger.shared.state.withLock { $0.batches.last })
        #expect(batch.attempt == 3 && batch.count == 2)
        var expected = given
        expected.host = "web-1"
        #expect(batch[0] == expected)
        #expect(batch[0][field: "count"] == .int(-7))
        // seq 0 is numbered by the test host; time 0 is its clock.
        #expect(batch[1].seq == 1 && batch[1].time == host.clock.now && batch[1].severity == .info)
        try out.stop()
        #expect(out.logs.map(\.message) == ["opened sink-a"])
        #expect(out.violations.isEmpty)
    }

    @Test func verdictsPerEventWithTheReasonOfTheRejects() throws {
        let out = try PluginTestHost(ScriptedOutput.self)
            .output(options: "{ reject_kind: noise, limit: 3, retry_after: 250ms }")
        try out.start()
        let answer = try out.write([Self.event(), Self.event("noise"), Self.event(), Self.event(), Self.event("noise")])
        #expect(answer.verdicts == [.ok, .reject, .ok, .retry, .reject])
        #expect(answer.delivered == 2 && answer.rejected == 2 && answer.retried == 1)
        #expect(answer.retryAfter == .milliseconds(250))
        #expect(answer.message == "kind 'noise' is not wanted")
        // All the same: one verdict for the batch.
        #expect(try out.write([Self.event("noise"), Self.event("noise")]).verdicts == [.reject, .reject])
    }

    @Test func retryForTheWholeBatchThenDelivery() throws {
        let out = try PluginTestHost(ScriptedOutput.self).output(options: "{ retry_first: 2, retry_after: 1s }")
        try out.start()
        for attempt in 1...2 {
            let answer = try out.write([Self.event(), Self.event()], attempt: attempt)
            #expect(answer.verdicts == [.retry, .retry])
            #expect(answer.retryAfter == .seconds(1))
            #expect(answer.message == "not yet")
        }
        #expect(try out.write([Self.event(), Self.event()], attempt: 3).verdicts == [.ok, .ok])
        #expect(OutputLedger.shared.state.withLock { $0.batches.map(\.attempt) } == [1, 2, 3])
    }

    /// A thrown error answers for the whole batch: TEMPORARY is a retry,
    /// FATAL fails the sink; either way no event counts as delivered.
    @Test(arguments: [("temporary", "temporary failure", "the peer is busy"), ("fatal", "fatal", "the disk is gone")])
    func aThrownErrorIsTheBatchsStatus(fail: String, status: String, message: String) throws {
        let out = try PluginTestHost(ScriptedOutput.self).output(options: "{ fail: \(fail) }")
        try out.start()
        let answer = try out.write([Self.event(), Self.event()])
        #expect(answer.status == status && answer.message == message)
        #expect(answer.delivered == 0)
    }

    @Test func lifecycleStartStopFlushClose() throws {
        let out = try PluginTestHost(ScriptedOutput.self).output()
        #expect(throws: PluginTestError.self) { try out.write([Self.event()]) }  // before start
        try out.start()
        try out.start()  // idempotent: one start
        try out.flush(within: .seconds(2))
        try out.stop()
        try out.stop()
        out.destroy()
        let state = OutputLedger.shared.state.withLock { $0 }
        #expect(state.calls == ["open", "start", "stop", "close"])
        #expect(state.flushes.count == 1)
        #expect(state.flushes.allSatisfy { $0 > .milliseconds(1500) && $0 <= .seconds(2) })
        #expect(throws: PluginTestError.self) { try out.start() }
    }

    @Test func optionsAreCheckedAsASinksWouldBe() throws {
        let host = try PluginTestHost(ScriptedOutput.self)
        let bad = #expect(throws: PluginTestError.self) { try host.output(options: "{ limit: 0 }") }
        #expect(bad?.status == "invalid configuration")
        #expect(bad?.description.contains("options.limit: must be positive") == true, "\(String(describing: bad))")
        let unknown = #expect(throws: PluginTestError.self) { try host.output("s", options: "{ limt: 3 }") }
        #expect(unknown?.description.contains("unknown option 'limt' for plugin 'scripted' in sink 's'") == true,
                "\(String(describing: unknown))")
    }

    @Test func monitorsAndOutputsAreMadeByTheirOwnCalls() throws {
        #expect(throws: PluginTestError.self) { try PluginTestHost(QuietOutput.self).instance() }
        #expect(throws: PluginTestError.self) { try PluginTestHost(GaugeMonitor.self).output() }
        // Both kinds in one process: each create builds its own type.
        let out = try PluginTestHost(QuietOutput.self).output()
        let gauge = try PluginTestHost(GaugeMonitor.self).instance(interval: .seconds(1))
        try out.start()
        try gauge.start()
        #expect(try out.write([Self.event()]).verdicts == [.ok])
        #expect(gauge.events(kind: "tick").count == 1)
        try gauge.stop()
        try out.stop()
    }
}
