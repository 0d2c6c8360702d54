import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `diskstats` plugin on this machine's capture and on a hand-made old
/// kernel (11 columns, a 2.6-style partition line, garbage, a 21-column line
/// of a newer kernel with values beyond 2^63, udev properties, an I/O time
/// that wraps at 2^32 and devices that come and go between polls).
@Suite(.serialized) struct DiskstatsPluginTests {
    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libdiskstats.so") }

    static func options(_ root: String, _ extra: String = "") -> String {
        "{ procfs: '\(root)/proc', sysfs: '\(root)/sys', rootfs: '\(root)'\(extra.isEmpty ? "" : ", " + extra) }"
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "diskstats" && d.polled)
        #expect(d.options.map(\.name) == ["procfs", "sysfs", "rootfs", "include", "exclude"])
        #expect(d.events.map(\.kind) == ["device", "info"])
        let counters = d.events[0].fields.filter(\.counter).map(\.name)
        #expect(counters.count == 16 && !counters.contains("in_progress") && !counters.contains("device"))
        #expect(d.events[1].fields.filter(\.identity).map(\.name) == ["device", "major", "minor"])
    }

    @Test func onThisMachinesCapture() throws {
        try PluginGolden(plugin: "diskstats", name: "capture").check(options: Self.options(machines + "/capture"))
    }

    /// Poll 2: sda's io_time wraps at 2^32, sdb is gone, sdd (a USB disk,
    /// serial from SCSI_IDENT_SERIAL) is plugged in. Poll 3: sdb is back.
    @Test func onAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let original = try String(decoding: TempTree.read(tree.proc + "/diskstats"), as: UTF8.self)
        let lines = original.split(separator: "\n").map(String.init)
        func without(_ name: String, _ lines: [String]) -> [String] { lines.filter { !$0.contains(" \(name) ") } }
        let wrapped = lines.map { $0.replacingOccurrences(of: "0 4294967290 145256", with: "0 5 145300") }
        let sdd = "   8      48 sdd 10 0 80 4 2 0 16 1 0 5 5"
        try PluginGolden(plugin: "diskstats", name: "old-kernel").check(options: Self.options(tree.path), polls: 3) { poll in
            switch poll {
            case 2:
                try TempTree.write(tree.proc + "/diskstats", bytes: Array((without("sdb", wrapped) + [sdd]).joined(separator: "\n").utf8 + [10]))
                #expect(symlink("../devices/pci0000:00/0000:00:1d.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0/block/sdd",
                                tree.sys + "/block/sdd") == 0)
            default:
                try TempTree.write(tree.proc + "/diskstats", bytes: Array((wrapped + [sdd]).joined(separator: "\n").utf8 + [10]))
            }
        }
    }

    @Test func includeAndExcludeAreGlobsWithExtendedPatterns() throws {
        let host = try host()
        func devices(_ extra: String) throws -> [String] {
            let instance = try host.instance(options: Self.options(machines + "/old-kernel", extra))
            try instance.start()
            try instance.stop()
            #expect(instance.violations.isEmpty)
            return instance.events(kind: "device").compactMap { $0.string("device") }
        }
        #expect(try devices("") == ["sda", "sdb", "dm-0", "nvme0n1"])  // not sda1 nor loop0
        #expect(try devices("exclude: []") == ["sda", "sda1", "sdb", "dm-0", "loop0", "nvme0n1"])
        #expect(try devices("include: ['sd*']") == ["sda", "sdb"])  // sda1 still excluded
        #expect(try devices("include: ['sd*'], exclude: []") == ["sda", "sda1", "sdb"])
        #expect(try devices("exclude: ['@(sd|dm-)*']") == ["loop0", "nvme0n1"])
        #expect(throws: PluginTestError.self) { try host.instance(options: Self.options(machines + "/old-kernel", "exclude: ['']")) }
    }

    @Test func unavailableWithoutDiskstats() throws {
        let instance = try host().instance(options: Self.options(machines + "/container"))
        do {
            try instance.start()
            Issue.record("start succeeded without diskstats")
        } catch {
            #expect(error.status == "unavailable")
        }
    }
}
