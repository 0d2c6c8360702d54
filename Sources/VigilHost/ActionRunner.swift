import VigilABI
import Foundation
import Logging
import Synchronization

/// Runs rules' exec actions: one child process per run, never through a shell.
///
/// A run is started (`posix_spawnp`) on the caller's thread (which is a
/// plugin's emitting thread, so `run` does nothing that waits on the child)
/// and then belongs to one supervising thread of its own, which
///
/// - writes the event to the child's stdin (non-blocking, so a child that never
///   reads delays nothing but its own run), then closes it;
/// - keeps the first `captureLimit` bytes of the child's stdout and stderr
///   and discards the rest, so a chatty child never stalls on a full pipe;
/// - waits for the child through a pidfd (`pidfd_open`, Linux 5.3), or where
///   there is none by checking `waitid(WNOHANG)` every 10 ms, and never with
///   `waitpid(-1)` or a SIGCHLD handler: the host has other children;
/// - past the action's timeout sends SIGTERM to the child's process group,
///   and SIGKILL 2 s later;
/// - reaps the child, counts the outcome and logs it.
///
/// The child is started through `Spawn` in a process group of its own (so a
/// timeout or `shutdown` also ends what it started), with an empty signal
/// mask and every signal at its default disposition, whatever the host
/// ignores or blocks. Its stdin, stdout and stderr are pipes; it inherits no
/// other descriptor of the runner's (they are all close-on-exec).
///
/// SIGPIPE: the host ignores it (`Runtime.run`), but the runner does not rely
/// on that; its supervising threads block SIGPIPE, so a child that exits
/// without reading its stdin costs an EPIPE, never the host.
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

        let child: Child
        do {
            child = try Child.spawn(argv: action.argv, environment: environment)
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
        let supervisor = Thread { [self] in supervise(child, key: key, action: action, stdin: stdin) }
        supervisor.name = "vigil-action"
        supervisor.start()
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

    private func supervise(_ child: Child, key: String, action: Action, stdin: [UInt8]) {
        Child.blockSIGPIPE()
        var input = stdin[...]
        var stdinFD = child.stdin
        if input.isEmpty { close(stdinFD); stdinFD = -1 }
        var outputs = [Capture(fd: child.stdout), Capture(fd: child.stderr)]
        let pidfd = Child.pidfdOpen(child.pid)
        defer { if pidfd >= 0 { close(pidfd) } }

        let started = monotonicNanoseconds()
        let (deadline, overflow) = started.addingReportingOverflow(action.timeout)
        var termAt = action.timeout > 0 && !overflow ? deadline : Int64.max
        var killAt = Int64.max
        var timedOut = false

        while true {
            var fds: [pollfd] = []
            if pidfd >= 0 { fds.append(pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)) }
            if stdinFD >= 0 { fds.append(pollfd(fd: stdinFD, events: Int16(POLLOUT), revents: 0)) }
            for output in outputs where output.fd >= 0 { fds.append(pollfd(fd: output.fd, events: Int16(POLLIN), revents: 0)) }
            var wait = min(termAt, killAt) == .max ? Int64.max : min(termAt, killAt) - monotonicNanoseconds()
            if pidfd < 0 { wait = min(wait, 10_000_000) }
            let ms: Int32 = wait == .max ? -1 : Int32(clamping: max(0, wait / 1_000_000 + 1))
            let ready = poll(&fds, nfds_t(fds.count), ms)
            if ready < 0 && errno != EINTR { usleep(10_000) }

            if stdinFD >= 0, Self.writeSome(stdinFD, &input) {
                close(stdinFD)
                stdinFD = -1
            }
            for i in outputs.indices { outputs[i].readAvailable() }
            if Self.hasExited(child.pid) { break }

            let after = monotonicNanoseconds()
            if after >= termAt {
                timedOut = true
                termAt = .max
                killAt = after + Self.killGrace
                kill(-child.pid, SIGTERM)
            } else if after >= killAt {
                killAt = .max
                kill(-child.pid, SIGKILL)
            }
        }

        // The child is a zombie: its pid (and so its process group's id) is
        // not reused before it is reaped, so signalling it stays safe until then.
        state.withLock { $0.children[child.pid] = true }
        if timedOut { kill(-child.pid, SIGKILL) }
        if stdinFD >= 0 { close(stdinFD) }
        for i in outputs.indices { outputs[i].finish() }
        var raw: Int32 = 0
        var reaped: pid_t
        repeat { reaped = waitpid(child.pid, &raw, 0) } while reaped < 0 && errno == EINTR
        // Only if the host set SIGCHLD to SIG_IGN (then the kernel reaps, and the status is lost).
        let status = reaped == child.pid ? Self.describe(raw) : "unknown (reaped by the kernel)"
        let succeeded = !timedOut && reaped == child.pid && raw == 0

        state.withLock { state in
            state.children[child.pid] = nil
            guard var entry = state.keys[key] else { return }
            entry.running = nil
            if succeeded { entry.counters.succeeded += 1 } else { entry.counters.failed += 1 }
            if timedOut { entry.counters.timedOut += 1 }
            state.keys[key] = entry
        }

        var metadata: Logger.Metadata = ["rule": "\(key)", "program": "\(action.argv[0])", "status": "\(status)",
                                         "ms": "\((monotonicNanoseconds() - started) / 1_000_000)"]
        if !outputs[0].text.isEmpty { metadata["stdout"] = "\(outputs[0].text)" }
        if !outputs[1].text.isEmpty { metadata["stderr"] = "\(outputs[1].text)" }
        if succeeded {
            logger.debug("action succeeded", metadata: metadata)
        } else if timedOut {
            metadata["timeout_ms"] = "\(action.timeout / 1_000_000)"
            logger.warning("action timed out and was killed", metadata: metadata)
        } else {
            logger.warning("action failed", metadata: metadata)
        }
    }

    /// Whether `pid` has exited, without reaping it.
    private static func hasExited(_ pid: pid_t) -> Bool {
        var info = siginfo_t()
        let r = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT)
        // ECHILD would mean it was reaped elsewhere; nothing is left to wait for.
        if r < 0 { return errno == ECHILD }
        return info._sifields._sigchld.si_pid == pid
    }

    /// Writes what the pipe takes now. True when there is nothing left to
    /// write or the child closed its end (EPIPE).
    private static func writeSome(_ fd: Int32, _ input: inout ArraySlice<UInt8>) -> Bool {
        while !input.isEmpty {
            let n = input.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
            if n > 0 { input = input.dropFirst(n); continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return false }
            Child.consumePendingSIGPIPE()
            return true
        }
        return true
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

/// The first `ActionRunner.captureLimit` bytes of one of a child's outputs.
private struct Capture {
    var fd: Int32
    var bytes: [UInt8] = []

    var text: String { String(decoding: bytes, as: UTF8.self) }

    /// Reads what is there without blocking; closes the pipe at end of file.
    mutating func readAvailable() {
        guard fd >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n > 0 {
                let room = ActionRunner.captureLimit - bytes.count
                if room > 0 { bytes.append(contentsOf: buffer[0..<min(n, room)]) }
                continue
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            close(fd)
            fd = -1
            return
        }
    }

    /// After the child exited: keeps what it left in the pipe and closes it,
    /// even if something the child started still holds the other end.
    mutating func finish() {
        readAvailable()
        if fd >= 0 { close(fd); fd = -1 }
    }
}

/// A spawned child and the runner's ends of its pipes (all close-on-exec,
/// stdin's non-blocking, so the supervisor never waits on one of them).
private struct Child: Sendable {
    var pid: pid_t
    var stdin: Int32
    var stdout: Int32
    var stderr: Int32

    /// Starts `argv` with the host's environment, `environment` added to it
    /// (and overriding it): through `Spawn`, `argv[0]` looked up in PATH, in
    /// a process group of its own.
    static func spawn(argv: [String], environment: [String: String]) throws(SpawnError) -> Child {
        let program = argv.first ?? ""
        guard !program.isEmpty else { throw SpawnError(program: program, step: .spawn, code: ENOENT) }
        var opened: [Int32] = []
        defer { for fd in opened { close(fd) } }
        var pipes: [(read: Int32, write: Int32)] = []
        for _ in 0..<3 {
            let ends = try Spawn.pipe(for: program)
            opened += [ends.read, ends.write]
            pipes.append(ends)
        }
        // The runner's ends: stdin's write end, the outputs' read ends.
        let mine = [pipes[0].write, pipes[1].read, pipes[2].read]
        for fd in mine { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let spawn = Spawn(program: program, searchPath: true, arguments: argv,
                          environment: ProcessInfo.processInfo.environment.merging(environment) { _, new in new },
                          descriptors: [0: .parent(pipes[0].read), 1: .parent(pipes[1].write), 2: .parent(pipes[2].write)],
                          newProcessGroup: true)
        let pid = try spawn.start()
        // Keep the runner's ends open; the deferred close takes the child's.
        opened = [pipes[0].read, pipes[1].write, pipes[2].write]
        return Child(pid: pid, stdin: mine[0], stdout: mine[1], stderr: mine[2])
    }

    /// Blocks SIGPIPE on the calling thread, so a write to a pipe whose
    /// reader is gone fails with EPIPE instead of raising the signal.
    static func blockSIGPIPE() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Takes the SIGPIPE an EPIPE left pending on this thread (it is blocked
    /// here), so it is never delivered later.
    static func consumePendingSIGPIPE() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        while sigtimedwait(&set, nil, &zero) < 0 && errno == EINTR {}
    }

    /// pidfd_open(2) through syscall(2) (Glibc before 2.36 has no wrapper and
    /// Swift cannot call the variadic syscall()); -1 where the kernel has none.
    static func pidfdOpen(_ pid: pid_t) -> Int32 {
        guard let call = syscallFunction else { return -1 }
        // SYS_pidfd_open on every architecture; a pidfd is always close-on-exec.
        return Int32(truncatingIfNeeded: call(434, Int(pid), 0))
    }

    /// syscall(2) with three integer arguments, through a fixed prototype:
    /// sound where integer arguments travel in the same registers either way
    /// (the x86-64 and AArch64 Linux ABIs).
    private typealias SyscallFunction = @convention(c) (Int, Int, Int) -> Int
    private static let syscallFunction: SyscallFunction? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syscall") else { return nil }  // RTLD_DEFAULT
        return unsafeBitCast(symbol, to: SyscallFunction.self)
    }()
}
