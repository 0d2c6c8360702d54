#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The interface files of a cgroup v2 group (Documentation/admin-guide/cgroup-v2.rst,
/// "Interface Files"), parsed leniently: a line that is not what its format
/// says is skipped and counted, never fatal, since a group's files are read
/// while the group may be going away.
public enum Cgroup {
    /// A flat-keyed file (`cpu.stat`, `memory.events`, `memory.stat`):
    /// `key value` per line. Keys the kernel adds later are kept; a line
    /// without exactly a key and a non-negative integer is skipped.
    public static func flatKeyed(_ text: String) -> (values: [String: UInt64], malformed: Int) {
        var values: [String: UInt64] = [:]
        var malformed = 0
        LineIterator.forEachLine(of: text) { bytes, fields in
            guard let key = fields.next() else { return }
            guard let value = fields.next(), fields.isAtEnd, let number = bytes.parseUInt64(value) else {
                malformed += 1
                return
            }
            values[bytes.string(key)] = number
        }
        return (values, malformed)
    }

    /// A single-value file that may say `max` (`memory.max`, `pids.max`,
    /// `memory.current`): nil when it is neither a non-negative integer nor `max`.
    public enum Limit: Sendable, Equatable {
        case max
        case value(UInt64)
    }

    /// Parses a single-value file: `max` or a number, surrounding whitespace ignored.
    public static func single(_ text: String) -> Limit? {
        let trimmed = FSRoot.trimmed(text)
        if trimmed == "max" { return .max }
        return UInt64(trimmed).map(Limit.value)
    }

    /// One device's line of `io.stat`: `MAJ:MIN key=value …`.
    public struct IOStatLine: Sendable, Equatable {
        /// The device as `MAJ:MIN`.
        public var device: String
        /// Every `key=value` with an integer value (rbytes, wbytes, rios,
        /// wios, dbytes, dios, and what iocost or newer kernels add).
        public var values: [String: UInt64]

        public init(device: String, values: [String: UInt64]) {
            self.device = device
            self.values = values
        }
    }

    /// Parses `io.stat` (nested keyed). A line whose first field is not
    /// `MAJ:MIN` is skipped and counted; a `key=value` whose value is no
    /// non-negative integer (iocost's `cost.vrate=…` decimals) is ignored.
    public static func ioStat(_ text: String) -> (lines: [IOStatLine], malformed: Int) {
        var result: [IOStatLine] = []
        var malformed = 0
        LineIterator.forEachLine(of: text) { bytes, fields in
            guard let device = fields.next() else { return }
            var cursor = FieldCursor(bytes, device)
            guard let major = cursor.upTo(UInt8(ascii: ":")), bytes.parseUInt64(major) != nil,
                  bytes.parseUInt64(cursor.position..<device.upperBound) != nil else {
                malformed += 1
                return
            }
            var values: [String: UInt64] = [:]
            while let field = fields.next() {
                var pair = FieldCursor(bytes, field)
                guard let key = pair.upTo(UInt8(ascii: "=")),
                      let number = bytes.parseUInt64(pair.position..<field.upperBound) else { continue }
                values[bytes.string(key)] = number
            }
            result.append(IOStatLine(device: bytes.string(device), values: values))
        }
        return (result, malformed)
    }

    /// A group directory's entries split into interface files and child
    /// groups (directories), each sorted; nil when the directory cannot be
    /// opened (absent, or removed since its parent was listed).
    public static func entries(_ absolutePath: String) -> (files: [String], groups: [String])? {
        guard let dir = opendir(absolutePath) else { return nil }
        defer { closedir(dir) }
        var files: [String] = []
        var groups: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name == "." || name == ".." { continue }
            let type = entry.pointee.d_type
            let isDirectory = type == UInt8(DT_DIR)
                || (type == UInt8(DT_UNKNOWN) || type == UInt8(DT_LNK)) && FSRoot.isDirectory(absolutePath + "/" + name)
            if isDirectory { groups.append(name) } else { files.append(name) }
        }
        return (files.sorted(), groups.sorted())
    }
}
