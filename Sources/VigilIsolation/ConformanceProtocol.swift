import CVigilPlugin
import Glibc
import Synchronization
import VigilABI

/// The child → parent stream: one line per step, tab-separated fields, with
/// backslash, tab, CR and LF escaped in each field.
///
///     plugin  NAME  VERSION  ABI  MODE  PATH     what was loaded (MODE: "polled 1s" or "push")
///     step    CHECK                              the check now running
///     begin   CALL  INSTANCE                     a call into the plugin is about to be made
///     end     CALL  INSTANCE  NS  STATUS  MESSAGE   …and returned, after NS nanoseconds
///     check   CHECK  pass|fail|skip|info  DETAIL
///     refused REASON                             the loader refused the plugin
///     unusable REASON                            the options given cannot be used
///     done
///
/// INSTANCE is "-" for calls outside an instance (`load`: dlopen and the entry point).
package enum ConformanceProtocol {
    static func escape(_ field: String) -> String {
        // Bytes, not Characters: 200,000 lines of a large validate went through here.
        guard field.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\t") || $0 == 10 || $0 == 13 })
        else { return field }
        var out = ""
        for c in field.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func unescape(_ field: Substring) -> String {
        // A byte search (`contains("\\")` on a Substring is Foundation's range(of:)).
        guard field.utf8.contains(UInt8(ascii: "\\")) else { return String(field) }
        var out = ""
        var escaped = false
        for c in field.unicodeScalars {
            if escaped {
                switch c {
                case "t": out += "\t"
                case "n": out += "\n"
                case "r": out += "\r"
                default: out.unicodeScalars.append(c)
                }
                escaped = false
            } else if c == "\\" {
                escaped = true
            } else {
                out.unicodeScalars.append(c)
            }
        }
        return out
    }

    package static func split(_ line: Substring) -> [String] {
        line.utf8.split(separator: UInt8(ascii: "\t"), omittingEmptySubsequences: false).map { unescape(Substring($0)) }
    }

    package static func statusName(_ status: vigil_status) -> String { statusSymbol(status) }
}

/// Writes protocol lines to the parent, each with one write(2) where it fits
/// in a pipe's atomic size, so that a line is never half there when the
/// process dies.
package final class ProtocolWriter: Sendable {
    private let fd: Int32
    /// Held for each line's writes, so that lines from several threads never interleave.
    private let lock = Mutex(())

    package init(fd: Int32) { self.fd = fd }

    package func send(_ fields: String...) {
        var line = fields.map(ConformanceProtocol.escape).joined(separator: "\t")
        if line.utf8.count > 3_900 {
            // Cut on a character boundary, well under PIPE_BUF (4096).
            var cut = ""
            for c in line {
                if cut.utf8.count + c.utf8.count > 3_880 { break }
                cut.append(c)
            }
            line = cut + "…"
        }
        write(line)
    }

    /// Like `send`, for a line that is no use cut (a plugin's description):
    /// sent whole, in as many writes as it takes. A process that dies
    /// meanwhile leaves a torn line, which its reader refuses.
    package func sendWhole(_ fields: String...) {
        write(fields.map(ConformanceProtocol.escape).joined(separator: "\t"))
    }

    private func write(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        lock.withLock { _ in
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    return  // the parent is gone: nobody to tell
                }
                offset += n
            }
        }
    }
}
