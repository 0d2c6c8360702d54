import Synchronization
import VigilABI
import VigilCore
import VigilKit

/// One output plugin instance under test: created with options as a sink's
/// would be, then started, given batches, flushed and stopped by the test,
/// on the caller's thread, one call at a time, as the host guarantees.
/// Batches go through the encoder and the answers through the decoder the
/// host's plugin sinks use (`OutputBatch`), so a verdict here is the host's.
///
///     let host = try PluginTestHost(LineOutput.self)              // or PluginTestHost(path: "…/lines.so")
///     let out = try host.output(options: "{ address: \"127.0.0.1:\(port)\" }")
///     try out.start()
///     let answer = try out.write([OutputEvent(kind: "sample", fields: [EventField("n", .int(1))])])
///     #expect(answer.verdicts == [.ok])
///     try out.stop()
public final class TestOutput: PluginHostCallbacks, @unchecked Sendable {  // the handle and flags are the test's thread's, as the host's calls are one at a time; what plugin threads reach is behind `record`
    public let name: String
    /// The host name every batch carries (`OutputEvent.host` is not read).
    public let hostName: String
    let host: PluginTestHost
    private var handle: UnsafeMutableRawPointer?
    private var context: HostContext!
    private var started = false
    private var nextSeq: UInt64 = 1
    private let record = Mutex<(logs: [(level: Int, message: String)], violations: [String])>(([], []))

    init(host: PluginTestHost, name: String, hostName: String, options: [BoundOption]) throws(PluginTestError) {
        self.host = host
        self.name = name
        self.hostName = hostName
        let context = HostContext.make(for: WeakHostCallbacks(self))
        self.context = context
        handle = try host.create(name, options: options, interval: 0, context: context)
    }

    deinit {
        if let handle {
            if started, let stop = host.plugin.descriptor.stop { _ = withPluginError { stop(handle, $0) } }
            host.plugin.descriptor.destroy(handle)
        }
        context.retire()
    }

    // MARK: lifecycle

    /// Starts the output (an output without `start` needs none).
    public func start() throws(PluginTestError) {
        guard let handle else { throw PluginTestError("the output was destroyed") }
        if let start = host.plugin.descriptor.start {
            let (status, message) = withPluginError { start(handle, $0) }
            guard status == VIGIL_OK else { throw TestInstance.failure("start", status, message) }
        }
        started = true
    }

    /// Writes `events` as one batch and returns what the output answered,
    /// read as the host reads it. Events with `seq` 0 are numbered from 1 on
    /// (across calls); events with `time` 0 get the host's clock.
    /// `attempt` is what the batch says (2, 3… for a retry).
    public func write(_ events: [OutputEvent], attempt: Int = 1) throws(PluginTestError) -> WriteAnswer {
        guard let handle else { throw PluginTestError("the output was destroyed") }
        guard started else { throw PluginTestError("write before start: the host writes only between start and stop") }
        guard !events.isEmpty else { throw PluginTestError("a batch holds at least one event") }
        let batch = events.map { e -> Event in
            var seq = e.seq
            if seq == 0 {
                seq = nextSeq
                nextSeq += 1
            }
            return Event(time: e.time == 0 ? host.clock.now : e.time, monitor: e.monitor, plugin: e.plugin, kind: e.kind,
                         severity: VigilCore.Severity(rawValue: UInt8(e.severity.rawValue)) ?? .critical, seq: seq,
                         fields: e.fields.map { Field($0.name, Self.value($0.value)) })
        }
        let write = host.plugin.descriptor.write!
        let answer = OutputBatch.write(batch, host: hostName, attempt: UInt32(clamping: attempt)) { b, r, e in
            write(handle, b, r, e)
        }
        return WriteAnswer(answer)
    }

    /// Flushes, giving the output `timeout` (an output without `flush`
    /// buffers nothing: nothing to do).
    public func flush(within timeout: Duration = .seconds(1)) throws(PluginTestError) {
        guard let handle else { throw PluginTestError("the output was destroyed") }
        guard let flush = host.plugin.descriptor.flush else { return }
        let deadline = FlushDeadline.after(timeout).monotonicNanoseconds
        let (status, message) = withPluginError { flush(handle, deadline, $0) }
        guard status == VIGIL_OK else { throw TestInstance.failure("flush", status, message) }
    }

    /// Stops the output (an output without `stop` needs none).
    public func stop() throws(PluginTestError) {
        guard let handle else { return }
        started = false
        if let stop = host.plugin.descriptor.stop {
            let (status, message) = withPluginError { stop(handle, $0) }
            guard status == VIGIL_OK else { throw TestInstance.failure("stop", status, message) }
        }
    }

    /// Destroys the output now (closing what it holds), as the host does at
    /// the end of a run; stops it first if it runs. Later calls throw.
    public func destroy() {
        guard let handle else { return }
        if started, let stop = host.plugin.descriptor.stop { _ = withPluginError { stop(handle, $0) } }
        started = false
        host.plugin.descriptor.destroy(handle)
        self.handle = nil
        context.retire()
    }

    // MARK: what the output did

    /// Log lines: level (0 debug … 5 critical) and message.
    public var logs: [(level: Int, message: String)] { record.withLock { $0.logs } }

    /// Breaches of the contract: an output that emitted.
    public var violations: [String] { record.withLock { $0.violations } }

    // MARK: the host table's side

    package func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        record.withLock { $0.violations.append("an output called emit") }
        return VIGIL_E_UNSUPPORTED
    }

    package func log(level: Int, message: String, cut: Int) {
        record.withLock { $0.logs.append((level, cut > 0 ? "\(message)… [cut \(cut) bytes]" : message)) }
    }

    package func now() -> Int64 { host.clock.now }

    package func setAvailability(_ available: Bool, reason: String) {}

    package func markFinished() {}

    static func value(_ v: Value) -> FieldValue {
        switch v {
        case .double(let d): .double(d)
        case .int(let i): .int(i)
        case .bool(let b): .bool(b)
        case .string(let s): .string(s)
        }
    }
}

/// What an output answered for one batch, as the host read it.
public struct WriteAnswer: Sendable, Equatable, CustomStringConvertible {
    /// One per event, in order: what the host does with each.
    public var verdicts: [WriteVerdict]
    /// With retries: the least wait the output asked for (zero: the host's backoff).
    public var retryAfter: Duration
    /// The call's status ("ok", "temporary failure", "fatal"…); not "ok"
    /// means the whole batch is retried (temporary) or the sink fails.
    public var status: String
    /// The call's message: the rejects' reason, or why the call failed.
    public var message: String

    public var delivered: Int { verdicts.count { $0 == .ok } }
    public var retried: Int { verdicts.count { $0 == .retry } }
    public var rejected: Int { verdicts.count { $0 == .reject } }

    init(_ answer: OutputBatch.Answer) {
        verdicts = answer.verdicts.map { v in
            switch v {
            case .ok: .ok
            case .retry: .retry
            case .reject: .reject
            }
        }
        retryAfter = .nanoseconds(answer.retryAfter)
        status = statusName(answer.status)
        message = answer.message
    }

    public var description: String {
        "\(status): \(delivered) delivered, \(retried) to retry, \(rejected) rejected"
            + (retryAfter > .zero ? ", retry after \(retryAfter)" : "") + (message.isEmpty ? "" : " (\(message))")
    }
}
