import Dispatch
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation

/// The manifest's thresholds and rules in a running host: between the
/// plugins and the router. Monitors hand it each event they routed (and a
/// heartbeat after each successful poll); the `threshold` and `rule` events it
/// makes are routed like any other (as `MONITOR/threshold` and `RULE/rule`),
/// never waiting for room in a sink, and a rule's `exec` is handed to the
/// action runner. A timer wakes it only at the engine's next deadline (a
/// `for:` hold running out, a threshold going stale).
package final class ConditionProcessor: @unchecked Sendable {  // mutable state is the setup, behind its mutex
    /// The engine and what its events need: replaced whole by a reload.
    private struct Setup: @unchecked Sendable {  // replaced whole, and read, only under the processor's mutex
        var engine: ConditionEngine
        var thresholdRoutes: [String: Route]
        var ruleRoutes: [String: Route]
        var execs: [String: ExecConfig]

        /// Routes of `previous` are kept for the sources still there: a
        /// reload compiles routes only for new ones.
        init(thresholds: [ThresholdSpec], rules: [RuleSpec], plugins: [String: String], bus: EventBus,
             previous: Setup? = nil) {
            engine = ConditionEngine(thresholds: thresholds, rules: rules, plugins: plugins)
            thresholdRoutes = [:]
            ruleRoutes = [:]
            execs = [:]
            var wanted: [(source: String, kinds: [String], rule: Bool)] = []
            for monitor in Set(thresholds.map(\.ref.monitor)).sorted() {
                if let kept = previous?.thresholdRoutes[monitor] {
                    thresholdRoutes[monitor] = kept
                } else {
                    wanted.append((monitor, [ConditionEngine.thresholdKind], false))
                }
            }
            for rule in rules {
                execs[rule.name] = rule.exec
                if let kept = previous?.ruleRoutes[rule.name] {
                    ruleRoutes[rule.name] = kept
                } else {
                    wanted.append((rule.name, [ConditionEngine.ruleKind], true))
                }
            }
            guard !wanted.isEmpty else { return }
            let routes = bus.routes(wanted.map { ($0.source, $0.kinds) })
            for (want, route) in zip(wanted, routes) {
                if want.rule { ruleRoutes[want.source] = route } else { thresholdRoutes[want.source] = route }
            }
        }
    }

    private let setup: Mutex<Setup>
    private let bus: EventBus
    private let runner: ActionRunner
    private let encoder: JSONLineEncoder
    private let logger: Logger
    private let monotonic: @Sendable () -> Int64
    private let wallClock: @Sendable () -> Int64
    private let queue = DispatchQueue(label: "vigil.conditions")
    /// Rule actions leave the engine's lock through this queue: in the order
    /// the engine made them, but spawned (posix_spawn, a pipe, a thread)
    /// after the lock is released, so no monitor's emit waits on a spawn.
    private let actionQueue = DispatchQueue(label: "vigil.conditions.actions")
    /// The earliest deadline a timer is set (or being set) for; .max: none.
    /// Only an earlier deadline sets the timer again, so that the events of a
    /// watched monitor (whose values push its staleness later) do not each
    /// cost a trip to the timer's queue; a timer that fires early finds
    /// nothing due and is set for the deadline then.
    private let armed = Atomic<Int64>(.max)
    /// Set by `shutdown` (on `queue`).
    private var stopped = false
    private var timer: DispatchSourceTimer?

    init(thresholds: [ThresholdSpec], rules: [RuleSpec], plugins: [String: String], bus: EventBus,
         runner: ActionRunner, host: String, logger: Logger,
         monotonic: @escaping @Sendable () -> Int64 = monotonicNanoseconds,
         wallClock: @escaping @Sendable () -> Int64 = realtimeNanoseconds) {
        self.setup = Mutex(Setup(thresholds: thresholds, rules: rules, plugins: plugins, bus: bus))
        self.bus = bus
        self.runner = runner
        self.encoder = JSONLineEncoder(host: host)
        var logger = logger
        logger[metadataKey: "component"] = "conditions"
        self.logger = logger
        self.monotonic = monotonic
        self.wallClock = wallClock
    }

    /// The thresholds' and rules' states now.
    package var snapshot: ConditionEngine.Snapshot { setup.withLock { $0.engine.snapshot } }

    /// The kinds of `monitor` whose events are to be handed over (none: the monitor is not watched).
    func watchedKinds(_ monitor: String) -> Set<String> { setup.withLock { $0.engine.watchedKinds[monitor] ?? [] } }

    /// A reload: the thresholds and rules of the new manifest. Those that did
    /// not change keep their state (no event for them); new ones start, and
    /// a rule already true fires now, as at the host's start.
    func replace(thresholds: [ThresholdSpec], rules: [RuleSpec], plugins: [String: String]) {
        let now = monotonic(), wall = wallClock()
        // The routes are compiled outside the lock: compiling waits for
        // producers to leave the routing snapshot, and one may be here.
        let previous = setup.withLock { $0 }
        let next = Setup(thresholds: thresholds, rules: rules, plugins: plugins, bus: bus, previous: previous)
        setup.withLock { current in
            var next = next
            next.engine.adoptState(from: current.engine)
            current = next
        }
        update { $0.start(now: now, wallTime: wall) }
    }

    /// Evaluates every rule once (one already true fires now) and starts
    /// the staleness clocks. Call after the sinks started, before monitors.
    func start() {
        let now = monotonic(), wall = wallClock()
        update { $0.start(now: now, wallTime: wall) }
    }

    /// An event a monitor routed.
    func observe(_ event: Event) {
        let now = monotonic()
        update { $0.observe(event, now: now) }
    }

    /// A successful poll of `monitor`.
    func heartbeat(_ monitor: String) {
        let now = monotonic(), wall = wallClock()
        update { $0.heartbeat(monitor: monitor, now: now, wallTime: wall) }
    }

    /// A monitor failed or finished: nothing more will come from it.
    func monitorGone(_ monitor: String) {
        let now = monotonic(), wall = wallClock()
        update { $0.unavailable(monitor: monitor, now: now, wallTime: wall) }
    }

    /// Changes the engine and routes what it made while still holding it, so
    /// that events (and actions) leave in the order the engine made them even
    /// when several threads report at once. Routing never waits, and an
    /// action's spawn does not wait for the program.
    private func update(_ change: (inout ConditionEngine) -> [Event]) {
        setup.withLock { setup in
            publish(change(&setup.engine), setup: setup)
            // Under the lock, so that the timer's queue gets deadlines in the order they were found.
            if let next = setup.engine.nextDeadline, next < armed.load(ordering: .relaxed) {
                armed.store(next, ordering: .relaxed)
                queue.async { [self] in arm(at: next) }
            }
        }
    }

    /// Stops the timer, and hands the runner every action already decided;
    /// actions still running are left to the runner's shutdown.
    func shutdown() {
        queue.sync {
            timer?.cancel()
            timer = nil
            stopped = true
        }
        actionQueue.sync {}
    }

    /// Under the setup's lock.
    private func publish(_ events: [Event], setup: Setup) {
        for event in events {
            let route = event.kind == ConditionEngine.ruleKind ? setup.ruleRoutes[event.monitor] : setup.thresholdRoutes[event.monitor]
            if let route {
                var pooled = event
                pooled.fields = FieldStorage.shared.take(holding: event.fields)
                bus.publish(pooled, route: route, kindIndex: 0, wait: false)
            }
            if event.kind == ConditionEngine.ruleKind, let exec = setup.execs[event.monitor] {
                actionQueue.async { [self, event] in act(on: event, exec: exec) }
            }
        }
    }

    /// Runs the rule's program if this change is one it runs on.
    private func act(on event: Event, exec: ExecConfig) {
        guard case .bool(let active)? = event[field: "active"],
              exec.runs(whenActive: active) else { return }
        var environment = ["VIGIL_RULE": event.monitor, "VIGIL_ACTIVE": active ? "true" : "false",
                           "VIGIL_SEVERITY": event.severity.name, "VIGIL_EVENT_TIME": String(event.time)]
        for field in event.fields where field.name != "active" {
            environment["VIGIL_FIELD_" + Self.environmentName(field.name)] = Self.text(field.value)
        }
        let outcome = runner.run(key: event.monitor,
                                 action: ActionRunner.Action(argv: exec.argv, timeout: exec.timeout, minGap: exec.minGap),
                                 stdin: Array(encoder.line(event).utf8), environment: environment)
        if case .failedToStart(let why) = outcome {
            logger.error("rule '\(event.monitor)': cannot run \(exec.argv[0]): \(why)")
        }
    }

    /// `power.level` → `POWER_LEVEL`: letters and digits upper-cased, the rest `_`.
    static func environmentName(_ name: String) -> String {
        String(name.unicodeScalars.map { s -> Character in
            s.isASCII && (s.properties.isAlphabetic || ("0"..."9").contains(s)) ? Character(String(s).uppercased()) : "_"
        })
    }

    static func text(_ value: FieldValue) -> String {
        switch value {
        case .string(let s): s
        case .int(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): b ? "true" : "false"
        }
    }

    // MARK: - the timer

    /// On `queue`: the timer, for `deadline` (an earlier one than it had).
    private func arm(at deadline: Int64) {
        guard !stopped else { return }
        timer?.cancel()
        timer = nil
        guard deadline < .max else { return }  // .max: a hold too long to ever end
        let t = DispatchSource.makeTimerSource(queue: queue)
        let delay = max(0, deadline - monotonic())
        t.schedule(deadline: .now() + .nanoseconds(Int(min(delay, Int64(Int.max)))), leeway: .milliseconds(5))
        t.setEventHandler { [self] in fire() }
        t.resume()
        timer = t
    }

    /// On `queue`, at a deadline.
    private func fire() {
        timer?.cancel()
        timer = nil
        armed.store(.max, ordering: .relaxed)
        let now = monotonic(), wall = wallClock()
        update { $0.advance(to: now, wallTime: wall) }
    }
}
