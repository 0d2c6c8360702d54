import Glibc
import Testing
import VigilKitTesting

/// The small /proc/net plugins (arp, softnet, udp_queues, conntrack), each on
/// this machine's `capture` tree and the hand-made `old-kernel` one (an older
/// kernel's columns, garbled lines, a 32-bit counter that wraps, a file that
/// comes or goes between polls).
@Suite struct NetTablePluginsTests {
    static func capture(_ plugin: String) throws {
        try PluginGolden(plugin: plugin, name: "capture").check(options: "{ procfs: \(machines)/capture/proc }")
    }

    @Test(arguments: ["arp", "softnet", "udp_queues", "conntrack"])
    func onTheCapture(_ plugin: String) throws { try Self.capture(plugin) }

    /// Counted per device whatever the flags (the incomplete entry too); the
    /// garbled line skipped; wlan0's entry gone in the second poll.
    @Test func arpOnAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "arp", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }", between: { _ in
            try tree.write(tree.proc + "/net/arp", """
                IP address       HW type     Flags       HW address            Mask     Device
                10.1.0.1         0x1         0x2         00:11:22:33:44:55     *        eth0
                """)
        })
    }

    /// Eleven columns (3.11–5.9: no backlog length, no CPU number: the line's
    /// position), a garbled line skipped, CPU 0's processed wrapping past 2^32.
    @Test func softnetOnAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "softnet", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }", between: { _ in
            try tree.write(tree.proc + "/net/softnet_stat", """
                00000010 00000002 0000001d 00000000 00000000 00000000 00000000 00000000 00000000 00000003 00000001
                0001e250 00000000 00000005 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000
                """)
        })
    }

    /// No udp6 (IPv6 off) at first: v4 only, the truncated line skipped; then udp6 appears.
    @Test func udpQueuesOnAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "udp_queues", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }", between: { _ in
            try tree.write(tree.proc + "/net/udp6", """
                  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
                   12: 00000000000000000000000000000000:0222 00000000000000000000000000000000:0000 07 00000000:00000300 00:00000000 00000000     0        0 3456 2 ffff888003c1e800 0
                """)
        })
    }

    /// A pre-4.11 statistics header (no search_restart) summed over two CPUs;
    /// then the statistics file gone (fewer fields), the count still there.
    @Test func conntrackOnAnOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try PluginGolden(plugin: "conntrack", name: "old-kernel").check(options: "{ procfs: \(tree.proc) }", between: { _ in
            try tree.remove(tree.proc + "/net/stat/nf_conntrack")
            try tree.write(tree.proc + "/sys/net/netfilter/nf_conntrack_count", "1300")
        })
    }

    /// Where the source is missing altogether, each is unavailable at start.
    @Test(arguments: ["arp", "softnet", "udp_queues", "conntrack"])
    func unavailableWithoutTheirFile(_ plugin: String) throws {
        let tree = try TempTree()
        let instance = try PluginTestHost(path: productsDir + "/lib\(plugin).so").instance(options: "{ procfs: \(tree.proc) }")
        #expect(throws: (any Error).self) { try instance.start() }
    }
}
