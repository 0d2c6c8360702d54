import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `storage` plugin, loaded from its built library. Mounts come from the
/// fixtures in Tests/Fixtures/proc/storage; statvfs runs on directories of a
/// temporary rootfs, so byte counts are this machine's: the tests check
/// relations and which mounts are reported, not exact sizes.
@Suite(.serialized) struct StoragePluginTests {
    static let fixtures = repoRoot + "/Tests/Fixtures/proc/storage"

    /// What the server machine reports with `tmpfs: true`, in mountinfo order.
    static let withTmpfs = [
        "/run", "/", "/dev/shm", "/run/lock", "/boot/efi", "/tmp", "/run/user/1000", "/media/alice/My Passport",
        "/export/data", "/mnt/usb", "/var/lib/docker/overlay2/3f5d0a9c1e7b/merged", "/srv/back\\slash\ttab",
    ]
    /// Its tmpfs mounts, which the default options leave out.
    static let tmpfsMounts: Set<String> = ["/run", "/dev/shm", "/run/lock", "/tmp", "/run/user/1000", "/srv/back\\slash\ttab"]
    /// What the server machine reports with the default options.
    static let defaultMounts = withTmpfs.filter { !tmpfsMounts.contains($0) }

    /// Every mount point of the server machine (the directories a rootfs needs).
    static let allMountPoints = withTmpfs + [
        "/sys", "/proc", "/dev", "/dev/pts", "/sys/kernel/security", "/sys/fs/cgroup", "/sys/fs/pstore",
        "/sys/firmware/efi/efivars", "/sys/fs/bpf", "/proc/sys/fs/binfmt_misc", "/dev/mqueue", "/dev/hugepages",
        "/sys/kernel/debug", "/sys/kernel/tracing", "/sys/fs/fuse/connections", "/sys/kernel/config",
        "/snap/core22/1380", "/run/netns/blue",
    ]

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libstorage.so") }

    /// A rootfs whose mount point directories exist.
    func rootfs(_ mountPoints: [String] = Self.allMountPoints) throws -> Tree {
        let tree = try Tree()
        for mountPoint in mountPoints { try tree.mkdir(mountPoint) }
        return tree
    }

    func mounts(_ events: [TestEvent]) -> [String] { events.compactMap { $0.string("mount") } }

    func options(procfs: String = machines + "/server/proc", rootfs: Tree, _ extra: String = "") -> String {
        "{ procfs: '\(procfs)', rootfs: '\(rootfs.path)'\(extra.isEmpty ? "" : ", " + extra) }"
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "storage" && d.polled)
        #expect(d.options.map { "\($0.name)=\($0.defaultText ?? "-")" } ==
                ["procfs=/proc", "rootfs=/", "paths=[\"*\"]", "fs_types=[]", "exclude=[]", "tmpfs=false", "low_space=10.0",
                 "exclude_fs_types=[]", "every_poll=false", "mount_facts=false"])
        #expect(d.events.map(\.kind) == ["usage", "low_space", "mount_removed"])
        #expect(d.events[0].fields.map(\.name) == ["mount", "device", "fs_type", "total", "free", "available",
                                                   "used_ratio", "inodes_total", "inodes_free", "readonly", "device_error"])
    }

    @Test func snapshotOfRealFilesystemsThenOnlyChanges() throws {
        let root = try rootfs()
        let instance = try host().instance(options: options(rootfs: root, "tmpfs: true"), interval: .seconds(30))
        try instance.start()
        let usage = instance.events(kind: "usage")
        #expect(mounts(usage) == Self.withTmpfs)  // no proc, sysfs, cgroup2, devtmpfs, squashfs, nsfs…
        for event in usage {
            let (total, free, available) = (event.int("total") ?? -1, event.int("free") ?? -1, event.int("available") ?? -1)
            #expect(total > 0 && free >= 0 && free <= total && available <= free, "\(event)")
            let ratio = event.double("used_ratio") ?? -1
            #expect(ratio >= 0 && ratio <= 1, "\(event)")
            #expect((event.int("inodes_free") ?? -1) <= (event.int("inodes_total") ?? -1), "\(event)")
        }
        func event(_ mount: String) -> TestEvent? { usage.first { $0.string("mount") == mount } }
        #expect(event("/")?.string("device") == "/dev/nvme0n1p2" && event("/")?.string("fs_type") == "ext4")
        #expect(event("/boot/efi")?.string("fs_type") == "vfat")
        #expect(event("/export/data")?.string("device") == "/dev/nvme0n1p2")  // the bind mount is its own mount
        #expect(event("/media/alice/My Passport")?.string("fs_type") == "exfat")  // \040 decoded
        #expect(event("/srv/back\\slash\ttab")?.string("device") == "scratch disk")  // \134, \011, \040
        #expect(event("/var/lib/docker/overlay2/3f5d0a9c1e7b/merged")?.string("fs_type") == "overlay")

        try instance.advance(by: .seconds(60))  // two polls: nothing moved by 64 MiB in milliseconds
        #expect(instance.events(kind: "usage").count == usage.count)
        #expect(instance.events(kind: "mount_removed").isEmpty)
        try instance.stop()
        try instance.start()  // a fresh snapshot after a restart
        #expect(instance.events(kind: "usage").count == 2 * usage.count)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func pathsExcludeAndTypesFilterTheMounts() throws {
        let root = try rootfs()
        let host = try host()
        func reported(_ extra: String) throws -> [String] {
            let instance = try host.instance(options: options(rootfs: root, extra))
            try instance.start()
            try instance.stop()
            #expect(instance.violations.isEmpty)
            return mounts(instance.events(kind: "usage"))
        }
        // tmpfs only when asked for: a server has many, memory rather than a disk.
        #expect(try reported("") == Self.defaultMounts)
        #expect(try reported("paths: ['/run*', '/boot/*']") == ["/boot/efi"])
        #expect(try reported("paths: ['/run*', '/boot/*'], exclude: ['/run/user/*'], tmpfs: true") == ["/run", "/run/lock", "/boot/efi"])
        #expect(try reported("fs_types: [tmpfs], paths: ['/run*']") == ["/run", "/run/lock", "/run/user/1000"])
        #expect(try reported("fs_types: [ext4]") == ["/", "/export/data", "/mnt/usb"])
        #expect(try reported("fs_types: [ext4], exclude: ['/mnt/*', '/export/*']") == ["/"])
        #expect(try reported("fs_types: ['ex*', vfat]") == ["/", "/boot/efi", "/media/alice/My Passport", "/export/data", "/mnt/usb"])
        #expect(try reported("paths: ['/media/*']") == ["/media/alice/My Passport"])  // `*` crosses `/`
        // Named types are reported even when they are pseudo filesystems.
        #expect(try reported("fs_types: [proc, cgroup2, squashfs]") == ["/proc", "/sys/fs/cgroup", "/snap/core22/1380"])
        // Two mounts on one point: the one on top (later in mountinfo) counts.
        let instance = try host.instance(options: options(rootfs: root, "fs_types: [autofs, binfmt_misc]"))
        try instance.start()
        #expect(instance.events(kind: "usage").map { "\($0.string("mount") ?? "")|\($0.string("fs_type") ?? "")" }
                == ["/proc/sys/fs/binfmt_misc|binfmt_misc"])
        try instance.stop()
    }

    @Test func aMountWhoseStatvfsFailsIsSkippedNotFatal() throws {
        let root = try rootfs(Self.defaultMounts.filter { $0 != "/mnt/usb" })  // statvfs: ENOENT
        let instance = try host().instance(options: options(rootfs: root), interval: .seconds(30))
        try instance.start()
        #expect(mounts(instance.events(kind: "usage")) == Self.defaultMounts.filter { $0 != "/mnt/usb" })
        #expect(instance.logs.contains { $0.level == 0 && $0.message.contains("/mnt/usb") })
        try instance.advance(by: .seconds(30))
        #expect(instance.logs.filter { $0.message.contains("/mnt/usb") }.count == 1)  // once per failing streak
        #expect(instance.events(kind: "mount_removed").isEmpty)  // still mounted, just unreadable

        try root.mkdir("/mnt/usb")
        try instance.advance(by: .seconds(30))
        #expect(mounts(instance.events(kind: "usage")).last == "/mnt/usb")
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func lowSpaceAtAHundredPercentAndNeverAtZero() throws {
        let root = try rootfs()
        let host = try host()
        let low = try host.instance(options: options(rootfs: root, "low_space: 100, paths: ['/', '/tmp', '/boot/efi'], tmpfs: true"),
                                    interval: .seconds(30))
        try low.start()
        try low.advance(by: .seconds(60))
        // Every reported mount has some space in use (its fixture files at least), so all are below 100 %.
        let events = low.events(kind: "low_space")
        #expect(mounts(events) == ["/", "/boot/efi", "/tmp"])  // once each, on the snapshot
        for event in events {
            #expect(event.severity == .warning && event.bool("active") == true && event.double("threshold") == 100)
            #expect((event.double("free_percent") ?? 100) < 100)
            #expect((event.int("available") ?? -1) >= 0)
        }
        try low.stop()
        try low.start()  // a restart reports the low mounts again
        #expect(low.events(kind: "low_space").count == 6)
        try low.stop()
        #expect(low.violations.isEmpty)

        let never = try host.instance(options: options(rootfs: root, "low_space: 0"), interval: .seconds(30))
        try never.start()
        try never.advance(by: .seconds(30))
        #expect(never.events(kind: "low_space").isEmpty)
        try never.stop()
    }

    /// A mount point whose directory is a symlink, switched between two real
    /// filesystems of this machine with different free shares: crossing down
    /// fires, rising within the 2-point band does not clear, rising above does.
    @Test func lowSpaceCrossesWithHysteresis() throws {
        let root = try rootfs(["/"])
        let candidates = [root.path, "/dev/shm", "/run", "/", "/var/tmp", "/home"]
        let shares = candidates.compactMap { path in Tree.freePercent(path).map { (path, $0) } }
        guard let lowest = shares.min(by: { $0.1 < $1.1 }), let highest = shares.max(by: { $0.1 < $1.1 }),
              highest.1 - lowest.1 > 6 else {
            return  // no two filesystems here differ enough in free space to cross a threshold
        }
        let procfs = try Tree()
        try procfs.write("/self/mountinfo", "29 1 259:2 / /data rw,relatime shared:1 - ext4 /dev/sdz1 rw\n")
        let host = try host()

        // Threshold halfway: low on the fuller filesystem, clear on the emptier one.
        let middle = (lowest.1 + highest.1 - 2) / 2
        try root.link("/data", to: lowest.0)
        let instance = try host.instance(options: options(procfs: procfs.path, rootfs: root, "low_space: \(middle)"),
                                         interval: .seconds(10))
        try instance.start()
        try root.link("/data", to: highest.0)
        try instance.advance(by: .seconds(10))
        try root.link("/data", to: lowest.0)
        try instance.advance(by: .seconds(10))
        let events = instance.events(kind: "low_space")
        #expect(events.map { $0.bool("active") } == [true, false, true])
        #expect(events.map(\.severity) == [.warning, .info, .warning])
        #expect(instance.events(kind: "usage").count == 3)  // the figures changed each time too
        try instance.stop()
        #expect(instance.violations.isEmpty)

        // Threshold just below the emptier filesystem: rising to it stays within the band.
        try root.link("/data", to: lowest.0)
        let band = try host.instance(options: options(procfs: procfs.path, rootfs: root, "low_space: \(highest.1 - 1)"),
                                     interval: .seconds(10))
        try band.start()
        try root.link("/data", to: highest.0)
        try band.advance(by: .seconds(10))
        #expect(band.events(kind: "low_space").map { $0.bool("active") } == [true])
        try band.stop()
    }

    @Test func aMountThatDisappearsIsReportedAndForgotten() throws {
        let root = try rootfs()
        let procfs = try Tree()
        let original = try String(decoding: Tree.read(machines + "/server/proc/self/mountinfo"), as: UTF8.self)
        try procfs.write("/self/mountinfo", original)
        let instance = try host().instance(options: options(procfs: procfs.path, rootfs: root, "low_space: 100"),
                                           interval: .seconds(30))
        try instance.start()
        let snapshot = instance.events(kind: "usage").count

        try procfs.write("/self/mountinfo", original.split(separator: "\n").filter { !$0.contains(" /mnt/usb ") }
            .joined(separator: "\n") + "\n")
        try instance.advance(by: .seconds(30))
        let removed = instance.events(kind: "mount_removed")
        #expect(removed.count == 1)
        #expect(removed.first?.string("mount") == "/mnt/usb")
        #expect(removed.first?.string("device") == "/dev/sdc1" && removed.first?.string("fs_type") == "ext4")
        try instance.advance(by: .seconds(30))
        #expect(instance.events(kind: "mount_removed").count == 1)  // once

        try procfs.write("/self/mountinfo", original)  // mounted again: reported afresh, low again
        try instance.advance(by: .seconds(30))
        #expect(instance.events(kind: "usage").count == snapshot + 1)
        #expect(mounts(instance.events(kind: "usage")).last == "/mnt/usb")
        #expect(mounts(instance.events(kind: "low_space")).last == "/mnt/usb")
        #expect(mounts(instance.events(kind: "low_space")).filter { $0 == "/mnt/usb" }.count == 2)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    /// node_exporter 1.5's filesystem defaults as Debian ships them
    /// (`--collector.filesystem.fs-types-exclude`, and `mount-points-exclude`
    /// `^/(dev|proc|run|sys|mnt|media|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)`),
    /// as the stand-in manifest writes them.
    static let nodeExporterOptions = """
        fs_types: ['*'], exclude_fs_types: [autofs, binfmt_misc, bpf, cgroup, cgroup2, configfs, debugfs, devpts, devtmpfs, \
        fusectl, hugetlbfs, iso9660, mqueue, nsfs, overlay, proc, procfs, pstore, rpc_pipefs, securityfs, selinuxfs, squashfs, \
        sysfs, tracefs], exclude: ['/dev', '/dev/*', '/proc', '/proc/*', '/run', '/run/*', '/sys', '/sys/*', '/mnt', '/mnt/*', \
        '/media', '/media/*', '/var/lib/docker/?*', '/var/lib/containers/storage/?*'], every_poll: true, mount_facts: true
        """

    @Test func nodeExportersSelectionEveryPollWithFacts() throws {
        let root = try rootfs()
        let instance = try host().instance(options: options(rootfs: root, Self.nodeExporterOptions), interval: .seconds(1))
        try instance.start()
        let first = instance.events(kind: "usage")
        #expect(mounts(first) == ["/", "/boot/efi", "/tmp", "/export/data", "/srv/back\\slash\ttab"])
        #expect(first.allSatisfy { $0.bool("readonly") == false && $0.bool("device_error") == false })
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "usage").count == 2 * first.count)  // every poll, changed or not
        try instance.advance(by: .seconds(1))
        #expect(instance.events(kind: "usage").count == 3 * first.count)
        try instance.stop()
        #expect(instance.violations.isEmpty)

        // exclude_fs_types wins over fs_types, and applies with the default fs_types too.
        let ext4 = try host().instance(options: options(rootfs: root, "exclude_fs_types: ['ext*']"))
        try ext4.start()
        #expect(mounts(ext4.events(kind: "usage")) == ["/boot/efi", "/media/alice/My Passport",
                                                       "/var/lib/docker/overlay2/3f5d0a9c1e7b/merged"])
        try ext4.stop()
    }

    @Test func readonlyAndDeviceErrorWithMountFacts() throws {
        let root = try rootfs(["/", "/data", "/image"])
        let procfs = try Tree()
        try procfs.write("/self/mountinfo", """
            29 1 259:2 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
            30 29 8:17 / /data ro,relatime shared:2 - ext4 /dev/sdb1 rw
            31 29 8:33 / /image rw,relatime shared:3 - ext4 /dev/sdc1 ro,errors=continue
            32 29 0:50 / /gone rw,relatime shared:4 - nfs4 server:/export rw,vers=4.2

            """)
        let facts = try host().instance(options: options(procfs: procfs.path, rootfs: root, "mount_facts: true"), interval: .seconds(30))
        try facts.start()
        let usage = facts.events(kind: "usage")
        #expect(mounts(usage) == ["/", "/data", "/image", "/gone"])
        #expect(usage.map { $0.bool("readonly") } == [false, true, true, false])  // the mount's ro, the superblock's ro
        #expect(usage.map { $0.bool("device_error") } == [false, false, false, true])
        #expect(usage.last?.int("total") == nil && usage.last?.int("available") == nil)
        #expect(usage.last?.string("device") == "server:/export" && usage.last?.string("fs_type") == "nfs4")
        try facts.advance(by: .seconds(30))  // without every_poll, on change only
        #expect(facts.events(kind: "usage").count == 4)
        #expect(facts.events(kind: "mount_removed").isEmpty)
        try facts.stop()
        #expect(facts.violations.isEmpty)

        // Without the option: as before, no new fields, the failing mount skipped.
        let plain = try host().instance(options: options(procfs: procfs.path, rootfs: root), interval: .seconds(30))
        try plain.start()
        #expect(mounts(plain.events(kind: "usage")) == ["/", "/data", "/image"])
        #expect(plain.events(kind: "usage").allSatisfy { $0.bool("readonly") == nil && $0.bool("device_error") == nil })
        try plain.stop()
    }

    @Test func unavailableWithoutMountinfo() throws {
        let root = try rootfs(["/"])
        let procfs = try Tree()
        let instance = try host().instance(options: options(procfs: procfs.path, rootfs: root), interval: .seconds(30))
        do {
            try instance.start()
            Issue.record("start succeeded without mountinfo")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains(procfs.path + "/self/mountinfo does not exist"))
        }

        // Present at start, gone later: the poll says unavailable, and it comes back.
        try procfs.write("/self/mountinfo", "29 1 259:2 / / rw - ext4 /dev/vda rw\n")
        try instance.start()
        try procfs.remove("/self/mountinfo")
        do {
            try instance.advance(by: .seconds(30))
            Issue.record("a poll without mountinfo succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        try instance.stop()
        #expect(instance.events(kind: "usage").count == 1)
        #expect(instance.violations.isEmpty)
    }

    @Test func malformedLinesAreSkipped() throws {
        let root = try rootfs(["/", "/tmp", "/data", "/home", "/boot/efi"])
        let instance = try host().instance(options: options(procfs: Self.fixtures + "/garbled", rootfs: root, "tmpfs: true"))
        try instance.start()
        #expect(mounts(instance.events(kind: "usage")) == ["/", "/tmp"])
        #expect(instance.logs.contains { $0.message.contains("skipped malformed line(s) 2, 3, 5, 7, 8") })
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func refusesUnusableOptions() throws {
        let host = try host()
        for (options, message) in [
            ("{ low_space: 150 }", "options.low_space: must be a percentage from 0 to 100"),
            ("{ low_space: -1 }", "options.low_space: must be a percentage from 0 to 100"),
            ("{ paths: ['*', ''] }", "options.paths[1]: must not be empty"),
            ("{ fs_types: [''] }", "options.fs_types[0]: must not be empty"),
            ("{ rootfs: '' }", "options.rootfs: must not be empty"),
        ] {
            do {
                _ = try host.instance(options: options)
                Issue.record("\(options) was accepted")
            } catch {
                #expect(error.status == "invalid configuration", "\(options)")
                #expect(error.description.contains(message), "\(error)")
            }
        }
        #expect(throws: PluginTestError.self) { try host.instance(options: "{ paths: /tmp }") }  // not a list
    }

    /// A temporary directory tree, removed when the value goes away.
    final class Tree {
        let path: String

        init() throws {
            var template = Array("/tmp/vigil-storage-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw TreeError("mkdtemp failed: errno \(errno)") }
            path = String(cString: made)
        }

        deinit { Self.removeAll(path) }

        func mkdir(_ relative: String) throws {
            var current = path
            for component in relative.split(separator: "/") {
                current += "/" + component
                if Glibc.mkdir(current, 0o755) != 0 && errno != EEXIST {
                    throw TreeError("mkdir \(current): errno \(errno)")
                }
            }
        }

        func write(_ relative: String, _ text: String) throws {
            let file = path + relative
            try mkdir(String(relative[..<(relative.lastIndex(of: "/") ?? relative.startIndex)]))
            let temporary = file + ".new"
            guard let handle = fopen(temporary, "we") else { throw TreeError("fopen \(temporary): errno \(errno)") }
            let bytes = Array(text.utf8)
            let written = bytes.isEmpty ? 0 : fwrite(bytes, 1, bytes.count, handle)
            fclose(handle)
            guard written == bytes.count, rename(temporary, file) == 0 else { throw TreeError("write \(file) failed") }
        }

        func remove(_ relative: String) throws {
            guard unlink(path + relative) == 0 else { throw TreeError("unlink \(relative): errno \(errno)") }
        }

        /// Makes `relative` a symlink to `target`, replacing what was there.
        func link(_ relative: String, to target: String) throws {
            let file = path + relative
            _ = unlink(file)
            _ = rmdir(file)
            guard symlink(target, file) == 0 else { throw TreeError("symlink \(file): errno \(errno)") }
        }

        static func read(_ file: String) throws -> [UInt8] {
            guard let handle = fopen(file, "re") else { throw TreeError("fopen \(file): errno \(errno)") }
            defer { fclose(handle) }
            var bytes: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = fread(&buffer, 1, buffer.count, handle)
                if n == 0 { return bytes }
                bytes += buffer[..<n]
            }
        }

        /// available / (used + available) × 100 as df counts it, or nil.
        static func freePercent(_ path: String) -> Double? {
            var info = statvfs()
            guard statvfs(path, &info) == 0 else { return nil }
            let used = Double(info.f_blocks) - Double(info.f_bfree)
            let usable = used + Double(info.f_bavail)
            return usable > 0 ? Double(info.f_bavail) / usable * 100 : nil
        }

        private static func removeAll(_ dir: String) {
            guard let stream = opendir(dir) else { _ = unlink(dir); return }
            while let entry = readdir(stream) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(cString: raw.baseAddress!.assumingMemoryBound(to: CChar.self))
                }
                if name == "." || name == ".." { continue }
                let child = dir + "/" + name
                if entry.pointee.d_type == UInt8(DT_DIR) { removeAll(child) } else { _ = unlink(child) }
            }
            closedir(stream)
            _ = rmdir(dir)
        }
    }

    struct TreeError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
