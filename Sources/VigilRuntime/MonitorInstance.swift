import Dispatch
import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

@preconcurrency import CVigilPlugin

/// One monitor of the manifest: a plugin instance with its options, driven on
/// its own serial queue (so a slow poll delays no other monitor), with its
/// events copied, stamped and routed on the caller's thread. The plugin runs
/// in this process or in a runner (`transport`); the instance is the same
/// either way, and supervises a runner: a crash, a hang or a crossed limit is
/// reported and restarted as the manifest says, then quarantined.
package final class MonitorInstance: RunnerReceiver, @unchecked Sendable {  // its state is behind `lock` or on its queue; its counters are atomics
    package enum State: String { case idle, running, retrying, restarting, quarantined, failed, stopped }

    package let name: String
    /// The plugin as it described itself (in this process or in its runner).
    package let description: PluginDescription
    /// Where the plugin's code runs.
    package let transport: any PluginTransport
    let options: [BoundOption]
    /// Poll interval in nanoseconds; 0 for push-only plugins.
    package let interval: Int64
    /// Deadline of each call into the plugin, for the watchdog.
    let timeout: Int64
    let logger: Logger
    let clock: @Sendable () -> Int64
    private let bus: EventBus
    /// Where its events go; compiled again by the bus after a reload.
    let route: Route
    private let hostEvents: HostEvents
    private let queue: DispatchQueue

    /// Copies the plugin's events (the one decoder every side uses).
    private let decoder: EventDecoder
    package var eventDecoder: EventDecoder? { decoder }
    /// Index of the host's `availability` kind in the route table.
    private let availabilityKind: Int

    // Touched only on `queue`.
    private var timer: DispatchSourceTimer?
    /// Polls of the current instance (since its create), for crash reports.
    private var pollsOfInstance = 0
    /// Attempts of `retryLater` since the last success.
    private var startRetries = 0
    private var stopping = false

    private let accepting = Atomic<Bool>(false)
    /// The host has begun to stop (`hostIsStopping`), maybe before this
    /// monitor's own stop runs: a runner that ends now is not restarted
    /// (under systemd the SIGTERM reaches every runner with the host's).
    private let hostStopping = Atomic<Bool>(false)
    private let lock = Lock()
    private var _state: State = .idle
    private var inFlight: (call: String, since: Int64, warned: Bool)?
    /// Availability as the plugin declared it (set_availability), as the host
    /// inferred it from an UNAVAILABLE status (cleared by the next success),
    /// and as last routed. Guarded by `lock`; events are published under it,
    /// so they leave in the order the changes happened.
    private var declared: (Bool, String)?
    private var inferred: (Bool, String)?
    /// The last failure, crash or poll error, in words; when (realtime ns). Guarded by `lock`.
    private var lastError: (text: String, at: Int64)?
    /// The last poll: when it began (realtime ns) and how long it took. Guarded by `lock`.
    private var lastPoll: (at: Int64, took: Int64)?
    private var published: (Bool, String)?
    /// Queue-confined mirror of `inferred != nil`, so a poll need not lock.
    private var inferredUnavailable = false
    /// Availability changes are reported at most `availabilityBurst` at once,
    /// then one a second: a flapping source changes its state, not the log.
    static let availabilityBurst = 10.0
    private var availabilityTokens = MonitorInstance.availabilityBurst
    private var availabilityRefilled = monotonicNanoseconds()
    private var availabilitySuppressed = 0
    private var availabilityDeferred = false

    /// Set when the plugin said it has nothing more to emit (ABI 1.1 `finished`).
    let finished = Atomic<Bool>(false)
    /// Called (once) when the plugin reports `finished`, or the instance fails.
    var onDone: @Sendable () -> Void = {}

    // Self-metrics.
    package let emitted = Atomic<UInt64>(0)
    /// Emits the host refused, by reason.
    package let refusals = RefusalCounters()
    /// Calls through contexts of destroyed instances (ignored).
    var lateCalls: UInt64 { transport.lateCalls }
    /// The plugin's log lines pass here: cut, kept for a crash report,
    /// rate-limited and counted.
    let logGate: PluginLogGate

    // Supervision (runners only), on `queue`.
    private var budget: RestartBudget
    /// The runner's `limits:`, checked by the host's watchdog. Guarded by `lock`.
    private var limitWatch: RunnerLimits
    /// The plugin file when the instance was quarantined: the quarantine
    /// holds until the file changes or a restart is asked for.
    private var quarantinedFile: PluginFileIdentity?
    private var quarantineCheck: DispatchSourceTimer?
    /// Runner crashes, hangs and limit kills so far.
    package let crashes = Atomic<UInt64>(0)
    package let restarts = Atomic<UInt64>(0)
    package let polls = Atomic<UInt64>(0)
    package let pollErrors = Atomic<UInt64>(0)
    let pollNanoseconds = Atomic<UInt64>(0)
    /// How long each kind of call into the plugin took.
    let callTimes = CallTimes()

    /// The manifest's entry, for locating a plugin's complaints about options.
    let config: MonitorConfig
    /// Thresholds and rules that read this monitor's events; nil when none does.
    private let conditions: ConditionProcessor?
    /// Which of this monitor's events `conditions` reads now (a reload may
    /// change it): bit i for kind index i of `route` below 63, bit 63 for
    /// any other kind; 0 when the monitor is not watched. An event of a kind
    /// no condition reads costs the conditions nothing.
    private let observedKinds = Atomic<UInt64>(0)
    /// The plugin as resolved for this instance, and its configuration's
    /// fingerprint: a reload keeps the instance while both are the same.
    let plugin: HostedPlugin?
    let fingerprint: String
    /// Bumped (on `queue`) when an operator stops or starts the monitor, so
    /// that a retry or restart scheduled before does not undo it.
    private var generation = 0
    /// Stopped by an operator (`vigil ctl stop`): no restart, no done.
    private var stoppedByOperator = false
    /// False for `vigil run --once`: the poll after start is the only one.
    private let schedulesPolls: Bool

    init(config: MonitorConfig, description: PluginDescription, transport: any PluginTransport, options: [BoundOption],
         bus: EventBus, hostEvents: HostEvents, logger: Logger,
         conditions: ConditionProcessor? = nil, plugin: HostedPlugin? = nil, fingerprint: String = "",
         clock: @escaping @Sendable () -> Int64 = realtimeNanoseconds, schedulesPolls: Bool = true) {
        self.name = config.name
        self.schedulesPolls = schedulesPolls
        self.conditions = conditions
        self.plugin = plugin
        self.fingerprint = fingerprint
        self.config = config
        self.description = description
        self.transport = transport
        self.options = options
        self.budget = RestartBudget(config: config.supervision)
        self.limitWatch = RunnerLimits(limits: config.limits)
        self.interval = description.effectiveInterval(config.interval)
        self.timeout = config.timeout ?? max(5_000_000_000, self.interval)
        var logger = logger
        logger[metadataKey: "monitor"] = "\(config.name)"
        self.logger = logger
        self.logGate = PluginLogGate(owner: "monitor \(config.name)", plugin: description.name, logger: logger)
        self.clock = clock
        self.bus = bus
        self.hostEvents = hostEvents
        // Route table: the plugin's kinds in declared order (the decoder's
        // indexes), then the host's own (reserved, so never declared).
        let kinds = description.events.map(\.kind) + PluginDescription.hostKinds.map(\.kind)
        self.decoder = EventDecoder(monitor: config.name, plugin: description.name, events: description.events)
        self.availabilityKind = kinds.firstIndex(of: "availability")!
        self.route = bus.route(source: config.name, kinds: kinds)
        self.queue = DispatchQueue(label: "vigil.monitor.\(config.name)")
        (transport as? RunnerTransport)?.whenDiedOutsideACall { [weak self] death, runner in self?.runnerDied(death, of: runner) }
    }

    package var state: State { lock.withLock { _state } }
    private func set(_ state: State) { lock.withLock { _state = state } }

    // MARK: - lifecycle (on `queue`)

    /// The first create, before any monitor of the run starts
    /// (`VigilRuntime.prepareAll`): its answer, or nil (created already,
    /// stopping, or it crashed: then supervised as any crash). `launch`
    /// goes on from it and does not create again.
    func prepare(_ done: @escaping @Sendable ((status: vigil_status, message: String)?) -> Void) {
        queue.async { [self] in
            guard !stopping, !transport.hasInstance else { return done(nil) }
            switch create() {
            case .returned(let status, let message):
                if status != VIGIL_OK { prepared = .answered(status, message) }
                done((status, message))
            case .crashed:
                prepared = .crashed
                done(nil)
            }
        }
    }

    private enum Prepared {
        case answered(vigil_status, String)
        /// Its crash was handled (a restart is scheduled): `launch` leaves it.
        case crashed
    }
    /// What `prepare`'s create said, for the `launch` after it. On `queue`.
    private var prepared: Prepared?

    /// Creates (unless `prepare` did) and starts the instance, then polls it
    /// once (the snapshot) and every interval after. Returns at once.
    func launch() {
        queue.async { [self] in
            guard !stopping else { return }
            if !transport.hasInstance {
                let answer: (vigil_status, String)
                switch prepared {
                case .crashed?:
                    prepared = nil
                    return
                case .answered(let status, let message)?:
                    prepared = nil
                    answer = (status, message)
                case nil:
                    guard case .returned(let status, let message) = create() else { return }
                    answer = (status, message)
                }
                let (status, message) = answer
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
        let delay = Backoff(min: min(max(interval, 1_000_000_000), 60_000_000_000), max: 60_000_000_000, jitter: 0).wait(attempt: startRetries)
        startRetries += 1
        let scheduledIn = generation
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [self] in
            guard generation == scheduledIn else { return }  // stopped or started again since
            body()
        }
    }

    /// One create attempt; a failed one leaves nothing behind (its context
    /// is retired, or its runner gone). A crash is handled here.
    private func create() -> CallOutcome {
        pollsOfInstance = 0
        let outcome = call("create") { transport.create(name: name, options: options, interval: interval,
                                                        receiver: self, timeout: timeout) }
        if case .crashed(let death) = outcome { crashed(call: "create", death: death) }
        return outcome
    }

    /// Destroys the plugin's instance, if any. On `queue`.
    private func destroyInstance() {
        accepting.store(false, ordering: .releasing)
        transport.destroy(timeout: timeout)
    }

    private func startInstance() {
        guard transport.hasInstance, !stopping else { return }
        accepting.store(true, ordering: .releasing)
        let outcome = call("start") { transport.start(timeout: timeout) }
        guard case .returned(let status, let message) = outcome else {
            if case .crashed(let death) = outcome { crashed(call: "start", death: death) }
            return
        }
        switch status {
        case VIGIL_OK:
            set(.running)
            startRetries = 0
            if inferredUnavailable { infer(available: true, reason: "") }
            if transport.polls {
                pollOnce()
                if schedulesPolls { scheduleTimer() }
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
    package func pollNow() {
        queue.async { [self] in
            if state == .running { pollOnce() }
        }
    }

    private func pollOnce() {
        guard transport.hasInstance, transport.polls, !stopping else { return }
        let started = monotonicNanoseconds()
        polls.add(1, ordering: .relaxed)
        pollsOfInstance += 1
        let number = pollsOfInstance
        let startedAt = clock()
        let outcome = call("poll") { transport.poll(timeout: timeout) }
        let took = max(0, monotonicNanoseconds() - started)
        pollNanoseconds.add(UInt64(took), ordering: .relaxed)
        // Told once its outcome is counted (an error, a crash): whoever sees
        // the poll done (`--once`) sees how it went.
        defer { lock.withLock { lastPoll = (startedAt, took) } }
        guard case .returned(let status, let message) = outcome else {
            if case .crashed(let death) = outcome { crashed(call: "poll #\(number)", death: death) }
            return
        }
        switch status {
        case VIGIL_OK:
            if inferredUnavailable { infer(available: true, reason: "") }
            if isObserved { conditions?.heartbeat(name) }
        case VIGIL_E_TEMPORARY:
            let n = pollErrors.add(1, ordering: .relaxed).newValue
            noteError("poll failed: \(message.isEmpty ? "no reason given" : message)")
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
            if case .crashed(let death) = call("stop", { transport.stop(timeout: timeout) }) {
                crashed(call: "stop", death: death)
                return
            }
            accepting.store(false, ordering: .releasing)
            fail(call: "poll", status: status, message: message)
        }
    }

    /// Reports a failed call, destroys the instance and leaves it failed.
    private func fail(call: String, status: vigil_status, message: String) {
        let why = message.isEmpty ? "no reason given" : message
        let at = status == VIGIL_E_INVALID_CONFIG ? " at \(config.locate(pluginMessage: why).location)" : ""
        let supervised = transport.runnerPID != nil || transport is RunnerTransport
        logger.error("\(call) failed (\(Self.statusName(status)))\(at): \(why)\(supervised ? "" : "; the monitor is stopped, the others go on")")
        noteError("\(call) failed (\(Self.statusName(status)))\(at): \(why)")
        destroyInstance()
        // Failed before it is told: whoever acts on the event sees the state it names.
        if !supervised { set(.failed) }
        hostEvents.instanceFailed(monitor: name, plugin: description.name, call: call,
                                  status: Self.statusName(status), message: why)
        if supervised {
            supervise(finished: false)
        } else {
            stopForGood()
        }
    }

    /// The monitor will not run again (failed, or its policy says never).
    private func stopForGood() {
        set(.failed)
        if isObserved { conditions?.monitorGone(name) }
        onDone()
    }

    // MARK: - supervision (runners)

    /// The runner ended in `call` (a crash, an exit, a hang killed, a
    /// limit): reported with the plugin's last words, then supervised.
    private func crashed(call: String, death: RunnerDeath) {
        accepting.store(false, ordering: .releasing)
        (transport as? RunnerTransport)?.discard()
        timer?.cancel()
        timer = nil
        crashes.add(1, ordering: .relaxed)
        let lastWords = logGate.recentLines
        logger.error("the plugin's runner ended in \(call): \(death)\(logGate.lastWords)")
        noteError("the plugin's runner ended in \(call): \(death)")
        hostEvents.instanceCrashed(monitor: name, plugin: description.path, call: call, death: death, lastLog: lastWords)
        guard !stopping, !stoppedByOperator else { return }
        if hostStopping.load(ordering: .acquiring) {
            logger.notice("not restarted: vigil is stopping")
            return
        }
        supervise(finished: false)
    }

    /// The runner died while no call was in flight (a plugin thread
    /// crashed between polls): handled on the queue like a crash in a call,
    /// if `runner` still serves the instance (a runner let go by a stop or
    /// restart queued before is not the one running now). Also when the host
    /// has begun to stop and this monitor's stop has not run yet: the death
    /// is told (not restarted), not lost with the shutdown.
    private func runnerDied(_ death: RunnerDeath, of runner: RunnerProcess) {
        queue.async { [self] in
            guard !stoppedByOperator, state == .running || state == .retrying,
                  (transport as? RunnerTransport)?.currentProcess === runner else { return }
            crashed(call: "running (between calls)", death: death)
        }
    }

    /// Restarts, quarantines or stops the monitor as its policy says. On `queue`.
    private func supervise(finished: Bool) {
        let decision = budget.decide(now: monotonicNanoseconds(), jitter: Double.random(in: 0..<1), finished: finished)
        switch decision {
        case .stop:
            stopForGood()
        case .restart(let after):
            set(.restarting)
            restarts.add(1, ordering: .relaxed)
            logger.notice("restarting in \(RunnerProcess.seconds(after)) (restart \(budget.restarts(now: monotonicNanoseconds())) of at most \(budget.config.maxRestarts) in \(RunnerProcess.seconds(budget.config.restartWindow)))")
            let scheduledIn = generation
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: after))) { [self] in
                guard !stopping, !hostStopping.load(ordering: .acquiring), generation == scheduledIn,
                      state == .restarting else { return }
                launch()
            }
        case .quarantine:
            quarantine()
        }
    }

    /// Too many restarts: the monitor waits for its plugin file to change
    /// (checked every few seconds) or for `operatorStart`.
    private func quarantine() {
        set(.quarantined)
        let restarts = budget.config.maxRestarts
        logger.error("quarantined: \(restarts) restarts within \(RunnerProcess.seconds(budget.config.restartWindow)); it stays stopped until \(description.path) changes or a restart is asked for")
        hostEvents.instanceQuarantined(monitor: name, plugin: description.path, restarts: restarts,
                                       window: budget.config.restartWindow)
        quarantinedFile = PluginFileIdentity(path: description.path)
        let check = DispatchSource.makeTimerSource(queue: queue)
        check.schedule(deadline: .now() + .seconds(5), repeating: .seconds(5), leeway: .seconds(1))
        check.setEventHandler { [weak self] in
            guard let self, self.state == .quarantined else { return }
            let now = PluginFileIdentity(path: self.description.path)
            if now != nil && now != self.quarantinedFile {
                self.logger.notice("\(self.description.path) changed: leaving quarantine")
                self.leaveQuarantine()
            }
        }
        quarantineCheck = check
        check.resume()
    }

    private func leaveQuarantine() {
        quarantineCheck?.cancel()
        quarantineCheck = nil
        quarantinedFile = nil
        budget.reset()
        set(.idle)
        launch()
    }

    /// Whether the watchdog looks at this monitor's runner (limits that no
    /// cgroup enforces).
    var watchesLimits: Bool { transport is RunnerTransport && !limitWatch.isEmpty }

    /// The watchdog's look at the runner's limits (`RunnerLimits.period`, any
    /// thread): a runner over one is ended, and its death says which.
    func checkLimits() {
        guard let runner = transport as? RunnerTransport, let process = runner.currentProcess,
              process.cgroup == nil else { return }
        let why = lock.withLock { limitWatch.check(pid: process.pid, dataLimit: process.dataLimit, now: monotonicNanoseconds()) }
        if let why {
            logger.error("\(why): ending its runner")
            runner.terminate(because: why)
        }
    }

    /// An operator stops the monitor (`vigil ctl stop`): its instance is
    /// stopped and destroyed, no retry or restart scheduled before runs, and
    /// it stays stopped until `operatorStart`. The others are not touched.
    /// `completion` runs on the instance's queue once it is stopped.
    package func operatorStop(completion: @escaping @Sendable () -> Void = {}) {
        queue.async { [self] in
            generation += 1
            stoppedByOperator = true
            cancelTimersStopAndDestroy()
            if !stopping { set(.stopped) }
            if isObserved { conditions?.monitorGone(name) }
            logger.notice("stopped by an operator")
            completion()
        }
    }

    /// An operator starts a monitor that is stopped, failed or quarantined:
    /// a fresh instance, a fresh restart budget. False when it is running
    /// (or on its way) already, or the host is stopping.
    package func operatorStart() -> Bool {
        queue.sync { [self] in
            let now = state
            guard !stopping, now == .stopped || now == .failed || now == .quarantined || now == .idle && stoppedByOperator
            else { return false }
            generation += 1
            stoppedByOperator = false
            finished.store(false, ordering: .releasing)
            quarantineCheck?.cancel()
            quarantineCheck = nil
            quarantinedFile = nil
            budget.reset()
            startRetries = 0
            set(.idle)
            logger.notice("started by an operator")
            launch()
            return true
        }
    }

    /// No more polls or quarantine checks; the instance stopped and destroyed. On `queue`.
    private func cancelTimersStopAndDestroy() {
        timer?.cancel()
        timer = nil
        quarantineCheck?.cancel()
        quarantineCheck = nil
        stopAndDestroy()
        logGate.flush()
    }

    /// Stops (when running) and destroys the plugin's instance. On `queue`.
    private func stopAndDestroy() {
        guard transport.hasInstance else {
            // No instance (its create failed, a retry waits), but a runner
            // kept up for that retry: it goes too, or the host's exit
            // waits for it (issue 25: 2 s late, "some runner processes had
            // not ended").
            transport.destroy(timeout: timeout)
            return
        }
        if state == .running {
            switch call("stop", { transport.stop(timeout: timeout) }) {
            case .returned(let status, let message) where status != VIGIL_OK:
                logger.warning("stop returned \(Self.statusName(status)): \(message)")
            case .crashed(let death):
                crashed(call: "stop", death: death)
            default:
                break
            }
        }
        destroyInstance()
    }

    /// Creates the instance and destroys it again, on its queue; returns the
    /// nanoseconds create took, or the failure (for `plugins describe --timing`).
    func timeCreate() -> Result<Int64, PluginRefusal> {
        queue.sync {
            let started = monotonicNanoseconds()
            let outcome = create()
            let took = monotonicNanoseconds() - started
            guard case .returned(VIGIL_OK, _) = outcome else {
                let why = switch outcome {
                case .returned(_, let message): message
                case .crashed(let death): death.description
                }
                return .failure(PluginRefusal(path: description.path, reason: "create: \(why)"))
            }
            destroyInstance()
            return .success(took)
        }
    }

    /// The host has begun to stop: from now on nothing is restarted. Any thread.
    func hostIsStopping() {
        hostStopping.store(true, ordering: .releasing)
    }

    /// Stops and destroys the instance; `completion` runs on the instance's queue.
    func shutdown(completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            stopping = true
            cancelTimersStopAndDestroy()
            if state != .failed && state != .quarantined { set(.stopped) }
            completion()
        }
    }

    /// Runs one call into the plugin, recording it for the watchdog.
    private func call(_ what: String, _ body: () -> CallOutcome) -> CallOutcome {
        let began = monotonicNanoseconds()
        lock.withLock { inFlight = (what, began, false) }
        defer {
            lock.withLock { inFlight = nil }
            callTimes.record(what, nanoseconds: monotonicNanoseconds() - began)
        }
        return body()
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

    static func statusName(_ status: vigil_status) -> String { VigilABI.statusName(status) }

    // MARK: - host functions (any thread)

    /// Copies a plugin's event, stamps it and routes it; a malformed one is
    /// refused and counted by reason.
    package func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        guard accepting.load(ordering: .acquiring) else {
            refuse(EventDefect(reason: .stopped, message: "emit outside start…stop"))
            return VIGIL_E_STOPPED
        }
        var kindIndex = -1
        let decoded: Event
        do {
            decoded = try decoder.decode(event, now: clock, kindIndex: &kindIndex, storage: FieldStorage.shared.take())
        } catch {
            refuse(error)
            return error.status
        }
        if observes(kindIndex: kindIndex), let conditions {
            bus.publish(decoded, route: route, kindIndex: kindIndex)
            conditions.observe(decoded)
        } else {
            bus.publish(consume decoded, route: route, kindIndex: kindIndex)
        }
        emitted.wrappingAdd(1, ordering: .relaxed)
        return VIGIL_OK
    }

    /// Counts a refused emit; the first of each reason is logged with why.
    private func refuse(_ defect: EventDefect) {
        if refusals.count(defect.reason, message: defect.message) {
            logger.warning("emit refused (\(defect.reason.name)): \(defect.message); further refusals of this kind are counted, not logged")
        }
    }

    /// A plugin's log line, from any thread (in process) or the runner's
    /// channel: through the gate every plugin's lines pass.
    package func log(level: Int, message: String, cut: Int) { logGate.log(level: level, message: message, cut: cut) }

    package func now() -> Int64 { clock() }

    /// An emit the plugin's runner refused (its decoder is this one's).
    package func countRefusal(_ defect: EventDefect) { refuse(defect) }

    package func markFinished() {
        guard !finished.exchange(true, ordering: .acquiringAndReleasing) else { return }
        logger.info("finished: nothing more to emit")
        if transport is RunnerTransport && budget.config.restart == .always {
            // `restart: always` runs it again, as after a failure.
            queue.async { [self] in
                guard !stopping else { return }
                finished.store(false, ordering: .releasing)
                timer?.cancel()
                timer = nil
                if case .crashed(let death) = call("stop", { transport.stop(timeout: timeout) }) {
                    crashed(call: "stop", death: death)
                    return
                }
                destroyInstance()
                supervise(finished: true)
            }
            return
        }
        if isObserved { conditions?.monitorGone(name) }
        onDone()
    }

    /// The thresholds and rules read `kinds` of this monitor from now on.
    func observe(kinds: Set<String>) {
        var mask: UInt64 = 0
        for kind in kinds {
            if let i = route.kinds.firstIndex(of: kind), i < 63 { mask |= 1 << UInt64(i) } else { mask |= 1 << 63 }
        }
        observedKinds.store(mask, ordering: .releasing)
    }

    private var isObserved: Bool { observedKinds.load(ordering: .relaxed) != 0 }

    /// Whether an event of kind index `kindIndex` (-1: undeclared) is read by a condition.
    @inline(__always)
    private func observes(kindIndex: Int) -> Bool {
        let mask = observedKinds.load(ordering: .relaxed)
        return mask != 0 && mask & (1 << UInt64(kindIndex >= 0 && kindIndex < 63 ? kindIndex : 63)) != 0
    }

    /// Hands an event to the thresholds and rules, when one reads its kind.
    @inline(__always)
    private func observe(_ event: Event) {
        guard isObserved else { return }
        let index = route.kinds.firstIndex(of: event.kind) ?? -1
        if observes(kindIndex: index) { conditions?.observe(event) }
    }

    private func noteError(_ text: String) {
        let now = clock()
        lock.withLock { lastError = (String(text.prefix(1024)), now) }
    }

    /// What `GET /v1/status` shows of the monitor.
    package struct Status: Sendable {
        package var state: State
        package var available: Bool
        package var unavailableReason: String
        package var lastError: (text: String, at: Int64)?
        package var lastPoll: (at: Int64, took: Int64)?
    }

    package var status: Status {
        lock.withLock {
            let effective = inferred ?? declared ?? (true, "")
            return Status(state: _state, available: effective.0, unavailableReason: effective.1, lastError: lastError,
                          lastPoll: lastPoll)
        }
    }

    /// Finished, or failed: nothing more will come from this instance.
    var isDone: Bool { finished.load(ordering: .acquiring) || state == .failed }

    /// The plugin declares its source present or absent (`set_availability`).
    package func setAvailability(_ available: Bool, reason: String) {
        let event = lock.withLock {
            declared = (available, available ? "" : reason)
            return publishAvailabilityLocked()
        }
        if let event { observe(event) }  // outside the lock: a rule's action may be spawned
    }

    /// The host infers availability from statuses; `true` clears the inference.
    /// On the instance's queue.
    private func infer(available: Bool, reason: String) {
        inferredUnavailable = !available
        let event = lock.withLock {
            inferred = available ? nil : (false, reason)
            return publishAvailabilityLocked()
        }
        if let event { observe(event) }
    }

    /// Routes an `availability` event when the effective availability changed.
    /// A source is taken as available until said otherwise, so nothing is
    /// routed for a monitor that was always available. Returns the event routed.
    private func publishAvailabilityLocked() -> Event? {
        let effective = inferred ?? declared ?? (true, "")
        let previous = published ?? (true, "")
        guard effective.0 != previous.0 || effective.1 != previous.1 else { return nil }
        // A token per report, refilled one a second up to the burst.
        let now = monotonicNanoseconds()
        availabilityTokens = min(Self.availabilityBurst,
                                 availabilityTokens + Double(now - availabilityRefilled) / 1e9)
        availabilityRefilled = now
        guard availabilityTokens >= 1 else {
            availabilitySuppressed += 1
            if !availabilityDeferred {
                // Report the state as it is then, once a token is there again.
                availabilityDeferred = true
                let wait = Int((1 - availabilityTokens) * 1e9) + 1
                queue.asyncAfter(deadline: .now() + .nanoseconds(wait)) { [self] in
                    let event = lock.withLock {
                        availabilityDeferred = false
                        return publishAvailabilityLocked()
                    }
                    if let event { observe(event) }
                }
            }
            return nil
        }
        availabilityTokens -= 1
        published = effective
        let skipped = availabilitySuppressed > 0
            ? " (\(availabilitySuppressed) changes in between not reported: the source flaps)" : ""
        availabilitySuppressed = 0
        if effective.0 {
            logger.notice("source available\(skipped)")
        } else {
            logger.notice("source unavailable: \(effective.1)\(skipped)")
        }
        let event = Event(time: clock(), monitor: name, plugin: description.name, kind: "availability",
                          severity: effective.0 ? .info : .notice,
                          fields: [Field("available", .bool(effective.0)), Field("reason", .string(effective.1))])
        // Never waits: this runs under the instance lock, maybe on a plugin's thread.
        bus.publish(event, route: route, kindIndex: availabilityKind, wait: false)
        return event
    }
}
