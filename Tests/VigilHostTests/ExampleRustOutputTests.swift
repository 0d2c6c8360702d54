import Foundation
import Glibc
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
import VigilKit
import VigilKitTesting

/// The Rust output example, `Plugins/examples/rust/influx` (a Cargo package
/// built by `scripts/build-rust-plugins` beside the monitor example), loaded
/// from its real `.so`: by the loader, by `vigil plugins check`, and as a
/// sink of `type: plugin` in a `vigil run` that sends to a line protocol
/// listener on loopback played by the test.
@Suite(.startsProcesses, .offThePool) struct ExampleRustOutputTests {
    static func path() throws -> String { try RustExamplePlugin.directory() + "/influx.so" }

    // MARK: - self-description

    @Test func describesItselfAsAnOutput() throws {
        let d = try PluginCatalog(directories: []).load(path: try Self.path()).get().description
        #expect(d.name == "influx")
        #expect(d.kind == .output)
        #expect(d.abiMajor == 1 && d.abiMinor == 5)
        #expect(d.events.isEmpty && !d.polled)
        #expect(d.problems() == [])
        #expect(d.options.map(\.name) == ["address", "timeout", "retry_after"])
        #expect(d.options.map(\.type) == [.string, .duration, .duration])
        #expect(d.options.map(\.defaultText) == ["127.0.0.1:8094", "5s", "1s"])
        #expect(d.options.map(\.exampleText) == ["localhost:8094", "2s", "500ms"])
        #expect(d.options.allSatisfy { !$0.doc.isEmpty && !$0.required })
        let describe = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", try Self.path()])
        #expect(describe.status == 0, "\(describe.stderr)")
        #expect(describe.stdout.contains("an output: takes events and sends them on (ABI 1.5)"), "\(describe.stdout)")
    }

    // MARK: - plugins check

    /// As shipped (its example options, nothing listening there): every
    /// write is answered, RETRY being an answer like any other.
    @Test func passesPluginsCheckAsShipped() throws {
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try Self.path()], timeout: 60)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("PASS  create with example options"), "\(check.stdout)")
        #expect(check.stdout.contains("PASS  output: batches written, flushed"), "\(check.stdout)")
        #expect(check.stdout.contains(" passed, 0 failed"), "\(check.stdout)")
    }

    /// With a listener: the checker's batch is delivered, each event a line.
    @Test func passesPluginsCheckAgainstAListener() throws {
        let listener = try TCPListener()
        defer { listener.close() }
        let received = LineCollector(listener)
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try Self.path(),
                                                    "--option", "address=127.0.0.1:\(listener.port)"], timeout: 60)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("attempt 1: 3 delivered, 0 to retry, 0 rejected; attempt 2: 3 delivered"), "\(check.stdout)")
        let lines = received.linesWhenClosed()
        // The checker writes its batch twice (then odd events, as another host).
        #expect(lines.filter { $0.hasPrefix("check_sample,host=vigil-check,monitor=check,plugin=check,severity=info ") }.count == 6)
        #expect(lines.contains { $0.contains(#" value=0.75,count=3i,name="event 3",ok=false "#) }, "\(lines)")
    }

    /// VigilKitTesting runs it from its file, as a plugin author would:
    /// the verdicts per event, the reason of the reject, the line sent.
    @Test func theTestKitRunsItFromItsFile() throws {
        let listener = try TCPListener()
        defer { listener.close() }
        let received = LineCollector(listener)
        let out = try PluginTestHost(path: try Self.path())
            .output("metrics", options: "{ address: \"127.0.0.1:\(listener.port)\" }", hostName: "h")
        try out.start()
        let answer = try out.write([
            OutputEvent(monitor: "m", plugin: "p", seq: 1, time: 5, kind: "sample", fields: [EventField("x", .double(.nan))]),
            OutputEvent(monitor: "m", plugin: "p", seq: 2, time: 6, kind: "sample", fields: [EventField("n", .int(2))]),
        ])
        #expect(answer.verdicts == [.reject, .ok], "\(answer)")
        #expect(answer.message == "seq 1 (m/sample) has no field line protocol can carry (1 field: none, NaN or infinite)")
        try out.flush()
        try out.stop()
        out.destroy()
        #expect(received.linesWhenClosed() == ["p_sample,host=h,monitor=m,plugin=p,severity=info n=2i 6"])
        #expect(out.logs.map(\.message) == ["connected to 127.0.0.1:\(listener.port)"])
    }

    // MARK: - through the real binary

    /// A flood of 300 events, two fields each, to a listener that is up:
    /// each event arrives once, as exactly the line it should be.
    @Test func deliversEveryEventOnceAsLineProtocol() throws {
        let listener = try TCPListener()
        defer { listener.close() }
        let received = LineCollector(listener)
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.manifest(port: listener.port, to: dir)
        let started = Self.nowNanoseconds()
        let run = try TestEnv.run(TestEnv.vigil, Self.runArguments(dir), timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        try Self.expectEveryFloodEventOnce(received.linesWhenClosed(), from: started, to: Self.nowNanoseconds())
        try Self.expectNothingLost(dir)
    }

    /// The listener is down when the run starts and comes up a second
    /// later: the output answers RETRY (asking for 200 ms) until it can
    /// connect, the host writes the events again, and every one arrives once.
    @Test func retriesWhileTheListenerIsAwayAndLosesNothing() throws {
        // Bound, not listening yet: connections are refused, as by a peer that is down.
        let listener = try TCPListener(listening: false)
        defer { listener.close() }
        let port = listener.port
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.manifest(port: port, to: dir)
        let started = Self.nowNanoseconds()
        let process = try TestEnv.start(TestEnv.vigil, Self.runArguments(dir))
        Thread.sleep(forTimeInterval: 1.0)
        try listener.listenNow()
        let received = LineCollector(listener)
        let run = process.wait(timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("cannot connect to 127.0.0.1:\(port)"), "\(run.stderr)")
        try Self.expectEveryFloodEventOnce(received.linesWhenClosed(), from: started, to: Self.nowNanoseconds())
        try Self.expectNothingLost(dir)
    }

    // MARK: - helpers

    static func runArguments(_ dir: String) throws -> [String] {
        ["run", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins(), "--plugin-dir", try RustExamplePlugin.directory(),
         "--control", "none", "--drain-timeout", "20s", "--summary", dir + "/s.json"]
    }

    static func manifest(port: Int, to dir: String) throws {
        try TestEnv.write("""
        host: web-1.example
        monitors:
          f:
            plugin: flood
            options: { count: 300, rate: 3000, fields: 2 }
        sinks:
          influx:
            type: plugin
            plugin: influx
            isolation: none
            match: ["f/*"]
            batch: 100
            retry_min: 10ms
            retry_max: 200ms
            options: { address: "127.0.0.1:\(port)", retry_after: 200ms }
        """, to: dir + "/m.yaml")
    }

    /// Flood's event k (from 0) has v0 = k and v1 = k + 0.5: the lines must
    /// be exactly those, once each, stamped with nanoseconds from the run.
    static func expectEveryFloodEventOnce(_ lines: [String], from start: Int64, to end: Int64) throws {
        #expect(lines.count == 300, "\(lines.count) lines; \(lines.prefix(3))")
        var seen = Set<Int>()
        for line in lines {
            let parts = line.split(separator: " ")
            guard parts.count == 3, parts[0] == "flood_flood,host=web-1.example,monitor=f,plugin=flood,severity=info",
                  let time = Int64(parts[2]) else {
                Issue.record("not a flood line: \(line)")
                continue
            }
            let fields = parts[1].split(separator: ",")
            guard fields.count == 2, fields[0].hasPrefix("v0="), let k = Int(fields[0].dropFirst(3)) else {
                Issue.record("unexpected fields: \(line)")
                continue
            }
            #expect(fields[1] == "v1=\(k).5", "\(line)")
            #expect(time >= start - 1_000_000_000 && time <= end, "\(line): not within the run")
            #expect(seen.insert(k).inserted, "event \(k) arrived twice")
        }
        #expect(seen == Set(0..<300))
    }

    static func expectNothingLost(_ dir: String) throws {
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/s.json"))) as? [String: Any]
        let sink = (summary?["sinks"] as? [[String: Any]])?.first
        #expect(sink?["written"] as? Int == 300, "\(String(describing: sink))")
        let lost = sink?["lost"] as? [String: Int] ?? [:]
        #expect(lost.values.allSatisfy { $0 == 0 }, "\(lost)")
    }

    static func nowNanoseconds() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}
