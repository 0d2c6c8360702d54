@preconcurrency import CVigilPlugin
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals
import VigilCore

/// The version of the host, reported by `vigil --version` and in `started`.
public let vigilVersion = "0.1.0"

/// Resolves a manifest's plugins and options. Shared by `vigil validate` and
/// `vigil run`, so both report the same problems at the same places.
public struct ManifestResolution: Sendable {
    public struct Monitor: Sendable {
        public var config: MonitorConfig
        public var plugin: LoadedPlugin
        public var options: [BoundOption]
    }

    /// Monitors whose plugin loaded and whose options are valid (enabled or not).
    public var monitors: [Monitor] = []
    /// Monitors that cannot run, with why.
    public var refused: [(config: MonitorConfig, reason: String)] = []
    public var diagnostics: [Diagnostic] = []
    /// The manifest's thresholds and rules, checked against the plugins'
    /// self-descriptions (those with errors are left out).
    public var thresholds: [ThresholdSpec] = []
    public var rules: [RuleSpec] = []

    /// Loads each monitor's plugin and binds its options. A relative plugin
    /// path is taken relative to the manifest's directory, like `plugin_dirs`.
    public static func resolve(_ manifest: Manifest, catalog: PluginCatalog) -> ManifestResolution {
        var result = ManifestResolution()
        let base = manifest.directory
        for monitor in manifest.monitors {
            let reference = monitor.pluginIsPath && !monitor.plugin.hasPrefix("/") && !base.isEmpty
                ? "\(base)/\(monitor.plugin)" : monitor.plugin
            switch catalog.load(reference: reference) {
            case .failure(let refusal):
                let names = catalog.discoverNames()
                let hint = monitor.pluginIsPath ? nil : Suggest.hint(for: monitor.plugin, in: names)
                    ?? (names.isEmpty ? nil : "plugins found: \(names.joined(separator: ", "))")
                let message = monitor.pluginIsPath || catalog.locate(monitor.plugin) != nil
                    ? "monitor '\(monitor.name)': \(refusal)"
                    : "unknown plugin '\(monitor.plugin)' for monitor '\(monitor.name)' (searched \(catalog.directories.joined(separator: ", ")))"
                result.diagnostics.append(Diagnostic(at: monitor.pluginLocation, message, hint: hint))
                result.refused.append((monitor, refusal.description))
            case .success(let plugin):
                let (options, problems) = OptionBinder.bind(monitor, to: plugin.description)
                result.diagnostics += problems
                if problems.contains(where: { $0.level == .error }) {
                    result.refused.append((monitor, problems.map(\.message).joined(separator: "; ")))
                } else {
                    result.monitors.append(Monitor(config: monitor, plugin: plugin, options: options))
                }
            }
        }
        var infos: [String: ConditionResolver.MonitorInfo] = [:]
        for m in result.monitors {
            infos[m.config.name] = ConditionResolver.MonitorInfo(
                description: m.plugin.description, interval: m.plugin.description.effectiveInterval(m.config.interval),
                enabled: m.config.enabled)
        }
        let conditions = ConditionResolver.resolve(manifest, monitors: infos)
        result.thresholds = conditions.thresholds
        result.rules = conditions.rules
        result.diagnostics += conditions.diagnostics
        return result
    }

    /// Creates each monitor's instance with its options and destroys it at
    /// once, none started, so that what only the plugin can check (a library
    /// that is not there, a signature that does not parse) is reported before
    /// anything runs, at the place in the manifest the plugin's message names.
    public func validateInstances() -> [Diagnostic] {
        var diagnostics: [Diagnostic] = []
        for monitor in monitors {
            var handle: UnsafeMutableRawPointer?
            let descriptor = monitor.plugin.descriptor
            let interval = monitor.plugin.description.effectiveInterval(monitor.config.interval)
            let (status, text) = withCreateArgs(name: monitor.config.name, options: monitor.options, interval: interval,
                                                host: ValidationHost.context, api: ValidationHost.table) { args in
                withPluginError { err in descriptor.create(&args, &handle, err) }
            }
            if status == VIGIL_OK {
                if let handle { descriptor.destroy(handle) }
                continue
            }
            let (location, message) = monitor.config.locate(pluginMessage: text.isEmpty ? "no reason given" : text)
            let name = monitor.config.name
            switch status {
            case VIGIL_E_UNAVAILABLE:
                diagnostics.append(Diagnostic(.warning, at: monitor.config.location,
                                              "monitor '\(name)' is unavailable on this machine: \(message)"))
            case VIGIL_E_TEMPORARY:  // vigil run retries it
                diagnostics.append(Diagnostic(.warning, at: monitor.config.location,
                                              "monitor '\(name)': create failed for now (run retries it): \(message)"))
            case VIGIL_E_INVALID_CONFIG:
                diagnostics.append(Diagnostic(at: location, "monitor '\(name)': \(message)"))
            default:
                diagnostics.append(Diagnostic(at: location, "monitor '\(name)': create failed (\(statusName(status))): \(message)"))
            }
        }
        return diagnostics
    }
}

/// The host table given to instances created only to be validated: they
/// are never started, so nothing they call does anything.
enum ValidationHost {
    nonisolated(unsafe) static let context = OpaquePointer(bitPattern: 0x1)!
    nonisolated(unsafe) static let table: UnsafePointer<vigil_host_api> = {
        var api = vigil_host_api()
        api.size = UInt32(MemoryLayout<vigil_host_api>.size)
        api.abi_major = UInt16(VIGIL_ABI_MAJOR)
        api.abi_minor = UInt16(VIGIL_ABI_MINOR)
        api.emit = { _, _ in VIGIL_E_STOPPED }
        api.log = { _, _, _ in }
        api.set_availability = { _, _, _ in }
        api.now_ns = { _ in realtimeNanoseconds() }
        api.finished = { _ in }
        let table = UnsafeMutablePointer<vigil_host_api>.allocate(capacity: 1)
        table.initialize(to: api)
        return UnsafePointer(table)
    }()
}

extension PluginCatalog {
    /// Names of the plugins in the search path (for "did you mean").
    func discoverNames() -> [String] {
        discover().compactMap { path -> String? in
            var file = String(path.split(separator: "/").last ?? "")
            guard file.hasSuffix(".so") else { return nil }
            file.removeLast(3)
            if file.hasPrefix("libvigil-") { file.removeFirst(9) } else if file.hasPrefix("lib") { file.removeFirst(3) }
            return file
        }
    }
}

/// What loading a plugin costs, measured in this (fresh) process.
public enum PluginTiming {
    /// Nanoseconds for dlopen + negotiation + reading the self-description, and
    /// for creating (and destroying) one instance with default options.
    public static func measure(reference: String, catalog: PluginCatalog) -> Result<(load: Int64, create: Int64?), PluginRefusal> {
        let started = monotonicNanoseconds()
        let plugin: LoadedPlugin
        switch catalog.load(reference: reference) {
        case .failure(let refusal): return .failure(refusal)
        case .success(let loaded): plugin = loaded
        }
        let load = monotonicNanoseconds() - started
        let config = MonitorConfig(name: "timing", plugin: reference,
                                   location: SourceLocation(file: "timing", line: 1, column: 1))
        let (options, problems) = OptionBinder.bind(config, to: plugin.description)
        guard problems.isEmpty else { return .success((load, nil)) }  // required options: no default instance
        let bus = EventBus(sinks: [])
        let compiler = RouteCompiler(sinks: [])
        let hostEvents = HostEvents(clock: realtimeNanoseconds)
        hostEvents.connect(bus: bus, compiler: compiler)
        var logger = Logger(label: "timing")
        logger.logLevel = .critical
        let instance = MonitorInstance(config: config, plugin: plugin, options: options, bus: bus, routes: compiler,
                                       hostEvents: hostEvents, logger: logger)
        switch instance.timeCreate() {
        case .success(let ns): return .success((load, ns))
        case .failure(let refusal): return .failure(refusal)
        }
    }
}

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

    public init(runFor: Int64? = nil) {
        self.runFor = runFor
    }
}

/// The running host: sinks, bus, monitors, and the services that drive them.
public final class VigilRuntime: @unchecked Sendable {
    let manifest: Manifest
    let resolution: ManifestResolution
    let logger: Logger
    let host: String
    let sinks: [SinkRunner]
    let bus: EventBus
    let instances: [MonitorInstance]
    let hostEvents: HostEvents
    /// Thresholds and rules; nil when the manifest has none.
    let conditions: ConditionProcessor?
    let actions: ActionRunner
    private let options: RunOptions

    public init(manifest: Manifest, resolution: ManifestResolution, options: RunOptions, logger: Logger) {
        self.manifest = manifest
        self.resolution = resolution
        self.options = options
        self.logger = logger
        let host = options.hostName ?? manifest.host ?? VigilRuntime.hostName()
        self.host = host
        let sinks = manifest.sinks.map { config in
            SinkRunner(config: config, sink: VigilRuntime.makeSink(config, host: host, logger: logger), logger: logger)
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
            MonitorInstance(config: monitor.config, plugin: monitor.plugin, options: monitor.options, bus: bus,
                            routes: compiler, hostEvents: hostEvents, logger: logger,
                            conditions: conditions?.watches(monitor.config.name) == true ? conditions : nil)
        }
    }

    static func makeSink(_ config: SinkConfig, host: String, logger: Logger) -> any EventSink {
        switch config.kind {
        case .null: return NullSink()
        case .log(let log): return LogSink(config: log, host: host)
        case .file(let file): return FileSink(config: file, host: host)
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
        return String(cString: buffer)
    }

    /// Runs until SIGINT/SIGTERM or `runFor`: starts sinks, then monitors; on
    /// the way out stops every monitor, then drains every sink.
    public func run() async throws {
        signal(SIGPIPE, SIG_IGN)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: SinksService(runners: sinks, drainTimeout: options.drainTimeout, logger: logger)),
            .init(service: SupervisorService(runtime: self, stopTimeout: options.stopTimeout, drainTimeout: options.drainTimeout)),
        ]
        services.append(.init(service: ReopenService(sinks: sinks, logger: logger)))
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
        stopped = monotonicNanoseconds()
        report()
        if let path = options.summaryPath { writeSummary(to: path) }
    }

    private let allFinished = Atomic<Bool>(false)
    private var started: Int64 = 0
    private var stopped: Int64 = 0

    /// A JSON summary of the run: per sink and per monitor counters, the time
    /// each sink spent from its first to its last write, and the process's CPU
    /// time and memory (for benchmarks and for operators' scripts).
    func writeSummary(to path: String) {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        var out: [UInt8] = []
        func key(_ k: String) { JSONLineEncoder.appendString(k, to: &out); out.append(UInt8(ascii: ":")) }
        func num<T: BinaryInteger>(_ k: String, _ v: T, last: Bool = false) {
            key(k); JSONLineEncoder.appendInteger(v, to: &out); if !last { out.append(UInt8(ascii: ",")) }
        }
        out += Array("{".utf8)
        num("elapsed_ns", stopped - started)
        key("cpu_seconds"); JSONLineEncoder.appendDouble(cpu, to: &out); out.append(UInt8(ascii: ","))
        num("max_rss_kib", usage.ru_maxrss)
        num("private_dirty_kib", Self.privateDirtyKiB())
        num("events", bus.lastSequence)
        num("unrouted", bus.unrouted.load(ordering: .relaxed))
        key("sinks"); out.append(UInt8(ascii: "["))
        for (i, runner) in sinks.enumerated() {
            let s = runner.stats
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("name"); JSONLineEncoder.appendString(s.name, to: &out); out.append(UInt8(ascii: ","))
            key("type"); JSONLineEncoder.appendString(s.type, to: &out); out.append(UInt8(ascii: ","))
            num("written", s.written); num("dropped", s.dropped); num("failed", s.failed)
            num("high_water", s.highWater)
            num("first_write_ns", runner.firstWrite); num("last_write_ns", runner.lastWrite, last: true)
            out.append(UInt8(ascii: "}"))
        }
        out += Array("],".utf8)
        key("monitors"); out.append(UInt8(ascii: "["))
        for (i, instance) in instances.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("name"); JSONLineEncoder.appendString(instance.name, to: &out); out.append(UInt8(ascii: ","))
            num("emitted", instance.emitted.load(ordering: .relaxed))
            num("refused", instance.refused.load(ordering: .relaxed))
            num("polls", instance.polls.load(ordering: .relaxed))
            num("poll_errors", instance.pollErrors.load(ordering: .relaxed))
            num("poll_ns", instance.pollNanoseconds.load(ordering: .relaxed), last: true)
            out.append(UInt8(ascii: "}"))
        }
        out += Array("],".utf8)
        key("actions"); out.append(UInt8(ascii: "["))
        for (i, rule) in resolution.rules.filter({ $0.exec != nil }).enumerated() {
            let c = actions.counters(for: rule.name)
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("rule"); JSONLineEncoder.appendString(rule.name, to: &out); out.append(UInt8(ascii: ","))
            num("started", c.started); num("succeeded", c.succeeded); num("failed", c.failed)
            num("timed_out", c.timedOut); num("skipped", c.skipped, last: true)
            out.append(UInt8(ascii: "}"))
        }
        out += Array("]}\n".utf8)
        do {
            try Data(out).write(to: URL(fileURLWithPath: path))
        } catch {
            logger.error("cannot write the summary to \(path): \(error)")
        }
    }

    /// Private_Dirty of this process (/proc/self/smaps_rollup), KiB; 0 if unknown.
    static func privateDirtyKiB() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/smaps_rollup", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("Private_Dirty:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
        }
        return 0
    }

    /// Logs what every sink delivered and dropped.
    func report() {
        var lost = false
        for stats in sinks.map(\.stats) {
            let line = "sink \(stats.name) (\(stats.type)): \(stats.written) written, \(stats.dropped) dropped (queue full), \(stats.failed) failed, queue high-water \(stats.highWater)/\(manifest.sinks.first { $0.name == stats.name }!.queueCapacity)"
            if stats.dropped > 0 || stats.failed > 0 {
                lost = true
                logger.warning("\(line)")
            } else {
                logger.info("\(line)")
            }
        }
        let refused = instances.reduce(0) { $0 + $1.refused.load(ordering: .relaxed) }
        if refused > 0 { logger.warning("\(refused) events emitted outside start…stop were refused") }
        if !lost { logger.info("stopped; \(bus.lastSequence) events, none lost") }
    }

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

/// Starts every monitor; at shutdown, stops them all.
struct SupervisorService: Service {
    let runtime: VigilRuntime
    let stopTimeout: Int64
    let drainTimeout: Int64

    func run() async throws {
        for (config, reason) in runtime.resolution.refused {
            runtime.hostEvents.pluginRefused(monitor: config.name, plugin: config.plugin, reason: reason)
        }
        // Rules already true with no values (a `none:`) fire before any monitor runs.
        runtime.conditions?.start()
        for instance in runtime.instances { instance.launch() }
        runtime.hostEvents.publish("started", .notice, [
            Field("version", .string(vigilVersion)), Field("monitors", .int(Int64(runtime.instances.count))),
            Field("sinks", .int(Int64(runtime.sinks.count))), Field("pid", .int(Int64(getpid()))),
        ])
        runtime.logger.notice("started \(runtime.instances.count) monitors and \(runtime.sinks.count) sinks")
        let watchdog = Task { await Self.watch(runtime) }
        try? await gracefulShutdown()
        runtime.hostEvents.publish("stopping", .notice, [Field("reason", .string("shutdown requested"))])
        // A plugin blocked on a full `block` sink must not hold up its own stop
        // for ever: such waits give up after the drain timeout.
        runtime.bus.beginShutdown(deadline: monotonicNanoseconds() + drainTimeout)
        await runtime.stopInstances(timeout: stopTimeout)
        runtime.conditions?.shutdown()
        // A rule's program still running gets until the drain timeout, then
        // is killed; the wait is on a thread of its own, not the service's.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                runtime.actions.shutdown(timeout: drainTimeout)
                done.resume()
            }
        }
        watchdog.cancel()
    }

    /// Reports calls into plugins that run past their deadline (the monitor's
    /// `timeout`), once per call, checking every second (few wakeups at idle).
    static func watch(_ runtime: VigilRuntime) async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(1))
            for instance in runtime.instances {
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
struct SinksService: Service {
    let runners: [SinkRunner]
    let drainTimeout: Int64
    let logger: Logger

    func run() async throws {
        for runner in runners { runner.start() }
        try? await gracefulShutdown()
        let deadline = monotonicNanoseconds() + drainTimeout
        for runner in runners { runner.beginStop(deadline: deadline) }
        for runner in runners where await !runner.join(until: deadline + 1_000_000_000) {
            logger.error("sink \(runner.config.name) did not finish within \(Units.formatDuration(drainTimeout)) of shutdown; exiting without it")
        }
    }
}

/// SIGHUP: every sink reopens its files (logrotate's move, then signal).
struct ReopenService: Service {
    let sinks: [SinkRunner]
    let logger: Logger

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        for await _ in signals.cancelOnGracefulShutdown() {
            logger.info("SIGHUP: reopening sink files")
            for runner in sinks { runner.requestReopen() }
        }
    }
}

/// `--for DURATION`: returns after the duration, which shuts the group down.
struct TimerService: Service {
    let duration: Int64

    func run() async throws {
        try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .nanoseconds(duration)) }
    }
}
