#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An error raised while reading or parsing a kernel interface file.
public enum ProbeError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The file could not be opened or read; `errno` is the C error code.
    case unreadable(path: String, errno: Int32)
    /// The file was read but its content is not in the expected format.
    /// `line` is 1-based; 0 means the problem concerns the file as a whole.
    case malformed(path: String, line: Int, reason: String)

    /// The path of the file the error concerns.
    public var path: String {
        switch self {
        case .unreadable(let path, _), .malformed(let path, _, _):
            return path
        }
    }

    /// True when the error means "this interface does not exist or is not
    /// supported here" (`ENOENT`, `ENOTDIR`, `EOPNOTSUPP`), e.g. PSI files on a
    /// kernel built without `CONFIG_PSI` or booted with `psi=0`.
    public var isUnavailable: Bool {
        guard case .unreadable(_, let code) = self else { return false }
        return code == ENOENT || code == ENOTDIR || code == EOPNOTSUPP
    }

    /// A one-line human readable message, e.g.
    /// `cannot read /proc/stat: No such file or directory` or
    /// `/proc/stat:3: expected at least 4 numbers after 'cpu0', found 2`.
    public var description: String {
        switch self {
        case .unreadable(let path, let code):
            return "cannot read \(path): \(Self.errorText(code))"
        case .malformed(let path, let line, let reason):
            return line > 0 ? "\(path):\(line): \(reason)" : "\(path): \(reason)"
        }
    }

    private static func errorText(_ code: Int32) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }
}
