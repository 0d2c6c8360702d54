@preconcurrency import CVigilPlugin
import Dispatch
import Foundation
import Logging
import Synchronization
import VigilCore

/// One monitor of the manifest: a plugin instance with its options, driven on
/// its own serial queue (so a slow poll delays no other monitor), with its
/// events copied, stamped and routed on the caller's thread.
final class MonitorInstance: @unchecked Sendable {
    enum State: String { case idle, running, retrying, failed, stopped }

    let name: String
    let plugin: LoadedPlugin
    let options: [BoundOption]
    /// Poll interval in nanoseconds; 0 for push-only plugins.
    let interval: Int64
    /// Deadline of each call into the plugin, for the watchdog.
    let timeout: Int64
    let logger: Logger
    let clock: @Sendable () -> Int64
    private let bus: EventBus
    private let routes: MonitorRoutes
    private let hostEvents: HostEvents
    private let queue: DispatchQueue

    // Kind and field names as the plugin declared them, for copying an event
    // without allocating a String per name.
    private let kindNames: [String]
    private let fieldNames: [[String]]
    private let availabilityKind: Int

    // Touched only on `queue`.
    private var handle: UnsafeMutableRawPointer?
    private var timer: DispatchSourceTimer?
    private var startRetryDelay: Int64 = 0
    private var stopping = false

    private let accepting = Atomic<Bool>(false)
    private let lock = NSLockish()
    private var _state: State = .idle
    private var inFlight: (call: String, since: Int64, warned: Bool)?
    /// Availability as the plugin declared it (set_availability), as the host
    /// inferred it from an UNAVAILABLE status (cleared by the next success),
    /// and as last routed. Guarded by `lock`; events are published under it,
    /// so they leave in the order the changes happened.
    private var declared: (Bool, String)?
    private var inferred: (Bool, String)?
    private var published: (Bool, String)?
    /// Queue-confined mirror of `inferred != nil`, so a poll need not lock.
    private var inferredUnavailable = false
    /// Routes of kinds the plugin did not declare, computed once each. Guarded by `lock`.
    private var undeclaredKinds: [String: SinkSet] = [:]

    /// Set when the plugin said it has nothing more to emit (ABI 1.1 `finished`).
    let finished = Atomic<Bool>(false)
    /// Called (once) when the plugin reports `finished`, or the instance fails.
    var onDone: @Sendable () -> Void = {}

    // Self-metrics.
    let emitted = Atomic<UInt64>(0)
    let refused = Atomic<UInt64>(0)
    let polls = Atomic<UInt64>(0)
    let pollErrors = Atomic<UInt64>(0)
    let pollNanoseconds = Atomic<UInt64>(0)

    /// The manifest's entry, for locating a plugin's complaints about options.
    let config: MonitorConfig
    /// Thresholds and rules that read this monitor's events; nil when none does.
    private let conditions: ConditionProcessor?

    init(config: MonitorConfig, plugin: LoadedPlugin, options: [BoundOption], bus: EventBus,
         routes compiler: RouteCompiler, hostEvents: HostEvents, logger: Logger,
         conditions: ConditionProcessor? = nil,
         clock: @escaping @Sendable () -> Int64 = realtimeNanoseconds) {
        self.name = config.name
        self.conditions = conditions
        self.config = config
        self.plugin = plugin
        self.options = options
        let description = plugin.description
        self.interval = description.effectiveInterval(config.interval)
        self.timeout = config.timeout ?? max(5_000_000_000, self.interval)
        var logger = logger
        logger[metadataKey: "monitor"] = "\(config.name)"
        self.logger = logger
        self.clock = clock
        self.bus = bus
        self.hostEvents = hostEvents
        let kinds = description.events.map(\.kind) + PluginDescription.hostKinds.map(\.kind).filter { kind in
            !description.events.contains { $0.kind == kind }
        }
        self.kindNames = kinds
        self.fieldNames = kinds.map { kind in
            (description.events.first { $0.kind == kind } ?? PluginDescription.hostKinds.first { $0.kind == kind })!
                .fields.map(\.name)
        }
        self.availabilityKind = kinds.firstIndex(of: "availability")!
        self.routes = compiler.routes(monitor: config.name, kinds: kinds)
        self.queue = DispatchQueue(label: "vigil.monitor.\(config.name)")
    }

    static func from(_ ctx: OpaquePointer) -> MonitorInstance {
        Unmanaged<MonitorInstance>.fromOpaque(UnsafeRawPointer(ctx)).takeUnretainedValue()
    }

    /// The opaque handle given to the plugin. The instance is retained for the
    /// life of the process, as plugin threads may hold the handle.
    private lazy var context: OpaquePointer = OpaquePointer(Unmanaged.passRetained(self).toOpaque())

    var state: State { lock.withLock { _state } }
    private func set(_ state: State) { lock.withLock { _state = state } }

    // MARK: - lifecycle (on `queue`)

    /// Creates and starts the instance, then polls it once (the snapshot) and
    /// every interval after. Returns at once.
    func launch() {
        queue.async { [self] in
            guard !stopping else { return }
            if handle == nil {
                let (status, message) = create()
                switch status {
                case VIGIL_OK:
                    break
                case VIGIL_E_UNAVAILABLE, VIGIL_E_TEMPORARY:
                    notYet(call: "create", status: status, message: message)
                    retryLater { [self] in launch() }
                    return
                default:
                    fail(call: "create", status: status, message: message)
                    return
                }
            }
            startInstance()
        }
    }

    /// UNAVAILABLE or TEMPORARY from create or start: reported, retried later.
    private func notYet(call: String, status: vigil_status, message: String) {
        set(.retrying)
        if status == VIGIL_E_UNAVAILABLE {
            infer(available: false, reason: message.isEmpty ? "unavailable" : message)
        } else {
            logger.warning("\(call) failed for now: \(message.isEmpty ? "no reason given" : message); retrying")
        }
    }

    /// Runs `body` on the queue after a backoff that doubles from the interval
    /// (at least 1 s) up to a minute.
    private func retryLater(_ body: @escaping @Sendable () -> Void) {
        startRetryDelay = min(max(startRetryDelay * 2, max(interval, 1_000_000_000)), 60_000_000_000)
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(startRetryDelay))) { body() }
    }

    private func create() -> (vigil_status, String) {
        var out: UnsafeMutableRawPointer?
        let result = withCreateArgs(name: name, options: options, interval: interval, host: context, api: HostAPI.table) { args in
            call("create") { err in plugin.descriptor.create(&args, &out, err) }
        }
        if result.0 == VIGIL_OK {
            guard let out else { return (VIGIL_E_FATAL, "create returned OK but no instance") }
            handle = out
        }
        return result
    }

    private func startInstance() {
        guard let handle, !stopping else { return }
        accepting.store(true, ordering: .releasing)
        let (status, message) = call("start") { err in plugin.descriptor.start(handle, err) }
        switch status {
        case VIGIL_OK:
            set(.running)
            startRetryDelay = 0
            if inferredUnavailable { infer(available: true, reason: "") }
            if plugin.descriptor.poll != nil {
                pollOnce()
                scheduleTimer()
            }
        case VIGIL_E_UNAVAILABLE, VIGIL_E_TEMPORARY:
            accepting.store(false, ordering: .releasing)
            notYet(call: "start", status: status, message: message)
            retryLater { [self] in startInstance() }
        default:
            accepting.store(false, ordering: .releasing)
            fail(call: "start", status: status, message: message)
        }
    }

    private func scheduleTimer() {
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let leeway = DispatchTimeInterval.nanoseconds(Int(min(interval / 50, 10_000_000)))
        timer.schedule(deadline: .now() + .nanoseconds(Int(interval)), repeating: .nanoseconds(Int(interval)), leeway: leeway)
        timer.setEventHandler { [weak self] in self?.pollOnce() }
        self.timer = timer
        timer.resume()
    }

    /// Polls now, outside the schedule (`vigil ctl poll` later; tests now).
    func pollNow() {
        queue.async { [self] in
            if state == .running { pollOnce() }
        }
    }

    private func pollOnce() {
        guard let handle, let poll = plugin.descriptor.poll, !stopping else { return }
        let started = monotonicNanoseconds()
        let (status, message) = call("poll") { err in poll(handle, err) }
        polls.add(1, ordering: .relaxed)
        pollNanoseconds.add(UInt64(max(0, monotonicNanoseconds() - started)), ordering: .relaxed)
        switch status {
        case VIGIL_OK:
            if inferredUnavailable { infer(available: true, reason: "") }
            conditions?.heartbeat(name)
        case VIGIL_E_TEMPORARY:
            let n = pollErrors.add(1, ordering: .relaxed).newValue
            // The first failures, then one in a hundred: a broken sensor must not flood the log.
            if n <= 3 || n % 100 == 0 {
                logger.warning("poll failed (\(n) so far): \(message.isEmpty ? "no reason given" : message)")
            }
        case VIGIL_E_UNAVAILABLE:
            pollErrors.add(1, ordering: .relaxed)
            infer(available: false, reason: message.isEmpty ? "unavailable" : message)
        default:
            pollErrors.add(1, ordering: .relaxed)
            timer?.cancel()
            timer = nil
            _ = call("stop") { err in plugin.descriptor.stop(handle, err) }
            accepting.store(false, ordering: .releasing)
            fail(call: "poll", status: status, message: message)
        }
    }

    /// Reports a failed call, destroys the instance and leaves it failed.
    private func fail(call: String, status: vigil_status, message: String) {
        let why = message.isEmpty ? "no reason given" : message
        let at = status == VIGIL_E_INVALID_CONFIG ? " at \(config.locate(pluginMessage: why).location)" : ""
        logger.error("\(call) failed (\(Self.statusName(status)))\(at): \(why); the monitor is stopped, the others go on")
        set(.failed)
        defer { onDone() }
        if let handle {
            plugin.descriptor.destroy(handle)
            self.handle = nil
        }
        hostEvents.instanceFailed(monitor: name, plugin: plugin.description.name, call: call,
                                  status: Self.statusName(status), message: why)
        conditions?.monitorGone(name)
    }

    /// Creates the instance and destroys it again, on its queue; returns the
    /// nanoseconds create took, or the failure (for `plugins describe --timing`).
    func timeCreate() -> Result<Int64, PluginRefusal> {
        queue.sync {
            let started = monotonicNanoseconds()
            let (status, message) = create()
            let took = monotonicNanoseconds() - started
            guard status == VIGIL_OK, let handle else {
                return .failure(PluginRefusal(path: plugin.description.path, reason: "create: \(message)"))
            }
            plugin.descriptor.destroy(handle)
            self.handle = nil
            return .success(took)
        }
    }

    /// Stops and destroys the instance; `completion` runs on the instance's queue.
    func shutdown(completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            stopping = true
            timer?.cancel()
            timer = nil
            if let handle {
                if state == .running {
                    let (status, message) = call("stop") { err in plugin.descriptor.stop(handle, err) }
                    if status != VIGIL_OK {
                        logger.warning("stop returned \(Self.statusName(status)): \(message)")
                    }
                }
                accepting.store(false, ordering: .releasing)
                plugin.descriptor.destroy(handle)
                self.handle = nil
            }
            if state != .failed { set(.stopped) }
            completion()
        }
    }

    /// Runs one call into the plugin with a fresh error buffer, recording it
    /// for the watchdog.
    private func call(_ what: String, _ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> (vigil_status, String) {
        lock.withLock { inFlight = (what, monotonicNanoseconds(), false) }
        defer { lock.withLock { inFlight = nil } }
        return withPluginError(body)
    }

    /// The call in progress if it has run past `deadline` (and was not reported yet).
    func overdueCall(deadline: Int64) -> (String, Int64)? {
        lock.withLock {
            guard let current = inFlight, !current.warned else { return nil }
            let elapsed = monotonicNanoseconds() - current.since
            guard elapsed > deadline else { return nil }
            inFlight?.warned = true
            return (current.call, elapsed)
        }
    }

    static func statusName(_ status: vigil_status) -> String { VigilHost.statusName(status) }

    // MARK: - host functions (any thread)

    /// Copies a plugin's event, stamps it and routes it.
    func emit(_ event: UnsafePointer<vigil_event>) -> vigil_status {
        guard accepting.load(ordering: .acquiring) else {
            refused.add(1, ordering: .relaxed)
            return VIGIL_E_STOPPED
        }
        let size = Int(UnsafeRawPointer(event).load(as: UInt32.self))
        guard size >= ABISizes.event else { return VIGIL_E_INVALID_ARGUMENT }
        // A newer plugin's larger event is read up to our size; an older,
        // smaller one is copied into a zeroed struct.
        let e = size >= MemoryLayout<vigil_event>.size ? event.pointee
                                                       : PluginLoader.copyStruct(vigil_event.self, from: event, size: size)
        guard e.severity <= UInt32(Severity.critical.rawValue), let severity = Severity(rawValue: UInt8(e.severity)) else {
            return VIGIL_E_INVALID_ARGUMENT
        }
        let kindIndex = index(of: e.kind, in: kindNames)
        let kind = kindIndex >= 0 ? kindNames[kindIndex] : HostAPI.string(e.kind)
        guard !kind.isEmpty else { return VIGIL_E_INVALID_ARGUMENT }
        var fields: [Field] = []
        if e.field_count > 0 {
            guard let pointer = e.fields, e.field_count <= 65_536 else { return VIGIL_E_INVALID_ARGUMENT }
            fields.reserveCapacity(e.field_count)
            let declared = kindIndex >= 0 ? fieldNames[kindIndex] : []
            for i in 0..<e.field_count {
                let f = pointer[i]
                // Plugins emit fields in declared order: try that position first.
                let nameIndex = i < declared.count && matches(f.name, declared[i]) ? i : index(of: f.name, in: declared)
                let fieldName = nameIndex >= 0 ? declared[nameIndex] : HostAPI.string(f.name)
                let value: FieldValue
                switch f.value.type {
                case UInt32(VIGIL_TYPE_DOUBLE.rawValue): value = .double(f.value.as.f64)
                case UInt32(VIGIL_TYPE_INT.rawValue): value = .int(f.value.as.i64)
                case UInt32(VIGIL_TYPE_BOOL.rawValue): value = .bool(f.value.as.boolean != 0)
                case UInt32(VIGIL_TYPE_STRING.rawValue):
                    if f.value.as.str.len > 0 && f.value.as.str.ptr == nil { return VIGIL_E_INVALID_ARGUMENT }
                    value = .string(HostAPI.string(f.value.as.str))
                default:  // option-only types are a mistake; types past JSON are from a newer ABI
                    return f.value.type > UInt32(VIGIL_TYPE_JSON.rawValue) ? VIGIL_E_UNSUPPORTED : VIGIL_E_INVALID_ARGUMENT
                }
                fields.append(Field(fieldName, value))
            }
        }
        var copy = Event(time: e.time_ns != 0 ? e.time_ns : clock(), monitor: name, plugin: plugin.description.name,
                         kind: kind, severity: severity, fields: fields)
        let targets = kindIndex >= 0 ? routes.sinks(kindIndex: kindIndex, severity: severity)
                                     : undeclaredRoute(kind) & routes.severityMask(severity)
        bus.publish(&copy, to: targets)
        conditions?.observe(copy)
        emitted.add(1, ordering: .relaxed)
        return VIGIL_OK
    }

    /// The index of the name equal to `s`'s bytes, or -1.
    @inline(__always)
    private func index(of s: vigil_str, in names: [String]) -> Int {
        for i in names.indices where matches(s, names[i]) { return i }
        return -1
    }

    /// Whether a plugin's string has exactly the bytes of `name`.
    @inline(__always)
    private func matches(_ s: vigil_str, _ name: String) -> Bool {
        guard let ptr = s.ptr, name.utf8.count == s.len else { return false }
        let equal = name.utf8.withContiguousStorageIfAvailable { memcmp($0.baseAddress!, ptr, s.len) == 0 }
        return equal ?? name.utf8.elementsEqual(UnsafeRawBufferPointer(start: ptr, count: s.len))
    }

    func pluginLog(level: Int, message: String) {
        let severity = Severity(rawValue: UInt8(clamping: max(0, min(level, 5)))) ?? .info
        logger.log(level: severity.logLevel, "\(message)", metadata: ["plugin": "\(plugin.description.name)"])
    }

    func markFinished() {
        guard !finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        logger.info("finished: nothing more to emit")
        conditions?.monitorGone(name)
        onDone()
    }

    /// Finished, or failed: nothing more will come from this instance.
    var isDone: Bool { finished.load(ordering: .acquiring) || state == .failed }

    /// Sinks for a kind the plugin did not declare, glob-matched once per kind.
    private func undeclaredRoute(_ kind: String) -> SinkSet {
        lock.withLock {
            if let known = undeclaredKinds[kind] { return known }
            let sinks = routes.sinks(kind: kind)
            if undeclaredKinds.count < 1024 { undeclaredKinds[kind] = sinks }
            return sinks
        }
    }

    /// The plugin declares its source present or absent (`set_availability`).
    func setAvailability(_ available: Bool, reason: String) {
        let event = lock.withLock {
            declared = (available, available ? "" : reason)
            return publishAvailabilityLocked()
        }
        if let event { conditions?.observe(event) }  // outside the lock: a rule's action may be spawned
    }

    /// The host infers availability from statuses; `true` clears the inference.
    /// On the instance's queue.
    private func infer(available: Bool, reason: String) {
        inferredUnavailable = !available
        let event = lock.withLock {
            inferred = available ? nil : (false, reason)
            return publishAvailabilityLocked()
        }
        if let event { conditions?.observe(event) }
    }

    /// Routes an `availability` event when the effective availability changed.
    /// A source is taken as available until said otherwise, so nothing is
    /// routed for a monitor that was always available. Returns the event routed.
    private func publishAvailabilityLocked() -> Event? {
        let effective = inferred ?? declared ?? (true, "")
        let previous = published ?? (true, "")
        guard effective.0 != previous.0 || effective.1 != previous.1 else { return nil }
        published = effective
        if effective.0 {
            logger.notice("source available")
        } else {
            logger.notice("source unavailable: \(effective.1)")
        }
        var event = Event(time: clock(), monitor: name, plugin: plugin.description.name, kind: "availability",
                          severity: effective.0 ? .info : .notice,
                          fields: [Field("available", .bool(effective.0)), Field("reason", .string(effective.1))])
        // Never waits: this runs under the instance lock, maybe on a plugin's thread.
        bus.publish(&event, to: routes.sinks(kindIndex: availabilityKind, severity: event.severity), wait: false)
        return event
    }
}

/// C copies of strings for the duration of one call into a plugin.
package struct StringArena {
    private var blocks: [UnsafeMutableRawPointer] = []

    package init() {}

    package mutating func str(_ s: String) -> vigil_str {
        let bytes = Array(s.utf8)
        let block = UnsafeMutableRawPointer.allocate(byteCount: bytes.count + 1, alignment: 1)
        block.copyMemory(from: bytes, byteCount: bytes.count)
        block.storeBytes(of: 0, toByteOffset: bytes.count, as: UInt8.self)
        blocks.append(block)
        return vigil_str(ptr: block.assumingMemoryBound(to: CChar.self), len: bytes.count)
    }

    package mutating func value(_ v: OptionValue) -> vigil_value {
        var out = vigil_value()
        switch v {
        case .none: out.type = UInt32(VIGIL_TYPE_NONE.rawValue)
        case .bool(let b): out.type = UInt32(VIGIL_TYPE_BOOL.rawValue); out.as.boolean = b ? 1 : 0
        case .int(let i): out.type = UInt32(VIGIL_TYPE_INT.rawValue); out.as.i64 = i
        case .double(let d): out.type = UInt32(VIGIL_TYPE_DOUBLE.rawValue); out.as.f64 = d
        case .string(let s): out.type = UInt32(VIGIL_TYPE_STRING.rawValue); out.as.str = str(s)
        case .duration(let ns): out.type = UInt32(VIGIL_TYPE_DURATION.rawValue); out.as.i64 = ns
        case .size(let b): out.type = UInt32(VIGIL_TYPE_SIZE.rawValue); out.as.i64 = b
        case .json(let j): out.type = UInt32(VIGIL_TYPE_JSON.rawValue); out.as.str = str(j)
        }
        return out
    }

    package func free() {
        for block in blocks { block.deallocate() }
    }
}
