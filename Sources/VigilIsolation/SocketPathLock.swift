import Foundation

/// Ownership of a unix socket path among processes: an exclusive `flock` on
/// `PATH.lock`, taken before a stale socket file is replaced and held for as
/// long as the listening sink lives. Two hosts started together on one path
/// can then never both bind it (the second would otherwise replace the
/// first's socket file, and remove it at exit); the second is told who holds
/// it. The lock file holds the owner's pid and is never removed: removing it
/// would let a third process lock a new file while the second still locks the
/// old one.
package final class SocketPathLock: @unchecked Sendable {  // `fd` changes only in `release`, called once by its one owner
    private var fd: Int32
    let path: String

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    /// Takes the lock of `socketPath`, or throws, naming the pid that holds it.
    package static func claim(_ socketPath: String) throws -> SocketPathLock {
        let path = socketPath + ".lock"
        _ = try? Paths.makeParentDirectories(of: path)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Sockets.Failure(what: "cannot open \(path)", code: errno) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let e = errno
            var text = [UInt8](repeating: 0, count: 32)
            let n = pread(fd, &text, text.count - 1, 0)
            close(fd)
            let pid = n > 0 ? String(decoding: text[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : "?"
            guard e == EWOULDBLOCK else { throw Sockets.Failure(what: "cannot lock \(path)", code: e) }
            throw Sockets.Failure(what: "\(socketPath) is held by another vigil (pid \(pid.isEmpty ? "?" : pid))", code: EADDRINUSE)
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, pid, pid.count, 0)
        return SocketPathLock(fd: fd, path: path)
    }

    /// Gives the path up (after the owner has removed its socket file).
    package func release() {
        if fd >= 0 { close(fd) }
        fd = -1
    }

    deinit { release() }
}
