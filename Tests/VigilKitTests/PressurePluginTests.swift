import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `pressure` plugin on this machine's capture (cpu, io, memory; no irq)
/// and on a hand-made 5.4 kernel (no `full` line for cpu, no irq, an unknown
/// key, a total of 2^64 − 1 µs, and an io file that is garbled for a poll).
@Suite(.serialized) struct PressurePluginTests {
    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libpressure.so") }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "pressure" && d.polled)
        #expect(d.events.map(\.kind) == ["sample"])
        let fields = d.events[0].fields
        #expect(fields.count == 32)
        #expect(fields.filter(\.counter).map(\.name) == ["cpu_some_total", "cpu_full_total", "io_some_total", "io_full_total",
                                                         "memory_some_total", "memory_full_total", "irq_some_total", "irq_full_total"])
        #expect(fields.allSatisfy { $0.unit == ($0.counter ? "seconds" : "percent") })
    }

    @Test func onThisMachinesCapture() throws {
        try PluginGolden(plugin: "pressure", name: "capture").check(options: "{ procfs: '\(machines)/capture/proc' }")
    }

    @Test func onAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let io = try TempTree.read(tree.proc + "/pressure/io")
        try PluginGolden(plugin: "pressure", name: "old-kernel").check(options: "{ procfs: '\(tree.proc)' }", polls: 3) { poll in
            try TempTree.write(tree.proc + "/pressure/io", bytes: poll == 2 ? Array("some avg10=x avg60=0.10\n".utf8) : io)
        }
    }

    @Test func unavailableWithoutPSI() throws {
        let instance = try host().instance(options: "{ procfs: '\(machines)/container/proc' }")
        do {
            try instance.start()
            Issue.record("start succeeded without pressure/")
        } catch {
            #expect(error.status == "unavailable")
        }
        // A pressure/ directory whose files cannot be read (psi=0 answers EOPNOTSUPP; here: none at all).
        let tree = try TempTree()
        #expect(mkdir(tree.proc, 0o755) == 0 && mkdir(tree.proc + "/pressure", 0o755) == 0)
        let empty = try host().instance(options: "{ procfs: '\(tree.proc)' }")
        do {
            try empty.start()
            try empty.stop()
            #expect(empty.events.isEmpty)
            #expect(empty.availability.last?.available == false)
        } catch {
            #expect(error.status == "unavailable")
        }
    }
}
