import Glibc
import Testing
import VigilKitTesting

/// The `netdev` plugin (libnetdev.so) on two trees: `capture` (this
/// machine's /proc/net/dev and /sys/class/net: lo, two ifb interfaces that are
/// down, whose speed, carrier, duplex, dormant and name_assign_type the kernel
/// refuses to read, and a virtio eth0 whose speed is -1) and `old-kernel` (no
/// rx_nohandler, carrier_up/down counts nor name_assign_type; an extra
/// /proc/net/dev column, a garbled line, a name touching its first number,
/// a speed that cannot be read, `bonding_masters` beside the interfaces, and
/// eth0's 32-bit receive_bytes wrapping while wlan0 goes and usb0 comes).
@Suite struct NetdevPluginTests {
    static let capture = "{ procfs: \(machines)/capture/proc, sysfs: \(machines)/capture/sys }"

    @Test func capture() throws {
        try PluginGolden(plugin: "netdev", name: "capture").check(options: Self.capture)
    }

    /// As the node_exporter stand-in runs it: lo's counters left out, as Debian's node_exporter does.
    @Test func captureWithoutLoopbackCounters() throws {
        try PluginGolden(plugin: "netdev", name: "capture-stats-exclude-lo").check(
            options: "{ procfs: \(machines)/capture/proc, sysfs: \(machines)/capture/sys, stats_exclude: [lo], exclude: ['ifb1'] }", polls: 1)
    }

    @Test func oldKernelWithWrapAndInterfacesComingAndGoing() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let dev = tree.proc + "/net/dev"
        let header = """
            Inter-|   Receive                                                |  Transmit
             face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed otherhost
            """
        try PluginGolden(plugin: "netdev", name: "old-kernel").check(
            options: "{ procfs: \(tree.proc), sysfs: \(tree.sys) }", polls: 3,
            between: { poll in
                switch poll {
                case 2:
                    // eth0's receive_bytes wraps past 2^32; wlan0 goes, usb0 comes.
                    try tree.write(dev, header + """

                            lo:   48313     513    0    0    0     0          0         0    48313     513    0    0    0     0       0          0 0
                          eth0:      100 3145730    3    7    1     2          0      1201 918273700  2097153    0    1    0    11       4          0 0
                          usb0:        0       0    0    0    0     0          0         0        0        0    0    0    0     0       0          0 0
                        """)
                    try tree.remove(tree.sys + "/class/net/wlan0")
                    guard symlink("../../devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/net/usb0", tree.sys + "/class/net/usb0") == 0 else {
                        throw TempTree.Failure(description: "symlink usb0")
                    }
                default:
                    // The next value after the wrap is reported as it comes; ppp0's values past 2^63 − 1 saturate.
                    try tree.write(dev, header + """

                          eth0:     5000 3145740    3    7    1     2          0      1201 918274000  2097160    0    1    0    11       4          0 0
                          ppp0: 18446744073709551615 9223372036854775807 0 0 0 0 0 0 9223372036854775808 1 0 0 0 0 0 0 0
                        """)
                }
            })
    }

    @Test func unavailableWithoutEitherSource() throws {
        let tree = try TempTree()
        let instance = try PluginTestHost(path: productsDir + "/libnetdev.so")
            .instance(options: "{ procfs: \(tree.path)/proc, sysfs: \(tree.path)/sys }")
        #expect(throws: (any Error).self) { try instance.start() }
    }

    @Test func refusesAnEmptyGlob() throws {
        let host = try PluginTestHost(path: productsDir + "/libnetdev.so")
        #expect(throws: (any Error).self) { _ = try host.instance(options: "{ interfaces: [''] }") }
    }
}
