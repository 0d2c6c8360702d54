import Testing
@testable import VigilRuntime

/// The monitor's lifecycle and availability as values: every rule of who
/// goes where, without a plugin.
@Suite struct MonitorLifecycleTests {
    @Test func aRetryOrRestartScheduledBeforeAnOperatorsStopOrStartDoesNotRun() {
        var life = MonitorLifecycle()
        let before = life.generation
        #expect(life.mayRun(scheduledIn: before))
        life.crashedThenRestart()
        #expect(life.restartGoesAhead(scheduledIn: before))
        life.operatorStop()
        #expect(!life.mayRun(scheduledIn: before))
        #expect(!life.restartGoesAhead(scheduledIn: before))
        #expect(life.state == .restarting, "the state moves once the instance is stopped")
        life.stopped()
        #expect(life.state == .stopped)
        let started = life.operatorStart()
        #expect(started && life.state == .idle)
        #expect(!life.mayRun(scheduledIn: before), "started again: the old schedule stays void")
        #expect(life.mayRun(scheduledIn: life.generation))
    }

    @Test func anOperatorStartsOnlyWhatIsStoppedFailedOrQuarantined() {
        for (setUp, starts) in [({ (l: inout MonitorLifecycle) in l.started() }, false),
                                ({ (l: inout MonitorLifecycle) in l.notYet() }, false),
                                ({ (l: inout MonitorLifecycle) in l.restartScheduled() }, false),
                                ({ (l: inout MonitorLifecycle) in l.failed() }, true),
                                ({ (l: inout MonitorLifecycle) in l.quarantined() }, true),
                                ({ (l: inout MonitorLifecycle) in l.operatorStop(); l.stopped() }, true)] {
            var life = MonitorLifecycle()
            setUp(&life)
            let was = life.state
            let started = life.operatorStart()
            #expect(started == starts, "from \(was)")
            #expect(life.state == (starts ? .idle : was))
        }
        // Idle, never started by an operator's stop: on its way already.
        var life = MonitorLifecycle()
        let started = life.operatorStart()
        #expect(!started)
    }

    @Test func aShutdownStopsEverythingAndKeepsAFailureSaid() {
        var running = MonitorLifecycle()
        running.started()
        running.beginShutdown()
        #expect(!running.mayStart && !running.supervisesCrashes)
        #expect(running.state == .running, "running until its stop call is made")
        running.stopped()
        #expect(running.state == .stopped)
        let started = running.operatorStart()
        #expect(!started, "nothing starts while the host stops it")

        for end in [MonitorLifecycle.State.failed, .quarantined] {
            var life = MonitorLifecycle()
            if end == .failed { life.failed() } else { life.quarantined() }
            life.beginShutdown()
            life.stopped()
            #expect(life.state == end)
        }
    }

    @Test func deathsBetweenCallsAreHandledWhileRunningOrRetryingOnly() {
        var life = MonitorLifecycle()
        #expect(!life.handlesDeathBetweenCalls)
        life.notYet()
        #expect(life.handlesDeathBetweenCalls)
        life.started()
        #expect(life.handlesDeathBetweenCalls && life.supervisesCrashes)
        life.operatorStop()
        #expect(!life.handlesDeathBetweenCalls && !life.supervisesCrashes)
    }

    @Test func quarantineIsLeftOnlyFromQuarantine() {
        var life = MonitorLifecycle()
        life.started()
        life.leftQuarantine()
        #expect(life.state == .running)
        life.quarantined()
        life.leftQuarantine()
        #expect(life.state == .idle)
    }
}

@Suite struct MonitorAvailabilityTests {
    static let second: Int64 = 1_000_000_000

    @Test func nothingIsReportedForASourceThatWasAlwaysAvailable() {
        var a = MonitorAvailability(now: 0)
        a.declare(available: true, reason: "ignored")
        let r1 = a.report(now: 1)
        #expect(r1 == .nothing)
        #expect(a.effective == (true, ""))
    }

    @Test func theHostsInferenceOverridesThePluginsWordUntilASuccess() {
        var a = MonitorAvailability(now: 0)
        a.declare(available: false, reason: "no battery")
        let r1 = a.report(now: 1)
        #expect(r1 == .now(available: false, reason: "no battery", skipped: 0))
        a.infer(available: false, reason: "ENODEV")
        #expect(a.inferredUnavailable)
        let r2 = a.report(now: 2)
        #expect(r2 == .now(available: false, reason: "ENODEV", skipped: 0))
        a.infer(available: true, reason: "")
        #expect(!a.inferredUnavailable)
        let r3 = a.report(now: 3)
        #expect(r3 == .now(available: false, reason: "no battery", skipped: 0))
        a.declare(available: true, reason: "")
        let r4 = a.report(now: 4)
        #expect(r4 == .now(available: true, reason: "", skipped: 0))
    }

    @Test func aFlappingSourceIsReportedTenTimesThenOnceASecondWithWhatWasSkipped() {
        var a = MonitorAvailability(now: 0)
        var reported = 0
        var later: Int64?
        for i in 0..<100 {
            a.declare(available: i % 2 == 1, reason: "flap")
            switch a.report(now: Int64(i)) {
            case .now: reported += 1
            case .later(let wait): later = later ?? wait
            case .nothing: break
            }
        }
        #expect(reported == Int(MonitorAvailability.burst))
        let wait = try! #require(later)
        #expect(wait > 0 && wait <= Self.second + 1)
        // The deferred report says the state as it is then, and how many
        // changes away from what was last reported it stands for (every
        // other one of the 90 after the burst came back to it).
        a.declare(available: false, reason: "gone")
        guard case .now(false, "gone", let skipped) = a.deferredReport(now: 100 + wait) else {
            Issue.record("no report once a token is back")
            return
        }
        #expect(skipped == 45)
    }
}

extension MonitorLifecycle {
    /// Running, then a crash the supervisor restarts.
    mutating func crashedThenRestart() {
        started()
        restartScheduled()
    }
}
