import Glibc

extension FSRoot {
    /// The names in the directory `relative` under the root, sorted, without
    /// `.` and `..`; nil when it cannot be opened (absent, not a directory).
    public func list(_ relative: String) -> [String]? {
        FSRoot.listDirectory(path(relative))
    }

    /// The names in the directory at `absolutePath` (following a symlink to
    /// it), sorted, without `.` and `..`; nil when it cannot be opened.
    public static func listDirectory(_ absolutePath: String) -> [String]? {
        guard let dir = opendir(absolutePath) else { return nil }
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

    /// The entries of the directory `relative` under the root, sorted by
    /// name, without `.` and `..`, as readdir gives them (no stat of each);
    /// nil when it cannot be opened.
    public func entries(_ relative: String) -> [DirectoryEntry]? {
        guard let dir = opendir(path(relative)) else { return nil }
        defer { closedir(dir) }
        var entries: [DirectoryEntry] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard name != "." && name != ".." else { continue }
            let kind: DirectoryEntry.Kind = switch Int32(entry.pointee.d_type) {
            case Int32(DT_DIR): .directory
            case Int32(DT_LNK): .symlink
            case Int32(DT_UNKNOWN): .unknown
            default: .other
            }
            entries.append(DirectoryEntry(name: name, inode: UInt64(entry.pointee.d_ino), kind: kind))
        }
        return entries.sorted { $0.name < $1.name }
    }

    /// Whether `absolutePath` is a directory (or a symlink to one).
    public static func isDirectory(_ absolutePath: String) -> Bool {
        var st = stat()
        return stat(absolutePath, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
    }

    /// A kernel file's bytes as text without the ASCII whitespace around it
    /// (a sysfs attribute ends in a newline): what `trimmed` makes of the
    /// text, but cut on the bytes, before a String is made.
    public static func trimmedText(_ bytes: [UInt8]) -> String {
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (b >= 0x09 && b <= 0x0D) }
        var end = bytes.count
        while end > 0, isSpace(bytes[end - 1]) { end -= 1 }
        var start = 0
        while start < end, isSpace(bytes[start]) { start += 1 }
        let text = String(decoding: bytes[start..<end], as: UTF8.self)
        // Text that begins or ends with another kind of space (U+00A0…) is
        // trimmed as before.
        if let first = text.unicodeScalars.first, first.value >= 0x80, first.properties.isWhitespace { return trimmed(text) }
        if let last = text.unicodeScalars.last, last.value >= 0x80, last.properties.isWhitespace { return trimmed(text) }
        return text
    }

    /// A sysfs attribute's text without the surrounding whitespace (the
    /// kernel ends each with a newline).
    public static func trimmed(_ text: String) -> String {
        var s = Substring(text)
        while let c = s.last, c.isWhitespace { s = s.dropLast() }
        while let c = s.first, c.isWhitespace { s = s.dropFirst() }
        return String(s)
    }
}

/// One entry of a directory as readdir gives it (`FSRoot.entries`).
public struct DirectoryEntry: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        case directory, symlink, other
        /// The filesystem does not say (d_type DT_UNKNOWN): stat to know.
        case unknown
    }

    public var name: String
    /// The entry's own inode (a symlink's, not its target's).
    public var inode: UInt64
    public var kind: Kind
}

/// One sysfs attribute as a monitor sees it: its text, not there, or there
/// but unreadable (a driver answering EIO, a device going away mid-read).
public enum Attribute: Sendable {
    case text(String)
    case absent
    case failed(ProbeError)
}

extension FSRoot {
    /// The attribute `relative`, trimmed; `.absent` when the file (or a
    /// directory on its path) does not exist.
    public func attribute(_ relative: String) -> Attribute {
        do {
            return .text(FSRoot.trimmedText(try readBytes(relative, atMost: FSRoot.maxAttributeBytes)))
        } catch {
            if case .unreadable(_, let code) = error, code == ENOENT || code == ENOTDIR { return .absent }
            return .failed(error)
        }
    }
}

/// A sysfs device directory listed once, read attribute by attribute: one
/// that is not listed is absent (nil); one listed but unreadable, or not
/// parsing, throws, so that a monitor skips the device this poll.
public struct AttributeDirectory: Sendable {
    public let root: FSRoot
    public let dir: String
    public let files: [String]

    public init(root: FSRoot, dir: String) {
        self.root = root
        self.dir = dir
        self.files = FSRoot.listDirectory(root.path(dir)) ?? []
    }

    public func text(_ name: String) throws(ProbeError) -> String? {
        guard files.contains(name) else { return nil }
        return FSRoot.trimmedText(try root.readBytes(dir + "/" + name, atMost: FSRoot.maxAttributeBytes))
    }

    public func int(_ name: String) throws(ProbeError) -> Int64? {
        guard let text = try text(name) else { return nil }
        guard let value = Int64(text) else { throw malformed(name, "expected an integer, found '\(text)'") }
        return value
    }

    public func double(_ name: String) throws(ProbeError) -> Double? {
        guard let text = try text(name) else { return nil }
        guard let value = Double(text), value.isFinite else { throw malformed(name, "expected a number, found '\(text)'") }
        return value
    }

    public func missing(_ name: String) -> ProbeError { .unreadable(path: root.path(dir + "/" + name), errno: ENOENT) }

    public func malformed(_ name: String, _ reason: String) -> ProbeError {
        .malformed(path: root.path(dir + "/" + name), line: 0, reason: reason)
    }
}
