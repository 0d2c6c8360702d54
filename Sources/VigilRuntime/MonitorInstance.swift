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
package final class MonitorInstance: RunnerReceiver, RoundMember, @unchecked Sendable {  // its state is behind `lock` or on its queue; its counters are atomics
    package typealias State = MonitorLifecycle.State

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
    /// When its scheduled polls run: in the rounds of its interval, or on a timer of its own.
    private let schedule: PollSchedule
    /// When the last poll began (monotonic ns).
    private var lastPollBegan: Int64 = 0
    /// Polls of the current instance (since its create), for crash reports.
    private var pollsOfInstance = 0
    /// Attempts of `retryLater` since the last success.
    private var startRetries = 0

    private let accepting = Atomic<Bool>(false)
    /// The host has begun to stop (`hostIsStopping`), maybe before this
    /// monitor's own stop runs: a runner that ends now is not restarted
    /// (under systemd the SIGTERM reaches every runner with the host's).
    private let hostStopping = Atomic<Bool>(false)
    private let lock = Mutex(())
    /// Its state and what may still run (see `MonitorLifecycle`).
    private var life = MonitorLifecycle()
    private var inFlight: (call: String, since: Int64, warned: Bool)?
    /// Availability, declared and inferred, and what was last reported.
    /// Guarded by `lock`; events are published under it, so they leave in
    /// the order the changes happened.
    private var availability = MonitorAvailability(now: monotonicNanoseconds())
    /// The last failure, crash or poll error, in words; when (realtime ns). Guarded by `lock`.
    private var lastError: (text: String, at: Int64)?
    /// The last poll: when it began (realtime ns) and how long it took. Guarded by `lock`.
    private var lastPoll: (at: Int64, took: Int64)?
    /// Queue-confined mirror of `availability.inferredUnavailable`, so a poll need not lock.
    private var inferredUnavailable = false

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
    /// While quarantined, its watch of the plugin file: the quarantine
    /// holds until the file changes or a restart is asked for.
    private var quarantineWatch: QuarantineWatch?
    /// Runner crashes, hangs and limit kills so far.
    package let crashes = Atomic<UInt64>(0)
    /// Its create or start failed (not UNAVAILABLE, not TEMPORARY), the
    /// last time one was tried: what a `--for` run's exit status counts,
    /// with the state. Set on `queue`.
    let failedToStart = Atomic<Bool>(false)
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
    /// False for `vigil run --once`: the poll after start is the only one.
    private let schedulesPolls: Bool

    init(config: MonitorConfig, description: PluginDescription, transport: any PluginTransport, options: [BoundOption],
         bus: EventBus, hostEvents: HostEvents, logger: Logger,
         conditions: ConditionProcessor? = nil, plugin: HostedPlugin? = nil, fingerprint: String = "",
         clock: @escaping @Sendable () -> Int64 = realtimeNanoseconds, schedulesPolls: Bool = true,
         rounds: PollRounds = .shared) {
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
        self.schedule = PollSchedule(interval: interval, rounds: rounds, queue: queue)
        (transport as? RunnerTransport)?.whenDiedOutsideACall { [weak self] death, runner in self?.runnerDied(death, of: runner) }
    }

    package var state: State { lifecycle.state }
    private var lifecycle: MonitorLifecycle { lock.withLock { _ in life } }
    /// A move of the lifecycle (each is one of its methods).
    @discardableResult
    private func move<R>(_ change: (inout MonitorLifecycle) -> R) -> R { lock.withLock { _ in change(&life) } }

    // MARK: - lifecycle (on `queue`)

    /// The first create, before any monitor of the run starts
    /// (`VigilRuntime.prepareAll`): its answer, or nil (created already,
    /// stopping, or it crashed: then supervised as any crash). `launch`
    /// goes on from it and does not create again.
    func prepare(_ done: @escaping @Sendable ((status: vigil_status, message: String)?) -> Void) {
        queue.async { [self] in
            guard lifecycle.mayStart, !transport.hasInstance else { return done(nil) }
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
            guard lifecycle.mayStart else { return }
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
        move { $0.notYet() }
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
        let scheduledIn = lifecycle.generation
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay))) { [self] in
            guard lifecycle.mayRun(scheduledIn: scheduledIn) else { return }  // stopped or started again since
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
        guard transport.hasInstance, lifecycle.mayStart else { return }
        accepting.store(true, ordering: .releasing)
        let outcome = call("start") { transport.start(timeout: timeout) }
        guard case .returned(let status, let message) = outcome else {
            if case .crashed(let death) = outcome { crashed(call: "start", death: death) }
            return
        }
        switch status {
        case VIGIL_OK:
            move { $0.started() }
            failedToStart.store(false, ordering: .relaxed)
            startRetries = 0
            if inferredUnavailable { infer(available: true, reason: "") }
            if transport.polls {
                let took = pollOnce()
                if schedulesPolls, lifecycle.mayStart { schedulePolls(firstTook: took) }
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

    /// Polls every interval from now on: in the rounds of its interval
    /// (`PollRounds`), or on its own timer when a poll is too slow for them.
    private func schedulePolls(firstTook: Int64) {
        schedule.start(member: self, firstTook: firstTook) { [weak self] in self?.pollOnce() }
    }

    /// No more scheduled polls. On `queue`.
    private func stopPolling() { schedule.stop() }

    /// A round's poll (any thread): run here under its queue, unless a call
    /// is in flight (a hung poll holds one thread, not every round's) or the
    /// last poll began less than half an interval ago (it joined the rounds
    /// just after its first poll, or was polled on request). A poll slower
    /// than the rounds allow takes it out of them.
    func pollInRound(ticket: UInt64) {
        guard lock.withLock({ _ in inFlight == nil }) else { return }
        queue.sync {
            guard schedule.holds(ticket), monotonicNanoseconds() - lastPollBegan >= interval / 2 else { return }
            let took = pollOnce()
            guard schedule.holds(ticket), schedule.tooSlowForRounds(took) else { return }
            logger.info("a poll took \(Units.formatDuration(took)): polled on its own timer from now on, not in the rounds of its interval")
            schedulePolls(firstTook: took)
        }
    }

    /// Polls now, outside the schedule (`vigil ctl poll` later; tests now).
    package func pollNow() {
        queue.async { [self] in
            if state == .running { pollOnce() }
        }
    }

    /// Polls the instance; returns how long the poll took.
    @discardableResult
    private func pollOnce() -> Int64 {
        guard transport.hasInstance, transport.polls, lifecycle.mayStart else { return 0 }
        let started = monotonicNanoseconds()
        lastPollBegan = started
        polls.add(1, ordering: .relaxed)
        pollsOfInstance += 1
        let number = pollsOfInstance
        let startedAt = clock()
        let outcome = call("poll") { transport.poll(timeout: timeout) }
        let took = max(0, monotonicNanoseconds() - started)
        pollNanoseconds.add(UInt64(took), ordering: .relaxed)
        // Told once its outcome is counted (an error, a crash): whoever sees
        // the poll done (`--once`) sees how it went.
        defer { lock.withLock { _ in lastPoll = (startedAt, took) } }
        guard case .returned(let status, let message) = outcome else {
            if case .crashed(let death) = outcome { crashed(call: "poll #\(number)", death: death) }
            return took
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
            stopPolling()
            if case .crashed(let death) = call("stop", { transport.stop(timeout: timeout) }) {
                crashed(call: "stop", death: death)
                return took
            }
            accepting.store(false, ordering: .releasing)
            fail(call: "poll", status: status, message: message)
        }
        return took
    }

    /// Reports a failed call, destroys the instance and leaves it failed.
    private func fail(call: String, status: vigil_status, message: String) {
        let why = message.isEmpty ? "no reason given" : message
        if call == "create" || call == "start" { failedToStart.store(true, ordering: .relaxed) }
        let at = status == VIGIL_E_INVALID_CONFIG ? " at \(config.locate(pluginMessage: why).location)" : ""
        let supervised = transport.runnerPID != nil || transport is RunnerTransport
        logger.error("\(call) failed (\(Self.statusName(status)))\(at): \(why)\(supervised ? "" : "; the monitor is stopped, the others go on")")
        noteError("\(call) failed (\(Self.statusName(status)))\(at): \(why)")
        destroyInstance()
        // Failed before it is told: whoever acts on the event sees the state it names.
        if !supervised { move { $0.failed() } }
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
        move { $0.failed() }
        if isObserved { conditions?.monitorGone(name) }
        onDone()
    }

    // MARK: - supervision (runners)

    /// The runner ended in `call` (a crash, an exit, a hang killed, a
    /// limit): reported with the plugin's last words, then supervised.
    /// A runner killed from outside (SIGTERM, SIGINT or SIGKILL the host did
    /// not send) may have been killed with the host: systemd signals the
    /// whole unit at once, and the host may read its own SIGTERM a moment
    /// after it saw the runner die. Such a death is judged after that
    /// moment: once the host is stopping it is neither restarted nor a
    /// monitor that failed to start.
    private func crashed(call: String, death: RunnerDeath) {
        accepting.store(false, ordering: .releasing)
        (transport as? RunnerTransport)?.discard()
        stopPolling()
        crashes.add(1, ordering: .relaxed)
        let lastWords = logGate.recentLines
        logger.error("the plugin's runner ended in \(call): \(death)\(logGate.lastWords)")
        noteError("the plugin's runner ended in \(call): \(death)")
        hostEvents.instanceCrashed(monitor: name, plugin: description.path, call: call, death: death, lastLog: lastWords)
        let settle: @Sendable () -> Void = { [self] in
            let stopping = hostStopping.load(ordering: .acquiring)
            if (call == "create" || call == "start") && !stopping { failedToStart.store(true, ordering: .relaxed) }
            guard lifecycle.supervisesCrashes else { return }
            if stopping {
                logger.notice("not restarted: vigil is stopping")
                return
            }
            supervise(finished: false)
        }
        let fromOutside = death.killedBecause == nil && [SIGTERM, SIGINT, SIGKILL].contains(death.signal ?? 0)
        if fromOutside && !hostStopping.load(ordering: .acquiring) {
            queue.asyncAfter(deadline: .now() + .milliseconds(Self.signalSettling)) { settle() }
        } else {
            settle()
        }
    }

    /// How long a death by a stopping signal waits for the host's own.
    static let signalSettling = 250

    /// The runner died while no call was in flight (a plugin thread
    /// crashed between polls): handled on the queue like a crash in a call,
    /// if `runner` still serves the instance (a runner let go by a stop or
    /// restart queued before is not the one running now). Also when the host
    /// has begun to stop and this monitor's stop has not run yet: the death
    /// is told (not restarted), not lost with the shutdown.
    private func runnerDied(_ death: RunnerDeath, of runner: RunnerProcess) {
        queue.async { [self] in
            guard lifecycle.handlesDeathBetweenCalls,
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
            move { $0.restartScheduled() }
            restarts.add(1, ordering: .relaxed)
            logger.notice("restarting in \(RunnerProcess.seconds(after)) (restart \(budget.restarts(now: monotonicNanoseconds())) of at most \(budget.config.maxRestarts) in \(RunnerProcess.seconds(budget.config.restartWindow)))")
            let scheduledIn = lifecycle.generation
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: after))) { [self] in
                guard !hostStopping.load(ordering: .acquiring), lifecycle.restartGoesAhead(scheduledIn: scheduledIn) else { return }
                launch()
            }
        case .quarantine:
            quarantine()
        }
    }

    /// Too many restarts: the monitor waits for its plugin file to change
    /// (checked every few seconds) or for `operatorStart`.
    private func quarantine() {
        move { $0.quarantined() }
        let restarts = budget.config.maxRestarts
        logger.error("quarantined: \(restarts) restarts within \(RunnerProcess.seconds(budget.config.restartWindow)); it stays stopped until \(description.path) changes or a restart is asked for")
        hostEvents.instanceQuarantined(monitor: name, plugin: description.path, restarts: restarts,
                                       window: budget.config.restartWindow)
        quarantineWatch = QuarantineWatch(path: description.path, queue: queue) { [weak self] in
            guard let self, self.state == .quarantined else { return }
            self.logger.notice("\(self.description.path) changed: leaving quarantine")
            self.leaveQuarantine()
        }
    }

    private func leaveQuarantine() {
        endQuarantineWatch()
        budget.reset()
        move { $0.leftQuarantine() }
        launch()
    }

    private func endQuarantineWatch() {
        quarantineWatch?.cancel()
        quarantineWatch = nil
    }

    /// Whether the watchdog looks at this monitor's runner (limits that no
    /// cgroup enforces).
    var watchesLimits: Bool { transport is RunnerTransport && !limitWatch.isEmpty }

    /// The watchdog's look at the runner's limits (`RunnerLimits.period`, any
    /// thread): a runner over one is ended, and its death says which.
    func checkLimits() {
        guard let runner = transport as? RunnerTransport, let process = runner.currentProcess,
              process.cgroup == nil else { return }
        let why = lock.withLock { _ in limitWatch.check(pid: process.pid, dataLimit: process.dataLimit, now: monotonicNanoseconds()) }
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
            move { $0.operatorStop() }
            cancelTimersStopAndDestroy()
            move { $0.stopped() }
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
            guard move({ $0.operatorStart() }) else { return false }
            finished.store(false, ordering: .releasing)
            endQuarantineWatch()
            budget.reset()
            startRetries = 0
            logger.notice("started by an operator")
            launch()
            return true
        }
    }

    /// No more polls or quarantine checks; the instance stopped and destroyed. On `queue`.
    private func cancelTimersStopAndDestroy() {
        stopPolling()
        endQuarantineWatch()
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
            move { $0.beginShutdown() }
            cancelTimersStopAndDestroy()
            move { $0.stopped() }
            completion()
        }
    }

    /// Runs one call into the plugin, recording it for the watchdog.
    private func call(_ what: String, _ body: () -> CallOutcome) -> CallOutcome {
        let began = monotonicNanoseconds()
        lock.withLock { _ in inFlight = (what, began, false) }
        defer {
            lock.withLock { _ in inFlight = nil }
            callTimes.record(what, nanoseconds: monotonicNanoseconds() - began)
        }
        return body()
    }

    /// The call in progress if it has run past `deadline` (and was not reported yet).
    func overdueCall(deadline: Int64) -> (String, Int64)? {
        lock.withLock { _ in
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
    /// refused and counted by reason. (An isolated plugin's events, from its
    /// runner's channel.)
    package func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        var section = Epochs.host.enter()
        defer { Epochs.host.leave(section) }
        return emit(event, in: &section)
    }

    /// `emit` inside the read section the host table entered, which keeps
    /// this instance alive (a reload may retire it meanwhile) and which the
    /// event is routed in.
    package func emit(_ event: UnsafePointer<vigil_event>?, in section: inout Epochs.Section) -> vigil_status {
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
            var copy = decoded
            publish(&copy, kindIndex: kindIndex, in: &section)
            conditions.observe(decoded)
        } else {
            var moved = consume decoded
            publish(&moved, kindIndex: kindIndex, in: &section)
        }
        emitted.wrappingAdd(1, ordering: .relaxed)
        return VIGIL_OK
    }

    /// Routes a plugin's event inside `section`. When a blocking sink has
    /// no room, the producer waits outside it, so a reload does not wait
    /// for the sink: the instance keeps itself alive meanwhile (the section
    /// did until then) and lets go only after the grace period that follows
    /// the section it enters again, so never inside this call.
    @inline(__always)
    private func publish(_ event: inout Event, kindIndex: Int, in section: inout Epochs.Section) {
        var seq: UInt64 = 0
        if bus.publish(&event, route: route, kindIndex: kindIndex, seq: &seq, in: section) { return }
        let kept = Unmanaged.passRetained(self)
        Epochs.host.leave(section)
        bus.publishWaiting(&event, route: route, kindIndex: kindIndex)
        section = Epochs.host.enter()
        Epochs.host.afterGrace { kept.release() }
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
                guard lifecycle.mayStart else { return }
                finished.store(false, ordering: .releasing)
                stopPolling()
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
        lock.withLock { _ in lastError = (String(text.prefix(1024)), now) }
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
        lock.withLock { _ in
            let effective = availability.effective
            return Status(state: life.state, available: effective.available, unavailableReason: effective.reason, lastError: lastError,
                          lastPoll: lastPoll)
        }
    }

    /// Finished, or failed: nothing more will come from this instance.
    var isDone: Bool { finished.load(ordering: .acquiring) || state == .failed }

    /// The plugin declares its source present or absent (`set_availability`).
    package func setAvailability(_ available: Bool, reason: String) {
        let event = lock.withLock { _ in
            availability.declare(available: available, reason: reason)
            return reportAvailabilityLocked(availability.report(now: monotonicNanoseconds()))
        }
        if let event { observe(event) }  // outside the lock: a rule's action may be spawned
    }

    /// The host infers availability from statuses; `true` clears the inference.
    /// On the instance's queue.
    private func infer(available: Bool, reason: String) {
        inferredUnavailable = !available
        let event = lock.withLock { _ in
            availability.infer(available: available, reason: reason)
            return reportAvailabilityLocked(availability.report(now: monotonicNanoseconds()))
        }
        if let event { observe(event) }
    }

    /// Logs and routes an `availability` event when `report` says so, or
    /// schedules the report it defers. Returns the event routed.
    private func reportAvailabilityLocked(_ report: MonitorAvailability.Report) -> Event? {
        switch report {
        case .nothing:
            return nil
        case .later(let wait):
            // The state as it is then, once a token is there again.
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(clamping: wait))) { [self] in
                let event = lock.withLock { _ in
                    reportAvailabilityLocked(availability.deferredReport(now: monotonicNanoseconds()))
                }
                if let event { observe(event) }
            }
            return nil
        case .now(let available, let reason, let skipped):
            let between = skipped > 0 ? " (\(skipped) changes in between not reported: the source flaps)" : ""
            if available {
                logger.notice("source available\(between)")
            } else {
                logger.notice("source unavailable: \(reason)\(between)")
            }
            let event = Event(time: clock(), monitor: name, plugin: description.name, kind: "availability",
                              severity: available ? .info : .notice,
                              fields: FieldStorage.shared.take(holding: [Field("available", .bool(available)),
                                                                         Field("reason", .string(reason))]))
            // Never waits: this runs under the instance lock, maybe on a plugin's thread.
            bus.publish(event, route: route, kindIndex: availabilityKind, wait: false)
            return event
        }
    }
}
