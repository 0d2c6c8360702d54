@preconcurrency import CVigilPlugin
import Glibc

/// An output plugin written in Swift (ABI 1.5): it takes the events a sink
/// of `type: plugin` routes to it and sends them on. The SDK turns it into
/// the C descriptor: the self-description comes from `spec` and `Options`,
/// each sink of the manifest is one object of the type, and the host's calls
/// arrive as these methods, never two at once for one object.
///
///     final class LineOutput: Output {
///         static let spec = OutputSpec(name: "lines", version: "1.0.0", summary: "Events as text lines on a socket.")
///         struct Options: DeclaredOptions { var address = "127.0.0.1:5170"; static let schema = … }
///         init(options: Options, context: OutputContext) throws(PluginError) { … }   // open
///         func write(_ batch: EventBatch) throws(PluginError) -> WriteResult { … }   // OK, retry or reject
///         func close() { … }
///     }
///     @_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(LineOutput.self, a, r) }
///
/// Delivery is the host's job: it keeps the queue, retries what `write`
/// answers RETRY for (with backoff, never sooner than the output asked),
/// counts what it answers REJECT for, and stops at the drain deadline. An
/// output only writes a batch and says what became of each event.
public protocol Output: AnyObject {
    /// A `DeclaredOptions` struct, `NoOptions`, or `RawOptions` with the
    /// options declared in `spec.options`.
    associatedtype Options: MonitorOptions = NoOptions
    static var spec: OutputSpec { get }

    /// Opens the output with its options (the host's `create`). Throw
    /// `.invalidOption(name, why)` for a value that cannot work; `vigil
    /// validate` reports it at the option's line. Connecting to a peer here
    /// is optional: a peer that is not up yet is better found in `write`,
    /// answered RETRY, than refused.
    init(options: Options, context: OutputContext) throws(PluginError)

    /// Sends `batch` and says what became of each event: `.ok`,
    /// `.retry(after:)` or `.reject(reason:)` for the whole batch, or
    /// `.perEvent(_:)`. Throwing is for the whole batch too: `.temporary`
    /// is retried like RETRY (with the host's backoff), anything else
    /// fails the sink for good. Called from the sink's thread, one call at
    /// a time, between `start()` and `stop()`.
    func write(_ batch: EventBatch) throws(PluginError) -> WriteResult

    /// Sends what the output buffered, giving up at `deadline`. Called
    /// every `flush_interval` and before `stop()`, never beside `write`.
    /// An output that buffers nothing keeps the default, which does
    /// nothing.
    func flush(deadline: FlushDeadline) throws(PluginError)

    /// Called when the sink starts and stops (the host may do both more
    /// than once); the SDK calls `start()` only from stopped and `stop()`
    /// only from started. Defaults: nothing.
    func start() throws(PluginError)
    func stop()

    /// Closes the output (the host's `destroy`), after `stop()`: release
    /// connections and files here rather than in `deinit`, which runs
    /// whenever the last reference goes.
    func close()
}

extension Output {
    public func flush(deadline: FlushDeadline) throws(PluginError) {}
    public func start() throws(PluginError) {}
    public func stop() {}
    public func close() {}
}

/// Why a call failed, for monitors and outputs alike: the status tells the
/// host what to do.
public typealias PluginError = MonitorError

/// What an output says about itself: no event kinds, no interval.
public struct OutputSpec: Sendable {
    public var name: String
    public var version: String
    public var summary: String
    /// Options declared by hand (outputs taking `RawOptions`); typed options
    /// (`DeclaredOptions`) declare themselves and come first.
    public var options: [OptionDecl]

    public init(name: String, version: String, summary: String, options: [OptionDecl] = []) {
        self.name = name
        self.version = version
        self.summary = summary
        self.options = options
    }
}

/// One field of an event an output is given.
public struct EventField: Sendable, Equatable {
    public var name: String
    public var value: Value

    public init(_ name: String, _ value: Value) {
        self.name = name
        self.value = value
    }
}

/// An event as an output is given it: what a monitor emitted, with the
/// host's stamps. A Swift copy of the host's `vigil_output_event`, made
/// before `write` is called, so it may be kept for as long as the output
/// likes (a buffering output keeps events until `flush`).
public struct OutputEvent: Sendable, Equatable {
    /// The host's name (the manifest's `host:`, else the machine's).
    public var host: String
    /// The monitor (the manifest's instance name) that emitted it.
    public var monitor: String
    /// The monitor's plugin.
    public var plugin: String
    /// The host's sequence number, per host run.
    public var seq: UInt64
    /// Nanoseconds since the epoch (CLOCK_REALTIME); always set.
    public var time: Int64
    /// A severity newer than this SDK reads as `.critical`.
    public var severity: Severity
    public var kind: String
    /// In the order the monitor emitted them. A field of a type newer than
    /// this SDK is left out and counted in `unknownFields`.
    public var fields: [EventField]
    public var unknownFields: Int

    public init(host: String = "test-host", monitor: String = "test", plugin: String = "test", seq: UInt64 = 0,
                time: Int64 = 0, severity: Severity = .info, kind: String, fields: [EventField] = [],
                unknownFields: Int = 0) {
        self.host = host
        self.monitor = monitor
        self.plugin = plugin
        self.seq = seq
        self.time = time
        self.severity = severity
        self.kind = kind
        self.fields = fields
        self.unknownFields = unknownFields
    }

    /// The value of the first field named `name`.
    public subscript(field name: String) -> Value? {
        for field in fields where field.name == name { return field.value }
        return nil
    }
}

/// The events of one `write` call, in the order the host queued them.
public struct EventBatch: Sendable, RandomAccessCollection {
    /// 1 the first time these events are written, then 2, 3… (a retry).
    public let attempt: Int
    public let events: [OutputEvent]

    public init(attempt: Int = 1, events: [OutputEvent]) {
        self.attempt = attempt
        self.events = events
    }

    public var startIndex: Int { events.startIndex }
    public var endIndex: Int { events.endIndex }
    public subscript(position: Int) -> OutputEvent { events[position] }
}

/// What became of one event.
public enum WriteVerdict: Sendable, Equatable {
    /// Delivered.
    case ok
    /// Not delivered, may be later: the host keeps it and writes it again.
    case retry
    /// Never deliverable: the host counts it lost as `rejected`.
    case reject
}

/// `write`'s answer: for the whole batch, or one verdict per event.
public enum WriteResult: Sendable, Equatable {
    /// Every event delivered.
    case ok
    /// Nothing delivered; write it all again after at least `after` (zero:
    /// the host's backoff). `reason` goes to the host with the answer.
    case retry(after: Duration = .zero, reason: String = "")
    /// Nothing deliverable, ever; `reason` is logged by the host.
    case reject(reason: String)
    /// One verdict per event of the batch, in order (missing ones count as
    /// `.retry`, extra ones are ignored); `retryAfter` for the retried,
    /// `reason` for the rejected.
    case perEvent([WriteVerdict], retryAfter: Duration = .zero, reason: String = "")

    /// The verdict of each of `count` events.
    public func verdicts(count: Int) -> [WriteVerdict] {
        switch self {
        case .ok: Array(repeating: .ok, count: count)
        case .retry: Array(repeating: .retry, count: count)
        case .reject: Array(repeating: .reject, count: count)
        case .perEvent(let given, _, _):
            Array(given.prefix(count)) + Array(repeating: .retry, count: max(0, count - given.count))
        }
    }

    var retryAfter: Duration {
        switch self {
        case .retry(let after, _), .perEvent(_, let after, _): after
        case .ok, .reject: .zero
        }
    }

    var reason: String {
        switch self {
        case .ok: ""
        case .retry(_, let reason), .reject(let reason), .perEvent(_, _, let reason): reason
        }
    }
}

/// The host's deadline for a flush: the output gives up when it has passed.
public struct FlushDeadline: Sendable, Equatable {
    /// CLOCK_MONOTONIC nanoseconds, as the host gave it.
    public let monotonicNanoseconds: Int64

    public init(monotonicNanoseconds: Int64) { self.monotonicNanoseconds = monotonicNanoseconds }

    /// `timeout` from now.
    public static func after(_ timeout: Duration) -> FlushDeadline {
        let (s, atto) = timeout.components
        return FlushDeadline(monotonicNanoseconds: monotonicNow() + s * 1_000_000_000 + atto / 1_000_000_000)
    }

    /// The time left (zero once passed).
    public var remaining: Duration { .nanoseconds(max(0, monotonicNanoseconds - Self.monotonicNow())) }
    public var hasPassed: Bool { Self.monotonicNow() >= monotonicNanoseconds }

    static func monotonicNow() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}

/// The host, as one output sees it: its name, the log and the clock. Safe
/// to use from any thread.
public final class OutputContext: @unchecked Sendable {  // immutable; the host table it calls may be called from any thread (the ABI)
    /// The manifest's name of the sink.
    public let sinkName: String
    private let host: OpaquePointer
    private let api: UnsafePointer<vigil_host_api>

    init(sinkName: String, host: OpaquePointer, api: UnsafePointer<vigil_host_api>) {
        self.sinkName = sinkName
        self.host = host
        self.api = api
    }

    /// A line in the host's log, attributed to this sink.
    public func log(_ level: MonitorContext.LogLevel, _ message: String) {
        var message = message
        message.withUTF8 { bytes in
            api.pointee.log(host, vigil_log_level(rawValue: level.rawValue),
                            vigil_str(ptr: UnsafeRawPointer(bytes.baseAddress)?.assumingMemoryBound(to: CChar.self), len: bytes.count))
        }
    }

    /// The host's wall clock, nanoseconds since the epoch.
    public func now() -> Int64 { api.pointee.now_ns(host) }
}
