import Glibc
import Synchronization
import VigilCore
import VigilABI
import VigilKit

/// One plugin instance under test. Lifecycle calls run on the caller's
/// thread, one at a time, as the host guarantees; events may arrive from any
/// thread (a push monitor's workers) and are collected in order of arrival.
public final class TestInstance: PluginHostCallbacks, @unchecked Sendable {  // the handle and flags are the test's thread's, as the host's calls are one at a time; what plugin threads reach is behind `record`
    public let name: String
    /// Poll interval in nanoseconds (0 for push plugins).
    public let interval: Int64
    let host: PluginTestHost
    private var handle: UnsafeMutableRawPointer?
    /// The plugin's host context: the host table every host gives, leading here.
    private var context: HostContext!
    private let decoder: EventDecoder
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
        self.decoder = EventDecoder(monitor: name, plugin: host.description.name, events: host.description.events)
        // Reached through a weak proxy: the instance destroys itself in
        // deinit (and retires the context first), so the context must not
        // keep it alive.
        let context = HostContext.make(for: WeakHostCallbacks(self))
        self.context = context
        handle = try host.create(name, options: options, interval: interval, context: context)
    }

    deinit {
        if let handle {
            if started { _ = Self.call { err in host.plugin.descriptor.stop(handle, err) } }
            host.plugin.descriptor.destroy(handle)
        }
        context.retire()
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
        let deadline = monotonicNanoseconds() + Int64(timeout.components.seconds) * 1_000_000_000
            + timeout.components.attoseconds / 1_000_000_000
        while true {
            let matching = events.filter { kind == nil || $0.kind == kind }
            if matching.count >= count { return matching }
            let left = deadline - monotonicNanoseconds()
            if left <= 0 { return matching }
            arrived.wait(nanoseconds: min(left, 50_000_000))
        }
    }

    // MARK: the host table's side

    /// The host's verdict, from the decoder the host itself uses: an event
    /// `vigil` would refuse is refused here too (and recorded as a violation);
    /// one it would route but that differs from the declarations is kept
    /// and its differences recorded.
    package func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        var kindIndex = -1
        var mismatches: [DeclarationMismatch] = []
        let decoded = Result { () throws(EventDefect) -> Event in
            try decoder.decode(event, now: { host.clock.now }, kindIndex: &kindIndex, mismatches: &mismatches)
        }
        let status = record.withLock { record -> vigil_status in
            guard record.accepting else {
                let kind = (try? decoded.get().kind) ?? "?"
                record.violations.append("emit of '\(shownText(kind))' while the instance is stopped")
                return VIGIL_E_STOPPED
            }
            switch decoded {
            case .failure(let defect):
                record.violations.append("refused (\(defect.reason.name)): \(defect.message)")
                return defect.status
            case .success(let e):
                record.events.append(TestEvent(kind: e.kind, severity: e.severity, time: e.time, fields: e.fields))
                record.violations += mismatches.map(\.description)
                return VIGIL_OK
            }
        }
        arrived.signal()
        return status
    }

    package func log(level: Int, message: String, cut: Int) {
        record.withLock { $0.logs.append((level, cut > 0 ? "\(message)… [cut \(cut) bytes]" : message)) }
    }

    package func now() -> Int64 { host.clock.now }

    package func setAvailability(_ available: Bool, reason: String) {
        record.withLock { $0.availability.append((available, reason)) }
    }

    package func markFinished() { record.withLock { $0.finished = true } }

    // MARK: helpers

    static func call(_ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> (vigil_status, String) {
        withPluginError(body)
    }

    static func failure(_ call: String, _ status: vigil_status, _ message: String) -> PluginTestError {
        let name = VigilABI.statusName(status)
        return PluginTestError("\(call) failed (\(name)): \(message.isEmpty ? "no reason given" : message)", status: name)
    }

}

/// A wake-up for waiters on events: a generation count, and how many wait
/// for it to change.
final class Condition: Sendable {
    private let state = Mutex<(generation: Int, waiters: Int)>((0, 0))
    private let wakeup = Wakeup()

    func signal() {
        let waiters = state.withLock { state in
            state.generation += 1
            defer { state.waiters = 0 }
            return state.waiters
        }
        wakeup.wake(waiters)
    }

    /// Waits until `signal` is called, or `nanoseconds` have passed.
    func wait(nanoseconds: Int64) {
        let deadline = monotonicNanoseconds().addingSaturating(nanoseconds)
        let start = state.withLock { $0.generation }
        var timedOut = false
        while state.withLock({ state in
            if timedOut && state.waiters > 0 { state.waiters -= 1 }
            guard !timedOut, state.generation == start else { return false }
            state.waiters += 1
            return true
        }) {
            timedOut = !wakeup.wait(until: deadline)
        }
    }
}
