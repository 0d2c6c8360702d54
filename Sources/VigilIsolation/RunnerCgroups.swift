import Foundation
import Glibc
import VigilCore

/// cgroup v2 groups for runners with `limits:`, when the host may make them
/// (a systemd unit with `Delegate=yes`, a container with its own cgroup
/// namespace, root on a unified hierarchy). The kernel then enforces the
/// limits itself: `memory.max` (the OOM killer ends a runner over it, and
/// `memory.events` says so) and `cpu.max` (a runner over its share is
/// throttled, not ended). Where no group can be made, the host falls back to
/// setrlimit and its watchdog (`RunnerLimits`), and says why.
///
/// cgroup v2 lets only a group without processes hand controllers to its
/// children, so the host first moves itself into a leaf of its own group,
/// `vigil-host`, as systemd asks of services that delegate; runners get
/// `vigil-runner-MONITOR` beside it.
package struct RunnerCgroups: Sendable {
    /// The host's own group, under which runner groups are made.
    package let base: String

    static let hostLeaf = "vigil-host"
    /// The period of `cpu.max`, in microseconds (the kernel's default).
    static let cpuPeriod = 100_000

    /// The host's groups, prepared once per process on first use; why not, if not.
    package static let shared: Result<RunnerCgroups, Unavailable> = prepare()

    package struct Unavailable: Error, CustomStringConvertible {
        package var description: String
    }

    /// Finds the host's cgroup v2 group (from `proc`/self/cgroup and the
    /// cgroup2 mount in `proc`/self/mountinfo) and enables the memory and cpu
    /// controllers for its children. Tests pass a fixture tree as `proc`.
    static func prepare(proc: String = "/proc", pid: pid_t = getpid()) -> Result<RunnerCgroups, Unavailable> {
        guard let membership = read(proc + "/self/cgroup") else {
            return .failure(Unavailable(description: "\(proc)/self/cgroup cannot be read"))
        }
        guard let line = membership.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else {
            return .failure(Unavailable(description: "the host is in no cgroup v2 group (cgroup v1 only)"))
        }
        let relative = String(line.dropFirst(3))
        guard let mount = cgroup2Mount(mountinfo: read(proc + "/self/mountinfo") ?? "") else {
            return .failure(Unavailable(description: "no cgroup2 file system is mounted"))
        }
        let base = relative == "/" ? mount : mount + relative
        let available = words(read(base + "/cgroup.controllers"))
        let missing = ["memory", "cpu"].filter { !available.contains($0) }
        guard missing.isEmpty else {
            let which = missing.joined(separator: " and ")
            return .failure(Unavailable(description: "the \(which) controller\(missing.count > 1 ? "s are" : " is") not delegated to the host's cgroup \(base) (hybrid cgroup v1 mode, or no Delegate=yes)"))
        }
        guard access(base, W_OK) == 0 else {
            return .failure(Unavailable(description: "the host may not make groups in its cgroup \(base): \(errorText())"))
        }
        if !["memory", "cpu"].allSatisfy(words(read(base + "/cgroup.subtree_control")).contains) {
            // Only the root group may both hold processes and give controllers.
            if relative != "/" {
                let leaf = base + "/" + hostLeaf
                guard mkdir(leaf, 0o755) == 0 || errno == EEXIST else {
                    return .failure(Unavailable(description: "cannot make \(leaf): \(errorText())"))
                }
                guard write("\(pid)", to: leaf + "/cgroup.procs") else {
                    return .failure(Unavailable(description: "cannot move the host into \(leaf): \(errorText())"))
                }
            }
            guard write("+memory +cpu", to: base + "/cgroup.subtree_control") else {
                return .failure(Unavailable(description: "cannot enable the memory and cpu controllers in \(base) (other processes share the host's group?): \(errorText())"))
            }
        }
        return .success(RunnerCgroups(base: base))
    }

    /// A group for one monitor's runner, with its limits written.
    func make(monitor: String, limits: ResourceLimits) -> Result<RunnerCgroup, Unavailable> {
        let name = "vigil-runner-" + String(monitor.unicodeScalars.map {
            ($0.properties.isAlphabetic && $0.isASCII) || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" ? Character($0) : "_"
        })
        let path = base + "/" + name
        guard mkdir(path, 0o755) == 0 || errno == EEXIST else {
            return .failure(Unavailable(description: "cannot make \(path): \(Self.errorText())"))
        }
        if let memory = limits.memory {
            guard Self.write("\(memory)", to: path + "/memory.max") else {
                return .failure(Unavailable(description: "cannot write \(path)/memory.max: \(Self.errorText())"))
            }
            // No swap to hide in, and the whole runner ends together.
            _ = Self.write("0", to: path + "/memory.swap.max")
            _ = Self.write("1", to: path + "/memory.oom.group")
        }
        if let cpu = limits.cpuPercent {
            let quota = max(1_000, Int((cpu / 100 * Double(Self.cpuPeriod)).rounded()))
            guard Self.write("\(quota) \(Self.cpuPeriod)", to: path + "/cpu.max") else {
                return .failure(Unavailable(description: "cannot write \(path)/cpu.max: \(Self.errorText())"))
            }
        }
        return .success(RunnerCgroup(path: path, memory: limits.memory, oomKillsBefore: RunnerCgroup.oomKills(path)))
    }

    /// The mount point of the cgroup2 file system in mountinfo(5) text.
    static func cgroup2Mount(mountinfo: String) -> String? {
        for line in mountinfo.split(separator: "\n") {
            let halves = line.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2, halves[1].split(separator: " ").first == "cgroup2" else { continue }
            let fields = halves[0].split(separator: " ")
            guard fields.count > 4 else { continue }
            return unescapeMountPath(String(fields[4]))
        }
        return nil
    }

    /// mountinfo escapes space, tab, newline and backslash as \ooo.
    private static func unescapeMountPath(_ text: String) -> String {
        var bytes: [UInt8] = []
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "\\"), utf8.count >= 3,
               let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func read(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    private static func words(_ text: String?) -> Set<Substring> {
        Set((text ?? "").split(whereSeparator: { $0 == " " || $0 == "\n" }))
    }

    /// One write(2) of `text`, as the cgroup files want it.
    static func write(_ text: String, to path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) } == bytes.count
    }

    static func errorText() -> String { String(cString: strerror(errno)) }
}

/// One runner's cgroup.
package struct RunnerCgroup: Sendable {
    let path: String
    let memory: Int64?
    /// `oom_kill` of memory.events when the group was (re)made.
    let oomKillsBefore: Int

    /// Moves the calling process (a runner, before it loads the plugin) into the group.
    static func join(_ path: String) -> String? {
        RunnerCgroups.write("\(getpid())", to: path + "/cgroup.procs") ? nil
            : "cannot join the cgroup \(path): \(RunnerCgroups.errorText())"
    }

    /// Why the kernel ended the runner, if its memory limit did.
    func killReason() -> String? {
        guard let memory, Self.oomKills(path) > oomKillsBefore else { return nil }
        return "memory limit: the kernel ended it at its cgroup's memory.max of \(Units.formatSize(memory))"
    }

    /// Ends every process in the group at once (`cgroup.kill`, Linux 5.14):
    /// what the runner started cannot leave it. Before `remove`.
    func killAll() {
        _ = RunnerCgroups.write("1", to: path + "/cgroup.kill")
    }

    /// Removes the group once the runner in it has been reaped (the kernel
    /// may take a moment to see it empty).
    func remove() {
        for _ in 0..<50 {
            if rmdir(path) == 0 || errno == ENOENT { return }
            guard errno == EBUSY else { return }
            usleep(2_000)
        }
    }

    static func oomKills(_ path: String) -> Int {
        for line in (RunnerCgroups.read(path + "/memory.events") ?? "").split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, parts[0] == "oom_kill", let n = Int(parts[1]) { return n }
        }
        return 0
    }
}
