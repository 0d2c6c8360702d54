import Foundation
@preconcurrency import CVigilPlugin
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The C example for plugin authors, `Plugins/examples/c/ticker.c`, built by
/// `scripts/build-c-plugins` with the flags its README gives. It runs in the
/// real host machinery (Harness, and the `vigil` binary), and its lifecycle
/// edge cases are checked by calling its descriptor directly with a host table
/// of our own.
///
/// Timing: no test asserts a rate or a tight bound. Waits are long (30 s)
/// and end as soon as the condition holds; the one bound on a duration (stop
/// with a 1 h period) is 10 s, where a stop that is not prompt would take an
/// hour.
@Suite(.startsProcesses, .offThePool) struct ExampleCPluginTests {
    static func path() throws -> String { try TestEnv.cPlugin("ticker") }

    static func ticks(_ events: [Event]) -> [Event] { events.filter { $0.kind == "tick" } }

    static func counts(_ ticks: [Event]) -> [Int64] {
        ticks.compactMap { if case .int(let n)? = $0[field: "count"] { n } else { nil } }
    }

    /// Polls `condition` every 2 ms for up to `timeout` seconds.
    @discardableResult
    static func eventually(timeout: Double = 30, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition() { return true }
            usleep(2_000)
        }
        return condition()
    }

    // MARK: - self-description

    @Test func describesItself() throws {
        let plugin = try PluginCatalog(directories: []).load(path: try Self.path()).get()
        let d = plugin.description
        #expect(d.name == "ticker")
        #expect(d.version == "1.0.0")
        #expect(d.abiMajor == 1 && d.abiMinor == Int(VIGIL_ABI_MINOR))
        #expect(!d.polled, "a push monitor has no poll")
        #expect(d.problems() == [])
        #expect(d.options.map(\.name) == ["period", "label", "limit"])
        #expect(d.options.map(\.type) == [.duration, .string, .int])
        #expect(d.options.map(\.defaultText) == ["1s", "tick", "0"])
        #expect(d.options.allSatisfy { !$0.doc.isEmpty && !$0.required })
        #expect(d.events.map(\.kind) == ["tick"])
        let fields = d.events.first?.fields ?? []
        #expect(fields.map(\.name) == ["count", "label", "late_ms", "missed"])
        #expect(fields.map(\.type) == [.int, .string, .double, .int])
        #expect(fields.first { $0.name == "late_ms" }?.unit == "milliseconds")
        #expect(fields.allSatisfy { !$0.doc.isEmpty })
        // Found by name too: the file is named after the plugin it describes.
        let byName = try PluginCatalog(directories: [try TestEnv.cPlugins()]).load(reference: "ticker").get()
        #expect(byName.description.name == "ticker")
    }

    @Test func vigilDescribesTheBuiltFile() throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", try Self.path()], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("ticker 1.0.0"))
        for name in ["period", "label", "limit", "late_ms"] {
            #expect(result.stdout.contains(name), "\(name) missing from: \(result.stdout)")
        }
    }

    /// The README's manifest, shortened: two instances with limits; `vigil run`
    /// exits by itself once both have finished.
    @Test func vigilRunExitsWhenEveryTickerHasReachedItsLimit() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/ticks.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          fast: { plugin: ticker, options: { period: 10ms, label: fast, limit: 5 } }
          slow: { plugin: \(try Self.path()), options: { period: 30ms, label: slow, limit: 2 } }
        sinks:
          journal: { type: file, path: \(dir)/events.jsonl, fsync: never }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest], timeout: 120)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("every monitor has finished"), "\(result.stderr)")
        let lines = try String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8).split(separator: "\n")
        let ticks = Self.ticks(try lines.map { try JSONLineDecoder().decode($0).event })
        #expect(Self.counts(ticks.filter { $0.monitor == "fast" }) == [1, 2, 3, 4, 5])
        #expect(Self.counts(ticks.filter { $0.monitor == "slow" }) == [1, 2])
        #expect(ticks.allSatisfy { $0[field: "label"] == .string($0.monitor) })
    }

    // MARK: - in the host

    @Test func twoInstancesTickSideBySideWithTheirOwnOptions() async throws {
        let fast = try Harness(plugin: try Self.path(), options: "{ period: 10ms, label: fast }")
        let slow = try Harness(plugin: try Self.path(), options: "{ period: 40ms, label: slow }")
        fast.launch()
        slow.launch()
        let a = fast.waitFor(5, timeout: 30) { $0.kind == "tick" }
        let b = slow.waitFor(3, timeout: 30) { $0.kind == "tick" }
        try #require(a.count >= 5 && b.count >= 3, "fast: \(a.count) ticks, slow: \(b.count)")
        // Each instance has its own label and its own count, from 1, no gap.
        #expect(a.allSatisfy { $0[field: "label"] == .string("fast") })
        #expect(b.allSatisfy { $0[field: "label"] == .string("slow") })
        #expect(Self.counts(a) == Array(1...Int64(a.count)))
        #expect(Self.counts(b) == Array(1...Int64(b.count)))
        for tick in a + b {
            if case .double(let late)? = tick[field: "late_ms"] { #expect(late >= 0) } else { Issue.record("late_ms: \(tick)") }
            if case .int(let missed)? = tick[field: "missed"] { #expect(missed >= 0) } else { Issue.record("missed: \(tick)") }
        }
        // Both run at the same time: each ticks again after the other's first
        // tick (an ordering, not a rate).
        let aFirst = a[0].time, bFirst = b[0].time
        #expect(fast.waitFor(1, timeout: 30) { $0.kind == "tick" && $0.time > bFirst }.count >= 1)
        #expect(slow.waitFor(1, timeout: 30) { $0.kind == "tick" && $0.time > aFirst }.count >= 1)
        await fast.stop()
        await slow.stop()
        #expect(fast.instance.refusals.total == 0)
        #expect(slow.instance.refusals.total == 0)
    }

    @Test func limitEndsTheInstanceWithFinished() async throws {
        let h = try Harness(plugin: try Self.path(), options: "{ period: 5ms, limit: 3 }")
        h.launch()
        #expect(Self.eventually { h.instance.finished.load(ordering: .acquiring) }, "the plugin never called finished")
        let ticks = h.waitFor(3, timeout: 30) { $0.kind == "tick" }
        #expect(Self.counts(ticks) == [1, 2, 3])
        #expect(ticks.allSatisfy { $0[field: "label"] == .string("tick") }, "the default label")
        // The thread ended: at 5 ms, going on would have given many more by now.
        usleep(200_000)
        #expect(Self.ticks(h.events).count == 3)
        #expect(h.instance.state == .running, "finished is not failed; the host stops the instance")
        await h.stop()
        #expect(h.instance.state == .stopped)
        #expect(h.instance.refusals.total == 0)
    }

    @Test func stopIsPromptWithALongPeriod() async throws {
        let h = try Harness(plugin: try Self.path(), options: "{ period: 1h }")
        h.launch()
        try #require(Self.eventually { h.instance.state == .running })
        final class Flag: Sendable { let set = Atomic<Bool>(false) }
        let stopped = Flag()
        let began = ContinuousClock.now
        h.instance.shutdown { stopped.set.store(true, ordering: .releasing) }
        let inTime = Self.eventually { stopped.set.load(ordering: .acquiring) }
        let took = ContinuousClock.now - began
        try #require(inTime, "stop did not return within 30 s: the thread sleeps through its period")
        #expect(took < .seconds(10), "stop took \(took); it should wake the thread at once")
        #expect(h.instance.state == .stopped)
        #expect(Self.ticks(h.events).isEmpty, "no tick is due in the first hour")
        await h.stop() // the sink runner; the instance is already stopped
    }

    @Test func noTickArrivesAfterStopReturns() async throws {
        let h = try Harness(plugin: try Self.path(), options: "{ period: 1ms, label: busy }")
        h.launch()
        // A second start on the started instance does nothing: one thread, one count.
        h.launch()
        let before = h.waitFor(20, timeout: 30) { $0.kind == "tick" }
        try #require(before.count >= 20)
        await h.stop()
        // An emit after stop returned would have been refused and counted.
        #expect(h.instance.refusals.total == 0)
        let after = h.events.count
        usleep(200_000)
        #expect(h.events.count == after)
        let ticks = Self.ticks(h.events)
        #expect(Self.counts(ticks) == Array(1...Int64(ticks.count)), "one thread, counting 1, 2, 3…")
    }

    @Test func anInvalidPeriodFailsCreateWithInvalidConfig() async throws {
        let h = try Harness(plugin: try Self.path(), options: "{ period: 100us }")
        h.launch()
        let failed = h.waitFor(1, timeout: 30) { $0.kind == "instance_failed" }
        #expect(failed.first?[field: "call"] == .string("create"))
        #expect(failed.first?[field: "status"] == .string("invalid configuration"))
        guard case .string(let message)? = failed.first?[field: "message"] else {
            throw TestFailure("no instance_failed message: \(h.events)")
        }
        #expect(message.contains("options.period"), "\(message)")
        #expect(message.contains("must be at least 1ms"), "\(message)")
        #expect(h.instance.state == .failed)
        await h.stop()
    }

    // MARK: - the descriptor, called directly

    @Test func createNamesTheOptionOfEveryBadValue() throws {
        let d = try PluginCatalog(directories: []).load(path: try Self.path()).get().descriptor
        let cases: [([(String, OptionValue)], String)] = [
            ([("period", .duration(999_999))], "options.period: must be at least 1ms"),
            ([("period", .duration(0))], "options.period: must be at least 1ms"),
            ([("period", .duration(366 * 86_400_000_000_000))], "options.period: must be at most 365d"),
            ([("limit", .int(-1))], "options.limit: must be 0 (no limit) or more"),
            ([("label", .int(3))], "options.label: "),
        ]
        for (options, prefix) in cases {
            let host = RecordingHost()
            let (status, message, instance) = RecordingHost.create(d, host: host, options: options)
            #expect(status == VIGIL_E_INVALID_CONFIG, "\(options)")
            #expect(message.hasPrefix(prefix), "\(options): \(message)")
            #expect(instance == nil)
        }
        // Defaults (nothing passed) and good values are accepted.
        for options: [(String, OptionValue)] in [[], [("period", .duration(1_000_000)), ("label", .string("")), ("limit", .int(0))]] {
            let (status, message, instance) = RecordingHost.create(d, host: RecordingHost(), options: options)
            #expect(status == VIGIL_OK, "\(options): \(message)")
            if let instance { d.destroy(instance) }
        }
    }

    @Test func startAndStopAreIdempotentAndStopJoins() throws {
        let d = try PluginCatalog(directories: []).load(path: try Self.path()).get().descriptor
        let host = RecordingHost()
        let (status, message, created) = RecordingHost.create(
            d, host: host, options: [("period", .duration(2_000_000)), ("label", .string("direct")), ("limit", .int(0))])
        guard status == VIGIL_OK, let instance = created else { throw TestFailure("create: \(message)") }
        defer { d.destroy(instance) }

        #expect(RecordingHost.call { d.stop(instance, $0) }.0 == VIGIL_OK, "stop before any start")
        for run in 1...2 {
            host.accepting(true)
            #expect(RecordingHost.call { d.start(instance, $0) }.0 == VIGIL_OK)
            #expect(RecordingHost.call { d.start(instance, $0) }.0 == VIGIL_OK, "start on a started instance")
            #expect(Self.eventually { host.state.withLock { $0.counts.count } >= 10 }, "run \(run): too few ticks")
            #expect(RecordingHost.call { d.stop(instance, $0) }.0 == VIGIL_OK)
            // stop joined the thread: from here on, any emit is a bug.
            host.accepting(false)
            #expect(RecordingHost.call { d.stop(instance, $0) }.0 == VIGIL_OK, "stop on a stopped instance")
            usleep(50_000)
            host.state.withLock { s in
                // One thread per start (a second one would repeat counts),
                // counting from 1 again after a restart.
                #expect(s.counts == Array(1...Int64(s.counts.count)), "run \(run)")
                #expect(s.labels == Set(["direct"]))
                #expect(s.afterStop == 0, "run \(run): emit after stop returned")
                #expect(s.finished == 0)
                s.counts.removeAll()
            }
        }
    }
}

/// A host table of our own, to drive the plugin's descriptor directly: it
/// records the ticks, and any emit made while it is not accepting (before
/// start or after stop returned).
final class RecordingHost: @unchecked Sendable {
    struct State {
        var accepting = false
        var counts: [Int64] = []
        var labels = Set<String>()
        var afterStop = 0
        var finished = 0
    }

    let state = Mutex(State())

    func accepting(_ on: Bool) { state.withLock { $0.accepting = on } }

    static func from(_ ctx: OpaquePointer) -> RecordingHost {
        Unmanaged<RecordingHost>.fromOpaque(UnsafeRawPointer(ctx)).takeUnretainedValue()
    }

    nonisolated(unsafe) static let table: UnsafePointer<vigil_host_api> = {
        var api = vigil_host_api()
        api.size = UInt32(MemoryLayout<vigil_host_api>.size)
        api.abi_major = UInt16(VIGIL_ABI_MAJOR)
        api.abi_minor = UInt16(VIGIL_ABI_MINOR)
        api.emit = { ctx, event in
            guard let ctx, let event else { return VIGIL_E_INVALID_ARGUMENT }
            let e = event.pointee
            var count: Int64 = -1
            var label = ""
            for i in 0..<e.field_count {
                let f = e.fields[i]
                switch pluginString(f.name) {
                case "count": count = f.value.as.i64
                case "label": label = pluginString(f.value.as.str)
                default: break
                }
            }
            return from(ctx).state.withLock { s in
                guard s.accepting else {
                    s.afterStop += 1
                    return VIGIL_E_STOPPED
                }
                s.counts.append(count)
                s.labels.insert(label)
                return VIGIL_OK
            }
        }
        api.log = { _, _, _ in }
        api.set_availability = { _, _, _ in }
        api.now_ns = { _ in realtimeNanoseconds() }
        api.finished = { ctx in
            guard let ctx else { return }
            from(ctx).state.withLock { $0.finished += 1 }
        }
        let table = UnsafeMutablePointer<vigil_host_api>.allocate(capacity: 1)
        table.initialize(to: api)
        return UnsafePointer(table)
    }()

    /// One call with a fresh error buffer: its status and message.
    static func call(_ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> (vigil_status, String) {
        var message = [CChar](repeating: 0, count: 1024)
        let status = message.withUnsafeMutableBufferPointer { buffer in
            var error = vigil_error(size: UInt32(MemoryLayout<vigil_error>.size), reserved: 0,
                                    message: buffer.baseAddress, capacity: buffer.count)
            return body(&error)
        }
        return (status, status == VIGIL_OK ? "" : pluginMessage(message))
    }

    /// Calls create with `options` (only those given: the plugin falls back
    /// to its defaults for the others), as instance of `host`.
    static func create(_ d: vigil_plugin_descriptor, host: RecordingHost,
                       options: [(String, OptionValue)]) -> (vigil_status, String, UnsafeMutableRawPointer?) {
        var arena = StringArena()
        defer { arena.free() }
        var cOptions = options.map { vigil_option(name: arena.str($0.0), value: arena.value($0.1)) }
        let name = arena.str("direct")
        var out: UnsafeMutableRawPointer?
        let (status, message) = cOptions.withUnsafeMutableBufferPointer { buffer in
            call { err in
                var args = vigil_create_args()
                args.size = UInt32(MemoryLayout<vigil_create_args>.size)
                args.instance_name = name
                args.host = OpaquePointer(Unmanaged.passUnretained(host).toOpaque())
                args.api = table
                args.options = UnsafePointer(buffer.baseAddress)
                args.option_count = buffer.count
                args.interval_ns = 0
                return d.create(&args, &out, err)
            }
        }
        return (status, message, status == VIGIL_OK ? out : nil)
    }
}
