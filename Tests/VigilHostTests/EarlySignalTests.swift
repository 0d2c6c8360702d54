import Foundation
import Glibc
import Testing

/// `vigil run` catches SIGHUP, SIGINT and SIGTERM from before `main` (an ELF
/// constructor), so a signal that comes while it is still loading plugins is
/// acted on once it is up, never fatal.
@Suite(.startsProcesses, .offThePool) struct EarlySignalTests {
    /// Waits until the process catches `signal` (its SigCgt mask in
    /// /proc/PID/status), which is the first thing the constructor does.
    func waitUntilCaught(_ pid: pid_t, _ signal: Int32) -> Bool {
        for _ in 0..<20_000 {
            if let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
               let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
               let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16),
               mask & (1 << UInt64(signal - 1)) != 0 {
                return true
            }
            usleep(50)
        }
        return false
    }

    func manifest() throws -> String {
        let dir = try TestEnv.tempDir()
        // Several monitors, so that loading takes a while after the signal.
        let path = dir + "/m.yaml"
        try TestEnv.write("""
        monitors:
          load: { plugin: load, interval: 1s }
          memory: { plugin: memory, interval: 1s }
          cpu: { plugin: cpu, interval: 1s }
          system: { plugin: system, interval: 1s }
        sinks:
          out: { type: file, path: \(dir)/events.jsonl }
        """, to: path)
        return path
    }

    @Test func aSighupWhileLoadingIsNotFatal() throws {
        let process = try TestEnv.start(TestEnv.vigil, ["run", try manifest(), "--for", "1s"])
        #expect(waitUntilCaught(process.pid, SIGHUP))
        kill(process.pid, SIGHUP)
        let result = process.wait(timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test func aSigtermWhileLoadingStopsGracefully() throws {
        let process = try TestEnv.start(TestEnv.vigil, ["run", try manifest(), "--for", "30s"])
        #expect(waitUntilCaught(process.pid, SIGTERM))
        kill(process.pid, SIGTERM)
        let result = process.wait(timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("SIGTERM arrived while starting; shutting down"), "\(result.stderr)")
        #expect(result.stderr.contains("none lost"), "\(result.stderr)")
    }

    /// Other verbs keep the default actions: Ctrl-C stops `vigil tail`.
    @Test func otherVerbsKeepTheDefaultActions() throws {
        let process = try TestEnv.start(TestEnv.vigil, ["tail", "unix:/nonexistent/\(UUID().uuidString).sock"])
        usleep(200_000)
        kill(process.pid, SIGINT)
        let result = process.wait(timeout: 10)
        #expect(result.status != 0)
    }
}

/// A descriptor's default interval is held to the manifest's floor, in a
/// real run: 1 ns would poll without pause (48 k polls/s were seen).
@Suite(.startsProcesses, .offThePool) struct DefaultIntervalTests {
    @Test func aOneNanosecondDefaultIsPolledEveryMillisecondAtMost() throws {
        let dir = try TestEnv.tempDir()
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          fast: { plugin: tiny_interval }
        sinks:
          none: { type: null }
        """, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--for", "1s", "--summary", dir + "/s.json"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/s.json"))) as? [String: Any]
        let monitor = (summary?["monitors"] as? [[String: Any]])?.first
        let polls = (monitor?["polls"] as? Int) ?? -1
        #expect(polls > 10 && polls <= 1_100, "\(polls) polls in 1 s")
    }

    /// `describe` and `check` show the interval that will be used, and what
    /// the plugin declared beside it (issue 26).
    @Test func describeAndCheckShowTheIntervalThatWillBeUsed() throws {
        let plugin = try TestEnv.cPlugin("tiny_interval")
        let shown = "1ms (it declares 1ns; the host polls at most every 1ms)"
        let described = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", plugin], timeout: 60)
        #expect(described.stdout.contains("  polled, default interval \(shown)\n"), "\(described.stdout)")
        let checked = try TestEnv.run(TestEnv.vigil, ["plugins", "check", plugin], timeout: 120)
        #expect((checked.stdout + checked.stderr).contains("polled, default interval \(shown)"), "\(checked.stdout)")
    }
}
