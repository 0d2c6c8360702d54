@preconcurrency import CVigilPlugin
import Glibc
import Synchronization

/// A monitor written in Swift. The SDK turns it into a C plugin: the
/// descriptor comes from `spec` and `Options`, each instance is one object of
/// the type, and the host's calls arrive as these methods, never two at once
/// for one object.
///
/// Start and stop are idempotent at the ABI: the host may call them again, and
/// the SDK calls `start()` only when the instance goes from stopped to started
/// and `stop()` only from started to stopped, so they are setup and teardown.
public protocol Monitor: AnyObject {
    /// The options type: a `DeclaredOptions` struct, `NoOptions`, or
    /// `RawOptions` for options declared by hand in `spec.options`.
    associatedtype Options: MonitorOptions = NoOptions
    static var spec: PluginSpec { get }
    /// Reads the options and prepares; no threads, no events yet. Throw
    /// `.invalidOption(name, why)` for a value that cannot work: `vigil
    /// validate` reports it at the option's line in the manifest.
    init(options: Options, context: MonitorContext) throws(MonitorError)
    /// Opens sources. Throw `.unavailable` when the source is not on this
    /// machine (not an error: the host says so and retries).
    func start() throws(MonitorError)
    /// Closes sources and stops the monitor's own threads. Workers made with
    /// `context.spawn` and `context.watch` are stopped and joined by the SDK
    /// right after this returns.
    func stop()
}

extension Monitor {
    public func start() throws(MonitorError) {}
    public func stop() {}
}

/// A monitor the host polls every interval, and once right after start for the
/// snapshot.
public protocol PolledMonitor: Monitor {
    func poll() throws(MonitorError)
}

/// A monitor that pushes: it emits from its own threads (`context.spawn`) or
/// when a file descriptor is ready (`context.watch`), and is never polled.
public protocol PushMonitor: Monitor {}

/// The host, as one instance sees it: emit, log, availability, time, and the
/// instance's workers. Safe to use from any thread.
public final class MonitorContext: @unchecked Sendable {  // immutable but for `state`, a Mutex; the host table may be called from any thread
    public let instanceName: String
    /// Poll interval (zero for push monitors).
    public let interval: Duration
    private let host: OpaquePointer
    private let api: UnsafePointer<vigil_host_api>
    private let kinds: [EventDecl]
    private let state = Mutex(State())

    struct State {
        var running = false
        var workers: [Worker] = []
        /// Last values passed on, per kind and entity, for `.changes` kinds.
        /// Pairs searched in order, not a dictionary: the first `[String: X]`
        /// of a plugin type makes the runtime scan every image's conformance
        /// table (see `RawOptions.entries`), and an instance tracks few entities.
        var sent: [(entity: String, values: [Value])] = []

        func index(of entity: String) -> Int? {
            for i in sent.indices where sent[i].entity == entity { return i }
            return nil
        }
    }

    init(instanceName: String, interval: Int64, host: OpaquePointer, api: UnsafePointer<vigil_host_api>,
         kinds: [EventDecl]) {
        self.instanceName = instanceName
        self.interval = .nanoseconds(interval)
        self.host = host
        self.api = api
        self.kinds = kinds
    }

    // MARK: events

    /// Emits one event, unless its kind is emitted on change and nothing
    /// changed since the last one for the same entity. Returns false when the
    /// host refused it (the instance is stopped).
    @discardableResult
    public func emit(_ kind: String, severity: Severity = .info, time: Int64 = 0,
                     _ fields: KeyValuePairs<String, Value>) -> Bool {
        emit(kind, severity: severity, time: time, fields: fields.map { ($0.key, $0.value) })
    }

    /// Emits one event with fields given as an array (for a variable number of fields).
    @discardableResult
    public func emit(_ kind: String, severity: Severity = .info, time: Int64 = 0, fields: [(String, Value)]) -> Bool {
        if let decl = declaration(of: kind), decl.policy == .changes, !changed(decl, fields) { return true }
        return send(kind, severity: severity, time: time, fields: fields)
    }

    /// Forgets what was sent, so the next event of every kind is passed on as
    /// a snapshot. The SDK calls it on every start.
    public func resetChanges() { state.withLock { $0.sent.removeAll() } }

    /// Forgets one entity (a device that went away), so that if it comes back
    /// its first event is passed on.
    public func forget(_ kind: String, key: [Value]) {
        let id = Self.entity(kind, key)
        state.withLock { state in
            if let i = state.index(of: id) { state.sent.remove(at: i) }
        }
    }

    private func declaration(of kind: String) -> EventDecl? {
        for decl in kinds where decl.kind == kind { return decl }
        return nil
    }

    private static func entity(_ kind: String, _ key: [Value]) -> String {
        var id = kind
        for value in key {
            id += "\u{1F}"
            switch value {
            case .string(let s): id += s
            case .int(let n): id += String(n)
            case .double(let d): id += "\(d)"
            case .bool(let b): id += b ? "1" : "0"
            }
        }
        return id
    }

    /// Whether `fields` differ from the last event passed on for the same
    /// entity by more than each field's minimum change; records them if so.
    private func changed(_ decl: EventDecl, _ fields: [(String, Value)]) -> Bool {
        var key: [Value] = []
        for name in decl.key {
            for (n, v) in fields where n == name { key.append(v); break }
        }
        let id = Self.entity(decl.kind, key)
        let values = fields.map(\.1)
        return state.withLock { state in
            guard let slot = state.index(of: id) else {
                state.sent.append((id, values))
                return true
            }
            let previous = state.sent[slot].values
            guard previous.count == values.count else {
                state.sent[slot].values = values
                return true
            }
            for (i, (name, value)) in fields.enumerated() where value != previous[i] {
                var threshold = 0.0
                for f in decl.fields where f.name == name { threshold = f.minChange; break }
                switch (value, previous[i]) {
                case (.double(let a), .double(let b)) where threshold > 0 && abs(a - b) < threshold: continue
                case (.int(let a), .int(let b)) where threshold > 0 && abs(Double(a) - Double(b)) < threshold: continue
                default:
                    state.sent[slot].values = values
                    return true
                }
            }
            return false
        }
    }

    private func send(_ kind: String, severity: Severity, time: Int64, fields: [(String, Value)]) -> Bool {
        // Every string goes into one buffer; the C structs point into it for the call.
        var text: [UInt8] = Array(kind.utf8)
        var spans: [(name: Range<Int>, value: Range<Int>?)] = []
        spans.reserveCapacity(fields.count)
        for (name, value) in fields {
            let nameStart = text.count
            text.append(contentsOf: name.utf8)
            let nameRange = nameStart..<text.count
            if case .string(let s) = value {
                let start = text.count
                text.append(contentsOf: s.utf8)
                spans.append((nameRange, start..<text.count))
            } else {
                spans.append((nameRange, nil))
            }
        }
        let kindLength = kind.utf8.count
        let status: vigil_status = text.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self)
            func str(_ r: Range<Int>) -> vigil_str { vigil_str(ptr: base + r.lowerBound, len: r.count) }
            var cFields = [vigil_field]()
            cFields.reserveCapacity(fields.count)
            for (i, (_, value)) in fields.enumerated() {
                var v = vigil_value()
                switch value {
                case .double(let d): v.type = UInt32(VIGIL_TYPE_DOUBLE.rawValue); v.as.f64 = d
                case .int(let n): v.type = UInt32(VIGIL_TYPE_INT.rawValue); v.as.i64 = n
                case .bool(let b): v.type = UInt32(VIGIL_TYPE_BOOL.rawValue); v.as.boolean = b ? 1 : 0
                case .string: v.type = UInt32(VIGIL_TYPE_STRING.rawValue); v.as.str = str(spans[i].value!)
                }
                cFields.append(vigil_field(name: str(spans[i].name), value: v))
            }
            return cFields.withUnsafeBufferPointer { fieldBuffer in
                var event = vigil_event()
                event.size = UInt32(MemoryLayout<vigil_event>.size)
                event.severity = severity.rawValue
                event.kind = vigil_str(ptr: base, len: kindLength)
                event.time_ns = time
                event.fields = fieldBuffer.baseAddress
                event.field_count = fieldBuffer.count
                return api.pointee.emit(host, &event)
            }
        }
        return status == VIGIL_OK
    }

    // MARK: host services

    public enum LogLevel: UInt32, Sendable { case debug = 0, info, notice, warning, error, critical }

    /// A line in the host's log, attributed to this instance.
    public func log(_ level: LogLevel, _ message: String) {
        var message = message
        message.withUTF8 { bytes in
            api.pointee.log(host, vigil_log_level(rawValue: level.rawValue),
                            vigil_str(ptr: UnsafeRawPointer(bytes.baseAddress)?.assumingMemoryBound(to: CChar.self), len: bytes.count))
        }
    }

    /// Declares the source present or absent; the host emits `availability`
    /// on change. Unavailable with a reason is a state, not an error.
    public func setAvailability(_ available: Bool, reason: String = "") {
        var reason = reason
        reason.withUTF8 { bytes in
            api.pointee.set_availability(host, available ? 1 : 0,
                                         vigil_str(ptr: UnsafeRawPointer(bytes.baseAddress)?.assumingMemoryBound(to: CChar.self), len: bytes.count))
        }
    }

    /// The host's wall clock, nanoseconds since the epoch (a test host's
    /// injected clock under VigilKitTesting).
    public func now() -> Int64 { api.pointee.now_ns(host) }

    /// Tells the host this instance will emit nothing more (a bounded job is
    /// done); a host older than ABI 1.1 is not told.
    public func finished() {
        let size = Int(api.pointee.size)
        guard size >= MemoryLayout<vigil_host_api>.offset(of: \vigil_host_api.finished)! + MemoryLayout<Int>.size,
              let finished = api.pointee.finished else { return }
        finished(host)
    }

    // MARK: workers

    /// Runs `body` on a thread of its own until the instance stops. The body
    /// should return soon after `token.isCancelled`, and sleep with
    /// `token.wait(_:)`, which returns early when the instance stops. Called
    /// outside start (after stop), it does nothing and returns nil.
    @discardableResult
    public func spawn(_ name: String, _ body: @escaping @Sendable (Worker.Token) -> Void) -> Worker? {
        state.withLock { state -> Worker? in
            guard state.running else { return nil }
            let worker = Worker(name: name, body)
            state.workers.append(worker)
            return worker
        }
    }

    /// Calls `ready` on a worker thread each time `fd` is readable (or has
    /// `events`, as for poll(2)), until the instance stops. The descriptor
    /// stays the caller's to close, after stop.
    @discardableResult
    public func watch(fd: Int32, events: Int16 = Int16(POLLIN), name: String = "watch",
                      _ ready: @escaping @Sendable (_ revents: Int16) -> Void) -> Worker? {
        spawn(name) { token in
            while !token.isCancelled {
                switch token.waitFor(fd: fd, events: events, timeout: nil) {
                case .ready(let revents):
                    ready(revents)
                    if revents & Int16(POLLNVAL) != 0 { return }
                case .cancelled: return
                case .timedOut: continue
                }
            }
        }
    }

    /// Started: workers may be spawned. Called by the SDK before `start()`.
    func willStart() {
        resetChanges()
        state.withLock { $0.running = true }
    }

    /// Stopped: every worker is cancelled and joined. Called by the SDK after `stop()`.
    func didStop() {
        let workers = state.withLock { state -> [Worker] in
            state.running = false
            defer { state.workers.removeAll() }
            return state.workers
        }
        for worker in workers { worker.stop() }
    }
}
