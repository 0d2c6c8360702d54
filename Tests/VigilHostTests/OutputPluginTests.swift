import Foundation
import Glibc
import Synchronization
@preconcurrency import CVigilPlugin
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Output plugins (ABI 1.5), as far as this host has them: the loader reads
/// an output's descriptor, the batch encoder and answer decoder meet a real
/// `.so` built by cc, the tools say what an output is, and a monitor naming
/// one is refused.
@Suite(.startsProcesses, .offThePool) struct OutputPluginTests {
    @Test func anOutputDescribesItselfAsOne() throws {
        let plugin = try PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("output_min")).get()
        let d = plugin.description
        #expect(d.kind == .output)
        #expect(d.abiMinor == 5)
        #expect(d.events.isEmpty && !d.polled && d.defaultInterval == 0)
        #expect(d.options.map(\.name) == ["threshold", "path", "retry_first", "retry_after"])
        // What the probe child sends keeps the kind; a monitor's JSON has none.
        #expect(try PluginDescription(json: d.json()).kind == .output)
        let monitor = try PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("heartbeat")).get().description
        let top = try JSONSerialization.jsonObject(with: Data(monitor.json().utf8)) as? [String: Any]
        #expect(top?["kind"] == nil)
        #expect(try PluginDescription(json: monitor.json()).kind == .monitor)
    }

    @Test func anOutputBeforeABI15IsRefusedNamingTheMinor() throws {
        switch PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("output_old_abi")) {
        case .success: Issue.record("an output answering 1.4 loaded")
        case .failure(let refusal): #expect(refusal.reason.contains("an output plugin needs ABI 1.5 or later; it chose 1.4"))
        }
    }

    /// The batch a real output is given, and its answers read back: per
    /// event (REJECT for seq a multiple of 3, with the call's message as
    /// reason) or for the whole batch.
    @Test func batchesGoInAndAnswersComeBack() throws {
        let plugin = try PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("output_min")).get()
        let descriptor = plugin.descriptor
        let options = [BoundOption(name: "threshold", value: .int(3))]
        var handle: UnsafeMutableRawPointer?
        let (status, message) = withCreateArgs(name: "out", options: options, interval: 0, host: ValidationHost.context.pointer,
                                               api: ValidationHost.table) { args in
            withPluginError { err in descriptor.create(&args, &handle, err) }
        }
        try #require(status == VIGIL_OK, "\(message)")
        defer { descriptor.destroy(handle) }
        let events = (1...7).map { i in
            Event(time: 1_700_000_000_000_000_000, monitor: "m\(i)", plugin: "p", kind: "sample", seq: UInt64(i),
                  fields: [Field("value", .double(Double(i))), Field("name", .string(String(repeating: "é", count: i)))])
        }
        let answer = OutputBatch.write(events, host: "h", attempt: 1) { batch, result, err in
            descriptor.write(handle, batch, result, err)
        }
        #expect(answer.status == VIGIL_OK)
        #expect(answer.verdicts == [.ok, .ok, .reject, .ok, .ok, .reject, .ok])
        #expect(answer.delivered == 5 && answer.rejected == 2 && answer.retried == 0)
        #expect(answer.message == "seq is a multiple of 3")
    }

    @Test func theToolsSayWhatAnOutputIs() throws {
        let dir = try TestEnv.cPlugins()
        let describe = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", dir + "/output_min.so"])
        #expect(describe.status == 0, "\(describe.stderr)")
        #expect(describe.stdout.contains("an output: takes events and sends them on (ABI 1.5)"))
        #expect(!describe.stdout.contains("Events:"))
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", dir + "/output_min.so", "--option", "threshold=2"], timeout: 60)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("PASS  output: batches written, flushed"), "\(check.stdout)")
        #expect(check.stdout.contains("attempt 1: 2 delivered, 0 to retry, 1 rejected (seq is a multiple of 2)"), "\(check.stdout)")
    }

    /// A sink of `type: plugin` through the real binary: 10,000 events of a
    /// flood; the output answers RETRY to its first 3 writes, then REJECTs
    /// events whose seq is a multiple of 7. Every other event is delivered
    /// exactly once, the rejects are counted exactly, and the run says so:
    /// the same in the host's process and in a runner process.
    @Test(arguments: ["none", "process"])
    func aPluginSinkDeliversEveryEventItDoesNotRejectAndCountsTheRejects(isolation: String) throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
        monitors:
          f:
            plugin: flood
            options: { count: 10000, rate: 20000 }
        sinks:
          out:
            type: plugin
            plugin: output_min
            isolation: \(isolation)
            match: ["f/*"]
            batch: 1000
            retry_min: 10ms
            options: { path: \(dir)/delivered.txt, threshold: 7, retry_first: 3, retry_after: 20 }
        """, to: dir + "/m.yaml")
        let validate = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins()])
        #expect(validate.status == 0, "\(validate.stdout)\(validate.stderr)")
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins(), "--control", "none",
                                                  "--summary", dir + "/s.json"], timeout: 60)
        // Rejected events are lost: the run says so, and exits 3.
        #expect(run.status == 3, "\(run.stderr)")
        let seqs = try String(contentsOfFile: dir + "/delivered.txt", encoding: .utf8).split(separator: "\n")
            .compactMap { $0.split(separator: " ").first.flatMap { UInt64($0) } }
        #expect(seqs.count == Set(seqs).count, "an event delivered twice")
        #expect(seqs.allSatisfy { $0 % 7 != 0 })
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/s.json"))) as? [String: Any]
        let sink = (summary?["sinks"] as? [[String: Any]])?.first
        let lost = sink?["lost"] as? [String: Any]
        #expect(sink?["written"] as? Int == seqs.count)
        #expect(lost?["rejected"] as? Int == 10_000 - seqs.count, "\(String(describing: lost))")
        #expect((lost?["rejected"] as? Int ?? 0) > 1000)
        #expect(lost?["write_failed"] as? Int == 0 && lost?["shutdown"] as? Int == 0)
        #expect(run.stderr.contains("events rejected by the output: seq is a multiple of 7"), "\(run.stderr)")
        #expect(sink?["isolation"] as? String == isolation)
        #expect(sink?["crashes"] as? Int == 0 && sink?["restarts"] as? Int == 0)
        // The first write was answered RETRY three times, all of it each time.
        #expect(sink?["retries"] as? Int == 3, "\(String(describing: sink))")
        let retried = sink?["retried_events"] as? Int ?? 0
        #expect(retried > 0 && retried % 3 == 0 && retried / 3 <= 1000, "\(retried)")
        #expect(run.stderr.contains(isolation == "process" ? "runs in a runner process" : "runs in the host's process"), "\(run.stderr)")
    }

    /// What validate says of plugin sinks: a missing plugin, a monitor where
    /// an output belongs, an unknown option; an output from outside the
    /// host's own directories runs in a runner by default, as a monitor
    /// does, and `isolation: process` is accepted; `write_timeout` and a
    /// runner's keys say nothing to an output in the host's process.
    @Test func validateChecksPluginSinks() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
        monitors: {}
        sinks:
          missing: { type: plugin, plugin: no_such_output, isolation: none }
          monitor: { type: plugin, plugin: heartbeat, isolation: none }
          badopt: { type: plugin, plugin: output_min, isolation: none, options: { thresold: 3 } }
          outside: { type: plugin, plugin: output_min }
          isolated: { type: plugin, plugin: output_min, isolation: process, write_timeout: 2s, limits: { open_files: 64 } }
          inside: { type: plugin, plugin: output_min, isolation: none, write_timeout: 2s, user: nobody }
        """, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins()])
        let text = result.stdout + result.stderr
        #expect(result.status != 0)
        #expect(text.contains("m.yaml:3:36: error: sink 'missing': "), "\(text)")
        #expect(text.contains("m.yaml:4:36: error: sink 'monitor': plugin 'heartbeat' is a monitor, not an output"), "\(text)")
        #expect(text.contains("unknown option 'thresold' for plugin 'output_min' in sink 'badopt'"), "\(text)")
        #expect(!text.contains("m.yaml:6:"), "\(text)")
        #expect(!text.contains("m.yaml:7:"), "\(text)")
        #expect(text.contains("m.yaml:8:64: warning: 'write_timeout' applies only to isolation: process"), "\(text)")
        #expect(text.contains("m.yaml:8:83: warning: 'user' applies only to isolation: process"), "\(text)")

        // Valid without the broken ones: where each output will run is said.
        try TestEnv.write("""
        monitors: {}
        sinks:
          outside: { type: plugin, plugin: output_min }
          isolated: { type: plugin, plugin: output_min, isolation: process, write_timeout: 2s, limits: { open_files: 64 } }
        """, to: dir + "/ok.yaml")
        let ok = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/ok.yaml", "--plugin-dir", try TestEnv.cPlugins()])
        #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
        #expect(ok.stdout.contains("sink outside: isolation: process (a plugin from outside the host's own directories)"), "\(ok.stdout)")
        #expect(ok.stdout.contains("sink isolated: isolation: process (the sink says so)"), "\(ok.stdout)")
    }

    /// An output that retries forever (asking to wait INT64_MAX ns),
    /// answers verdicts that do not exist, or fails for good: the host
    /// neither hangs nor believes more than it was told; every event is
    /// counted, by reason, and the run ends within its drain deadline.
    @Test(arguments: [("retry_forever", "shutdown"), ("garbage", "shutdown"), ("fatal", "write_failed"), ("overclaim", ""),
                      ("moved_per_event", "write_failed")])
    func aHostileOutputCostsOnlyItsEvents(mode: String, reason: String) throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
        monitors:
          f:
            plugin: flood
            options: { count: 2000, rate: 20000 }
        sinks:
          out:
            type: plugin
            plugin: output_hostile
            isolation: none
            match: ["f/*"]
            batch: 100
            retry_min: 10ms
            retry_max: 50ms
            options: { mode: \(mode) }
        """, to: dir + "/m.yaml")
        let started = Date()
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins(), "--control", "none",
                                                  "--drain-timeout", "1s", "--summary", dir + "/s.json"], timeout: 60)
        #expect(Date().timeIntervalSince(started) < 20, "the run took \(Date().timeIntervalSince(started)) s")
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/s.json"))) as? [String: Any]
        let sink = (summary?["sinks"] as? [[String: Any]])?.first
        let lost = sink?["lost"] as? [String: Int] ?? [:]
        let written = sink?["written"] as? Int ?? -1
        // Every event is either written or counted lost under one reason.
        #expect(written + lost.values.reduce(0, +) == 2000, "written \(written), lost \(lost)")
        if reason.isEmpty {
            #expect(written == 2000 && run.status == 0, "\(run.stderr)")
        } else {
            #expect((lost[reason] ?? 0) > 0, "\(lost)")
            #expect(run.status == 3, "\(run.stderr)")
        }
        // Verdicts the host was not given where it reads them are not guessed
        // (the preset OKs counted every rejected event delivered).
        if mode == "moved_per_event" {
            #expect(written == 0, "\(written) written")
            #expect(run.stderr.contains("result->per_event moved off the host's array"), "\(run.stderr)")
        }
    }

    /// Plugins/examples/c/graphite/graphite.c, the C output example, through the real
    /// binary to a carbon stand-in on loopback (a TCP listener that keeps
    /// every line): each number of each event arrives once, as a Graphite
    /// path with the value and the event's second.
    @Test func theGraphiteExampleSendsEveryNumberToCarbon() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let carbon = try TCPListener()
        defer { carbon.close() }
        let received = LineCollector(carbon)
        try TestEnv.write("""
        host: web-1.example
        monitors:
          f:
            plugin: flood
            options: { count: 300, rate: 3000, fields: 2 }
        sinks:
          carbon:
            type: plugin
            plugin: graphite
            isolation: none
            match: ["f/*"]
            options: { host: 127.0.0.1, port: \(carbon.port), prefix: site.a }
        """, to: dir + "/m.yaml")
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins(), "--control", "none"],
                                  timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        // The plugin closes its connection when the host destroys it at exit.
        let lines = received.linesWhenClosed(timeout: 5)
        #expect(lines.count == 600, "\(lines.count) lines; \(lines.prefix(3))")
        let paths = Set(lines.compactMap { $0.split(separator: " ").first.map(String.init) })
        #expect(paths == ["site_a.web-1_example.f.flood.v0", "site_a.web-1_example.f.flood.v1"], "\(paths)")
        let now = Int(Date().timeIntervalSince1970)
        #expect(lines.allSatisfy { line in
            let parts = line.split(separator: " ")
            return parts.count == 3 && Double(parts[1]) != nil && Int(parts[2]).map { abs($0 - now) < 120 } == true
        })
    }

    @Test func aMonitorNamingAnOutputIsRefused() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
        monitors:
          wrong:
            plugin: output_min
        sinks:
          out: { type: null }
        """, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml", "--plugin-dir", try TestEnv.cPlugins()])
        #expect(result.status != 0)
        #expect(result.stderr.contains("m.yaml:3:13: error: plugin 'output_min' of monitor 'wrong' is an output plugin"),
                "\(result.stdout)\(result.stderr)")
    }
}
