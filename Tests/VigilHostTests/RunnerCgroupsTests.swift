import Foundation
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The cgroup v2 side of `limits:` on fixture trees: a /proc that says where
/// the host is, and a cgroup2 mount made of plain files (the kernel's
/// enforcement itself needs a delegated hierarchy, which a test machine in
/// hybrid mode does not have).
@Suite struct RunnerCgroupsTests {
    struct Tree {
        let root: String
        var proc: String { root + "/proc" }
        var mount: String { root + "/sys fs/cgroup" }

        /// The host in `group` (relative to the mount), whose
        /// cgroup.controllers lists `controllers`.
        init(group: String, controllers: String, v2: Bool = true) throws {
            root = try TestEnv.tempDir("cgroups")
            try FileManager.default.createDirectory(atPath: proc + "/self", withIntermediateDirectories: true)
            try TestEnv.write(v2 ? "0::\(group)\n" : "4:memory:/x\n1:cpu:/x\n", to: proc + "/self/cgroup")
            // The mount point's space is escaped in mountinfo, as the kernel does.
            try TestEnv.write("""
            25 30 0:22 / /proc rw - proc proc rw
            35 25 0:30 / \(root.replacingOccurrences(of: " ", with: "\\040"))/sys\\040fs/cgroup rw,nosuid - cgroup2 cgroup2 rw
            """, to: proc + "/self/mountinfo")
            let base = group == "/" ? mount : mount + group
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
            try TestEnv.write(controllers + "\n", to: base + "/cgroup.controllers")
            try TestEnv.write("\n", to: base + "/cgroup.subtree_control")
        }

        /// A directory the kernel would fill with these files.
        func kernelDirectory(_ path: String, files: [String]) throws {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            for file in files { try TestEnv.write("", to: path + "/" + file) }
        }
    }

    @Test func aDelegatedGroupMovesTheHostIntoALeafAndGivesControllersToRunners() throws {
        let tree = try Tree(group: "/system.slice/vigil.service", controllers: "cpuset cpu io memory pids")
        let base = tree.mount + "/system.slice/vigil.service"
        try tree.kernelDirectory(base + "/vigil-host", files: ["cgroup.procs"])
        let cgroups = try RunnerCgroups.prepare(proc: tree.proc, pid: 4242).get()
        #expect(cgroups.base == base)
        #expect(RunnerCgroups.read(base + "/vigil-host/cgroup.procs") == "4242")
        #expect(RunnerCgroups.read(base + "/cgroup.subtree_control") == "+memory +cpu")

        let group = base + "/vigil-runner-disk_io"
        try tree.kernelDirectory(group, files: ["memory.max", "memory.swap.max", "memory.oom.group", "cpu.max", "memory.events",
                                                  "cgroup.procs"])
        try TestEnv.write("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", to: group + "/memory.events")
        let runner = try cgroups.make(monitor: "disk io", limits: ResourceLimits(memory: 100 << 20, cpuPercent: 25)).get()
        #expect(runner.path == group)
        #expect(RunnerCgroups.read(group + "/memory.max") == "104857600")
        #expect(RunnerCgroups.read(group + "/memory.swap.max") == "0")
        #expect(RunnerCgroups.read(group + "/memory.oom.group") == "1")
        #expect(RunnerCgroups.read(group + "/cpu.max") == "25000 100000")
        #expect(runner.killReason() == nil)
        // The OOM killer ended something in the group: the report says it was the limit.
        try TestEnv.write("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n", to: group + "/memory.events")
        #expect(runner.killReason() == "memory limit: the kernel ended it at its cgroup's memory.max of 100MiB")
        // The runner joins by its own pid.
        #expect(RunnerCgroup.join(group) == nil)
        #expect(RunnerCgroups.read(group + "/cgroup.procs") == "\(getpid())")
    }

    @Test func theRootGroupGivesControllersWithoutMovingTheHost() throws {
        let tree = try Tree(group: "/", controllers: "cpu memory")
        let cgroups = try RunnerCgroups.prepare(proc: tree.proc, pid: 7).get()
        #expect(cgroups.base == tree.mount)
        #expect(!FileManager.default.fileExists(atPath: tree.mount + "/vigil-host"))
        #expect(RunnerCgroups.read(tree.mount + "/cgroup.subtree_control") == "+memory +cpu")
    }

    @Test func controllersAlreadyGivenAreUsedAsTheyAre() throws {
        let tree = try Tree(group: "/", controllers: "cpu memory")
        try TestEnv.write("cpu memory\n", to: tree.mount + "/cgroup.subtree_control")
        _ = try RunnerCgroups.prepare(proc: tree.proc).get()
        #expect(RunnerCgroups.read(tree.mount + "/cgroup.subtree_control") == "cpu memory\n")
    }

    @Test func withoutDelegationTheReasonSaysWhatIsMissing() throws {
        let hybrid = try Tree(group: "/", controllers: "")
        let why = try #require(RunnerCgroups.prepare(proc: hybrid.proc).failure)
        #expect(why.description.contains("the memory and cpu controllers are not delegated"), "\(why)")

        let cpuOnly = try Tree(group: "/user.slice", controllers: "cpu pids")
        #expect(RunnerCgroups.prepare(proc: cpuOnly.proc).failure?.description.contains("the memory controller is not delegated") == true)

        let v1 = try Tree(group: "/", controllers: "cpu memory", v2: false)
        #expect(RunnerCgroups.prepare(proc: v1.proc).failure?.description == "the host is in no cgroup v2 group (cgroup v1 only)")

        // A leaf the host cannot be moved into (the kernel's cgroup.procs missing here).
        let stuck = try Tree(group: "/a", controllers: "cpu memory")
        #expect(RunnerCgroups.prepare(proc: stuck.proc).failure?.description.hasPrefix("cannot move the host into ") == true)
    }

    @Test func mountinfoWithoutCgroup2HasNoMount() {
        #expect(RunnerCgroups.cgroup2Mount(mountinfo: "25 30 0:22 / /proc rw - proc proc rw\n") == nil)
        #expect(RunnerCgroups.cgroup2Mount(mountinfo: "garbage\n - cgroup2\n1 2 3 - cgroup2 x") == nil)
        #expect(RunnerCgroups.cgroup2Mount(mountinfo: "1 2 3 4 /a\\134b - cgroup2 none rw") == "/a\\b")
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
