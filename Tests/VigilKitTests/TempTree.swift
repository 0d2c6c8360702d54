import Glibc

/// A copy of fixture trees in a fresh temporary directory, removed when the
/// tree is released: what the catalogue's tests change between polls.
class TempTree {
    let path: String

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    var proc: String { path + "/proc" }
    var sys: String { path + "/sys" }

    /// An empty tree.
    init() throws {
        var template = Array("/tmp/vigil-tree-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw Failure(description: "mkdtemp failed") }
        path = String(cString: made)
    }

    /// A copy of `source`.
    convenience init(copying source: String) throws {
        try self.init()
        try Self.copy(source, to: path)
    }

    deinit { try? remove(path) }

    /// Copies directories, small files and symlinks over `target`, merging directories.
    static func copy(_ source: String, to target: String) throws {
        if access(target, F_OK) != 0, mkdir(target, 0o755) != 0 { throw Failure(description: "mkdir \(target) failed") }
        for name in entries(source) {
            let from = source + "/" + name, to = target + "/" + name
            var info = stat()
            guard lstat(from, &info) == 0 else { throw Failure(description: "lstat \(from) failed") }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: try copy(from, to: to)
            case S_IFLNK:
                var buffer = [CChar](repeating: 0, count: 4096)
                let n = readlink(from, &buffer, buffer.count - 1)
                guard n > 0 else { throw Failure(description: "readlink \(from) failed") }
                let link = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                guard symlink(link, to) == 0 else { throw Failure(description: "symlink \(to) failed") }
            default: try write(to, bytes: read(from))
            }
        }
    }

    /// Writes `text` and a newline, as sysfs shows attributes.
    func write(_ file: String, _ text: String) throws {
        try Self.write(file, bytes: Array((text + "\n").utf8))
    }

    /// Removes a file, a link or a whole directory.
    func remove(_ target: String) throws {
        var info = stat()
        guard lstat(target, &info) == 0 else { return }
        if info.st_mode & S_IFMT == S_IFDIR {
            for name in Self.entries(target) { try remove(target + "/" + name) }
            guard rmdir(target) == 0 else { throw Failure(description: "rmdir \(target) failed") }
        } else {
            guard unlink(target) == 0 else { throw Failure(description: "unlink \(target) failed") }
        }
    }

    static func entries(_ directory: String) -> [String] {
        guard let dir = opendir(directory) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    static func read(_ file: String) throws -> [UInt8] {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(description: "open \(file) failed") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = Glibc.read(fd, &buffer, buffer.count)
            guard n > 0 else { break }
            bytes += buffer[0..<n]
        }
        return bytes
    }

    static func write(_ file: String, bytes: [UInt8]) throws {
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw Failure(description: "open \(file) for writing failed") }
        defer { close(fd) }
        guard Glibc.write(fd, bytes, bytes.count) == bytes.count else { throw Failure(description: "write \(file) failed") }
    }
}

/// Sends datagrams to a unix socket: recorded uevents to a plugin's `uevent_socket`.
final class UeventSender {
    let fd: Int32
    let path: String

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TempTree.Failure(description: "socket failed") }
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in path.utf8.enumerated() { raw[i] = b }
        }
        let n = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
        }
        guard n == bytes.count else { throw TempTree.Failure(description: "sendto \(path): \(String(cString: strerror(errno)))") }
    }
}
