import Foundation
import Glibc
import Testing
import VigilKitTesting

/// The cgroups plugin on the capture of this machine (a container on a
/// hybrid host: v1 controllers, the v2 root alone at /sys/fs/cgroup/unified)
/// and on a hand-made systemd host of Linux 5.15 (`old-kernel`: slices,
/// services, scopes, no memory.peak, io.stat on two devices), changed
/// between polls as a real host changes.
@Suite struct CgroupsPluginTests {
    static let oldKernel = machines + "/old-kernel/sys/fs/cgroup"

    func golden(_ name: String) -> PluginGolden { PluginGolden(plugin: "cgroups", name: name) }

    @Test func theCaptureOfAHybridHostReadsTheUnifiedRoot() throws {
        try golden("capture").check(options: "{ cgroupfs: \(machines)/capture/sys/fs/cgroup }")
    }

    /// Poll 2: cron.service was stopped (its group is gone), apt-daily.service
    /// started, nginx's write bytes on 8:0 wrapped from near 2^64 (reported
    /// saturated at 2^63 − 1) to a small number. Poll 3: a 6.x kernel's
    /// memory.peak and oom_group_kill appear on nginx (the tree stands for
    /// an upgrade: the plugin takes what each poll finds).
    @Test func aSystemdHostWithServicesComingAndGoing() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let cg = tree.path + "/sys/fs/cgroup"
        try golden("old-kernel").check(options: "{ cgroupfs: \(cg) }", polls: 3) { poll in
            if poll == 2 {
                try tree.remove(cg + "/system.slice/cron.service")
                TempTree.copyDirectory(cg + "/system.slice/ssh.service", to: cg + "/system.slice/apt-daily.service")
                try tree.write(cg + "/system.slice/nginx.service/io.stat",
                               "8:0 rbytes=1048577000 wbytes=4096 rios=25601 wios=700001 dbytes=0 dios=0\n259:0 rbytes=2097152000 wbytes=4194308096 rios=51200 wios=102401 dbytes=0 dios=0")
            } else if poll == 3 {
                try tree.write(cg + "/system.slice/nginx.service/memory.peak", "490733568")
                try tree.write(cg + "/system.slice/nginx.service/memory.events",
                               "low 0\nhigh 1520\nmax 37\noom 1\noom_kill 1\noom_group_kill 0")
            }
        }
    }

    /// Containers' scopes, deeper than the default depth, and an exclude.
    @Test func includeExcludeAndDepthChooseTheGroups() throws {
        try golden("old-kernel-scopes").check(
            options: "{ cgroupfs: \(Self.oldKernel), depth: 3, include: ['*.slice/*.scope', '*.slice/*/*.scope', '*.slice/*/*.service'], exclude: ['user.slice/*/*'] }",
            polls: 1)
    }

    /// Services started and stopped as fast as a thread can while the plugin
    /// polls: a group half made or half removed when it is read is reported
    /// with what it had, or skipped; nothing fails or traps.
    @Test func groupsChurningWhilePolledNeverFail() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let slice = tree.path + "/sys/fs/cgroup/system.slice"
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for i in 0..<400 {
                let dir = slice + "/churn\(i % 3).service"
                _ = mkdir(dir, 0o755)
                for (file, text) in [("cpu.stat", "usage_usec 1\n"), ("memory.current", "4096\n"), ("io.stat", "8:0 rbytes=1\n"),
                                     ("cpu.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1\n")] {
                    try? TempTree.write(dir + "/" + file, bytes: Array(text.utf8))
                }
                for file in TempTree.entries(dir) { _ = unlink(dir + "/" + file) }
                _ = rmdir(dir)
            }
            done.signal()
        }
        let host = try PluginTestHost(path: productsDir + "/libcgroups.so")
        let instance = try host.instance(options: "{ cgroupfs: \(tree.path)/sys/fs/cgroup }", interval: .seconds(1))
        try instance.start()
        for _ in 0..<100 { try instance.advance(by: .seconds(1)) }
        done.wait()
        try instance.advance(by: .seconds(1))
        try instance.stop()
        #expect(instance.violations.isEmpty, "\(instance.violations)")
        let groups = Set(instance.events(kind: "sample").compactMap { $0.string("group") })
        #expect(groups.isSuperset(of: ["/", "system.slice/nginx.service"]))
        #expect(groups.allSatisfy { !$0.contains("churn") || $0.hasPrefix("system.slice/churn") })
        // After the churn, the last poll has the fixture's groups only.
        let last = instance.events(kind: "sample").suffix(9).compactMap { $0.string("group") }
        #expect(last.count == 9 && !last.contains { $0.contains("churn") }, "\(last)")
    }

    @Test func groupsBeyondMaxGroupsAreCountedAndSaidOnce() throws {
        let host = try PluginTestHost(path: productsDir + "/libcgroups.so")
        let instance = try host.instance(options: "{ cgroupfs: \(Self.oldKernel), max_groups: 3 }", interval: .seconds(1))
        try instance.start()
        try instance.advance(by: .seconds(2))
        try instance.stop()
        let groups = instance.events(kind: "sample").compactMap { $0.string("group") }
        #expect(groups == ["/", "init.scope", "system.slice"] + ["/", "init.scope", "system.slice"] + ["/", "init.scope", "system.slice"])
        let warnings = instance.logs.filter { $0.message.contains("max_groups") }
        #expect(warnings.count == 1, "\(instance.logs)")
        // 9 groups are selected by default: 6 left out of the first poll.
        #expect(warnings.first?.message.hasPrefix("6 group(s)") == true, "\(warnings)")
        #expect(instance.violations.isEmpty, "\(instance.violations)")
    }

    @Test func aV1OnlyHostIsUnavailableAndSaysWhy() throws {
        let tree = try TempTree()
        for dir in ["sys", "sys/fs", "sys/fs/cgroup", "sys/fs/cgroup/memory", "sys/fs/cgroup/cpu,cpuacct", "sys/fs/cgroup/systemd"] {
            TempTree.makeDirectory(tree.path + "/" + dir)
        }
        try tree.write(tree.path + "/sys/fs/cgroup/memory/memory.usage_in_bytes", "123456")
        let host = try PluginTestHost(path: productsDir + "/libcgroups.so")
        let instance = try host.instance(options: "{ cgroupfs: \(tree.path)/sys/fs/cgroup }", interval: .seconds(1))
        do {
            try instance.start()
            Issue.record("started on a v1-only host")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains("cgroup v1 only (cpu,cpuacct, memory, systemd hierarchies"), "\(error)")
        }
        let missing = try host.instance(options: "{ cgroupfs: \(tree.path)/nowhere }", interval: .seconds(1))
        #expect(throws: PluginTestError.self) { try missing.start() }
    }

    @Test func badOptionsAreRefused() throws {
        let host = try PluginTestHost(path: productsDir + "/libcgroups.so")
        for options in ["{ depth: -1 }", "{ max_groups: 0 }", "{ include: [''] }", "{ cgroupfs: '' }"] {
            #expect(throws: PluginTestError.self, "\(options)") { _ = try host.instance(options: options) }
        }
    }
}

extension TempTree {
    static func makeDirectory(_ path: String) { _ = mkdir(path, 0o755) }

    /// A copy of a directory's files (a group's interface files) under a new name.
    static func copyDirectory(_ source: String, to target: String) {
        try? copy(source, to: target)
    }
}
