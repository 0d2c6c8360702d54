import Foundation
import Testing
import VigilIsolation

/// The console in a real browser (issue 31): the real `vigil` with
/// manifests/default.yaml (and a remote_write sink) and its TCP listener, Debian's Chromium driven
/// headless by PyPI's playwright (Tests/Browser/console_test.py): the
/// log-in with a wrong token and the right one, the overview with every
/// monitor and sink, a monitor's charts against `/v1/query`, "poll" and its
/// new point within 2 s, a live event in the events view, the rules and the
/// manifest, 360 px to 4K, light and dark, the keyboard; no console error,
/// no failed request. Its screenshots are left in .build/console-screenshots.
@Suite(.serialized, .startsProcesses, .offThePool) struct ConsoleBrowserTests {
    /// The venv's Python with playwright (scripts/test-deps installs it), and Debian's Chromium.
    static func python() throws -> String {
        let python = TestEnv.repoRoot + "/.build/test-venv/bin/python"
        let has = try TestEnv.run(python, ["-c", "import playwright"], timeout: 30)
        guard has.status == 0 else {
            throw TestFailure("no playwright in .build/test-venv: scripts/test-deps installs it (\(has.stderr))")
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium") else {
            throw TestFailure("no /usr/bin/chromium: scripts/test-deps installs Debian's chromium")
        }
        return python
    }

    @Test func theConsoleWorksInARealBrowser() throws {
        let python = try Self.python()
        let dir = try TestEnv.tempDir("console")
        let token = "browser-token-0123456789abcdef"
        let tokenFile = dir + "/token"
        let fd = open(tokenFile, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        _ = write(fd, token + "\n", token.utf8.count + 1)
        close(fd)
        let port = try ControlTCPRunTests.freePort()
        // The default manifest, and a remote_write sink whose receiver is
        // away (its row shows its shards, its retries and why).
        try TestEnv.write("""
        include: [\(TestEnv.repoRoot)/manifests/default.yaml]
        sinks:
          central: { type: remote_write, url: "http://127.0.0.1:9/api/v1/write", queue: { batch_send_deadline: 500ms } }
        """, to: dir + "/vigil.yaml")
        let host = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml",
                                                     "--control", "unix:\(dir)/vigil.sock",
                                                     "--control-tcp", "tcp://127.0.0.1:\(port)", "--control-token-file", tokenFile,
                                                     "--for", "600s"],
                                     environment: ["VIGIL_STATE_DIR": dir])
        defer {
            host.signal(SIGTERM)
            _ = host.wait(timeout: 30)
        }
        guard SinkRunTests.waitUntil(20, { (try? Sockets.connect(.tcp(host: "127.0.0.1", port: UInt16(port)))).map { close($0); return true } ?? false }) else {
            throw TestFailure("no console on port \(port): \(host.wait(timeout: 1).stderr)")
        }
        // A few seconds of points to draw.
        Thread.sleep(forTimeInterval: 6)
        let shots = TestEnv.repoRoot + "/.build/console-screenshots"
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        let run = try TestEnv.run(python, [TestEnv.repoRoot + "/Tests/Browser/console_test.py", "http://127.0.0.1:\(port)", token, shots],
                                  timeout: 240)
        #expect(run.status == 0, "\(run.stderr)")
        let last = run.stdout.split(separator: "\n").last.map(String.init) ?? ""
        let report = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any], "\(run.stdout)\n\(run.stderr)")
        let problems = report["problems"] as? [String] ?? ["no report"]
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        #expect((report["checks"] as? Int ?? 0) >= 30, "\(report)")
        for path in report["screenshots"] as? [String] ?? [] {
            #expect(((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0) > 10_000, "\(path)")
        }
        #expect((report["screenshots"] as? [String] ?? []).count >= 10)
    }
}
