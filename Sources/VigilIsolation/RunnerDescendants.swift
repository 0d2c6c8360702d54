import VigilChildProcess
import Foundation
import Glibc

/// What a runner's plugin started (collectd's exec plugin forks `/bin/sh
/// script.sh`) ends with the runner, however the runner ended: a `kill -9`
/// of the runner must not leave them running, reparented to init. The host
/// ends them when it sees its runner end, before it reaps it.
///
/// Why this way. Three layers, each catching what the one before cannot,
/// and the last two need nothing of the machine (no cgroup delegation, no
/// privilege):
///
/// 1. The runner's cgroup, when it has one (`limits:` where the host may make
///    groups): `cgroup.kill` ends every process in it at once, and no
///    unprivileged process can leave a cgroup. Most runners have none.
/// 2. The runner's process group: the runner leads one of its own (`Spawn`'s
///    `newProcessGroup`) and what it starts stays in it unless it moves, so
///    one `kill(-group, SIGKILL)` ends it all. Sent once the runner has
///    ended and before it is reaped: the zombie holds its pid, so the group's
///    id cannot be another's yet.
/// 3. A tag in the runner's environment (`VIGIL_RUNNER_ID`, random for each
///    runner), which every descendant inherits through fork and exec unless
///    it replaces its environment: the host looks through /proc for it and
///    kills what carries it, again until none is left. This ends what left
///    the group (`setsid`, a daemon's double fork), whoever its parent now is.
///
/// Not chosen: making the host a child subreaper (PR_SET_CHILD_SUBREAPER).
/// The orphans would come back to the host, but adoption does not say whose
/// orphan a process is: a daemon that a rule's action started would be
/// adopted too and must not be killed, and the host would have to reap
/// every adopted process without `waitpid(-1)` (its children have owners
/// who reap them). A pid namespace per runner (whose init's death ends all
/// in it) needs privilege or a user namespace, which changes the ids the
/// plugin sees. A process that both leaves the group and replaces its
/// environment escapes all but the cgroup.
package struct RunnerDescendants: Sendable {
    /// The environment variable that carries the tag.
    static let variable = "VIGIL_RUNNER_ID"

    /// The runner's pid, which is its process group's id.
    let group: pid_t
    /// This runner's value of `variable`.
    let tag: String
    let cgroup: RunnerCgroup?
    /// Where processes are looked for.
    var proc = "/proc"

    /// A tag no other runner has: the host's pid and 64 random bits, always
    /// `tagLength` characters (a runner forked by the fork server writes its
    /// tag over a placeholder as long, `RunnerForkServer`).
    static func newTag() -> String {
        func padded(_ text: String, _ width: Int) -> String {
            String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return padded(String(getpid()), 10) + "-" + padded(String(UInt64.random(in: 1...UInt64.max), radix: 16), 16)
    }

    /// The length of every tag.
    static let tagLength = 27

    /// Ends every descendant still running; how many carried the tag. Call
    /// after the runner has ended and before it is reaped.
    @discardableResult
    func killAll() -> Int {
        cgroup?.killAll()
        _ = kill(-group, SIGKILL)
        var killed = 0
        // A tagged process may be forking as it is killed: its child carries
        // the tag too, and the next look finds it. A killed process has no
        // environment to read once it is a zombie, so it is not found again.
        for _ in 0..<100 {
            let found = tagged()
            if found.isEmpty { break }
            for pid in found { _ = kill(pid, SIGKILL) }
            killed += found.count
            usleep(1_000)
        }
        return killed
    }

    /// The processes whose environment carries the tag.
    func tagged() -> [pid_t] {
        guard let dir = opendir(proc) else { return [] }
        defer { closedir(dir) }
        // "\0VIGIL_RUNNER_ID=tag\0" against "\0" + environ: a whole entry.
        let needle = [UInt8(0)] + Array("\(Self.variable)=\(tag)".utf8) + [0]
        let me = getpid()
        var found: [pid_t] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let pid = pid_t(name), pid > 1, pid != me else { continue }
            if environment(of: pid, into: &buffer).map({ contains($0, needle) }) == true { found.append(pid) }
        }
        return found
    }

    /// `pid`'s environment as it was given at its exec, after a NUL; nil if
    /// it cannot be read (gone, a zombie, another user's).
    private func environment(of pid: pid_t, into buffer: inout [UInt8]) -> ArraySlice<UInt8>? {
        let fd = open("\(proc)/\(pid)/environ", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        buffer[0] = 0
        var used = 1
        while true {
            if used == buffer.count {
                // Environments past 1 MiB are not read further.
                guard buffer.count < 1 << 20 else { break }
                buffer += [UInt8](repeating: 0, count: buffer.count)
            }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + used, $0.count - used) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            used += n
        }
        // A final entry without its NUL.
        if used < buffer.count { buffer[used] = 0; used += 1 }
        return used > 2 ? buffer[0..<used] : nil
    }

    /// Whether `environment` ("\0" + NUL-terminated entries) holds the
    /// entry `needle` ("\0" + entry + "\0") whole.
    private func contains(_ environment: ArraySlice<UInt8>, _ needle: [UInt8]) -> Bool {
        environment.withUnsafeBytes { h in
            needle.withUnsafeBytes { n in
                guard h.count >= n.count else { return false }
                var at = 0
                while at + n.count <= h.count {
                    // Entries start after a NUL: compare there, else skip to the next NUL.
                    if memcmp(h.baseAddress! + at, n.baseAddress!, n.count) == 0 { return true }
                    at += 1
                    while at < h.count && h[at] != 0 { at += 1 }
                }
                return false
            }
        }
    }
}
