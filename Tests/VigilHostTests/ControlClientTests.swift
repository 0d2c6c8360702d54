import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
@testable import vigil

/// The control client against a raw unix socket: what reaches the host, and when.
@Suite struct ControlClientTests {
    /// Runs one job, then holds the jobs that follow until `release()`:
    /// a caller's task that is not scheduled again for a while, as on a
    /// cooperative pool busy with blocking work (a full test run).
    final class HeldExecutor: TaskExecutor, @unchecked Sendable {
        private let condition = NSCondition()
        private var jobs: [UnownedJob] = []
        private var allowance = 1

        init() {
            let thread = Thread { [self] in
                while true {
                    condition.lock()
                    while jobs.isEmpty || allowance == 0 { condition.wait() }
                    allowance -= 1
                    let job = jobs.removeFirst()
                    condition.unlock()
                    job.runSynchronously(on: asUnownedTaskExecutor())
                }
            }
            thread.name = "held-executor"
            thread.start()
        }

        func enqueue(_ job: consuming ExecutorJob) {
            condition.lock()
            jobs.append(UnownedJob(job))
            condition.signal()
            condition.unlock()
        }

        func release() {
            condition.lock()
            allowance = .max
            condition.signal()
            condition.unlock()
        }
    }

    /// The request is on the wire as soon as the connection is: a caller
    /// held between its connect and its next step no longer leaves the
    /// connection silent until the host's request deadline (10 s) closes it
    /// unanswered, which a full test run once saw.
    @Test func theRequestIsSentOnConnectNotWhenTheCallerRunsAgain() async throws {
        let dir = try TestEnv.tempDir("client")
        let path = dir + "/vigil.sock"
        let listener = try Sockets.listen(.unix(path: path), backlog: 4)
        defer { close(listener) }
        let executor = HeldExecutor()
        let reply = Task(executorPreference: executor) {
            try await ControlClient.request(.GET, "/v1/health", to: try ControlAddress(parsing: "unix:" + path),
                                            timeout: .seconds(20))
        }
        // What arrives within 3 s of the connection, while the caller is held.
        let connection = Sockets.accept(listener)
        #expect(connection >= 0)
        defer { close(connection) }
        var request: [UInt8] = []
        let until = Date().addingTimeInterval(3)
        while !String(decoding: request, as: UTF8.self).contains("\r\n\r\n"), Date() < until {
            var pfd = pollfd(fd: connection, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(connection, &chunk, chunk.count)
            guard n > 0 else { break }
            request += chunk[..<n]
        }
        let text = String(decoding: request, as: UTF8.self)
        #expect(text.hasPrefix("GET /v1/health HTTP/1.1\r\n"), "\(text.debugDescription)")
        #expect(text.contains("\r\n\r\n"))
        // Answered; the caller, let go, has its reply.
        let answer = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"
        _ = answer.utf8CString.withUnsafeBufferPointer { write(connection, $0.baseAddress, $0.count - 1) }
        executor.release()
        let got = try await reply.value
        #expect(got.status == 200)
        #expect(got.text == "ok\n")
    }
}

/// Where the host listens and `vigil ctl` asks when neither is told.
@Suite struct ControlAddressDefaultTests {
    @Test func theServiceListensInTheDirectorySystemdGivesIt() {
        // The packaged unit runs as the user vigil with RuntimeDirectory=vigil.
        #expect(ControlAddress.standard(environment: ["RUNTIME_DIRECTORY": "/run/vigil"])?.path == "/run/vigil/vigil.sock")
        #expect(ControlAddress.standard(environment: ["RUNTIME_DIRECTORY": "/run/a:/run/b"])?.path == "/run/a/vigil.sock")
        // VIGIL_STATE_DIR still comes first.
        #expect(ControlAddress.standard(environment: ["VIGIL_STATE_DIR": "/tmp/s", "RUNTIME_DIRECTORY": "/run/vigil"])?.path
                == "/tmp/s/vigil.sock")
    }

    @Test func ctlFallsBackToTheServicesSocketWhereItsOwnIsNotThere() {
        let env = ["XDG_RUNTIME_DIR": "/run/user/1000"]
        func asked(_ env: [String: String], _ exists: @escaping (String) -> Bool) -> String? {
            ControlAddress.forClient(environment: env, isRoot: false, exists: exists)?.path
        }
        #expect(asked(env, { _ in false }) == "/run/user/1000/vigil/vigil.sock")
        #expect(asked(env, { $0 == "/run/vigil/vigil.sock" }) == "/run/vigil/vigil.sock")
        #expect(asked(env, { _ in true }) == "/run/user/1000/vigil/vigil.sock")
        #expect(asked([:], { $0 == "/run/vigil/vigil.sock" }) == "/run/vigil/vigil.sock")
        #expect(asked([:], { _ in false }) == nil)
        // As root the standard socket is the service's.
        #expect(ControlAddress.forClient(environment: env, isRoot: true, exists: { _ in false })?.path == "/run/vigil/vigil.sock")
    }
}

/// STATE_DIRECTORY for a manifest run by hand (systemd sets it for the unit).
@Suite struct ManifestEnvironmentTests {
    @Test func aRunByHandWritesUnderItsUsersStateDirectory() {
        #expect(FileManifestSource.environment([:], isRoot: true)["STATE_DIRECTORY"] == "/var/lib/vigil")
        #expect(FileManifestSource.environment(["HOME": "/home/ann"], isRoot: false)["STATE_DIRECTORY"] == "/home/ann/.local/state/vigil")
        #expect(FileManifestSource.environment(["HOME": "/home/ann", "XDG_STATE_HOME": "/srv/st"], isRoot: false)["STATE_DIRECTORY"]
                == "/srv/st/vigil")
        // systemd's own is kept; nothing is made up without a home.
        #expect(FileManifestSource.environment(["STATE_DIRECTORY": "/var/lib/vigil"], isRoot: false)["STATE_DIRECTORY"] == "/var/lib/vigil")
        #expect(FileManifestSource.environment(["HOME": "relative"], isRoot: false)["STATE_DIRECTORY"] == nil)
    }
}
