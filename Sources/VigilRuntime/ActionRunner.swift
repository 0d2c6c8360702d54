import VigilChildProcess
import Foundation
import Logging
import Synchronization
import VigilABI
import VigilIsolation
import VigilSinks

/// Runs rules' exec actions: one child process per run, never through a shell.
///
/// A run is started (`ChildRun.spawn`) on the caller's thread (which is a
/// plugin's emitting thread, so `run` does nothing that waits on the child)
/// and then belongs to one supervising thread of its own, which feeds the
/// child its stdin, keeps the first `captureLimit` bytes of its stdout and
/// stderr, ends its process group past the action's timeout (SIGTERM, then
/// SIGKILL 2 s later) and reaps it (`ChildRun.supervise`), then counts
/// the outcome and logs it.
///
/// Counting: `failed` counts every run that did not end with exit status 0,
/// including programs that could not be started and runs that timed out;
/// `timedOut` says how many of those failures were timeouts. So once nothing
/// is running, `succeeded + failed == started + (spawn failures)`.
public final class ActionRunner: Sendable {
    public struct Action: Sendable, Equatable {
        /// The program and its arguments, passed as they are: no shell, no
        /// splitting, no expansion. `argv[0]` is a path, or a name looked up in
        /// the host's PATH (`posix_spawnp`).
        public var argv: [String]
        /// Nanoseconds a run may take; past it the child's process group gets
        /// SIGTERM, then SIGKILL 2 s later.
        public var timeout: Int64
        /// Nanoseconds between the starts of two runs for one key.
        public var minGap: Int64

        public init(argv: [String], timeout: Int64 = 10_000_000_000, minGap: Int64 = 0) {
            self.argv = argv
            self.timeout = timeout
            self.minGap = minGap
        }
    }

    /// What `run` did.
    public enum Outcome: Sendable, Equatable {
        /// A child is running; its end is counted and logged later.
        case started
        /// Nothing: the last run for this key has not ended yet.
        case skippedRunning
        /// Nothing: the last run for this key started less than `minGap` ago.
        case skippedGap
        /// The program could not be started (or the runner is shutting down);
        /// the message names the program and the reason.
        case failedToStart(String)
    }

    /// Per key, since the runner was made. See the type's documentation for
    /// how a run is counted.
    public struct Counters: Sendable, Equatable {
        public var started = 0, succeeded = 0, failed = 0, timedOut = 0, skipped = 0
        public init() {}
    }

    /// How much of each of stdout and stderr a run keeps for the log.
    public static let captureLimit = 4096
    /// Between SIGTERM and SIGKILL when a run times out.
    static let killGrace: Int64 = 2_000_000_000

    private struct KeyState {
        var counters = Counters()
        var running: pid_t?
        var lastStart: Int64?
    }

    private struct State {
        var keys: [String: KeyState] = [:]
        /// Children not yet reaped, and whether each has exited (a zombie:
        /// its pid cannot be reused yet, so signalling it is still safe).
        var children: [pid_t: Bool] = [:]
        /// Runs between their check in `run` and the end of their spawn.
        var spawning = 0
        var shuttingDown = false
        /// Set once `shutdown` has stopped waiting: a child whose spawn ends
        /// after that is killed at once.
        var killing = false
    }

    private let state = Mutex(State())
    private let logger: Logger
    private let clock: @Sendable () -> Int64

    /// - Parameters:
    ///   - clock: monotonic nanoseconds, for `minGap` (tests inject one).
    ///     Timeouts govern real processes and use the real monotonic clock.
    public init(logger: Logger, clock: @escaping @Sendable () -> Int64 = ActionRunner.monotonicNow) {
        self.logger = logger
        self.clock = clock
    }

    public static func monotonicNow() -> Int64 { monotonicNanoseconds() }

    /// Starts `action` for `key` (the rule's name) unless one is still running
    /// for that key or the last start was less than `minGap` ago. Returns at
    /// once: the child is supervised on a thread of its own.
    ///
    /// `stdin` is written to the child's stdin (then closed); `environment` is
    /// added to (and overrides) the host's environment.
    @discardableResult
    public func run(key: String, action: Action, stdin: [UInt8], environment: [String: String]) -> Outcome {
        let program = action.argv.first ?? ""
        let now = clock()
        let refused: Outcome? = state.withLock { state in
            if state.shuttingDown { return .failedToStart("shutting down") }
            var entry = state.keys[key, default: KeyState()]
            defer { state.keys[key] = entry }
            if entry.running != nil {
                entry.counters.skipped += 1
                return .skippedRunning
            }
            if let last = entry.lastStart, now - last < action.minGap {
                entry.counters.skipped += 1
                return .skippedGap
            }
            // Reserved until the spawn succeeds or fails, so a concurrent run
            // for this key is skipped rather than started twice.
            entry.running = 0
            state.spawning += 1
            return nil
        }
        switch refused {
        case .skippedRunning?:
            logger.info("action still running; not started again", metadata: ["rule": "\(key)", "program": "\(program)"])
            return .skippedRunning
        case .skippedGap?:
            logger.debug("action ran less than its minimum gap ago; not started",
                         metadata: ["rule": "\(key)", "program": "\(program)"])
            return .skippedGap
        case let outcome?:
            return outcome
        case nil:
            break
        }

        let child: ChildRun
        do {
            child = try ChildRun.spawn(argv: action.argv,
                                       environment: ProcessInfo.processInfo.environment.merging(environment) { _, new in new })
        } catch {
            let message = program.isEmpty ? "the action has no program" : "could not start \(error)"
            state.withLock { state in
                state.spawning -= 1
                state.keys[key]?.running = nil
                state.keys[key]?.counters.failed += 1
            }
            logger.error("action failed to start", metadata: ["rule": "\(key)", "error": "\(message)"])
            return .failedToStart(message)
        }
        state.withLock { state in
            state.spawning -= 1
            if state.killing { kill(-child.pid, SIGKILL) }
            state.keys[key]?.running = child.pid
            state.keys[key]?.lastStart = now
            state.keys[key]?.counters.started += 1
            state.children[child.pid] = false
        }
        startHostThread(named: "vigil-action") { [self] in supervise(child, key: key, action: action, stdin: stdin) }
        return .started
    }

    public func counters(for key: String) -> Counters {
        state.withLock { $0.keys[key]?.counters ?? Counters() }
    }

    /// Waits up to `timeout` ns for running children, then kills what is left
    /// (SIGKILL to each child's process group) and reaps it. Later `run` calls
    /// return `failedToStart("shutting down")`.
    public func shutdown(timeout: Int64) {
        state.withLock { $0.shuttingDown = true }
        let deadline = monotonicNanoseconds() + max(timeout, 0)
        while !isIdle, monotonicNanoseconds() < deadline { usleep(5_000) }
        let killed = state.withLock { state in
            state.killing = true
            let left = state.children.filter { !$0.value }.map(\.key)
            for pid in left { kill(-pid, SIGKILL) }
            return left.count
        }
        if killed > 0 { logger.warning("killed actions still running at shutdown", metadata: ["count": "\(killed)"]) }
        // SIGKILL cannot be refused; only a child stuck in the kernel could
        // outlast this, and then it is left to the supervisor.
        let reapDeadline = monotonicNanoseconds() + 5_000_000_000
        while !isIdle, monotonicNanoseconds() < reapDeadline { usleep(2_000) }
    }

    private var isIdle: Bool { state.withLock { $0.children.isEmpty && $0.spawning == 0 } }

    // MARK: supervision

    /// On the run's own thread: the child to its end (`ChildRun.supervise`),
    /// then the count and the log line.
    private func supervise(_ child: ChildRun, key: String, action: Action, stdin: [UInt8]) {
        let started = monotonicNanoseconds()
        // The child is a zombie when `exited` runs: `shutdown` may still
        // signal its group until it is reaped.
        let ending = child.supervise(input: stdin, timeout: action.timeout, killGrace: Self.killGrace,
                                     captureLimit: Self.captureLimit) {
            state.withLock { $0.children[child.pid] = true }
        }
        let timedOut = ending.timedOut
        let status = ending.status.map(Self.describe) ?? "unknown (reaped by the kernel)"
        let succeeded = !timedOut && ending.status == 0

        var metadata: Logger.Metadata = ["rule": "\(key)", "program": "\(action.argv[0])", "status": "\(status)",
                                         "ms": "\((monotonicNanoseconds() - started) / 1_000_000)"]
        if !ending.stdout.isEmpty { metadata["stdout"] = "\(String(decoding: ending.stdout, as: UTF8.self))" }
        if !ending.stderr.isEmpty { metadata["stderr"] = "\(String(decoding: ending.stderr, as: UTF8.self))" }
        if succeeded {
            logger.debug("action succeeded", metadata: metadata)
        } else if timedOut {
            metadata["timeout_ms"] = "\(action.timeout / 1_000_000)"
            logger.warning("action timed out and was killed", metadata: metadata)
        } else {
            logger.warning("action failed", metadata: metadata)
        }

        // Counted after the line is written: whoever sees the count finds it.
        state.withLock { state in
            state.children[child.pid] = nil
            guard var entry = state.keys[key] else { return }
            entry.running = nil
            if succeeded { entry.counters.succeeded += 1 } else { entry.counters.failed += 1 }
            if timedOut { entry.counters.timedOut += 1 }
            state.keys[key] = entry
        }
    }

    /// `exit 3`, `signal 9 (SIGKILL)`.
    static func describe(_ raw: Int32) -> String {
        let signal = raw & 0x7f
        if signal == 0 { return "exit \((raw >> 8) & 0xff)" }
        let names: [Int32: String] = [SIGKILL: "SIGKILL", SIGTERM: "SIGTERM", SIGINT: "SIGINT", SIGHUP: "SIGHUP",
                                      SIGPIPE: "SIGPIPE", SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT"]
        return names[signal].map { "signal \(signal) (\($0))" } ?? "signal \(signal)"
    }
}
