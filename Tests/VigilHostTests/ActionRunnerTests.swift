import Foundation
import Logging
import Synchronization
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The runner of rules' exec actions, against real child processes: small
/// `#!/bin/sh` programs written into a temp dir (the runner itself never uses
/// a shell; a script is just a program to it).
@Suite struct ActionRunnerTests {
    typealias Action = ActionRunner.Action

    // MARK: what reaches the child

    @Test func stdinAndEnvironmentArriveIntact() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, """
            cat > "$OUT/stdin"
            printf '%s|%s|%s' "$VIGIL_RULE" "$VIGIL_STATE" "$HOME" > "$OUT/env"
            echo done
            """)
        let (runner, log) = Self.runner()
        let json = #"{"rule":"hot and low","state":"active","fields":{"temp":91.5,"note":"ü \"x\""}}"# + "\n"
        let outcome = runner.run(key: "hot", action: Action(argv: [program]), stdin: Array(json.utf8),
                                 environment: ["OUT": dir, "VIGIL_RULE": "hot and low", "VIGIL_STATE": "active"])
        #expect(outcome == .started)
        #expect(Self.eventually { runner.counters(for: "hot").succeeded == 1 })
        #expect(try String(contentsOfFile: dir + "/stdin", encoding: .utf8) == json)
        // Added variables, and the host's own ones (HOME) are kept.
        let home = ProcessInfo.processInfo.environment["HOME"] ?? ""
        #expect(try String(contentsOfFile: dir + "/env", encoding: .utf8) == "hot and low|active|\(home)")
        let done = log.entries.first { $0.message == "action succeeded" }
        #expect(done?.level == .debug)
        #expect(done?.metadata["stdout"] == "done\n")
        #expect(runner.counters(for: "hot") == Self.counters(started: 1, succeeded: 1))
    }

    @Test func argumentsArePassedVerbatimWithoutAShell() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, #"for a in "$@"; do printf '%s\n' "$a"; done > "$OUT/args""#)
        let (runner, _) = Self.runner()
        let arguments = ["a b; touch \(dir)/pwned", #"it's "quoted""#, "$HOME", "*", "`id`", ""]
        runner.run(key: "r", action: Action(argv: [program] + arguments), stdin: [], environment: ["OUT": dir])
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 })
        let lines = try String(contentsOfFile: dir + "/args", encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.map(String.init) == arguments + [""])
        #expect(!FileManager.default.fileExists(atPath: dir + "/pwned"))
    }

    @Test func aMebibyteOfStdinReachesAReader() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, #"cat > "$OUT/stdin""#)
        let (runner, _) = Self.runner()
        let input = (0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        runner.run(key: "r", action: Action(argv: [program]), stdin: input, environment: ["OUT": dir])
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 })
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/stdin")) == Data(input))
    }

    /// A child that never reads and exits: `run` returns at once, the writer
    /// gets EPIPE (not a SIGPIPE that would end this test process), the run
    /// counts as the child's exit status says.
    @Test func aChildThatNeverReadsABigStdinBlocksNothing() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, "sleep 0.2")
        let (runner, _) = Self.runner()
        let before = ActionRunner.monotonicNow()
        let outcome = runner.run(key: "r", action: Action(argv: [program]), stdin: [UInt8](repeating: 0x41, count: 1 << 20),
                                 environment: [:])
        #expect(outcome == .started)
        #expect(ActionRunner.monotonicNow() - before < 150_000_000)
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 })
    }

    /// The host ignores SIGPIPE (`Runtime.run` does, as this test now does for
    /// the whole test process) and a plugin's thread may block signals; the
    /// child starts with none blocked and SIGPIPE at its default.
    /// (grep is the action itself: a shell would reset its own signal mask.)
    @Test func theChildIsNotBornWithTheHostsIgnoredOrBlockedSignals() throws {
        let (runner, log) = Self.runner()
        signal(SIGPIPE, SIG_IGN)
        var block = sigset_t(), previous = sigset_t()
        sigemptyset(&block)
        sigaddset(&block, SIGUSR2)
        sigaddset(&block, SIGHUP)
        pthread_sigmask(SIG_BLOCK, &block, &previous)
        runner.run(key: "r", action: Action(argv: ["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"]), stdin: [],
                   environment: [:])
        pthread_sigmask(SIG_SETMASK, &previous, nil)
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 })
        let output = try #require(log.entries.first { $0.message == "action succeeded" }?.metadata["stdout"])
        var masks: [String: UInt64] = [:]
        for line in "\(output)".split(separator: "\n") {
            let parts = line.split(separator: ":")
            masks[String(parts[0])] = UInt64(parts[1].trimmingCharacters(in: .whitespaces), radix: 16)
        }
        #expect(masks["SigBlk"] == 0)
        #expect(try #require(masks["SigIgn"]) & (1 << (SIGPIPE - 1)) == 0)
    }

    // MARK: at most one run per key, and a minimum gap

    @Test func aSecondRunWhileTheFirstIsRunningIsSkipped() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, #"while [ ! -e "$1" ]; do sleep 0.01; done"#)
        let (runner, log) = Self.runner()
        let action = Action(argv: [program, dir + "/release"])
        #expect(runner.run(key: "r", action: action, stdin: [], environment: [:]) == .started)
        #expect(runner.run(key: "r", action: action, stdin: [], environment: [:]) == .skippedRunning)
        // Another key is independent.
        #expect(runner.run(key: "other", action: action, stdin: [], environment: [:]) == .started)
        #expect(log.entries.contains { $0.level == .info && $0.message.hasPrefix("action still running") && $0.metadata["rule"] == "r" })
        try TestEnv.write("", to: dir + "/release")
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 && runner.counters(for: "other").succeeded == 1 })
        #expect(runner.counters(for: "r") == Self.counters(started: 1, succeeded: 1, skipped: 1))
        #expect(runner.run(key: "r", action: action, stdin: [], environment: [:]) == .started)
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 2 })
    }

    /// Emitting threads race: for one key exactly one run starts; other keys
    /// run side by side.
    @Test func concurrentRunsStartOncePerKey() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, #"while [ ! -e "$1" ]; do sleep 0.01; done"#)
        let (runner, _) = Self.runner()
        let action = Action(argv: [program, dir + "/release"])
        let outcomes = Mutex<[ActionRunner.Outcome]>([])
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            let outcome = runner.run(key: "same", action: action, stdin: [], environment: [:])
            runner.run(key: "key\(i)", action: action, stdin: [], environment: [:])
            outcomes.withLock { $0.append(outcome) }
        }
        let all = outcomes.withLock { $0 }
        #expect(all.filter { $0 == .started }.count == 1)
        #expect(all.filter { $0 == .skippedRunning }.count == 15)
        try TestEnv.write("", to: dir + "/release")
        #expect(Self.eventually { (0..<16).allSatisfy { runner.counters(for: "key\($0)").succeeded == 1 } })
        #expect(Self.eventually { runner.counters(for: "same") == Self.counters(started: 1, succeeded: 1, skipped: 15) })
    }

    @Test func runsCloserThanTheMinimumGapAreSkipped() throws {
        let now = Atomic<Int64>(1_000_000_000_000)
        let (runner, log) = Self.runner(clock: { now.load(ordering: .relaxed) })
        let action = Action(argv: ["true"], minGap: 60_000_000_000)  // a name looked up in PATH
        #expect(runner.run(key: "r", action: action, stdin: [], environment: [:]) == .started)
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 })
        now.add(59_999_999_999, ordering: .relaxed)
        #expect(runner.run(key: "r", action: action, stdin: [], environment: [:]) == .skippedGap)
        #expect(log.entries.contains { $0.level == .debug && $0.message.contains("minimum gap") })
        now.add(1, ordering: .relaxed)
        #expect(runner.run(key: "r", action: action, stdin: [], environment: [:]) == .started)
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 2 })
        #expect(runner.counters(for: "r") == Self.counters(started: 2, succeeded: 2, skipped: 1))
    }

    // MARK: failures

    @Test func aTimeoutKillsTheProgramAndWhatItStarted() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, """
            sleep 30 &
            echo $! > "$OUT/grandchild"
            wait
            """)
        let (runner, log) = Self.runner()
        let started = ActionRunner.monotonicNow()
        runner.run(key: "r", action: Action(argv: [program], timeout: 300_000_000), stdin: [], environment: ["OUT": dir])
        #expect(Self.eventually { runner.counters(for: "r").timedOut == 1 })
        let elapsed = ActionRunner.monotonicNow() - started
        #expect(elapsed >= 300_000_000 && elapsed < 2_000_000_000)  // SIGTERM was enough: no 2 s grace
        #expect(runner.counters(for: "r") == Self.counters(started: 1, failed: 1, timedOut: 1))
        let grandchild = try #require(Int32(String(contentsOfFile: dir + "/grandchild", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)))
        #expect(Self.eventually { Self.isGone(grandchild) }, "the child's own child (sleep 30) was killed too")
        let line = try #require(log.entries.first { $0.message.contains("timed out") })
        #expect(line.level == .warning)
        #expect(line.metadata["status"] == "signal 15 (SIGTERM)")
    }

    @Test func aProgramIgnoringSIGTERMGetsSIGKILL() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, """
            trap '' TERM
            echo ready > "$OUT/ready"
            while :; do sleep 0.05; done
            """)
        let (runner, _) = Self.runner()
        runner.run(key: "r", action: Action(argv: [program], timeout: 200_000_000), stdin: [], environment: ["OUT": dir])
        #expect(Self.eventually { runner.counters(for: "r").timedOut == 1 })
        #expect(runner.counters(for: "r").failed == 1)
    }

    @Test func aNonZeroExitIsCountedAsFailedAndLogged() throws {
        let dir = try TestEnv.tempDir()
        let program = try Self.script(in: dir, "echo 'battery script: no such device' >&2; exit 3")
        let (runner, log) = Self.runner()
        runner.run(key: "low", action: Action(argv: [program]), stdin: [], environment: [:])
        #expect(Self.eventually { runner.counters(for: "low").failed == 1 })
        #expect(runner.counters(for: "low") == Self.counters(started: 1, failed: 1))
        let line = try #require(log.entries.first { $0.message == "action failed" })
        #expect(line.level == .warning)
        #expect(line.metadata["rule"] == "low")
        #expect(line.metadata["program"] == .string(program))
        #expect(line.metadata["status"] == "exit 3")
        #expect(line.metadata["stderr"] == "battery script: no such device\n")
    }

    @Test func aMissingProgramFailsToStart() throws {
        let dir = try TestEnv.tempDir()
        let (runner, log) = Self.runner()
        let missing = dir + "/no-such-program"
        let outcome = runner.run(key: "r", action: Action(argv: [missing]), stdin: [], environment: [:])
        guard case .failedToStart(let message) = outcome else { Issue.record("\(outcome)"); return }
        #expect(message.contains(missing) && message.contains("No such file"))
        // Not executable: EACCES.
        try TestEnv.write("#!/bin/sh\n", to: dir + "/plain")
        let refused = runner.run(key: "r", action: Action(argv: [dir + "/plain"]), stdin: [], environment: [:])
        guard case .failedToStart(let denied) = refused else { Issue.record("\(refused)"); return }
        #expect(denied.contains("Permission denied"))
        #expect(runner.run(key: "r", action: Action(argv: []), stdin: [], environment: [:])
                == .failedToStart("the action has no program"))
        #expect(runner.counters(for: "r") == Self.counters(failed: 3))
        #expect(log.entries.filter { $0.level == .error }.count == 3)
        // A failed start is not a start: the key is free for the next run.
        #expect(runner.run(key: "r", action: Action(argv: ["true"]), stdin: [], environment: [:]) == .started)
        #expect(Self.eventually { runner.counters(for: "r").succeeded == 1 })
    }

    // MARK: shutdown

    @Test func shutdownWaitsForQuickRunsAndKillsTheRest() throws {
        let dir = try TestEnv.tempDir()
        let quick = try Self.script(in: dir, "sleep 0.1", name: "quick")
        let slow = try Self.script(in: dir, "sleep 30", name: "slow")
        let (runner, log) = Self.runner()
        runner.run(key: "quick", action: Action(argv: [quick]), stdin: [], environment: [:])
        runner.run(key: "slow", action: Action(argv: [slow], timeout: 60_000_000_000), stdin: [], environment: [:])
        let started = ActionRunner.monotonicNow()
        runner.shutdown(timeout: 500_000_000)
        #expect(ActionRunner.monotonicNow() - started < 2_000_000_000)
        // Everything is reaped and counted when shutdown returns.
        #expect(runner.counters(for: "quick") == Self.counters(started: 1, succeeded: 1))
        #expect(runner.counters(for: "slow") == Self.counters(started: 1, failed: 1))
        #expect(log.entries.contains { $0.message == "action failed" && $0.metadata["status"] == "signal 9 (SIGKILL)" })
        #expect(runner.run(key: "quick", action: Action(argv: [quick]), stdin: [], environment: [:])
                == .failedToStart("shutting down"))
    }

    // MARK: helpers

    fileprivate static func runner(clock: @escaping @Sendable () -> Int64 = ActionRunner.monotonicNow) -> (ActionRunner, MemoryLog) {
        let log = MemoryLog()
        let logger = Logger(label: "test") { _ in MemoryLogHandler(log: log) }
        return (ActionRunner(logger: logger, clock: clock), log)
    }

    static func counters(started: Int = 0, succeeded: Int = 0, failed: Int = 0, timedOut: Int = 0,
                         skipped: Int = 0) -> ActionRunner.Counters {
        var c = ActionRunner.Counters()
        c.started = started
        c.succeeded = succeeded
        c.failed = failed
        c.timedOut = timedOut
        c.skipped = skipped
        return c
    }

    /// Writes an executable `#!/bin/sh` program. Written through one
    /// close-on-exec descriptor, so a process spawned meanwhile by another
    /// test cannot hold it open for writing (which makes exec fail with ETXTBSY).
    static func script(in dir: String, _ body: String, name: String = "action") throws -> String {
        let path = dir + "/" + name
        let bytes = Array("#!/bin/sh\n\(body)\n".utf8)
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
        guard fd >= 0 else { throw TestFailure("open \(path): \(errno)") }
        defer { close(fd) }
        guard write(fd, bytes, bytes.count) == bytes.count else { throw TestFailure("write \(path): \(errno)") }
        return path
    }

    /// Polls `condition` every 5 ms until it holds or `timeout` seconds pass.
    static func eventually(timeout: Double = 10, _ condition: () -> Bool) -> Bool {
        let deadline = ActionRunner.monotonicNow() + Int64(timeout * 1e9)
        while ActionRunner.monotonicNow() < deadline {
            if condition() { return true }
            usleep(5_000)
        }
        return condition()
    }

    /// Gone, or a zombie waiting for a reaper that is not ours (an orphan
    /// under a PID 1 that does not reap).
    static func isGone(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(close, offsetBy: 2)] == "Z"
    }
}

/// Log lines kept in memory, for assertions.
final class MemoryLog: Sendable {
    struct Entry: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    private let stored = Mutex<[Entry]>([])
    var entries: [Entry] { stored.withLock { $0 } }
    func append(_ entry: Entry) { stored.withLock { $0.append(entry) } }
}

struct MemoryLogHandler: LogHandler {
    let log: MemoryLog
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        log.append(.init(level: event.level, message: "\(event.message)",
                         metadata: metadata.merging(event.metadata ?? [:]) { _, new in new }))
    }
}
