import Glibc
import LinuxProbes
import VigilKit

/// Block device I/O from `<procfs>/diskstats`, and each device's facts from
/// `<sysfs>/block/<device>/queue/` and the udev database
/// (`<rootfs>/run/udev/data/b<major>:<minor>`): node_exporter's diskstats
/// collector.
///
/// Every poll emits one `device` event per reported device with the kernel's
/// cumulative figures (sectors turned into bytes at 512 bytes a sector, as
/// the kernel counts them whatever the device's block size), and one `info`
/// event with its facts. The discard figures are there on Linux 4.18 and
/// later, the flush figures on 5.5 and later: an older kernel's events just
/// have fewer fields. A newer kernel's extra columns are ignored.
///
/// The figures are the kernel's raw values: the times in milliseconds were
/// 32-bit on older kernels and wrap at 2^32 (49.7 days of I/O time), which a
/// reader sees as a counter reset, as with node_exporter. A value beyond
/// 2^63 is reported as 2^63 − 1.
///
/// Devices are those of diskstats whose name matches `include` (every one
/// when it is empty) and none of `exclude`: globs, as fnmatch(3) reads them
/// with FNM_EXTMATCH, so `+([0-9])` is one or more digits. The default
/// exclude leaves out RAM disks, loop devices, floppies and partitions, as
/// node_exporter's default `--collector.diskstats.device-exclude`
/// (`^(ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$`) does.
///
/// The facts are read when a device first appears (or its device number
/// changes) and again every `Self.factsRefresh` polls, since udev may write
/// its database after the kernel shows the device.
final class DiskstatsMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "diskstats", version: "1.0.0",
        summary: "Block device I/O counters from /proc/diskstats, with device facts from /sys/block and the udev database",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("device", doc: "One block device's cumulative I/O figures since boot (or since it appeared), every poll.", fields: [
                FieldDecl("device", .string, doc: "the kernel's device name (sda, nvme0n1, vda, dm-0)"),
                FieldDecl("reads_completed", .int, unit: "requests", doc: "reads completed successfully", counter: true),
                FieldDecl("reads_merged", .int, unit: "requests", doc: "adjacent reads merged into one request", counter: true),
                FieldDecl("read_bytes", .int, unit: "bytes", doc: "bytes read (512-byte sectors × 512)", counter: true),
                FieldDecl("read_time", .int, unit: "ms", doc: "time spent by all reads, summed over requests", counter: true),
                FieldDecl("writes_completed", .int, unit: "requests", doc: "writes completed successfully", counter: true),
                FieldDecl("writes_merged", .int, unit: "requests", doc: "adjacent writes merged into one request", counter: true),
                FieldDecl("written_bytes", .int, unit: "bytes", doc: "bytes written (512-byte sectors × 512)", counter: true),
                FieldDecl("write_time", .int, unit: "ms", doc: "time spent by all writes, summed over requests", counter: true),
                FieldDecl("in_progress", .int, unit: "requests", doc: "requests in flight now (a level)"),
                FieldDecl("io_time", .int, unit: "ms", doc: "time the device had at least one request in flight", counter: true),
                FieldDecl("io_time_weighted", .int, unit: "ms", doc: "time spent doing I/O weighted by the requests in flight (backlog)", counter: true),
                FieldDecl("discards_completed", .int, unit: "requests", doc: "discards completed successfully (Linux 4.18+)", counter: true),
                FieldDecl("discards_merged", .int, unit: "requests", doc: "discards merged (Linux 4.18+)", counter: true),
                FieldDecl("discarded_bytes", .int, unit: "bytes", doc: "bytes discarded (512-byte sectors × 512; Linux 4.18+)", counter: true),
                FieldDecl("discard_time", .int, unit: "ms", doc: "time spent by all discards (Linux 4.18+)", counter: true),
                FieldDecl("flushes_completed", .int, unit: "requests", doc: "flush requests completed successfully (Linux 5.5+)", counter: true),
                FieldDecl("flush_time", .int, unit: "ms", doc: "time spent by all flush requests (Linux 5.5+)", counter: true),
            ], policy: .samples, key: ["device"]),
            EventDecl("info", doc: "One block device's facts, every poll with its `device` event. A udev property the database does not have (or a machine without udev) leaves its field out; so does a queue attribute sysfs does not have.", fields: [
                FieldDecl("device", .string, doc: "the kernel's device name"),
                FieldDecl("major", .int, doc: "major device number", identity: true),
                FieldDecl("minor", .int, doc: "minor device number", identity: true),
                FieldDecl("model", .string, doc: "udev ID_MODEL"),
                FieldDecl("serial", .string, doc: "udev SCSI_IDENT_SERIAL, or ID_SERIAL_SHORT without it (as node_exporter 1.5)"),
                FieldDecl("revision", .string, doc: "udev ID_REVISION (firmware revision)"),
                FieldDecl("wwn", .string, doc: "udev ID_WWN (World Wide Name)"),
                FieldDecl("bus_path", .string, doc: "udev ID_PATH, the device's place on its buses (pci-0000:00:17.0-ata-1)"),
                FieldDecl("rotational", .bool, doc: "queue/rotational: a spinning disk (false for SSDs and most virtual disks)"),
                FieldDecl("logical_block_size", .int, unit: "bytes", doc: "queue/logical_block_size: the smallest unit the device addresses"),
                FieldDecl("physical_block_size", .int, unit: "bytes", doc: "queue/physical_block_size: the smallest unit it writes without read-modify-write"),
            ], policy: .samples, key: ["device"]),
        ])

    /// node_exporter 1.5's default device exclude, as globs.
    static let defaultExclude = [
        "ram+([0-9])", "loop+([0-9])", "fd+([0-9])", "[hsv]d[a-z]+([0-9])", "xvd[a-z]+([0-9])", "nvme+([0-9])n+([0-9])p+([0-9])",
    ]

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var sysfs = "/sys"
        var rootfs = "/"
        var include: [String] = []
        var exclude: [String] = DiskstatsMonitor.defaultExclude
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem; devices and figures are read from <procfs>/diskstats."),
            .option("sysfs", \.sysfs, doc: "Root of sysfs, for <sysfs>/block/<device>/queue/."),
            .option("rootfs", \.rootfs, doc: "Root file system, for the udev database at <rootfs>/run/udev/data."),
            .option("include", \.include, doc: "Globs (fnmatch with FNM_EXTMATCH) on device names to report; empty: every device `exclude` does not name."),
            .option("exclude", \.exclude, doc: "Globs on device names not to report; the default leaves out RAM disks, loop devices, floppies and partitions (sda1, vda2, xvda1, nvme0n1p1), as node_exporter does."))
    }

    /// Polls between two readings of a device's facts.
    static let factsRefresh = 60

    /// glibc's FNM_EXTMATCH (a GNU extension Swift's Glibc does not import).
    static let extendedMatch: Int32 = 1 << 5

    struct Facts {
        var major: UInt32
        var minor: UInt32
        var fields: [(String, Value)]
        var age: Int
    }

    private let context: MonitorContext
    private let procfs: FSRoot
    private let sysfs: FSRoot
    private let rootfs: FSRoot
    private let include: [String]
    private let exclude: [String]
    /// Each device name's verdict, so the globs run once per name.
    private var selected: [String: Bool] = [:]
    private var facts: [String: Facts] = [:]
    private var lastMalformed: [Int] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.rootfs.isEmpty else { throw .invalidOption("rootfs", "must not be empty") }
        for (name, list) in [("include", options.include), ("exclude", options.exclude)] {
            if let i = list.firstIndex(where: \.isEmpty) { throw .invalidOption("\(name)[\(i)]", "must not be empty") }
        }
        self.context = context
        procfs = try .monitorRoot(options.procfs, option: "procfs")
        sysfs = try .monitorRoot(options.sysfs, option: "sysfs")
        rootfs = FSRoot(options.rootfs)
        include = options.include
        exclude = options.exclude
    }

    func start() throws(MonitorError) {
        facts = [:]
        lastMalformed = []
        try procfs.require("diskstats")
    }

    func poll() throws(MonitorError) {
        let stats = try MonitorError.probing { () throws(ProbeError) in try procfs.diskStats() }
        if stats.malformed != lastMalformed {
            lastMalformed = stats.malformed
            if !stats.malformed.isEmpty {
                context.log(.debug, "\(procfs.path("diskstats")): skipped malformed line(s) \(stats.malformed.map(String.init).joined(separator: ", "))")
            }
        }
        var present: Set<String> = []
        for line in stats.lines where isSelected(line.name) {
            guard present.insert(line.name).inserted else { continue }  // a name twice: the first line counts
            context.emit("device", fields: Self.figures(line))
            context.emit("info", fields: deviceFacts(line))
        }
        for name in facts.keys where !present.contains(name) { facts[name] = nil }
    }

    private func isSelected(_ name: String) -> Bool {
        if let known = selected[name] { return known }
        let matches = { (pattern: String) in fnmatch(pattern, name, Self.extendedMatch) == 0 }
        let verdict = (include.isEmpty || include.contains(where: matches)) && !exclude.contains(where: matches)
        if selected.count < 4096 { selected[name] = verdict }
        return verdict
    }

    /// The `device` event's fields: what this kernel writes of the 17 known columns.
    static func figures(_ line: DiskStatsLine) -> [(String, Value)] {
        typealias C = DiskStatsLine.Column
        let names: [(C, String)] = [
            (.readsCompleted, "reads_completed"), (.readsMerged, "reads_merged"), (.sectorsRead, "read_bytes"), (.readTime, "read_time"),
            (.writesCompleted, "writes_completed"), (.writesMerged, "writes_merged"), (.sectorsWritten, "written_bytes"),
            (.writeTime, "write_time"), (.inProgress, "in_progress"), (.ioTime, "io_time"), (.weightedIOTime, "io_time_weighted"),
            (.discardsCompleted, "discards_completed"), (.discardsMerged, "discards_merged"), (.sectorsDiscarded, "discarded_bytes"),
            (.discardTime, "discard_time"), (.flushesCompleted, "flushes_completed"), (.flushTime, "flush_time"),
        ]
        var fields: [(String, Value)] = [("device", .string(line.name))]
        fields.reserveCapacity(names.count + 1)
        for (column, name) in names {
            guard let raw = line[column] else { break }
            switch column {
            case .sectorsRead, .sectorsWritten, .sectorsDiscarded:
                let (bytes, overflow) = raw.multipliedReportingOverflow(by: 512)
                fields.append((name, .int(clamping: overflow ? UInt64.max : bytes)))
            default:
                fields.append((name, .int(clamping: raw)))
            }
        }
        return fields
    }

    /// The `info` event's fields, from the cache or read afresh.
    private func deviceFacts(_ line: DiskStatsLine) -> [(String, Value)] {
        if var known = facts[line.name], known.major == line.major, known.minor == line.minor, known.age < Self.factsRefresh {
            known.age += 1
            facts[line.name] = known
            return known.fields
        }
        var fields: [(String, Value)] = [("device", .string(line.name)), ("major", .int(Int64(line.major))),
                                          ("minor", .int(Int64(line.minor)))]
        let udev = rootfs.udevBlockProperties(major: line.major, minor: line.minor)
        if let model = udev["ID_MODEL"] { fields.append(("model", .string(model))) }
        if let serial = udev["SCSI_IDENT_SERIAL"].flatMap({ $0.isEmpty ? nil : $0 }) ?? udev["ID_SERIAL_SHORT"] {
            fields.append(("serial", .string(serial)))
        }
        if let revision = udev["ID_REVISION"] { fields.append(("revision", .string(revision))) }
        if let wwn = udev["ID_WWN"] { fields.append(("wwn", .string(wwn))) }
        if let path = udev["ID_PATH"] { fields.append(("bus_path", .string(path))) }
        // A name with a slash (cciss!c0d0 is written with a !) cannot be a sysfs directory.
        if !line.name.contains("/") {
            let queue = AttributeDirectory(root: sysfs, dir: "block/\(line.name)/queue")
            if let rotational = try? queue.int("rotational") { fields.append(("rotational", .bool(rotational != 0))) }
            if let size = try? queue.int("logical_block_size") { fields.append(("logical_block_size", .int(size))) }
            if let size = try? queue.int("physical_block_size") { fields.append(("physical_block_size", .int(size))) }
        }
        facts[line.name] = Facts(major: line.major, minor: line.minor, fields: fields, age: 1)
        return fields
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(DiskstatsMonitor.self, a, r) }
