import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals
import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

@preconcurrency import CVigilPlugin

/// What serves the control API beside a run: VigilControl's
/// `ControlOptions`. Asked once, as the run starts; never with `--once`.
public protocol ControlPlane: Sendable {
    /// The services that serve the API for `runtime`. Throws when an address
    /// that was asked for cannot be had: the run ends before it starts.
    func services(for runtime: VigilRuntime, logger: Logger) throws -> [any Service]
}

/// Everything `vigil run` needs besides the manifest.
public struct RunOptions: Sendable {
    /// Where sinks of `type: plugin` find their output plugins: the run's
    /// catalog, with its vetting (nil: the manifest's directories, unvetted
    /// by owner rules, for tests of the runtime alone).
    public var outputCatalog: PluginCatalog?
    /// Stop by itself after this many nanoseconds.
    public var runFor: Int64?
    /// How long sinks may take to drain at shutdown before giving up.
    public var drainTimeout: Int64 = 5_000_000_000
    /// How long `stop` of all instances may take.
    public var stopTimeout: Int64 = 10_000_000_000
    public var hostName: String?
    /// Where to write a JSON summary of the run at exit (counters, resources).
    public var summaryPath: String?
    /// The control API served beside the run (VigilControl's
    /// `ControlOptions`); nil: none. Never with `once`.
    public var controlPlane: (any ControlPlane)?
    /// Reads and resolves the manifest again for a reload; nil: no reloads.
    public var reloader: ManifestReloader?
    /// `--watch`: reload when the manifest, a file it includes or a
    /// directory it includes from changes (needs `reloader`).
    public var watch = false
    /// `vigil run --once`: one poll of each monitor, its events on stdout, no
    /// sink of the manifest made, no control socket (OnceRun.swift).
    public var once: OnceOptions?
    /// `--allow-unsafe-plugins`: a runner the runtime starts later (a
    /// monitor whose plugin asked for a process of its own) loads as the
    /// run's others did.
    public var allowUnsafePlugins = false

    public init(runFor: Int64? = nil) {
        self.runFor = runFor
    }
}

/// A changed manifest, read and resolved for a reload: what the CLI's
/// loader hands the runtime.
public enum ReloadInput: Sendable {
    case ready(Manifest, ResolvedManifest<HostedPlugin>, warnings: [Diagnostic])
    case invalid([Diagnostic])
}

/// Reads the manifest again and resolves it. `reuse` gives the plugin of a
/// monitor whose configuration did not change (nothing is loaded or started
/// for it); every other monitor is resolved as at start.
public typealias ManifestReloader = @Sendable (_ reuse: @escaping @Sendable (MonitorConfig, Manifest) -> HostedPlugin?) -> ReloadInput

/// The running host: sinks, bus, monitors, and the services that drive them.
///
/// What is in force (the manifest, the monitors, the sinks and their slots)
/// is replaced by a reload (`reload()`), which applies the difference only:
/// a monitor or sink whose configuration did not change keeps running as it
/// was, the same instance, queue and thread.
public final class VigilRuntime: @unchecked Sendable {  // the configuration is behind `current`, times are atomic; `group` and `control` are set in `run` before any service starts
    let logger: Logger
    package let bus: EventBus
    package let hostEvents: HostEvents
    /// Thresholds and rules (empty when the manifest has none).
    let conditions: ConditionProcessor
    let actions: ActionRunner
    let options: RunOptions
    /// The resolution at start (its refusals are reported as the host starts).
    let resolution: ResolvedManifest<HostedPlugin>

    package struct Current {
        var manifest: Manifest
        var host: String
        /// Enabled monitors that resolved, in manifest order.
        var instances: [MonitorInstance]
        /// The manifest's sinks, in manifest order, and the bus slot of each.
        var sinks: [SinkRunner]
        var slots: [String: Int]
        /// Sinks a reload removed or replaced that are still draining (the
        /// shutdown joins them too); once stopped, only their counters stay,
        /// in `retiredSinkFigures`, summed by name.
        var drainingSinks: [SinkRunner] = []
        var retiredSinkFigures: [RunSummary.Sink] = []
        /// What is left of the instances a reload retired: their counters,
        /// summed by name (the instances themselves are freed).
        var retiredMonitors: [MonitorFigures] = []
        var rules: [RuleSpec]
        var reloads: UInt64 = 0
        var failedReloads: UInt64 = 0
        /// The manifest's files as read when it was loaded (start, or the last reload applied).
        var manifestTexts: [ManifestFileText] = []
        /// The last reload tried: when (wall clock, ns), why, and how it went.
        var lastReload: (at: Int64, reason: String, result: ReloadResult)?
    }

    /// One file of the manifest in force, as read when it was loaded.
    package struct ManifestFileText: Sendable {
        package let path: String
        package let text: String

        /// The texts of `files`: at most `maxBytes` in all (what is past it is said, not kept).
        static func read(_ files: [String], maxBytes: Int = 4 << 20) -> [ManifestFileText] {
            var left = maxBytes
            return files.map { path in
                guard left > 0 else { return ManifestFileText(path: path, text: "# not shown: the manifest's files pass \(maxBytes) bytes\n") }
                guard let data = FileManager.default.contents(atPath: path) else {
                    return ManifestFileText(path: path, text: "# cannot be read now\n")
                }
                let kept = data.prefix(left)
                left -= kept.count
                return ManifestFileText(path: path, text: String(decoding: kept, as: UTF8.self))
            }
        }
    }

    private let current: Mutex<Current>

    package var manifest: Manifest { current.withLock { $0.manifest } }
    package var manifestTexts: [ManifestFileText] { current.withLock { $0.manifestTexts } }
    package var lastReload: (at: Int64, reason: String, result: ReloadResult)? { current.withLock { $0.lastReload } }
    package var conditionStates: ConditionEngine.Snapshot { conditions.snapshot }
    var host: String { current.withLock { $0.host } }
    package var instances: [MonitorInstance] { current.withLock { $0.instances } }
    package var sinks: [SinkRunner] { current.withLock { $0.sinks } }
    /// The sinks that run or drain: what the shutdown stops and joins.
    var runningSinks: [SinkRunner] { current.withLock { $0.drainingSinks + $0.sinks } }
    /// Every sink's counters for the run, one entry per name: the running
    /// runner's, and those of the ones a reload retired or is retiring.
    package var sinkFigures: [RunSummary.Sink] {
        let (retired, running) = current.withLock { ($0.retiredSinkFigures, $0.drainingSinks + $0.sinks) }
        return RunSummary.Sink.merged(retired + running.map(\.figures))
    }

    /// A retired sink that finished draining leaves only its counters.
    private func retire(_ runner: SinkRunner) {
        let figures = runner.figures
        current.withLock { c in
            c.drainingSinks.removeAll { $0 === runner }
            c.retiredSinkFigures = RunSummary.Sink.merged(c.retiredSinkFigures + [figures])
        }
    }
    /// Every monitor's counters for the run, one entry per name: the
    /// running instance's and those of the ones a reload retired.
    package var monitorFigures: [MonitorFigures] {
        let (retired, instances) = current.withLock { ($0.retiredMonitors, $0.instances) }
        return MonitorFigures.merged(retired + instances.map(\.figures))
    }
    var ruleSpecs: [RuleSpec] { current.withLock { $0.rules } }
    package var reloadCounts: (done: UInt64, failed: UInt64) { current.withLock { ($0.reloads, $0.failedReloads) } }
    /// The verdicts of a `--once` run; nil for another run.
    let once: OnceRun?
    /// The monitors as sinks that keep series see them.
    let directory: MonitorDirectory

    /// Every plugin in process (tests, tools).
    public convenience init(manifest: Manifest, resolution: ManifestResolution, options: RunOptions, logger: Logger) {
        self.init(manifest: manifest, resolution: resolution.hosted, options: options, logger: logger)
    }

    public init(manifest: Manifest, resolution: ResolvedManifest<HostedPlugin>, options: RunOptions, logger: Logger) {
        // --once: the manifest's sinks are never made; one stdout sink takes every event.
        let manifest = options.once?.manifest(replacingSinksOf: manifest) ?? manifest
        self.once = options.once.map(OnceRun.init)
        self.resolution = resolution
        self.options = options
        self.logger = logger
        let host = options.hostName ?? manifest.host ?? VigilRuntime.hostName()
        let directory = MonitorDirectory()
        self.directory = directory
        // Made before the sinks (an output's runner reports its crashes as
        // host events), connected once the bus over them is.
        let hostEvents = HostEvents(clock: realtimeNanoseconds)
        let sinks = manifest.sinks.map { config in
            SinkRunner(config: config, sink: options.once.map { OnceSink(json: $0.json, host: host) }
                           ?? SinkBuild.make(config, host: host, logger: logger, directory: directory,
                                                   manifestDirectory: manifest.directory,
                                                   manifestIsolation: manifest.isolation, hostEvents: hostEvents,
                                                   catalog: options.outputCatalog
                                                       ?? PluginCatalog(directories: manifest.resolvedPluginDirs + PluginCatalog.ownDirectories())),
                           logger: logger)
        }
        var slots: [String: Int] = [:]
        for (i, sink) in manifest.sinks.enumerated() { slots[sink.name] = i }
        let bus = EventBus(sinks: sinks, compiler: RouteCompiler(manifest: manifest))
        self.bus = bus
        hostEvents.connect(bus: bus)
        self.hostEvents = hostEvents
        let actions = ActionRunner(logger: logger)
        self.actions = actions
        let conditions = ConditionProcessor(thresholds: resolution.thresholds, rules: resolution.rules,
                                            plugins: Self.pluginNames(resolution), bus: bus, runner: actions,
                                            host: host, logger: logger)
        self.conditions = conditions
        let instances = resolution.monitors.filter(\.config.enabled).map { monitor in
            Self.instance(monitor, manifest: manifest, bus: bus, hostEvents: hostEvents, conditions: conditions, logger: logger,
                          schedulesPolls: options.once == nil)
        }
        current = Mutex(Current(manifest: manifest, host: host, instances: instances, sinks: sinks, slots: slots,
                                rules: resolution.rules, manifestTexts: ManifestFileText.read(manifest.files)))
        directory.attach(self)
    }

    static func pluginNames(_ resolution: ResolvedManifest<HostedPlugin>) -> [String: String] {
        var plugins: [String: String] = [:]
        for m in resolution.monitors { plugins[m.config.name] = m.plugin.description.name }
        return plugins
    }

    static func instance(_ monitor: ResolvedManifest<HostedPlugin>.Monitor, manifest: Manifest, bus: EventBus,
                         hostEvents: HostEvents, conditions: ConditionProcessor, logger: Logger,
                         schedulesPolls: Bool = true) -> MonitorInstance {
        let instance = MonitorInstance(config: monitor.config, description: monitor.plugin.description,
                                       transport: monitor.plugin.transport(), options: monitor.options, bus: bus,
                                       hostEvents: hostEvents, logger: logger, conditions: conditions,
                                       plugin: monitor.plugin, fingerprint: fingerprint(monitor.config, in: manifest),
                                       schedulesPolls: schedulesPolls)
        instance.observe(kinds: conditions.watchedKinds(monitor.config.name))
        return instance
    }

    /// What a monitor's configuration says (its thresholds apart: they are
    /// the conditions' business), with what of the manifest decides how its
    /// plugin is found, checked and run.
    static func fingerprint(_ config: MonitorConfig, in manifest: Manifest) -> String {
        ConfigFingerprint.of(config, skipping: ["thresholds"]) + "|dirs:" + manifest.resolvedPluginDirs.joined(separator: ":")
            + "|isolation:" + ConfigFingerprint.of(manifest.isolation as Any) + "|unsafe:\(manifest.allowUnsafePlugins)"
    }

    /// A sink's configuration, with the host name its encoder writes.
    static func fingerprint(_ config: SinkConfig, host: String) -> String {
        ConfigFingerprint.of(config) + "|host:" + host
    }

    public static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Runs until SIGINT/SIGTERM or `runFor`: starts sinks, then monitors; on
    /// the way out stops every monitor, then drains every sink, all within
    /// one drain deadline. Returns what the run delivered and lost.
    @discardableResult
    public func run() async throws -> RunSummary {
        signal(SIGPIPE, SIG_IGN)
        // Past the file size limit, a write or a runner's ring fails with
        // EFBIG and is reported; the signal would end the host.
        signal(SIGXFSZ, SIG_IGN)
        let drain = DrainDeadline(timeout: options.drainTimeout)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: EarlySignalService(runtime: self, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup),
            .init(service: SinksService(runtime: self, drain: drain, logger: logger)),
            .init(service: SupervisorService(runtime: self, stopTimeout: options.stopTimeout, drain: drain)),
        ]
        services.append(.init(service: HangupService(runtime: self, logger: logger)))
        if options.watch, options.reloader != nil {
            services.append(.init(service: ManifestWatchService(runtime: self, logger: logger)))
        }
        if once == nil, let plane = options.controlPlane {
            services += try plane.services(for: self, logger: logger).map { .init(service: $0) }
        }
        if let once {
            services.append(.init(service: OnceService(once: once, runtime: self), successTerminationBehavior: .gracefullyShutdownGroup))
        }
        if let runFor = options.runFor {
            services.append(.init(service: TimerService(duration: runFor),
                                  successTerminationBehavior: .gracefullyShutdownGroup))
        }
        // Last, so that a shutdown reaches it first (EarlySignals.swift).
        services.append(.init(service: StopNoticeService(runtime: self)))
        // The library's own steps ("Starting service sl-service=…", every
        // service's description) are its internals, not the host's: they
        // filled a debug log. Its warnings and errors still reach the log.
        var lifecycleLogger = logger
        lifecycleLogger.logLevel = max(logger.logLevel, .warning)
        let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint],
                                                      logger: lifecycleLogger))
        self.group = group
        for instance in instances { watchDone(instance) }
        started = monotonicNanoseconds()
        try await group.run()
        // Runners whose instances were destroyed leave within a second (or are killed then).
        if !RunnerProcess.awaitAll(until: monotonicNanoseconds().addingSaturating(2_000_000_000)) {
            logger.warning("some runner processes had not ended 2 s after their monitors stopped")
        }
        stopped = monotonicNanoseconds()
        let summary = summary()
        report(summary)
        if let path = options.summaryPath { writeSummary(summary, to: path) }
        return summary
    }

    /// The monitors whose first create said their options are invalid, as
    /// `validate` reports them: the run was refused and nothing started
    /// (`vigil run` exits 2 with them).
    public private(set) var refusedAtStart: [Diagnostic] {
        get { refusals.withLock { $0 } }
        set { refusals.withLock { $0 = newValue } }
    }
    private let refusals = Mutex<[Diagnostic]>([])

    /// Creates every monitor's instance before any starts, in parallel on
    /// their queues, and judges the answers as `validate` does
    /// (`ResolvedManifest.judge`): the errors of the manifest's own making
    /// (INVALID_CONFIG), which refuse the run. Other answers are left to
    /// each monitor's `launch` (waits, retries, failures of its own).
    func prepareAll() async -> [Diagnostic] {
        let list = instances
        let found = CreateRefusals()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let group = DispatchGroup()
            for (i, instance) in list.enumerated() {
                group.enter()
                let judge: @Sendable (MonitorInstance, (status: vigil_status, message: String)?) -> Void = { instance, answer in
                    if let answer, answer.status == VIGIL_E_INVALID_CONFIG || answer.status == VIGIL_E_UNSUPPORTED,
                       let d = ResolvedManifest<HostedPlugin>.judge(create: answer.status, message: answer.message, of: instance.config) {
                        found.add(d, at: i)
                    }
                    group.leave()
                }
                instance.prepare { [self] answer in
                    // Its plugin cannot run here and nothing chose where it runs: a runner's create answers.
                    if asksForRunner(instance, answer), let moved = moveToRunner(instance, because: answer?.message ?? "") {
                        moved.prepare { judge(moved, $0) }
                    } else {
                        judge(instance, answer)
                    }
                }
            }
            group.notify(queue: .global()) { done.resume() }
        }
        let diagnostics = found.inOrder
        refusedAtStart = diagnostics
        return diagnostics
    }

    /// The host has begun to stop: no monitor ended from now on is restarted
    /// (the instances a reload in progress adds are told after it).
    func hostIsStopping() {
        stopping.store(true, ordering: .releasing)
        for instance in instances { instance.hostIsStopping() }
    }
    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Puts `new` in `old`'s place among the running monitors; false when
    /// `old` is no longer one of them (a reload removed it).
    func replace(_ old: MonitorInstance, with new: MonitorInstance) -> Bool {
        current.withLock { c in
            guard let i = c.instances.firstIndex(where: { $0 === old }) else { return false }
            c.instances[i] = new
            return true
        }
    }

    /// Stops the run as SIGTERM would.
    func stopSoon() {
        Task { [group] in await group?.triggerGracefulShutdown() }
    }

    /// When every monitor has finished (a bounded workload) or failed, the
    /// host stops by itself.
    func watchDone(_ instance: MonitorInstance) {
        instance.onDone = { [self] in
            let now = instances
            guard now.allSatisfy(\.isDone), now.contains(where: { $0.finished.load(ordering: .acquiring) }),
                  !allFinished.exchange(true, ordering: .acquiringAndReleasing) else { return }
            logger.notice("every monitor has finished; stopping")
            Task { [group] in await group?.triggerGracefulShutdown() }
        }
    }

    private let allFinished = Atomic<Bool>(false)
    private let stopping = Atomic<Bool>(false)
    private var group: ServiceGroup?
    /// Every sink's losses, sampled once a second by the supervisor: what
    /// health says was lost in the last minute.
    package let lossHistory = LossHistory()
    /// When the services started and stopped (monotonic ns; 0: not yet),
    /// read by the control API's threads.
    package var started: Int64 {
        get { startedAt.load(ordering: .acquiring) }
        set { startedAt.store(newValue, ordering: .releasing) }
    }
    var stopped: Int64 {
        get { stoppedAt.load(ordering: .acquiring) }
        set { stoppedAt.store(newValue, ordering: .releasing) }
    }
    private let startedAt = Atomic<Int64>(0)
    private let stoppedAt = Atomic<Int64>(0)

    /// Stops monitors in parallel, each on its own queue; waits at most `timeout`.
    func stopInstances(timeout: Int64) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { [self] in
                stop(instances, timeout: timeout)
                done.resume()
            }
        }
    }

    /// Stops `list` in parallel and waits (blocking) at most `timeout`.
    func stop(_ list: [MonitorInstance], timeout: Int64) {
        let group = DispatchGroup()
        for instance in list {
            group.enter()
            instance.shutdown { group.leave() }
        }
        if group.wait(timeout: .now() + .nanoseconds(Int(clamping: max(0, timeout)))) == .timedOut {
            let stuck = list.filter { $0.state != .stopped && $0.state != .failed }.map(\.name)
            logger.error("monitors \(stuck.joined(separator: ", ")) did not stop within \(Units.formatDuration(timeout)); going on without them")
            abandonedMonitors.withLock { $0.formUnion(stuck) }
        }
    }

    /// Monitors a stop (at shutdown or in a reload) had to leave running
    /// in the host's process: a run that had to exits 1.
    let abandonedMonitors = Mutex<Set<String>>([])

    /// After a run: the monitors left running because they would not stop.
    public var abandoned: [String] { abandonedMonitors.withLock { $0.sorted() } }

    // MARK: - reload

    /// Reloads run one at a time, on this queue, and never once shutdown began.
    private let reloadQueue = DispatchQueue(label: "vigil.reload")
    /// Set (on `reloadQueue`) when shutdown begins.
    private var shuttingDown = false

    /// From now on no reload starts; one in progress has finished when this returns.
    func endReloads() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            reloadQueue.async { [self] in
                shuttingDown = true
                done.resume()
            }
        }
    }

    /// Reads the manifest again and applies what changed (SIGHUP, `vigil ctl
    /// reload`, `--watch`). An invalid manifest changes nothing.
    public func reload(reason: String) async -> ReloadResult {
        await withCheckedContinuation { (done: CheckedContinuation<ReloadResult, Never>) in
            reloadQueue.async { [self] in
                let result = applyReload(reason: reason)
                current.withLock { c in
                    if result.applied { c.reloads &+= 1 } else { c.failedReloads &+= 1 }
                    c.lastReload = (realtimeNanoseconds(), reason, result)
                }
                done.resume(returning: result)
            }
        }
    }

    /// On `reloadQueue`; blocks while monitors stop.
    private func applyReload(reason: String) -> ReloadResult {
        guard !shuttingDown else { return .refused(["the host is stopping"]) }
        guard let reloader = options.reloader else { return .refused(["this host has no manifest file to reload"]) }
        let before = current.withLock { $0 }
        let kept = Dictionary(before.instances.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        logger.notice("reloading (\(reason))")
        SystemdNotifier.shared.reloading()
        defer {
            let now = current.withLock { $0 }
            SystemdNotifier.shared.ready(status: "\(counted(now.instances.count, "monitor")), \(counted(now.sinks.count, "sink"))")
        }
        let input = reloader { config, manifest in
            guard config.enabled, let instance = kept[config.name],
                  instance.fingerprint == Self.fingerprint(config, in: manifest) else { return nil }
            return instance.plugin
        }
        guard case .ready(let manifest, let resolution, let warnings) = input else {
            if case .invalid(let diagnostics) = input {
                let errors = diagnostics.filter { $0.level == .error }
                logger.error("reload refused, the running configuration stays: \(counted(errors.count, "error")) in the manifest")
                for d in errors { logger.error("\(d.line)") }
                return .refused(errors.map(\.description))
            }
            return .refused(["no manifest"])
        }
        let errors = resolution.diagnostics.filter { $0.level == .error }
        let plan = ReloadPlan(before: before, manifest: manifest, resolution: resolution,
                              host: options.hostName ?? manifest.host ?? Self.hostName())
        guard errors.isEmpty, resolution.refused.isEmpty else {
            // Runners started for monitors that will not run now end.
            for monitor in resolution.monitors where !plan.keptMonitors.contains(monitor.config.name) {
                if case .runner(let process, _) = monitor.plugin { process.finish() }
            }
            let cannotRun = resolution.refused.compactMap { refused in
                errors.contains { $0.message.contains("'\(refused.config.name)'") } ? nil
                    : "\(refused.config.location): monitor '\(refused.config.name)' cannot run: \(refused.reason)"
            }
            let texts = errors.map(\.description) + cannotRun
            logger.error("reload refused, the running configuration stays: \(counted(texts.count, "error"))")
            for text in errors.map(\.line) + cannotRun { logger.error("\(text)") }
            return .refused(texts)
        }
        apply(plan, manifest: manifest, resolution: resolution)
        var result = plan.result
        result.warnings = (warnings + resolution.diagnostics).filter { $0.level != .error }.map(\.description)
        logger.notice("reloaded: \(plan.summary)")
        hostEvents.publish("reloaded", .notice, [
            Field("added", .string(plan.added.joined(separator: ","))),
            Field("removed", .string(plan.removed.joined(separator: ","))),
            Field("changed", .string(plan.changed.joined(separator: ","))),
            Field("unchanged", .int(Int64(plan.unchangedCount))),
        ])
        return result
    }

    /// Applies a checked plan: stops what goes, puts the new sinks and routes
    /// in force at once, then starts what comes. On `reloadQueue`.
    private func apply(_ plan: ReloadPlan, manifest: Manifest, resolution: ResolvedManifest<HostedPlugin>) {
        let before = current.withLock { $0 }
        // 1. Monitors removed or changed stop first (their events so far are in the queues).
        let leaving = before.instances.filter { plan.stoppingMonitors.contains($0.name) }
        if !leaving.isEmpty { stop(leaving, timeout: options.stopTimeout) }

        // 2. The sinks: unchanged ones keep their slot and queue; changed and
        //    new ones get a runner; changed ones keep their slot.
        var slots = [SinkRunner?](repeating: nil, count: SinkSet.capacity)
        var slotOf: [String: Int] = [:]
        var sinks: [SinkRunner] = []
        var retiring: [SinkRunner] = []
        var fresh: [(runner: SinkRunner, after: SinkRunner?)] = []
        let oldByName = Dictionary(before.sinks.map { ($0.config.name, $0) }, uniquingKeysWith: { a, _ in a })
        for runner in before.sinks where !manifest.sinks.contains(where: { $0.name == runner.config.name }) {
            retiring.append(runner)
        }
        var used = Set<Int>()
        for config in manifest.sinks {
            if oldByName[config.name] != nil, let slot = before.slots[config.name] {
                used.insert(slot)
                slotOf[config.name] = slot
            }
        }
        for config in manifest.sinks {
            let old = oldByName[config.name]
            let slot = slotOf[config.name] ?? (0..<SinkSet.capacity).first { !used.contains($0) }!
            used.insert(slot)
            slotOf[config.name] = slot
            if let old, !plan.changedSinks.contains(config.name) {
                slots[slot] = old
                sinks.append(old)
                continue
            }
            // A listening sink binds once the one it replaces has let go of the address.
            let sink = SinkBuild.make(config, host: plan.host, logger: logger, bindNow: old == nil, directory: directory,
                                     manifestDirectory: manifest.directory,
                                     manifestIsolation: manifest.isolation, hostEvents: hostEvents,
                                     catalog: options.outputCatalog
                                         ?? PluginCatalog(directories: manifest.resolvedPluginDirs + PluginCatalog.ownDirectories()))
            let runner = SinkRunner(config: config, sink: sink, logger: logger, startsLater: old != nil)
            slots[slot] = runner
            sinks.append(runner)
            fresh.append((runner, old))
            if let old { retiring.append(old) }
        }

        // 3. New monitor instances (not launched yet), in manifest order.
        var instances: [MonitorInstance] = []
        var started: [MonitorInstance] = []
        for monitor in resolution.monitors where monitor.config.enabled {
            if let old = before.instances.first(where: { $0.name == monitor.config.name }),
               !plan.stoppingMonitors.contains(old.name) {
                instances.append(old)
            } else {
                let instance = Self.instance(monitor, manifest: manifest, bus: bus, hostEvents: hostEvents,
                                             conditions: conditions, logger: logger)
                instances.append(instance)
                started.append(instance)
            }
        }

        // Read before anything changes, outside the lock.
        let texts = ManifestFileText.read(manifest.files)
        // 4. Sinks and routes in force at once; then the conditions, keeping
        //    the state of what did not change.
        bus.reconfigure(slots: slots, compiler: RouteCompiler(slots: slots.map { runner in
            runner.map { RouteCompiler.SinkRule(match: $0.config.match, minSeverity: $0.config.minSeverity) }
        }))
        conditions.replace(thresholds: resolution.thresholds, rules: resolution.rules, plugins: Self.pluginNames(resolution))
        for instance in instances {
            instance.observe(kinds: conditions.watchedKinds(instance.name))
        }
        current.withLock { c in
            c.manifest = manifest
            c.manifestTexts = texts
            c.host = plan.host
            c.instances = instances
            c.sinks = sinks
            c.slots = slotOf
            c.drainingSinks += retiring
            // Stopped above: their counters are final. Kept per name, so a
            // host reloaded every minute for a year holds no more than one
            // entry per monitor name it ever ran.
            c.retiredMonitors = MonitorFigures.merged(c.retiredMonitors + leaving.map(\.figures))
            c.rules = resolution.rules
        }

        // 5. Sinks that left drain what they hold (within the drain timeout)
        //    on their own; a replacement starts once its predecessor is done.
        let drainTimeout = options.drainTimeout
        for runner in retiring where !fresh.contains(where: { $0.after === runner }) {
            Task {
                await runner.stop(drainTimeout: drainTimeout)
                retire(runner)
            }
        }
        for (runner, after) in fresh {
            if let after {
                Task { [logger] in
                    await after.stop(drainTimeout: drainTimeout)
                    self.retire(after)
                    var logger = logger
                    logger[metadataKey: "sink"] = "\(runner.config.name)"
                    runner.sink.bind(logger: logger)
                    runner.start()
                }
            } else {
                runner.start()
            }
        }

        // 6. Monitors that came start.
        for instance in started {
            watchDone(instance)
            launchPlaced(instance)
        }
    }
}

/// The refusals `prepareAll` hears of from the monitors' queues, in any order.
private final class CreateRefusals: Sendable {
    private let found = Mutex<[(index: Int, diagnostic: Diagnostic)]>([])

    func add(_ diagnostic: Diagnostic, at index: Int) { found.withLock { $0.append((index, diagnostic)) } }

    /// In the order of the monitors.
    var inOrder: [Diagnostic] { found.withLock { $0 }.sorted { $0.index < $1.index }.map(\.diagnostic) }
}

/// What a reload did, or why it did nothing: the body of `POST /v1/reload`.
public struct ReloadResult: Codable, Sendable {
    public struct Diff: Codable, Sendable {
        public var added: [String] = []
        public var removed: [String] = []
        public var changed: [String] = []
        public var unchanged: [String] = []
    }

    public var applied: Bool
    public var monitors = Diff()
    public var sinks = Diff()
    public var thresholds = 0
    public var rules = 0
    public var errors: [String] = []
    public var warnings: [String] = []

    static func refused(_ errors: [String]) -> ReloadResult {
        var result = ReloadResult(applied: false)
        result.errors = errors
        return result
    }
}

/// The difference between what runs and a new manifest, by name and fingerprint.
package struct ReloadPlan {
    var host: String
    var result = ReloadResult(applied: true)
    /// Monitors to stop: removed, disabled or changed.
    var stoppingMonitors: Set<String> = []
    var keptMonitors: Set<String> = []
    var changedSinks: Set<String> = []

    init(before: VigilRuntime.Current, manifest: Manifest, resolution: ResolvedManifest<HostedPlugin>, host: String) {
        self.host = host
        let running = Dictionary(before.instances.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
        var next: Set<String> = []
        for monitor in resolution.monitors where monitor.config.enabled {
            let name = monitor.config.name
            next.insert(name)
            guard let old = running[name] else {
                result.monitors.added.append(name)
                continue
            }
            if old.fingerprint == VigilRuntime.fingerprint(monitor.config, in: manifest) {
                result.monitors.unchanged.append(name)
                keptMonitors.insert(name)
            } else {
                result.monitors.changed.append(name)
                stoppingMonitors.insert(name)
            }
        }
        for instance in before.instances where !next.contains(instance.name) {
            result.monitors.removed.append(instance.name)
            stoppingMonitors.insert(instance.name)
        }
        let oldSinks = Dictionary(before.sinks.map { ($0.config.name, $0) }, uniquingKeysWith: { a, _ in a })
        for config in manifest.sinks {
            guard let old = oldSinks[config.name] else {
                result.sinks.added.append(config.name)
                continue
            }
            if VigilRuntime.fingerprint(old.config, host: before.host) == VigilRuntime.fingerprint(config, host: host) {
                result.sinks.unchanged.append(config.name)
            } else {
                result.sinks.changed.append(config.name)
                changedSinks.insert(config.name)
            }
        }
        for runner in before.sinks where !manifest.sinks.contains(where: { $0.name == runner.config.name }) {
            result.sinks.removed.append(runner.config.name)
        }
        result.thresholds = resolution.thresholds.count
        result.rules = resolution.rules.count
    }

    var added: [String] { result.monitors.added.map { "monitor \($0)" } + result.sinks.added.map { "sink \($0)" } }
    var removed: [String] { result.monitors.removed.map { "monitor \($0)" } + result.sinks.removed.map { "sink \($0)" } }
    var changed: [String] { result.monitors.changed.map { "monitor \($0)" } + result.sinks.changed.map { "sink \($0)" } }
    var unchangedCount: Int { result.monitors.unchanged.count + result.sinks.unchanged.count }

    var summary: String {
        func list(_ names: [String]) -> String { names.isEmpty ? "none" : names.joined(separator: ", ") }
        return "added \(list(added)); removed \(list(removed)); restarted \(list(changed)); \(unchangedCount) unchanged"
    }
}
