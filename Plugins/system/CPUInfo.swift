/// What the device event takes from `<procfs>/cpuinfo`: the model, the
/// vendor and the number of logical CPUs. Every architecture writes this file
/// its own way; the first processor's block is taken as the model of all
/// (on big.LITTLE ARM the cores differ: the first is reported).
///
/// - model: `model name` (x86, some ARM 32-bit kernels), else `Processor`
///   (older ARM 32-bit), `cpu model` (MIPS), `cpu` (PowerPC), `uarch`
///   (RISC-V), else the ARM `CPU implementer` and `CPU part` by name where
///   this table knows them (`ARM Neoverse-N1`), by number where not, else the
///   SoC from `Hardware` (`BCM2835`).
/// - vendor: `vendor_id` (x86: GenuineIntel, AuthenticAMD; s390), else the
///   ARM implementer's name.
/// - count: the `processor : N` lines (one per online logical CPU), else
///   `# processors` (s390).
/// - board: `Model` (ARM boards whose kernel copies the device tree's model,
///   such as the Raspberry Pi's).
/// - hypervisor: the x86 `hypervisor` flag (the CPU runs under one).
struct CPUInfo {
    var model: String?
    var vendor: String?
    var count: Int?
    var board: String?
    var hypervisor = false

    init(parsing text: String) {
        var first: [(key: String, value: String)] = []
        var processors = 0
        var declaredCount: Int?
        for line in text.split(separator: "\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let key = FSRootText.trim(line[..<colon])
            let value = FSRootText.trim(line[line.index(after: colon)...])
            if key == "processor" {
                if Int(value) != nil { processors += 1 }
                continue
            }
            if key == "# processors" { declaredCount = Int(value) }
            if key == "flags", value.split(separator: " ").contains("hypervisor") { hypervisor = true }
            if !value.isEmpty, !first.contains(where: { $0.key == key }) { first.append((key, value)) }
        }
        func field(_ key: String) -> String? { first.first { $0.key == key }?.value }

        count = processors > 0 ? processors : declaredCount.flatMap { $0 > 0 ? $0 : nil }
        board = field("Model")
        let implementer = field("CPU implementer").flatMap(Self.hex)
        let part = field("CPU part").flatMap(Self.hex)
        vendor = field("vendor_id") ?? implementer.flatMap { Self.lookup(Self.implementers, $0) }
        if let name = field("model name") ?? field("Processor") ?? field("cpu model") ?? field("cpu") ?? field("uarch") {
            model = name
        } else if let implementer, let part {
            model = Self.armName(implementer: implementer, part: part)
        } else {
            model = field("Hardware")
        }
    }

    /// "0x41" → 0x41.
    static func hex(_ text: String) -> Int? {
        guard text.hasPrefix("0x") || text.hasPrefix("0X") else { return Int(text) }
        return Int(text.dropFirst(2), radix: 16)
    }

    /// `ARM Cortex-A72`; `Qualcomm part 0x802` for a part not in the table;
    /// `implementer 0x99 part 0x1` for an implementer not in it either.
    static func armName(implementer: Int, part: Int) -> String {
        let partText = "0x" + String(part, radix: 16)
        if implementer == 0x41, let name = lookup(armParts, part) { return "ARM " + name }
        if let vendor = lookup(implementers, implementer) { return vendor + " part " + partText }
        return "implementer 0x" + String(implementer, radix: 16) + " part " + partText
    }

    /// Pairs searched in order, not a dictionary (see `MonitorContext.State`).
    static func lookup(_ table: [(Int, String)], _ code: Int) -> String? {
        for (key, name) in table where key == code { return name }
        return nil
    }

    /// The implementer codes of the Main ID Register (MIDR_EL1 bits 31:24),
    /// as Arm assigns them.
    static let implementers: [(Int, String)] = [
        (0x41, "ARM"), (0x42, "Broadcom"), (0x43, "Cavium"), (0x46, "Fujitsu"), (0x48, "HiSilicon"), (0x4e, "NVIDIA"),
        (0x50, "APM"), (0x51, "Qualcomm"), (0x53, "Samsung"), (0x56, "Marvell"), (0x61, "Apple"), (0x69, "Intel"),
        (0x6d, "Microsoft"), (0xc0, "Ampere"),
    ]

    /// Part numbers (MIDR_EL1 bits 15:4) of Arm's own cores, the common ones.
    static let armParts: [(Int, String)] = [
        (0xb76, "ARM1176"), (0xc07, "Cortex-A7"), (0xc08, "Cortex-A8"), (0xc09, "Cortex-A9"), (0xc0f, "Cortex-A15"),
        (0xd03, "Cortex-A53"), (0xd04, "Cortex-A35"), (0xd05, "Cortex-A55"), (0xd07, "Cortex-A57"), (0xd08, "Cortex-A72"),
        (0xd09, "Cortex-A73"), (0xd0a, "Cortex-A75"), (0xd0b, "Cortex-A76"), (0xd0c, "Neoverse-N1"), (0xd0d, "Cortex-A77"),
        (0xd40, "Neoverse-V1"), (0xd41, "Cortex-A78"), (0xd44, "Cortex-X1"), (0xd46, "Cortex-A510"), (0xd47, "Cortex-A710"),
        (0xd48, "Cortex-X2"), (0xd49, "Neoverse-N2"), (0xd4f, "Neoverse-V2"),
    ]
}

enum FSRootText {
    /// The text without blanks, tabs, newlines or NULs at either end.
    static func trim<S: StringProtocol>(_ text: S) -> String {
        var s = Substring(text)
        while let c = s.last, c.isWhitespace || c == "\0" { s = s.dropLast() }
        while let c = s.first, c.isWhitespace || c == "\0" { s = s.dropFirst() }
        return String(s)
    }
}
