import VigilChildProcess
import VigilABI
import Foundation
import Glibc
import Synchronization
import VigilCore

/// A child process that may load a plugin on our behalf (`vigil plugins
/// check`, the plugin probe): this executable run again, told by its
/// arguments what to do, with a pipe for its stream of lines as descriptor 3,
/// its stdout joined to our stderr (so a plugin's printf cannot garble the
/// stream), stdin from /dev/null, default signal dispositions, and no Swift
/// backtracer (a crash must end the child at once, with its signal). Started
/// through `Spawn`, like every child; `follow` is the parent's side of its
/// stream.
package final class ChildProcess: @unchecked Sendable {  // `status` is set and read by the one thread that follows and reaps the child
    /// The child's descriptor for its stream of lines to the parent.
    package static let childFD: Int32 = 3

    let pid: pid_t
    let reader: LineReader
    /// The wait status, once reaped.
    private(set) var status: Int32?

    private init(pid: pid_t, reader: LineReader) {
        self.pid = pid
        self.reader = reader
    }

    /// The longest line taken from a child's stream: room for the largest
    /// plugin description (`PluginDescription.maxJSONBytes`) and the words
    /// around it. A longer line is handed on cut (see `LineReader`).
    static let maxLineBytes = PluginDescription.maxJSONBytes + 65_536

    /// `input`: the child's stdin (the caller keeps its descriptor), else /dev/null.
    package static func spawn(arguments: [String], input: Int32? = nil) throws(SpawnError) -> ChildProcess {
        let program = "/proc/self/exe"
        let stream = try Spawn.pipe(for: program)
        defer { close(stream.write) }
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        let spawn = Spawn(program: program, arguments: [CommandLine.arguments.first ?? "vigil"] + arguments,
                          environment: environment,
                          descriptors: [0: input.map { .parent($0) } ?? .null, 1: .parent(2), 2: .parent(2),
                                        childFD: .parent(stream.write)])
        let pid: pid_t
        do {
            pid = try spawn.start()
        } catch {
            close(stream.read)
            throw error
        }
        let reader = LineReader(fd: stream.read, maxLineBytes: maxLineBytes)
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
    package var signal: Int32? {
        guard let status else { return nil }
        let low = status & 0x7F
        return low != 0 && low != 0x7F ? low : nil
    }

    /// The child's exit code, if it exited.
    package var exitCode: Int32? {
        guard let status, status & 0x7F == 0 else { return nil }
        return (status >> 8) & 0xFF
    }

    /// "SIGSEGV".
    package static func shortSignalName(_ signal: Int32) -> String {
        let names: [Int32: String] = [
            SIGHUP: "SIGHUP", SIGINT: "SIGINT", SIGQUIT: "SIGQUIT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
            SIGABRT: "SIGABRT", SIGBUS: "SIGBUS", SIGFPE: "SIGFPE", SIGKILL: "SIGKILL", SIGUSR1: "SIGUSR1",
            SIGSEGV: "SIGSEGV", SIGUSR2: "SIGUSR2", SIGPIPE: "SIGPIPE", SIGALRM: "SIGALRM", SIGTERM: "SIGTERM",
            SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGSYS: "SIGSYS",
        ]
        return names[signal] ?? "signal \(signal)"
    }

    /// "SIGSEGV (Segmentation fault)".
    package static func signalName(_ signal: Int32) -> String {
        let text = strsignal(signal).map { String(cString: $0) } ?? ""
        return text.isEmpty ? shortSignalName(signal) : "\(shortSignalName(signal)) (\(text))"
    }
}

extension ChildProcess {
    /// What a line of the child's stream meant, to `follow`.
    package enum LineMeaning {
        /// Nothing `follow` needs to know.
        case other
        /// A call into the plugin began and must return by this monotonic time.
        case callBegan(deadline: Int64)
        /// The call in flight returned.
        case callEnded
        /// The child is done and about to leave.
        case done
    }

    /// How `follow` ended.
    package enum Ending {
        /// The child said it was done.
        case done
        /// The stream closed before that.
        case closed
        /// The child exited before either (what it left in the pipe was read).
        case exited
        /// A call passed its deadline; the child was killed.
        case timedOut
        /// The child said nothing for `idleTimeout` outside any call; it was killed.
        case stalled
    }

    /// Follows the child's stream to its end, handing each line to `onLine`:
    /// kills the child when a call passes its deadline, or when it is silent
    /// for `idleTimeout` ns outside any call; once it has exited, reads what
    /// it left in the pipe (or a process it started holds open) for up to a
    /// second. Then reaps it: a child that said it was done is given 2 s to
    /// leave, a killed one nothing, and any other `closeGrace` ns.
    package func follow(idleTimeout: Int64, closeGrace: Int64, onLine: (Substring) -> LineMeaning) -> Ending {
        var deadline: Int64?
        var done = false
        func handle(_ lines: [Substring]) {
            for line in lines {
                switch onLine(line) {
                case .other: break
                case .callBegan(let by): deadline = by
                case .callEnded: deadline = nil
                case .done: done = true
                }
            }
        }
        var lastLine = monotonicNanoseconds()
        var ending: Ending
        while true {
            let (lines, closed) = reader.take()
            if !lines.isEmpty { lastLine = monotonicNanoseconds() }
            handle(lines)
            if done || closed {
                ending = done ? .done : .closed
                break
            }
            let now = monotonicNanoseconds()
            if let deadline, now > deadline {
                kill()
                ending = .timedOut
                break
            }
            if deadline == nil && now - lastLine > idleTimeout {
                kill()
                ending = .stalled
                break
            }
            if poll() {
                let until = monotonicNanoseconds() + 1_000_000_000
                while monotonicNanoseconds() < until {
                    let (more, closed) = reader.take()
                    handle(more)
                    if closed || done { break }
                    _ = reader.arrived.wait(timeout: .now() + .milliseconds(20))
                }
                ending = done ? .done : .exited
                break
            }
            let remaining = deadline.map { $0 - now } ?? (lastLine + idleTimeout - now)
            let wait = max(1_000_000, min(remaining, 50_000_000))
            _ = reader.arrived.wait(timeout: .now() + .nanoseconds(Int(wait)))
        }
        let killed = ending == .timedOut || ending == .stalled
        reap(grace: done ? 2_000_000_000 : killed ? 0 : closeGrace)
        return ending
    }
}

/// Reads the child's pipe on a thread of its own and hands over whole lines.
/// A line longer than `maxLineBytes` is handed over cut to `maxLineBytes + 1`
/// bytes, so that whoever reads it can tell it was too long; the rest of it
/// is dropped as it arrives, so a child cannot make this process hold more.
package final class LineReader: Sendable {
    private let fd: Int32
    private let maxLineBytes: Int
    private let state = Mutex<(lines: [Substring], eof: Bool)>(([], false))
    let arrived = DispatchSemaphore(value: 0)

    init(fd: Int32, maxLineBytes: Int) {
        self.fd = fd
        self.maxLineBytes = maxLineBytes
    }

    func start() {
        Thread.detachNewThread { [self] in
            var pending: [UInt8] = []
            func keep(_ part: ArraySlice<UInt8>) {
                pending += part.prefix(maxLineBytes + 1 - pending.count)
            }
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                var complete: [Substring] = []
                var start = 0
                while let newline = buffer[start..<n].firstIndex(of: UInt8(ascii: "\n")) {
                    keep(buffer[start..<newline])
                    complete.append(Substring(String(decoding: pending, as: UTF8.self)))
                    pending.removeAll(keepingCapacity: true)
                    start = newline + 1
                }
                keep(buffer[start..<n])
                guard !complete.isEmpty else { continue }
                state.withLock { $0.lines += complete }
                arrived.signal()
            }
            if !pending.isEmpty {
                let text = String(decoding: pending, as: UTF8.self)
                state.withLock { $0.lines.append(Substring(text)) }
            }
            close(fd)
            state.withLock { $0.eof = true }
            arrived.signal()
        }
    }

    /// The lines read so far (taken), and whether the pipe is closed.
    func take() -> ([Substring], Bool) {
        state.withLock { state in
            defer { state.lines.removeAll() }
            return (state.lines, state.eof)
        }
    }
}
