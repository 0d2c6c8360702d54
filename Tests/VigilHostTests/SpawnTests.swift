import VigilChildProcess
import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The one spawner: what a child gets through the descriptor map, and what
/// it does not get.
@Suite struct SpawnTests {
    /// Any child number, including numbers the parent's sources have: two
    /// pipes' write ends swapped into each other's places, and the read ends
    /// (close-on-exec) not passed on.
    @Test func theMapSetsAnyNumberEvenOnesItsSourcesHave() throws {
        let a = try Spawn.pipe(for: "sh"), b = try Spawn.pipe(for: "sh")
        defer { for fd in [a.read, b.read] { close(fd) } }
        // (dash redirects only descriptors 0-9 with >&N: the /proc paths reopen the pipes.)
        let script = """
            echo to-\(a.write) > /proc/self/fd/\(a.write); echo to-\(b.write) > /proc/self/fd/\(b.write)
            for fd in \(a.read) \(b.read); do [ -e /proc/self/fd/$fd ] && echo "leaked $fd" > /proc/self/fd/\(a.write); done
            exit 0
            """
        let spawn = Spawn(program: "/bin/sh", arguments: ["sh", "-c", script], environment: [:],
                          descriptors: [0: .null, 1: .null, 2: .null, a.write: .parent(b.write), b.write: .parent(a.write)])
        let pid = try spawn.start()
        close(a.write)
        close(b.write)
        var status: Int32 = -1
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        #expect(status == 0)
        #expect(Self.readAll(b.read) == "to-\(a.write)\n")
        #expect(Self.readAll(a.read) == "to-\(b.write)\n")
    }

    /// A descriptor opened without close-on-exec (as a plugin's or a
    /// library's may be) does not reach the child: it closes everything
    /// above the map. It leaked before, and a script written through such a
    /// descriptor by one thread while another spawned a long-lived child
    /// could not be run for that child's life (ETXTBSY): a test saw it.
    @Test func aDescriptorWithoutCloseOnExecIsNotPassedOn() throws {
        let dir = try TestEnv.tempDir()
        let leaky = open(dir + "/open-for-writing", O_RDWR | O_CREAT, 0o600)  // no O_CLOEXEC
        try #require(leaky > 2)
        defer { close(leaky) }
        let out = try Spawn.pipe(for: "sh")
        defer { close(out.read) }
        let spawn = Spawn(program: "/bin/sh", arguments: ["sh", "-c", "[ -e /proc/self/fd/\(leaky) ] && echo leaked; echo done"],
                          environment: [:], descriptors: [0: .null, 1: .parent(out.write), 2: .null])
        let pid = try spawn.start()
        close(out.write)
        var status: Int32 = -1
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        #expect(Self.readAll(out.read) == "done\n")
    }

    @Test func aProgramThatCannotStartIsNamedWithTheReason() {
        let spawn = Spawn(program: "/nonexistent/notify", arguments: ["notify"], environment: [:], descriptors: [:])
        #expect(throws: SpawnError.self) { try spawn.start() }
        do {
            _ = try spawn.start()
        } catch {
            #expect(error.step == .spawn && error.code == ENOENT)
            #expect(error.description == "/nonexistent/notify: No such file or directory")
        }
    }

    static func readAll(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n > 0 { bytes += buffer[0..<n]; continue }
            if n < 0 && errno == EINTR { continue }
            return String(decoding: bytes, as: UTF8.self)
        }
    }
}
