import Glibc
import LinuxProbes
import VigilKit

/// CPU usage from /proc/stat: the share of time spent busy between two polls.
/// The first poll (the snapshot on start) reports usage since boot.
///
/// Behind options, what node_exporter's cpu, stat and cpufreq collectors
/// show: the kernel's cumulative CPU time per CPU and mode (`seconds`), the
/// machine-wide counters of /proc/stat (`stat`), each CPU's clock from
/// <sysfs>/devices/system/cpu/cpuN/cpufreq (`frequency`), the thermal
/// throttle counts (`core_throttle`, `package_throttle`) and the isolated
/// CPUs (`isolated`). Counters are the raw kernel values, never differenced:
/// a counter the kernel resets or wraps (`processes` is 32 bits on a 32-bit
/// kernel) is reported as it is, so Prometheus' rate() sees a reset. The one
/// exception is node_exporter's own: a `seconds` column that goes back a
/// little (per-CPU iowait does) keeps its last value (see `held`).
final class CPUMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "cpu", version: "1.1.0",
        summary: "CPU usage from /proc/stat deltas, for the whole machine and optionally per CPU; optionally cumulative CPU seconds, the kernel's counters and cpufreq clocks",
        defaultInterval: .seconds(1),
        events: [
            EventDecl("sample", doc: "Machine-wide CPU time shares since the previous poll (since boot on the first).",
                      fields: CPUMonitor.usageFields, policy: .samples),
            EventDecl("core", doc: "The same shares for one CPU (with per_cpu: true).",
                      fields: [FieldDecl("cpu", .int, doc: "CPU number as in /proc/stat")] + CPUMonitor.usageFields,
                      policy: .samples, key: ["cpu"]),
            EventDecl("seconds", doc: """
                Time each online CPU has spent in each mode since boot (with seconds: true), every poll: the \
                cpuN line of <procfs>/stat divided by USER_HZ (sysconf(_SC_CLK_TCK), 100 on every common \
                architecture). Nothing is subtracted: user includes guest and nice includes guest_nice, as in \
                the kernel's file. Columns an older kernel lacks read as 0. As node_exporter does, a column \
                that goes back (iowait does, per CPU) keeps its last value, unless idle went back 3 s or more \
                (the CPU was replaced by hotplug): then every column starts again from the kernel's values.
                """, fields: [FieldDecl("cpu", .int, doc: "CPU number N of the cpuN line")] + CPUMonitor.secondsFields,
                policy: .samples, key: ["cpu"]),
            EventDecl("stat", doc: """
                The machine-wide lines of <procfs>/stat after the CPU lines (with stat: true), every poll. A line \
                that is missing or does not parse leaves its field out.
                """, fields: [
                    FieldDecl("context_switches", .int, unit: "switches", doc: "ctxt: context switches since boot", counter: true),
                    FieldDecl("forks", .int, unit: "processes", doc: "processes: processes and threads created since boot", counter: true),
                    FieldDecl("interrupts", .int, unit: "interrupts", doc: "the first number of intr: interrupts serviced since boot, all sources", counter: true),
                    FieldDecl("boot_time", .int, unit: "seconds", doc: "btime: when the machine booted, seconds since the epoch"),
                    FieldDecl("procs_running", .int, unit: "tasks", doc: "procs_running: tasks runnable now"),
                    FieldDecl("procs_blocked", .int, unit: "tasks", doc: "procs_blocked: tasks waiting for I/O now"),
                ], policy: .samples),
            EventDecl("frequency", doc: """
                Each CPU's clock as cpufreq sees it (with frequency: true), every poll, for every \
                <sysfs>/devices/system/cpu/cpuN that has a cpufreq directory (none on most VMs: no events). The \
                kernel's kHz are converted to Hz. A file that is missing or unreadable (cpuinfo_cur_freq is \
                readable by root only) leaves its field out.
                """, fields: [
                    FieldDecl("cpu", .int, doc: "CPU number N of the cpuN directory"),
                    FieldDecl("frequency", .int, unit: "Hz", doc: "cpuinfo_cur_freq: the clock the hardware reports"),
                    FieldDecl("frequency_min", .int, unit: "Hz", doc: "cpuinfo_min_freq: the lowest clock the CPU can run at"),
                    FieldDecl("frequency_max", .int, unit: "Hz", doc: "cpuinfo_max_freq: the highest clock the CPU can run at"),
                    FieldDecl("scaling_frequency", .int, unit: "Hz", doc: "scaling_cur_freq: the clock the governor asked for (or the driver's estimate)"),
                    FieldDecl("scaling_frequency_min", .int, unit: "Hz", doc: "scaling_min_freq: the lowest clock the policy allows"),
                    FieldDecl("scaling_frequency_max", .int, unit: "Hz", doc: "scaling_max_freq: the highest clock the policy allows"),
                    FieldDecl("governor", .string, doc: "scaling_governor: the policy's governor (schedutil, powersave, performance…)"),
                ], policy: .samples, key: ["cpu"]),
            EventDecl("core_throttle", doc: """
                How often each physical core was throttled for heat (with throttles: true), every poll: \
                <sysfs>/devices/system/cpu/cpuN/thermal_throttle/core_throttle_count of the first CPU of each \
                core, as topology/physical_package_id and topology/core_id name it (x86 with the thermal \
                interrupt; none on VMs: no events). A CPU without topology is skipped.
                """, fields: [
                    FieldDecl("package", .int, doc: "topology/physical_package_id: the socket"),
                    FieldDecl("core", .int, doc: "topology/core_id: the core within the socket"),
                    FieldDecl("throttles", .int, unit: "events", doc: "core_throttle_count: times the core went over its temperature limit", counter: true),
                ], policy: .samples, key: ["package", "core"]),
            EventDecl("package_throttle", doc: """
                How often each package (socket) was throttled for heat (with throttles: true), every poll: \
                thermal_throttle/package_throttle_count of the first CPU of each package.
                """, fields: [
                    FieldDecl("package", .int, doc: "topology/physical_package_id: the socket"),
                    FieldDecl("throttles", .int, unit: "events", doc: "package_throttle_count: times the package went over its temperature limit", counter: true),
                ], policy: .samples, key: ["package"]),
            EventDecl("isolated", doc: """
                One event per CPU kept out of the scheduler's balancing by isolcpus= (with isolated: true), every \
                poll: the CPUs <sysfs>/devices/system/cpu/isolated lists. No events when it lists none.
                """, fields: [
                    FieldDecl("cpu", .int, doc: "CPU number"),
                    FieldDecl("isolated", .bool, doc: "always true: the CPU is isolated"),
                ], policy: .samples, key: ["cpu"]),
        ])

    struct Options: DeclaredOptions {
        var perCPU = false
        var seconds = false
        var stat = false
        var frequency = false
        var throttles = false
        var isolated = false
        var procfs = "/proc"
        var sysfs = "/sys"
        static let schema = OptionSchema<Options>(
            .option("per_cpu", \.perCPU, doc: "Also emit one `core` event per CPU each poll."),
            .option("seconds", \.seconds, doc: "Also emit one `seconds` event per CPU each poll: cumulative time per mode."),
            .option("stat", \.stat, doc: "Also emit a `stat` event each poll: context switches, forks, interrupts, boot time, running and blocked tasks."),
            .option("frequency", \.frequency, doc: "Also emit one `frequency` event per CPU with cpufreq each poll."),
            .option("throttles", \.throttles, doc: "Also emit `core_throttle` and `package_throttle` events each poll, where sysfs has thermal_throttle."),
            .option("isolated", \.isolated, doc: "Also emit an `isolated` event per isolated CPU each poll."),
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."),
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem, for frequency, throttles and isolated (a fixture tree in tests)."))
    }

    static let secondsFields = [
        ("user", "time in user mode, guest time included"),
        ("nice", "time in user mode at low priority, guest_nice time included"),
        ("system", "time in kernel mode"),
        ("idle", "time idle"),
        ("iowait", "time idle while I/O was outstanding (not reliable per CPU, says the kernel; it can go back)"),
        ("irq", "time servicing interrupts"),
        ("softirq", "time servicing softirqs"),
        ("steal", "time the hypervisor ran something else while this virtual CPU wanted to run"),
        ("guest", "time running a guest's virtual CPU (inside user)"),
        ("guest_nice", "time running a niced guest's virtual CPU (inside nice)"),
    ].map { FieldDecl($0.0, .double, unit: "seconds", doc: $0.1, counter: true) }

    static let usageFields = [
        FieldDecl("usage", .double, unit: "ratio", doc: "busy share, 0…1"),
        FieldDecl("user", .double, unit: "ratio", doc: "user and nice"),
        FieldDecl("system", .double, unit: "ratio", doc: "system, irq and softirq"),
        FieldDecl("iowait", .double, unit: "ratio"),
        FieldDecl("steal", .double, unit: "ratio", doc: "time taken by the hypervisor"),
        FieldDecl("idle", .double, unit: "ratio"),
    ]

    private let context: MonitorContext
    private let root: FSRoot
    private let sys: FSRoot
    private let options: Options
    private var perCPU: Bool { options.perCPU }
    private var previous: ProcStat?
    /// The `seconds` last emitted per CPU, in ticks, ordered by CPU (never
    /// pruned: a CPU that comes back from offline goes on from there).
    private var held: [PerCPUTimes] = []
    /// Ticks per second of /proc/stat's columns (USER_HZ).
    private let ticks: Double

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.root = try .monitorRoot(options.procfs, option: "procfs")
        self.sys = try .monitorRoot(options.sysfs, option: "sysfs")
        self.options = options
        let hz = sysconf(Int32(_SC_CLK_TCK))
        self.ticks = hz > 0 ? Double(hz) : 100
    }

    func start() throws(MonitorError) {
        previous = nil
        held = []
        try root.require("stat")
    }

    func poll() throws(MonitorError) {
        let stat = try MonitorError.probing { () throws(ProbeError) in try root.procStat(counters: options.stat) }
        defer { previous = stat }
        let total = previous.flatMap { CPUUsage.between($0.total, stat.total) } ?? CPUUsage.sinceBoot(stat.total)
        if let total { context.emit("sample", fields: Self.fields(total)) }
        if perCPU {
            for cpu in stat.perCPU {
                let usage = previous?.times(forCPU: cpu.id).flatMap { CPUUsage.between($0, cpu.times) } ?? CPUUsage.sinceBoot(cpu.times)
                if let usage { context.emit("core", fields: [("cpu", .int(Int64(cpu.id)))] + Self.fields(usage)) }
            }
        }
        if options.seconds {
            for (index, cpu) in stat.perCPU.enumerated() {
                let times = hold(cpu, at: index)
                context.emit("seconds", fields: [("cpu", .int(Int64(cpu.id)))] + Self.seconds(times, ticks: ticks))
            }
        }
        if let counters = stat.counters {
            let fields = Self.fields(counters)
            if !fields.isEmpty { context.emit("stat", fields: fields) }
        }
        if options.frequency || options.throttles {
            let cpus = sysCPUs()
            if options.frequency { emitFrequencies(cpus) }
            if options.throttles { emitThrottles(cpus) }
        }
        if options.isolated { emitIsolated() }
    }

    /// `cpu`'s times, held so that no column goes back (see `held(_:_:resetBelow:)`),
    /// remembered for the next poll. `index` is where the CPU usually is in `held`.
    private func hold(_ cpu: PerCPUTimes, at index: Int) -> CPUTimes {
        let i = index < held.count && held[index].id == cpu.id ? index : held.firstIndex { $0.id == cpu.id }
        guard let i else {
            held.append(cpu)
            held.sort { $0.id < $1.id }
            return cpu.times
        }
        let times = Self.held(held[i].times, cpu.times, resetBelow: UInt64(Self.jumpBack * ticks))
        held[i].times = times
        return times
    }

    /// Seconds idle may go back before a CPU's columns start again: node_exporter's jumpBackSeconds.
    static let jumpBack = 3.0

    /// Each column of `new`, or of `old` where `new` went back; `new` as it
    /// is when its idle is `resetBelow` ticks or more below `old`'s.
    static func held(_ old: CPUTimes, _ new: CPUTimes, resetBelow: UInt64) -> CPUTimes {
        if old.idle > new.idle, old.idle - new.idle >= resetBelow { return new }
        return CPUTimes(user: max(old.user, new.user), nice: max(old.nice, new.nice), system: max(old.system, new.system),
                        idle: max(old.idle, new.idle), iowait: max(old.iowait, new.iowait), irq: max(old.irq, new.irq),
                        softirq: max(old.softirq, new.softirq), steal: max(old.steal, new.steal),
                        guest: max(old.guest, new.guest), guestNice: max(old.guestNice, new.guestNice))
    }

    /// The ten columns as seconds. Columns a kernel's line lacks (guest came
    /// with Linux 2.6.24, guest_nice with 2.6.33) are zero: it counted none of
    /// that time.
    static func seconds(_ t: CPUTimes, ticks: Double) -> [(String, Value)] {
        let columns: [UInt64] = [t.user, t.nice, t.system, t.idle, t.iowait, t.irq, t.softirq, t.steal, t.guest, t.guestNice]
        return zip(secondsFields, columns).map { ($0.name, .double(Double($1) / ticks)) }
    }

    static func fields(_ c: KernelCounters) -> [(String, Value)] {
        var fields: [(String, Value)] = []
        func add(_ name: String, _ value: UInt64?) {
            if let value { fields.append((name, .int(clamping: value))) }
        }
        add("context_switches", c.contextSwitches)
        add("forks", c.forks)
        add("interrupts", c.interrupts)
        add("boot_time", c.bootTime)
        add("procs_running", c.procsRunning)
        add("procs_blocked", c.procsBlocked)
        return fields
    }

    static let cpuDir = "devices/system/cpu"

    /// The N of every cpuN directory under <sysfs>/devices/system/cpu, in order.
    private func sysCPUs() -> [Int] {
        guard let names = sys.list(Self.cpuDir) else { return [] }
        var cpus: [Int] = []
        for name in names where name.hasPrefix("cpu") {
            let digits = name.dropFirst(3)
            if !digits.isEmpty, digits.allSatisfy({ ("0"..."9").contains($0) }), let n = Int(digits) { cpus.append(n) }
        }
        return cpus.sorted()
    }

    /// A sysfs attribute as a non-negative integer; nil when missing, unreadable or not one.
    private func number(_ relative: String) -> Int64? {
        guard case .text(let text) = sys.attribute(relative), let value = Int64(text), value >= 0 else { return nil }
        return value
    }

    /// node_exporter's thermal throttle counts: the first CPU of each core
    /// and of each package speaks for it.
    private func emitThrottles(_ cpus: [Int]) {
        var cores: [(package: Int64, core: Int64)] = []
        var packages: [Int64] = []
        var coreEvents: [(package: Int64, core: Int64, count: Int64)] = []
        var packageEvents: [(package: Int64, count: Int64)] = []
        for cpu in cpus {
            let dir = "\(Self.cpuDir)/cpu\(cpu)"
            guard let package = number(dir + "/topology/physical_package_id"),
                  let core = number(dir + "/topology/core_id") else { continue }
            if !cores.contains(where: { $0 == (package, core) }) {
                cores.append((package, core))
                if let count = number(dir + "/thermal_throttle/core_throttle_count") {
                    coreEvents.append((package, core, count))
                }
            }
            if !packages.contains(package) {
                packages.append(package)
                if let count = number(dir + "/thermal_throttle/package_throttle_count") {
                    packageEvents.append((package, count))
                }
            }
        }
        for e in packageEvents {
            context.emit("package_throttle", fields: [("package", .int(e.package)), ("throttles", .int(e.count))])
        }
        for e in coreEvents {
            context.emit("core_throttle", fields: [("package", .int(e.package)), ("core", .int(e.core)), ("throttles", .int(e.count))])
        }
    }

    /// The most CPUs a list may name (the kernel's NR_CPUS tops out at 8192).
    static let maxCPUs = 8192

    /// An `isolated` event for every CPU of <sysfs>/devices/system/cpu/isolated.
    private func emitIsolated() {
        guard case .text(let list) = sys.attribute(Self.cpuDir + "/isolated") else { return }
        for cpu in Self.cpuList(list) { context.emit("isolated", fields: [("cpu", .int(Int64(cpu))), ("isolated", .bool(true))]) }
    }

    /// The CPUs of a kernel cpulist ("0-3,8,10-11"), in order, each once.
    /// A part that is not a number or a rising range is skipped; numbers at
    /// or past `maxCPUs` are left out, so a garbled range cannot run long.
    static func cpuList(_ text: String) -> [Int] {
        guard text.contains(where: \.isNumber) else { return [] }
        var listed = [Bool](repeating: false, count: maxCPUs)
        for part in text.split(separator: ",") {
            let bounds = part.split(separator: "-", omittingEmptySubsequences: false)
            guard bounds.count == 1 || bounds.count == 2,
                  let low = Int(FSRoot.trimmed(String(bounds[0]))), low >= 0 else { continue }
            let high = bounds.count == 2 ? Int(FSRoot.trimmed(String(bounds[1]))) : low
            guard let high, high >= low, low < maxCPUs else { continue }
            for cpu in low...min(high, maxCPUs - 1) { listed[cpu] = true }
        }
        return listed.indices.filter { listed[$0] }
    }

    /// One `frequency` event per cpuN directory with a cpufreq directory.
    private func emitFrequencies(_ cpus: [Int]) {
        for cpu in cpus {
            let dir = "\(Self.cpuDir)/cpu\(cpu)/cpufreq"
            guard FSRoot.isDirectory(sys.path(dir)) else { continue }
            var fields: [(String, Value)] = [("cpu", .int(Int64(cpu)))]
            for (field, file) in Self.frequencyFiles {
                guard case .text(let text) = sys.attribute(dir + "/" + file), let khz = Int64(text), khz >= 0 else { continue }
                let (hz, overflow) = khz.multipliedReportingOverflow(by: 1000)
                fields.append((field, .int(overflow ? Int64.max : hz)))
            }
            if case .text(let governor) = sys.attribute(dir + "/scaling_governor"), !governor.isEmpty {
                fields.append(("governor", .string(governor)))
            }
            context.emit("frequency", fields: fields)
        }
    }

    static let frequencyFiles = [
        ("frequency", "cpuinfo_cur_freq"), ("frequency_min", "cpuinfo_min_freq"), ("frequency_max", "cpuinfo_max_freq"),
        ("scaling_frequency", "scaling_cur_freq"), ("scaling_frequency_min", "scaling_min_freq"),
        ("scaling_frequency_max", "scaling_max_freq"),
    ]

    static func fields(_ u: CPUUsage) -> [(String, Value)] {
        [("usage", .double(u.usage)), ("user", .double(u.user)), ("system", .double(u.system)),
         ("iowait", .double(u.iowait)), ("steal", .double(u.steal)), ("idle", .double(u.idle))]
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(CPUMonitor.self, a, r) }
