import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals
import VigilABI
import VigilCore
import VigilIsolation

@preconcurrency import CVigilPlugin

/// The one deadline of a shutdown: fixed when shutdown begins, `--drain-timeout`
/// later, and shared by everything that waits then (producers blocked on a
/// full `block` sink, rule programs, sinks draining), so shutdown takes about
/// the drain timeout, not a multiple of it.
package final class DrainDeadline: Sendable {
    let timeout: Int64
    private let deadline = Atomic<Int64>(0)

    init(timeout: Int64) { self.timeout = timeout }

    /// The deadline, fixed by the first call (monotonic ns).
    func begin() -> Int64 {
        let proposed = max(1, monotonicNanoseconds().addingSaturating(max(0, timeout)))
        let (exchanged, original) = deadline.compareExchange(expected: 0, desired: proposed, ordering: .acquiringAndReleasing)
        return exchanged ? proposed : original
    }

    /// Nanoseconds left until the deadline (0 once past).
    func remaining() -> Int64 { max(0, begin().subtractingSaturating(monotonicNanoseconds())) }
}

/// Starts every monitor; at shutdown, stops them all.
package struct SupervisorService: Service {
    let runtime: VigilRuntime
    let stopTimeout: Int64
    let drain: DrainDeadline

    package func run() async throws {
        for (config, reason) in runtime.resolution.refused {
            runtime.hostEvents.pluginRefused(monitor: config.name, plugin: config.plugin, reason: reason)
        }
        // Rules already true with no values (a `none:`) fire before any monitor runs.
        runtime.conditions.start()
        // Every instance is created before any starts: a monitor whose
        // options its plugin refuses refuses the run, as `validate` calls
        // the manifest invalid (one judgement, `ResolvedManifest.judge`).
        // A shutdown asked for while plugins are still being created (their
        // runners may die of the same SIGTERM) restarts nothing.
        let invalid = await withGracefulShutdownHandler {
            await runtime.prepareAll()
        } onGracefulShutdown: {
            runtime.hostIsStopping()
        }
        if invalid.isEmpty {
            for instance in runtime.instances { instance.launch() }
            runtime.hostEvents.publish("started", .notice, [
                Field("version", .string(vigilVersion)), Field("monitors", .int(Int64(runtime.instances.count))),
                Field("sinks", .int(Int64(runtime.sinks.count))), Field("pid", .int(Int64(getpid()))),
            ])
            runtime.logger.notice("started \(counted(runtime.instances.count, "monitor")) and \(counted(runtime.sinks.count, "sink"))")
            SystemdNotifier.shared.ready(status: "\(counted(runtime.instances.count, "monitor")), \(counted(runtime.sinks.count, "sink"))")  // SystemdNotify.swift
        } else {
            runtime.logger.error("\(invalid.count) monitor\(invalid.count == 1 ? "'s options were" : "s' options were") refused by their plugins; nothing starts")
            runtime.stopSoon()
        }
        let watchdog = Task { await Self.watch(runtime) }
        try? await gracefulShutdown()
        SystemdNotifier.shared.stopping()
        // Nothing ended from now on is restarted (the instances a reload in
        // progress adds are told after it).
        runtime.hostIsStopping()
        // A reload in progress finishes first; none starts after.
        await runtime.endReloads()
        runtime.hostIsStopping()
        runtime.hostEvents.publish("stopping", .notice, [Field("reason", .string("shutdown requested"))])
        // A plugin blocked on a full `block` sink must not hold up its own stop
        // for ever: such waits give up at the drain deadline.
        runtime.bus.beginShutdown(deadline: drain.begin())
        await runtime.stopInstances(timeout: stopTimeout)
        runtime.conditions.shutdown()
        // A rule's program still running gets until the drain deadline, then
        // is killed; the wait is on a thread of its own, not the service's.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { [drain] in
                runtime.actions.shutdown(timeout: drain.remaining())
                done.resume()
            }
        }
        watchdog.cancel()
    }

    /// Reports calls into plugins that run past their deadline (the monitor's
    /// `timeout`), once per call, checking every second (few wakeups at
    /// idle); and ends runners over their `limits:`, looking four times a
    /// second when a runner has limits no cgroup enforces.
    static func watch(_ runtime: VigilRuntime) async {
        var tick: Int64 = 0
        while !Task.isCancelled {
            // The monitors in force now: a reload may have changed them.
            let instances = runtime.instances
            let watched = instances.filter(\.watchesLimits)
            let period = watched.isEmpty ? 1_000_000_000 : RunnerLimits.period
            try? await Task.sleep(for: .nanoseconds(period))
            for instance in watched { instance.checkLimits() }
            tick += period
            guard tick >= 1_000_000_000 else { continue }
            tick = 0
            runtime.lossHistory.sample(runtime.sinks)
            for instance in instances {
                if let (call, elapsed) = instance.overdueCall(deadline: instance.timeout) {
                    instance.logger.warning("\(call) has been running for \(Units.formatDuration(elapsed / 1_000_000 * 1_000_000)) (timeout \(Units.formatDuration(instance.timeout))); this monitor's next calls wait, the others go on")
                }
            }
        }
    }
}

/// Owns every sink's thread: starts them; at shutdown (after the supervisor has
/// stopped the monitors) closes every queue at once, so all sinks drain in
/// parallel against one deadline, and joins them.
package struct SinksService: Service {
    let runtime: VigilRuntime
    let drain: DrainDeadline
    let logger: Logger

    package func run() async throws {
        for runner in runtime.sinks { runner.start() }
        try? await gracefulShutdown()
        // After the supervisor ended reloads: the sinks in force are final,
        // and those a reload retired may still be draining.
        await runtime.endReloads()
        let deadline = drain.begin()
        let drainTimeout = drain.timeout
        let runners = runtime.runningSinks
        for runner in runners { runner.beginStop(deadline: deadline) }
        for runner in runners where await !runner.join(until: deadline.addingSaturating(1_000_000_000)) {
            let lost = runner.abandon()  // counted, so the exit status says so
            logger.error("sink \(runner.config.name) did not finish within \(Units.formatDuration(drainTimeout)) of shutdown; exiting without it, \(lost) events lost (shutdown)")
        }
    }
}

/// SIGHUP: the manifest is read again and what changed is applied (when
/// the host has a manifest file), then every sink reopens its files
/// (logrotate's move, then signal), whether the reload applied or not.
package struct HangupService: Service {
    let runtime: VigilRuntime
    let logger: Logger

    package func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        for await _ in signals.cancelOnGracefulShutdown() {
            if runtime.options.reloader != nil { _ = await runtime.reload(reason: "SIGHUP") }
            logger.info("SIGHUP: reopening sink files")
            for runner in runtime.sinks { runner.requestReopen() }
        }
    }
}

/// `--for DURATION`: returns after the duration, which shuts the group down.
package struct TimerService: Service {
    let duration: Int64

    package func run() async throws {
        try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .nanoseconds(duration)) }
    }
}
