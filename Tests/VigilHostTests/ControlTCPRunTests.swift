import Foundation
import Synchronization
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The control API on TCP through the real binaries: `vigil run
/// --control-tcp` with its token file, `vigil ctl --control tcp://…`, and a
/// raw client for what ctl never sends (no token, a wrong one, hostile
/// headers).
@Suite(.serialized, .startsProcesses, .offThePool) struct ControlTCPRunTests {
    /// A port nobody listens on now (the kernel's pick, let go of at once).
    static func freePort() throws -> Int {
        let fd = try Sockets.listen(.tcp(host: "127.0.0.1", port: 0), backlog: 1)
        defer { close(fd) }
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    struct Host {
        let dir: String
        let port: Int
        let tokenFile: String
        let process: RunningProcess
        var address: String { "tcp://127.0.0.1:\(port)" }

        /// A heartbeat host (or one of `monitors` and `sinks`) serving its
        /// control API on the unix socket and on TCP, with `token` in its token file.
        init(token: String = "s3cret-token-0123456789abcdef", monitors: String = "beat: { plugin: heartbeat, interval: 1h, isolation: none }",
             sinks: String = "out: { type: null }", extra: String = "", for duration: String = "30s") throws {
            dir = try TestEnv.tempDir("tcp")
            port = try ControlTCPRunTests.freePort()
            tokenFile = dir + "/token"
            let fd = open(tokenFile, O_WRONLY | O_CREAT | O_EXCL, 0o600)
            _ = write(fd, token + "\n", token.utf8.count + 1)
            close(fd)
            try TestEnv.write("""
            plugin_dirs: [\(try TestEnv.cPlugins())]
            monitors:
            \(monitors.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))
            sinks:
            \(sinks.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))
            \(extra)
            """, to: dir + "/vigil.yaml")
            process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--control", "unix:\(dir)/vigil.sock",
                                                        "--control-tcp", "tcp://127.0.0.1:\(port)", "--control-token-file", tokenFile,
                                                        "--for", duration])
            let port = self.port, socket = dir + "/vigil.sock"
            // Both listeners: TCP binds first, the unix socket after it.
            guard SinkRunTests.waitUntil(10, { (try? Sockets.connect(.tcp(host: "127.0.0.1", port: UInt16(port)))).map { close($0); return true } ?? false }),
                  SinkRunTests.waitUntil(10, { FileManager.default.fileExists(atPath: socket) }) else {
                let output = process.wait(timeout: 1)
                throw TestFailure("no TCP control API: \(output.stderr)")
            }
        }

        func ctl(_ arguments: [String], environment: [String: String]? = nil) throws -> TestEnv.Output {
            try TestEnv.run(TestEnv.vigil, ["ctl"] + arguments, environment: environment, timeout: 30)
        }

        /// `request` as bytes on a new connection; what came back until the host closed it or 5 s passed.
        func raw(_ request: String) throws -> String { try raw(Array(request.utf8)) }

        func raw(_ request: [UInt8]) throws -> String { try TestEnv.http(port: port, request) }

        func stop() -> TestEnv.Output {
            process.signal(SIGTERM)
            return process.wait(timeout: 30)
        }
    }

    static let right = "s3cret-token-0123456789abcdef"

    @Test func theRightTokenIsServedTheWrongOrNoneIsRefusedWith401() throws {
        let host = try Host()
        defer { _ = host.stop() }
        // ctl with the token file, and with the environment.
        let health = try host.ctl(["health", "--control", host.address, "--token-file", host.tokenFile])
        #expect(health.status == 0, "\(health.stderr)")
        #expect(health.stdout == "ok\n")
        let status = try host.ctl(["status", "--json", "--control", host.address], environment: ["VIGIL_CONTROL_TOKEN": Self.right])
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains(#""name":"beat""#))
        // The unix socket is served as well, without a token.
        #expect(try host.ctl(["health", "--control", "unix:\(host.dir)/vigil.sock"]).stdout == "ok\n")

        // A wrong token: refused by the host, exit 2.
        let wrong = try host.ctl(["health", "--control", host.address], environment: ["VIGIL_CONTROL_TOKEN": "not-the-token-0123456789"])
        #expect(wrong.status == 2)
        #expect(wrong.stderr.contains("vigil ctl: \(host.address): the bearer token was not accepted (HTTP 401)"), "\(wrong.stderr)")
        // No token at all: ctl does not even ask.
        let none = try host.ctl(["health", "--control", host.address], environment: ["VIGIL_CONTROL_TOKEN": ""])
        #expect(none.status == 2)
        #expect(none.stderr.contains("VIGIL_CONTROL_TOKEN: the token is empty"), "\(none.stderr)")

        // Raw: no Authorization header.
        let bare = try host.raw("GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(bare.hasPrefix("HTTP/1.1 401 Unauthorized\r\n"), "\(bare)")
        #expect(bare.contains("WWW-Authenticate: Bearer realm=\"vigil\"\r\n"))
        #expect(bare.contains("this control API needs a bearer token"))
        #expect(!bare.contains("beat"), "nothing of the status leaks")
        // The right one, raw, with the scheme in any case and spaces around the token.
        let ok = try host.raw("GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: bEaReR   \(Self.right)  \r\nConnection: close\r\n\r\n")
        #expect(ok.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(ok)")
        let output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("control API on tcp://127.0.0.1:\(host.port) (bearer token from \(host.tokenFile))"), "\(output.stderr)")
    }

    /// Headers built to slip past the check, each refused; the host answers the right token afterwards.
    @Test(arguments: [
        "Authorization: Bearer \(right)x",                                   // the token and more
        "Authorization: Bearer \(String(right.dropLast()))",                 // a prefix of it
        "Authorization: Bearer",                                             // no token
        "Authorization: Bearer ",                                            // an empty one
        "Authorization: Basic \(Data("u:\(right)".utf8).base64EncodedString())",  // another scheme
        "Authorization: \(right)",                                           // no scheme
        "Authorization: Bearer\t\(right)",                                   // not the separator RFC 6750 says
        "Authorization: Bearer x\r\nAuthorization: Bearer \(right)",         // a wrong one first, the right one second
        "Authorization: Bearer \(right)\r\nAuthorization: Bearer \(right)",  // twice, both right: one is asked for
        "Authorization: Bearer \(String(repeating: "A", count: 60_000))",    // huge
        "Authorization: Bearer \(right)\u{00}",                              // a NUL after it
        "X-Authorization: Bearer \(right)",                                  // another header
    ])
    func hostileAuthorizationHeadersAreRefused(header: String) throws {
        let host = try Host()
        defer { _ = host.stop() }
        let reply = try host.raw("GET /v1/status HTTP/1.1\r\nHost: x\r\n\(header)\r\n\r\n")
        #expect(reply.hasPrefix("HTTP/1.1 401 ") || reply.hasPrefix("HTTP/1.1 400 "), "\(reply.prefix(300))")
        #expect(!reply.contains("beat"), "\(reply.prefix(300))")
        let ok = try host.raw("GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Self.right)\r\nConnection: close\r\n\r\n")
        #expect(ok.hasPrefix("HTTP/1.1 200 OK\r\n"), "\(ok)")
    }

    @Test func anUnauthorizedBodyIsNotReadAndTheConnectionCapHolds() throws {
        let host = try Host()
        defer { _ = host.stop() }
        // A body past the API's limit, with no token: 401, not 413, and the host is unmoved.
        let big = "POST /v1/reload HTTP/1.1\r\nHost: x\r\nContent-Length: 3000000\r\n\r\n" + String(repeating: "A", count: 3_000_000)
        let reply = try host.raw(big)
        #expect(reply.hasPrefix("HTTP/1.1 401 "), "\(reply.prefix(300))")
        // A body declared and never sent: answered (and closed) at once, not
        // at the request deadline; without a token 401, with one 413.
        for (token, status) in [("", "401"), ("Authorization: Bearer \(Self.right)\r\n", "413")] {
            let started = Date()
            let answer = try host.raw("POST /v1/reload HTTP/1.1\r\nHost: x\r\n\(token)Content-Length: 100000000\r\n\r\n")
            #expect(answer.hasPrefix("HTTP/1.1 \(status) ") && Date().timeIntervalSince(started) < 3, "\(answer.prefix(200))")
        }
        // 64 connections at most, as on the unix socket.
        var held: [Int32] = []
        defer { for fd in held { close(fd) } }
        for _ in 0..<(ControlServer.maxConnections + 8) {
            held.append(try Sockets.connect(.tcp(host: "127.0.0.1", port: UInt16(host.port))))
        }
        usleep(500_000)
        var closed = 0
        for fd in held {
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 20) > 0 {
                var byte: UInt8 = 0
                if read(fd, &byte, 1) == 0 { closed += 1 }
            }
        }
        #expect(closed >= 8, "\(closed) closed")
        // While they are held, silent: the operator's request takes the place of one.
        let held64 = try host.ctl(["health", "--control", host.address, "--token-file", host.tokenFile])
        #expect(held64.stdout == "ok\n", "\(held64.stderr)")
        for fd in held { close(fd) }
        held = []
        // New silent connections as fast as a thread can open them: each
        // pushes out an older silent one, none the operator's.
        let churning = Atomic<Bool>(true), opened = Atomic<Int>(0)
        let port = UInt16(host.port)
        let churn = Thread {
            var ring: [Int32] = []
            while churning.load(ordering: .relaxed) {
                guard let fd = try? Sockets.connect(.tcp(host: "127.0.0.1", port: port)) else { continue }
                ring.append(fd)
                opened.add(1, ordering: .relaxed)
                if ring.count > 200 { close(ring.removeFirst()) }
            }
            for fd in ring { close(fd) }
        }
        churn.start()
        defer { churning.store(false, ordering: .relaxed) }
        #expect(SinkRunTests.waitUntil(10) { opened.load(ordering: .relaxed) > 500 }, "\(opened.load(ordering: .relaxed)) opened")
        for _ in 0..<3 {
            let asked = try host.ctl(["health", "--control", host.address, "--token-file", host.tokenFile])
            #expect(asked.stdout == "ok\n", "during a churn of \(opened.load(ordering: .relaxed)) connections: \(asked.stderr)")
        }
        churning.store(false, ordering: .relaxed)
        #expect(SinkRunTests.waitUntil(5) {
            (try? host.ctl(["health", "--control", host.address, "--token-file", host.tokenFile]).stdout) == "ok\n"
        })
    }

    func run(_ arguments: [String]) throws -> TestEnv.Output {
        let dir = try TestEnv.tempDir("tcprefuse")
        try TestEnv.write("monitors:\n  cpu: { plugin: cpu }\nsinks:\n  out: { type: null }\n", to: dir + "/vigil.yaml")
        return try TestEnv.run(TestEnv.vigil, ["run", dir + "/vigil.yaml", "--control", "none", "--for", "1s"] + arguments,
                               timeout: 30)
    }

    /// Token files that are not a secret, or not a token, stop the run before it starts, saying why.
    @Test func tokenFilesThatCannotBeTrustedAreRefused() throws {
        let dir = try TestEnv.tempDir("tokens")
        func file(_ name: String, _ text: String, mode: mode_t) -> String {
            let path = dir + "/" + name
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            _ = write(fd, text, text.utf8.count)
            close(fd)
            chmod(path, mode)
            return path
        }
        let cases: [(String, String)] = [
            (file("shared", Self.right, mode: 0o640), "group or others may read or write it (mode 640); the token is a password: chmod 600"),
            (file("world", Self.right, mode: 0o604), "(mode 604)"),
            (file("empty", "", mode: 0o600), "the token is empty"),
            (file("short", "abc123", mode: 0o600), "the token is 6 characters; it must have 16 to 1024"),
            (file("spaces", "two words but long enough", mode: 0o600), "a token is visible ASCII characters"),
            (file("big", String(repeating: "a", count: 5000), mode: 0o600), "larger than 4096 bytes"),
            (dir, "not a regular file"),
        ]
        for (path, why) in cases {
            let result = try run(["--control-tcp", "tcp://127.0.0.1:0", "--control-token-file", path])
            #expect(result.status == 2, "\(path): \(result.stderr)")
            #expect(result.stderr.contains("token file \(path): \(why)") || result.stderr.contains(why), "\(path): \(result.stderr)")
        }
        // A symbolic link, and a FIFO (which must not hang the start).
        symlink(dir + "/shared", dir + "/link")
        mkfifo(dir + "/fifo", 0o600)
        let link = try run(["--control-tcp", "tcp://127.0.0.1:0", "--control-token-file", dir + "/link"])
        #expect(link.status == 2 && link.stderr.contains("it is a symbolic link"), "\(link.stderr)")
        let fifo = try run(["--control-tcp", "tcp://127.0.0.1:0", "--control-token-file", dir + "/fifo"])
        #expect(fifo.status == 2 && fifo.stderr.contains("not a regular file"), "\(fifo.stderr)")
    }

    @Test func aMissingTokenFileIsCreatedSecretAndSaid() throws {
        let dir = try TestEnv.tempDir("newtoken")
        let path = dir + "/token"
        let result = try run(["--control-tcp", "tcp://127.0.0.1:0", "--control-token-file", path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("control API token created in \(path) (mode 0600)"), "\(result.stderr)")
        var st = stat()
        #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o600)
        let token = try String(contentsOfFile: path, encoding: .utf8)
        #expect(token.count == 65 && token.hasSuffix("\n") && token.dropLast().allSatisfy(\.isHexDigit), "\(token)")
        // Used as it is the next time.
        let again = try run(["--control-tcp", "tcp://127.0.0.1:0", "--control-token-file", path])
        #expect(again.status == 0 && !again.stderr.contains("token created"), "\(again.stderr)")
        #expect(try String(contentsOfFile: path, encoding: .utf8) == token)
        // In a folder not made yet (the README's `.vigil/token` on a first run): the folder too, 0700.
        let nested = dir + "/state/token"
        let first = try run(["--control-tcp", "tcp://127.0.0.1:0", "--control-token-file", nested])
        #expect(first.status == 0 && first.stderr.contains("control API token created in \(nested)"), "\(first.stderr)")
        #expect(stat(dir + "/state", &st) == 0 && st.st_mode & 0o777 == 0o700)
    }

    @Test func addressesOtherThanLoopbackAndBadCommandLinesAreRefused() throws {
        let dir = try TestEnv.tempDir("remote")
        let token = dir + "/token"
        for address in ["tcp://0.0.0.0:0", "tcp://[::]:0", "tcp://192.0.2.1:0"] {
            let result = try run(["--control-tcp", address, "--control-token-file", token])
            #expect(result.status == 2, "\(address): \(result.stderr)")
            #expect(result.stderr.contains("not a loopback address"), "\(result.stderr)")
            #expect(result.stderr.contains("--control-tcp-allow-remote"))
        }
        for (address, why) in [("tcp://localhost:99999", "the port must be a number from 1 to 65535"),
                               ("tcp://example.com:80", "'example.com' is not an IP address"),
                               ("tcp://127.0.0.1", "has no port"), ("udp://127.0.0.1:1", "tcp://HOST:PORT"),
                               ("tcp://[::1:80", "an IPv6 address is written in brackets")] {
            let result = try run(["--control-tcp", address, "--control-token-file", token])
            #expect(result.status == 2, "\(address): \(result.stderr)")
            #expect(result.stderr.contains(why), "\(address): \(result.stderr)")
        }
        let noToken = try run(["--control-tcp", "tcp://127.0.0.1:0"])
        #expect(noToken.status != 0 && noToken.stderr.contains("--control-tcp needs --control-token-file FILE"), "\(noToken.stderr)")
        let noTCP = try run(["--control-token-file", token])
        #expect(noTCP.status != 0 && noTCP.stderr.contains("--control-token-file is the token of --control-tcp"), "\(noTCP.stderr)")
        // A port that another listener holds ends the run, naming it.
        let busy = try Sockets.listen(.tcp(host: "127.0.0.1", port: 0), backlog: 1)
        defer { close(busy) }
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(busy, $0, &length) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let taken = try run(["--control-tcp", "tcp://127.0.0.1:\(port)", "--control-token-file", token])
        #expect(taken.status != 0 && taken.stderr.contains("control API on tcp://127.0.0.1:\(port)"), "\(taken.stderr)")
    }

    @Test func loopbackIsWhatOnlyThisMachineReaches() throws {
        for (text, loopback) in [("tcp://127.0.0.1:1", true), ("tcp://127.255.0.9:1", true), ("tcp://localhost:1", true),
                                 ("tcp://[::1]:1", true), ("tcp://[::ffff:127.0.0.1]:1", true),
                                 ("tcp://0.0.0.0:1", false), ("tcp://[::]:1", false), ("tcp://10.0.0.1:1", false),
                                 ("tcp://128.0.0.1:1", false), ("tcp://[::ffff:10.0.0.1]:1", false), ("tcp://[fe80::1]:1", false)] {
            #expect(try ControlTCPAddress(parsing: text).isLoopback == loopback, "\(text)")
        }
        #expect(try ControlTCPAddress(parsing: "tcp://[::1]:7070").description == "tcp://[::1]:7070")
        #expect(throws: ControlError.self) { try ControlTCPAddress(parsing: "tcp://127.0.0.1:0") }
        #expect(throws: ControlError.self) { try ControlTCPAddress(parsing: "tcp://127.0.0.1:+80") }
        #expect(throws: ControlError.self) { try ControlTCPAddress(parsing: "tcp://127.0.0.1:٨٠") }
    }

    @Test func tokensCompareWholly() throws {
        let token = try ControlToken(Self.right, from: "test")
        #expect(token.accepts(header: "Bearer \(Self.right)"))
        #expect(token.accepts(header: "BEARER \(Self.right)"))
        #expect(!token.accepts(header: "Bearer \(Self.right.uppercased())"))
        #expect(!token.accepts(header: "Bearer \(Self.right)\(Self.right)"))
        #expect(!token.accepts(header: ""))
        #expect(!token.accepts(header: "Bearer"))
        #expect(!token.accepts(header: "Bearerx\(Self.right)"))
        #expect(!token.matches([]))
        #expect(!token.matches(Array(Self.right.utf8.dropLast()) + [0]))
    }
}
