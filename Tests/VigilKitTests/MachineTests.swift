import Glibc
import Testing
import VigilKitTesting

/// Every catalogue plugin on every scenario machine under
/// Tests/Fixtures/machines, and on the machine running the tests: each one
/// either runs (start, poll, stop, only declared events) or reports its source
/// unavailable. On the broken machine a garbled kernel file may also make a
/// poll fail as temporary (the host logs it and polls again at the next
/// interval); which plugins do is listed. Nothing else is acceptable,
/// whatever the machine lacks or has broken.
@Suite(.serialized) struct MachineTests {
    /// A catalogue plugin and the options that point it at a machine's root
    /// (`""` for the real machine: the plugin's defaults).
    struct Plugin: CustomStringConvertible, Sendable {
        var name: String
        var roots: @Sendable (String) -> String
        var description: String { name }
    }

    static let catalogue: [Plugin] = [
        Plugin(name: "cpu") { "procfs: \($0)/proc" },
        Plugin(name: "memory") { "procfs: \($0)/proc" },
        Plugin(name: "load") { "procfs: \($0)/proc" },
        Plugin(name: "storage") { "procfs: \($0)/proc, rootfs: \($0)" },
        Plugin(name: "power") { "sysfs: \($0)/sys" },
        Plugin(name: "thermal") { "sysfs: \($0)/sys" },
        Plugin(name: "hwmon") { "sysfs: \($0)/sys" },
        Plugin(name: "network") { "sysfs: \($0)/sys, procfs: \($0)/proc" },
        Plugin(name: "wifi") { "sysfs: \($0)/sys, procfs: \($0)/proc" },
        Plugin(name: "clock") { "rootfs: \($0)" },
        Plugin(name: "process") { "procfs: \($0)/proc" },
        Plugin(name: "devices") { "sysfs: \($0)/sys" },
        Plugin(name: "sensors") { "sysfs: \($0)/sys" },
        Plugin(name: "display") { "sysfs: \($0)/sys" },
        Plugin(name: "radio") { "sysfs: \($0)/sys, devfs: \($0)/dev" },
        Plugin(name: "system") { "procfs: \($0)/proc, sysfs: \($0)/sys, rootfs: \($0)" },
        Plugin(name: "netstat") { "procfs: \($0)/proc" },
        Plugin(name: "sockstat") { "procfs: \($0)/proc" },
        Plugin(name: "kernel") { "procfs: \($0)/proc" },
        Plugin(name: "time") { "sysfs: \($0)/sys" },
        Plugin(name: "cgroups") { "cgroupfs: \($0)/sys/fs/cgroup" },
        Plugin(name: "netdev") { "procfs: \($0)/proc, sysfs: \($0)/sys" },
        Plugin(name: "arp") { "procfs: \($0)/proc" },
        Plugin(name: "softnet") { "procfs: \($0)/proc" },
        Plugin(name: "udp_queues") { "procfs: \($0)/proc" },
        Plugin(name: "conntrack") { "procfs: \($0)/proc" },
        Plugin(name: "diskstats") { "procfs: \($0)/proc, sysfs: \($0)/sys, rootfs: \($0)" },
        Plugin(name: "vmstat") { "procfs: \($0)/proc" },
        Plugin(name: "pressure") { "procfs: \($0)/proc" },
    ]

    /// Options a plugin needs whatever the machine.
    static func required(_ plugin: String, root: String) -> String {
        switch plugin {
        case "process": "name: nginx"
        case "files": "paths: [\(root)/etc/*]"
        default: ""
        }
    }

    enum Outcome: Equatable, CustomStringConvertible {
        case ran(events: Int)
        case unavailable(String)
        case retrying(String)
        var description: String {
            switch self {
            case .ran(let n): "ran (\(n) events)"
            case .unavailable(let why): "unavailable: \(why)"
            case .retrying(let why): "temporary failure: \(why)"
            }
        }
        var ran: Bool { if case .ran = self { true } else { false } }
        var retrying: Bool { if case .retrying = self { true } else { false } }
    }

    /// Starts, polls and stops `plugin` on the machine at `root` (nil: this
    /// machine), failing the test on anything but running or unavailable.
    func run(_ plugin: Plugin, root: String?) throws -> Outcome {
        let host = try PluginTestHost(path: productsDir + "/lib\(plugin.name).so")
        let options = [root.map(plugin.roots) ?? "", Self.required(plugin.name, root: root ?? "")]
            .filter { !$0.isEmpty }.joined(separator: ", ")
        let instance = try host.instance(options: "{ \(options) }", interval: .seconds(1))
        do {
            try instance.start()
            try instance.advance(by: .seconds(1))
            try instance.stop()
        } catch {
            try? instance.stop()
            switch error.status {
            case "unavailable": return .unavailable(error.description)
            case "temporary failure": return .retrying(error.description)
            default: throw error
            }
        }
        #expect(instance.violations.isEmpty, "\(plugin) on \(root ?? "this machine"): \(instance.violations)")
        if let gone = instance.availability.last(where: { !$0.available }), instance.events.isEmpty {
            return .unavailable(gone.reason)
        }
        return .ran(events: instance.events.count)
    }

    /// Which plugins run on each machine, and which fail a poll as temporary;
    /// the rest must be unavailable.
    static let expected: [(machine: String, running: Set<String>, retrying: Set<String>)] = [
        ("laptop", ["cpu", "memory", "load", "storage", "power", "thermal", "network", "wifi", "clock", "process", "devices", "sensors", "display", "radio", "system", "time", "hwmon", "netdev", "vmstat", "pressure"], []),
        ("server", ["cpu", "memory", "load", "storage", "thermal", "network", "clock", "process", "system", "time", "hwmon", "netdev", "vmstat", "pressure"], []),
        ("container", ["cpu", "memory", "load", "storage", "clock", "process", "system", "time"], []),
        ("broken", ["storage", "power", "thermal", "clock", "process", "display", "radio", "system", "time", "hwmon"], ["cpu", "memory", "load"]),
        ("capture", ["cpu", "memory", "system", "clock", "process", "netstat", "sockstat", "kernel", "time", "cgroups", "network", "netdev", "arp", "softnet", "udp_queues", "conntrack", "diskstats", "vmstat", "pressure"], []),
        ("old-kernel", ["cpu", "memory", "system", "clock", "process", "netstat", "sockstat", "kernel", "time", "cgroups", "power", "thermal", "hwmon", "network", "netdev", "arp", "softnet", "udp_queues", "conntrack", "diskstats", "vmstat", "pressure"], []),
    ]

    @Test(arguments: expected.map(\.machine))
    func everyPluginRunsOrIsUnavailable(on machine: String) throws {
        let expected = Self.expected.first { $0.machine == machine }!
        for plugin in Self.catalogue {
            let outcome = try run(plugin, root: machines + "/" + machine)
            #expect(outcome.ran == expected.running.contains(plugin.name), "\(plugin) on \(machine): \(outcome)")
            #expect(outcome.retrying == expected.retrying.contains(plugin.name), "\(plugin) on \(machine): \(outcome)")
        }
    }

    @Test func everyPluginRunsOrIsUnavailableOnThisMachine() throws {
        for plugin in Self.catalogue {
            let outcome = try run(plugin, root: nil)
            #expect(!outcome.retrying, "\(plugin) on this machine: \(outcome)")
        }
    }
}
