/// Cumulative CPU time counters from one `cpu` line of `/proc/stat`, in
/// jiffies (USER_HZ ticks, normally 1/100 s).
///
/// The kernel's `guest` and `guest_nice` columns are already included in
/// `user` and `nice`: they are kept (for node_exporter's
/// `node_cpu_guest_seconds_total`) but never added to `total`, so guest time
/// is not counted twice.
public struct CPUTimes: Sendable, Equatable, Hashable {
    /// Time in user mode (includes guest time).
    public var user: UInt64
    /// Time in user mode with low priority (includes guest_nice time).
    public var nice: UInt64
    /// Time in kernel mode.
    public var system: UInt64
    /// Time idle, not waiting for I/O.
    public var idle: UInt64
    /// Time idle while I/O was outstanding (0 before Linux 2.5.41).
    public var iowait: UInt64
    /// Time servicing hardware interrupts (0 before Linux 2.6.0).
    public var irq: UInt64
    /// Time servicing softirqs (0 before Linux 2.6.0).
    public var softirq: UInt64
    /// Time stolen by the hypervisor for other guests (0 before Linux 2.6.11).
    public var steal: UInt64
    /// Time running a virtual CPU of a guest (already inside `user`; 0 before Linux 2.6.24).
    public var guest: UInt64
    /// Time running a niced guest (already inside `nice`; 0 before Linux 2.6.33).
    public var guestNice: UInt64

    /// Creates counters; omitted columns are zero.
    public init(
        user: UInt64 = 0, nice: UInt64 = 0, system: UInt64 = 0, idle: UInt64 = 0,
        iowait: UInt64 = 0, irq: UInt64 = 0, softirq: UInt64 = 0, steal: UInt64 = 0,
        guest: UInt64 = 0, guestNice: UInt64 = 0
    ) {
        self.user = user
        self.nice = nice
        self.system = system
        self.idle = idle
        self.iowait = iowait
        self.irq = irq
        self.softirq = softirq
        self.steal = steal
        self.guest = guest
        self.guestNice = guestNice
    }

    /// All counters summed (guest time excluded, it is inside `user`/`nice`).
    public var total: UInt64 {
        user &+ nice &+ system &+ idle &+ iowait &+ irq &+ softirq &+ steal
    }

    /// Idle time including I/O wait: `idle + iowait`.
    /// (Named `totalIdle` because `idle` is the raw column.)
    public var totalIdle: UInt64 { idle &+ iowait }

    /// Non-idle time: `total - totalIdle`.
    public var busy: UInt64 { total &- totalIdle }
}

/// The counters of one online CPU (a `cpuN` line).
public struct PerCPUTimes: Sendable, Equatable, Hashable {
    /// The CPU number N from `cpuN`. Offline CPUs are absent, so ids may have gaps.
    public var id: Int
    /// The counters of that CPU.
    public var times: CPUTimes

    /// Creates an entry.
    public init(id: Int, times: CPUTimes) {
        self.id = id
        self.times = times
    }
}

/// The machine-wide counters that follow the CPU lines of `/proc/stat`
/// (node_exporter's stat collector). Each is nil when its line is missing or
/// its value is not a number that fits: a garbled line leaves only its own
/// figure out.
public struct KernelCounters: Sendable, Equatable {
    /// `ctxt`: context switches since boot (a 64-bit count on every kernel).
    public var contextSwitches: UInt64?
    /// `processes`: processes and threads created since boot (forks).
    public var forks: UInt64?
    /// The first number of `intr`: interrupts serviced since boot, all of them
    /// (the per-IRQ columns after it are not read).
    public var interrupts: UInt64?
    /// `btime`: when the machine booted, seconds since the epoch.
    public var bootTime: UInt64?
    /// `procs_running`: tasks runnable now (since Linux 2.5.45).
    public var procsRunning: UInt64?
    /// `procs_blocked`: tasks blocked on I/O now (since Linux 2.5.45).
    public var procsBlocked: UInt64?

    /// Creates counters; omitted ones are nil.
    public init(contextSwitches: UInt64? = nil, forks: UInt64? = nil, interrupts: UInt64? = nil,
                bootTime: UInt64? = nil, procsRunning: UInt64? = nil, procsBlocked: UInt64? = nil) {
        self.contextSwitches = contextSwitches
        self.forks = forks
        self.interrupts = interrupts
        self.bootTime = bootTime
        self.procsRunning = procsRunning
        self.procsBlocked = procsBlocked
    }
}

/// The CPU time lines of `/proc/stat`, and the counters after them when asked for.
public struct ProcStat: Sendable, Equatable {
    /// The aggregate `cpu` line (sum over all CPUs).
    public var total: CPUTimes
    /// The `cpuN` lines, in file order.
    public var perCPU: [PerCPUTimes]
    /// The lines after the CPU block; nil unless parsed with `counters: true`.
    public var counters: KernelCounters?

    /// Creates a value.
    public init(total: CPUTimes, perCPU: [PerCPUTimes], counters: KernelCounters? = nil) {
        self.total = total
        self.perCPU = perCPU
        self.counters = counters
    }

    /// The counters of CPU `id`, or nil when it is not listed (e.g. offline).
    public func times(forCPU id: Int) -> CPUTimes? {
        perCPU.first { $0.id == id }?.times
    }

    /// Parses the text of `/proc/stat`.
    ///
    /// Each `cpu` line must carry at least 4 numbers (user nice system idle);
    /// the columns older kernels lack read as zero, and columns beyond the
    /// known ten are ignored. Without `counters`, parsing stops after the
    /// block of `cpu` lines, so the long `intr` line is not scanned; with it,
    /// the lines of `KernelCounters` are read too (of `intr`, its first
    /// number only), leniently: a garbled one leaves its counter nil.
    /// - Parameters:
    ///   - path: used in error messages only.
    ///   - counters: also read `ctxt`, `processes`, `intr`, `btime`,
    ///     `procs_running` and `procs_blocked` into `counters`.
    /// - Throws: `ProbeError.malformed` with the offending line number, or
    ///   line 0 when there is no aggregate `cpu` line.
    public static func parse(_ text: String, path: String = "/proc/stat", counters: Bool = false) throws(ProbeError) -> ProcStat {
        try text.withUTF8Bytes { bytes in parse(bytes, path: path, counters: counters) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String, counters wantCounters: Bool = false) -> Result<ProcStat, ProbeError> {
        var total: CPUTimes?
        var perCPU: [PerCPUTimes] = []
        var counters: KernelCounters? = wantCounters ? KernelCounters() : nil
        var lines = LineIterator(bytes)
        var seenCPU = false
        while let (lineNumber, fieldsStart) = lines.next() {
            var fields = fieldsStart
            guard let label = fields.next() else { continue }
            guard bytes.hasPrefix(label, "cpu") else {
                if counters != nil {
                    // The value is the first number after the label (for intr, the total).
                    let value = fields.next().flatMap { bytes.parseUInt64($0) }
                    if bytes.matches(label, "ctxt") { counters?.contextSwitches = value }
                    else if bytes.matches(label, "processes") { counters?.forks = value }
                    else if bytes.matches(label, "intr") { counters?.interrupts = value }
                    else if bytes.matches(label, "btime") { counters?.bootTime = value }
                    else if bytes.matches(label, "procs_running") { counters?.procsRunning = value }
                    else if bytes.matches(label, "procs_blocked") { counters?.procsBlocked = value }
                    continue
                }
                if seenCPU { break }  // the cpu block is over
                continue
            }
            seenCPU = true
            let idRange = (label.lowerBound + 3)..<label.upperBound
            var id: Int?
            if !idRange.isEmpty {
                guard let n = bytes.parseInt(idRange) else {
                    return .failure(.malformed(
                        path: path, line: lineNumber,
                        reason: "invalid CPU label '\(bytes.excerpt(label))'"))
                }
                id = n
            }

            // user nice system idle iowait irq softirq steal guest guest_nice
            var values: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) =
                (0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            var count = 0
            while let field = fields.next() {
                guard let v = bytes.parseUInt64(field) else {
                    return .failure(.malformed(
                        path: path, line: lineNumber,
                        reason: "invalid number '\(bytes.excerpt(field))' after '\(bytes.excerpt(label))'"))
                }
                switch count {
                case 0: values.0 = v
                case 1: values.1 = v
                case 2: values.2 = v
                case 3: values.3 = v
                case 4: values.4 = v
                case 5: values.5 = v
                case 6: values.6 = v
                case 7: values.7 = v
                case 8: values.8 = v
                case 9: values.9 = v
                default: break  // future columns
                }
                count += 1
            }
            guard count >= 4 else {
                return .failure(.malformed(
                    path: path, line: lineNumber,
                    reason: "expected at least 4 numbers after '\(bytes.excerpt(label))', found \(count)"))
            }
            let times = CPUTimes(
                user: values.0, nice: values.1, system: values.2, idle: values.3,
                iowait: values.4, irq: values.5, softirq: values.6, steal: values.7,
                guest: values.8, guestNice: values.9)
            if let id {
                perCPU.append(PerCPUTimes(id: id, times: times))
            } else {
                guard total == nil else {
                    return .failure(.malformed(path: path, line: lineNumber, reason: "duplicate 'cpu' line"))
                }
                total = times
            }
        }
        guard let total else {
            return .failure(.malformed(path: path, line: 0, reason: "no aggregate 'cpu' line"))
        }
        return .success(ProcStat(total: total, perCPU: perCPU, counters: counters))
    }
}

/// How CPU time was spent over an interval, as ratios in `0...1`.
///
/// `usage == user + system + steal` and `usage + iowait + idle == 1`
/// (up to rounding).
public struct CPUUsage: Sendable, Equatable {
    /// Non-idle share: `busy / total`.
    public var usage: Double
    /// `user + nice` share.
    public var user: Double
    /// `system + irq + softirq` share.
    public var system: Double
    /// I/O wait share.
    public var iowait: Double
    /// Hypervisor steal share.
    public var steal: Double
    /// Idle share (without I/O wait).
    public var idle: Double

    /// Creates a value.
    public init(usage: Double, user: Double, system: Double, iowait: Double, steal: Double, idle: Double) {
        self.usage = usage
        self.user = user
        self.system = system
        self.iowait = iowait
        self.steal = steal
        self.idle = idle
    }

    /// Usage between two samples of the same CPU (or of the aggregate line).
    ///
    /// Returns nil when no time elapsed or the total went backwards (counter
    /// reset, CPU hotplug, samples from different CPUs). A single column that
    /// decreases while the total grows — the kernel's `iowait` is documented to
    /// do so — counts as zero for that column.
    public static func between(_ old: CPUTimes, _ new: CPUTimes) -> CPUUsage? {
        guard new.total >= old.total else { return nil }
        @inline(__always) func delta(_ a: UInt64, _ b: UInt64) -> UInt64 { b >= a ? b - a : 0 }
        let d = CPUTimes(
            user: delta(old.user, new.user), nice: delta(old.nice, new.nice),
            system: delta(old.system, new.system), idle: delta(old.idle, new.idle),
            iowait: delta(old.iowait, new.iowait), irq: delta(old.irq, new.irq),
            softirq: delta(old.softirq, new.softirq), steal: delta(old.steal, new.steal))
        return ratios(d)
    }

    /// Average usage since boot, from a single sample.
    public static func sinceBoot(_ times: CPUTimes) -> CPUUsage? {
        ratios(times)
    }

    private static func ratios(_ d: CPUTimes) -> CPUUsage? {
        let total = d.total
        guard total > 0 else { return nil }
        let t = Double(total)
        // Sum in integers first, then divide once, so e.g. 60/400 == 0.15 exactly.
        return CPUUsage(
            usage: Double(d.busy) / t,
            user: Double(d.user &+ d.nice) / t,
            system: Double(d.system &+ d.irq &+ d.softirq) / t,
            iowait: Double(d.iowait) / t,
            steal: Double(d.steal) / t,
            idle: Double(d.idle) / t)
    }
}
