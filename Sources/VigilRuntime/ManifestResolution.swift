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

/// A manifest whose plugins are resolved in this process (`vigil run`).
public typealias ManifestResolution = ResolvedManifest<LoadedPlugin>

/// Resolves a manifest's plugins and options, whatever knows the plugins:
/// `vigil run` loads them (`LoadedPlugin`), `vigil validate` has each one's
/// probe child describe it (`ProbedPlugin`) and loads none. Both report the
/// same problems at the same places.
public struct ResolvedManifest<Plugin: DescribedPlugin>: Sendable {
    public struct Monitor: Sendable {
        public var config: MonitorConfig
        public var plugin: Plugin
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

    /// Gets each monitor's plugin from `load` (given a name to find in
    /// `catalog`'s directories, or a path; a relative one is taken relative to
    /// the manifest's directory, like `plugin_dirs`) and binds its options.
    /// `load` is given the monitor too: where its plugin runs may depend on it.
    public static func resolve(_ manifest: Manifest, catalog: PluginCatalog,
                               load: (MonitorConfig, String) -> Result<Plugin, PluginRefusal>) -> Self {
        var result = Self()
        for monitor in manifest.monitors {
            switch load(monitor, manifest.pluginReference(of: monitor)) {
            case .failure(let refusal):
                // Found but refused: the refusal says why; not found: what is there.
                let found = monitor.pluginIsPath || catalog.locate(monitor.plugin) != nil
                let names = found ? [] : catalog.discoverNames()
                let hint = found ? nil : Suggest.hint(for: monitor.plugin, in: names)
                    ?? (names.isEmpty ? nil : "plugins found: \(names.joined(separator: ", "))")
                let message = found
                    ? "monitor '\(monitor.name)': \(refusal)"
                    : "unknown plugin '\(monitor.plugin)' for monitor '\(monitor.name)' (searched \(catalog.directories.joined(separator: ", ")))"
                result.diagnostics.append(Diagnostic(at: monitor.pluginLocation, message, hint: hint))
                result.refused.append((monitor, refusal.description))
            case .success(let plugin) where plugin.description.kind == .output:
                let message = "plugin '\(plugin.description.name)' of monitor '\(monitor.name)' is an output plugin: it takes events, it does not make them, and cannot run as a monitor"
                result.diagnostics.append(Diagnostic(at: monitor.pluginLocation, message))
                result.refused.append((monitor, message))
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
                enabled: m.config.enabled,
                dynamicFields: ConditionResolver.dynamicFields(of: m.config, plugin: m.plugin.description))
        }
        let conditions = ConditionResolver.resolve(manifest, monitors: infos)
        result.thresholds = conditions.thresholds
        result.rules = conditions.rules
        result.diagnostics += conditions.diagnostics
        result.diagnostics += unmatchedPatterns(manifest, resolved: result.monitors, refused: result.refused.map(\.config.name))
        result.diagnostics += sinkPreflightProblems(manifest)
        return result
    }

    /// A warning at each `match` pattern that no event of this manifest can
    /// satisfy: no monitor with a kind it names. The kinds are those the
    /// plugins describe, the host's (`availability` for every monitor,
    /// `threshold` for monitors with thresholds), `vigil/*` and `RULE/rule`.
    /// A monitor whose plugin did not load could emit anything (its refusal
    /// is reported already). Patterns naming no monitor at all are warned of
    /// by the loader; exclusions that exclude nothing are harmless.
    static func unmatchedPatterns(_ manifest: Manifest, resolved: [Monitor], refused: [String]) -> [Diagnostic] {
        var kinds: [(monitor: String, kinds: [String]?)] = []
        // By name, once: a lookup per monitor in the list was quadratic
        // (100,000 monitors: minutes).
        var byName: [String: Int] = [:]
        for (i, m) in resolved.enumerated() where byName[m.config.name] == nil { byName[m.config.name] = i }
        for monitor in manifest.monitors {
            if let i = byName[monitor.name] {
                let m = resolved[i]
                let own = (m.plugin.description.events + PluginDescription.hostKinds).map(\.kind)
                kinds.append((monitor.name, own + (monitor.thresholds.isEmpty ? [] : [ConditionEngine.thresholdKind])))
            } else {
                kinds.append((monitor.name, nil))
            }
        }
        kinds.append((Manifest.hostMonitorName, HostEvents.spec.map(\.kind)))
        for rule in manifest.rules { kinds.append((rule.name, [ConditionEngine.ruleKind])) }
        let names = kinds.map(\.monitor)
        let known = Set(names)
        // The hint names the monitors, up to a screenful.
        let shown = names.count > 24 ? names.prefix(24).joined(separator: ", ") + " and \(names.count - 24) more"
                                     : names.joined(separator: ", ")
        var diagnostics: [Diagnostic] = []
        for sink in manifest.sinks {
            for (text, at) in zip(sink.match, sink.matchLocations) where RoutePattern.problem(in: text) == nil {
                let pattern = RoutePattern(text)
                if pattern.exclude { continue }
                if let literal = RoutePattern.literalMonitor(in: text), !known.contains(literal) { continue }
                let monitors = kinds.filter { pattern.monitor.matches($0.monitor) }
                if monitors.isEmpty {
                    diagnostics.append(Diagnostic(.warning, at: at, "pattern '\(text)' in 'match' of sink '\(sink.name)' matches no monitor of this manifest",
                                                  hint: "monitors: \(shown)"))
                    continue
                }
                guard !monitors.contains(where: { $0.kinds.map { $0.contains(where: pattern.kind.matches) } ?? true }) else { continue }
                let known = Array(Set(monitors.flatMap { $0.kinds ?? [] })).sorted()
                let kind = pattern.kind.pattern
                diagnostics.append(Diagnostic(.warning, at: at, "pattern '\(text)' in 'match' of sink '\(sink.name)' can never match: \(monitors.count == 1 ? "monitor '\(monitors[0].monitor)' has" : "the monitors it names have") no event kind '\(kind)'",
                                              hint: Suggest.hint(for: kind, in: known) ?? "kinds: \(known.joined(separator: ", "))"))
            }
        }
        return diagnostics
    }

}

extension ResolvedManifest where Plugin == LoadedPlugin {
    /// Loads each monitor's plugin in this process.
    public static func resolve(_ manifest: Manifest, catalog: PluginCatalog) -> Self {
        resolve(manifest, catalog: catalog) { _, reference in catalog.load(reference: reference) }
    }
}

extension ResolvedManifest where Plugin == ProbedPlugin {
    /// Has each monitor's plugin described by its probe child (several
    /// children at once); loads none here.
    public static func resolve(_ manifest: Manifest, probes: PluginProbes) -> Self {
        // Each reference is looked up (and its file found) once: 100,000
        // monitors of one plugin name one file.
        var files: [String: String?] = [:]
        var paths: [String] = []
        for monitor in manifest.monitors {
            let key = (monitor.pluginIsPath ? "path:" : "name:") + manifest.pluginReference(of: monitor)
            if files[key] == nil {
                let file = probes.file(of: monitor, in: manifest)
                files[key] = .some(file)
                if let file { paths.append(file) }
            }
        }
        probes.probeAll(paths: paths)
        var described: [String: Result<ProbedPlugin, PluginRefusal>] = [:]
        return resolve(manifest, catalog: probes.catalog) { _, reference in
            if let known = described[reference] { return known }
            let result = probes.describe(reference: reference)
            described[reference] = result
            return result
        }
    }

    /// Each monitor's instance was created with its options and destroyed at
    /// once, none started, so that what only the plugin can check (a library
    /// that is not there, a signature that does not parse) is reported before
    /// anything runs, at the place in the manifest the plugin's message names.
    /// The instances were created in the probe child of their plugin's file
    /// (the `PluginProbes` built with this manifest), each under its monitor's call
    /// deadline: a create that crashes or hangs is an error at the monitor,
    /// naming the signal or the deadline.
    public func validateInstances() -> [Diagnostic] {
        var diagnostics: [Diagnostic] = []
        for monitor in monitors {
            let name = monitor.config.name
            let path = monitor.plugin.description.path
            let status: vigil_status, text: String
            switch monitor.plugin.report.creates[name] {
            case .returned(let s, let message)?:
                (status, text) = (s, message)
            case .failed(let why)?:
                diagnostics.append(Diagnostic(at: monitor.config.location, "monitor '\(name)': \(why)"))
                continue
            case .skipped(let why)?:
                diagnostics.append(Diagnostic(.warning, at: monitor.config.location, "monitor '\(name)': not created: \(why)"))
                continue
            case nil:
                diagnostics.append(Diagnostic(.warning, at: monitor.config.location,
                                              "monitor '\(name)': not created (the probe of \(path) did not get to it)"))
                continue
            }
            if let why = monitor.plugin.report.movedToRunner[name] {
                diagnostics.append(Diagnostic(.note, at: monitor.config.locate(pluginMessage: why).location,
                                              "monitor '\(name)' will run in a runner process: its plugin cannot run in the host's (\(IsolationDecision.reasonForProcess(why)))"))
            }
            if let diagnostic = Self.judge(create: status, message: text, of: monitor.config) { diagnostics.append(diagnostic) }
        }
        return diagnostics
    }
}

extension ResolvedManifest {
    /// What a monitor's create answering `status` says of the manifest: the
    /// one judgement of `validate` (of the probe's creates) and of `run` (of
    /// its first creates, `VigilRuntime.prepareAll`). An INVALID_CONFIG, or
    /// an UNSUPPORTED (this instance cannot run in the host's process) from
    /// a monitor the manifest keeps there, is an error at the option the
    /// message names, and `run` refuses to start on it as `validate` calls
    /// the manifest invalid; UNAVAILABLE and
    /// TEMPORARY are warnings (run waits and retries); another failure is
    /// an error of the plugin's.
    public static func judge(create status: vigil_status, message text: String, of config: MonitorConfig) -> Diagnostic? {
        if status == VIGIL_OK { return nil }
        let name = config.name
        let (location, message) = config.locate(pluginMessage: text.isEmpty ? "no reason given" : text)
        switch status {
        case VIGIL_E_UNAVAILABLE:
            return Diagnostic(.warning, at: config.location, "monitor '\(name)' is unavailable on this machine: \(message)")
        case VIGIL_E_TEMPORARY:  // vigil run retries it
            return Diagnostic(.warning, at: config.location, "monitor '\(name)': create failed for now (run retries it): \(message)")
        case VIGIL_E_INVALID_CONFIG:
            return Diagnostic(at: location, "monitor '\(name)': \(message)")
        case VIGIL_E_UNSUPPORTED:  // from an instance kept in process by `isolation: none`; a movable one was moved
            return Diagnostic(at: location, "monitor '\(name)': \(message)",
                              hint: "its plugin cannot run in the host's process, where `isolation: none` keeps it")
        default:
            return Diagnostic(at: location, "monitor '\(name)': create failed (\(statusName(status))): \(message)")
        }
    }
}

extension ResolvedManifest {
    /// What each sink type says of its settings on this machine now, before
    /// anything starts (a file sink whose path is a directory): errors
    /// refuse `run` as they fail `validate`.
    public static func sinkPreflightProblems(_ manifest: Manifest) -> [Diagnostic] {
        manifest.sinks.flatMap { $0.sinkType.preflight($0) }
    }
}

/// The host side of instances created only to be validated: they are never
/// started, so nothing they call does anything. The same table as every
/// other host, with callbacks that ignore what arrives.
package enum ValidationHost {
    static let context = HostContext.make(for: InertHost())
    static var table: UnsafePointer<vigil_host_api> { HostTable.shared }
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

/// What `validate` can say of every sink with the plugin probes at hand,
/// each sink type for its own (`SinkType.validate`).
public enum SinkValidation {
    public static func diagnostics(_ manifest: Manifest, probes: PluginProbes) -> [Diagnostic] {
        manifest.sinks.flatMap { $0.sinkType.validate($0, in: manifest, probes: probes) }
    }

    /// Where each sink will run, for the ones that can run elsewhere than
    /// in the host's threads: (name, "isolation: … (why)").
    public static func placements(_ manifest: Manifest, catalog: PluginCatalog) -> [(sink: String, placement: String)] {
        manifest.sinks.compactMap { sink in sink.sinkType.placement(in: manifest, catalog: catalog).map { (sink.name, $0) } }
    }
}
