import Glibc
import Testing
import VigilCore
import VigilKit
import VigilKitTesting

/// The built `hwmon` plugin (libhwmon.so) on the scenario machines: the
/// laptop's and the server's chips, zones and cooling devices, and the
/// old-kernel machine's Super-I/O chip that keeps its attributes on its
/// device, a chip with neither name nor device, a dangling chip link, a
/// zone that cannot be read and an energy counter that wraps.
///
/// The golden files were checked by hand against prometheus-node-exporter
/// 1.5.0 run on the same trees (`--path.sysfs=… --collector.disable-defaults
/// --collector.hwmon --collector.thermal_zone`): the same chips (names
/// derived the same way), sensors, labels and values, scaled as the mapping
/// in dist/prometheus scales them.
@Suite(.serialized) struct HwmonPluginTests {
    func host() throws(PluginTestError) -> PluginTestHost { try PluginTestHost(path: productsDir + "/libhwmon.so") }

    /// Writes `text` and a newline to `file`, making its directories.
    func put(_ file: String, _ text: String) throws {
        #expect(PluginGolden.mkdirs(file[..<(file.lastIndex(of: "/") ?? file.endIndex)]))
        try TempTree.write(file, bytes: Array((text.isEmpty ? "" : text + "\n").utf8))
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "hwmon" && d.polled && d.defaultInterval == 10_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.defaultText ?? "-")" }
                == ["sysfs:/sys", "hwmon:true", "thermal_zones:true", "cooling_devices:true"])
        #expect(d.events.map(\.kind) == ["temperature", "voltage", "fan", "pwm", "current", "power", "energy", "humidity",
                                         "intrusion", "chip", "label", "settings", "zone", "cooling_device"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
        let energy = try #require(d.events.first { $0.kind == "energy" })
        #expect(energy.fields.first { $0.name == "energy" }?.counter == true)
        #expect(energy.fields.first { $0.name == "energy" }?.unit == "joules")
    }

    @Test(arguments: ["laptop", "server"])
    func goldenOnAMachine(_ machine: String) throws {
        try PluginGolden(plugin: "hwmon", name: machine).check(options: "{ sysfs: \(machines)/\(machine)/sys }", polls: 1)
    }

    /// Chip names as node_exporter derives them: from the device link
    /// (`<parent>_<device>`, cleaned), else the name file, else the directory.
    @Test func chipNamesFollowNodeExporter() throws {
        func chips(_ sysfs: String) throws -> [String] {
            let instance = try host().instance(options: "{ sysfs: \(sysfs) }", interval: .seconds(10))
            try instance.start()
            try instance.stop()
            var seen: [String] = []
            for event in instance.events where event.kind != "zone" && event.kind != "cooling_device" {
                if let chip = event.string("chip"), !seen.contains(chip) { seen.append(chip) }
            }
            return seen
        }
        #expect(try chips(machines + "/laptop/sys") == ["thermal_thermal_zone0", "nvme_nvme0", "coretemp", "bat0"])
        #expect(try chips(machines + "/server/sys") == ["thermal_thermal_zone0", "platform_coretemp_0"])
        #expect(try chips(machines + "/old-kernel/sys") == ["platform_it87_656", "hwmon1"])

        // A PCI device's chip, and a name that cleans to nothing.
        let tree = try TempTree()
        let device = tree.path + "/devices/pci0000:00/0000:00:03.0"
        try put(device + "/hwmon/hwmon4/temp1_input", "40000")
        try put(device + "/hwmon/hwmon4/name", "amdgpu")
        #expect(symlink("../../../0000:00:03.0", device + "/hwmon/hwmon4/device") == 0)
        try put(tree.path + "/devices/virtual/hwmon/hwmon5/in0_input", "1000")
        try put(tree.path + "/devices/virtual/hwmon/hwmon5/name", "!!!")
        try put(tree.path + "/class/hwmon/.keep", "")
        #expect(symlink("../../devices/pci0000:00/0000:00:03.0/hwmon/hwmon4", tree.path + "/class/hwmon/hwmon4") == 0)
        #expect(symlink("../../devices/virtual/hwmon/hwmon5", tree.path + "/class/hwmon/hwmon5") == 0)
        #expect(try chips(tree.path) == ["pci0000:00_0000:00:03_0", "hwmon5"])
    }

    /// The old kernel, polled twice: between the polls the energy counter
    /// wraps (from near 2^64 µJ to 1 J), the stopped fan spins up, the
    /// Super-I/O chip goes away, the unreadable zone becomes readable and a
    /// cooling device appears.
    @Test func goldenOnTheOldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel/sys")
        try PluginGolden(plugin: "hwmon", name: "old-kernel").check(options: "{ sysfs: \(tree.path) }", polls: 2) { _ in
            try tree.write(tree.path + "/devices/virtual/hwmon/hwmon1/energy1_input", "1000000")
            try tree.write(tree.path + "/devices/platform/it87.656/fan1_input", "840")
            try tree.remove(tree.path + "/devices/virtual/thermal/thermal_zone1/temp")
            try tree.write(tree.path + "/devices/virtual/thermal/thermal_zone1/temp", "30000")
            try tree.remove(tree.path + "/class/hwmon/hwmon0")
            try put(tree.path + "/devices/virtual/thermal/cooling_device2/type", "Processor")
            try put(tree.path + "/devices/virtual/thermal/cooling_device2/cur_state", "0")
            try put(tree.path + "/devices/virtual/thermal/cooling_device2/max_state", "3")
            #expect(symlink("../../devices/virtual/thermal/cooling_device2", tree.path + "/class/thermal/cooling_device2") == 0)
        }
    }

    @Test func theWrappedEnergyCounterIsReportedRaw() throws {
        let tree = try TempTree(copying: machines + "/old-kernel/sys")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        try instance.start()
        try tree.write(tree.path + "/devices/virtual/hwmon/hwmon1/energy1_input", "1000000")
        try instance.advance(by: .seconds(1))
        try instance.stop()
        #expect(instance.events(kind: "energy").map { $0.double("energy") ?? -1 } == [18_446_744_073_709.0, 1.0])
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutAnySource() throws {
        let tree = try TempTree()
        try put(tree.path + "/class/thermal/.keep", "")
        let instance = try host().instance(options: "{ sysfs: \(tree.path) }", interval: .seconds(1))
        #expect(throws: PluginTestError.self) { try instance.start() }
        // Only what is asked for counts: the old kernel's zones without its chips and cooling devices.
        let zonesOnly = try host().instance(options: "{ sysfs: \(machines)/old-kernel/sys, hwmon: false, cooling_devices: false }",
                                            interval: .seconds(1))
        try zonesOnly.start()
        try zonesOnly.stop()
        #expect(Set(zonesOnly.events.map(\.kind)) == ["zone"])
        #expect(throws: PluginTestError.self) {
            _ = try host().instance(options: "{ hwmon: false, thermal_zones: false, cooling_devices: false }", interval: .seconds(1))
        }
    }
}

/// The power plugin's `attributes` kind (node_exporter's powersupplyclass
/// figures), off by default.
@Suite(.serialized) struct PowerAttributesTests {
    @Test(arguments: ["laptop", "old-kernel"])
    func goldenOnAMachine(_ machine: String) throws {
        try PluginGolden(plugin: "power", name: "attributes-\(machine)")
            .check(options: "{ sysfs: \(machines)/\(machine)/sys, attributes: true }", polls: 1)
    }

    @Test func offByDefault() throws {
        let instance = try PluginTestHost(path: productsDir + "/libpower.so")
            .instance(options: "{ sysfs: \(machines)/laptop/sys }", interval: .seconds(10))
        try instance.start()
        try instance.stop()
        #expect(instance.events(kind: "attributes").isEmpty)
        #expect(!instance.events.isEmpty)
    }
}
