import Glibc
import Testing
import VigilKitTesting

/// The `sockstat` plugin (libsockstat.so) on the captured machine and on an
/// older kernel: no sockstat6 (then it appears), an extra pair, a garbage
/// line, and a TCP memory figure whose bytes overflow Int64 (saturated).
@Suite(.serialized) struct SockstatPluginTests {
    @Test func capture() throws {
        try PluginGolden(plugin: "sockstat", name: "capture").check(options: "{ procfs: \(machines)/capture/proc }")
    }

    /// Poll 2: IPv6 came up (sockstat6 appears, one of its lines garbled).
    @Test func oldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "sockstat", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }") { _ in
            try tree.write(tree.proc + "/net/sockstat6", "TCP6: inuse 4\nUDP6: inuse 2\nUDPLITE6: inuse\nRAW6: inuse 0\nFRAG6: inuse 0 memory 0")
        }
    }
}
