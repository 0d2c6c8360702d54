import Foundation

/// Ownership of a unix socket path among processes: an exclusive `flock` on
/// `PATH.lock`, taken before a stale socket file is replaced and held for as
/// long as the listening sink lives. Two hosts started together on one path
/// can then never both bind it (the second would otherwise replace the
/// first's socket file, and remove it at exit); the second is told who holds
/// it. The lock file holds the owner's pid and is never removed: removing it
/// would let a third process lock a new file while the second still locks the
/// old one.
package final class SocketPathLock: @unchecked Sendable {  // the fds change only in `release`, called once by its one owner
    private var fd: Int32
    /// Another user's lock file this one replaced, held until release (see `claim`).
    private var replaced: Int32
    let path: String

    private init(fd: Int32, replaced: Int32, path: String) {
        self.fd = fd
        self.replaced = replaced
        self.path = path
    }

    /// Takes the lock of `socketPath`, or throws, naming the process that holds it.
    package static func claim(_ socketPath: String) throws -> SocketPathLock {
        let path = socketPath + ".lock"
        _ = try? Paths.makeParentDirectories(of: path)
        var fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        var replaced: Int32 = -1
        if fd < 0 && errno == EACCES {
            // Another user's lock file: a run by hand as root left it in the
            // service's runtime directory, say. Read-only, it still tells
            // whether it is held; when it is not, a file of this user's own
            // takes its place while the old one stays locked, so that a
            // process that opened the old file meanwhile finds it held too.
            let old = open(path, O_RDONLY | O_CLOEXEC)
            guard old >= 0 else { throw Sockets.Failure(what: "cannot open \(path)", code: errno) }
            try lock(old, socketPath: socketPath, lockPath: path)
            let fresh = "\(path).\(getpid())"
            fd = open(fresh, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0, flock(fd, LOCK_EX | LOCK_NB) == 0, rename(fresh, path) == 0 else {
                let e = errno
                if fd >= 0 { close(fd) }
                unlink(fresh)
                close(old)
                throw Sockets.Failure(what: "cannot replace \(path), another user's", code: e)
            }
            replaced = old
        } else {
            guard fd >= 0 else { throw Sockets.Failure(what: "cannot open \(path)", code: errno) }
            try lock(fd, socketPath: socketPath, lockPath: path)
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = pwrite(fd, pid, pid.count, 0)
        return SocketPathLock(fd: fd, replaced: replaced, path: path)
    }

    /// Locks `fd`, or closes it and throws: held by whom (the pid the file
    /// holds, and that process's command line where it can be read).
    private static func lock(_ fd: Int32, socketPath: String, lockPath: String) throws {
        guard flock(fd, LOCK_EX | LOCK_NB) != 0 else { return }
        let e = errno
        var text = [UInt8](repeating: 0, count: 32)
        let n = pread(fd, &text, text.count - 1, 0)
        close(fd)
        guard e == EWOULDBLOCK else { throw Sockets.Failure(what: "cannot lock \(lockPath)", code: e) }
        let pid = n > 0 ? String(decoding: text[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : ""
        throw Sockets.Failure(what: "\(socketPath) is held by another vigil (\(holder(pid)))", code: EADDRINUSE)
    }

    /// "pid 123: vigil run /etc/vigil/vigil.yaml", or "pid 123" where its
    /// command line cannot be read, or "pid ?".
    static func holder(_ pid: String, proc: String = "/proc") -> String {
        guard let number = Int32(pid), number > 0 else { return "pid ?" }
        guard let data = FileManager.default.contents(atPath: "\(proc)/\(number)/cmdline"), !data.isEmpty else { return "pid \(number)" }
        let words = data.split(separator: 0, omittingEmptySubsequences: true).prefix(8)
            .map { String(decoding: $0.prefix(256), as: UTF8.self) }
        let line = words.joined(separator: " ")
        return "pid \(number): \(line.count > 300 ? String(line.prefix(300)) + "…" : line)"
    }

    /// Gives the path up (after the owner has removed its socket file).
    package func release() {
        if fd >= 0 { close(fd) }
        if replaced >= 0 { close(replaced) }
        fd = -1
        replaced = -1
    }

    deinit { release() }
}
