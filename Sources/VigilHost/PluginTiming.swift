@preconcurrency import CVigilPlugin
import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals
import VigilABI
import VigilCore

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

