import Glibc
import LinuxProbes
import VigilKit

/// The device this host runs on, and how long it has been up: GatheredKit's
/// device metadata, on Linux. Every value comes from a file under one of the
/// three roots, so that a fixture tree stands for a whole machine:
///
/// - `<procfs>/sys/kernel/{hostname,domainname,ostype,osrelease,version,arch}`:
///   the names `uname(2)` would give. `arch` is not on every kernel (it came
///   with 6.0 on some architectures): without it the architecture is taken
///   from `uname(2)` only when `procfs` is the real `/proc` (the same kernel
///   answers), and is absent for any other root.
/// - `<rootfs>/etc/os-release`, else `<rootfs>/usr/lib/os-release`
///   (os-release(5)). A link with an absolute target is followed inside the
///   root, not on this machine.
/// - `<sysfs>/class/dmi/id/*`: the SMBIOS tables the firmware gave (x86 and
///   some ARM servers; absent on most ARM boards, in containers without /sys,
///   and in VMs that emulate no SMBIOS). Placeholders firmware writers leave
///   ("To Be Filled By O.E.M.", "Default string", "Not Specified", "System
///   Product Name"…) count as absent.
/// - `<sysfs>/firmware/devicetree/base/model`, else the `Model` line of
///   cpuinfo: the board of a device-tree machine (a Raspberry Pi).
/// - `<procfs>/cpuinfo`: the CPU's model and vendor and the logical CPUs (see `CPUInfo`).
/// - `<procfs>/uptime` and the `btime` line of `<procfs>/stat`.
///
/// Virtualization and containers are named only where a file says so (see
/// `virtualization()` and `container()`); no CPUID, no cgroup path guessing:
/// with cgroup namespaces (the default on cgroup v2) a container sees `0::/`
/// like the host does, so `/proc/self/cgroup` tells nothing reliable.
///
/// Polled: `device` is read again every interval and passed on only when a
/// field changed (a hostname set, a CPU taken offline); `uptime` is a sample
/// every interval. A file that is missing or unreadable leaves its field out,
/// logged once per start at debug; only when nothing at all can be read is the
/// source unavailable.
final class SystemMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "system", version: "1.1.0",
        summary: "The device: host name, OS release, kernel, DMI vendor and model, chassis, CPU, virtualization; and uptime (procfs, sysfs, rootfs; polled)",
        defaultInterval: .seconds(60),
        events: [
            EventDecl("device", doc: """
                What the machine is: a snapshot on start, then again only when a field changed (the host name \
                set, a CPU taken offline, os-release replaced by an upgrade). A field whose source file is missing, \
                unreadable or empty is left out. Identifiers (serials, UUIDs, machine-id, boot_id) only with \
                include_identifiers: true.
                """, fields: [
                FieldDecl("hostname", .string, doc: "<procfs>/sys/kernel/hostname (the UTS name, as uname -n)"),
                FieldDecl("domainname", .string, doc: "<procfs>/sys/kernel/domainname (the NIS domain); absent when it is (none)"),
                FieldDecl("uts_domainname", .string, doc: """
                    <procfs>/sys/kernel/domainname as the kernel writes it, (none) included: the domainname of \
                    uname(2), as node_exporter's node_uname_info shows it
                    """),
                FieldDecl("os_id", .string, doc: "os-release ID (debian, ubuntu, alpine, fedora…)"),
                FieldDecl("os_id_like", .string, doc: "os-release ID_LIKE: the distributions this one derives from, space separated"),
                FieldDecl("os_name", .string, doc: "os-release NAME (Debian GNU/Linux)"),
                FieldDecl("os_version", .string, doc: "os-release VERSION (12 (bookworm))"),
                FieldDecl("os_version_id", .string, doc: "os-release VERSION_ID (12, 24.04, 3.20.3); absent on rolling releases"),
                FieldDecl("os_version_codename", .string, doc: "os-release VERSION_CODENAME (bookworm, noble)"),
                FieldDecl("os_pretty_name", .string, doc: "os-release PRETTY_NAME (Debian GNU/Linux 12 (bookworm))"),
                FieldDecl("os_variant", .string, doc: "os-release VARIANT (Workstation, Server Edition)"),
                FieldDecl("os_variant_id", .string, doc: "os-release VARIANT_ID (workstation, server)"),
                FieldDecl("os_build_id", .string, doc: "os-release BUILD_ID: the build of an image or a rolling release"),
                FieldDecl("os_image_id", .string, doc: "os-release IMAGE_ID: the name of the image the system was installed from"),
                FieldDecl("os_image_version", .string, doc: "os-release IMAGE_VERSION: that image's version"),
                FieldDecl("os_version_number", .double, doc: """
                    the leading major.minor of os-release VERSION_ID as a number (12 → 12, 24.04 → 24.04, 3.20.3 → \
                    3.2), as node_exporter's node_os_version has it; absent when VERSION_ID does not start with a \
                    digit or the number is 0
                    """),
                FieldDecl("kernel_name", .string, doc: "<procfs>/sys/kernel/ostype (Linux)"),
                FieldDecl("kernel_release", .string, doc: "<procfs>/sys/kernel/osrelease (6.1.0-18-amd64)"),
                FieldDecl("kernel_version", .string, doc: "<procfs>/sys/kernel/version: the build (#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01))"),
                FieldDecl("architecture", .string, doc: """
                    <procfs>/sys/kernel/arch (x86_64, aarch64); without it, uname's machine when procfs is /proc, \
                    else absent
                    """),
                FieldDecl("sys_vendor", .string, doc: "DMI sys_vendor: the system's maker (LENOVO, Dell Inc., QEMU)"),
                FieldDecl("product_name", .string, doc: "DMI product_name: the model (a Lenovo's machine type 20XWCTO1WW, Dell's PowerEdge R650)"),
                FieldDecl("product_version", .string, doc: "DMI product_version (a Lenovo's marketing name: ThinkPad X1 Carbon Gen 9)"),
                FieldDecl("product_family", .string, doc: "DMI product_family (ThinkPad X1 Carbon Gen 9, PowerEdge)"),
                FieldDecl("board_vendor", .string, doc: "DMI board_vendor: the main board's maker"),
                FieldDecl("board_name", .string, doc: "DMI board_name: the main board's model"),
                FieldDecl("bios_vendor", .string, doc: "DMI bios_vendor: the firmware's maker"),
                FieldDecl("bios_version", .string, doc: "DMI bios_version"),
                FieldDecl("bios_date", .string, doc: "DMI bios_date, as the firmware writes it (MM/DD/YYYY)"),
                FieldDecl("chassis_type", .int, doc: "DMI chassis_type: the SMBIOS enclosure type number (3 desktop, 10 notebook, 23 rack mount…)"),
                FieldDecl("chassis", .string, doc: """
                    the SMBIOS name of chassis_type, lower case: other, unknown, desktop, low profile desktop, pizza \
                    box, mini tower, tower, portable, laptop, notebook, hand held, docking station, all in one, sub \
                    notebook, space-saving, lunch box, server, expansion chassis, sub chassis, bus expansion chassis, \
                    peripheral chassis, raid chassis, rack mount, sealed-case pc, multi-system chassis, compact pci, \
                    advanced tca, blade, blade enclosure, tablet, convertible, detachable, iot gateway, embedded pc, \
                    mini pc, stick pc; absent for a number SMBIOS does not define
                    """),
                FieldDecl("machine_model", .string, doc: """
                    a device-tree machine's model: <sysfs>/firmware/devicetree/base/model, else cpuinfo's Model \
                    (Raspberry Pi 4 Model B Rev 1.4)
                    """),
                FieldDecl("cpu_model", .string, doc: """
                    from cpuinfo: model name (x86), else Processor, cpu model, cpu or uarch, else the ARM \
                    implementer and part (ARM Neoverse-N1), else Hardware
                    """),
                FieldDecl("cpu_vendor", .string, doc: "cpuinfo vendor_id (GenuineIntel, AuthenticAMD), else the ARM implementer (ARM, Qualcomm, Apple)"),
                FieldDecl("cpu_count", .int, unit: "CPUs", doc: "logical CPUs online: the processor entries of cpuinfo"),
                FieldDecl("virtualization", .string, doc: """
                    the hypervisor, where the files name one: from DMI (kvm, qemu, vmware, microsoft, oracle, xen, \
                    bochs, parallels, bhyve, google, amazon), else <sysfs>/hypervisor/type, else unknown when \
                    cpuinfo has the hypervisor flag; absent otherwise (bare metal, or nothing says)
                    """),
                FieldDecl("container", .string, doc: """
                    the container, where a file says so: container= in <procfs>/1/environ (podman, lxc, \
                    systemd-nspawn… readable by root only), else podman for <rootfs>/run/.containerenv, docker for \
                    <rootfs>/.dockerenv, wsl for a Microsoft kernel release; absent otherwise
                    """),
                FieldDecl("selinux_enabled", .bool, doc: """
                    whether SELinux is enabled: <sysfs>/fs/selinux/enforce exists (selinuxfs is mounted there when the \
                    kernel enforces a policy or is permissive). Always present: false when that file is missing
                    """),
                FieldDecl("selinux_enforcing", .bool, doc: "the SELinux mode now: <sysfs>/fs/selinux/enforce is 1 (enforcing) or 0 (permissive); only when enabled"),
                FieldDecl("selinux_config_mode", .int, doc: """
                    the mode the configuration asks for at boot: SELINUX= of <rootfs>/etc/selinux/config, 1 enforcing, \
                    0 permissive, -1 disabled (or no such file or line); only when enabled
                    """),
                FieldDecl("product_serial", .string, doc: "DMI product_serial (include_identifiers only; the kernel lets only root read it)"),
                FieldDecl("product_uuid", .string, doc: "DMI product_uuid, lower case (include_identifiers only; root only)"),
                FieldDecl("board_serial", .string, doc: "DMI board_serial (include_identifiers only; root only)"),
                FieldDecl("machine_id", .string, doc: "<rootfs>/etc/machine-id (include_identifiers only)"),
                FieldDecl("boot_id", .string, doc: "<procfs>/sys/kernel/random/boot_id: new at every boot (include_identifiers only)"),
            ]),
            EventDecl("uptime", doc: """
                How long the kernel has been up, from <procfs>/uptime: a sample every interval. Not emitted when \
                that file is missing or does not parse.
                """, fields: [
                FieldDecl("uptime", .double, unit: "seconds", doc: "time since boot (CLOCK_BOOTTIME: suspended time included)"),
                FieldDecl("idle", .double, unit: "seconds", doc: "time the CPUs spent idle since boot, summed over CPUs (so it can exceed uptime)"),
                FieldDecl("idle_share", .double, unit: "ratio", doc: "idle / (uptime × cpu_count), 0…1; absent when the CPU count is not known"),
                FieldDecl("boot_time", .int, unit: "seconds", doc: "when the machine booted, seconds since the epoch: btime of <procfs>/stat; absent without it"),
            ], policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var sysfs = "/sys"
        var rootfs = "/"
        var includeIdentifiers = false
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests); uname(2) is asked only when it is /proc."),
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (DMI, hypervisor, device tree)."),
            .option("rootfs", \.rootfs, doc: "Root of the file system with etc/os-release, etc/machine-id and the container marker files."),
            .option("include_identifiers", \.includeIdentifiers,
                    doc: "Also report identifiers that single out this machine: DMI serials and UUID, machine-id, boot_id."))
    }

    static let dmiDir = "class/dmi/id"

    private let context: MonitorContext
    private let proc: FSRoot
    private let sys: FSRoot
    private let rootfs: FSRoot
    private let identifiers: Bool
    /// Paths already logged as missing or unreadable since start: a debug line each, not one per poll.
    private var logged: [String] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        for (name, value) in [("procfs", options.procfs), ("sysfs", options.sysfs), ("rootfs", options.rootfs)] where value.isEmpty {
            throw .invalidOption(name, "must not be empty")
        }
        self.context = context
        self.proc = FSRoot(options.procfs)
        self.sys = FSRoot(options.sysfs)
        self.rootfs = FSRoot(options.rootfs)
        self.identifiers = options.includeIdentifiers
    }

    func start() throws(MonitorError) {
        logged = []
    }

    func stop() {
        logged = []
    }

    func poll() throws(MonitorError) {
        let cpu = cpuInfo()
        let device = deviceFields(cpu)
        let uptime = uptimeFields(cpus: cpu?.count)
        guard !device.isEmpty || uptime != nil else {
            throw .unavailable("nothing to read: no \(proc.path("uptime")), no \(proc.path("sys/kernel")), no os-release under \(rootfs.path("")), no DMI in \(sys.path(Self.dmiDir))")
        }
        if !device.isEmpty { context.emit("device", fields: device) }
        if let uptime { context.emit("uptime", fields: uptime) }
    }

    // MARK: device

    private func deviceFields(_ cpu: CPUInfo?) -> [(String, Value)] {
        var fields: [(String, Value)] = []
        func add(_ name: String, _ value: String?) {
            if let value, !value.isEmpty { fields.append((name, .string(value))) }
        }
        add("hostname", text(proc, "sys/kernel/hostname"))
        let domainname = text(proc, "sys/kernel/domainname")
        add("domainname", domainname.flatMap { $0 == "(none)" ? nil : $0 })
        add("uts_domainname", domainname)

        let os = osRelease()
        add("os_id", os?["ID"])
        add("os_id_like", os?["ID_LIKE"])
        add("os_name", os?["NAME"])
        add("os_version", os?["VERSION"])
        add("os_version_id", os?["VERSION_ID"])
        add("os_version_codename", os?["VERSION_CODENAME"])
        add("os_pretty_name", os?["PRETTY_NAME"])
        add("os_variant", os?["VARIANT"])
        add("os_variant_id", os?["VARIANT_ID"])
        add("os_build_id", os?["BUILD_ID"])
        add("os_image_id", os?["IMAGE_ID"])
        add("os_image_version", os?["IMAGE_VERSION"])
        if let number = os?["VERSION_ID"].flatMap(Self.versionNumber) { fields.append(("os_version_number", .double(number))) }

        let release = text(proc, "sys/kernel/osrelease")
        add("kernel_name", text(proc, "sys/kernel/ostype"))
        add("kernel_release", release)
        add("kernel_version", text(proc, "sys/kernel/version"))
        add("architecture", architecture())

        let dmi = DMI(monitor: self)
        for name in ["sys_vendor", "product_name", "product_version", "product_family", "board_vendor", "board_name",
                     "bios_vendor", "bios_version", "bios_date"] {
            add(name, dmi[name])
        }
        if let (number, name) = chassis() {
            fields.append(("chassis_type", .int(number)))
            add("chassis", name)
        }
        add("machine_model", text(sys, "firmware/devicetree/base/model") ?? cpu?.board)
        add("cpu_model", cpu?.model)
        add("cpu_vendor", cpu?.vendor)
        if let count = cpu?.count { fields.append(("cpu_count", .int(Int64(count)))) }
        add("virtualization", virtualization(dmi, cpu))
        add("container", container(kernelRelease: release))
        // Always there, so not a sign that anything could be read: only beside other fields.
        if !fields.isEmpty { fields += selinux() }
        if identifiers {
            add("product_serial", dmi["product_serial"])
            add("product_uuid", dmi["product_uuid"].flatMap(Self.realUUID))
            add("board_serial", dmi["board_serial"])
            add("machine_id", text(rootfs, "etc/machine-id"))
            add("boot_id", text(proc, "sys/kernel/random/boot_id"))
        }
        return fields
    }

    /// The DMI attributes, read when asked for, placeholders dropped.
    struct DMI {
        let monitor: SystemMonitor
        subscript(name: String) -> String? {
            monitor.text(monitor.sys, SystemMonitor.dmiDir + "/" + name).flatMap { SystemMonitor.isPlaceholder($0) ? nil : $0 }
        }
    }

    /// What firmware writers leave in a DMI string they did not fill in.
    static func isPlaceholder(_ value: String) -> Bool {
        let v = value.lowercased()
        return ["to be filled by o.e.m.", "default string", "not specified", "not applicable", "system manufacturer",
                "system product name", "system version", "system serial number", "base board serial number",
                "chassis serial number", "none", "n/a", "o.e.m.", "oem", "0", "00000000", "0123456789",
                "123456789"].contains(v)
    }

    /// A UUID that says something: not all zeros or all ones (unset), lower case.
    static func realUUID(_ value: String) -> String? {
        let digits = value.lowercased().filter { $0 != "-" }
        guard !digits.allSatisfy({ $0 == "0" }), !digits.allSatisfy({ $0 == "f" }) else { return nil }
        return value.lowercased()
    }

    private func chassis() -> (Int64, String?)? {
        guard let raw = text(sys, Self.dmiDir + "/chassis_type") else { return nil }
        guard let number = Int64(raw), number >= 0 else {
            note(sys.path(Self.dmiDir + "/chassis_type"), "not a chassis type number: '\(raw.prefix(32))'")
            return nil
        }
        // The kernel already masks the chassis-lock bit (0x80); a raw table value would carry it.
        let type = Int(number & 0x7f)
        return (number, type >= 1 && type <= Self.chassisNames.count ? Self.chassisNames[type - 1] : nil)
    }

    /// SMBIOS (DSP0134) 7.4.1, System Enclosure or Chassis Types, from 1 (0x01) to 36 (0x24).
    static let chassisNames = [
        "other", "unknown", "desktop", "low profile desktop", "pizza box", "mini tower", "tower", "portable",
        "laptop", "notebook", "hand held", "docking station", "all in one", "sub notebook", "space-saving",
        "lunch box", "server", "expansion chassis", "sub chassis", "bus expansion chassis", "peripheral chassis",
        "raid chassis", "rack mount", "sealed-case pc", "multi-system chassis", "compact pci", "advanced tca",
        "blade", "blade enclosure", "tablet", "convertible", "detachable", "iot gateway", "embedded pc", "mini pc",
        "stick pc",
    ]

    /// The leading `[0-9]+(\.[0-9]*)?` of a VERSION_ID as a number, when it
    /// is above 0 (node_exporter's node_os_version: `3.20.3` → 3.2).
    static func versionNumber(_ versionID: String) -> Double? {
        var prefix = Substring(versionID).prefix { ("0"..."9").contains($0) }
        guard !prefix.isEmpty else { return nil }
        let rest = versionID[prefix.endIndex...]
        if rest.first == "." {
            let fraction = rest.dropFirst().prefix { ("0"..."9").contains($0) }
            prefix = versionID[prefix.startIndex..<fraction.endIndex]
        }
        guard let number = Double(prefix), number.isFinite, number > 0 else { return nil }
        return number
    }

    /// SELinux as node_exporter's selinux collector sees it: enabled when
    /// selinuxfs is there, and then its mode now and the configured one.
    private func selinux() -> [(String, Value)] {
        guard case .text(let enforce) = sys.attribute("fs/selinux/enforce") else {
            return [("selinux_enabled", .bool(sys.exists("fs/selinux/enforce")))]
        }
        var fields: [(String, Value)] = [("selinux_enabled", .bool(true))]
        if enforce == "1" || enforce == "0" { fields.append(("selinux_enforcing", .bool(enforce == "1"))) }
        var mode: Int64 = -1
        if case .text(let config) = rootfs.attribute("etc/selinux/config") {
            for line in config.split(separator: "\n") {
                let trimmed = FSRootText.trim(line)
                guard trimmed.hasPrefix("SELINUX=") else { continue }
                switch FSRootText.trim(trimmed.dropFirst(8)).trimmingQuotes {
                case "enforcing": mode = 1
                case "permissive": mode = 0
                default: mode = -1
                }
            }
        }
        fields.append(("selinux_config_mode", .int(mode)))
        return fields
    }

    private func architecture() -> String? {
        if let arch = text(proc, "sys/kernel/arch") { return arch }
        guard proc.root == "/proc" else { return nil }
        var names = utsname()
        guard uname(&names) == 0 else { return nil }
        return withUnsafeBytes(of: &names.machine) { raw in
            String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
        }
    }

    /// os-release under the root: etc/ first, usr/lib/ when etc/ has none.
    private func osRelease() -> OSRelease? {
        for relative in ["etc/os-release", "usr/lib/os-release"] {
            let resolved = insideRoot(relative)
            switch rootfs.attribute(resolved) {
            case .text(let content):
                let parsed = OSRelease(parsing: content)
                for (line, reason) in parsed.rejected {
                    note(rootfs.path(resolved) + ":\(line)", "skipped: \(reason)")
                }
                return parsed
            case .absent:
                note(rootfs.path(resolved), "absent")
            case .failed(let error):
                note(rootfs.path(resolved), error.description, prefixed: false)
                return nil  // there but unreadable: etc/ still takes precedence
            }
        }
        return nil
    }

    /// `relative`, or where it links to when it is a link with an absolute
    /// target (etc/os-release → /usr/lib/os-release), taken inside the root.
    private func insideRoot(_ relative: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(rootfs.path(relative), &buffer, buffer.count - 1)
        guard n > 0, buffer[0] == CChar(UInt8(ascii: "/")) else { return relative }
        return String(decoding: buffer[1..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private func cpuInfo() -> CPUInfo? {
        guard let content = rawText(proc, "cpuinfo") else { return nil }
        return CPUInfo(parsing: content)
    }

    /// DMI names first (the model, then the makers), then the kernel's
    /// hypervisor type (Xen, also in a dom0), then the CPU's hypervisor flag.
    private func virtualization(_ dmi: DMI, _ cpu: CPUInfo?) -> String? {
        let product = dmi["product_name"], vendor = dmi["sys_vendor"]
        if vendor == "Microsoft Corporation" && product == "Virtual Machine" { return "microsoft" }
        if vendor == "Amazon EC2", product?.hasSuffix(".metal") == true { return nil }  // EC2 bare metal
        for value in [product, vendor, dmi["board_vendor"], dmi["bios_vendor"]] {
            guard let value else { continue }
            for (prefix, name) in Self.hypervisors where value.hasPrefix(prefix) { return name }
        }
        if let type = text(sys, "hypervisor/type") { return type }
        return cpu?.hypervisor == true ? "unknown" : nil
    }

    /// DMI strings that start with these name the hypervisor. Makers of
    /// real machines too are left out: Microsoft (Surface; its VMs are
    /// matched above), Google (Chromebooks; GCE names itself in the product),
    /// Oracle (servers).
    static let hypervisors = [
        ("KVM", "kvm"), ("OpenStack", "kvm"), ("KubeVirt", "kvm"), ("QEMU", "qemu"), ("VMware", "vmware"),
        ("VMW", "vmware"), ("innotek GmbH", "oracle"), ("VirtualBox", "oracle"), ("Xen", "xen"), ("HVM domU", "xen"),
        ("Bochs", "bochs"), ("Parallels", "parallels"), ("BHYVE", "bhyve"), ("Google Compute Engine", "google"),
        ("Amazon EC2", "amazon"),
    ]

    /// The container managers' own marks: the environment they give PID 1,
    /// their marker files, and WSL's kernel.
    private func container(kernelRelease: String?) -> String? {
        if let environ = rawText(proc, "1/environ") {
            for entry in environ.split(separator: "\0") where entry.hasPrefix("container=") {
                let name = entry.dropFirst("container=".count)
                if !name.isEmpty { return String(name) }
            }
        }
        if rootfs.exists("run/.containerenv") { return "podman" }
        if rootfs.exists(".dockerenv") { return "docker" }
        if let kernelRelease, kernelRelease.lowercased().contains("microsoft") { return "wsl" }
        return nil
    }

    // MARK: uptime

    private func uptimeFields(cpus: Int?) -> [(String, Value)]? {
        guard let content = text(proc, "uptime") else { return nil }
        let numbers = content.split(separator: " ").compactMap { Double($0) }
        guard numbers.count >= 2, numbers.allSatisfy({ $0.isFinite && $0 >= 0 }) else {
            note(proc.path("uptime"), "expected two numbers, found '\(content.prefix(40))'")
            return nil
        }
        let (uptime, idle) = (numbers[0], numbers[1])
        var fields: [(String, Value)] = [("uptime", .double(uptime)), ("idle", .double(idle))]
        if let cpus, cpus > 0, uptime > 0 {
            fields.append(("idle_share", .double(min(max(idle / (uptime * Double(cpus)), 0), 1))))
        }
        if let bootTime = bootTime() { fields.append(("boot_time", .int(bootTime))) }
        return fields
    }

    /// The `btime` line of `<procfs>/stat`.
    private func bootTime() -> Int64? {
        guard let stat = rawText(proc, "stat") else { return nil }
        for line in stat.split(separator: "\n") where line.hasPrefix("btime ") {
            return Int64(FSRootText.trim(line.dropFirst(6)))
        }
        note(proc.path("stat"), "no btime line")
        return nil
    }

    // MARK: files

    /// A file's text, trimmed; nil when missing, unreadable or empty (noted once at debug).
    fileprivate func text(_ root: FSRoot, _ relative: String) -> String? {
        guard let raw = rawText(root, relative) else { return nil }
        let trimmed = FSRootText.trim(raw)
        if trimmed.isEmpty { note(root.path(relative), "empty") }
        return trimmed.isEmpty ? nil : trimmed
    }

    /// A file's whole text; nil when missing or unreadable (noted once at debug).
    private func rawText(_ root: FSRoot, _ relative: String) -> String? {
        do {
            return try root.readText(relative)
        } catch {
            if case .unreadable(_, let code) = error, code == ENOENT || code == ENOTDIR {
                note(root.path(relative), "absent")
            } else {
                note(root.path(relative), error.description, prefixed: false)
            }
            return nil
        }
    }

    /// A debug line for a file left out, once per start.
    private func note(_ path: String, _ why: String, prefixed: Bool = true) {
        guard !logged.contains(path) else { return }
        logged.append(path)
        context.log(.debug, (prefixed ? "\(path): \(why)" : why) + "; left out")
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(SystemMonitor.self, a, r) }

private extension String {
    /// The text without one pair of surrounding double or single quotes.
    var trimmingQuotes: String {
        guard count >= 2, let first, first == "\"" || first == "'", last == first else { return self }
        return String(dropFirst().dropLast())
    }
}
