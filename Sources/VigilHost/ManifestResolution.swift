@preconcurrency import CVigilPlugin
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals
import VigilABI
import VigilCore

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
    /// The instances are created in the probe child of their plugin's file
    /// (`probes`, built with this manifest), each under its monitor's call
    /// deadline: a create that crashes or hangs is an error at the monitor,
    /// naming the signal or the deadline.
    public func validateInstances(probes: PluginProbes) -> [Diagnostic] {
        var diagnostics: [Diagnostic] = []
        for monitor in monitors {
            let name = monitor.config.name
            let path = monitor.plugin.description.path
            let real = realpath(path, nil).map { p in defer { free(p) }; return String(cString: p) } ?? path
            let status: vigil_status, text: String
            switch probes.report(for: real).creates[name] {
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
            if status == VIGIL_OK { continue }
            let (location, message) = monitor.config.locate(pluginMessage: text.isEmpty ? "no reason given" : text)
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

/// The host side of instances created only to be validated: they are never
/// started, so nothing they call does anything. The same table as every
/// other host, with callbacks that ignore what arrives.
enum ValidationHost {
    nonisolated(unsafe) static let context = HostContext.make(for: InertHost()).pointer
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

