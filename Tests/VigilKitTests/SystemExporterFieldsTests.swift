import Testing
import VigilKitTesting

/// What the system plugin gives for node_exporter's uname, os and selinux
/// collectors, on the real capture of a machine (SELinux off, domainname
/// "(none)") and on a hand-made old kernel with SELinux enforcing and an
/// os-release with every key node_os_info shows.
@Suite struct SystemExporterFieldsTests {
    @Test(arguments: ["capture", "old-kernel"])
    func device(_ machine: String) throws {
        let root = machines + "/" + machine
        try PluginGolden(plugin: "system", name: machine)
            .check(options: "{ procfs: \(root)/proc, sysfs: \(root)/sys, rootfs: \(root) }", polls: 1)
    }

    /// SELinux enabled but permissive, and a config file that does not say.
    @Test func selinuxModes() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        try tree.write(tree.sys + "/fs/selinux/enforce", "0")
        try tree.write(tree.path + "/etc/selinux/config", "SELINUXTYPE=targeted")
        let host = try PluginTestHost(path: productsDir + "/libsystem.so")
        let instance = try host.instance(options: "{ procfs: \(tree.proc), sysfs: \(tree.sys), rootfs: \(tree.path) }",
                                         interval: .seconds(60))
        try instance.start()
        try instance.stop()
        let device = try #require(instance.events(kind: "device").first)
        #expect(device.bool("selinux_enabled") == true)
        #expect(device.bool("selinux_enforcing") == false)
        #expect(device.int("selinux_config_mode") == -1)
    }
}
