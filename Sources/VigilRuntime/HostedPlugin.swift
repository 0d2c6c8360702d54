import Foundation
import VigilABI
import VigilCore
import VigilIsolation

/// A monitor's plugin as `vigil run` holds it: loaded here, or loaded and
/// described by a runner process that will serve the monitor.
public enum HostedPlugin: DescribedPlugin {
    case inProcess(LoadedPlugin)
    case runner(RunnerProcess, RunnerLaunch)

    public var description: PluginDescription {
        switch self {
        case .inProcess(let plugin): plugin.description
        case .runner(let process, _): process.description
        }
    }

    /// The transport of one instance.
    func transport() -> any PluginTransport {
        switch self {
        case .inProcess(let plugin): InProcessTransport(plugin: plugin)
        case .runner(let process, let launch): RunnerTransport(first: process, launch: launch)
        }
    }
}

extension HostedPlugin {
    /// A runner process that loads and describes the plugin at `path` for
    /// `monitor`, with its limits (and how they are enforced, in words), or
    /// why it could not start. Disabled monitors' runners end once described.
    static func startRunner(for monitor: MonitorConfig, path: String,
                            allowUnsafe: Bool) -> (Result<HostedPlugin, PluginRefusal>, limitsEnforcement: String?) {
        var launch = RunnerLaunch(path: path, allowUnsafe: allowUnsafe, monitor: monitor.name, limits: monitor.limits,
                                  user: monitor.user, loadTimeout: monitor.timeout ?? 5_000_000_000)
        var enforcement: String?
        if monitor.limits.memory != nil || monitor.limits.cpuPercent != nil {
            switch RunnerCgroups.shared {
            case .success(let cgroups):
                launch.cgroups = cgroups
                enforcement = "limits by cgroup v2, in \(cgroups.base)"
            case .failure(let why):
                enforcement = "limits by setrlimit and the host's watchdog: \(why)"
            }
        }
        do {
            let process = try RunnerProcess.start(launch)
            if !monitor.enabled { process.finish() }
            return (.success(.runner(process, launch)), enforcement)
        } catch {
            return (.failure(PluginRefusal(path: path, reason: "\(error)")), enforcement)
        }
    }
}

extension ResolvedManifest where Plugin == HostedPlugin {
    /// Resolves for `vigil run`: each monitor's plugin is loaded in process
    /// or started in its runner, as `IsolationDecision` says; a runner that
    /// refuses the plugin, crashes or hangs while loading it refuses the
    /// monitor, as an in-process refusal does. Runners of enabled monitors
    /// only (a disabled one is described in a runner that then ends).
    /// `reuse` gives the plugin of a monitor that runs already and did not
    /// change (a reload): it is neither loaded again nor given a new runner.
    public static func resolve(_ manifest: Manifest, catalog: PluginCatalog, allowUnsafe: Bool,
                               decisions: inout [String: IsolationDecision],
                               reuse: (MonitorConfig) -> HostedPlugin? = { _ in nil }) -> Self {
        let host = PluginProbes.hostDirectories()
        var made: [String: IsolationDecision] = [:]
        let result = resolve(manifest, catalog: catalog) { monitor, reference -> Result<HostedPlugin, PluginRefusal> in
            if let running = reuse(monitor) { return .success(running) }
            let isPath = MonitorConfig.namesFile(reference)
            let path = isPath ? reference : catalog.locate(reference)
            let decision = IsolationDecision.decide(for: monitor, in: manifest, path: path, hostDirectories: host)
            made[monitor.name] = decision
            guard decision.isolation == .process, let path else {
                return catalog.load(reference: reference).map { .inProcess($0) }
            }
            // The file checks here, as for an in-process load (their warnings in
            // the host's log); the runner checks again as it loads.
            switch PluginFile.open(path, policy: catalog.vetting.policy) {
            case .failure(let refusal): return .failure(PluginRefusal(path: path, reason: refusal.reason))
            case .success(let file): for line in file.warnings { catalog.vetting.warn(line) }
            }
            let (runner, limits) = HostedPlugin.startRunner(for: monitor, path: path, allowUnsafe: allowUnsafe)
            made[monitor.name]?.limitsEnforcement = limits
            return runner
        }
        decisions = made
        return result
    }
}

extension ResolvedManifest where Plugin == LoadedPlugin {
    /// The same monitors, every plugin in process (tests and tools that load
    /// plugins themselves).
    public var hosted: ResolvedManifest<HostedPlugin> {
        var copy = ResolvedManifest<HostedPlugin>()
        copy.monitors = monitors.map { .init(config: $0.config, plugin: .inProcess($0.plugin), options: $0.options) }
        copy.refused = refused
        copy.diagnostics = diagnostics
        copy.thresholds = thresholds
        copy.rules = rules
        return copy
    }
}
