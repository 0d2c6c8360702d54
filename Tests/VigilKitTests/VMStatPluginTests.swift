import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `vmstat` plugin on this machine's capture and on a hand-made old
/// kernel (fewer lines, no oom_kill, names this plugin does not know, a
/// garbled line, numbers beyond 2^63 and 2^64, a 32-bit and a 64-bit
/// counter that wrap between polls).
@Suite(.serialized) struct VMStatPluginTests {
    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libvmstat.so") }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "vmstat" && d.polled)
        #expect(d.options.map(\.name) == ["procfs", "include"])
        #expect(d.events.map(\.kind) == ["sample"] && d.events[0].dynamicFields)
        let fields = Dictionary(uniqueKeysWithValues: d.events[0].fields.map { ($0.name, $0) })
        for counter in ["pgfault", "pgmajfault", "pgpgin", "pgpgout", "pswpin", "pswpout", "oom_kill", "nr_dirtied", "nr_written"] {
            #expect(fields[counter]?.counter == true, "\(counter)")
        }
        for gauge in ["nr_free_pages", "nr_dirty", "workingset_nodes", "nr_dirty_threshold"] {
            #expect(fields[gauge]?.counter == false, "\(gauge)")
        }
        #expect(d.events[0].fields.allSatisfy { !$0.doc.isEmpty })
    }

    @Test func onThisMachinesCapture() throws {
        try PluginGolden(plugin: "vmstat", name: "capture").check(options: "{ procfs: '\(machines)/capture/proc' }")
    }

    /// node_exporter's default fields, as globs.
    @Test func onThisMachinesCaptureWithNodeExportersFields() throws {
        try PluginGolden(plugin: "vmstat", name: "capture-node-exporter")
            .check(options: "{ procfs: '\(machines)/capture/proc', include: [oom_kill*, pgpg*, pswp*, 'pg*fault*'] }")
    }

    /// Poll 2: pswpin wraps at 2^32 (a 32-bit kernel's unsigned long), pgfault at 2^64.
    @Test func onAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let original = try String(decoding: TempTree.read(tree.proc + "/vmstat"), as: UTF8.self)
        try PluginGolden(plugin: "vmstat", name: "old-kernel").check(options: "{ procfs: '\(tree.proc)' }") { _ in
            let wrapped = original.replacingOccurrences(of: "pswpin 4294967295", with: "pswpin 3")
                .replacingOccurrences(of: "pgfault 18446744073709551610", with: "pgfault 4")
            try TempTree.write(tree.proc + "/vmstat", bytes: Array(wrapped.utf8))
        }
    }

    @Test func unavailableWithoutVmstat() throws {
        let instance = try host().instance(options: "{ procfs: '\(machines)/container/proc' }")
        do {
            try instance.start()
            Issue.record("start succeeded without vmstat")
        } catch {
            #expect(error.status == "unavailable")
        }
    }
}
