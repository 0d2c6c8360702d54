import Foundation
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The Rust example plugin, `Plugins/examples/rust/boottime` (a Cargo package), built
/// once per test run by `scripts/build-rust-plugins` (which needs cargo) and
/// loaded from its real `.so` by the host machinery, reading the fixture trees
/// of `Tests/Fixtures/proc-uptime` (or trees written here) through `procfs`.
///
/// Timing: no test depends on the interval (1 h in the Harness); polls are
/// asked for explicitly and waits end as soon as their condition holds.
enum RustExamplePlugin {
    private static let built = Mutex<String?>(nil)

    /// The directory holding `boottime.so`, built on first use.
    static func directory() throws -> String {
        try built.withLock { built in
            if let built { return built }
            let dir = TestEnv.productsDir + "/rust-plugins"
            let result = try TestEnv.run(TestEnv.repoRoot + "/scripts/build-rust-plugins", [dir], timeout: 600)
            guard result.status == 0 else {
                throw TestFailure("scripts/build-rust-plugins failed (\(result.status)): \(result.stderr)")
            }
            built = dir
            return dir
        }
    }

    static func path() throws -> String { try directory() + "/boottime.so" }
}

@Suite(.startsProcesses, .offThePool) struct ExampleRustPluginTests {
    static let server = TestEnv.fixture("proc-uptime/server")

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

    /// A fresh procfs tree with the given files (name → content).
    static func tree(_ files: [String: String], tag: String = #function) throws -> String {
        let dir = try TestEnv.tempDir(tag)
        for (name, text) in files { try TestEnv.write(text, to: dir + "/" + name) }
        return dir
    }

    static func kinds(_ events: [Event], _ kind: String) -> [Event] { events.filter { $0.kind == kind } }

    // MARK: - self-description

    @Test func describesItself() throws {
        let plugin = try PluginCatalog(directories: []).load(path: try RustExamplePlugin.path()).get()
        let d = plugin.description
        #expect(d.name == "boottime")
        #expect(d.version == "1.0.0")
        // The bindings were written for ABI 1.5 and answer that, whatever the host's minor.
        #expect(d.abiMajor == 1 && d.abiMinor == 5)
        #expect(d.polled)
        #expect(d.defaultInterval == 10_000_000_000)
        #expect(d.problems() == [])
        #expect(d.options.map(\.name) == ["procfs", "report_boot"])
        #expect(d.options.map(\.type) == [.string, .bool])
        #expect(d.options.map(\.defaultText) == ["/proc", "false"])
        #expect(d.options.allSatisfy { !$0.doc.isEmpty && !$0.required })
        #expect(d.events.map(\.kind) == ["sample", "boot"])
        let sample = d.events.first?.fields ?? []
        #expect(sample.map(\.name) == ["uptime", "idle_ratio", "cpus"])
        #expect(sample.map(\.type) == [.double, .double, .int])
        #expect(sample.map(\.unit) == ["seconds", "ratio", "count"])
        #expect(d.events.last?.fields.map(\.name) == ["boot_time"])
        #expect(d.events.last?.fields.map(\.type) == [.int])
        #expect(d.events.allSatisfy { !$0.dynamicFields && $0.fields.allSatisfy { !$0.doc.isEmpty } })
        // Found by name too: the script installs it under the plugin's name.
        let byName = try PluginCatalog(directories: [try RustExamplePlugin.directory()]).load(reference: "boottime").get()
        #expect(byName.description.name == "boottime")
    }

    // MARK: - values

    @Test func samplesTheFixtureExactly() async throws {
        let h = try Harness(plugin: try RustExamplePlugin.path(), options: "{ procfs: \(Self.server) }")
        h.launch()  // create, start, first poll
        h.poll()
        let samples = h.waitFor(2) { $0.kind == "sample" }
        await h.stop()
        #expect(samples.count == 2)
        for sample in samples {
            #expect(sample.monitor == "m")
            #expect(sample.plugin == "boottime")
            #expect(sample[field: "uptime"] == .double(12_345.5))
            // 37036.5 / (12345.5 × 4) = 0.75, exact in binary floating point.
            #expect(sample[field: "idle_ratio"] == .double(0.75))
            #expect(sample[field: "cpus"] == .int(4))
        }
        #expect(Self.kinds(h.events, "boot").isEmpty, "report_boot is false by default")
        #expect(h.events.allSatisfy { $0.kind == "sample" })
        #expect(h.instance.pollErrors.load(ordering: .relaxed) == 0)
    }

    @Test func reportBootEmitsOneBootEventAfterStart() async throws {
        let h = try Harness(plugin: try RustExamplePlugin.path(),
                            options: "{ procfs: \(Self.server), report_boot: true }")
        h.launch()
        h.poll()
        h.poll()
        // The boot event is emitted in the first poll, before the second sample.
        let samples = h.waitFor(3) { $0.kind == "sample" }
        await h.stop()
        #expect(samples.count == 3)
        let boots = Self.kinds(h.events, "boot")
        #expect(boots.count == 1)
        #expect(boots.first?[field: "boot_time"] == .int(1_700_000_000))
        #expect(h.events.map(\.kind).prefix(2) == ["sample", "boot"])
    }

    @Test func twoInstancesRunSideBySide() async throws {
        let other = try Self.tree([
            "uptime": "100.00 50.00\n",
            "stat": "cpu  1 2 3 4\ncpu0 1 2 3 4\ncpu1 1 2 3 4\nbtime 1600000000\n",
        ])
        let a = try Harness(plugin: try RustExamplePlugin.path(), options: "{ procfs: \(Self.server) }")
        let b = try Harness(plugin: try RustExamplePlugin.path(), options: "{ procfs: \(other), report_boot: true }")
        a.launch(); b.launch()
        a.poll(); a.poll()
        let fromA = a.waitFor(3) { $0.kind == "sample" }
        let fromB = b.waitFor(1) { $0.kind == "boot" }
        await a.stop(); await b.stop()
        #expect(fromA.count == 3)
        #expect(fromA.allSatisfy { $0[field: "uptime"] == .double(12_345.5) && $0[field: "cpus"] == .int(4) })
        let bSamples = Self.kinds(b.events, "sample")
        #expect(bSamples.count == 1)
        #expect(bSamples.first?[field: "uptime"] == .double(100))
        #expect(bSamples.first?[field: "idle_ratio"] == .double(0.25))  // 50 / (100 × 2)
        #expect(bSamples.first?[field: "cpus"] == .int(2))
        #expect(fromB.first?[field: "boot_time"] == .int(1_600_000_000))
        #expect(Self.kinds(a.events, "boot").isEmpty)
    }

    // MARK: - statuses

    @Test func aMissingFileIsUnavailableWithTheReason() async throws {
        let cases: [(missing: String, files: [String: String])] = [("uptime", [:]), ("stat", ["uptime": "1.00 1.00\n"])]
        for (missing, files) in cases {
            let root = try Self.tree(files)
            let h = try Harness(plugin: try RustExamplePlugin.path(), options: "{ procfs: \(root) }")
            h.launch()
            let availability = h.waitFor(1) { $0.kind == "availability" }.first
            await h.stop()
            #expect(availability?.monitor == "m")
            #expect(availability?[field: "available"] == .bool(false))
            guard case .string(let reason)? = availability?[field: "reason"] else {
                Issue.record("no reason for a missing \(missing)")
                continue
            }
            #expect(reason.hasPrefix("cannot read \(root)/\(missing): "), "\(reason)")
            #expect(reason.contains("No such file or directory"), "\(reason)")
            #expect(h.events.allSatisfy { $0.kind == "availability" }, "no sample, no instance_failed")
            #expect(h.instance.state == .stopped)
        }
    }

    @Test func anUnavailableSourceLeavesTheInstanceRetrying() async throws {
        let h = try Harness(plugin: try RustExamplePlugin.path(), options: "{ procfs: \(try Self.tree([:])) }")
        h.launch()
        #expect(h.waitFor(1) { $0.kind == "availability" }.count == 1)
        #expect(h.instance.state == .retrying)
        await h.stop()
    }

    @Test func malformedContentIsATemporaryFailureAndPollingGoesOn() async throws {
        let h = try Harness(plugin: try RustExamplePlugin.path(),
                            options: "{ procfs: \(TestEnv.fixture("proc-uptime/broken")) }")
        h.launch()  // start succeeds (the files exist); the first poll fails
        #expect(Self.eventually { h.instance.pollErrors.load(ordering: .relaxed) >= 1 })
        h.poll()
        #expect(Self.eventually { h.instance.pollErrors.load(ordering: .relaxed) >= 2 })
        #expect(h.instance.state == .running)
        await h.stop()
        #expect(h.events.isEmpty, "\(h.events.map(\.kind))")
    }

    @Test func anEmptyProcfsIsRefusedAtTheOptionsPath() async throws {
        let h = try Harness(plugin: try RustExamplePlugin.path(), options: "{ procfs: \"\" }")
        h.launch()
        let failed = h.waitFor(1) { $0.kind == "instance_failed" }.first
        await h.stop()
        #expect(failed?[field: "call"] == .string("create"))
        #expect(failed?[field: "status"] == .string("invalid configuration"))
        #expect(failed?[field: "message"] == .string("options.procfs: must not be empty"))
        #expect(h.instance.state == .failed)
    }
}
