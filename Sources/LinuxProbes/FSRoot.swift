#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import CLinuxProbes
import Synchronization

/// A directory standing in for a kernel pseudo-filesystem root such as
/// `/proc`, or a fixture tree that mimics it.
public struct FSRoot: Sendable, Equatable, CustomStringConvertible {
    /// The root directory, without trailing slashes (`"/"` stays `"/"`).
    public let root: String

    /// The kernel files this root keeps open between reads, when it was
    /// made with `keepingFilesOpen`.
    private let openFiles: OpenFiles?

    /// Creates a root for `path`, e.g. `"/proc"` or a fixture directory.
    ///
    /// With `keepingFilesOpen`, a file of procfs, sysfs or cgroupfs that is
    /// read is kept open (up to `maxOpenFiles`, and only while the process
    /// has more than half of its RLIMIT_NOFILE free), and read again from offset 0
    /// (`pread`) at the next read: the kernel makes its text anew at
    /// offset 0, and the path walk, open, fstat and close, which cost more
    /// than the read itself for a sysfs attribute, are paid once. A monitor
    /// that reads the same few hundred files every second keeps one root
    /// for its life; files of other filesystems (a fixture tree) are
    /// always opened anew, since one may be replaced by a rename.
    public init(_ path: String, keepingFilesOpen: Bool = false) {
        var trimmed = Substring(path)
        while trimmed.utf8.count > 1, trimmed.utf8.last == UInt8(ascii: "/") {
            trimmed = trimmed.dropLast()
        }
        root = String(trimmed)
        openFiles = keepingFilesOpen ? OpenFiles(capacity: Self.maxOpenFiles) : nil
    }

    /// The most files one root keeps open: a netdev monitor holds about 25
    /// per interface, a cpu monitor about 10 per CPU.
    public static let maxOpenFiles = 1024

    public static func == (a: FSRoot, b: FSRoot) -> Bool { a.root == b.root }

    /// Closes the files kept open under `relative` (a file, or a directory
    /// and everything under it): a monitor that sees a device go, or a name
    /// come back, forgets what it held of the old one (sysfs moves an
    /// attribute's open file with its device when the device is renamed).
    public func forgetOpenFiles(under relative: String) {
        openFiles?.forget(prefix: path(relative))
    }

    /// How many files this root holds open now.
    public var openFileCount: Int { openFiles?.count ?? 0 }

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
    ///
    /// `limit`: the most read; a regular file whose size already says more
    /// (a fixture of 2 GB) is refused before a byte is read.
    public func readBytes(_ relative: String, atMost limit: Int = FSRoot.maxFileBytes) throws(ProbeError) -> [UInt8] {
        let fullPath = path(relative)
        if let openFiles, let held = openFiles.reread(fullPath, atMost: limit) { return try held.get() }
        var fd: Int32
        repeat {
            fd = open(fullPath, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        } while fd < 0 && errno == EINTR
        guard fd >= 0 else { throw .unreadable(path: fullPath, errno: errno) }
        var keep = false
        defer { if !keep { _ = close(fd) } }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .unreadable(path: fullPath, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else {
            let what = info.st_mode & S_IFMT == S_IFDIR ? "a directory" : "not a regular file (a FIFO, a device or a socket)"
            throw .malformed(path: fullPath, line: 0, reason: "\(what), not read")
        }
        guard info.st_size <= limit else { throw Self.tooLarge(fullPath, limit) }
        let kind = openFiles != nil ? KernelFilesystem(of: fd) : nil
        var seekable = true
        let result = Result { () throws(ProbeError) in
            try Self.readWhole(fd, path: fullPath, sysfs: kind == .sysfs, limit: limit, seekable: &seekable)
        }
        if let openFiles, let kind, seekable, result.isKept { keep = openFiles.keep(fd, kind: kind, at: fullPath) }
        return try result.get()
    }

    /// Reads `fd` from offset 0 to its end, at most `maxFileBytes`; EINTR
    /// is retried. A sysfs attribute is whole in one read shorter than the
    /// buffer (the kernel makes it in one page), so no second read is made
    /// to find the end; a procfs file may come a page at a time. A file
    /// opened non-seekable (pread answers ESPIPE) is read as a stream when
    /// `seekable` comes in true, and `seekable` goes out false; one held
    /// open is read with it false, and ESPIPE is then its failure.
    fileprivate static func readWhole(_ fd: Int32, path fullPath: String, sysfs: Bool, limit: Int,
                                      seekable: inout Bool) throws(ProbeError) -> [UInt8] {
        let streamAllowed = seekable
        var streaming = false
        var bytes: [UInt8] = []
        var failure: Int32 = 0
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 8192) { chunk in
            var offset = 0
            while true {
                var n = streaming ? read(fd, chunk.baseAddress, chunk.count) : pread(fd, chunk.baseAddress, chunk.count, off_t(offset))
                if n < 0 && errno == ESPIPE && offset == 0 && !streaming && streamAllowed {
                    streaming = true
                    n = read(fd, chunk.baseAddress, chunk.count)
                }
                if n > 0 {
                    guard bytes.count + n <= limit else {
                        failure = EFBIG
                        return
                    }
                    if bytes.isEmpty { bytes.reserveCapacity(n < chunk.count ? n : 4 * chunk.count) }
                    bytes.append(contentsOf: UnsafeBufferPointer(rebasing: chunk[..<n]))
                    offset += n
                    if sysfs && n < chunk.count { return }
                } else if n == 0 {
                    return
                } else if errno != EINTR {
                    failure = errno
                    return
                }
            }
        }
        if streaming { seekable = false }
        if failure == EFBIG { throw tooLarge(fullPath, limit) }
        if failure != 0 { throw .unreadable(path: fullPath, errno: failure) }
        return bytes
    }
}

extension FSRoot {
    fileprivate static func tooLarge(_ path: String, _ limit: Int) -> ProbeError {
        .malformed(path: path, line: 0, reason: "larger than \(limit >= 1 << 20 ? "\(limit >> 20) MiB" : "\(limit >> 10) KiB"), not read")
    }

    /// The most an attribute is read to: sysfs makes one in a page (4 KiB).
    public static let maxAttributeBytes = 64 << 10
}

/// The kernel filesystems whose files make their text anew when read
/// from offset 0, so that an open file can be read again.
private enum KernelFilesystem {
    case proc, sysfs, cgroup

    /// The filesystem `fd` is on, if it is one of these (`fstatfs`).
    init?(of fd: Int32) {
        switch linux_probes_filesystem_type(fd) {
        case 0x9fa0: self = .proc            // PROC_SUPER_MAGIC
        case 0x6265_6572: self = .sysfs      // SYSFS_MAGIC
        case 0x6367_7270: self = .cgroup     // CGROUP2_SUPER_MAGIC
        default: return nil
        }
    }
}

extension Result<[UInt8], ProbeError> {
    /// Whether a file read with this result is worth holding open: it was
    /// read, or it answered what it will answer again (EINVAL from the
    /// speed of a link that is down, ENODATA, EOPNOTSUPP). Anything else
    /// (ENODEV from a device that went away) is opened anew next time.
    fileprivate var isKept: Bool {
        switch self {
        case .success: true
        case .failure(.unreadable(_, let code)): code == EINVAL || code == ENODATA || code == EOPNOTSUPP
        case .failure: false
        }
    }
}

/// Open kernel files by absolute path, at most `capacity`; a file past
/// that is read and closed as without a cache. Reads go through the lock:
/// a root is one monitor's, polled on one queue, so it is never contended.
private final class OpenFiles: Sendable {
    private struct File {
        var fd: Int32
        var sysfs: Bool
    }

    private let files = Mutex<[String: File]>([:])
    let capacity: Int
    /// Half of the soft RLIMIT_NOFILE when the root was made: descriptors
    /// are numbered lowest first, so one numbered past this means the
    /// process has half of its allowance in use, and it is not held (an
    /// isolated runner may have `open_files: 64`).
    private let descriptorCeiling: Int32

    init(capacity: Int) {
        self.capacity = capacity
        var limit = rlimit()
        let soft = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limit) == 0 ? limit.rlim_cur : 1024
        descriptorCeiling = Int32(clamping: soft / 2)
    }

    deinit {
        files.withLock { for file in $0.values { _ = close(file.fd) } }
    }

    var count: Int { files.withLock { $0.count } }

    /// The file at `path` read again from offset 0, or nil when it is not
    /// held or its read failed (a device that went away answers ENODEV, a
    /// process that ended ESRCH): that one is closed, and the caller opens
    /// the path anew and says what is wrong with it now.
    func reread(_ path: String, atMost limit: Int) -> Result<[UInt8], ProbeError>? {
        files.withLock { files -> Result<[UInt8], ProbeError>? in
            guard let file = files[path] else { return nil }
            var seekable = false
            let result = Result { () throws(ProbeError) in
                try FSRoot.readWhole(file.fd, path: path, sysfs: file.sysfs, limit: limit, seekable: &seekable)
            }
            if result.isKept { return result }
            _ = close(file.fd)
            files[path] = nil
            return nil
        }
    }

    /// Holds `fd` for `path` if there is room; true when it is held (and
    /// is no longer the caller's to close).
    func keep(_ fd: Int32, kind: KernelFilesystem, at path: String) -> Bool {
        files.withLock { files in
            guard files.count < capacity, fd < descriptorCeiling, files[path] == nil else { return false }
            files[path] = File(fd: fd, sysfs: kind == .sysfs)
            return true
        }
    }

    func forget(prefix: String) {
        files.withLock { files in
            for (path, file) in files where path == prefix || path.hasPrefix(prefix + "/") {
                _ = close(file.fd)
                files[path] = nil
            }
        }
    }
}
