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

/// What loading a plugin costs, measured in this (fresh) process.
public enum PluginTiming {
    /// A private copy of a plugin file (a file of its own: another image),
    /// loaded and created before the file itself is measured, so that the
    /// measure finds this process as warm as a host that has loaded a
    /// plugin before: the first plugin image, host types and code run for
    /// the first time are paid for on the copy. Its load runs where the
    /// probe's load step does and its create where the timed create does,
    /// so a plugin that crashes or hangs there is reported for that step.
    /// Without vetting: the file was checked, and the copy is ours.
    package struct WarmUp {
        private let copy: String
        private let catalog = PluginCatalog(directories: [], vetting: PluginVetting(
            policy: PluginFilePolicy(allowUnsafe: true), warn: { _ in }))

        /// Loads a copy of `path`; nil when no copy could be made.
        init?(copyOf path: String) {
            let template = (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp") + "/vigil-timing.XXXXXX"
            var name = Array(template.utf8CString)
            guard let dir = mkdtemp(&name).map({ String(cString: $0) }) else { return nil }
            defer { rmdir(dir) }
            copy = dir + "/warm-up.so"
            guard (try? FileManager.default.copyItem(atPath: path, toPath: copy)) != nil else { return nil }
            // Mapped, the file is no longer needed.
            defer { unlink(copy) }
            _ = catalog.load(path: copy)
        }

        /// Creates (and destroys) an instance of the copy, as `measure` will of the file.
        func create() { _ = PluginTiming.measure(reference: copy, catalog: catalog) }
    }

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
        let bus = EventBus(sinks: [], compiler: RouteCompiler(sinks: []))
        let hostEvents = HostEvents(clock: realtimeNanoseconds)
        hostEvents.connect(bus: bus)
        var logger = Logger(label: "timing")
        logger.logLevel = .critical
        let instance = MonitorInstance(config: config, description: plugin.description, transport: InProcessTransport(plugin: plugin),
                                       options: options, bus: bus,
                                       hostEvents: hostEvents, logger: logger)
        switch instance.timeCreate() {
        case .success(let ns): return .success((load, ns))
        case .failure(let refusal): return .failure(refusal)
        }
    }
}

