import VigilChildProcess
import Foundation
import Synchronization
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Paths and helpers shared by the host tests: the repository, the build's
/// products (the real `vigil` binary and the Swift plugins), and the C plugins,
/// built once per test run with `scripts/build-c-plugins`.
enum TestEnv {
    static let repoRoot: String = {
        var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) { return dir.path }
            dir.deleteLastPathComponent()
        }
        fatalError("Package.swift not found above \(#filePath)")
    }()

    /// The directory holding the test runner, which is the build's products directory.
    static let productsDir: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // swift-testing may run from inside an .xctest bundle directory.
        while url.path != "/", !FileManager.default.fileExists(atPath: url.appendingPathComponent("vigil").path) {
            url.deleteLastPathComponent()
        }
        return url.path
    }()

    static var vigil: String { productsDir + "/vigil" }

    static func fixture(_ relative: String) -> String { repoRoot + "/Tests/Fixtures/" + relative }

    private static let cPluginsOnce = Mutex<String?>(nil)

    /// The directory of the cc-built C plugins (heartbeat and the ABI fixtures).
    static func cPlugins() throws -> String {
        try cPluginsOnce.withLock { built in
            if let built { return built }
            let dir = productsDir + "/c-plugins"
            let result = try run(repoRoot + "/scripts/build-c-plugins", [dir, "--tests"], timeout: 120)
            guard result.status == 0 else {
                throw TestFailure("scripts/build-c-plugins failed (\(result.status)): \(result.stderr)")
            }
            built = dir
            return dir
        }
    }

    static func cPlugin(_ name: String) throws -> String { try cPlugins() + "/\(name).so" }

    /// A fresh directory under the system temp directory.
    static func tempDir(_ tag: String = #function) throws -> String {
        let name = tag.filter { $0.isLetter || $0.isNumber }
        let path = NSTemporaryDirectory() + "vigil-test-\(name)-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs a program to completion (killing it after `timeout` seconds).
    static func run(_ program: String, _ arguments: [String], environment: [String: String]? = nil,
                    timeout: TimeInterval = 60) throws -> Output {
        let process = try start(program, arguments, environment: environment)
        return process.wait(timeout: timeout)
    }

    static func start(_ program: String, _ arguments: [String], environment: [String: String]? = nil) throws -> RunningProcess {
        if TestTier.fast && program == vigil {
            Issue.record("the fast tier started the vigil binary (\(arguments.first ?? "")): give this suite the .startsProcesses trait")
        }
        return try RunningProcess(program, arguments, environment: environment)
    }

    /// Sends `request` as is to 127.0.0.1:`port` and reads the reply until
    /// the peer closes or 5 s pass (ask with `Connection: close`).
    static func http(port: Int, _ request: [UInt8]) throws -> String {
        let fd = try Sockets.connect(.tcp(host: "127.0.0.1", port: UInt16(port)))
        defer { close(fd) }
        // A server may close a connection it refuses before reading it all.
        return try exchange(fd, request, stopReadingAfter: 5, what: "127.0.0.1:\(port)", sendMayFail: true)
    }

    /// Sends `request` on `fd`, then reads until the peer closes. With
    /// `sendMayFail` a refused send ends the sending, and reading stops after
    /// `seconds` in all with what came; without it a refused send, or
    /// `seconds` with nothing to read, throws.
    static func exchange(_ fd: Int32, _ request: [UInt8], stopReadingAfter seconds: TimeInterval, what: String,
                         sendMayFail: Bool) throws -> String {
        var sent = 0
        while sent < request.count {
            let n = request.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 {
                if sendMayFail { break }
                throw TestFailure("send to \(what): errno \(errno)")
            }
            sent += n
        }
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let left = Int32(max(0, min(deadline.timeIntervalSinceNow, 3600)) * 1000)
            let ready = poll(&pfd, 1, sendMayFail ? min(100, left) : left)
            if ready < 0 { break }
            if ready == 0 {
                if Date() < deadline { continue }
                if sendMayFail { break }
                throw TestFailure("no reply from \(what) within \(Int(seconds)) s")
            }
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            reply += buffer[0..<n]
        }
        return String(decoding: reply, as: UTF8.self)
    }

    /// An HTTP reply's status, head and body.
    static func parts(ofReply reply: String) -> (status: Int, head: String, body: String) {
        guard let split = reply.range(of: "\r\n\r\n") else { return (0, reply, "") }
        let head = String(reply[..<split.lowerBound])
        return (head.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0, head, String(reply[split.upperBound...]))
    }

    /// `method path` on the control socket at `socket`, blocking, off the
    /// cooperative pool: the status and the body. A loop of thousands of
    /// requests (the reload test) that awaited each one would wait for a
    /// cooperative thread every time, and the pool's two threads are busy
    /// with blocking tests for most of the suite (it took 600 s in CI for
    /// 80 s of work).
    static func unixHTTP(socket path: String, _ method: String, _ target: String) throws -> (status: Int, body: String) {
        let fd = try Sockets.connect(.unix(path: path))
        defer { close(fd) }
        let request = Array("\(method) \(target) HTTP/1.1\r\nHost: vigil\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".utf8)
        let text = try exchange(fd, request, stopReadingAfter: 30, what: path, sendMayFail: false)
        guard text.contains("\r\n\r\n") else { return (0, text) }
        let reply = parts(ofReply: text)
        return (reply.status, reply.body)
    }

    /// `body` on a thread of its own, awaited: blocking work that must not
    /// hold (or wait for) a thread of the cooperative pool.
    static func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread { continuation.resume(with: Result { try body() }) }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    /// `GET path` on 127.0.0.1:`port`: the status and the body.
    static func httpGet(port: Int, _ path: String, headers: String = "") throws -> (status: Int, head: String, body: String) {
        parts(ofReply: try http(port: port, Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\(headers)Connection: close\r\n\r\n".utf8)))
    }

    static func write(_ text: String, to path: String) throws {
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A child process whose output is collected in the background.
///
/// Started with the host's own `Spawn` (stdin /dev/null, signals at their
/// defaults, as from a shell) on close-on-exec pipes this class owns and
/// closes exactly once: Foundation's Process and Pipe on Linux could close a
/// descriptor number twice, and under parallel tests the second close hit a
/// socket another test was reading (a listen-sink test lost its client
/// mid-stream). Close-on-exec from the start (`Spawn.pipe`), so a child
/// another test starts meanwhile cannot hold a write end open and keep this
/// one's reader waiting. Every descriptor the tests open is close-on-exec,
/// for the same reason.
final class RunningProcess: @unchecked Sendable {
    let pid: pid_t
    private let collected = Mutex<(Data, Data)>((Data(), Data()))
    private let readers = DispatchGroup()
    private let exit = Mutex<Int32?>(nil)

    init(_ program: String, _ arguments: [String], environment: [String: String]?) throws {
        let out = try Spawn.pipe(for: program)
        let err: (read: Int32, write: Int32)
        do {
            err = try Spawn.pipe(for: program)
        } catch {
            close(out.read); close(out.write)
            throw error
        }
        let spawn = Spawn(program: program, arguments: [program] + arguments,
                          environment: ProcessInfo.processInfo.environment.merging(environment ?? [:]) { _, new in new },
                          descriptors: [0: .null, 1: .parent(out.write), 2: .parent(err.write)])
        defer { close(out.write); close(err.write) }
        do {
            pid = try spawn.start()
        } catch {
            close(out.read); close(err.read)
            throw error
        }
        for (fd, isOut) in [(out.read, true), (err.read, false)] {
            readers.enter()
            let thread = Thread { [self] in
                var data = Data()
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let n = read(fd, &buffer, buffer.count)
                    if n > 0 { data.append(contentsOf: buffer[0..<n]); continue }
                    if n < 0 && errno == EINTR { continue }
                    break
                }
                close(fd)
                collected.withLock { if isOut { $0.0 = data } else { $0.1 = data } }
                readers.leave()
            }
            thread.start()
        }
    }

    func signal(_ sig: Int32) { kill(pid, sig) }

    /// The exit status (128 + signal for a signal), once the process has exited.
    private func reap(block: Bool) -> Int32? {
        exit.withLock { status in
            if let status { return status }
            var raw: Int32 = 0
            let r = waitpid(pid, &raw, block ? 0 : WNOHANG)
            guard r == pid else { return nil }
            let signalled = raw & 0x7f
            status = signalled == 0 ? (raw >> 8) & 0xff : 128 + signalled
            return status
        }
    }

    var isRunning: Bool { reap(block: false) == nil }

    /// Waits for exit; kills the process after `timeout` seconds.
    func wait(timeout: TimeInterval = 60) -> TestEnv.Output {
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning && Date() < deadline { usleep(10_000) }
        if isRunning { kill(pid, SIGKILL) }
        let status = reap(block: true) ?? -1
        readers.wait()
        let (o, e) = collected.withLock { $0 }
        return TestEnv.Output(status: status, stdout: String(decoding: o, as: UTF8.self),
                              stderr: String(decoding: e, as: UTF8.self))
    }
}

/// The tiers of the suite. `make check` (VIGIL_TEST_TIER=fast) runs the unit
/// and in-process tests, a minute and a half on two cores; `make test`, the
/// README's test command and CI run every test. A test that starts the
/// vigil binary or a peer (collectd, Prometheus, an example's build) is in
/// a suite with `.startsProcesses`; one that starts the binary without it
/// fails in the fast tier, so the tier stays what it says.
enum TestTier {
    static let fast = ProcessInfo.processInfo.environment["VIGIL_TEST_TIER"] == "fast"
}

extension Trait where Self == ConditionTrait {
    /// The suite's tests start the vigil binary or a peer: the full tier only.
    static var startsProcesses: Self {
        .enabled(if: !TestTier.fast, "starts the vigil binary or a peer: run by make test, not by make check")
    }
}

/// Tests that block (they wait for processes, peers, sockets and files)
/// run on threads of their own, a few at a time, instead of on Swift's
/// cooperative pool. That pool has one thread per core, two here: a test
/// that blocks holds one, and every awaiting test waits for it. The suite
/// then ran at one core's worth of CPU for most of its 7 minutes, and a
/// test awaiting 10,000 requests took 600 s in CI for 80 s of work.
struct OffThePool: SuiteTrait, TestTrait, TestScoping {
    /// At most this many such test cases at once: they start processes,
    /// and more at once would be the machine's load, not the test's (with
    /// six, CI's suite took 320 s and a test timed on two seconds failed).
    static let width = 4

    var isRecursive: Bool { true }

    func provideScope(for test: Test, testCase: Test.Case?,
                      performing function: @Sendable () async throws -> Void) async throws {
        guard testCase != nil || !test.isSuite && !test.isParameterized else { return try await function() }
        await Self.gate.enter()
        defer { Self.gate.leave() }
        try await withTaskExecutorPreference(TestThreads.shared) { try await function() }
    }

    private static let gate = TestGate(width: width)
}

extension Trait where Self == OffThePool {
    /// The suite's tests block: see `OffThePool`.
    static var offThePool: Self { OffThePool() }
}

/// A counting gate that waits without a thread: `enter` suspends the task
/// when `width` are inside, `leave` lets the first waiter in.
final class TestGate: Sendable {
    private let state: Mutex<(free: Int, waiting: [CheckedContinuation<Void, Never>])>

    init(width: Int) { state = Mutex((width, [])) }

    func enter() async {
        await withCheckedContinuation { continuation in
            let admitted = state.withLock { s -> Bool in
                if s.free > 0 {
                    s.free -= 1
                    return true
                }
                s.waiting.append(continuation)
                return false
            }
            if admitted { continuation.resume() }
        }
    }

    func leave() {
        let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if s.waiting.isEmpty {
                s.free += 1
                return nil
            }
            return s.waiting.removeFirst()
        }
        next?.resume()
    }
}

/// A task executor whose threads may block: a job goes to an idle thread,
/// or to a new one when none is idle (threads stay for the run).
final class TestThreads: TaskExecutor, Sendable {
    static let shared = TestThreads()

    private let state = Mutex<(jobs: [UnownedJob], idle: Int)>(([], 0))
    private let work = DispatchSemaphore(value: 0)

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let start = state.withLock { s -> Bool in
            s.jobs.append(job)
            guard s.idle > 0 else { return true }
            s.idle -= 1
            return false
        }
        if start {
            let thread = Thread { [self] in run() }
            thread.stackSize = 4 << 20
            thread.start()
        } else {
            work.signal()
        }
    }

    private func run() {
        while true {
            let job = state.withLock { s -> UnownedJob? in
                if s.jobs.isEmpty {
                    s.idle += 1
                    return nil
                }
                return s.jobs.removeFirst()
            }
            if let job {
                job.runSynchronously(on: asUnownedTaskExecutor())
            } else {
                work.wait()
            }
        }
    }
}
