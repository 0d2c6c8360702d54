#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A directory standing in for a kernel pseudo-filesystem root such as
/// `/proc`, or a fixture tree that mimics it.
public struct FSRoot: Sendable, Equatable, CustomStringConvertible {
    /// The root directory, without trailing slashes (`"/"` stays `"/"`).
    public let root: String

    /// Creates a root for `path`, e.g. `"/proc"` or a fixture directory.
    public init(_ path: String) {
        var trimmed = Substring(path)
        while trimmed.utf8.count > 1, trimmed.utf8.last == UInt8(ascii: "/") {
            trimmed = trimmed.dropLast()
        }
        root = String(trimmed)
    }

    /// The real procfs, `/proc`.
    public static let proc = FSRoot("/proc")

    /// The root directory.
    public var description: String { root }

    /// Joins `relative` onto the root with exactly one slash between them.
    public func path(_ relative: String) -> String {
        var rel = Substring(relative)
        while rel.utf8.first == UInt8(ascii: "/") { rel = rel.dropFirst() }
        if rel.isEmpty { return root }
        if root.isEmpty { return String(rel) }
        if root == "/" { return "/" + rel }
        return root + "/" + rel
    }

    /// True when `relative` names an existing file or directory.
    public func exists(_ relative: String) -> Bool {
        access(path(relative), F_OK) == 0
    }

    /// Reads a whole file as UTF-8 text (invalid bytes are replaced).
    public func readText(_ relative: String) throws(ProbeError) -> String {
        String(decoding: try readBytes(relative), as: UTF8.self)
    }

    /// The most a file is read to: /proc/net/udp of a server with 100,000
    /// sockets is 13 MB; past this a file is refused, not read into memory.
    public static let maxFileBytes = 64 << 20

    /// Reads a whole file until end-of-file. Pseudo-files report a size of 0,
    /// so the file is read in chunks rather than by its `stat` size.
    /// Interrupted system calls (`EINTR`) are retried.
    ///
    /// Only a regular file is read (procfs and sysfs files are): a FIFO,
    /// a device or a socket where a root says a kernel file is would wait
    /// for a writer or never end, so it is refused, opened without waiting
    /// (`O_NONBLOCK`) to find out; so is a file past `maxFileBytes`.
    public func readBytes(_ relative: String) throws(ProbeError) -> [UInt8] {
        let fullPath = path(relative)
        var fd: Int32
        repeat {
            fd = open(fullPath, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        } while fd < 0 && errno == EINTR
        guard fd >= 0 else { throw .unreadable(path: fullPath, errno: errno) }
        defer { _ = close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unreadable(path: fullPath, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw .malformed(path: fullPath, line: 0, reason: "not a regular file (a FIFO, a device or a socket), not read")
        }

        var bytes: [UInt8] = []
        bytes.reserveCapacity(4096)
        var failure: Int32 = 0
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 8192) { chunk in
            while true {
                let n = read(fd, chunk.baseAddress, chunk.count)
                if n > 0 {
                    guard bytes.count + n <= Self.maxFileBytes else {
                        failure = EFBIG
                        return
                    }
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: chunk[..<n]))
                } else if n == 0 {
                    return
                } else if errno != EINTR {
                    failure = errno
                    return
                }
            }
        }
        if failure == EFBIG {
            throw .malformed(path: fullPath, line: 0, reason: "larger than \(Self.maxFileBytes >> 20) MiB, not read")
        }
        if failure != 0 { throw .unreadable(path: fullPath, errno: failure) }
        return bytes
    }
}
