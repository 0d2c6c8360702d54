@preconcurrency import CVigilPlugin
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals
import VigilABI
import VigilCore

/// The version of the host, reported by `vigil --version` and in `started`.
public let vigilVersion = "0.1.0"

/// Everything `vigil run` needs besides the manifest.
public struct RunOptions: Sendable {
    /// Stop by itself after this many nanoseconds.
    public var runFor: Int64?
    /// How long sinks may take to drain at shutdown before giving up.
    public var drainTimeout: Int64 = 5_000_000_000
    /// How long `stop` of all instances may take.
    public var stopTimeout: Int64 = 10_000_000_000
    public var hostName: String?
    /// Where to write a JSON summary of the run at exit (counters, resources).
    public var summaryPath: String?
    /// The control API's socket, and the group it is opened to.
    public var control: ControlAddress?
    public var controlGroup: String?
    /// Whether a control socket that cannot be had ends the run (it was asked
    /// for by name) or is noted in the log (the standard place).
    public var controlRequired = false
    /// `vigil run --once`: one poll of each monitor, its events on stdout, no
    /// sink of the manifest made, no control socket (OnceRun.swift).
    public var once: OnceOptions?

    public init(runFor: Int64? = nil) {
        self.runFor = runFor
    }
}

/// The running host: sinks, bus, monitors, and the services that drive them.
public final class VigilRuntime: @unchecked Sendable {
    let manifest: Manifest
    let resolution: ResolvedManifest<HostedPlugin>
    let logger: Logger
    let host: String
    let sinks: [SinkRunner]
    let bus: EventBus
    let instances: [MonitorInstance]
    let hostEvents: HostEvents
    /// Thresholds and rules; nil when the manifest has none.
    let conditions: ConditionProcessor?
    let actions: ActionRunner
    let options: RunOptions
    /// The verdicts of a `--once` run; nil for another run.
    let once: OnceRun?

    /// Every plugin in process (tests, tools).
    public convenience init(manifest: Manifest, resolution: ManifestResolution, options: RunOptions, logger: Logger) {
        self.init(manifest: manifest, resolution: resolution.hosted, options: options, logger: logger)
    }

    public init(manifest: Manifest, resolution: ResolvedManifest<HostedPlugin>, options: RunOptions, logger: Logger) {
        // --once: the manifest's sinks are never made; one stdout sink takes every event.
        let manifest = options.once?.manifest(replacingSinksOf: manifest) ?? manifest
        self.once = options.once.map(OnceRun.init)
        self.manifest = manifest
        self.resolution = resolution
        self.options = options
        self.logger = logger
        let host = options.hostName ?? manifest.host ?? VigilRuntime.hostName()
        self.host = host
        let sinks = manifest.sinks.map { config in
            SinkRunner(config: config, sink: options.once.map { OnceSink(json: $0.json, host: host) }
                           ?? VigilRuntime.makeSink(config, host: host, logger: logger), logger: logger)
        }
        self.sinks = sinks
        let bus = EventBus(sinks: sinks)
        self.bus = bus
        let compiler = RouteCompiler(manifest: manifest)
        let hostEvents = HostEvents(clock: realtimeNanoseconds)
        hostEvents.connect(bus: bus, compiler: compiler)
        self.hostEvents = hostEvents
        let actions = ActionRunner(logger: logger)
        self.actions = actions
        var plugins: [String: String] = [:]
        for m in resolution.monitors { plugins[m.config.name] = m.plugin.description.name }
        let conditions = resolution.thresholds.isEmpty && resolution.rules.isEmpty ? nil
            : ConditionProcessor(thresholds: resolution.thresholds, rules: resolution.rules, plugins: plugins, bus: bus,
                                 compiler: compiler, runner: actions, host: host, logger: logger)
        self.conditions = conditions
        self.instances = resolution.monitors.filter(\.config.enabled).map { monitor in
            MonitorInstance(config: monitor.config, description: monitor.plugin.description,
                            transport: monitor.plugin.transport(), options: monitor.options, bus: bus,
                            routes: compiler, hostEvents: hostEvents, logger: logger,
                            conditions: conditions?.watches(monitor.config.name) == true ? conditions : nil,
                            schedulesPolls: options.once == nil)
        }
    }

    static func makeSink(_ config: SinkConfig, host: String, logger: Logger) -> any EventSink {
        switch config.kind {
        case .null: return NullSink()
        case .log(let log): return LogSink(config: log, host: host)
        case .file(let file): return FileSink(config: file, host: host, holdFailedBatches: config.overflow == .block)
        case .socket(let socket):
            switch socket.mode {
            case .connect(let address): return SocketConnectSink(address: address, config: socket, host: host)
            case .listen(let address):
                let sink = SocketListenSink(address: address, config: socket, host: host)
                var logger = logger
                logger[metadataKey: "sink"] = "\(config.name)"
                sink.bind(logger: logger)
                return sink
            }
        }
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
            .init(service: EarlySignalService(logger: logger), successTerminationBehavior: .gracefullyShutdownGroup),
            .init(service: SinksService(runners: sinks, drain: drain, logger: logger)),
            .init(service: SupervisorService(runtime: self, stopTimeout: options.stopTimeout, drain: drain)),
        ]
        services.append(.init(service: ReopenService(sinks: sinks, logger: logger)))
        if let address = options.control, once == nil {
            let api = ControlAPI(runtime: self)
            do {
                let server = try ControlServer(address: address, group: options.controlGroup, api: api, logger: logger)
                control = api
                services.append(.init(service: server))
            } catch {
                if options.controlRequired { throw error }
                logger.info("no control API: \(error)")
            }
        }
        if let once {
            services.append(.init(service: OnceService(once: once, runtime: self), successTerminationBehavior: .gracefullyShutdownGroup))
        }
        if let runFor = options.runFor {
            services.append(.init(service: TimerService(duration: runFor),
                                  successTerminationBehavior: .gracefullyShutdownGroup))
        }
        let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint],
                                                      logger: logger))
        // When every monitor has finished (a bounded workload) or failed, stop by ourselves.
        for instance in instances {
            instance.onDone = { [self] in
                guard instances.allSatisfy(\.isDone), instances.contains(where: { $0.finished.load(ordering: .acquiring) }),
                      !allFinished.exchange(true, ordering: .acquiringAndReleasing) else { return }
                logger.notice("every monitor has finished; stopping")
                Task { await group.triggerGracefulShutdown() }
            }
        }
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

    private let allFinished = Atomic<Bool>(false)
    /// The control API, when its socket was had (set before the services start).
    private(set) var control: ControlAPI?
    var started: Int64 = 0
    var stopped: Int64 = 0

    /// Stops monitors in parallel, each on its own queue; waits at most `timeout`.
    func stopInstances(timeout: Int64) async {
        let group = DispatchGroup()
        for instance in instances {
            group.enter()
            instance.shutdown { group.leave() }
        }
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<DispatchTimeoutResult, Never>) in
            DispatchQueue.global().async {
                continuation.resume(returning: group.wait(timeout: .now() + .nanoseconds(Int(timeout))))
            }
        }
        if result == .timedOut {
            let stuck = instances.filter { $0.state != .stopped && $0.state != .failed }.map(\.name)
            logger.error("monitors \(stuck.joined(separator: ", ")) did not stop within \(Units.formatDuration(timeout)); going on without them")
        }
    }
}

