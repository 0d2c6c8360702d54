import Glibc
import LinuxProbes
import VigilKit

/// CPU, memory, I/O, task counts and pressure per control group, from the
/// cgroup v2 interface files under `cgroupfs`: what systemd-cgtop and
/// cAdvisor show, per slice and service.
///
/// Which groups: the tree under the root is walked to `depth` levels (the
/// root is level 0, `system.slice` level 1, `system.slice/ssh.service`
/// level 2), in sorted pre-order; a group is reported when its path relative
/// to the root (`/` for the root itself) matches one of `include` and none
/// of `exclude`, globs as fnmatch(3) reads them with FNM_PATHNAME (`*` stops
/// at `/`). A group that does not match is still descended into. The
/// defaults select what a systemd host's operator looks at: the root (the
/// whole machine), the top slices and scopes (`system.slice`, `user.slice`,
/// `init.scope`), the services and sub-slices in them
/// (`system.slice/nginx.service`, `user.slice/user-1000.slice`), and not
/// session scopes, user managers' units or containers' scopes, which come
/// and go and would each be a new series (add `*.slice/*.scope` for those).
///
/// At most `max_groups` groups are read per poll; the rest are counted and
/// said once in a warning. A group that vanishes between the listing and
/// the reading (a service restarted) is skipped for that poll; a group
/// without a controller's files (a controller not enabled for it, the root,
/// an older kernel without `memory.peak`) simply lacks those fields.
///
/// On a hybrid host (cgroup v1 controllers, v2 mounted at
/// `<cgroupfs>/unified`) the unified hierarchy is read: without controllers
/// it still has `cpu.stat`'s usage and PSI per group. A v1-only host is
/// unavailable.
final class CgroupsMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "cgroups", version: "1.0.0",
        summary: "CPU, memory, I/O, tasks and pressure per cgroup v2 group (systemd slices and services), from /sys/fs/cgroup",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("sample", doc: "One group's figures at poll time; a field is absent when the group lacks its file (controller not enabled, the root group, an older kernel) or the limit is `max`.", fields: [
                FieldDecl("group", .string, doc: "the group's path relative to the cgroup root, `/` for the root (`system.slice/nginx.service`)"),
                FieldDecl("cpu_usage", .double, unit: "seconds", doc: "CPU time used by the group's tasks (cpu.stat usage_usec)", counter: true),
                FieldDecl("cpu_user", .double, unit: "seconds", doc: "of which in user mode (cpu.stat user_usec)", counter: true),
                FieldDecl("cpu_system", .double, unit: "seconds", doc: "of which in kernel mode (cpu.stat system_usec)", counter: true),
                FieldDecl("cpu_periods", .int, unit: "intervals", doc: "enforcement periods elapsed while the group had a CPU limit and runnable tasks (cpu.stat nr_periods; cpu controller only)", counter: true),
                FieldDecl("cpu_throttled_periods", .int, unit: "intervals", doc: "periods in which the group was throttled by its limit (cpu.stat nr_throttled)", counter: true),
                FieldDecl("cpu_throttled", .double, unit: "seconds", doc: "time the group's tasks were throttled (cpu.stat throttled_usec)", counter: true),
                FieldDecl("memory_current", .int, unit: "bytes", doc: "memory charged to the group and its descendants: anonymous, page cache, kernel (memory.current)"),
                FieldDecl("memory_peak", .int, unit: "bytes", doc: "highest memory_current since the group was created (memory.peak, Linux 5.19+)"),
                FieldDecl("memory_max", .int, unit: "bytes", doc: "hard memory limit (memory.max); absent when unlimited (`max`)"),
                FieldDecl("swap_current", .int, unit: "bytes", doc: "swap used by the group (memory.swap.current)"),
                FieldDecl("memory_low_events", .int, unit: "events", doc: "times the group was reclaimed from though under its memory.low protection (memory.events low)", counter: true),
                FieldDecl("memory_high_events", .int, unit: "events", doc: "times the group was throttled and reclaimed for being over memory.high (memory.events high)", counter: true),
                FieldDecl("memory_max_events", .int, unit: "events", doc: "times the group reached memory.max and had to reclaim (memory.events max)", counter: true),
                FieldDecl("oom_events", .int, unit: "events", doc: "times the group hit its limit and reclaim failed: the OOM killer was invoked (memory.events oom)", counter: true),
                FieldDecl("oom_kills", .int, unit: "events", doc: "processes in the group killed by the OOM killer (memory.events oom_kill)", counter: true),
                FieldDecl("oom_group_kills", .int, unit: "events", doc: "times the whole group was killed at once (memory.oom.group; memory.events oom_group_kill, Linux 5.17+)", counter: true),
                FieldDecl("pids_current", .int, unit: "tasks", doc: "tasks (processes and threads) in the group and its descendants (pids.current)"),
                FieldDecl("pids_max", .int, unit: "tasks", doc: "task limit (pids.max); absent when unlimited (`max`)"),
                FieldDecl("cpu_pressure_some", .double, unit: "seconds", doc: "time some of the group's tasks waited for a CPU (cpu.pressure some total)", counter: true),
                FieldDecl("cpu_pressure_full", .double, unit: "seconds", doc: "time all of the group's non-idle tasks waited for a CPU at once (cpu.pressure full total, Linux 5.13+)", counter: true),
                FieldDecl("memory_pressure_some", .double, unit: "seconds", doc: "time some of the group's tasks stalled on memory: reclaim, swap-in, thrashing (memory.pressure some total)", counter: true),
                FieldDecl("memory_pressure_full", .double, unit: "seconds", doc: "time all of them stalled on memory at once (memory.pressure full total)", counter: true),
                FieldDecl("io_pressure_some", .double, unit: "seconds", doc: "time some of the group's tasks stalled on I/O (io.pressure some total)", counter: true),
                FieldDecl("io_pressure_full", .double, unit: "seconds", doc: "time all of them stalled on I/O at once (io.pressure full total)", counter: true),
                FieldDecl("cpu_pressure_some_avg10", .double, unit: "percent", doc: "share of the last 10 s some tasks waited for a CPU (cpu.pressure some avg10)"),
                FieldDecl("cpu_pressure_full_avg10", .double, unit: "percent", doc: "share of the last 10 s all non-idle tasks waited for a CPU"),
                FieldDecl("memory_pressure_some_avg10", .double, unit: "percent", doc: "share of the last 10 s some tasks stalled on memory"),
                FieldDecl("memory_pressure_full_avg10", .double, unit: "percent", doc: "share of the last 10 s all non-idle tasks stalled on memory"),
                FieldDecl("io_pressure_some_avg10", .double, unit: "percent", doc: "share of the last 10 s some tasks stalled on I/O"),
                FieldDecl("io_pressure_full_avg10", .double, unit: "percent", doc: "share of the last 10 s all non-idle tasks stalled on I/O"),
            ], policy: .samples, key: ["group"]),
            EventDecl("io", doc: "One group's I/O on one block device at poll time (io.stat; a device appears once the group has done I/O on it).", fields: [
                FieldDecl("group", .string, doc: "the group's path relative to the cgroup root, `/` for the root"),
                FieldDecl("device", .string, doc: "the block device as MAJ:MIN (`8:0`, `259:0`); /sys/dev/block/MAJ:MIN names it"),
                FieldDecl("read_bytes", .int, unit: "bytes", doc: "bytes read (rbytes)", counter: true),
                FieldDecl("write_bytes", .int, unit: "bytes", doc: "bytes written (wbytes)", counter: true),
                FieldDecl("discard_bytes", .int, unit: "bytes", doc: "bytes discarded (dbytes, Linux 5.0+)", counter: true),
                FieldDecl("reads", .int, unit: "count", doc: "read operations (rios)", counter: true),
                FieldDecl("writes", .int, unit: "count", doc: "write operations (wios)", counter: true),
                FieldDecl("discards", .int, unit: "count", doc: "discard operations (dios, Linux 5.0+)", counter: true),
            ], policy: .samples, key: ["group", "device"]),
        ])

    struct Options: DeclaredOptions {
        var cgroupfs = "/sys/fs/cgroup"
        var depth = 2
        var include: [String] = CgroupsMonitor.defaultInclude
        var exclude: [String] = []
        var maxGroups = 1000
        static let schema = OptionSchema<Options>(
            .option("cgroupfs", \.cgroupfs, doc: "Root of the cgroup v2 hierarchy (on a hybrid host, <cgroupfs>/unified is used when <cgroupfs> is v1)."),
            .option("depth", \.depth, doc: "How many levels below the root are walked (0: the root only; 2: slices and their services)."),
            .option("include", \.include, doc: "Globs on a group's path relative to the root (`/` is the root; `*` does not match `/`) to report. Default: the root, top slices and scopes, and the services and slices in a slice."),
            .option("exclude", \.exclude, doc: "Globs on group paths not to report, even when `include` matches."),
            .option("max_groups", \.maxGroups, doc: "Groups read per poll at most; the excess is counted and said once in a warning."))
    }

    /// The root, the top-level slices and scopes (system.slice, user.slice,
    /// machine.slice, init.scope), and the services and slices inside a slice.
    static let defaultInclude = ["/", "*.slice", "*.scope", "*.slice/*.service", "*.slice/*.slice"]

    private let context: MonitorContext
    private let configured: FSRoot
    private let depth: Int
    private let include: [String]
    private let exclude: [String]
    private let maxGroups: Int

    /// The v2 hierarchy actually read: `configured`, or its `unified/` on a hybrid host.
    private var root: FSRoot
    /// Whether groups left out over `max_groups` were said since start.
    private var toldSkipped = false
    /// The directories a poll lists at most, per group it may report.
    static let walkFactor = 10
    /// Files that failed to parse, said once at debug level.
    private var toldMalformed = false

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.cgroupfs.isEmpty else { throw .invalidOption("cgroupfs", "must not be empty") }
        guard options.depth >= 0 && options.depth <= 64 else {
            throw .invalidOption("depth", "must be from 0 to 64 levels, not \(options.depth)")
        }
        guard options.maxGroups >= 1 else { throw .invalidOption("max_groups", "must be at least 1, not \(options.maxGroups)") }
        for (name, list) in [("include", options.include), ("exclude", options.exclude)] {
            if let i = list.firstIndex(where: \.isEmpty) { throw .invalidOption("\(name)[\(i)]", "must not be empty") }
        }
        self.context = context
        configured = FSRoot(options.cgroupfs, keepingFilesOpen: true)
        root = configured
        depth = options.depth
        include = options.include
        exclude = options.exclude
        maxGroups = options.maxGroups
    }

    func start() throws(MonitorError) {
        toldSkipped = false
        toldMalformed = false
        root = try Self.hierarchy(configured)
        if root != configured {
            context.log(.info, "\(configured) is cgroup v1 (hybrid): reading the v2 hierarchy at \(root), where groups have CPU usage and pressure but the controllers (memory, io, pids, CPU limits) are on v1")
        }
    }

    /// The v2 hierarchy at `root`, or at `root/unified` on a hybrid host;
    /// unavailable, saying why, on a v1-only host or without cgroupfs.
    static func hierarchy(_ root: FSRoot) throws(MonitorError) -> FSRoot {
        if root.exists("cgroup.controllers") { return root }
        if root.exists("unified/cgroup.controllers") { return FSRoot(root.path("unified"), keepingFilesOpen: true) }
        guard FSRoot.isDirectory(root.root) else { throw .unavailable("\(root) does not exist: no cgroup filesystem mounted there") }
        let v1 = (FSRoot.listDirectory(root.root) ?? []).filter { name in
            ["cpu", "cpuacct", "cpu,cpuacct", "memory", "blkio", "pids", "systemd"].contains(name)
        }
        if !v1.isEmpty {
            throw .unavailable("\(root) is cgroup v1 only (\(v1.joined(separator: ", ")) hierarchies, no cgroup.controllers): this plugin reads cgroup v2; boot with systemd.unified_cgroup_hierarchy=1, or point cgroupfs at a cgroup2 mount")
        }
        throw .unavailable("\(root) is not a cgroup v2 hierarchy: it has no cgroup.controllers")
    }

    func poll() throws(MonitorError) {
        guard let top = Cgroup.entries(root.root) else {
            throw .unavailable("\(root) can no longer be read: the cgroup filesystem went away")
        }
        var read = 0
        var over = 0
        var listed = 0
        var malformed: [String] = []
        // Sorted pre-order, an explicit stack so that a deep tree costs no recursion.
        var stack: [(path: String, level: Int, listing: (files: [String], groups: [String])?)] = [("/", 0, top)]
        while let (path, level, known) = stack.popLast() {
            // The walk itself is bounded too: links back up a tree that is
            // not a real cgroupfs made it grow without end below max_groups.
            if known == nil {
                guard listed < Self.walkFactor * maxGroups else {
                    over += stack.count + 1
                    break
                }
                listed += 1
            }
            guard let listing = known ?? Cgroup.entries(root.path(path)) else { continue }  // gone since its parent was listed
            if selected(path) {
                if read < maxGroups {
                    read += 1
                    report(path, files: listing.files, malformed: &malformed)
                } else {
                    over += 1
                }
            }
            if level < depth {
                let prefix = path == "/" ? "" : path + "/"
                for name in listing.groups.reversed() { stack.append((prefix + name, level + 1, nil)) }
            }
        }
        if over > 0 && !toldSkipped {
            toldSkipped = true
            context.log(.warning, "\(over) group(s) under \(root) beyond max_groups=\(maxGroups) not reported (said once, though it may go on): raise max_groups, or narrow include, exclude or depth")
        }
        if !malformed.isEmpty && !toldMalformed {
            toldMalformed = true
            context.log(.debug, "skipped unparsable lines or values in \(malformed.prefix(5).joined(separator: ", ")) (said once)")
        }
    }

    func selected(_ path: String) -> Bool {
        include.contains { fnmatch($0, path, FNM_PATHNAME) == 0 } && !exclude.contains { fnmatch($0, path, FNM_PATHNAME) == 0 }
    }

    /// Reads one group's files and emits its events; nothing when the group
    /// vanished while being read.
    private func report(_ path: String, files: [String], malformed: inout [String]) {
        let dir = path == "/" ? "" : path + "/"
        var vanished = false
        /// The file's text, nil when it is not listed or cannot be read
        /// (gone: the group vanished; EOPNOTSUPP: PSI off for the group).
        func text(_ name: String) -> String? {
            guard files.contains(name) else { return nil }
            do {
                return try root.readText(dir + name)
            } catch {
                if case .unreadable(_, let code) = error, code == ENOENT || code == ENODEV { vanished = true }
                return nil
            }
        }
        func single(_ name: String) -> Cgroup.Limit? {
            guard let text = text(name) else { return nil }
            guard let value = Cgroup.single(text) else { malformed.append(dir + name); return nil }
            return value
        }

        var fields: [(String, Value)] = [("group", .string(path))]
        if let text = text("cpu.stat") {
            let (stat, bad) = Cgroup.flatKeyed(text)
            if bad > 0 { malformed.append(dir + "cpu.stat") }
            for (key, field) in [("usage_usec", "cpu_usage"), ("user_usec", "cpu_user"), ("system_usec", "cpu_system")] {
                if let us = stat[key] { fields.append((field, .double(Double(us) / 1e6))) }
            }
            if let n = stat["nr_periods"] { fields.append(("cpu_periods", .int(clamping: n))) }
            if let n = stat["nr_throttled"] { fields.append(("cpu_throttled_periods", .int(clamping: n))) }
            if let us = stat["throttled_usec"] { fields.append(("cpu_throttled", .double(Double(us) / 1e6))) }
        }
        for (file, field) in [("memory.current", "memory_current"), ("memory.peak", "memory_peak"),
                              ("memory.max", "memory_max"), ("memory.swap.current", "swap_current"),
                              ("pids.current", "pids_current"), ("pids.max", "pids_max")] {
            if case .value(let n) = single(file) { fields.append((field, .int(clamping: n))) }
        }
        if let text = text("memory.events") {
            let (events, bad) = Cgroup.flatKeyed(text)
            if bad > 0 { malformed.append(dir + "memory.events") }
            for (key, field) in [("low", "memory_low_events"), ("high", "memory_high_events"), ("max", "memory_max_events"),
                                 ("oom", "oom_events"), ("oom_kill", "oom_kills"), ("oom_group_kill", "oom_group_kills")] {
                if let n = events[key] { fields.append((field, .int(clamping: n))) }
            }
        }
        var averages: [(String, Value)] = []
        for resource in ["cpu", "memory", "io"] {
            guard let text = text(resource + ".pressure") else { continue }
            guard let pressure = try? Pressure.parse(text, path: root.path(dir + resource + ".pressure")) else {
                malformed.append(dir + resource + ".pressure")
                continue
            }
            fields.append(("\(resource)_pressure_some", .double(Double(pressure.some.total) / 1e6)))
            averages.append(("\(resource)_pressure_some_avg10", .double(pressure.some.avg10)))
            if let full = pressure.full {
                fields.append(("\(resource)_pressure_full", .double(Double(full.total) / 1e6)))
                averages.append(("\(resource)_pressure_full_avg10", .double(full.avg10)))
            }
        }
        fields += averages
        var devices: [Cgroup.IOStatLine] = []
        if let text = text("io.stat") {
            let (lines, bad) = Cgroup.ioStat(text)
            if bad > 0 { malformed.append(dir + "io.stat") }
            devices = lines
        }
        // Gone while being read: what was read is of a group that no longer exists.
        if vanished && !FSRoot.isDirectory(root.path(path)) { return }

        context.emit("sample", fields: fields)
        for device in devices {
            var io: [(String, Value)] = [("group", .string(path)), ("device", .string(device.device))]
            for (key, field) in [("rbytes", "read_bytes"), ("wbytes", "write_bytes"), ("dbytes", "discard_bytes"),
                                 ("rios", "reads"), ("wios", "writes"), ("dios", "discards")] {
                if let n = device.values[key] { io.append((field, .int(clamping: n))) }
            }
            context.emit("io", fields: io)
        }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(CgroupsMonitor.self, a, r) }
