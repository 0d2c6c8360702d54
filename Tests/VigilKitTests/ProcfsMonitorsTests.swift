import Glibc
import Testing
import VigilKitTesting

/// What every monitor of the proc filesystem shares (LinuxProbes'
/// MonitorSupport.swift): an empty `procfs` is refused where the manifest
/// writes it, and a root without the monitor's file makes it unavailable at
/// start (the host retries), each saying which file.
@Suite struct ProcfsMonitorsTests {
    /// Plugin, and the file its start looks for.
    static let monitors = [("arp", "net/arp"), ("softnet", "net/softnet_stat"), ("load", "loadavg"),
                           ("conntrack", "sys/net/netfilter/nf_conntrack_count"), ("sockstat", "net/sockstat"),
                           ("vmstat", "vmstat"), ("pressure", "pressure"), ("cpu", "stat"), ("memory", "meminfo"),
                           ("diskstats", "diskstats"), ("storage", "self/mountinfo")]

    @Test(arguments: monitors.map(\.0) + ["udp_queues", "kernel", "netstat", "netdev"])
    func anEmptyProcfsIsRefused(_ plugin: String) throws {
        let host = try PluginTestHost(path: productsDir + "/lib\(plugin).so")
        do {
            _ = try host.instance(options: "{ procfs: '' }")
            Issue.record("\(plugin): an empty procfs was accepted")
        } catch {
            #expect(error.status == "invalid configuration" && error.description.contains("options.procfs: must not be empty"),
                    "\(plugin): \(error)")
        }
    }

    @Test(arguments: monitors)
    func aRootWithoutTheFileIsUnavailableAndSaysWhichFile(_ plugin: String, _ file: String) throws {
        let tree = try TempTree()
        mkdir(tree.proc, 0o755)
        let host = try PluginTestHost(path: productsDir + "/lib\(plugin).so")
        let instance = try host.instance(options: "{ procfs: \(tree.proc) }")
        do {
            try instance.start()
            Issue.record("\(plugin) started on an empty tree")
        } catch {
            #expect(error.status == "unavailable" && error.description.contains("\(tree.proc)/\(file) does not exist"),
                    "\(plugin): \(error)")
        }
    }
}
