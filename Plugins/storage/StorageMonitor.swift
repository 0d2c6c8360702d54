import Glibc
import LinuxProbes
import VigilKit

/// Space and inodes of mounted filesystems: the mounts from
/// `<procfs>/self/mountinfo`, the figures from `statvfs(3)` of each mount
/// point under `rootfs`.
///
/// Which mounts: the visible mount of each mount point (when several are
/// mounted on one point, the last line of mountinfo, the one on top), kept
/// when its mount point matches one of `paths`, matches none of `exclude`, and
/// its filesystem type matches `fs_types`. An empty `fs_types` (the default)
/// means every type except `StorageMonitor.pseudoTypes`: kernel interfaces
/// without storage (proc, sysfs, cgroup, cgroup2, devpts, devtmpfs, mqueue,
/// debugfs, tracefs, …) and read-only images that are always full (squashfs,
/// iso9660, erofs), which would otherwise be "low on space" for ever, and
/// tmpfs unless `tmpfs: true`: a server has one per logged-in user, /run,
/// /run/lock and /dev/shm, memory rather than a disk, which crowded the
/// events and the graphs (an operator's report, 2026-11-28). overlay is
/// kept: a container's overlay root is its disk. Patterns are shell globs as fnmatch(3)
/// reads them without FNM_PATHNAME, so `*` also matches `/` (`/mnt/*` covers
/// `/mnt/a/b`).
///
/// Ratios follow df(1): used = total − free, and the share of space left is
/// available / (used + available), available being what unprivileged users
/// may still write (root's reserve excluded). `low_space` is a percentage of
/// that share. A filesystem without blocks (total 0) is reported, never low.
///
/// A mount whose `statvfs` fails (gone between the two reads, EACCES, EIO, a
/// stale NFS handle) is skipped for that poll with a debug log line; it is not
/// reported as removed while it is still in mountinfo. With `mount_facts`
/// it is reported instead, with `device_error` true and no figures (as
/// node_exporter's `node_filesystem_device_error`). `statvfs` on a hung
/// network filesystem can block: the host's watchdog then warns about the poll.
///
/// Two options serve exporters that want every figure exact at each poll
/// (node_exporter's filesystem collector: `vigil`'s stand-in), both off by
/// default so that existing manifests' events do not change: `every_poll`
/// emits each mount's `usage` every poll, not only on a change of its
/// minimum change; `mount_facts` adds `readonly` and `device_error`.
/// `exclude_fs_types` leaves types out whatever `fs_types` says, so that
/// node_exporter's `--collector.filesystem.fs-types-exclude` can be written
/// as `fs_types: ["*"]` and its list.
final class StorageMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "storage", version: "1.0.0",
        summary: "Space and inodes of mounted filesystems, from /proc/self/mountinfo and statvfs",
        defaultInterval: .seconds(30),
        events: [
            EventDecl("usage", doc: "One mount's space and inodes: a snapshot of every mount on start, then a mount's event when one of its figures changed by at least its minimum change (64 MiB, 0.001, 1000 inodes) or its device or type changed; with every_poll, every poll. With mount_facts, a mount whose statvfs failed has device_error true and no figures.", fields: [
                FieldDecl("mount", .string, doc: "mount point, as in mountinfo (escapes decoded)"),
                FieldDecl("device", .string, doc: "mount source: a device, a server path or a name such as tmpfs"),
                FieldDecl("fs_type", .string, doc: "filesystem type (ext4, vfat, tmpfs, fuse.sshfs…)"),
                FieldDecl("total", .int, unit: "bytes", minChange: StorageMonitor.byteChange, doc: "size of the filesystem"),
                FieldDecl("free", .int, unit: "bytes", minChange: StorageMonitor.byteChange, doc: "free space, root's reserve included"),
                FieldDecl("available", .int, unit: "bytes", minChange: StorageMonitor.byteChange, doc: "space unprivileged users may still use"),
                FieldDecl("used_ratio", .double, unit: "ratio", minChange: 0.001, doc: "used / (used + available), as df(1); 0 without blocks"),
                FieldDecl("inodes_total", .int, unit: "inodes", doc: "inodes of the filesystem (0 where it has no fixed number)"),
                FieldDecl("inodes_free", .int, unit: "inodes", minChange: 1000, doc: "free inodes"),
                FieldDecl("readonly", .bool, doc: "mounted read-only (mount or superblock option ro); with mount_facts"),
                FieldDecl("device_error", .bool, doc: "statvfs of the mount point failed this poll (its figures are then absent); with mount_facts"),
            ], key: ["mount"]),
            EventDecl.occurrence("low_space", doc: "A mount's available share went below `low_space` percent (active: true, severity warning), or, once low, rose above `low_space` + 2 (active: false). On start, every mount that is low is reported.", fields: [
                FieldDecl("mount", .string, doc: "mount point", identity: true),
                FieldDecl("active", .bool, doc: "true: space is low; false: it recovered"),
                FieldDecl("free_percent", .double, unit: "percent", doc: "available / (used + available) × 100"),
                FieldDecl("threshold", .double, unit: "percent", doc: "the low_space option"),
                FieldDecl("available", .int, unit: "bytes", doc: "space unprivileged users may still use"),
            ]),
            EventDecl.occurrence("mount_removed", doc: "A reported mount is no longer in mountinfo (it also ends a low_space state); if it comes back, it is reported afresh.", fields: [
                FieldDecl("mount", .string, doc: "mount point"),
                FieldDecl("device", .string, doc: "its last source"),
                FieldDecl("fs_type", .string, doc: "its last filesystem type"),
            ]),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var rootfs = "/"
        var paths: [String] = ["*"]
        var fsTypes: [String] = []
        var exclude: [String] = []
        var tmpfs = false
        var lowSpace = 10.0
        var excludeFSTypes: [String] = []
        var everyPoll = false
        var mountFacts = false
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem; mounts are read from <procfs>/self/mountinfo."),
            .option("rootfs", \.rootfs, doc: "Directory the mount points are joined onto for statvfs (the host's / seen from a container, or a test tree)."),
            .option("paths", \.paths, doc: "Globs on mount points to report (fnmatch, `*` matches `/` too)."),
            .option("fs_types", \.fsTypes, doc: "Filesystem types (globs) to report; empty: all but pseudo filesystems and read-only images (proc, sysfs, cgroup2, devtmpfs, squashfs…)."),
            .option("exclude", \.exclude, doc: "Globs on mount points not to report, even when `paths` match."),
            .option("tmpfs", \.tmpfs, doc: "Report tmpfs mounts too (/run, /dev/shm, a tmpfs /tmp) when `fs_types` is empty; a non-empty `fs_types` decides by itself."),
            .option("low_space", \.lowSpace, doc: "Percent of available space below which low_space fires (0 to 100, 0: never; clears above it + 2)."),
            .option("exclude_fs_types", \.excludeFSTypes, doc: "Filesystem types (globs) never to report, even when `fs_types` matches them."),
            .option("every_poll", \.everyPoll, doc: "Emit every mount's usage at every poll, with exact figures, not only when a figure moved by its minimum change."),
            .option("mount_facts", \.mountFacts, doc: "Add readonly and device_error to usage, and report a mount whose statvfs fails (device_error true, no figures) instead of skipping it."))
    }

    /// Byte counts within 64 MiB of the last event are not a change.
    static let byteChange = 64.0 * 1_048_576
    /// How far above `low_space` a low mount must rise before it is clear.
    static let hysteresis = 2.0

    /// Filesystem types left out when `fs_types` is empty: kernel interfaces
    /// that hold no data, and read-only images that are always full.
    static let pseudoTypes: Set<String> = [
        "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts", "devtmpfs",
        "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs", "proc", "pstore", "rpc_pipefs", "securityfs",
        "selinuxfs", "sysfs", "tracefs", "ramfs", "rootfs",
        "squashfs", "iso9660", "erofs",
    ]

    private let context: MonitorContext
    private let procfs: FSRoot
    private let rootfs: FSRoot
    private let paths: [String]
    private let fsTypes: [String]
    private let exclude: [String]
    private let tmpfs: Bool
    private let lowSpace: Double
    private let excludeFSTypes: [String]
    private let everyPoll: Bool
    private let mountFacts: Bool

    /// Mounts reported since start, with what mount_removed will say about them.
    private var known: [String: (device: String, fsType: String)] = [:]
    /// Mounts in a low_space state.
    private var low: Set<String> = []
    /// Mounts whose statvfs failed last time (logged once per failing streak).
    private var failing: Set<String> = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.rootfs.isEmpty else { throw .invalidOption("rootfs", "must not be empty") }
        for (name, list) in [("paths", options.paths), ("fs_types", options.fsTypes), ("exclude", options.exclude),
                             ("exclude_fs_types", options.excludeFSTypes)] {
            if let i = list.firstIndex(where: \.isEmpty) { throw .invalidOption("\(name)[\(i)]", "must not be empty") }
        }
        guard options.lowSpace >= 0 && options.lowSpace <= 100 else {
            throw .invalidOption("low_space", "must be a percentage from 0 to 100, not \(options.lowSpace)")
        }
        self.context = context
        procfs = try .monitorRoot(options.procfs, option: "procfs")
        rootfs = FSRoot(options.rootfs)
        paths = options.paths
        fsTypes = options.fsTypes
        exclude = options.exclude
        tmpfs = options.tmpfs
        lowSpace = options.lowSpace
        excludeFSTypes = options.excludeFSTypes
        everyPoll = options.everyPoll
        mountFacts = options.mountFacts
    }

    func start() throws(MonitorError) {
        known = [:]
        low = []
        failing = []
        try procfs.require("self/mountinfo")
    }

    /// The last mountinfo read, and the mounts chosen from it.
    private var lastMounts: (text: String, selected: [MountEntry])?

    func poll() throws(MonitorError) {
        let text = try procfs.pollText("self/mountinfo")
        // The mount table seldom changes between polls: the mounts chosen
        // from the same text are those chosen last time.
        let mounts: [MountEntry]
        if let last = lastMounts, last.text == text {
            mounts = last.selected
        } else {
            let (entries, malformed) = MountEntry.parse(text)
            if !malformed.isEmpty {
                context.log(.debug, "\(procfs.path("self/mountinfo")): skipped malformed line(s) \(malformed.map(String.init).joined(separator: ", "))")
            }
            mounts = selected(entries)
            lastMounts = (text, mounts)
        }
        var present: Set<String> = []
        for mount in mounts {
            present.insert(mount.mountPoint)
            guard let space = self.space(at: mount.mountPoint) else {
                if mountFacts {
                    known[mount.mountPoint] = (mount.source, mount.fsType)
                    reportError(mount)
                }
                continue
            }
            known[mount.mountPoint] = (mount.source, mount.fsType)
            report(mount, space)
        }
        for (mountPoint, last) in known.sorted(by: { $0.key < $1.key }) where !present.contains(mountPoint) {
            known[mountPoint] = nil
            low.remove(mountPoint)
            failing.remove(mountPoint)
            context.forget("usage", key: [.string(mountPoint)])
            context.emit("mount_removed", ["mount": .string(mountPoint), "device": .string(last.device),
                                           "fs_type": .string(last.fsType)])
        }
        failing.formIntersection(present)
    }

    /// The visible mount of each mount point, in mountinfo order, filtered by the options.
    func selected(_ entries: [MountEntry]) -> [MountEntry] {
        var top: [String: Int] = [:]
        for (i, entry) in entries.enumerated() { top[entry.mountPoint] = i }
        return entries.enumerated().compactMap { i, entry in
            guard top[entry.mountPoint] == i, included(entry) else { return nil }
            return entry
        }
    }

    private func included(_ entry: MountEntry) -> Bool {
        guard paths.contains(where: { Self.matches($0, entry.mountPoint) }),
              !exclude.contains(where: { Self.matches($0, entry.mountPoint) }),
              !excludeFSTypes.contains(where: { Self.matches($0, entry.fsType) }) else { return false }
        if fsTypes.isEmpty { return !Self.pseudoTypes.contains(entry.fsType) && (tmpfs || entry.fsType != "tmpfs") }
        return fsTypes.contains { Self.matches($0, entry.fsType) }
    }

    static func matches(_ pattern: String, _ text: String) -> Bool { fnmatch(pattern, text, 0) == 0 }

    struct Space {
        var total: UInt64, free: UInt64, available: UInt64, inodes: UInt64, inodesFree: UInt64

        /// available / (used + available), as df(1) counts; nil without blocks.
        var freeShare: Double? {
            let used = total >= free ? total - free : 0
            let usable = used + available
            return usable > 0 ? Double(available) / Double(usable) : nil
        }
    }

    /// statvfs of the mount point under rootfs; nil (and a debug line, once per
    /// failing streak) when it fails.
    private func space(at mountPoint: String) -> Space? {
        let path = rootfs.path(mountPoint)
        var info = statvfs()
        var rc: Int32
        repeat { rc = statvfs(path, &info) } while rc != 0 && errno == EINTR
        guard rc == 0 else {
            let code = errno
            if failing.insert(mountPoint).inserted {
                context.log(.debug, "skipping \(mountPoint): statvfs(\(path)) failed: \(String(cString: strerror(code)))")
            }
            return nil
        }
        failing.remove(mountPoint)
        let unit = UInt64(info.f_frsize != 0 ? info.f_frsize : info.f_bsize)
        func bytes(_ blocks: UInt) -> UInt64 { UInt64(blocks).multipliedReportingOverflow(by: unit).overflow ? .max : UInt64(blocks) * unit }
        return Space(total: bytes(info.f_blocks), free: bytes(info.f_bfree), available: bytes(info.f_bavail),
                     inodes: UInt64(info.f_files), inodesFree: UInt64(info.f_ffree))
    }

    /// Whether the mount is read-only: `ro` among its per-mount or its
    /// superblock options (what /proc/mounts shows as one list).
    static func isReadOnly(_ mount: MountEntry) -> Bool {
        mount.mountOptions.split(separator: ",").contains("ro") || mount.superOptions.split(separator: ",").contains("ro")
    }

    private func emitUsage(_ mount: MountEntry, _ fields: [(String, Value)]) {
        if everyPoll { context.forget("usage", key: [.string(mount.mountPoint)]) }
        context.emit("usage", fields: fields)
    }

    /// A mount whose statvfs failed, with mount_facts: its names and facts, no figures.
    private func reportError(_ mount: MountEntry) {
        emitUsage(mount, [("mount", .string(mount.mountPoint)), ("device", .string(mount.source)), ("fs_type", .string(mount.fsType)),
                          ("readonly", .bool(Self.isReadOnly(mount))), ("device_error", .bool(true))])
    }

    private func report(_ mount: MountEntry, _ space: Space) {
        let share = space.freeShare
        var fields: [(String, Value)] = [
            ("mount", .string(mount.mountPoint)),
            ("device", .string(mount.source)),
            ("fs_type", .string(mount.fsType)),
            ("total", .int(clamping: space.total)),
            ("free", .int(clamping: space.free)),
            ("available", .int(clamping: space.available)),
            ("used_ratio", .double(share.map { 1 - $0 } ?? 0)),
            ("inodes_total", .int(clamping: space.inodes)),
            ("inodes_free", .int(clamping: space.inodesFree)),
        ]
        if mountFacts { fields += [("readonly", .bool(Self.isReadOnly(mount))), ("device_error", .bool(false))] }
        emitUsage(mount, fields)
        guard let share else { return }
        let percent = share * 100
        let wasLow = low.contains(mount.mountPoint)
        let isLow = wasLow ? percent <= lowSpace + Self.hysteresis : percent < lowSpace
        guard isLow != wasLow else { return }
        if isLow { low.insert(mount.mountPoint) } else { low.remove(mount.mountPoint) }
        context.emit("low_space", severity: isLow ? .warning : .info, [
            "mount": .string(mount.mountPoint),
            "active": .bool(isLow),
            "free_percent": .double(percent),
            "threshold": .double(lowSpace),
            "available": .int(clamping: space.available),
        ])
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(StorageMonitor.self, a, r) }
