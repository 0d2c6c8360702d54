/// Cumulative CPU time counters from one `cpu` line of `/proc/stat`, in
/// jiffies (USER_HZ ticks, normally 1/100 s).
///
/// The kernel's `guest` and `guest_nice` columns are already included in
/// `user` and `nice`, so they are not stored and never counted twice.
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

    /// Creates counters; omitted columns are zero.
    public init(
        user: UInt64 = 0, nice: UInt64 = 0, system: UInt64 = 0, idle: UInt64 = 0,
        iowait: UInt64 = 0, irq: UInt64 = 0, softirq: UInt64 = 0, steal: UInt64 = 0
    ) {
        self.user = user
        self.nice = nice
        self.system = system
        self.idle = idle
        self.iowait = iowait
        self.irq = irq
        self.softirq = softirq
        self.steal = steal
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

/// The CPU time lines of `/proc/stat`.
public struct ProcStat: Sendable, Equatable {
    /// The aggregate `cpu` line (sum over all CPUs).
    public var total: CPUTimes
    /// The `cpuN` lines, in file order.
    public var perCPU: [PerCPUTimes]

    /// Creates a value.
    public init(total: CPUTimes, perCPU: [PerCPUTimes]) {
        self.total = total
        self.perCPU = perCPU
    }

    /// The counters of CPU `id`, or nil when it is not listed (e.g. offline).
    public func times(forCPU id: Int) -> CPUTimes? {
        perCPU.first { $0.id == id }?.times
    }

    /// Parses the text of `/proc/stat`.
    ///
    /// Each `cpu` line must carry at least 4 numbers (user nice system idle);
    /// the columns older kernels lack read as zero, and columns beyond the
    /// known ten are ignored. Parsing stops after the block of `cpu` lines, so
    /// the long `intr` line is not scanned.
    /// - Parameter path: used in error messages only.
    /// - Throws: `ProbeError.malformed` with the offending line number, or
    ///   line 0 when there is no aggregate `cpu` line.
    public static func parse(_ text: String, path: String = "/proc/stat") throws(ProbeError) -> ProcStat {
        try text.withUTF8Bytes { bytes in parse(bytes, path: path) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>, path: String) -> Result<ProcStat, ProbeError> {
        var total: CPUTimes?
        var perCPU: [PerCPUTimes] = []
        var lines = LineIterator(bytes)
        var seenCPU = false
        while let (lineNumber, fieldsStart) = lines.next() {
            var fields = fieldsStart
            guard let label = fields.next() else { continue }
            guard bytes.hasPrefix(label, "cpu") else {
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
            var values: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) =
                (0, 0, 0, 0, 0, 0, 0, 0)
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
                default: break  // guest, guest_nice (inside user/nice), future columns
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
                iowait: values.4, irq: values.5, softirq: values.6, steal: values.7)
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
        return .success(ProcStat(total: total, perCPU: perCPU))
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
