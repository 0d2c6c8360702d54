import Foundation
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
@testable import vigil

/// tmux, where PATH has it.
private let tmuxPath: String? = {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    return path.split(separator: ":").map { "\($0)/tmux" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}()

/// `vigil top` on a real terminal: tmux, on a server of the test's own (its
/// own socket, no configuration file), runs top in a detached session of a
/// fixed size against a real `vigil run`. Each session's shell saves the
/// terminal's settings (`stty -g`) before top and prints whether they are
/// the same after it, with top's exit status.
@Suite(.serialized, .startsProcesses, .offThePool, .enabled(if: tmuxPath != nil, "tmux is not on PATH (scripts/test-deps installs it: apt-get install tmux)"))
struct TopRunTests {
    static var tmux: String? { tmuxPath }

    /// A tmux server of the test's own, and the sessions it runs.
    final class Tmux {
        let socket: String

        init(dir: String) { socket = dir + "/tmux.sock" }

        @discardableResult
        func run(_ arguments: [String]) throws -> TestEnv.Output {
            let output = try TestEnv.run(TopRunTests.tmux!, ["-u", "-S", socket, "-f", "/dev/null"] + arguments, timeout: 20)
            guard output.status == 0 else { throw TestFailure("tmux \(arguments.joined(separator: " ")): \(output.stderr)") }
            return output
        }

        /// `vigil top ARGUMENTS` in session `name`, then the verdict line, then a long sleep that keeps the pane.
        func top(_ name: String, _ arguments: [String], columns: Int = 120, rows: Int = 30) throws {
            let command = "s=$(stty -g); '\(TestEnv.vigil)' top \(arguments.map { "'\($0)'" }.joined(separator: " ")); rc=$?; "
                + #"if [ "$(stty -g)" = "$s" ]; then echo "top-exited rc=$rc terminal=restored"; else echo "top-exited rc=$rc terminal=changed"; fi; sleep 600"#
            try run(["new-session", "-d", "-s", name, "-x", "\(columns)", "-y", "\(rows)", command])
        }

        func screen(_ name: String) throws -> [String] {
            try run(["capture-pane", "-p", "-t", name]).stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        }

        func show(_ name: String, _ format: String) throws -> String {
            try run(["display-message", "-p", "-t", name, format]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        }

        /// Waits up to `seconds` for the screen to satisfy `condition`; the last screen seen.
        func waitFor(_ name: String, _ seconds: Double, _ condition: ([String]) -> Bool) throws -> [String] {
            var screen: [String] = []
            _ = SinkRunTests.waitUntil(seconds) {
                screen = (try? self.screen(name)) ?? []
                return condition(screen)
            }
            return screen
        }

        func kill() { _ = try? TestEnv.run(TopRunTests.tmux!, ["-S", socket, "kill-server"], timeout: 10) }
    }

    /// The cells of the row starting with `name`.
    static func row(_ screen: [String], _ name: String) -> [String]? {
        screen.first { $0.hasPrefix(name + " ") }.map { $0.split(separator: " ").map(String.init) }
    }

    /// A child of `parent`, from /proc/PID/stat (the field after the name, which ends at the last ')').
    static func child(of parent: pid_t) -> pid_t? {
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { pid_t($0) } ?? []
        return pids.first { pid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return false }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == parent
        }
    }

    static func exitLine(_ screen: [String]) -> String? { screen.first { $0.hasPrefix("top-exited ") } }

    @Test func showsMonitorsRatesAndSinksQuitsOnQAndGivesTheTerminalBack() throws {
        let host = try ControlRunTests.Host("""
          beat: { plugin: heartbeat, interval: 100ms, isolation: none }
          idle: { plugin: heartbeat, interval: 1h, isolation: none }
        """, sink: "store: { type: null, queue_size: 1000 }", for: "60s")
        let tmux = Tmux(dir: host.dir)
        defer { tmux.kill(); _ = host.stop() }
        try tmux.top("top", ["--control", "unix:" + host.socket])

        // Two answers make a rate: beat polls ten times a second.
        let screen = try tmux.waitFor("top", 15) { screen in
            guard let beat = Self.row(screen, "beat"), beat.count > 2, let rate = Double(beat[2]) else { return false }
            return rate > 0
        }
        let shown = screen.joined(separator: "\n")
        let beat = try #require(Self.row(screen, "beat"), "\(shown)")
        #expect(beat[1] == "running")
        #expect((Double(beat[2]) ?? 0) > 2, "\(shown)")
        let idle = try #require(Self.row(screen, "idle"), "\(shown)")
        #expect(idle[1] == "running")
        #expect(idle[2] == "0.0" || idle[2] == "-", "\(shown)")
        let store = try #require(Self.row(screen, "store"), "\(shown)")
        #expect(store[1] == "null")
        #expect(store[2].hasSuffix("/1000"), "\(shown)")
        #expect(screen[0].hasPrefix("vigil \(vigilVersion) (pid \(host.process.pid))   up "), "\(shown)")
        #expect(screen.contains { $0.hasPrefix("MONITOR  STATE    EVENTS/S") }, "\(shown)")
        #expect(screen.contains { $0.hasPrefix("SINK ") }, "\(shown)")
        #expect(screen.count >= 30 && screen[29].hasPrefix("q: quit"), "\(shown)")
        #expect(try tmux.show("top", "#{alternate_on} #{cursor_flag}") == "1 0")

        // A smaller terminal: top draws again at its size (SIGWINCH).
        try tmux.run(["resize-window", "-t", "top", "-x", "50", "-y", "12"])
        let small = try tmux.waitFor("top", 5) { $0.first?.hasSuffix("…") == true && $0.first?.count == 50 }
        #expect(small.first?.count == 50, "\(small.joined(separator: "\n"))")
        #expect(small.count >= 12 && small[11].hasPrefix("q: quit"), "\(small.joined(separator: "\n"))")

        try tmux.run(["send-keys", "-t", "top", "q"])
        let after = try tmux.waitFor("top", 10) { Self.exitLine($0) != nil }
        #expect(Self.exitLine(after) == "top-exited rc=0 terminal=restored", "\(after.joined(separator: "\n"))")
        #expect(try tmux.show("top", "#{alternate_on} #{cursor_flag}") == "0 1")
        #expect(!after.contains { $0.hasPrefix("MONITOR") }, "the alternate screen is left")
    }

    @Test func anUnreachableHostIsSaidAndRetriedAndCtrlCGivesTheTerminalBack() throws {
        let dir = try TestEnv.tempDir("top")
        let tmux = Tmux(dir: dir)
        defer { tmux.kill() }
        try tmux.top("gone", ["--control", "unix:\(dir)/nothing.sock"], columns: 100, rows: 20)
        let screen = try tmux.waitFor("gone", 15) { $0.first?.hasPrefix("unreachable for ") == true }
        #expect(screen.first?.hasPrefix("unreachable for ") == true, "\(screen.joined(separator: "\n"))")
        #expect(screen.count > 1 && screen[1].contains("cannot reach the control socket unix:\(dir)/nothing.sock"))
        // It keeps asking: the time it has been unreachable grows.
        let later = try tmux.waitFor("gone", 10) { ($0.first ?? "").hasPrefix("unreachable for ") && $0.first != screen.first }
        #expect(later.first != screen.first, "\(later.joined(separator: "\n"))")

        try tmux.run(["send-keys", "-t", "gone", "C-c"])
        let after = try tmux.waitFor("gone", 10) { Self.exitLine($0) != nil }
        #expect(Self.exitLine(after) == "top-exited rc=130 terminal=restored", "\(after.joined(separator: "\n"))")
    }

    /// Over TCP with the host's token; a wrong token is said as the reason top cannot see the host.
    @Test func overTCPWithTheTokenAndRefusedWithAWrongOne() throws {
        let host = try ControlTCPRunTests.Host()
        let tmux = Tmux(dir: host.dir)
        defer { tmux.kill(); _ = host.stop() }
        try tmux.top("tcp", ["--control", host.address, "--token-file", host.tokenFile])
        let screen = try tmux.waitFor("tcp", 15) { Self.row($0, "beat") != nil }
        #expect(Self.row(screen, "beat")?.dropFirst().first == "running", "\(screen.joined(separator: "\n"))")
        #expect(screen.contains { $0.contains("q: quit    \(host.address)") }, "\(screen.joined(separator: "\n"))")
        try tmux.run(["send-keys", "-t", "tcp", "q"])
        #expect(Self.exitLine(try tmux.waitFor("tcp", 10) { Self.exitLine($0) != nil }) == "top-exited rc=0 terminal=restored")

        try tmux.run(["set-environment", "-g", "VIGIL_CONTROL_TOKEN", "not-the-token-0123456789"])
        try tmux.top("wrong", ["--control", host.address])
        let refused = try tmux.waitFor("wrong", 15) { ($0.count > 1 ? $0[1] : "").contains("HTTP 401") }
        #expect(refused.first?.hasPrefix("unreachable for ") == true, "\(refused.joined(separator: "\n"))")
        #expect(refused.count > 1 && refused[1] == "  HTTP 401: the bearer token was not accepted", "\(refused.joined(separator: "\n"))")
        try tmux.run(["send-keys", "-t", "wrong", "q"])
        #expect(Self.exitLine(try tmux.waitFor("wrong", 10) { Self.exitLine($0) != nil }) == "top-exited rc=0 terminal=restored")
    }

    @Test func sigtermGivesTheTerminalBackAndTopNeedsATerminal() throws {
        let dir = try TestEnv.tempDir("top")
        let tmux = Tmux(dir: dir)
        defer { tmux.kill() }
        try tmux.top("term", ["--control", "unix:\(dir)/nothing.sock"], columns: 80, rows: 10)
        _ = try tmux.waitFor("term", 15) { $0.first?.hasPrefix("unreachable") == true }
        let panePid = try tmux.show("term", "#{pane_pid}")
        // The pane's shell's child is top.
        let shell = try #require(pid_t(panePid), "pane_pid '\(panePid)'")
        let top = try #require(Self.child(of: shell), "no child of the pane's shell \(panePid)")
        kill(top, SIGTERM)
        // Long: once, beside other suites' floods, 10 s were not enough.
        let after = try tmux.waitFor("term", 30) { Self.exitLine($0) != nil }
        #expect(Self.exitLine(after) == "top-exited rc=143 terminal=restored", "\(after.joined(separator: "\n"))")

        // Without a terminal top says so, and what to use instead.
        let piped = try TestEnv.run(TestEnv.vigil, ["top", "--control", "unix:\(dir)/nothing.sock"], timeout: 20)
        #expect(piped.status == 2)
        #expect(piped.stderr.contains("vigil top: needs a terminal on stdin and stdout; for one look from a script: vigil ctl status"))
    }
}
