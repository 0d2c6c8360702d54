import Foundation
import Logging
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// A sink that keeps every event it receives, for in-process tests.
final class CaptureSink: EventSink {
    let events = Mutex<[Event]>([])
    func write(_ batch: [Event], context: SinkContext) throws { events.withLock { $0 += batch } }
    func shutdown(context: SinkContext) {}
}

/// One plugin instance run in-process by the real host machinery (loader,
/// instance queue, bus, a sink runner), with a capturing sink.
final class Harness: CapturingHarness, @unchecked Sendable {
    let capture = CaptureSink()
    let runner: SinkRunner
    let instance: MonitorInstance
    let resolution: ManifestResolution

    /// `options` is the YAML flow mapping of the monitor's options, e.g. `{ procfs: /tmp/x }`.
    init(plugin: String, options: String = "{}", interval: String = "1h", pluginDirs: [String] = []) throws {
        let text = """
        monitors:
          m:
            plugin: \(plugin)
            interval: \(interval)
            options: \(options)
        sinks:
          capture: { type: null, queue_size: 100000 }
        """
        let (manifest, diagnostics) = ManifestLoader(file: "harness.yaml").load(text)
        guard let manifest else { throw TestFailure("harness manifest: \(diagnostics)") }
        let catalog = PluginCatalog(directories: pluginDirs + [TestEnv.productsDir])
        resolution = ManifestResolution.resolve(manifest, catalog: catalog)
        guard let monitor = resolution.monitors.first else {
            throw TestFailure("plugin not usable: \(resolution.diagnostics.map(\.description).joined(separator: "; "))")
        }
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        runner = SinkRunner(config: manifest.sinks[0], sink: capture, logger: logger)
        let bus = EventBus(sinks: [runner], compiler: RouteCompiler(manifest: manifest))
        let hostEvents = HostEvents(clock: realtimeNanoseconds)
        hostEvents.connect(bus: bus)
        instance = MonitorInstance(config: monitor.config, description: monitor.plugin.description,
                                   transport: InProcessTransport(plugin: monitor.plugin), options: monitor.options, bus: bus,
                                   hostEvents: hostEvents, logger: logger)
        runner.start()
    }

    /// Starts the instance (create, start, snapshot poll).
    func launch() { instance.launch() }

    func poll() { instance.pollNow() }
}

/// What the harnesses share: a capturing sink after a real bus, and one instance.
protocol CapturingHarness {
    var capture: CaptureSink { get }
    var runner: SinkRunner { get }
    var instance: MonitorInstance { get }
}

extension CapturingHarness {
    var events: [Event] { capture.events.withLock { $0 } }

    /// Waits until `count` events have arrived (or `timeout` seconds passed).
    @discardableResult
    func waitFor(_ count: Int, timeout: Double = 10, where predicate: (Event) -> Bool = { _ in true }) -> [Event] {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let matching = events.filter(predicate)
            if matching.count >= count { return matching }
            usleep(2_000)
        }
        return events.filter(predicate)
    }

    func stop() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            instance.shutdown { c.resume() }
        }
        await runner.stop(drainTimeout: 1_000_000_000)
    }
}
