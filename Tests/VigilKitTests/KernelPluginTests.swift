import Glibc
import Testing
import VigilKitTesting

/// The `kernel` plugin (libkernel.so): file handles and the entropy pool.
@Suite(.serialized) struct KernelPluginTests {
    @Test func capture() throws {
        try PluginGolden(plugin: "kernel", name: "capture").check(options: "{ procfs: \(machines)/capture/proc }")
    }

    /// A pre-5.18 pool (4096 bits, 3012 available), then poolsize goes
    /// (fewer fields), then the entropy files go altogether (no entropy event).
    @Test func oldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "kernel", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }", polls: 3) { poll in
            try tree.remove(tree.proc + "/sys/kernel/random/poolsize")
            if poll == 3 { try tree.remove(tree.proc + "/sys/kernel/random") }
        }
    }

    /// A garbled file-nr fails the poll as temporary, whatever the other file says.
    @Test func garbledFileNr() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try tree.write(tree.proc + "/sys/fs/file-nr", "1024 x")
        let instance = try PluginTestHost(path: productsDir + "/libkernel.so").instance(options: "{ procfs: \(tree.proc) }", interval: .seconds(1))
        do {
            try instance.start()
            Issue.record("the poll succeeded")
        } catch {
            #expect(error.status == "temporary failure", "\(error)")
        }
        #expect(instance.events(kind: "entropy").count == 1)
    }
}
