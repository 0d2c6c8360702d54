import Foundation
import Logging
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The isolation transport on its own: a real runner process (the `vigil`
/// binary) loading a real plugin file, driven by a `MonitorInstance` as
/// `vigil run` drives it, its events captured after the bus.
@Suite(.serialized, .startsProcesses, .offThePool) struct RunnerTransportTests {
    final class IsolatedHarness: CapturingHarness, @unchecked Sendable {
        let capture = CaptureSink()
        let runner: SinkRunner
        let instance: MonitorInstance
        let transport: RunnerTransport

        init(plugin: String, options: String, interval: String = "1h", restart: String = "never",
             timeout: String = "5s") throws {
            let text = """
            monitors:
              m:
                plugin: \(plugin)
                interval: \(interval)
                timeout: \(timeout)
                options: \(options)
            sinks:
              capture: { type: null, queue_size: 100000 }
            """
            let (manifest, diagnostics) = ManifestLoader(file: "harness.yaml").load(text)
            guard let manifest else { throw TestFailure("harness manifest: \(diagnostics)") }
            let launch = RunnerLaunch(path: plugin, allowUnsafe: true, loadTimeout: 5_000_000_000, program: TestEnv.vigil)
            let first: RunnerProcess
            do {
                first = try RunnerProcess.start(launch)
            } catch {
                throw TestFailure("runner: \(error)")
            }
            var config = manifest.monitors[0]
            config.supervision.restart = RestartPolicy(rawValue: restart)!
            config.supervision.backoffMin = 50_000_000
            config.supervision.backoffMax = 200_000_000
            config.supervision.maxRestarts = 2
            let (options, problems) = OptionBinder.bind(config, to: first.description)
            guard problems.isEmpty else { throw TestFailure("options: \(problems)") }
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            runner = SinkRunner(config: manifest.sinks[0], sink: capture, logger: logger)
            let bus = EventBus(sinks: [runner], compiler: RouteCompiler(manifest: manifest))
            let hostEvents = HostEvents(clock: realtimeNanoseconds)
            hostEvents.connect(bus: bus)
            transport = RunnerTransport(first: first, launch: launch)
            instance = MonitorInstance(config: config, description: first.description, transport: transport,
                                       options: options, bus: bus, hostEvents: hostEvents,
                                       logger: logger)
            runner.start()
        }
    }

    @Test func eventsCrossFromTheRunnerInOrderWithTheHostsStamps() async throws {
        let h = try IsolatedHarness(plugin: try TestEnv.cPlugin("faulty"), options: "{}", interval: "20ms")
        h.instance.launch()
        let samples = h.waitFor(10) { $0.kind == "sample" }
        await h.stop()
        #expect(samples.count >= 10)
        #expect(samples.allSatisfy { $0.monitor == "m" && $0.plugin == "faulty" })
        // The plugin's own counter (field n) and the host's seq both increase by one.
        let ns = samples.compactMap { e -> Int64? in if case .int(let n)? = e.fields.first(where: { $0.name == "n" })?.value { n } else { nil } }
        #expect(ns == Array(0..<Int64(ns.count)))
        #expect(zip(samples, samples.dropFirst()).allSatisfy { $0.seq < $1.seq })
    }

    @Test func aCrashInPollIsReportedWithTheCallAndTheSignal() async throws {
        let h = try IsolatedHarness(plugin: try TestEnv.cPlugin("faulty"), options: "{ fault: segv_poll, at: 3 }",
                                    interval: "20ms")
        h.instance.launch()
        let crashed = h.waitFor(1) { $0.kind == "instance_crashed" }
        await h.stop()
        let fields = Dictionary(uniqueKeysWithValues: (crashed.first?.fields ?? []).map { ($0.name, $0.value) })
        #expect(fields["monitor"] == .string("m"))
        #expect(fields["call"] == .string("poll #3"))
        #expect(fields["signal"] == .string("SIGSEGV"))
        // Emitted before the crash (one per poll, the third before raising): delivered.
        #expect(h.events.filter { $0.kind == "sample" }.count == 3)
    }

    @Test func aHungPollIsKilledAtItsTimeoutAndRestarted() async throws {
        let h = try IsolatedHarness(plugin: try TestEnv.cPlugin("faulty"), options: "{ fault: loop_poll, at: 2 }",
                                    interval: "20ms", restart: "on-failure", timeout: "300ms")
        h.instance.launch()
        let crashes = h.waitFor(2, timeout: 20) { $0.kind == "instance_crashed" }
        await h.stop()
        #expect(crashes.count >= 2)
        let reason = crashes.first?.fields.first { $0.name == "reason" }?.value
        guard case .string(let text)? = reason else { Issue.record("no reason"); return }
        #expect(text.contains("poll ran past its timeout"))
        #expect(h.instance.restarts.load(ordering: .relaxed) >= 1)
    }
}

extension RunnerTransportTests {
    /// A plugin that writes into the ring it shares with the host (it can:
    /// the mapping is in its process) breaks its channel, nothing more.
    @Test func aRunnerThatCorruptsItsRingIsEndedAndReported() async throws {
        let h = try IsolatedHarness(plugin: try TestEnv.cPlugin("ring_scribbler"), options: "{}", interval: "20ms")
        h.instance.launch()
        let crashed = h.waitFor(1) { $0.kind == "instance_crashed" }
        await h.stop()
        let reason = crashed.first?.fields.first { $0.name == "reason" }?.value
        guard case .string(let text)? = reason else { Issue.record("no crash reported"); return }
        #expect(text.contains("broke its channel"))
        // The record before the scribble was delivered.
        #expect(h.events.contains { $0.kind == "sample" })
    }
}
