import VigilChildProcess
import CVigilSys
import Foundation
import Glibc
import Synchronization
import VigilABI

/// Where plugin runners come from: forked from one prepared `vigil`, the
/// fork server (`vigil plugins fork-server`, hidden), instead of each being
/// this executable started again.
///
/// Why. A runner started by exec spends about 2 MiB of private memory before
/// it loads its plugin: the dynamic linker's relocations of the Swift
/// runtime and Foundation (their GOT and data pages), and what the runtime
/// initializes. Every runner wrote the same bytes into its own pages. A
/// runner forked from a process that has done all that shares those pages
/// with it and every other runner, copy-on-write, until it writes them; what
/// each runner still owns is what its plugin and its own work touch
/// (docs/isolation.md has the figures). Starting one is also a fork, not an
/// exec and a dynamic link.
///
/// What does not change. A forked runner is the host's child as a started
/// one was (`clone(CLONE_PARENT)`: the host reaps it, gets its SIGCHLD, and
/// its parent-death signal is the host's), leads its own process group,
/// carries its own tag (`RunnerDescendants`; written over a placeholder of
/// the same length, where /proc/PID/environ shows it), has the descriptors
/// `Spawn` would have given it and no others, and shows its own command line
/// in /proc/PID/cmdline. It then runs `PluginRunner` from its first step,
/// as a started runner does: the fork server never loads a plugin, never
/// reads a manifest and holds nothing of the host's, so nothing of one
/// runner reaches another through it. A fault still costs one runner: they
/// share only pages neither has written, and the fork server (which runs no
/// plugin code) is started again if it ends.
///
/// What is shared, and the price. Every runner has the fork server's
/// address-space layout (where each library lies): one runner's plugin
/// learns nothing about another's memory through it that it could use
/// without a second flaw, but the layout is not drawn again for each
/// runner, as Android's zygote and Chromium's accept for the same gain. The
/// fork server must have one thread when it forks (it checks, and refuses);
/// glibc's own `fork` cannot make a sibling, so the child's C library keeps
/// the fork server's thread id in its thread descriptor (see
/// `vigil_fork_sibling`).
///
/// When the fork server cannot serve (it cannot start, it refuses, it does
/// not answer in time, or the runner asks for another environment than the
/// one it was started with), the runner is started by `Spawn` as before,
/// and the host says so once.
public final class RunnerForkServer: Sendable {
    /// The fork server's end of its socket.
    static let socketFD: Int32 = 3
    /// The value the fork server's environment carries where a runner's tag goes.
    static let tagPlaceholder = String(repeating: "0", count: RunnerDescendants.tagLength)
    /// Room in the fork server's own argv for a runner's command line
    /// (`vigil plugins runner PATH --parent PID …`): a runner whose command
    /// is longer shows it cut.
    static let titleRoom = 1024

    /// One per executable (the host's own; tests name theirs).
    private static let servers = Mutex<[String: RunnerForkServer]>([:])

    static func `for`(program: String) -> RunnerForkServer {
        servers.withLock { servers in
            if let server = servers[program] { return server }
            let server = RunnerForkServer(program: program)
            servers[program] = server
            return server
        }
    }

    /// Whether runners are forked at all: `VIGIL_RUNNER_FORK=0` starts each
    /// by exec, as before (to compare, or where a sandbox refuses
    /// CLONE_PARENT).
    static let enabled = ProcessInfo.processInfo.environment["VIGIL_RUNNER_FORK"] != "0"

    private struct Server {
        var pid: pid_t
        var socket: Int32
        /// The environment it was started with, without the tag.
        var environment: [String: String]
    }

    private let program: String
    /// Held for a whole request: the fork server answers one at a time.
    private let state = Mutex<(server: Server?, failures: Int, said: Bool)>((nil, 0, false))

    private init(program: String) { self.program = program }

    /// Starts the runner `spawn` describes (`vigil plugins runner …`, its
    /// tag in `environment`) as a fork of the server; its pid, or nil when
    /// the caller must start it itself.
    func start(_ spawn: Spawn, tag: String) -> pid_t? {
        guard Self.enabled, let request = Self.request(spawn, tag: tag) else { return nil }
        var environment = spawn.environment
        environment[RunnerDescendants.variable] = nil
        return state.withLock { state -> pid_t? in
            // Three failures in a row: this host starts its runners itself.
            guard state.failures < 3 else { return nil }
            if let server = state.server, server.environment != environment {
                // The host's environment changed since the server started: a
                // new one carries the new one.
                stop(server)
                state.server = nil
            }
            do {
                // A server found ended (killed while idle) is started again
                // once before this runner is started without it.
                for attempt in 0..<2 {
                    if state.server == nil { state.server = try launch(environment: environment) }
                    do {
                        let pid = try ask(state.server!, request)
                        state.failures = 0
                        return pid
                    } catch let failure as Failure where failure.ended && attempt == 0 {
                        stop(state.server!)
                        state.server = nil
                    }
                }
                return nil
            } catch {
                state.failures += 1
                if let server = state.server { stop(server) }
                state.server = nil
                if !state.said {
                    state.said = true
                    FileHandle.standardError.write(Data(
                        "vigil: runners are started without the fork server (\(error)); each costs its own copy of the runtime's memory\n".utf8))
                }
                return nil
            }
        }
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        /// The server had ended before the request.
        var ended = false
    }

    /// The request for `spawn`: the tag, the descriptor numbers, and the
    /// runner's arguments after `plugins runner`, NUL-separated; and the
    /// descriptors to pass in that order. Nil for a spawn the fork server
    /// cannot make: not a runner, or standard descriptors other than the
    /// server's own.
    private static func request(_ spawn: Spawn, tag: String) -> (bytes: [UInt8], fds: [Int32])? {
        guard spawn.newProcessGroup, spawn.arguments.count >= 3, spawn.arguments[1] == "plugins",
              spawn.arguments[2] == "runner", tag.utf8.count == RunnerDescendants.tagLength,
              spawn.descriptors[0] == .null, spawn.descriptors[1] == .parent(2), spawn.descriptors[2] == .parent(2)
        else { return nil }
        var numbers: [Int32] = [], fds: [Int32] = []
        for (child, source) in spawn.descriptors.sorted(by: { $0.key < $1.key }) where child > 2 {
            guard case .parent(let fd) = source else { return nil }
            numbers.append(child)
            fds.append(fd)
        }
        guard fds.count <= 8 else { return nil }
        var words = [tag, numbers.map(String.init).joined(separator: ",")]
        words += spawn.arguments
        var bytes: [UInt8] = []
        for word in words {
            guard !word.utf8.contains(0) else { return nil }
            bytes += word.utf8
            bytes.append(0)
        }
        return (bytes, fds)
    }

    private func launch(environment: [String: String]) throws -> Server {
        var pair: [Int32] = [-1, -1]
        guard vigil_seqpacket_pair(&pair) == 0 else { throw Failure(description: "socketpair: \(String(cString: strerror(errno)))") }
        var serverEnvironment = environment
        serverEnvironment[RunnerDescendants.variable] = Self.tagPlaceholder
        // The room for a runner's command line: the last word, blank.
        let arguments = [program == "/proc/self/exe" ? CommandLine.arguments.first ?? "vigil" : program,
                         "plugins", "fork-server", "--parent", "\(getpid())",
                         String(repeating: " ", count: Self.titleRoom)]
        let spawn = Spawn(program: program, arguments: arguments, environment: serverEnvironment,
                          descriptors: [0: .null, 1: .parent(2), 2: .parent(2), Self.socketFD: .parent(pair[1])],
                          newProcessGroup: true)
        defer { close(pair[1]) }
        do {
            // From the spawner thread, as runners were: their parent-death
            // signal follows that thread, which lives as long as the host.
            let pid = try spawn.startFromSpawnerThread()
            return Server(pid: pid, socket: pair[0], environment: environment)
        } catch {
            close(pair[0])
            throw Failure(description: "cannot start it: \(error)")
        }
    }

    /// One request and its answer: the runner's pid.
    private func ask(_ server: Server, _ request: (bytes: [UInt8], fds: [Int32])) throws -> pid_t {
        let sent = request.bytes.withUnsafeBytes { raw in
            request.fds.withUnsafeBufferPointer { fds in
                vigil_send_fds(server.socket, raw.baseAddress, UInt(raw.count), fds.baseAddress, Int32(fds.count))
            }
        }
        guard sent == request.bytes.count else {
            let error = errno
            throw Failure(description: "it cannot be reached: \(String(cString: strerror(error)))",
                          ended: error == EPIPE || error == ECONNRESET)
        }
        // The first answer waits for the server's own start (an exec and a
        // dynamic link); the others for one fork.
        var pfd = pollfd(fd: server.socket, events: Int16(POLLIN), revents: 0)
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while true {
            let left = deadline - monotonicNanoseconds()
            guard left > 0 else { throw Failure(description: "it did not answer within 10 s") }
            let r = poll(&pfd, 1, Int32(clamping: left / 1_000_000 + 1))
            if r > 0 { break }
            if r < 0 && errno != EINTR { throw Failure(description: "poll: \(String(cString: strerror(errno)))") }
        }
        var answer = [UInt8](repeating: 0, count: 4096)
        let n = answer.withUnsafeMutableBytes { recv(server.socket, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { throw Failure(description: "it ended", ended: true) }
        let text = String(decoding: answer[1..<n], as: UTF8.self)
        guard answer[0] == UInt8(ascii: "P"), let pid = pid_t(text), pid > 0 else {
            throw Failure(description: answer[0] == UInt8(ascii: "E") ? text : "it answered nonsense")
        }
        return pid
    }

    /// Ends a server that failed: its socket closed, killed and reaped.
    private func stop(_ server: Server) {
        close(server.socket)
        _ = kill(server.pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(server.pid, &status, 0) < 0 && errno == EINTR {}
    }
}

// MARK: - The fork server's side

extension RunnerForkServer {
    /// `vigil plugins fork-server --parent PID ROOM`, on the main thread
    /// before anything else: serves fork requests until the host closes the
    /// socket, then exits. Returns only in a forked runner, with the
    /// arguments after `plugins runner`.
    public static func serve(parent: pid_t) -> [String] {
        _ = vigil_set_parent_death_signal(SIGKILL)
        guard getppid() == parent else { _exit(70) }
        let title = commandLineArea()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var fds = [Int32](repeating: -1, count: 8)
        while true {
            var count: Int32 = 0
            let n = buffer.withUnsafeMutableBytes { raw in
                fds.withUnsafeMutableBufferPointer { vigil_recv_fds(socketFD, raw.baseAddress, UInt(raw.count), $0.baseAddress, 8, &count) }
            }
            if n == 0 { _exit(0) }
            if n < 0 {
                if errno == EMSGSIZE { answer("E" + "a request too large"); continue }
                _exit(0)
            }
            let received = Array(fds[0..<Int(count)])
            // Closed here, not in a defer: in the child, these numbers may be
            // the runner's own descriptors by now.
            func refuse(_ why: String) {
                for fd in received { close(fd) }
                answer("E" + why)
            }
            let words = buffer[0..<n].split(separator: 0, omittingEmptySubsequences: false).dropLast()
                .map { String(decoding: $0, as: UTF8.self) }
            guard words.count >= 5 else { refuse("a request without a command"); continue }
            let tag = words[0], command = Array(words[2...])
            let numbers = words[1].split(separator: ",").compactMap { Int32($0) }
            guard numbers.count == received.count else { refuse("descriptors and their numbers differ"); continue }
            let threads = threadCount()
            guard threads == 1 else { refuse("the fork server has \(threads) threads; it forks with one"); continue }
            var line = Array(command.joined(separator: "\0").utf8)
            line.append(0)
            let pid = received.withUnsafeBufferPointer { sources in
                numbers.withUnsafeBufferPointer { targets in
                    line.withUnsafeBufferPointer { line in
                        vigil_fork_sibling(sources.baseAddress, targets.baseAddress, Int32(received.count), 1,
                                           RunnerDescendants.variable, tag, title?.baseAddress, UInt(title?.count ?? 0),
                                           line.baseAddress, UInt(line.count))
                    }
                }
            }
            if pid == 0 { return Array(command.dropFirst(3)) }
            for fd in received { close(fd) }
            answer(pid > 0 ? "P\(pid)" : "E" + "clone: \(String(cString: strerror(errno)))")
        }
    }

    private static func answer(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(socketFD, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// This process's argv strings, where the kernel reads /proc/PID/cmdline
    /// from (/proc/self/stat's arg_start and arg_end); nil if unreadable.
    private static func commandLineArea() -> UnsafeMutableBufferPointer<CChar>? {
        // arg_start and arg_end are stat(5)'s fields 48 and 49.
        guard let stat = RunnerLimits.read("/proc/self/stat"), let fields = RunnerLimits.statFields(stat),
              fields.count >= 47, let start = UInt(fields[45]), let end = UInt(fields[46]), end > start,
              let base = UnsafeMutablePointer<CChar>(bitPattern: start) else { return nil }
        return UnsafeMutableBufferPointer(start: base, count: Int(end - start))
    }

    /// num_threads, stat(5)'s field 20; 0 if unreadable.
    private static func threadCount() -> Int {
        guard let stat = RunnerLimits.read("/proc/self/stat"), let fields = RunnerLimits.statFields(stat),
              fields.count > 17 else { return 0 }
        return Int(fields[17]) ?? 0
    }
}
