/// Where a manifest's files come from. `VigilCore` reads no files itself: the
/// loader asks a source for the main manifest, for the directories its
/// `include:` patterns look into, and for the fragments they match. The CLI
/// and the runtime pass one that reads the file system (`FileManifestSource`
/// in VigilHost); tests pass an `InMemoryManifestSource`.
///
/// A source must never block or spend without bound on what it is asked:
/// it reads at most `limit + 1` bytes of a file and lists at most
/// `limit + 1` names of a directory, so the loader can tell "past the limit"
/// from "at the limit" and report it.
public protocol ManifestSource: Sendable {
    /// The bytes of the file at `path`, at most `limit + 1` of them.
    /// `fragment`: the file was named by an `include:` pattern, and must be a
    /// regular file (not a directory, a device, a FIFO or a socket: opening a
    /// FIFO would wait for a writer, and /dev/zero never ends); the main
    /// manifest may be any readable file (`vigil run <(generate)`).
    func read(_ path: String, limit: Int, fragment: Bool) throws(ManifestSourceError) -> ManifestSourceFile

    /// The names in the directory `path` (without `.` and `..`), in any
    /// order, at most `limit + 1` of them.
    func list(_ directory: String, limit: Int) throws(ManifestSourceError) -> [String]
}

/// One file as a source read it.
public struct ManifestSourceFile: Sendable {
    public var bytes: [UInt8]
    /// What makes this file itself, whatever the path it was reached by
    /// (device and inode on a file system; the path in memory): a file that two
    /// patterns match, or that is the main manifest, is read once.
    public var identity: String

    public init(bytes: [UInt8], identity: String) {
        self.bytes = bytes
        self.identity = identity
    }
}

/// Why a source could not read a file or list a directory, in words that
/// follow the path: "no such file", "it is a directory", "not a regular file
/// (a character device)", "too many levels of symbolic links".
public struct ManifestSourceError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        case notFound
        case isDirectory
        case notRegularFile
        case notDirectory
        case other
    }

    public var code: Code
    public var reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { reason }
}

/// Files and directories held in memory: for tests, and for callers that
/// build a manifest's files themselves. Directories are implied by the
/// files' paths (`/etc/vigil/conf.d/a.yaml` makes `/etc/vigil/conf.d` a
/// directory holding `a.yaml`); `directories` adds empty ones.
public struct InMemoryManifestSource: ManifestSource {
    public var files: [String: [UInt8]]
    public var directories: Set<String>

    public init(files: [String: String] = [:], directories: Set<String> = []) {
        self.files = files.mapValues { Array($0.utf8) }
        self.directories = directories
    }

    public init(bytes: [String: [UInt8]], directories: Set<String> = []) {
        self.files = bytes
        self.directories = directories
    }

    private func isDirectory(_ path: String) -> Bool {
        let prefix = path.hasSuffix("/") ? path : path + "/"
        return directories.contains(path) || files.keys.contains { $0.hasPrefix(prefix) }
            || directories.contains { $0.hasPrefix(prefix) }
    }

    public func read(_ path: String, limit: Int, fragment: Bool) throws(ManifestSourceError) -> ManifestSourceFile {
        guard let bytes = files[path] else {
            throw isDirectory(path) ? ManifestSourceError(.isDirectory, "it is a directory") : ManifestSourceError(.notFound, "no such file")
        }
        return ManifestSourceFile(bytes: Array(bytes.prefix(limit + 1)), identity: path)
    }

    public func list(_ directory: String, limit: Int) throws(ManifestSourceError) -> [String] {
        guard isDirectory(directory) else {
            throw files[directory] != nil ? ManifestSourceError(.notDirectory, "not a directory") : ManifestSourceError(.notFound, "no such directory")
        }
        let prefix = directory.hasSuffix("/") ? directory : directory + "/"
        var names = Set<String>()
        for path in Array(files.keys) + Array(directories) where path.hasPrefix(prefix) {
            let rest = path.dropFirst(prefix.count)
            guard let first = rest.split(separator: "/", omittingEmptySubsequences: true).first else { continue }
            names.insert(String(first))
            if names.count > limit { break }
        }
        return Array(names)
    }
}
