import Testing
import VigilCore
import VigilKitTesting

/// The cpu plugin's node_exporter kinds (seconds, stat, frequency) on the
/// real capture of a machine and on a hand-made old 32-bit kernel whose
/// counters wrap and whose CPUs go offline and come back.
@Suite struct CPUPluginTests {
    static let all = "seconds: true, stat: true, frequency: true, throttles: true, isolated: true"

    @Test func onTheCapture() throws {
        let root = machines + "/capture"
        try PluginGolden(plugin: "cpu", name: "capture")
            .check(options: "{ procfs: \(root)/proc, sysfs: \(root)/sys, \(Self.all) }")
    }

    /// Poll 2: the 32-bit `processes` wraps past 2^32, `intr` and the CPU
    /// times move on but cpu0's iowait goes back 10 ticks (its `seconds`
    /// keep 15), cpu1 goes offline (its line is gone) and its cpufreq
    /// policy with it. Poll 3: a new cpu1 is plugged in, its idle far below
    /// the old one's (its `seconds` start again from its own), on a kernel
    /// line with two columns more than any kernel writes today. Throttles:
    /// cpu1 is cpu0's sibling (same core and package: one event each), cpu2
    /// has no package id (skipped), cpu3 is the second package.
    @Test func onAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "cpu", name: "old-kernel").check(
            options: "{ procfs: \(tree.proc), sysfs: \(tree.sys), per_cpu: true, \(Self.all) }", polls: 3,
            between: { poll in
                switch poll {
                case 2:
                    try tree.write(tree.proc + "/stat", """
                        cpu  4294967100 120 50010 900090 3000 10 200 0 7
                        cpu0 2147483600 60 25010 450090 1490 5 100 0 3
                        cpu2 18446744073709551615 0 0 1 0 0 0 0 0
                        intr 4294967300 40 0 0 0 0 0 0 0 0 0 0 22
                        ctxt 18446744073709551615
                        btime 1262304000
                        processes 5
                        procs_running 2
                        """)
                    try tree.remove(tree.sys + "/devices/system/cpu/cpu1/cpufreq")
                case 3:
                    try tree.write(tree.proc + "/stat", """
                        cpu  4294967200 120 50020 900180 3000 10 200 0 7 0 0 99
                        cpu0 2147483650 60 25015 450135 1500 5 100 0 3 0 0 99
                        cpu1 100 0 50 200 3 0 1 0 0 0 0 99
                        cpu2 18446744073709551615 0 0 1 0 0 0 0 0 0 0 99
                        intr 4294967310 40 0 0 0 0 0 0 0 0 0 0 32
                        ctxt 3
                        btime 1262304000
                        processes 9
                        procs_running 1
                        procs_blocked 1
                        """)
                default: break
                }
            })
    }

    /// A cpulist past NR_CPUS or past Int is left out, quickly.
    @Test func aGarbledIsolatedListCannotRunLong() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try tree.write(tree.sys + "/devices/system/cpu/isolated", "4294967290-4294967295,0-99999999999999999999999,2,8191-9000000000")
        let host = try PluginTestHost(path: productsDir + "/libcpu.so")
        let instance = try host.instance(options: "{ procfs: \(tree.proc), sysfs: \(tree.sys), isolated: true }", interval: .seconds(1))
        try instance.start()
        try instance.stop()
        #expect(instance.events(kind: "isolated").map { $0.int("cpu") } == [2, 8191])
    }

    @Test func theNewKindsAreOffByDefault() throws {
        let root = machines + "/old-kernel"
        let host = try PluginTestHost(path: productsDir + "/libcpu.so")
        let instance = try host.instance(options: "{ procfs: \(root)/proc, sysfs: \(root)/sys }", interval: .seconds(1))
        try instance.start()
        try instance.stop()
        #expect(Set(instance.events.map(\.kind)) == ["sample"])
    }

    @Test func describesTheNewKinds() throws {
        let d = try PluginTestHost(path: productsDir + "/libcpu.so").description
        #expect(d.events.map(\.kind) == ["sample", "core", "seconds", "stat", "frequency", "core_throttle",
                                          "package_throttle", "isolated"])
        let seconds = try #require(d.events.first { $0.kind == "seconds" })
        #expect(seconds.fields.map(\.name) == ["cpu", "user", "nice", "system", "idle", "iowait", "irq", "softirq",
                                               "steal", "guest", "guest_nice"])
        #expect(seconds.fields.dropFirst().allSatisfy { $0.unit == "seconds" && $0.counter && $0.type == .double })
        let stat = try #require(d.events.first { $0.kind == "stat" })
        #expect(stat.fields.filter(\.counter).map(\.name) == ["context_switches", "forks", "interrupts"])
        #expect(d.events.dropFirst(2).allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }
}
