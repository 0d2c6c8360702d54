import Foundation
import Synchronization
import Glibc
import Testing

/// Debian's own collectd read plugins (collectd-core), unmodified, run by the
/// real `vigil` through the `collectd` plugin, in the host's process: each
/// one's values are checked against what the test reads itself from /proc,
/// /sys, statvfs and utmp just before and just after the run. A counter
/// must lie between the two readings; a level that parts of a whole make up
/// must sum to that whole exactly.
///
/// The plugins read this machine's kernel (collectd has no root option), so a
/// source this machine lacks (no swap, no conntrack module, no serial port)
/// is said so and its plugin is only required to run without values; every
/// plugin whose source exists must produce values that check out, and on
/// any machine with the usual sources that is more than 25.
@Suite(.serialized, .startsProcesses, .offThePool)
struct CollectdReadPluginTests {
    /// The monitors: collectd plugin name and its config (JSON in the manifest).
    static let plugins: [(name: String, config: String)] = [
        ("load", "{}"), ("cpu", "{}"), ("memory", "{}"), ("df", "{ MountPoint: \"/\", IgnoreSelected: false }"),
        ("interface", "{}"), ("disk", "{}"), ("processes", "{}"), ("uptime", "{}"), ("swap", "{}"),
        ("entropy", "{}"), ("irq", "{}"), ("vmem", "{}"), ("contextswitch", "{}"), ("fhcount", "{}"),
        ("protocols", "{}"), ("tcpconns", "{ ListeningPorts: false, LocalPort: PORT }"), ("users", "{}"),
        ("ipc", "{}"), ("numa", "{}"), ("hugepages", "{}"), ("conntrack", "{}"), ("buddyinfo", "{}"),
        ("netlink", "{ Interface: lo, VerboseInterface: lo }"), ("cpusleep", "{}"), ("serial", "{}"),
        ("synproxy", "{}"),
    ]

    @Test func debianReadPluginsAgreeWithTheKernel() throws {
        let setup = try CollectdTestSetup()
        // A listener of our own, so tcpconns has a port whose state is known.
        let listener = try TCPListener()
        defer { listener.close() }
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var manifest = "isolation: none\nmonitors:\n"
        for (name, config) in Self.plugins {
            manifest += """
              cd_\(name):
                plugin: collectd
                interval: 1s
                options: { plugin: \(name), config: \(config.replacingOccurrences(of: "PORT", with: "\(listener.port)")) }

            """
        }
        manifest += "sinks:\n  out: { type: file, path: \(dir)/events.jsonl }\n"
        try TestEnv.write(manifest, to: dir + "/m.yaml")

        // The root file system's free blocks, every 20 ms while vigil runs:
        // under the suite other tests write and delete files of tens of
        // megabytes between the two snapshots (free space 30 MB below both).
        let freeBlocks = Mutex<[Double]>([])
        let sampling = Atomic<Bool>(true)
        let sampler = Thread {
            while sampling.load(ordering: .relaxed) {
                var fs = statvfs()
                if statvfs("/", &fs) == 0 { freeBlocks.withLock { $0.append(Double(fs.f_bavail)) } }
                usleep(20_000)
            }
        }
        let before = KernelSnapshot()
        sampler.start()
        let run = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", setup.pluginDir, "--for", "3500ms",
                                                     "--control", "none"],
                                  timeout: 60)
        sampling.store(false, ordering: .relaxed)
        while sampler.isExecuting { usleep(5_000) }
        let after = KernelSnapshot()
        let seenFree = freeBlocks.withLock { $0 }
        #expect(run.status == 0, "vigil run: \(run.status)\n\(run.stderr)")
        #expect(run.stderr.contains("none lost"), "\(run.stderr)")
        let values = CollectdValues(file: dir + "/events.jsonl")

        var checked: [String] = []
        var absent: [String] = []
        for (name, _) in Self.plugins {
            let check = ReadPluginCheck(plugin: name, values: values.of(monitor: "cd_" + name), before: before, after: after,
                                        listenerPort: listener.port, freeBlocksSeen: seenFree)
            switch check.verdict() {
            case .checked(let problems):
                #expect(problems.isEmpty, "collectd \(name): \(problems.joined(separator: "; "))")
                checked.append(name)
            case .sourceAbsent(let why):
                #expect(values.of(monitor: "cd_" + name).isEmpty, "collectd \(name) produced values though \(why)")
                absent.append("\(name) (\(why))")
            }
        }
        // Every plugin's source that exists was checked: all of them on a
        // machine that has the usual ones (CI has all but perhaps a few).
        #expect(checked.count + absent.count == Self.plugins.count)
        #expect(checked.count >= min(25, Self.plugins.count - absent.count),
                "checked \(checked.count): \(checked); absent here: \(absent)")
        print("collectd read plugins checked against the kernel: \(checked.count) (\(checked.joined(separator: ", ")))"
              + (absent.isEmpty ? "" : "; sources absent here: \(absent.joined(separator: ", "))"))
    }
}

/// The collectd plugin's build directory, and collectd-core's plugins.
struct CollectdTestSetup {
    let pluginDir: String

    init() throws {
        pluginDir = try TestEnv.cPlugins()
        try #require(FileManager.default.fileExists(atPath: pluginDir + "/collectd.so"),
                     "collectd.so was not built: collectd-dev's headers are missing (apt-get install collectd-dev; scripts/test-deps installs it)")
        try #require(FileManager.default.fileExists(atPath: pluginDir + "/collectd-shim/libvigil_collectd_shim.so"))
        try #require(FileManager.default.fileExists(atPath: "/usr/lib/collectd/cpu.so"),
                     "collectd's plugins are not installed (apt-get install collectd-core; scripts/test-deps installs it)")
    }
}

/// The `value` events of a run, by monitor.
struct CollectdValues {
    struct Value {
        var monitor: String
        var time: String
        var fields: [String: Any]
        var pluginInstance: String { fields["plugin_instance"] as? String ?? "" }
        var type: String { fields["type"] as? String ?? "" }
        var typeInstance: String { fields["type_instance"] as? String ?? "" }
        func number(_ name: String) -> Double? {
            if let n = fields[name] as? NSNumber { return n.doubleValue }
            return nil
        }
    }

    var values: [Value] = []

    init(file: String) {
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["kind"] as? String == "value", let fields = object["fields"] as? [String: Any] else { continue }
            values.append(Value(monitor: object["monitor"] as? String ?? "", time: object["time"] as? String ?? "",
                                fields: fields))
        }
    }

    func of(monitor: String) -> [Value] { values.filter { $0.monitor == monitor } }
}

/// What the test reads of the kernel, at one moment.
struct KernelSnapshot {
    var loadavg: Double?
    var stat: [String: [UInt64]] = [:]
    var meminfo: [String: UInt64] = [:]
    var netdev: [String: (rx: UInt64, tx: UInt64)] = [:]
    var diskstats: [String: (reads: UInt64, writes: UInt64)] = [:]
    var uptime: Double?
    var interrupts: [String: UInt64] = [:]
    var vmstat: [String: UInt64] = [:]
    var snmp: [String: [String: UInt64]] = [:]
    var fileNr: [UInt64] = []
    var entropyPool: UInt64?
    var numastat: [String: UInt64] = [:]
    var hugepages: [String: (free: UInt64, total: UInt64)] = [:]
    var conntrack: (count: UInt64, max: UInt64)?
    var buddyZones: Set<String> = []
    var rootFS: statvfs?
    var sleepMillis: UInt64?
    var users: Int
    var shmSegments: Int?
    var serial: [String: (rx: UInt64, tx: UInt64)] = [:]
    var synproxy: [UInt64] = []

    init() {
        loadavg = Self.read("/proc/loadavg")?.split(separator: " ").first.flatMap { Double($0) }
        for line in Self.lines("/proc/stat") {
            let parts = line.split(separator: " ")
            guard let key = parts.first else { continue }
            stat[String(key)] = parts.dropFirst().compactMap { UInt64($0) }
        }
        for line in Self.lines("/proc/meminfo") {
            let parts = line.split(separator: " ")
            if parts.count >= 2, let v = UInt64(parts[1]) { meminfo[String(parts[0].dropLast())] = v }
        }
        for line in Self.lines("/proc/net/dev").dropFirst(2) {
            let halves = line.split(separator: ":", maxSplits: 1)
            guard halves.count == 2 else { continue }
            let n = halves[1].split(separator: " ").compactMap { UInt64($0) }
            if n.count >= 9 { netdev[halves[0].trimmingCharacters(in: .whitespaces)] = (n[0], n[8]) }
        }
        for line in Self.lines("/proc/diskstats") {
            let p = line.split(separator: " ")
            if p.count >= 8, let r = UInt64(p[3]), let w = UInt64(p[7]) { diskstats[String(p[2])] = (r, w) }
        }
        uptime = Self.read("/proc/uptime")?.split(separator: " ").first.flatMap { Double($0) }
        let cpus = Self.lines("/proc/interrupts").first?.split(separator: " ").count ?? 0
        for line in Self.lines("/proc/interrupts").dropFirst() {
            let p = line.split(separator: " ")
            guard let name = p.first, name.hasSuffix(":") else { continue }
            interrupts[String(name.dropLast())] = p.dropFirst().prefix(cpus).compactMap { UInt64($0) }.reduce(0, +)
        }
        for line in Self.lines("/proc/vmstat") {
            let p = line.split(separator: " ")
            if p.count == 2, let v = UInt64(p[1]) { vmstat[String(p[0])] = v }
        }
        for file in ["/proc/net/snmp", "/proc/net/netstat"] {
            let rows = Self.lines(file)
            for i in stride(from: 0, to: rows.count - 1, by: 2) {
                let names = rows[i].split(separator: " "), numbers = rows[i + 1].split(separator: " ")
                guard let section = names.first, names.count == numbers.count else { continue }
                var table: [String: UInt64] = [:]
                for (n, v) in zip(names.dropFirst(), numbers.dropFirst()) { if let v = UInt64(v) { table[String(n)] = v } }
                snmp[String(section.dropLast()), default: [:]].merge(table) { $1 }
            }
        }
        fileNr = (Self.read("/proc/sys/fs/file-nr") ?? "").split(whereSeparator: { $0 == "\t" || $0 == " " || $0 == "\n" })
            .compactMap { UInt64($0) }
        entropyPool = Self.read("/proc/sys/kernel/random/poolsize").flatMap { UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        for line in Self.lines("/sys/devices/system/node/node0/numastat") {
            let p = line.split(separator: " ")
            if p.count == 2, let v = UInt64(p[1]) { numastat[String(p[0])] = v }
        }
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/sys/kernel/mm/hugepages")) ?? [] {
            let base = "/sys/kernel/mm/hugepages/\(entry)/"
            if let free = Self.number(base + "free_hugepages"), let total = Self.number(base + "nr_hugepages") {
                hugepages[entry] = (free, total)
            }
        }
        if let count = Self.number("/proc/sys/net/netfilter/nf_conntrack_count"),
           let max = Self.number("/proc/sys/net/netfilter/nf_conntrack_max") {
            conntrack = (count, max)
        }
        for line in Self.lines("/proc/buddyinfo") {
            // "Node 0, zone   Normal  1 2 3" -> Node0/Normal, as collectd names it
            let p = line.split(separator: " ")
            if p.count > 4 { buddyZones.insert("Node\(p[1].dropLast())/\(p[3])") }
        }
        var fs = statvfs()
        if statvfs("/", &fs) == 0 { rootFS = fs }
        var boot = timespec(), mono = timespec()
        if clock_gettime(CLOCK_BOOTTIME, &boot) == 0, clock_gettime(CLOCK_MONOTONIC, &mono) == 0 {
            let ms = (Int64(boot.tv_sec) - Int64(mono.tv_sec)) * 1000 + (Int64(boot.tv_nsec) - Int64(mono.tv_nsec)) / 1_000_000
            sleepMillis = UInt64(max(0, ms))
        }
        users = Self.loggedInUsers()
        let shm = Self.lines("/proc/sysvipc/shm")
        shmSegments = shm.isEmpty ? nil : shm.count - 1
        for line in Self.lines("/proc/tty/driver/serial").dropFirst() {
            // "0: uart:16550A port:000003F8 irq:4 tx:218 rx:0 …"; ports without a uart are skipped, as collectd does
            let p = line.split(separator: " ")
            guard let index = p.first, index.hasSuffix(":"), !line.contains("uart:unknown") else { continue }
            var rx: UInt64?, tx: UInt64?
            for word in p {
                if word.hasPrefix("rx:") { rx = UInt64(word.dropFirst(3)) }
                if word.hasPrefix("tx:") { tx = UInt64(word.dropFirst(3)) }
            }
            if let rx, let tx { serial[String(index.dropLast())] = (rx, tx) }
        }
        let rows = Self.lines("/proc/net/stat/synproxy").dropFirst().map { $0.split(separator: " ").compactMap { UInt64($0, radix: 16) } }
        if let width = rows.first?.count {
            synproxy = (0..<width).map { column in rows.reduce(0) { $0 + ($1.count > column ? $1[column] : 0) } }
        }
    }

    static func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }
    static func lines(_ path: String) -> [String] {
        (read(path) ?? "").split(separator: "\n").map { $0.replacingOccurrences(of: "\t", with: " ") }
    }
    static func number(_ path: String) -> UInt64? { read(path).flatMap { UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines)) } }

    /// USER_PROCESS records in utmp, as users(1) counts them.
    static func loggedInUsers() -> Int {
        setutxent()
        defer { endutxent() }
        var n = 0
        while let entry = getutxent() { if entry.pointee.ut_type == Int16(USER_PROCESS) { n += 1 } }
        return n
    }
}

/// One plugin's values against the kernel's, before and after.
struct ReadPluginCheck {
    enum Verdict {
        case checked([String])
        case sourceAbsent(String)
    }

    let plugin: String
    let values: [CollectdValues.Value]
    let before: KernelSnapshot
    let after: KernelSnapshot
    let listenerPort: Int
    /// The root file system's free blocks as sampled during the run.
    var freeBlocksSeen: [Double] = []

    /// The last value of a series.
    func last(type: String, instance: String = "", pluginInstance: String? = nil) -> CollectdValues.Value? {
        values.last { $0.type == type && $0.typeInstance == instance && (pluginInstance == nil || $0.pluginInstance == pluginInstance!) }
    }

    func between(_ what: String, _ value: Double?, _ low: Double?, _ high: Double?, slack: Double = 0) -> String? {
        guard let value else { return "no \(what) value" }
        guard let low, let high else { return "no \(what) reading of the kernel" }
        let (a, b) = (min(low, high), max(low, high))
        return value >= a - slack && value <= b + slack ? nil : "\(what) \(value) outside [\(a), \(b)]"
    }

    func verdict() -> Verdict {
        var problems: [String] = []
        func expect(_ problem: String?) { if let problem { problems.append(problem) } }
        if values.isEmpty, let absent = absence() { return absent }
        if values.isEmpty { return .checked(["no values at all"]) }
        switch plugin {
        case "load":
            expect(between("load shortterm", last(type: "load")?.number("shortterm"), before.loadavg, after.loadavg, slack: 0.005))
        case "cpu":
            // /proc/stat cpuN: user nice system idle … in jiffies, as collectd reports them.
            let cpus = before.stat.keys.filter { $0.hasPrefix("cpu") && $0 != "cpu" }
            for cpu in cpus {
                let n = String(cpu.dropFirst(3))
                for (state, column) in [("user", 0), ("system", 2), ("idle", 3)] {
                    expect(between("cpu \(n) \(state)", last(type: "cpu", instance: state, pluginInstance: n)?.number("value"),
                                   before.stat[cpu].map { Double($0[column]) }, after.stat[cpu].map { Double($0[column]) }))
                }
            }
        case "memory":
            // The parts of one reading sum to MemTotal, exactly.
            let total = Double(before.meminfo["MemTotal"] ?? 0) * 1024
            let byTime = Dictionary(grouping: values.filter { $0.type == "memory" }) { $0.time }
            if byTime.isEmpty { problems.append("no memory values") }
            for (time, parts) in byTime {
                let sum = parts.compactMap { $0.number("value") }.reduce(0, +)
                if sum != total { problems.append("memory parts at \(time) sum to \(sum), MemTotal is \(total)") }
            }
        case "df":
            guard let fs = before.rootFS, let fs2 = after.rootFS else { return .sourceAbsent("statvfs(/) failed") }
            let size = Double(fs.f_frsize)
            let parts = ["used", "free", "reserved"].compactMap { last(type: "df_complex", instance: $0, pluginInstance: "root")?.number("value") }
            if parts.count != 3 { problems.append("df root: \(parts.count) of used/free/reserved") }
            else if parts.reduce(0, +) != Double(fs.f_blocks) * size {
                problems.append("df root parts sum to \(parts.reduce(0, +)), statvfs says \(Double(fs.f_blocks) * size)")
            }
            let seen = freeBlocksSeen + [Double(fs.f_bavail), Double(fs2.f_bavail)]
            expect(between("df root free", last(type: "df_complex", instance: "free", pluginInstance: "root")?.number("value"),
                           (seen.min() ?? 0) * size * 0.999, (seen.max() ?? 0) * size * 1.001))
        case "interface", "netlink":
            for (name, b) in before.netdev {
                guard let a = after.netdev[name], let v = last(type: "if_octets", pluginInstance: name) else {
                    if plugin == "interface" { problems.append("no if_octets for \(name)") }
                    continue
                }
                expect(between("\(name) rx bytes", v.number("rx"), Double(b.rx), Double(a.rx)))
                expect(between("\(name) tx bytes", v.number("tx"), Double(b.tx), Double(a.tx)))
            }
        case "disk":
            var seen = 0
            for (name, b) in before.diskstats {
                guard let a = after.diskstats[name], let v = last(type: "disk_ops", pluginInstance: name) else { continue }
                seen += 1
                expect(between("\(name) reads", v.number("read"), Double(b.reads), Double(a.reads)))
                expect(between("\(name) writes", v.number("write"), Double(b.writes), Double(a.writes)))
            }
            if seen == 0 { problems.append("no disk_ops for any disk of /proc/diskstats") }
        case "processes":
            expect(between("forks", last(type: "fork_rate")?.number("value"),
                           before.stat["processes"]?.first.map { Double($0) }, after.stat["processes"]?.first.map { Double($0) }))
        case "uptime":
            expect(between("uptime", last(type: "uptime")?.number("value"), before.uptime.map { $0.rounded(.down) },
                           after.uptime.map { $0.rounded(.up) }))
        case "swap":
            let total = Double(before.meminfo["SwapTotal"] ?? 0) * 1024
            let parts = ["used", "free", "cached"].compactMap { last(type: "swap", instance: $0)?.number("value") }
            if parts.count != 3 || parts.reduce(0, +) != total {
                problems.append("swap used+free+cached \(parts) != SwapTotal \(total)")
            }
        case "entropy":
            expect(between("entropy", last(type: "entropy")?.number("value"), 0, before.entropyPool.map { Double($0) }))
        case "irq":
            var seen = 0
            for (name, b) in before.interrupts where Int(name) != nil {
                guard let a = after.interrupts[name], let v = last(type: "irq", instance: name)?.number("value") else { continue }
                seen += 1
                expect(between("irq \(name)", v, Double(b), Double(a)))
            }
            if seen == 0 { problems.append("no irq values") }
        case "vmem":
            let faults = last(type: "vmpage_faults")
            expect(between("major faults", faults?.number("majflt"), before.vmstat["pgmajfault"].map { Double($0) },
                           after.vmstat["pgmajfault"].map { Double($0) }))
            expect(between("free pages", last(type: "vmpage_number", instance: "free_pages")?.number("value"), 0,
                           before.meminfo["MemTotal"].map { Double($0) / 4 }))
        case "contextswitch":
            expect(between("context switches", last(type: "contextswitch")?.number("value"),
                           before.stat["ctxt"]?.first.map { Double($0) }, after.stat["ctxt"]?.first.map { Double($0) }))
        case "fhcount":
            guard before.fileNr.count == 3 else { return .sourceAbsent("no /proc/sys/fs/file-nr") }
            let max = Double(before.fileNr[2])
            expect(last(type: "file_handles", instance: "max")?.number("value") == max ? nil : "file handles max is not \(max)")
            expect(between("file handles used", last(type: "file_handles", instance: "used")?.number("value"), 0, max))
        case "protocols":
            for (section, key) in [("Tcp", "ActiveOpens"), ("Ip", "InReceives"), ("Udp", "InDatagrams")] {
                expect(between("\(section) \(key)", last(type: "protocol_counter", instance: key, pluginInstance: section)?.number("value"),
                               before.snmp[section]?[key].map { Double($0) }, after.snmp[section]?[key].map { Double($0) }))
            }
        case "tcpconns":
            let listening = last(type: "tcp_connections", instance: "LISTEN", pluginInstance: "\(listenerPort)-local")
            expect(listening?.number("value") == 1 ? nil : "LISTEN on our port \(listenerPort): \(String(describing: listening?.number("value")))")
        case "users":
            expect(between("users", last(type: "users")?.number("value"), Double(before.users), Double(after.users)))
        case "ipc":
            expect(between("shm segments", last(type: "segments", pluginInstance: "shm")?.number("value"),
                           before.shmSegments.map { Double($0) }, after.shmSegments.map { Double($0) }))
        case "numa":
            expect(between("node0 numa_hit", last(type: "vmpage_action", instance: "numa_hit", pluginInstance: "node0")?.number("value"),
                           before.numastat["numa_hit"].map { Double($0) }, after.numastat["numa_hit"].map { Double($0) }))
        case "hugepages":
            for (entry, b) in before.hugepages {
                // hugepages-2048kB -> mm-2048Kb
                let size = entry.dropFirst("hugepages-".count).dropLast(2)
                let free = last(type: "vmpage_number", instance: "free", pluginInstance: "mm-\(size)Kb")?.number("value")
                expect(between("\(entry) free", free, Double(b.free), after.hugepages[entry].map { Double($0.free) }))
                let used = last(type: "vmpage_number", instance: "used", pluginInstance: "mm-\(size)Kb")?.number("value")
                expect(between("\(entry) used", used, Double(b.total - b.free), after.hugepages[entry].map { Double($0.total - $0.free) }))
            }
        case "conntrack":
            guard let b = before.conntrack, let a = after.conntrack else { return .sourceAbsent("no nf_conntrack module") }
            expect(last(type: "conntrack", instance: "max")?.number("value") == Double(b.max) ? nil : "conntrack max is not \(b.max)")
            expect(between("conntrack entries", last(type: "conntrack")?.number("value"), Double(b.count), Double(a.count), slack: 16))
        case "buddyinfo":
            let zones = Set(values.map(\.pluginInstance))
            expect(zones == before.buddyZones ? nil : "buddyinfo zones \(zones.sorted()) != /proc/buddyinfo's \(before.buddyZones.sorted())")
            expect(values.allSatisfy { ($0.number("value") ?? -1) >= 0 } ? nil : "a negative free page count")
        case "cpusleep":
            expect(between("time asleep (ms)", last(type: "total_time_in_ms")?.number("value"), before.sleepMillis.map { Double($0) },
                           after.sleepMillis.map { Double($0) }, slack: 1))
        case "serial":
            for (port, b) in before.serial {
                let v = last(type: "serial_octets", instance: port)
                expect(between("serial \(port) tx", v?.number("tx"), Double(b.tx), after.serial[port].map { Double($0.tx) }))
                expect(between("serial \(port) rx", v?.number("rx"), Double(b.rx), after.serial[port].map { Double($0.rx) }))
            }
        case "synproxy":
            // entries syn_received cookie_invalid cookie_valid cookie_retrans conn_reopened
            expect(between("synproxy syn_received", last(type: "connections", instance: "syn_received")?.number("value"),
                           before.synproxy.count > 1 ? Double(before.synproxy[1]) : nil,
                           after.synproxy.count > 1 ? Double(after.synproxy[1]) : nil))
            expect(between("synproxy valid cookies", last(type: "cookies", instance: "valid")?.number("value"),
                           before.synproxy.count > 3 ? Double(before.synproxy[3]) : nil,
                           after.synproxy.count > 3 ? Double(after.synproxy[3]) : nil))
        default:
            problems.append("no check for \(plugin)")
        }
        return .checked(problems)
    }

    /// Why a plugin that produced nothing had nothing to read here, if so.
    func absence() -> Verdict? {
        let exists = { (path: String) in FileManager.default.fileExists(atPath: path) }
        switch plugin {
        case "swap" where (before.meminfo["SwapTotal"] ?? 0) == 0 && !exists("/proc/swaps"): return .sourceAbsent("no swap")
        case "conntrack" where before.conntrack == nil: return .sourceAbsent("no nf_conntrack module")
        case "numa" where !exists("/sys/devices/system/node/node0"): return .sourceAbsent("no NUMA nodes in /sys")
        case "hugepages" where before.hugepages.isEmpty: return .sourceAbsent("no huge pages in /sys")
        case "serial" where before.serial.isEmpty: return .sourceAbsent("no serial port with a uart")
        case "synproxy" where before.synproxy.isEmpty: return .sourceAbsent("no /proc/net/stat/synproxy")
        case "disk" where before.diskstats.isEmpty: return .sourceAbsent("an empty /proc/diskstats")
        case "ipc" where before.shmSegments == nil: return .sourceAbsent("no /proc/sysvipc")
        default: return nil
        }
    }
}
