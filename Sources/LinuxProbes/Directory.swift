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

    /// Whether `absolutePath` is a directory (or a symlink to one).
    public static func isDirectory(_ absolutePath: String) -> Bool {
        var st = stat()
        return stat(absolutePath, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
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
            return .text(FSRoot.trimmed(try readText(relative)))
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
        return FSRoot.trimmed(try root.readText(dir + "/" + name))
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
