import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `system` plugin, built as libsystem.so, against the machine trees in
/// Tests/Fixtures/machines (each is a root: proc/, sys/, etc/, usr/).
@Suite(.serialized) struct SystemPluginTests {
    static let machines = repoRoot + "/Tests/Fixtures/machines"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libsystem.so") }

    /// The options that make `root` the whole machine.
    static func options(_ root: String, _ extra: String = "") -> String {
        "{ procfs: \(root)/proc, sysfs: \(root)/sys, rootfs: \(root)\(extra.isEmpty ? "" : ", " + extra) }"
    }

    func started(_ root: String, _ extra: String = "") throws -> TestInstance {
        let instance = try host().instance(options: Self.options(root, extra), interval: .seconds(60))
        try instance.start()
        return instance
    }

    /// The fields of the only device event.
    func device(_ instance: TestInstance) throws -> [Field] {
        let events = instance.events(kind: "device")
        try #require(events.count == 1, "\(events)")
        return events[0].fields
    }

    static func s(_ name: String, _ value: String) -> Field { Field(name, .string(value)) }
    static func i(_ name: String, _ value: Int64) -> Field { Field(name, .int(value)) }
    static func d(_ name: String, _ value: Double) -> Field { Field(name, .double(value)) }

    /// The uptime fields expected of `root`'s files: boot_time only where
    /// its proc/stat has a btime line (proc/stat belongs to other fixtures).
    static func uptimeFields(_ root: String, uptime: Double, idle: Double, cpus: Double) -> [Field] {
        var fields = [d("uptime", uptime), d("idle", idle), d("idle_share", idle / (uptime * cpus))]
        if let stat = try? String(decoding: TempTree.read(root + "/proc/stat"), as: UTF8.self),
           let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
           let btime = Int64(line.dropFirst(6)) {
            fields.append(i("boot_time", btime))
        }
        return fields
    }

    // MARK: self-description

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "system" && d.polled && d.defaultInterval == 60_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["procfs:string:/proc", "sysfs:string:/sys", "rootfs:string:/", "include_identifiers:bool:false"])
        #expect(d.events.map(\.kind) == ["device", "uptime"])
        #expect(d.events[1].fields.map(\.name) == ["uptime", "idle", "idle_share", "boot_time"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
        #expect(d.options.allSatisfy { !$0.doc.isEmpty })
    }

    // MARK: the machines

    @Test func laptop() throws {
        let root = Self.machines + "/laptop"
        let instance = try started(root)
        #expect(try device(instance) == [
            Self.s("hostname", "thinkpad-x1"), Self.s("uts_domainname", "(none)"),
            Self.s("os_id", "ubuntu"), Self.s("os_id_like", "debian"), Self.s("os_name", "Ubuntu"),
            Self.s("os_version", "24.04.1 LTS (Noble Numbat)"), Self.s("os_version_id", "24.04"),
            Self.s("os_version_codename", "noble"), Self.s("os_pretty_name", "Ubuntu 24.04.1 LTS"),
            Self.d("os_version_number", 24.04),
            Self.s("kernel_name", "Linux"), Self.s("kernel_release", "6.8.0-45-generic"),
            Self.s("kernel_version", "#45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024"),
            // No proc/sys/kernel/arch on this kernel, and procfs is not /proc: no architecture.
            Self.s("sys_vendor", "LENOVO"), Self.s("product_name", "20XWCTO1WW"),
            Self.s("product_version", "ThinkPad X1 Carbon Gen 9"), Self.s("product_family", "ThinkPad X1 Carbon Gen 9"),
            Self.s("board_vendor", "LENOVO"), Self.s("board_name", "20XWCTO1WW"),
            Self.s("bios_vendor", "LENOVO"), Self.s("bios_version", "N32ET86W (1.62 )"), Self.s("bios_date", "03/15/2024"),
            Self.i("chassis_type", 10), Self.s("chassis", "notebook"),
            Self.s("cpu_model", "11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz"), Self.s("cpu_vendor", "GenuineIntel"),
            Self.i("cpu_count", 8),
            // No sys/fs/selinux/enforce.
            Field("selinux_enabled", .bool(false)),
        ])
        #expect(instance.events(kind: "uptime").map(\.fields)
                == [Self.uptimeFields(root, uptime: 93784.51, idle: 612345.20, cpus: 8)])
        #expect(instance.events.count == 2)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func rackServer() throws {
        let root = Self.machines + "/server"
        let instance = try started(root)
        #expect(try device(instance) == [
            Self.s("hostname", "db-07"), Self.s("domainname", "corp.example"), Self.s("uts_domainname", "corp.example"),
            // Only usr/lib/os-release here: read when etc/ has none.
            Self.s("os_id", "debian"), Self.s("os_name", "Debian GNU/Linux"), Self.s("os_version", "12 (bookworm)"),
            Self.s("os_version_id", "12"), Self.s("os_version_codename", "bookworm"),
            Self.s("os_pretty_name", "Debian GNU/Linux 12 (bookworm)"), Self.d("os_version_number", 12),
            Self.s("kernel_name", "Linux"), Self.s("kernel_release", "6.1.0-25-amd64"),
            Self.s("kernel_version", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.106-3 (2024-08-26)"),
            Self.s("architecture", "x86_64"),
            // product_version "Not Specified" is a placeholder: left out.
            Self.s("sys_vendor", "Dell Inc."), Self.s("product_name", "PowerEdge R650"), Self.s("product_family", "PowerEdge"),
            Self.s("board_vendor", "Dell Inc."), Self.s("board_name", "0Y2K8N"),
            Self.s("bios_vendor", "Dell Inc."), Self.s("bios_version", "1.12.1"), Self.s("bios_date", "11/20/2023"),
            Self.i("chassis_type", 23), Self.s("chassis", "rack mount"),
            Self.s("cpu_model", "AMD EPYC 7543 32-Core Processor"), Self.s("cpu_vendor", "AuthenticAMD"),
            Self.i("cpu_count", 64), Field("selinux_enabled", .bool(false)),
        ])
        #expect(instance.events(kind: "uptime").map(\.fields)
                == [Self.uptimeFields(root, uptime: 3456789.12, idle: 210987654.32, cpus: 64)])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func containerWithOnlyProc() throws {
        let root = Self.machines + "/container"
        let instance = try started(root)
        #expect(try device(instance) == [
            Self.s("hostname", "3f2a9c1b7d4e"), Self.s("uts_domainname", "(none)"),
            Self.s("os_id", "alpine"), Self.s("os_name", "Alpine Linux"), Self.s("os_version_id", "3.20.3"),
            Self.s("os_pretty_name", "Alpine Linux v3.20"),
            // node_exporter's node_os_version: the leading major.minor only.
            Self.d("os_version_number", 3.2),
            Self.s("kernel_name", "Linux"), Self.s("kernel_release", "6.1.102-111.182.amzn2023.aarch64"),
            Self.s("kernel_version", "#1 SMP Tue Jul 30 18:18:12 UTC 2024"), Self.s("architecture", "aarch64"),
            // No sys at all: no DMI, no device tree. arm64 cpuinfo names no model: the part does.
            Self.s("cpu_model", "ARM Neoverse-N1"), Self.s("cpu_vendor", "ARM"), Self.i("cpu_count", 4),
            Self.s("container", "podman"), Field("selinux_enabled", .bool(false)),
        ])
        #expect(instance.events(kind: "uptime").map(\.fields)
                == [Self.uptimeFields(root, uptime: 1234.56, idle: 4567.89, cpus: 4)])
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func brokenMachine() throws {
        let root = Self.machines + "/broken"
        let instance = try started(root)
        #expect(try device(instance) == [
            Self.s("hostname", "broken-box"),
            // NAME, PRETTY_NAME (unterminated quotes), "ID_LIKE = rhel", "9ID" and the
            // prose line are skipped; VERSION_ID is given twice, the last counts.
            Self.s("os_id", "fedora"), Self.s("os_version", "40 (\"Workstation\" Edition) $5"),
            Self.s("os_version_id", "41"), Self.s("os_version_codename", "the\\ quick fox"), Self.d("os_version_number", 41),
            // version is a directory (unreadable); no arch.
            Self.s("kernel_name", "Linux"), Self.s("kernel_release", "6.9.0"),
            // sys_vendor empty, product_name a placeholder, board_name a directory, chassis_type garbled.
            Self.s("bios_vendor", "American Megatrends Inc."), Self.s("bios_version", "F.10"),
            // cpuinfo cut in the second processor's block.
            Self.s("cpu_model", "Intel(R) Celeron(R) N4020 CPU @ 1.10GHz"), Self.s("cpu_vendor", "GenuineIntel"),
            Self.i("cpu_count", 2), Field("selinux_enabled", .bool(false)),
        ])
        #expect(instance.events(kind: "uptime").isEmpty)  // no proc/uptime
        let logs = instance.logs.filter { $0.level == 0 }.map(\.message)
        for expected in ["/proc/uptime: absent", "/proc/sys/kernel/version", "dmi/id/board_name", "/sys_vendor: empty",
                         "not a chassis type number", "os-release:2: skipped: unterminated double quote",
                         "os-release:3: skipped: no '='", "os-release:5: skipped", "os-release:11: skipped: unterminated single quote"] {
            #expect(logs.contains { $0.contains(expected) }, "no debug line with \(expected): \(logs)")
        }
        // Once per start, not at every poll.
        let count = logs.count
        try instance.advance(by: .seconds(120))
        #expect(instance.logs.filter { $0.level == 0 }.count == count)
        #expect(instance.events.count == 1)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func identifiersOnlyWhenAskedFor() throws {
        let tree = try TempTree(copying: Self.machines + "/laptop")
        try tree.write(tree.path + "/etc/machine-id", "4c1f0e6b9a2d4e8f8b7a6c5d4e3f2a10")
        let plain = try started(tree.path)
        #expect(try !device(plain).contains { ["product_serial", "product_uuid", "board_serial", "machine_id", "boot_id"].contains($0.name) })
        try plain.stop()

        let instance = try started(tree.path, "include_identifiers: true")
        #expect(try device(instance).suffix(5) == [
            Self.s("product_serial", "PF3KX9ZQ"), Self.s("product_uuid", "8c4a1b2e-5d6f-11ec-9f3a-d4d8530c7a21"),
            Self.s("board_serial", "L1HF16M01Z3"), Self.s("machine_id", "4c1f0e6b9a2d4e8f8b7a6c5d4e3f2a10"),
            Self.s("boot_id", "0f3c2b8e-7d41-4a6b-9c55-2e1f0a9b8d77"),
        ])
        try instance.stop()

        // An all-zero UUID is unset firmware, not an identifier.
        let broken = try started(Self.machines + "/broken", "include_identifiers: true")
        #expect(try !device(broken).contains { $0.name == "product_uuid" })
        try broken.stop()
        #expect(plain.violations.isEmpty && instance.violations.isEmpty && broken.violations.isEmpty)
    }

    // MARK: changes and samples

    @Test func aNewHostnameIsANewDeviceEvent() throws {
        let tree = try TempTree(copying: Self.machines + "/laptop")
        let instance = try started(tree.path)
        #expect(instance.events(kind: "device").count == 1)

        try instance.advance(by: .seconds(120))  // two polls, nothing changed
        #expect(instance.events(kind: "device").count == 1)
        #expect(instance.events(kind: "uptime").count == 3)

        try tree.write(tree.path + "/proc/sys/kernel/hostname", "x1-renamed")
        try instance.advance(by: .seconds(60))
        let devices = instance.events(kind: "device")
        #expect(devices.map { $0.string("hostname") } == ["thinkpad-x1", "x1-renamed"])
        // The rest of the snapshot is the same, field for field.
        #expect(devices[1].fields.filter { $0.name != "hostname" } == devices[0].fields.filter { $0.name != "hostname" })

        // A CPU taken offline: its processor block is gone from cpuinfo.
        let cpuinfo = String(decoding: try TempTree.read(tree.path + "/proc/cpuinfo"), as: UTF8.self)
        let blocks = cpuinfo.split(separator: "\n\n", omittingEmptySubsequences: true)
        try TempTree.write(tree.path + "/proc/cpuinfo", bytes: Array((blocks.dropLast().joined(separator: "\n\n") + "\n\n").utf8))
        try instance.advance(by: .seconds(60))
        #expect(instance.events(kind: "device").map { $0.int("cpu_count") } == [8, 8, 7])
        #expect(instance.events(kind: "device").count == 3)

        // A restart sends the snapshot again.
        try instance.stop()
        try instance.start()
        #expect(instance.events(kind: "device").count == 4)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func uptimeIsSampledEveryPoll() throws {
        let tree = try TempTree(copying: Self.machines + "/server")
        let instance = try host().instance(options: Self.options(tree.path), interval: .seconds(10))
        try instance.start()
        try tree.write(tree.path + "/proc/uptime", "3456799.12 210988254.32")
        try instance.advance(by: .seconds(10))
        try instance.advance(by: .seconds(10))  // the same values: still a sample
        let samples = instance.events(kind: "uptime")
        #expect(samples.map { $0.double("uptime") } == [3456789.12, 3456799.12, 3456799.12])
        #expect(samples.map { $0.double("idle") } == [210987654.32, 210988254.32, 210988254.32])
        #expect(samples[1].double("idle_share") == 210988254.32 / (3456799.12 * 64))
        #expect(instance.events(kind: "device").count == 1)

        // boot_time from proc/stat's btime, where there is one.
        try tree.write(tree.path + "/proc/stat", "cpu  1 2 3 4 5 6 7 0 0 0\nintr 0\nctxt 1\nbtime 1729000000\nprocesses 9\n")
        try instance.advance(by: .seconds(10))
        #expect(instance.events(kind: "uptime").last?.int("boot_time") == 1729000000)

        // Without a CPU count there is no idle share; garbage in uptime: no sample.
        try tree.remove(tree.path + "/proc/cpuinfo")
        try instance.advance(by: .seconds(10))
        #expect(instance.events(kind: "uptime").last?.double("idle_share") == nil)
        #expect(instance.events(kind: "uptime").last?.double("uptime") == 3456799.12)
        try tree.write(tree.path + "/proc/uptime", "soon")
        try instance.advance(by: .seconds(10))
        #expect(instance.events(kind: "uptime").count == 5)
        #expect(instance.logs.contains { $0.message.contains("expected two numbers, found 'soon") })
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    // MARK: sources

    @Test func osReleaseLinksAndPrecedence() throws {
        let tree = try TempTree(copying: Self.machines + "/server")
        #expect(mkdir(tree.path + "/etc", 0o755) == 0)
        // An absolute link is followed inside the root, not on this machine.
        #expect(symlink("/usr/lib/os-release", tree.path + "/etc/os-release") == 0)
        let linked = try started(tree.path)
        #expect(try device(linked).first { $0.name == "os_pretty_name" } == Self.s("os_pretty_name", "Debian GNU/Linux 12 (bookworm)"))
        try linked.stop()

        // etc/ takes precedence over usr/lib/.
        try tree.remove(tree.path + "/etc/os-release")
        try tree.write(tree.path + "/etc/os-release", "# local\n\nID=debian\nPRETTY_NAME=\"Debian (local \\\\ edition)\"\r")
        let local = try started(tree.path)
        let fields = try device(local).filter { $0.name.hasPrefix("os_") }
        #expect(fields == [Self.s("os_id", "debian"), Self.s("os_pretty_name", "Debian (local \\ edition)")])
        try local.stop()
        #expect(linked.violations.isEmpty && local.violations.isEmpty)
    }

    @Test func armBoards() throws {
        let tree = try TempTree(copying: Self.machines + "/container")
        // A Raspberry Pi 4 on a 64-bit kernel: the board in cpuinfo's Model.
        try tree.write(tree.proc + "/cpuinfo", """
            processor\t: 0
            BogoMIPS\t: 108.00
            Features\t: fp asimd evtstrm crc32 cpuid
            CPU implementer\t: 0x41
            CPU architecture: 8
            CPU variant\t: 0x0
            CPU part\t: 0xd08
            CPU revision\t: 3

            processor\t: 1
            CPU implementer\t: 0x41
            CPU part\t: 0xd08

            Revision\t: c03114
            Serial\t\t: 10000000abcdef01
            Model\t\t: Raspberry Pi 4 Model B Rev 1.4
            """)
        var instance = try started(tree.path)
        var fields = try device(instance)
        #expect(fields.filter { $0.name.hasPrefix("cpu_") || $0.name == "machine_model" } == [
            Self.s("machine_model", "Raspberry Pi 4 Model B Rev 1.4"), Self.s("cpu_model", "ARM Cortex-A72"),
            Self.s("cpu_vendor", "ARM"), Self.i("cpu_count", 2),
        ])
        try instance.stop()

        // The device tree's model (NUL-terminated) comes before cpuinfo's; a
        // 32-bit kernel names the core in Processor; Hardware is the SoC.
        #expect(mkdir(tree.sys, 0o755) == 0 && mkdir(tree.sys + "/firmware", 0o755) == 0)
        #expect(mkdir(tree.sys + "/firmware/devicetree", 0o755) == 0 && mkdir(tree.sys + "/firmware/devicetree/base", 0o755) == 0)
        try TempTree.write(tree.sys + "/firmware/devicetree/base/model", bytes: Array("Raspberry Pi 3 Model B Plus Rev 1.3\0".utf8))
        try tree.write(tree.proc + "/cpuinfo", """
            processor\t: 0
            model name\t: ARMv7 Processor rev 4 (v7l)
            CPU implementer\t: 0x41
            CPU part\t: 0xd03

            Hardware\t: BCM2835
            Model\t\t: Raspberry Pi 3 Model B Plus Rev 1.3 (cpuinfo)
            """)
        instance = try started(tree.path)
        fields = try device(instance)
        #expect(fields.filter { $0.name.hasPrefix("cpu_") || $0.name == "machine_model" } == [
            Self.s("machine_model", "Raspberry Pi 3 Model B Plus Rev 1.3"), Self.s("cpu_model", "ARMv7 Processor rev 4 (v7l)"),
            Self.s("cpu_vendor", "ARM"), Self.i("cpu_count", 1),
        ])
        try instance.stop()

        // A part this plugin does not know, of a known and an unknown implementer; a SoC name only.
        for (cpuinfo, model, vendor) in [("CPU implementer\t: 0x51\nCPU part\t: 0x802\n", "Qualcomm part 0x802", "Qualcomm"),
                                         ("CPU implementer\t: 0x99\nCPU part\t: 0x1\n", "implementer 0x99 part 0x1", nil),
                                         ("Hardware\t: Allwinner sun8i Family\n", "Allwinner sun8i Family", nil)] {
            try tree.write(tree.proc + "/cpuinfo", "processor\t: 0\n" + cpuinfo)
            instance = try started(tree.path)
            fields = try device(instance)
            var expected = [Self.s("cpu_model", model)]
            if let vendor { expected.append(Self.s("cpu_vendor", vendor)) }
            expected.append(Self.i("cpu_count", 1))
            #expect(fields.filter { $0.name.hasPrefix("cpu_") } == expected)
            try instance.stop()
            #expect(instance.violations.isEmpty)
        }
    }

    @Test func virtualizationAndContainerHints() throws {
        let tree = try TempTree(copying: Self.machines + "/server")
        let dmi = tree.sys + "/devices/virtual/dmi/id/"
        func hints() throws -> [Field] {
            let instance = try started(tree.path)
            defer { try? instance.stop() }
            return try device(instance).filter { ["virtualization", "container", "chassis_type", "chassis"].contains($0.name) }
        }
        let rack = [Self.i("chassis_type", 23), Self.s("chassis", "rack mount")]
        #expect(try hints() == rack)

        try tree.write(dmi + "sys_vendor", "QEMU")
        try tree.write(dmi + "product_name", "Standard PC (Q35 + ICH9, 2009)")
        #expect(try hints() == rack + [Self.s("virtualization", "qemu")])
        try tree.write(dmi + "product_name", "KVM")
        #expect(try hints() == rack + [Self.s("virtualization", "kvm")])
        try tree.write(dmi + "sys_vendor", "Microsoft Corporation")
        try tree.write(dmi + "product_name", "Virtual Machine")
        #expect(try hints() == rack + [Self.s("virtualization", "microsoft")])
        // A Surface laptop is made by Microsoft too: not a VM.
        try tree.write(dmi + "product_name", "Surface Laptop 5")
        #expect(try hints() == rack)
        // Nor is a Chromebook, made by Google.
        try tree.write(dmi + "sys_vendor", "Google")
        try tree.write(dmi + "product_name", "Eve")
        #expect(try hints() == rack)
        try tree.write(dmi + "product_name", "Google Compute Engine")
        #expect(try hints() == rack + [Self.s("virtualization", "google")])
        try tree.write(dmi + "sys_vendor", "Amazon EC2")
        try tree.write(dmi + "product_name", "m6i.metal")
        #expect(try hints() == rack)
        try tree.write(dmi + "product_name", "m6i.large")
        #expect(try hints() == rack + [Self.s("virtualization", "amazon")])

        // No DMI vendor says so: the kernel's hypervisor type, then the CPU's flag.
        try tree.write(dmi + "sys_vendor", "Dell Inc.")
        try tree.write(dmi + "product_name", "PowerEdge R650")
        #expect(mkdir(tree.sys + "/hypervisor", 0o755) == 0)
        try tree.write(tree.sys + "/hypervisor/type", "xen")
        #expect(try hints() == rack + [Self.s("virtualization", "xen")])
        try tree.remove(tree.sys + "/hypervisor")
        try tree.write(tree.proc + "/cpuinfo", "processor\t: 0\nflags\t\t: fpu vme hypervisor lahf_lm\n")
        #expect(try hints() == rack + [Self.s("virtualization", "unknown")])

        // Containers: the marker files, then PID 1's environment first.
        try tree.write(tree.path + "/.dockerenv", "")
        #expect(try hints() == rack + [Self.s("virtualization", "unknown"), Self.s("container", "docker")])
        #expect(mkdir(tree.path + "/run", 0o755) == 0 || errno == EEXIST)
        try tree.write(tree.path + "/run/.containerenv", "engine=\"podman-5.2.2\"")
        #expect(try hints().last == Self.s("container", "podman"))
        #expect(mkdir(tree.proc + "/1", 0o755) == 0)
        try TempTree.write(tree.proc + "/1/environ", bytes: Array("HOME=/\0container=lxc\0".utf8))
        #expect(try hints().last == Self.s("container", "lxc"))
        try tree.remove(tree.path + "/.dockerenv")
        try tree.remove(tree.path + "/run/.containerenv")
        try tree.remove(tree.proc + "/1/environ")
        try tree.write(tree.proc + "/sys/kernel/osrelease", "5.15.153.1-microsoft-standard-WSL2")
        #expect(try hints().last == Self.s("container", "wsl"))

        // Chassis: a number SMBIOS does not define, the lowest, an empty file.
        try tree.write(dmi + "chassis_type", "99")
        #expect(try hints().prefix(2) == [Self.i("chassis_type", 99)] + [Self.s("virtualization", "unknown")])
        try tree.write(dmi + "chassis_type", "1")
        #expect(try hints().prefix(2) == [Self.i("chassis_type", 1), Self.s("chassis", "other")])
        try tree.write(dmi + "chassis_type", "")
        #expect(try hints().first == Self.s("virtualization", "unknown"))
    }

    // MARK: availability

    @Test func unavailableWhenNothingCanBeRead() throws {
        let empty = try TempTree()
        for root in [empty.path, empty.path + "/no-such-machine"] {
            let instance = try host().instance(options: Self.options(root), interval: .seconds(60))
            do {
                try instance.start()
                Issue.record("start succeeded on \(root)")
            } catch {
                #expect(error.status == "unavailable")
                #expect(error.description.contains("nothing to read: no \(root)/proc/uptime"))
            }
            #expect(instance.events.isEmpty)
            #expect(instance.violations.isEmpty)
        }

        // Only an uptime: a sample, no device event.
        #expect(mkdir(empty.proc, 0o755) == 0)
        try empty.write(empty.proc + "/uptime", "10.00 15.00")
        let instance = try started(empty.path)
        #expect(instance.events.map(\.kind) == ["uptime"])
        #expect(instance.events[0].fields == [Self.d("uptime", 10), Self.d("idle", 15)])

        // Gone mid-run: unavailable from the poll, not a failure.
        try empty.remove(empty.proc)
        do {
            try instance.advance(by: .seconds(60))
            Issue.record("a poll with nothing to read succeeded")
        } catch {
            #expect(error.status == "unavailable")
        }
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func theRealMachineRunsOrIsUnavailable() throws {
        let instance = try host().instance(interval: .seconds(60))
        do {
            try instance.start()
        } catch {
            #expect(error.status == "unavailable", "\(error)")
            return
        }
        if let release = try? String(decoding: TempTree.read("/proc/sys/kernel/osrelease"), as: UTF8.self) {
            let device = try #require(instance.events(kind: "device").first)
            #expect(device.string("kernel_release") == String(release.filter { $0 != "\n" }))
            // On the real /proc the architecture is known, from the kernel or uname.
            var names = utsname()
            #expect(uname(&names) == 0)
            let machine = withUnsafeBytes(of: &names.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            #expect(device.string("architecture") == machine)
        }
        if access("/proc/uptime", R_OK) == 0 {
            let uptime = try #require(instance.events(kind: "uptime").first)
            #expect((uptime.double("uptime") ?? 0) > 0)
            if let share = uptime.double("idle_share") { #expect((0...1).contains(share)) }
        }
        try instance.advance(by: .seconds(60))
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func refusesAnEmptyRoot() throws {
        for name in ["procfs", "sysfs", "rootfs"] {
            do {
                _ = try host().instance(options: "{ \(name): '' }")
                Issue.record("an empty \(name) accepted")
            } catch let error as PluginTestError {
                #expect(error.status == "invalid configuration")
                #expect(error.description.contains("options.\(name): must not be empty"))
            }
        }
    }
}
