import Glibc
import Testing
import VigilKitTesting

/// The `netstat` plugin (libnetstat.so) on the captured machine and on an
/// older, stranger kernel: fewer tables and columns, an extra column, a
/// garbled value, a table without its values line, no snmp6, a 32-bit
/// counter that wraps and numbers beyond Int64.
@Suite(.serialized) struct NetstatPluginTests {
    @Test func capture() throws {
        try PluginGolden(plugin: "netstat", name: "capture").check(options: "{ procfs: \(machines)/capture/proc }")
    }

    /// Poll 2: Tcp InSegs wrapped at 2^32 (reported as the kernel has it,
    /// 12) and IPv6 came up (snmp6 appears); poll 3: IPv6 is gone again.
    @Test func oldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let snmp = tree.proc + "/net/snmp"
        try PluginGolden(plugin: "netstat", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }", polls: 3) { poll in
            if poll == 2 {
                let text = String(decoding: try TempTree.read(snmp), as: UTF8.self)
                try tree.write(snmp, String(text.replacingOccurrences(of: " 42 4294967290 ", with: " 42 12 ").dropLast()))
                try tree.write(tree.proc + "/net/snmp6", "Ip6InReceives 7\nIp6InOctets 560\nIcmp6InMsgs\nUdp6InDatagrams 3\nUdpLite6InErrors 0")
            } else {
                try tree.remove(tree.proc + "/net/snmp6")
            }
        }
    }

    @Test func unavailableWithoutAnyFile() throws {
        let tree = try TempTree()
        let instance = try PluginTestHost(path: productsDir + "/libnetstat.so").instance(options: "{ procfs: \(tree.path) }", interval: .seconds(1))
        #expect(throws: (any Error).self) { try instance.start() }
    }
}
