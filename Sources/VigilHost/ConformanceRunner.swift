import Foundation
import Glibc
import VigilABI
import VigilCore

/// `vigil plugins check`, the parent's side: resolves the plugin as
/// `describe` does, runs the checks in a child process (this executable
/// again, told so by `childArguments`) and turns the child's stream of lines
/// (`ConformanceProtocol`) into a report, enforcing a deadline on every call
/// into the plugin. A plugin that crashes or hangs kills the child, never
/// this process, and the report names the signal or the deadline, and the
/// call it happened in.
public enum ConformanceRunner {
    /// The child's descriptor for the protocol stream.
    public static let childFD: Int32 = 3

    /// Exit statuses: all checks passed (skips allowed), some failed, the
    /// plugin could not be checked at all.
    public static let passed: Int32 = 0, failed: Int32 = 1, notChecked: Int32 = 2

    /// Runs the checks and writes the report through `report`, one line per
    /// call; refusals go through `error`. `childArguments` gives the child's
    /// arguments (after the executable) for the resolved path and, when a name
    /// was given, the name the plugin must have. Returns the exit status.
    public static func run(reference: String, catalog: PluginCatalog, timeout: Int64,
                           childArguments: (_ path: String, _ expectedName: String?) -> [String],
                           report: @escaping (String) -> Void, error: (String) -> Void) -> Int32 {
        let isPath = reference.contains("/") || reference.hasSuffix(".so")
        let path: String
        if isPath {
            path = reference
        } else if let found = catalog.locate(reference) {
            path = found
        } else {
            error("vigil: " + PluginRefusal(path: reference, reason:
                "no plugin named '\(reference)' in \(catalog.directories.joined(separator: ", "))").description)
            return notChecked
        }
        let child: ChildProcess
        do {
            child = try ChildProcess.spawn(arguments: childArguments(path, isPath ? nil : reference))
        } catch let failure {
            error("vigil: cannot start the checker process: \(failure)")
            return notChecked
        }
        var state = ReportState(path: path, timeout: timeout, report: report)
        report("Checking \(path)")
        return state.follow(child, error: error)
    }
}

/// The child: this executable, with the protocol pipe as descriptor 3, its
/// stdout joined to our stderr (so a plugin's printf cannot garble the
/// report), stdin from /dev/null, default signal dispositions, and no Swift
/// backtracer (a crash must end the child at once, with its signal).
final class ChildProcess: @unchecked Sendable {
    struct SpawnError: Error, CustomStringConvertible {
        var description: String
    }

    let pid: pid_t
    let reader: LineReader
    /// The wait status, once reaped.
    private(set) var status: Int32?

    private init(pid: pid_t, reader: LineReader) {
        self.pid = pid
        self.reader = reader
    }

    static func spawn(arguments: [String]) throws -> ChildProcess {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw SpawnError(description: "pipe: \(String(cString: strerror(errno)))") }
        // Both ends close-on-exec (the child gets the write end as descriptor 3
        // through dup2, which clears the flag), and clear of 0…3, which the file
        // actions rewire.
        let readEnd = fcntl(fds[0], F_DUPFD_CLOEXEC, 10)
        let writeEnd = fcntl(fds[1], F_DUPFD_CLOEXEC, 10)
        close(fds[0])
        close(fds[1])
        guard readEnd >= 0, writeEnd >= 0 else {
            let why = String(cString: strerror(errno))
            if readEnd >= 0 { close(readEnd) }
            if writeEnd >= 0 { close(writeEnd) }
            throw SpawnError(description: "fcntl: \(why)")
        }
        defer { close(writeEnd) }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, 2, 1)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, ConformanceRunner.childFD)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigfillset(&defaults)
        sigdelset(&defaults, SIGKILL)
        sigdelset(&defaults, SIGSTOP)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        let argv = ([CommandLine.arguments.first ?? "vigil"] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, "/proc/self/exe", &actions, &attributes, argv, envp)
        guard rc == 0 else {
            close(readEnd)
            throw SpawnError(description: "posix_spawn /proc/self/exe: \(String(cString: strerror(rc)))")
        }
        let reader = LineReader(fd: readEnd)
        reader.start()
        return ChildProcess(pid: pid, reader: reader)
    }

    /// Reaps the child if it has exited; true when it has.
    func poll() -> Bool {
        if status != nil { return true }
        var s: Int32 = 0
        let r = waitpid(pid, &s, WNOHANG)
        if r == pid { status = s }
        return status != nil
    }

    /// Waits for the child to exit, killing it after `grace` nanoseconds.
    func reap(grace: Int64) {
        let deadline = monotonicNanoseconds() + grace
        while !poll() {
            if monotonicNanoseconds() >= deadline {
                kill()
                break
            }
            usleep(5_000)
        }
        while status == nil {
            var s: Int32 = 0
            let r = waitpid(pid, &s, 0)
            if r == pid { status = s } else if r < 0 && errno != EINTR { status = 0; break }
        }
    }

    func kill() {
        if status == nil { _ = Glibc.kill(pid, SIGKILL) }
    }

    /// The signal that ended the child, if one did.
    var signal: Int32? {
        guard let status else { return nil }
        let low = status & 0x7F
        return low != 0 && low != 0x7F ? low : nil
    }

    /// The child's exit code, if it exited.
    var exitCode: Int32? {
        guard let status, status & 0x7F == 0 else { return nil }
        return (status >> 8) & 0xFF
    }
}

/// Reads the protocol pipe on a thread of its own and hands over whole lines.
final class LineReader: @unchecked Sendable {
    private let fd: Int32
    private let lock = NSLockish()
    private var lines: [Substring] = []
    private var eof = false
    let arrived = DispatchSemaphore(value: 0)

    init(fd: Int32) { self.fd = fd }

    func start() {
        Thread.detachNewThread { [self] in
            var pending: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                pending += buffer[0..<n]
                guard let last = pending.lastIndex(of: UInt8(ascii: "\n")) else { continue }
                let text = String(decoding: pending[..<last], as: UTF8.self)
                pending.removeSubrange(...last)
                lock.withLock { lines += text.split(separator: "\n", omittingEmptySubsequences: false) }
                arrived.signal()
            }
            if !pending.isEmpty {
                let text = String(decoding: pending, as: UTF8.self)
                lock.withLock { lines.append(Substring(text)) }
            }
            close(fd)
            lock.withLock { eof = true }
            arrived.signal()
        }
    }

    /// The lines read so far (taken), and whether the pipe is closed.
    func take() -> ([Substring], Bool) {
        lock.withLock {
            defer { lines.removeAll() }
            return (lines, eof)
        }
    }
}

/// What the child said so far, and the report being written.
struct ReportState {
    let path: String
    let timeout: Int64
    let report: (String) -> Void

    var step: String?
    var inFlight: (call: String, instance: String, since: Int64)?
    var lastEnded: (call: String, instance: String)?
    var lastLine = monotonicNanoseconds()
    var refused: String?
    var unusable: String?
    var done = false
    var passed = 0, failed = 0, skipped = 0
    /// Per instance ("-" for load), the calls in order with their times.
    var timings: [(instance: String, calls: [String])] = []

    init(path: String, timeout: Int64, report: @escaping (String) -> Void) {
        self.path = path
        self.timeout = timeout
        self.report = report
    }

    static let nameWidth = 30

    func row(_ verdict: String, _ name: String, _ detail: String) {
        let padded = name.count >= Self.nameWidth ? name : name + String(repeating: " ", count: Self.nameWidth - name.count)
        report("  \(verdict)  \(padded)  \(detail)".trimmingTrailingSpaces())
    }

    mutating func timing(_ instance: String, _ entry: String) {
        if let i = timings.firstIndex(where: { $0.instance == instance }) {
            timings[i].calls.append(entry)
        } else {
            timings.append((instance, [entry]))
        }
    }

    static func ms(_ ns: Int64) -> String { String(format: "%.3f", Double(ns) / 1e6) }

    mutating func handle(_ line: Substring) {
        let f = ConformanceProtocol.split(line)
        func field(_ i: Int) -> String { i < f.count ? f[i] : "" }
        switch field(0) {
        case "plugin":
            report("  plugin \(field(1)) \(field(2)), ABI \(field(3)), \(field(4))")
        case "step":
            step = field(1)
        case "begin":
            inFlight = (field(1), field(2), monotonicNanoseconds())
        case "end":
            inFlight = nil
            lastEnded = (field(1), field(2))
            let ns = Int64(field(3)) ?? 0
            let status = field(4)
            timing(field(2), "\(field(1)) \(Self.ms(ns))" + (status == "VIGIL_OK" || field(1) == "load" ? "" : " (\(status))"))
        case "check":
            switch field(2) {
            case "pass": passed += 1; row("PASS", field(1), field(3))
            case "fail": failed += 1; row("FAIL", field(1), field(3))
            case "skip": skipped += 1; row("SKIP", field(1), field(3))
            default: row("INFO", field(1), field(3))
            }
        case "refused": refused = field(1)
        case "unusable": unusable = field(1)
        case "done": done = true
        default: break  // a line from a newer vigil, or a torn last line: ignored
        }
    }

    /// "poll of instance a", "load (dlopen and the entry point)".
    static func describe(call: String, instance: String) -> String {
        if instance == "-" { return call == "load" ? "load (dlopen and vigil_plugin_entry)" : call }
        return "\(call) of instance \(instance)"
    }

    /// Follows the child to its end; returns the exit status.
    mutating func follow(_ child: ChildProcess, error: (String) -> Void) -> Int32 {
        // Outside calls the child only waits briefly (push plugins, late emits):
        // silence for this long means it is stuck.
        let idleDeadline = timeout + 10_000_000_000
        var timedOut: (call: String, instance: String)?
        var stalled = false
        var eof = false
        while true {
            let (lines, closed) = child.reader.take()
            if !lines.isEmpty { lastLine = monotonicNanoseconds() }
            for line in lines { handle(line) }
            eof = closed
            if done || eof { break }
            let now = monotonicNanoseconds()
            if let call = inFlight, now - call.since > timeout {
                child.kill()
                timedOut = (call.call, call.instance)
                break
            }
            if inFlight == nil && now - lastLine > idleDeadline {
                child.kill()
                stalled = true
                break
            }
            if child.poll() {
                // Exited: what it wrote is still in the pipe, or held open by a
                // process it started; read until closed, briefly.
                let until = monotonicNanoseconds() + 1_000_000_000
                while monotonicNanoseconds() < until {
                    let (more, closed) = child.reader.take()
                    for line in more { handle(line) }
                    if closed || done { break }
                    _ = child.reader.arrived.wait(timeout: .now() + .milliseconds(20))
                }
                break
            }
            let remaining = inFlight.map { $0.since + timeout - now } ?? (lastLine + idleDeadline - now)
            let wait = max(1_000_000, min(remaining, 50_000_000))
            _ = child.reader.arrived.wait(timeout: .now() + .nanoseconds(Int(wait)))
        }
        // After `done` the child leaves at once; give it a moment, then make sure.
        child.reap(grace: done ? 2_000_000_000 : (timedOut != nil || stalled ? 0 : 1_000_000_000))

        if let refused {
            error("vigil: " + PluginRefusal(path: path, reason: refused).description)
            return ConformanceRunner.notChecked
        }
        if let unusable {
            error("vigil: cannot check \(path): \(unusable)")
            return ConformanceRunner.notChecked
        }

        let where_ = step ?? "checker"
        var ended: String?
        if let timedOut {
            ended = "\(Self.describe(call: timedOut.call, instance: timedOut.instance)) did not return within "
                + "\(Units.formatDuration(timeout)) (--timeout); the checker process was killed"
            timing(timedOut.instance, "\(timedOut.call) >\(Self.ms(timeout)) (killed)")
        } else if stalled {
            ended = "the checker process went silent for \(Units.formatDuration(idleDeadline)) outside any plugin call and was killed"
        } else if let signal = child.signal, !(done && signal == SIGKILL) {
            let name = Self.signalName(signal)
            if let call = inFlight {
                ended = "the plugin crashed: \(name) in \(Self.describe(call: call.call, instance: call.instance))"
                timing(call.instance, "\(call.call) (\(Self.shortSignalName(signal)))")
            } else {
                let after = lastEnded.map { "after \(Self.describe(call: $0.call, instance: $0.instance)) returned" }
                ended = "the checker process died from \(name) outside any plugin call ("
                    + [after, done ? "after the checks" : nil, "in a plugin thread?"].compactMap { $0 }.joined(separator: "; ") + ")"
            }
        } else if let code = child.exitCode, code != 0 {
            let during = inFlight.map { " during \(Self.describe(call: $0.call, instance: $0.instance)) (the plugin called exit?)" } ?? ""
            ended = "the checker process exited with status \(code)\(during)"
            if let call = inFlight { timing(call.instance, "\(call.call) (exit \(code))") }
        } else if !done {
            ended = "the checker process ended before the checks were done"
                + (inFlight.map { ", during \(Self.describe(call: $0.call, instance: $0.instance))" } ?? "")
        }
        if let ended {
            failed += 1
            row("FAIL", where_, ended)
            if !done { report("  (the checks after it were not run)") }
        }

        if !timings.isEmpty {
            report("Call timings (ms):")
            let width = max(4, timings.map { $0.instance == "-" ? 4 : $0.instance.count + 9 }.max() ?? 4)
            for (instance, calls) in timings {
                let label = instance == "-" ? "host" : "instance \(instance)"
                report("  " + label + String(repeating: " ", count: max(0, width - label.count)) + "  " + calls.joined(separator: ", "))
            }
        }
        report("\(passed) passed, \(failed) failed" + (skipped > 0 ? ", \(skipped) skipped" : ""))
        return failed > 0 ? ConformanceRunner.failed : ConformanceRunner.passed
    }

    static func shortSignalName(_ signal: Int32) -> String {
        let names: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
            SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGUSR1: "SIGUSR1",
            SIGSEGV: "SIGSEGV", SIGUSR2: "SIGUSR2", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM", SIGTERM: "SIGTERM",
            SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGSYS: "SIGSYS",
        ]
        return names[signal] ?? "signal \(signal)"
    }

    /// "SIGSEGV (Segmentation fault)".
    static func signalName(_ signal: Int32) -> String {
        let text = strsignal(signal).map { String(cString: $0) } ?? ""
        return text.isEmpty ? shortSignalName(signal) : "\(shortSignalName(signal)) (\(text))"
    }
}

private extension String {
    func trimmingTrailingSpaces() -> String {
        var s = self
        while s.last == " " { s.removeLast() }
        return s
    }
}
