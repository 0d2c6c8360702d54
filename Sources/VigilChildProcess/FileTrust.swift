import Glibc

/// Whether a file may be trusted with the host's privileges: the rules the
/// loader applies to a plugin before dlopen, and a plugin that runs other
/// programs (a Nagios check, a munin plugin) to each program before it runs
/// it. One set of rules for both: a program the host runs is code of the
/// host's as much as a plugin is.
package enum FileTrust {
    /// Who may own a trusted file and every directory above it: root and the
    /// user this process runs as (osquery's rule for its extensions).
    package static func defaultOwners() -> [uid_t] {
        let me = geteuid()
        return me == 0 ? [0] : [0, me]
    }

    package struct Problem: Sendable {
        package enum Rule: Sendable { case writable, owner }
        package var rule: Rule
        package var text: String
        /// What the operator does about it.
        package var fix: String
    }

    /// The rules, in this order, each reported once:
    ///
    /// - the file is not writable by group or others, and belongs to one of
    ///   `owners`;
    /// - its directory is not writable by group or others, sticky or not (in
    ///   a world-writable directory such as /tmp anyone can put a file beside
    ///   it), and belongs to one of `owners`;
    /// - every directory above, up to /, belongs to one of `owners`, and is
    ///   not writable by group or others unless it has the sticky bit (as
    ///   /tmp has: there only an entry's owner, or the directory's owner, can
    ///   rename or remove the entry, and the entry below is itself checked),
    ///   so that no one else can swap any part of the path.
    ///
    /// `real` has no symlink left in it (`realPath(of:)`); `file` is its stat,
    /// taken on the descriptor that will be used where there is one.
    package static func problems(real: String, file: stat, owners: [uid_t], noun: String = "file") -> [Problem] {
        var problems: [Problem] = []
        let writable = S_IWGRP | S_IWOTH
        let trusted = trustedText(owners)
        if file.st_mode & writable != 0 {
            problems.append(Problem(rule: .writable, text: "writable by group or others (mode \(octal(file.st_mode)))",
                                    fix: "chmod go-w it"))
        }
        if !owners.contains(file.st_uid) {
            problems.append(Problem(rule: .owner, text: "owned by \(userName(file.st_uid)), not by \(trusted)", fix: "chown it"))
        }
        var dir = parent(of: real)
        var immediate = true
        while true {
            var st = stat()
            if lstat(dir, &st) != 0 {
                problems.append(Problem(rule: .owner, text: "cannot check its directory \(dir): \(errorText())",
                                        fix: "make the directory readable"))
                break
            }
            if st.st_mode & writable != 0 && (immediate || st.st_mode & S_ISVTX == 0) {
                let sticky = st.st_mode & S_ISVTX != 0 ? ", sticky" : ""
                let text = immediate
                    ? "its directory \(dir) is writable by group or others (mode \(octal(st.st_mode))\(sticky)): anyone can put a \(noun) there"
                    : "directory \(dir) above it is writable by group or others and not sticky (mode \(octal(st.st_mode))): anyone can replace the path"
                problems.append(Problem(rule: .writable, text: text, fix: "chmod go-w \(dir)"))
            }
            if !owners.contains(st.st_uid) {
                problems.append(Problem(rule: .owner, text: "\(immediate ? "its directory" : "directory") \(dir) \(immediate ? "" : "above it ")is owned by \(userName(st.st_uid)), not by \(trusted)",
                                        fix: "chown \(dir)"))
            }
            if dir == "/" { break }
            dir = parent(of: dir)
            immediate = false
        }
        return problems
    }

    /// realpath(3): the path with every symlink, `.` and `..` resolved;
    /// nil when it cannot be resolved (errno says why).
    package static func realPath(of path: String) -> String? {
        realpath(path, nil).map { p in defer { free(p) }; return String(cString: p) }
    }

    package static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    package static func octal(_ mode: mode_t) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    package static func trustedText(_ owners: [uid_t]) -> String {
        owners.count == 1 ? "root (the user vigil runs as)"
            : "root or \(userName(owners[1])) (the user vigil runs as)"
    }

    package static func userName(_ uid: uid_t) -> String {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 1024)
        if getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, let result, let name = result.pointee.pw_name {
            return "\(String(cString: name)) (uid \(uid))"
        }
        return "uid \(uid)"
    }

    static func errorText() -> String { String(cString: strerror(errno)) }
}
