import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilIsolation

@preconcurrency import CVigilPlugin

/// A sink of `type: plugin`: an output plugin (ABI 1.5) takes the events,
/// in the host's process or in a runner process of its own (`isolation:`,
/// decided as for a monitor: `IsolationDecision`). The host keeps each
/// batch until the plugin has answered for every event of it: delivered
/// (OK), counted lost as `rejected` (REJECT, with the plugin's reason in
/// the log), or written again after a backoff (RETRY; the plugin's
/// retry-after when longer) until delivered, rejected or the drain deadline
/// at shutdown (counted lost as `shutdown`). A plugin that cannot be
/// loaded, opened or started, or whose write fails for good, fails the
/// sink: its events are counted lost as `write_failed`, with the reason
/// logged once as critical.
///
/// In a runner, a write that crashes the output or runs past
/// `write_timeout` (the runner is then killed) costs the runner, not the
/// host: the crash is logged naming the call, a new runner is started after
/// `restart_backoff` (doubling while crashes follow each other) and the
/// batch written to it again; a batch that crashed its output
/// `PluginSinkConfig.maxBatchCrashes` times is counted lost (`write_failed`),
/// so that one poison batch cannot stall the sink. Events an output took
/// in the write that crashed may reach its peer twice.
///
/// Everything runs on the sink's own thread (`SinkRunner`), which is what
/// the ABI promises an output: one call at a time.
package final class PluginOutputSink: EventSink, OutputRunnerReporting, @unchecked Sendable {  // an EventSink, called on its runner's thread; what other threads read is in atomics and Mutexes
    private let config: PluginSinkConfig
    private let sinkName: String
    private let host: String
    private let catalog: PluginCatalog
    /// The manifest's top-level `isolation:`.
    private let manifestIsolation: Isolation?
    /// Where an output's crash is told (`vigil/sink_crashed`), until the
    /// host is stopping: then the sinks' queues are closed, and a host event
    /// would only be counted lost in them; the log tells it.
    private let hostEvents: (any SinkCrashReporting)?
    /// The sink runner's context, known from the first call on (before any
    /// runner is started): whether the host is stopping.
    private var context: SinkContext?
    private var closing: Bool { context?.isClosing ?? true }
    private let logger: Logger
    private var transport: (any PluginTransport)?
    /// The host functions of every instance of the output, in this process or a runner.
    private let receiver: OutputHost
    private var options: [BoundOption] = []
    private var pluginName = ""
    private var pluginPath = ""
    /// An instance is created and started in the transport.
    private var up = false
    /// An instance was up once: the next one is a restart.
    private var everUp = false
    private var failure: String?
    private var opened = false
    private var lastFlush = monotonicNanoseconds()
    private var rejectLogged = monotonicNanoseconds() - 60_000_000_000
    private var slowWriteLogged = monotonicNanoseconds() - 60_000_000_000
    private var flushFailedLogged = monotonicNanoseconds() - 60_000_000_000
    /// Failed periodic flushes not yet said in the log.
    private var flushFailuresUnsaid = 0
    /// Restarts of the runner since a call last returned: the restart's backoff.
    private var budget: RestartBudget
    /// Ends a runner over its `limits:` where no cgroup does (nil: none to watch).
    private var watchdog: OutputRunnerWatchdog?
    /// The runner that died between calls, reported already (on its channel thread).
    private let diedBetweenCalls = Mutex<ObjectIdentifier?>(nil)

    package let runnerCrashes = Atomic<UInt64>(0)
    package let runnerRestarts = Atomic<UInt64>(0)
    /// Why the sink failed for good, once it has (for the status and health).
    private let failedBecause = Mutex<String?>(nil)
    package var failedForGood: String? { failedBecause.withLock { $0 } }
    /// With a disk buffer in front, the events of a sink that failed stay
    /// on disk for the next start (the log says so, not "counted lost").
    private var keepsEventsOnFailure: Bool { config.buffer?.kind == .disk }
    package let retries = Atomic<UInt64>(0)
    package let retriedEvents = Atomic<UInt64>(0)
    private let isolated = Atomic<Bool>(false)
    package var isolation: Isolation { isolated.load(ordering: .relaxed) ? .process : .none }

    init(config: PluginSinkConfig, name: String, host: String, catalog: PluginCatalog, manifestIsolation: Isolation? = nil,
         hostEvents: (any SinkCrashReporting)? = nil, logger: Logger) {
        self.hostEvents = hostEvents
        self.budget = .output(config.supervision)
        self.config = config
        self.sinkName = name
        self.host = host
        self.catalog = catalog
        self.manifestIsolation = manifestIsolation
        var logger = logger
        logger[metadataKey: "sink"] = "\(name)"
        self.logger = logger
        self.receiver = OutputHost(logger: logger, sink: name)
    }

    package var tickInterval: Int64 { up && transport?.flushes == true ? config.flushInterval : SinkTicks.never }

    package var outputRunner: (any OutputRunnerReporting)? { self }
    /// Its flush every `flush_interval` runs behind a disk buffer too.
    package var ticksBehindBuffer: Bool { true }

    /// Finds the plugin and sets up its transport (a runner that loaded and
    /// described it, or the plugin loaded here), once; the reason it could
    /// not, otherwise. The instance is brought up by `bringUp`.
    private func open() -> String? {
        if opened { return failure }
        opened = true
        let reference = config.plugin
        let isPath = reference.contains("/") || reference.hasSuffix(".so")
        let path = isPath ? reference : catalog.locate(reference)
        let decision = IsolationDecision.decide(own: config.isolation, of: "sink", manifestDefault: manifestIsolation,
                                                path: path, hostDirectories: PluginProbes.hostDirectories())
        let description: PluginDescription
        if decision.isolation == .process, let path {
            guard let runner = startRunner(path: path) else { return failure }
            description = runner.description
            transport = runner
            isolated.store(true, ordering: .relaxed)
            watchdog = OutputRunnerWatchdog(limits: config.limits, runner: runner, label: sinkName, logger: logger)
        } else {
            switch catalog.load(reference: reference) {
            case .failure(let refusal):
                failure = "its plugin was refused: \(refusal.reason)"
                return failure
            case .success(let loaded):
                description = loaded.description
                transport = InProcessTransport(plugin: loaded)
            }
        }
        guard description.kind == .output else {
            failure = "plugin '\(description.name)' is a monitor, not an output"
            transport?.destroy(timeout: config.timeout)
            return failure
        }
        pluginName = description.name
        pluginPath = description.path
        receiver.gate.setPlugin(description.name)
        let (options, problems) = OptionBinder.bind(config.options, at: config.optionsLocation, of: "sink '\(sinkName)'",
                                                    to: description)
        if let problem = problems.first(where: { $0.level == .error }) {
            failure = "\(problem.location): \(problem.message)"
            transport?.destroy(timeout: config.timeout)
            return failure
        }
        self.options = options
        let place = decision.isolation == .process
            ? "in a runner process (pid \(transport?.runnerPID.map { "\($0)" } ?? "?"))" : "in the host's process"
        logger.info("output plugin \(description.name) \(description.version) runs \(place) (\(decision.reason)); \(description.path)")
        return nil
    }

    /// The first runner of the output: the file checked here as for an
    /// in-process load, then loaded and described by the runner. Nil (and
    /// `failure` says why) when it could not be had.
    private func startRunner(path: String) -> RunnerTransport? {
        switch PluginFile.open(path, policy: catalog.vetting.policy) {
        case .failure(let refusal):
            failure = "its plugin was refused: \(refusal.reason)"
            return nil
        case .success(let file): for line in file.warnings { catalog.vetting.warn(line) }
        }
        var launch = RunnerLaunch(path: path, allowUnsafe: catalog.vetting.policy.allowUnsafe, monitor: "sink-\(sinkName)",
                                  limits: config.limits, user: config.user, loadTimeout: config.timeout)
        if config.limits.memory != nil || config.limits.cpuPercent != nil {
            switch RunnerCgroups.shared {
            case .success(let cgroups): launch.cgroups = cgroups
            case .failure(let why): logger.warning("limits by setrlimit only (no cgroup for the output's runner): \(why)")
            }
        }
        do {
            let runner = RunnerTransport(first: try RunnerProcess.start(launch), launch: launch)
            // A runner killed from outside, or dead of a plugin thread's crash, between calls.
            runner.whenDiedOutsideACall { [weak self] death, process in
                guard let self else { return }
                self.diedBetweenCalls.withLock { $0 = ObjectIdentifier(process) }
                self.runnerCrashes.add(1, ordering: .relaxed)
                self.logger.error("output '\(process.description.name)' ended between calls (\(death))\(self.receiver.lastWords); a new runner takes the next write")
                guard !self.closing else { return }
                self.hostEvents?.sinkCrashed(sink: self.sinkName, plugin: process.description.path, call: "between calls",
                                             death: death, events: nil, lastLog: self.receiver.recentLines)
            }
            return runner
        } catch {
            failure = "its plugin was refused: \(error)"
            return nil
        }
    }

    private enum BringUp {
        case up
        /// For good: the sink fails.
        case failed(String)
        case crashed(call: String, RunnerDeath)
    }

    /// Creates and starts an instance (in a new runner, if the last one died).
    private func bringUp() -> BringUp {
        guard let transport else { return .failed(failure ?? "no output") }
        switch transport.create(name: sinkName, options: options, interval: 0, receiver: receiver, timeout: config.timeout) {
        case .crashed(let death): return .crashed(call: "create", death)
        case .returned(let status, let message) where status != VIGIL_OK:
            return .failed("create returned \(statusName(status)): \(message)")
        case .returned: break
        }
        switch transport.start(timeout: config.timeout) {
        case .crashed(let death): return .crashed(call: "start", death)
        case .returned(let status, let message) where status != VIGIL_OK:
            transport.destroy(timeout: config.timeout)
            return .failed("start returned \(statusName(status)): \(message)")
        case .returned: break
        }
        up = true
        return .up
    }

    /// The runner that served the instance died between calls (reported
    /// then): it is let go, and the next write starts another.
    private func noticeDeathBetweenCalls() {
        guard up, let runner = transport as? RunnerTransport, let current = runner.currentProcess, current.isDead,
              diedBetweenCalls.withLock({ $0 }) == ObjectIdentifier(current) else { return }
        diedBetweenCalls.withLock { $0 = nil }
        runner.discard()
        up = false
    }

    /// Logs, counts and tells (`vigil/sink_crashed`) the output's runner
    /// ending in `call`, with the batch in it (a write).
    private func noteCrash(_ call: String, _ death: RunnerDeath, events: Int? = nil, attempt: UInt32 = 1) {
        up = false
        runnerCrashes.add(1, ordering: .relaxed)
        let how = death.killedBecause == nil ? "crashed" : "was ended"
        let detail = events.map { ": a batch of \($0) events, attempt \(attempt)" } ?? ""
        logger.error("output '\(pluginName)' \(how) in \(call) (\(death))\(detail)\(receiver.lastWords)")
        guard !closing else { return }
        hostEvents?.sinkCrashed(sink: sinkName, plugin: pluginPath, call: call, death: death, events: events,
                                lastLog: receiver.recentLines)
    }

    package func write(_ batch: [Event], context sinkContext: SinkContext) throws {
        if context == nil { context = sinkContext }
        if let why = open() {
            sinkContext.countLost(batch.count, .writeFailed)
            reportFailureOnce(why)
            return
        }
        var start = 0
        while start < batch.count {
            if sinkContext.shouldAbandon {
                // Past the drain deadline: no new write, for the rest of this batch or a batch popped since.
                sinkContext.countLost(batch.count - start, .shutdown)
                return
            }
            let end = min(batch.count, start + config.batch)
            deliver(Array(batch[start..<end]), sinkContext)
            start = end
        }
    }

    /// Writes `events` until each is answered for; counts what is lost.
    private func deliver(_ events: [Event], _ sinkContext: SinkContext) {
        var pending = events
        var attempt: UInt32 = 1
        var retry = Backoff(min: config.retryMin, max: config.retryMax)
        var batchCrashes = 0
        /// A crash (or hang) charged to this batch; false when the batch is lost for it.
        func charge() -> Bool {
            batchCrashes += 1
            guard batchCrashes >= PluginSinkConfig.maxBatchCrashes else { return true }
            logger.error("a batch of \(pending.count) events ended the output \(batchCrashes) times: counted lost (write_failed)")
            sinkContext.countLost(pending.count, .writeFailed)
            return false
        }
        while !pending.isEmpty {
            if failure != nil {
                sinkContext.countLost(pending.count, .writeFailed)
                return
            }
            noticeDeathBetweenCalls()
            if !up {
                if sinkContext.shouldAbandon {  // no new runner past the drain deadline
                    sinkContext.countLost(pending.count, .shutdown)
                    return
                }
                if everUp {
                    // After a crash: the runner's backoff, doubled for each restart in a row.
                    guard case .restart(let delay) = budget.decide(now: monotonicNanoseconds(), jitter: Double.random(in: 0..<1)) else {
                        preconditionFailure("an output's restart budget always restarts")
                    }
                    let inARow = budget.recent.count
                    logger.notice("restarting the output in \(RunnerProcess.seconds(delay)) (\(inARow) crash\(inARow == 1 ? "" : "es") in a row)")
                    sinkContext.pause(delay)
                    if sinkContext.shouldAbandon {
                        sinkContext.countLost(pending.count, .shutdown)
                        return
                    }
                    runnerRestarts.add(1, ordering: .relaxed)
                }
                switch bringUp() {
                case .up:
                    if everUp { logger.notice("output '\(pluginName)' restarted (runner pid \(transport?.runnerPID.map { "\($0)" } ?? "?"))") }
                    everUp = true
                case .failed(let why):
                    failure = why
                    reportFailureOnce(why)
                    continue
                case .crashed(let call, let death):
                    everUp = true
                    noteCrash(call, death)
                    if !charge() { return }
                    continue
                }
            }
            let before = (transport as? RunnerTransport)?.currentProcess
            let now = monotonicNanoseconds()
            // At shutdown, the drain deadline bounds the write as well (set while it runs, too).
            guard let outcome = transport?.write(pending, host: host, attempt: attempt, timeout: config.writeTimeout,
                                                 giveUpAt: { sinkContext.abandonDeadline }) else { return }
            let answer: OutputBatch.Answer
            switch outcome {
            case .crashed(let death):
                up = false
                if let before, diedBetweenCalls.withLock({ $0 }) == ObjectIdentifier(before) {
                    // Reported as it happened (the same object, alive until now): not this batch's doing.
                    diedBetweenCalls.withLock { $0 = nil }
                } else {
                    noteCrash("write", death, events: pending.count, attempt: attempt)
                    if sinkContext.shouldAbandon {
                        logger.error("gave up at the drain deadline: \(pending.count) events lost (shutdown)")
                        sinkContext.countLost(pending.count, .shutdown)
                        return
                    }
                    if !charge() { return }
                }
                // Written again: a new attempt, which an output may take as "possibly seen before".
                attempt = attempt == UInt32.max ? attempt : attempt + 1
                continue
            case .answered(let a):
                answer = a
            }
            budget.succeeded()
            let took = monotonicNanoseconds() - now
            if took > config.writeTimeout, now - slowWriteLogged >= 60_000_000_000 {
                slowWriteLogged = now
                logger.warning("a write took \(RunnerProcess.seconds(took)), past its write_timeout of \(RunnerProcess.seconds(config.writeTimeout)): in the host's process a write cannot be interrupted (isolation: process can)")
            }
            if answer.status != VIGIL_OK && answer.status != VIGIL_E_TEMPORARY {
                let why = "write returned \(statusName(answer.status)): \(answer.message)"
                failure = why
                reportFailureOnce(why)
                sinkContext.countLost(pending.count, .writeFailed)
                return
            }
            if answer.rejected > 0 {
                sinkContext.countLost(answer.rejected, .rejected)
                let now = monotonicNanoseconds()
                if now - rejectLogged >= 10_000_000_000 {
                    rejectLogged = now
                    logger.warning("\(answer.rejected) events rejected by the output: \(answer.message.isEmpty ? "no reason given" : answer.message)")
                }
            }
            // Delivered now, whatever happens to the rest of the call.
            sinkContext.countDelivered(answer.delivered)
            if answer.retried > 0 {
                retries.add(1, ordering: .relaxed)
                retriedEvents.add(UInt64(answer.retried), ordering: .relaxed)
            }
            pending = zip(pending, answer.verdicts).compactMap { $1 == .retry ? $0 : nil }
            guard !pending.isEmpty else { return }
            if sinkContext.shouldAbandon {
                sinkContext.countLost(pending.count, .shutdown)
                return
            }
            // Backoff, jittered, doubled up to retry_max; never shorter than the plugin asked.
            sinkContext.pause(max(retry.next(), min(answer.retryAfter, config.retryMax)))
            attempt = attempt == UInt32.max ? attempt : attempt + 1
            if sinkContext.shouldAbandon {
                sinkContext.countLost(pending.count, .shutdown)
                return
            }
        }
    }

    package func tick(context sinkContext: SinkContext) {
        if context == nil { context = sinkContext }
        noticeDeathBetweenCalls()
        guard up, failure == nil, let transport, transport.flushes else { return }
        let now = monotonicNanoseconds()
        guard now - lastFlush >= config.flushInterval else { return }
        lastFlush = now
        switch transport.flush(deadline: now.addingSaturating(config.flushInterval), timeout: config.timeout) {
        case .crashed(let death): noteCrash("flush", death)
        case .returned(let status, let message) where status != VIGIL_OK: noteFlushFailure(status, message)
        case .returned: break
        }
    }

    /// A periodic flush that failed, logged at most every 10 s (as rejects
    /// are) with how many failed unsaid since: one a `flush_interval` could
    /// be 100 lines a second.
    private func noteFlushFailure(_ status: vigil_status, _ message: String) {
        flushFailuresUnsaid += 1
        let now = monotonicNanoseconds()
        guard now - flushFailedLogged >= 10_000_000_000 else { return }
        flushFailedLogged = now
        let more = flushFailuresUnsaid > 1 ? " (and \(flushFailuresUnsaid - 1) more failed flushes since the last such line)" : ""
        flushFailuresUnsaid = 0
        logger.warning("flush returned \(statusName(status)): \(message)\(more)")
    }

    package func shutdown(context sinkContext: SinkContext) {
        if context == nil { context = sinkContext }
        guard let transport else { return }
        noticeDeathBetweenCalls()
        // Each call within the drain deadline (a runner past it is killed).
        func timeout() -> Int64 {
            max(100_000_000, min(config.timeout, sinkContext.abandonDeadline.subtractingSaturating(monotonicNanoseconds())))
        }
        if up && failure == nil && transport.flushes {
            let deadline = min(sinkContext.abandonDeadline, monotonicNanoseconds().addingSaturating(config.timeout))
            switch transport.flush(deadline: deadline, timeout: timeout()) {
            case .crashed(let death): noteCrash("flush at shutdown", death)
            case .returned(let status, let message) where status != VIGIL_OK:
                logger.warning("flush at shutdown returned \(statusName(status)): \(message)")
            case .returned: break
            }
        }
        if up {
            switch transport.stop(timeout: timeout()) {
            case .crashed(let death): noteCrash("stop", death)
            case .returned(let status, let message) where status != VIGIL_OK:
                logger.warning("stop returned \(statusName(status)): \(message)")
            case .returned: break
            }
        }
        // A runner is let go whether or not it serves an instance.
        watchdog?.cancel()
        watchdog = nil
        transport.destroy(timeout: timeout())
        up = false
        self.transport = nil
        receiver.gate.flush()
    }

    private var failureReported = false
    private func reportFailureOnce(_ why: String) {
        guard !failureReported else { return }
        failureReported = true
        failedBecause.withLock { $0 = why }
        let fate = keepsEventsOnFailure ? "its events stay in its disk buffer for the next start, or a reload that changes the sink"
            : "its events are counted lost (write_failed)"
        logger.critical("sink '\(sinkName)' failed: \(why); \(fate)")
    }
}

/// A plugin sink's output runner, as the status, metrics and summary show it.
public protocol OutputRunnerReporting: AnyObject {
    var isolation: Isolation { get }
    /// Runners of the output that ended: crashes, hangs killed, limits.
    var runnerCrashes: Atomic<UInt64> { get }
    /// New runners started after one ended.
    var runnerRestarts: Atomic<UInt64> { get }
    /// Writes answered RETRY in whole or in part, and the events so answered.
    var retries: Atomic<UInt64> { get }
    var retriedEvents: Atomic<UInt64> { get }
    /// Why the output failed for good (it answered a write with an error
    /// other than TEMPORARY, or could not be loaded or started); nil while it has not.
    var failedForGood: String? { get }
}

/// The host functions an output instance calls: its log lines are the
/// sink's, held to the same limit as a monitor's (`PluginLogLimit`); it has
/// nothing to emit. The same whether its calls come from this process or
/// from its runner's ring.
private final class OutputHost: RunnerReceiver, Sendable {
    /// The output's log lines pass here, as a monitor's do.
    let gate: PluginLogGate
    /// An output emits nothing.
    var eventDecoder: EventDecoder? { nil }

    init(logger: Logger, sink: String) {
        self.gate = PluginLogGate(owner: "sink \(sink)", logger: logger)
    }

    /// The plugin's last few log lines.
    var recentLines: [String] { gate.recentLines }
    /// "; its last log lines: …", or "".
    var lastWords: String { gate.lastWords }

    func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status { VIGIL_E_UNSUPPORTED }
    func countRefusal(_ defect: EventDefect) {}
    func log(level: Int, message: String, cut: Int) { gate.log(level: level, message: message, cut: cut) }
    func setAvailability(_ available: Bool, reason: String) {}
    func now() -> Int64 { realtimeNanoseconds() }
    func markFinished() {}
}

/// A sink run by an output plugin (ABI 1.5):
///
///     sinks:
///       graphite:
///         type: plugin
///         plugin: graphite            # a name in plugin_dirs, or a path
///         options: { host: 127.0.0.1, port: 2003 }
///         batch: 500                  # events per write, at most
///         retry_min: 100ms            # backoff of RETRY answers
///         retry_max: 30s
///         flush_interval: 1s          # flush() of an output that buffers
///         isolation: process          # or none; the default as for monitors
///         write_timeout: 10s          # a write in a runner past this kills it
///         timeout: 5s                 # every other call (create, start, flush, stop)
///         restart_backoff: { min: 100ms, max: 30s }   # isolation: process only,
///         limits: { memory: 200MiB }                  # as for monitors
///         user: nobody
///         buffer: { type: disk, path: /var/lib/vigil/buffer/graphite }
package struct PluginSinkConfig: Sendable {
    package var plugin: String
    package var pluginLocation: SourceLocation
    /// `plugin` is a path, not a name (as a monitor's: a `/` or a `.so`).
    package var pluginIsPath: Bool { plugin.contains("/") || plugin.hasSuffix(".so") }
    /// The `options:` mapping as written.
    package var options: [ConfigEntry] = []
    package var optionsLocation: SourceLocation
    package var batch = 500
    package var retryMin: Int64 = 100_000_000
    package var retryMax: Int64 = 30_000_000_000
    package var flushInterval: Int64 = 1_000_000_000
    /// Where it runs. Nil: the manifest's top-level `isolation:`, else the
    /// host's rule (IsolationDecision), as for a monitor.
    package var isolation: Isolation?
    package var isolationLocation: SourceLocation?
    /// How long one `write` may take; in a runner, one past it is killed and
    /// the batch written again to a new one. In the host's process a write
    /// cannot be interrupted: one past it is only logged.
    package var writeTimeout: Int64 = 10_000_000_000
    package var writeTimeoutLocation: SourceLocation?
    /// How long each other call may take (create, start, flush, stop, destroy).
    package var timeout: Int64 = 5_000_000_000
    package var timeoutLocation: SourceLocation?
    /// The runner's restarts after a crash or a hang (isolation: process):
    /// only `restart_backoff` applies (restart and quarantine do not: a sink
    /// always restarts its output, and a batch that crashed it
    /// `maxBatchCrashes` times is counted lost).
    package var supervision: SupervisionConfig = {
        var s = SupervisionConfig()
        s.backoffMin = 100_000_000
        s.backoffMax = 30_000_000_000
        return s
    }()
    package var supervisionLocation: SourceLocation?
    /// What the runner may use (isolation: process).
    package var limits = ResourceLimits()
    package var limitsLocation: SourceLocation?
    /// Run the runner as this user (isolation: process).
    package var user: String?
    package var userLocation: SourceLocation?

    /// Crashes (or hangs) of the output in one batch's writes after which the
    /// batch is counted lost (`write_failed`), so that a batch that kills
    /// every output cannot stall the sink.
    package static let maxBatchCrashes = 3
    /// `buffer: { type: disk }`: events kept on disk until the output
    /// answered for them (OK or REJECT), across crashes and restarts.
    package var buffer: SinkBufferConfig?

    package init(plugin: String, pluginLocation: SourceLocation) {
        self.plugin = plugin
        self.pluginLocation = pluginLocation
        self.optionsLocation = pluginLocation
    }

    package static let maxBatch = 100_000
}

extension PluginSinkConfig: SinkType, DiskBufferable {
    package static let type = "plugin"
    package static let keys = ["plugin", "options", "batch", "retry_min", "retry_max", "flush_interval", "isolation", "write_timeout",
                               "timeout", "restart_backoff", "limits", "user"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> PluginSinkConfig? {
        let keys = sink.keys, name = sink.name, at = sink.location
        guard let node = keys["plugin"] else {
            d.error(at, "plugin sink '\(name)' needs 'plugin': the output plugin to run", hint: "plugin: NAME, or a path to its .so")
            return nil
        }
        guard let plugin = d.string(node, what: "'plugin'"), !plugin.isEmpty else { return nil }
        var config = PluginSinkConfig(plugin: plugin, pluginLocation: node.location)
        if let options = keys["options"] {
            config.optionsLocation = options.location
            switch options {
            case .mapping(let entries, _): config.options = entries
            case .scalar(let s) where s.isNull: break
            default: d.error(options.location, "'options' must be a mapping, not \(options.kindName)")
            }
        }
        if let n = keys["batch"], let v = d.int(n, what: "'batch'", in: 1...Int64(PluginSinkConfig.maxBatch), unit: " events") {
            config.batch = Int(v)
        }
        if let n = keys["retry_min"], let ns = d.duration(n, what: "'retry_min'") { config.retryMin = max(ns, 10_000_000) }
        if let n = keys["retry_max"], let ns = d.duration(n, what: "'retry_max'") { config.retryMax = max(ns, config.retryMin) }
        if let n = keys["flush_interval"], let ns = d.duration(n, what: "'flush_interval'") { config.flushInterval = max(ns, 10_000_000) }
        if let n = keys["isolation"] {
            config.isolation = d.choice(n, what: "'isolation'", of: Isolation.self)
            config.isolationLocation = n.location
        }
        if let n = keys["write_timeout"], let ns = d.duration(n, what: "'write_timeout'", atLeast: 10_000_000) {
            config.writeTimeout = ns
            config.writeTimeoutLocation = n.location
        }
        if let n = keys["timeout"], let ns = d.duration(n, what: "'timeout'", atLeast: 10_000_000) {
            config.timeout = ns
            config.timeoutLocation = n.location
        }
        if let n = keys["restart_backoff"],
           let backoff = Keys(nested: n, what: "'restart_backoff'", of: keys.context, known: ManifestLoader.backoffKeys,
                              example: "restart_backoff: { min: 100ms, max: 30s }", &d) {
            sink.loader.loadBackoff(backoff, into: &config.supervision, &d)
            config.supervisionLocation = n.location
        }
        if let n = keys["limits"],
           let limits = Keys(nested: n, what: "'limits'", of: keys.context, known: ManifestLoader.resourceLimitKeys,
                             example: "limits: { memory: 200MiB, cpu: 25%, open_files: 256 }", &d) {
            config.limits = sink.loader.loadLimits(limits, &d)
            config.limitsLocation = n.location
        }
        if let n = keys["user"], let user = sink.loader.loadUser(n, &d) {
            config.user = user
            config.userLocation = n.location
        }
        // A runner's keys say nothing to an output in the host's process.
        if config.isolation == Isolation.none, let at = config.isolationLocation {
            for entry in keys.entries where ["restart_backoff", "limits", "user", "write_timeout"].contains(entry.key.text) {
                d.warning(entry.key.location, "'\(entry.key.text)' applies only to isolation: process",
                          hint: entry.key.text == "write_timeout"
                              ? "sink '\(name)' runs its output in vigil's own process (isolation: none at \(at)), where a write cannot be interrupted; set isolation: process for a write that hangs to be ended"
                              : "sink '\(name)' runs its output in vigil's own process (isolation: none at \(at)); remove '\(entry.key.text)' or set isolation: process")
            }
        }
        return config
    }

    /// An output plugin answers for every event (OK, RETRY, REJECT).
    package var diskBufferRefusal: String? { nil }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        var config = self
        config.plugin = Manifest.pluginReference(plugin, isPath: pluginIsPath, in: build.manifestDirectory)
        return PluginOutputSink(config: config, name: build.config.name, host: build.host,
                                catalog: build.catalog ?? PluginCatalog(directories: PluginCatalog.ownDirectories()),
                                manifestIsolation: build.manifestIsolation, hostEvents: build.hostEvents, logger: build.logger)
    }

    /// The plugin is found and described by its probe child, is an output,
    /// and takes the sink's options; a `write_timeout` or a runner's keys
    /// say nothing to an output that will run in the host's process.
    /// Creating the output is left to `run`.
    package func validate(_ sink: SinkConfig, in manifest: Manifest, probes: PluginProbes) -> [Diagnostic] {
        let name = sink.name
        let probed: ProbedPlugin
        switch probes.describe(reference: reference(in: manifest)) {
        case .failure(let refusal):
            return [Diagnostic(at: pluginLocation, "sink '\(name)': \(refusal.description)")]
        case .success(let found):
            probed = found
        }
        let d = probed.description
        guard d.kind == .output else {
            return [Diagnostic(at: pluginLocation, "sink '\(name)': plugin '\(d.name)' is a monitor, not an output")]
        }
        var diagnostics = OptionBinder.bind(options, at: optionsLocation, of: "sink '\(name)'", to: d).1
        // An explicit isolation: none is warned of by the loader.
        let decision = decide(in: manifest, path: d.path)
        guard decision.isolation == .none, isolation == nil else { return diagnostics }
        if let at = writeTimeoutLocation {
            diagnostics.append(Diagnostic(.warning, at: at, "sink '\(name)': 'write_timeout' cannot end a write in the host's process, where this output runs (\(decision.reason))",
                                          hint: "set isolation: process for a write that hangs to be ended and written again"))
        }
        for (key, at) in [("restart_backoff", supervisionLocation), ("limits", limitsLocation), ("user", userLocation)] {
            guard let at else { continue }
            diagnostics.append(Diagnostic(.warning, at: at, "sink '\(name)': '\(key)' applies only to isolation: process; this output runs in the host's process (\(decision.reason))",
                                          hint: "remove '\(key)' or set isolation: process"))
        }
        return diagnostics
    }

    /// The plugin `plugin:` names, as `run` looks for it.
    func reference(in manifest: Manifest) -> String {
        Manifest.pluginReference(plugin, isPath: pluginIsPath, in: manifest.directory)
    }

    /// Where `run` will run the output, the plugin found at `path`.
    func decide(in manifest: Manifest, path: String?) -> IsolationDecision {
        IsolationDecision.decide(own: isolation, of: "sink", manifestDefault: manifest.isolation, path: path,
                                 hostDirectories: PluginProbes.hostDirectories())
    }

    package func placement(in manifest: Manifest, catalog: PluginCatalog) -> String? {
        let reference = reference(in: manifest)
        let path = pluginIsPath ? reference : catalog.locate(reference)
        let d = decide(in: manifest, path: path)
        return "\(d.isolation == .process ? "isolation: process" : "isolation: none") (\(d.reason))"
    }
}
