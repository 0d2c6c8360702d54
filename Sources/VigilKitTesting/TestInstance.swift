import Glibc
import Synchronization
import VigilCore
import VigilHost
import VigilKit

/// One plugin instance under test. Lifecycle calls run on the caller's
/// thread, one at a time, as the host guarantees; events may arrive from any
/// thread (a push monitor's workers) and are collected in order of arrival.
public final class TestInstance: @unchecked Sendable {
    public let name: String
    /// Poll interval in nanoseconds (0 for push plugins).
    public let interval: Int64
    let host: PluginTestHost
    private var handle: UnsafeMutableRawPointer?
    private var started = false
    private var nextPoll: Int64 = 0
    private let record = Mutex(Record())
    private let arrived = Condition()

    struct Record {
        var accepting = false
        var events: [TestEvent] = []
        var availability: [(available: Bool, reason: String)] = []
        var logs: [(level: Int, message: String)] = []
        var violations: [String] = []
        var finished = false
    }

    init(host: PluginTestHost, name: String, options: [BoundOption], interval: Int64) throws(PluginTestError) {
        self.host = host
        self.name = name
        self.interval = interval
        let context = OpaquePointer(Unmanaged.passUnretained(self).toOpaque())
        var out: UnsafeMutableRawPointer?
        let descriptor = host.plugin.descriptor
        let (status, message) = withCreateArgs(name: name, options: options, interval: interval, host: context,
                                               api: TestHostAPI.table) { args in
            withPluginError { err in
                withoutActuallyEscaping({ descriptor.create(&args, &out, err) }) { create in
                    host.creating.map { $0(create) } ?? create()
                }
            }
        }
        guard status == VIGIL_OK else { throw Self.failure("create", status, message) }
        guard let out else { throw PluginTestError("create returned OK but no instance") }
        handle = out
    }

    deinit {
        if let handle {
            if started { _ = Self.call { err in host.plugin.descriptor.stop(handle, err) } }
            host.plugin.descriptor.destroy(handle)
        }
    }

    // MARK: lifecycle

    /// Starts the instance and, for a polled plugin, polls once for the
    /// snapshot, as the host does.
    public func start() throws(PluginTestError) {
        guard let handle else { throw PluginTestError("the instance was destroyed") }
        record.withLock { $0.accepting = true }
        let (status, message) = Self.call { err in host.plugin.descriptor.start(handle, err) }
        guard status == VIGIL_OK else {
            record.withLock { $0.accepting = false }
            throw Self.failure("start", status, message)
        }
        started = true
        if interval > 0 {
            nextPoll = host.clock.now + interval
            try poll()
        }
    }

    /// One poll, now.
    public func poll() throws(PluginTestError) {
        guard let handle, let poll = host.plugin.descriptor.poll else {
            throw PluginTestError("\(host.description.name) is not polled")
        }
        let (status, message) = Self.call { err in poll(handle, err) }
        guard status == VIGIL_OK else { throw Self.failure("poll", status, message) }
    }

    /// Moves the host's clock forward by `duration`, polling at every
    /// interval boundary passed on the way (as the host's timer would).
    /// A poll that fails stops the advance and throws.
    public func advance(by duration: Duration) throws(PluginTestError) {
        let (s, atto) = duration.components
        let target = host.clock.now + s * 1_000_000_000 + atto / 1_000_000_000
        guard started, interval > 0 else {
            host.clock.advance(by: .nanoseconds(target - host.clock.now))
            return
        }
        while nextPoll <= target {
            host.clock.advance(by: .nanoseconds(nextPoll - host.clock.now))
            nextPoll += interval
            try poll()
        }
        host.clock.advance(by: .nanoseconds(target - host.clock.now))
    }

    /// Stops the instance. Every emit after this returns is refused
    /// (VIGIL_E_STOPPED) and counted as a violation.
    public func stop() throws(PluginTestError) {
        guard let handle else { return }
        let (status, message) = Self.call { err in host.plugin.descriptor.stop(handle, err) }
        record.withLock { $0.accepting = false }
        started = false
        guard status == VIGIL_OK else { throw Self.failure("stop", status, message) }
    }

    // MARK: what the plugin did

    /// Every event so far, in order of arrival.
    public var events: [TestEvent] { record.withLock { $0.events } }

    public func events(kind: String) -> [TestEvent] { events.filter { $0.kind == kind } }

    /// Availability as the plugin declared it, in order.
    public var availability: [(available: Bool, reason: String)] { record.withLock { $0.availability } }

    /// Log lines: level (0 debug … 5 critical) and message.
    public var logs: [(level: Int, message: String)] { record.withLock { $0.logs } }

    /// Whether the plugin called `finished`.
    public var isFinished: Bool { record.withLock { $0.finished } }

    /// Breaches of the contract seen so far: events of undeclared kinds,
    /// undeclared fields or fields of another type, emits while stopped.
    public var violations: [String] { record.withLock { $0.violations } }

    /// Waits (really, on the wall clock) until `count` events arrived, for
    /// push plugins whose workers emit on their own; returns the events.
    @discardableResult
    public func waitForEvents(_ count: Int, kind: String? = nil, timeout: Duration = .seconds(10)) -> [TestEvent] {
        let deadline = monotonic() + Int64(timeout.components.seconds) * 1_000_000_000
            + timeout.components.attoseconds / 1_000_000_000
        while true {
            let matching = events.filter { kind == nil || $0.kind == kind }
            if matching.count >= count { return matching }
            let left = deadline - monotonic()
            if left <= 0 { return matching }
            arrived.wait(nanoseconds: min(left, 50_000_000))
        }
    }

    // MARK: the host table's side

    func emit(_ event: UnsafePointer<vigil_event>) -> vigil_status {
        let e = event.pointee
        let kind = TestHostAPI.string(e.kind)
        var fields: [Field] = []
        if e.field_count > 0, let pointer = e.fields {
            for i in 0..<e.field_count {
                let f = pointer[i]
                let value: FieldValue
                switch f.value.type {
                case UInt32(VIGIL_TYPE_DOUBLE.rawValue): value = .double(f.value.as.f64)
                case UInt32(VIGIL_TYPE_INT.rawValue): value = .int(f.value.as.i64)
                case UInt32(VIGIL_TYPE_BOOL.rawValue): value = .bool(f.value.as.boolean != 0)
                case UInt32(VIGIL_TYPE_STRING.rawValue): value = .string(TestHostAPI.string(f.value.as.str))
                default: return VIGIL_E_INVALID_ARGUMENT
                }
                fields.append(Field(TestHostAPI.string(f.name), value))
            }
        }
        guard let severity = VigilCore.Severity(rawValue: UInt8(clamping: e.severity)) else { return VIGIL_E_INVALID_ARGUMENT }
        let captured = TestEvent(kind: kind, severity: severity, time: e.time_ns != 0 ? e.time_ns : host.clock.now,
                                 fields: fields)
        let problems = check(captured)
        let status = record.withLock { record -> vigil_status in
            guard record.accepting else {
                record.violations.append("emit of '\(kind)' while the instance is stopped")
                return VIGIL_E_STOPPED
            }
            record.events.append(captured)
            record.violations += problems
            return VIGIL_OK
        }
        arrived.signal()
        return status
    }

    /// The event against the declared kinds and fields.
    private func check(_ event: TestEvent) -> [String] {
        guard let kind = host.description.events.first(where: { $0.kind == event.kind }) else {
            return ["event kind '\(event.kind)' is not declared"]
        }
        var problems: [String] = []
        for field in event.fields {
            guard let spec = kind.fields.first(where: { $0.name == field.name }) else {
                if !kind.dynamicFields { problems.append("field '\(field.name)' of '\(event.kind)' is not declared") }
                continue
            }
            if spec.type != field.value.type {
                problems.append("field '\(field.name)' of '\(event.kind)' is \(field.value.type), declared \(spec.type)")
            }
        }
        return problems
    }

    func log(level: Int, message: String) { record.withLock { $0.logs.append((level, message)) } }

    func setAvailability(_ available: Bool, reason: String) {
        record.withLock { $0.availability.append((available, reason)) }
    }

    func markFinished() { record.withLock { $0.finished = true } }

    // MARK: helpers

    static func call(_ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> (vigil_status, String) {
        withPluginError(body)
    }

    static func failure(_ call: String, _ status: vigil_status, _ message: String) -> PluginTestError {
        let name = VigilHost.statusName(status)
        return PluginTestError("\(call) failed (\(name)): \(message.isEmpty ? "no reason given" : message)", status: name)
    }

}

extension FieldValue {
    var type: ValueType {
        switch self {
        case .double: .double
        case .int: .int
        case .bool: .bool
        case .string: .string
        }
    }
}

/// The host table of a test host: every call lands on the instance in `ctx`.
enum TestHostAPI {
    nonisolated(unsafe) static let table: UnsafePointer<vigil_host_api> = {
        var api = vigil_host_api()
        api.size = UInt32(MemoryLayout<vigil_host_api>.size)
        api.abi_major = UInt16(VIGIL_ABI_MAJOR)
        api.abi_minor = UInt16(VIGIL_ABI_MINOR)
        api.emit = { ctx, event in
            guard let ctx, let event else { return VIGIL_E_INVALID_ARGUMENT }
            return instance(ctx).emit(event)
        }
        api.log = { ctx, level, message in
            guard let ctx else { return }
            instance(ctx).log(level: Int(level.rawValue), message: string(message))
        }
        api.set_availability = { ctx, available, reason in
            guard let ctx else { return }
            instance(ctx).setAvailability(available != 0, reason: string(reason))
        }
        api.now_ns = { ctx in
            guard let ctx else { return 0 }
            return instance(ctx).host.clock.now
        }
        api.finished = { ctx in
            guard let ctx else { return }
            instance(ctx).markFinished()
        }
        let table = UnsafeMutablePointer<vigil_host_api>.allocate(capacity: 1)
        table.initialize(to: api)
        return UnsafePointer(table)
    }()

    static func instance(_ ctx: OpaquePointer) -> TestInstance {
        Unmanaged<TestInstance>.fromOpaque(UnsafeRawPointer(ctx)).takeUnretainedValue()
    }

    static func string(_ s: vigil_str) -> String {
        guard s.len > 0, let p = s.ptr else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: p, count: s.len), as: UTF8.self)
    }
}

/// A wake-up for waiters on events.
final class Condition: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var cond = pthread_cond_t()
    private var generation = 0

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&cond, nil)
    }

    deinit {
        pthread_cond_destroy(&cond)
        pthread_mutex_destroy(&mutex)
    }

    func signal() {
        pthread_mutex_lock(&mutex)
        generation += 1
        pthread_cond_broadcast(&cond)
        pthread_mutex_unlock(&mutex)
    }

    func wait(nanoseconds: Int64) {
        pthread_mutex_lock(&mutex)
        let start = generation
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        let total = Int64(ts.tv_nsec) + nanoseconds
        ts.tv_sec += Int(total / 1_000_000_000)
        ts.tv_nsec = Int(total % 1_000_000_000)
        while generation == start {
            if pthread_cond_timedwait(&cond, &mutex, &ts) != 0 { break }
        }
        pthread_mutex_unlock(&mutex)
    }
}

func monotonic() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}
