import Foundation
@preconcurrency import CVigilPlugin
import Testing
import VigilABI
import VigilCore
@testable import VigilHost

/// Output plugins (ABI 1.5), as far as this host has them: the loader reads
/// an output's descriptor, the batch encoder and answer decoder meet a real
/// `.so` built by cc, the tools say what an output is, and a monitor naming
/// one is refused.
@Suite struct OutputPluginTests {
    @Test func anOutputDescribesItselfAsOne() throws {
        let plugin = try PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("output_min")).get()
        let d = plugin.description
        #expect(d.kind == .output)
        #expect(d.abiMinor == 5)
        #expect(d.events.isEmpty && !d.polled && d.defaultInterval == 0)
        #expect(d.options.map(\.name) == ["threshold"])
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
        let (status, message) = withCreateArgs(name: "out", options: options, interval: 0, host: ValidationHost.context,
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
