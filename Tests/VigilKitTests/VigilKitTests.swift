import Glibc
import Synchronization
import Testing
import VigilCore
import VigilKit
import VigilKitTesting

// Monitors defined here are run in-process by VigilKitTesting's test host,
// through the same C descriptor a host gets from `vigil_plugin_entry`.

/// A shared value a test changes between polls (a fixture standing in for /proc).
final class Source: Sendable {
    let value = Mutex<(Double, Int64, String)>((0.5, 10, "up"))
    static let shared = [Source(), Source()]
}

final class GaugeMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "gauge", version: "2.0.0", summary: "a gauge for tests", defaultInterval: .seconds(1),
        events: [
            EventDecl("level", doc: "the gauge", fields: [
                FieldDecl("ratio", .double, unit: "ratio", minChange: 0.05, doc: "noisy"),
                FieldDecl("count", .int),
                FieldDecl("state", .string),
            ]),
            EventDecl("tick", doc: "every poll", fields: [FieldDecl("now", .int, unit: "nanoseconds")], policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var source = 0
        var label = "gauge"
        var period: Duration = .milliseconds(1500)
        var limit = ByteCount.mib(64)
        var scale = 1.0
        var verbose = false
        var tags: [String] = ["a", "b"]
        var mode: String?
        static let schema = OptionSchema<Options>(
            .option("source", \.source, doc: "which shared source"),
            .option("label", \.label, doc: "a label"),
            .option("period", \.period, doc: "a duration"),
            .option("limit", \.limit, doc: "a size"),
            .option("scale", \.scale, doc: "a number"),
            .option("verbose", \.verbose, doc: "a flag"),
            .option("tags", \.tags, doc: "a list"),
            .optional("mode", \.mode, doc: "optional"))
    }

    static let setUps = Atomic<Int>(0)
    static let tearDowns = Atomic<Int>(0)

    let options: Options
    let context: MonitorContext

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard options.scale > 0 else { throw .invalidOption("scale", "must be positive") }
        self.options = options
        self.context = context
    }

    func start() throws(MonitorError) { Self.setUps.add(1, ordering: .relaxed) }
    func stop() { Self.tearDowns.add(1, ordering: .relaxed) }

    func poll() throws(MonitorError) {
        let (ratio, count, state) = Source.shared[options.source].value.withLock { $0 }
        context.emit("level", ["ratio": .double(ratio * options.scale), "count": .int(count), "state": .string(state)])
        context.emit("tick", ["now": .int(context.now())])
    }
}

/// Pushes from a worker thread until stopped; and echoes what a pipe delivers.
final class PushingMonitor: PushMonitor {
    static let spec = PluginSpec(
        name: "pushing", version: "1.0.0", summary: "pushes",
        events: [
            .occurrence("beat", doc: "from the worker", fields: [FieldDecl("n", .int)]),
            .occurrence("bytes", doc: "from the pipe", fields: [FieldDecl("count", .int, unit: "bytes")]),
        ])

    struct Options: DeclaredOptions {
        var fd: Int = -1
        static let schema = OptionSchema<Options>(.option("fd", \.fd, doc: "a descriptor to watch (one end of a socket pair)"))
    }

    let context: MonitorContext
    let fd: Int32

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.fd = Int32(options.fd)
    }

    func start() throws(MonitorError) {
        let context = self.context
        context.spawn("beat") { token in
            var n: Int64 = 0
            while token.wait(.milliseconds(5)) {
                n += 1
                context.emit("beat", ["n": .int(n)])
            }
        }
        if fd >= 0 {
            let fd = self.fd
            context.watch(fd: fd) { _ in
                var buffer = [UInt8](repeating: 0, count: 256)
                let n = read(fd, &buffer, buffer.count)
                if n > 0 { context.emit("bytes", ["count": .int(Int64(n))]) }
            }
        }
    }
}

/// Breaks the contract on purpose.
final class SloppyMonitor: PolledMonitor {
    static let spec = PluginSpec(name: "sloppy", version: "1.0.0", summary: "emits what it did not declare",
                                 events: [EventDecl("sample", doc: "", fields: [FieldDecl("x", .int)], policy: .samples)])
    let context: MonitorContext
    init(options: NoOptions, context: MonitorContext) throws(MonitorError) { self.context = context }
    func poll() throws(MonitorError) {
        context.emit("sample", ["x": .double(1), "y": .int(2)])
        context.emit("other", ["x": .int(1)])
    }
}

final class AbsentMonitor: PolledMonitor {
    static let spec = PluginSpec(name: "absent", version: "1.0.0", summary: "its source is never there",
                                 events: [EventDecl("sample", doc: "", fields: [])])
    let context: MonitorContext
    init(options: NoOptions, context: MonitorContext) throws(MonitorError) { self.context = context }
    func start() throws(MonitorError) {
        context.setAvailability(false, reason: "no gauge on this machine")
        throw .unavailable("/sys/class/gauge does not exist")
    }
    func poll() throws(MonitorError) {}
}

@Suite(.serialized) struct VigilKitTests {
    @Test func typedOptionsBecomeTheSelfDescription() throws {
        let host = try PluginTestHost(GaugeMonitor.self)
        let d = host.description
        #expect(d.name == "gauge" && d.version == "2.0.0" && d.polled && d.defaultInterval == 1_000_000_000)
        let options = d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-"):\($0.required)" }
        #expect(options == ["source:int:0:false", "label:string:gauge:false", "period:duration:1500ms:false",
                            "limit:size:64MiB:false", "scale:double:1.0:false", "verbose:bool:false:false",
                            "tags:json:[\"a\",\"b\"]:false", "mode:string:-:false"])
        #expect(d.events.map(\.kind) == ["level", "tick"])
        #expect(d.events[0].fields.map(\.unit) == ["ratio", "", ""])
    }

    @Test func optionsAreDecodedFromWhatTheManifestSays() throws {
        let host = try PluginTestHost(GaugeMonitor.self)
        let instance = try host.instance(options: "{ scale: 2, label: x, period: 2s, limit: 1GiB, tags: [c], mode: fast }")
        try instance.start()
        #expect(instance.events(kind: "level").first?.double("ratio") == 1.0)  // 0.5 × scale 2
        try instance.stop()
    }

    @Test func badOptionsAreReportedAsTheManifestWould() throws {
        let host = try PluginTestHost(GaugeMonitor.self)
        #expect(throws: PluginTestError.self) { try host.instance(options: "{ scale: fast }") }
        #expect(throws: PluginTestError.self) { try host.instance(options: "{ colour: red }") }
        do {
            _ = try host.instance(options: "{ scale: -1 }")
            Issue.record("a negative scale was accepted")
        } catch {
            #expect(error.status == "invalid configuration")
            #expect(error.description.contains("options.scale: must be positive"))
        }
    }

    @Test func startAndStopAreIdempotentAndSetUpOnlyOnARealChange() throws {
        let host = try PluginTestHost(GaugeMonitor.self)
        let instance = try host.instance()
        let (up, down) = (GaugeMonitor.setUps.load(ordering: .relaxed), GaugeMonitor.tearDowns.load(ordering: .relaxed))
        try instance.start()
        try instance.start()
        #expect(GaugeMonitor.setUps.load(ordering: .relaxed) == up + 1)
        try instance.stop()
        try instance.stop()
        #expect(GaugeMonitor.tearDowns.load(ordering: .relaxed) == down + 1)
        try instance.start()
        #expect(GaugeMonitor.setUps.load(ordering: .relaxed) == up + 2)
        try instance.stop()
    }

    @Test func aSnapshotOnStartThenOnlyChangesBeyondTheMinimum() throws {
        let source = Source.shared[1]
        source.value.withLock { $0 = (0.5, 10, "up") }
        let host = try PluginTestHost(GaugeMonitor.self)
        let instance = try host.instance(options: "{ source: 1 }", interval: .seconds(1))
        try instance.start()  // snapshot
        try instance.advance(by: .seconds(2))  // nothing changed
        #expect(instance.events(kind: "level").count == 1)
        #expect(instance.events(kind: "tick").count == 3)  // a sampled kind: every poll

        source.value.withLock { $0.0 = 0.52 }  // below the 0.05 minimum change
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "level").count == 1)
        source.value.withLock { $0.0 = 0.6 }  // beyond it
        try instance.advance(by: .seconds(1))
        source.value.withLock { $0.2 = "down" }  // strings: any change
        try instance.advance(by: .seconds(1))
        let levels = instance.events(kind: "level")
        #expect(levels.map { $0.double("ratio") } == [0.5, 0.6, 0.6])
        #expect(levels.map { $0.string("state") } == ["up", "up", "down"])

        try instance.stop()
        try instance.start()  // a new snapshot after a restart
        #expect(instance.events(kind: "level").count == 4)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func thePluginReadsTheInjectedClock() throws {
        let clock = ManualClock(nanoseconds: 1_000_000_000_000)
        let host = try PluginTestHost(GaugeMonitor.self, clock: clock)
        let instance = try host.instance(interval: .milliseconds(500))
        try instance.start()
        try instance.advance(by: .milliseconds(1250))  // polls at +0.5 s and +1 s
        let ticks = instance.events(kind: "tick")
        #expect(ticks.map { $0.int("now") } == [1_000_000_000_000, 1_000_500_000_000, 1_001_000_000_000])
        #expect(ticks.map(\.time) == [1_000_000_000_000, 1_000_500_000_000, 1_001_000_000_000])
        #expect(clock.now == 1_001_250_000_000)
        try instance.stop()
    }

    @Test func workersPushUntilStopAndNothingArrivesAfter() throws {
        // A socket pair rather than a pipe: close-on-exec from the start
        // (Swift's Glibc has no pipe2), so no vigil another test spawns holds it.
        var fds: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let host = try PluginTestHost(PushingMonitor.self)
        #expect(!host.description.polled)
        let instance = try host.instance(options: "{ fd: \(fds[0]) }")
        try instance.start()
        #expect(instance.waitForEvents(3, kind: "beat").count >= 3)
        _ = write(fds[1], "hello", 5)
        #expect(instance.waitForEvents(1, kind: "bytes").first?.int("count") == 5)
        try instance.stop()  // joins the workers
        let count = instance.events.count
        usleep(50_000)
        #expect(instance.events.count == count)
        #expect(instance.violations.isEmpty)  // no emit was refused after stop
    }

    @Test func breachesOfTheDeclarationsAreCollected() throws {
        let host = try PluginTestHost(SloppyMonitor.self)
        let instance = try host.instance()
        try instance.start()
        try instance.stop()
        // The same words as `vigil plugins check`: one decoder judges both.
        #expect(instance.violations.contains("field 'x' of kind 'sample' is a double, declared an int"))
        #expect(instance.violations.contains("field 'y' of kind 'sample' is not declared"))
        #expect(instance.violations.contains("kind 'other' is not declared"))
    }

    @Test func anAbsentSourceIsUnavailableWithItsReason() throws {
        let host = try PluginTestHost(AbsentMonitor.self)
        let instance = try host.instance()
        do {
            try instance.start()
            Issue.record("start succeeded")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains("/sys/class/gauge does not exist"))
        }
        #expect(instance.availability.first?.available == false)
        #expect(instance.availability.first?.reason == "no gauge on this machine")
    }

    @Test func aBuiltPluginFileRunsTheSameWay() throws {
        let host = try PluginTestHost(path: productsDir + "/libload.so")
        #expect(host.description.name == "load")
        let instance = try host.instance(options: "{ procfs: \(repoRoot)/Tests/Fixtures/machines/server/proc }", interval: .seconds(5))
        try instance.start()
        try instance.advance(by: .seconds(10))
        let samples = instance.events(kind: "sample")
        #expect(samples.count == 3)  // a sampled kind: snapshot plus two polls
        #expect(samples.first?.double("load1") == 1.72)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }
}

let repoRoot: String = {
    var path = #filePath
    for _ in 0..<3 { path = String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)]) }
    return path
}()

/// The build's products directory (where the plugin libraries are).
let productsDir: String = {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/exe", &buffer, buffer.count - 1)
    var path = n > 0 ? String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) : CommandLine.arguments[0]
    while path != "/" && !path.isEmpty {
        path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        if access(path + "/libload.so", F_OK) == 0 { return path }
    }
    return "."
}()

/// The scenario machines under Tests/Fixtures/machines: each directory is a
/// machine's root, with its `proc`, `sys` and `etc` beneath it.
let machines = repoRoot + "/Tests/Fixtures/machines"
