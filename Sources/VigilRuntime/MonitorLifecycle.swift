/// A monitor's lifecycle as a value: the state `vigil ctl status` shows,
/// and what decides whether work scheduled earlier (a retry, a restart)
/// may still run. Every move the instance makes goes through one of the
/// methods below, so who may go where is read here, and tested here
/// (`MonitorLifecycleTests`), without a plugin. The instance keeps it
/// behind its lock.
///
///     idle ──start ok──▶ running ──crash──▶ restarting ──▶ (launch again)
///      │  ╲                 │   ╲──too many──▶ quarantined ──file changed──▶ idle
///      │   not yet ▶ retrying ──start ok──▶ running
///      └──refused──▶ failed            (any) ──operator stop / shutdown, then stopped()──▶ stopped
package struct MonitorLifecycle: Sendable, Equatable {
    package enum State: String, Sendable { case idle, running, retrying, restarting, quarantined, failed, stopped }

    package private(set) var state: State = .idle
    /// Bumped when an operator stops or starts the monitor, so that a retry
    /// or restart scheduled before does not undo it.
    private(set) var generation = 0
    /// Stopped by an operator (`vigil ctl stop`): no restart, no done.
    private(set) var stoppedByOperator = false
    /// The host stops this monitor for good (its shutdown, or a reload
    /// that retires it): nothing runs again.
    private(set) var shuttingDown = false

    /// Whether work scheduled in `generation` may run now.
    func mayRun(scheduledIn generation: Int) -> Bool { !shuttingDown && generation == self.generation }

    /// Whether the instance may (re)start: not while the host stops it.
    var mayStart: Bool { !shuttingDown }

    /// Whether a crash is followed by the supervisor's decision.
    var supervisesCrashes: Bool { !shuttingDown && !stoppedByOperator }

    /// Whether a runner's death between calls is this instance's to handle:
    /// only while it runs or waits to retry, and not after an operator's stop.
    var handlesDeathBetweenCalls: Bool { !stoppedByOperator && (state == .running || state == .retrying) }

    /// Create or start said "not yet" (unavailable, temporary).
    mutating func notYet() { state = .retrying }

    /// Start succeeded.
    mutating func started() { state = .running }

    /// A call failed for good, or the policy says never again.
    mutating func failed() { state = .failed }

    /// The supervisor scheduled a restart.
    mutating func restartScheduled() { state = .restarting }

    /// Whether the restart scheduled in `generation` still goes ahead.
    func restartGoesAhead(scheduledIn generation: Int) -> Bool {
        mayRun(scheduledIn: generation) && state == .restarting
    }

    /// Too many restarts: it waits for its plugin file to change or an operator.
    mutating func quarantined() { state = .quarantined }

    /// The plugin file changed: it launches again.
    mutating func leftQuarantine() {
        guard state == .quarantined else { return }
        state = .idle
    }

    /// `vigil ctl stop` begins: nothing scheduled before runs, and once its
    /// instance is stopped (`stopped`) it stays so until an operator starts it.
    mutating func operatorStop() {
        generation += 1
        stoppedByOperator = true
    }

    /// `vigil ctl start`: a stopped, failed or quarantined monitor starts
    /// afresh (idle, then launched). False when it runs or is on its way,
    /// or the host is stopping it.
    mutating func operatorStart() -> Bool {
        guard !shuttingDown,
              state == .stopped || state == .failed || state == .quarantined || state == .idle && stoppedByOperator
        else { return false }
        generation += 1
        stoppedByOperator = false
        state = .idle
        return true
    }

    /// The host begins to stop the monitor for good: nothing starts again.
    mutating func beginShutdown() { shuttingDown = true }

    /// Its instance is stopped and destroyed, after `operatorStop` or
    /// `beginShutdown` (the state says running until then, so the stop
    /// call is made). A monitor the host stopped that had failed or was
    /// quarantined keeps saying so.
    mutating func stopped() {
        if shuttingDown {
            if state != .failed && state != .quarantined { state = .stopped }
        } else if stoppedByOperator {
            state = .stopped
        }
    }
}
