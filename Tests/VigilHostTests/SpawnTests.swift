import Foundation
import Testing
@testable import VigilHost

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
