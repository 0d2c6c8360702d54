import Foundation
import Synchronization
import Testing

/// The Swift output example, `Plugins/examples/swift/jsonl` (a SwiftPM
/// package of its own that depends on Vigil by URL and version), built once
/// per test run from a copy of it, against this tree as the tagged release
/// (`VigilRelease`, whose scratch path the Swift scaffolds share), then
/// checked with `vigil plugins check` and run by `vigil run` as a sink of
/// `type: plugin` sending to a listener on loopback.
enum SwiftOutputExample {
    private static let built = Mutex<String?>(nil)

    /// The built `libjsonl.so`, copied out of the shared scratch path.
    static func path() throws -> String {
        try built.withLock { built in
            if let built { return built }
            let release = try VigilRelease.shared()
            let package = try NewPluginTests.copyOfExample("swift", "jsonl")
            let swift = try NewPluginTests.onPath("swift") ?? { throw TestFailure("swift not on PATH") }()
            let result = try TestEnv.run(swift, ["build", "--package-path", package, "--scratch-path", release.scratch,
                                                 "--config-path", release.configuration, "--disable-dependency-cache"], timeout: 900)
            guard result.status == 0 else {
                throw TestFailure("swift build of \(package) failed (\(result.status)): \(result.stdout)\(result.stderr)")
            }
            // Its own copy: the scaffold tests build into the same scratch path.
            let dir = TestEnv.productsDir + "/example-jsonl"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try? FileManager.default.removeItem(atPath: dir + "/libjsonl.so")
            try FileManager.default.copyItem(atPath: release.scratch + "/debug/libjsonl.so", toPath: dir + "/libjsonl.so")
            built = dir + "/libjsonl.so"
            return built!
        }
    }
}

@Suite(.startsProcesses, .offThePool) struct ExampleSwiftOutputTests {
    @Test func passesPluginsCheckAsShipped() throws {
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try SwiftOutputExample.path()], timeout: 60)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("plugin jsonl 1.0.0, ABI 1.5, an output"), "\(check.stdout)")
        #expect(check.stdout.contains("PASS  create with example options"), "\(check.stdout)")
        #expect(check.stdout.contains("PASS  output: batches written, flushed"), "\(check.stdout)")
        #expect(check.stdout.contains(" passed, 0 failed"), "\(check.stdout)")
        // It exports its entry point and nothing else of its code.
        let nm = try TestEnv.run("/usr/bin/nm", ["-D", "--defined-only", try SwiftOutputExample.path()])
        #expect(nm.stdout.split(separator: "\n").filter { $0.contains(" T ") }.map { $0.split(separator: " ").last }
                == ["vigil_plugin_entry"], "\(nm.stdout)")
    }

    /// A flood of 300 events to a listener that comes up a second after the
    /// run started: RETRY until then, and afterwards every event arrives
    /// once, as exactly the JSON object it should be.
    @Test func deliversEveryEventOnceAfterTheListenerCameUp() throws {
        // Bound, not listening yet: connections are refused, as by a peer that is down.
        let listener = try TCPListener(listening: false)
        defer { listener.close() }
        let port = listener.port
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plugin = try SwiftOutputExample.path()
        try TestEnv.write("""
        host: web-1.example
        monitors:
          f:
            plugin: flood
            options: { count: 300, rate: 3000, fields: 2 }
        sinks:
          lines:
            type: plugin
            plugin: \(plugin)
            isolation: none
            match: ["f/*"]
            batch: 100
            retry_min: 10ms
            retry_max: 200ms
            options: { address: "127.0.0.1:\(port)", retry_after: 200ms }
        """, to: dir + "/m.yaml")
        let process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins(),
                                                        "--control", "none", "--drain-timeout", "20s",
                                                        "--summary", dir + "/s.json"])
        Thread.sleep(forTimeInterval: 1.0)
        try listener.listenNow()
        let received = LineCollector(listener)
        let run = process.wait(timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("cannot connect to 127.0.0.1:\(port)"), "\(run.stderr)")
        let lines = received.linesWhenClosed()
        #expect(lines.count == 300, "\(lines.count) lines; \(lines.prefix(2))")
        var seen = Set<Int>()
        for line in lines {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let fields = object["fields"] as? [String: Double], let v0 = fields["v0"] else {
                Issue.record("not an event: \(line)")
                continue
            }
            let k = Int(v0)
            #expect(line.hasPrefix(#"{"time":""#) && line.contains(#"Z","host":"web-1.example","monitor":"f","plugin":"flood","kind":"flood","severity":"info","seq":"#), "\(line)")
            #expect(line.hasSuffix(#","fields":{"v0":\#(k).0,"v1":\#(k).5}}"#), "\(line)")
            #expect((object["time"] as? String)?.count == 27, "\(line)")
            #expect(seen.insert(k).inserted, "event \(k) arrived twice")
        }
        #expect(seen == Set(0..<300))
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/s.json"))) as? [String: Any]
        let sink = (summary?["sinks"] as? [[String: Any]])?.first
        #expect(sink?["written"] as? Int == 300, "\(String(describing: sink))")
        #expect((sink?["lost"] as? [String: Int] ?? [:]).values.allSatisfy { $0 == 0 })
    }
}
