import Foundation
import Glibc
import VigilCore

/// A manifest and its fragments as the file system has them: what `vigil
/// run`, `vigil validate` and a reload read a manifest with
/// (`ManifestLoader(file:environment:).load(from: FileManifestSource())`).
///
/// Nothing a path names can make it block or spend without bound: a file is
/// read to at most `limit + 1` bytes, a directory listed to at most
/// `limit + 1` names; the manifest and every fragment are opened without
/// blocking (open(2) of a FIFO waits for a writer, and a host waiting there
/// could not stop) and must be regular files, so /dev/zero, a FIFO, a
/// socket or a directory is an error at once, not a hang; a symlink loop is
/// the kernel's ELOOP.
public struct FileManifestSource: ManifestSource {
    public init() {}

    public func read(_ path: String, limit: Int, fragment: Bool) throws(ManifestSourceError) -> ManifestSourceFile {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { throw Self.failure(errno, file: true) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw Self.failure(errno, file: true) }
        let type = st.st_mode & S_IFMT
        if type == S_IFDIR { throw ManifestSourceError(.isDirectory, "it is a directory") }
        if type != S_IFREG {
            throw ManifestSourceError(.notRegularFile, "not a regular file (\(Self.typeName(type)))")
        }
        var bytes: [UInt8] = []
        let want = limit + 1
        var chunk = [UInt8](repeating: 0, count: min(want, 64 << 10))
        while bytes.count < want {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, min($0.count, want - bytes.count)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Self.failure(errno, file: true)
            }
            if n == 0 { break }
            bytes += chunk[0..<n]
        }
        return ManifestSourceFile(bytes: bytes, identity: "\(st.st_dev):\(st.st_ino)")
    }

    public func list(_ directory: String, limit: Int) throws(ManifestSourceError) -> [String] {
        guard let dir = opendir(directory) else { throw Self.failure(errno, file: false) }
        defer { closedir(dir) }
        var names: [String] = []
        while names.count <= limit {
            errno = 0
            guard let entry = readdir(dir) else {
                if errno != 0 { throw Self.failure(errno, file: false) }
                break
            }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    private static func failure(_ code: Int32, file: Bool) -> ManifestSourceError {
        switch code {
        case ENOENT: ManifestSourceError(.notFound, file ? "no such file" : "no such directory")
        case ENOTDIR: ManifestSourceError(file ? .notFound : .notDirectory, file ? "a part of its path is not a directory" : "not a directory")
        case EISDIR: ManifestSourceError(.isDirectory, "it is a directory")
        default: ManifestSourceError(.other, String(cString: strerror(code)))
        }
    }

    private static func typeName(_ type: mode_t) -> String {
        switch type {
        case S_IFCHR: "a character device"
        case S_IFBLK: "a block device"
        case S_IFIFO: "a FIFO"
        case S_IFSOCK: "a socket"
        case S_IFLNK: "a symbolic link"
        default: "not a file"
        }
    }
}

extension FileManifestSource {
    /// What a manifest's `${VAR}` are read from: this process's environment,
    /// with `STATE_DIRECTORY` given where systemd did not set it (a run by
    /// hand): `/var/lib/vigil` as root, else the user's own state directory,
    /// `$XDG_STATE_HOME/vigil` or `~/.local/state/vigil`. So the installed
    /// manifest (`${STATE_DIRECTORY:-/var/lib/vigil}/events.jsonl`) run by
    /// a user writes under that user's home, not where only the service may.
    public static func environment(_ base: [String: String] = ProcessInfo.processInfo.environment,
                                   isRoot: Bool = geteuid() == 0) -> [String: String] {
        var environment = base
        if environment["STATE_DIRECTORY", default: ""].isEmpty {
            if isRoot {
                environment["STATE_DIRECTORY"] = "/var/lib/vigil"
            } else if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") {
                environment["STATE_DIRECTORY"] = state + "/vigil"
            } else if let home = environment["HOME"], home.hasPrefix("/") {
                environment["STATE_DIRECTORY"] = home + "/.local/state/vigil"
            }
        }
        return environment
    }
}
