import Foundation
import Glibc
import Logging
import Synchronization
import VigilABI
import VigilCore

/// The watchdog of an isolated monitor's `limits:` where no cgroup enforces
/// them (osquery's way with its extensions): four times a second it reads
/// the runner's memory and CPU time from /proc. Resident anonymous memory
/// over the limit, or allocations at the RLIMIT_DATA the host set (twice the
/// limit, where the kernel began refusing them), end the runner at once; CPU over the limit
/// for `cpuStrikes` seconds in a row ends it too; the crash report says which
/// limit and by how much. `open_files` is the runner's own RLIMIT_NOFILE
/// (set before the plugin loads).
package struct RunnerLimits: Sendable {
    let limits: ResourceLimits
    /// Consecutive seconds over the CPU limit that end a runner.
    static let cpuStrikes = 3
    /// Nanoseconds between looks.
    package static let period: Int64 = 250_000_000
    /// Allocations within this of the RLIMIT_DATA count as having reached it
    /// (the refused one was larger than what was left).
    static let dataSlack: Int64 = 1 << 20

    private var lastPID: pid_t = 0
    private var lastCPU: Int64 = 0
    private var lastAt: Int64 = 0
    /// Seconds in a row over the CPU limit.
    private var strikes = 0

    package init(limits: ResourceLimits) { self.limits = limits }

    package var isEmpty: Bool { limits.memory == nil && limits.cpuPercent == nil }

    /// Why `pid` must be ended now, or nil. `now` is monotonic nanoseconds;
    /// `dataLimit` the RLIMIT_DATA the host gave the runner.
    package mutating func check(pid: pid_t, dataLimit: Int64?, now: Int64) -> String? {
        guard !isEmpty, let sample = Self.sample(pid: pid) else { return nil }
        if let memory = limits.memory {
            if sample.anonymous > memory {
                return "memory limit: resident \(Units.formatSize(sample.anonymous)) (anonymous) is over the limit of \(Units.formatSize(memory))"
            }
            if let dataLimit, sample.data >= dataLimit - Self.dataSlack {
                return "memory limit: its allocations reached twice the limit of \(Units.formatSize(memory)) (\(Units.formatSize(sample.data)) with the runner's own), and the kernel refuses more"
            }
        }
        // CPU is judged over whole seconds.
        guard let cpu = limits.cpuPercent, pid != lastPID || now - lastAt >= 1_000_000_000 else { return nil }
        defer {
            lastPID = pid
            lastCPU = sample.cpu
            lastAt = now
        }
        guard pid == lastPID, now > lastAt else {
            strikes = 0
            return nil
        }
        let used = Double(sample.cpu - lastCPU) / Double(now - lastAt) * 100
        strikes = used > cpu ? strikes + 1 : 0
        guard strikes >= Self.cpuStrikes else { return nil }
        strikes = 0
        return String(format: "cpu limit: %.0f%% of a core for %d s, over the limit of %@", used, Self.cpuStrikes,
                      Units.formatPercent(cpu))
    }

    /// Resident anonymous bytes, data bytes (heap, private writable
    /// mappings and stack) and CPU nanoseconds (user + system) of `pid`.
    static func sample(pid: pid_t) -> (anonymous: Int64, data: Int64, cpu: Int64)? {
        guard let statm = read("/proc/\(pid)/statm"), let stat = read("/proc/\(pid)/stat") else { return nil }
        // statm(5): size resident shared text lib data dt, in pages.
        let pages = statm.split(separator: " ").map { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        guard pages.count > 5, let resident = pages[1], let shared = pages[2], let data = pages[5] else { return nil }
        // utime and stime are fields 14 and 15 of stat(5); the state (field 3) is fields[0] here.
        guard let fields = statFields(stat), fields.count > 12, let user = Int64(fields[11]), let system = Int64(fields[12]) else { return nil }
        let tick = Int64(max(1, sysconf(Int32(_SC_CLK_TCK))))
        let page = Int64(max(1, sysconf(Int32(_SC_PAGESIZE))))
        return (max(0, resident - shared).multipliedSaturating(by: page), data.multipliedSaturating(by: page),
                (user + system).multipliedSaturating(by: 1_000_000_000 / tick))
    }

    /// The fields of a /proc/PID/stat text after the command (which may
    /// hold spaces and parentheses): `[0]` is stat(5)'s field 3, the state.
    static func statFields(_ stat: String) -> [Substring]? {
        guard let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ")
    }

    static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }
}

/// The watchdog of one output's runners (a `type: plugin` sink in a runner)
/// where no cgroup enforces their `limits:`: `RunnerLimits` looked at every
/// `RunnerLimits.period` on a timer of its own, as the supervisor's
/// watchdog looks at monitors' runners. A runner over a limit is ended with
/// the reason; the sink reports its end (a write in it is written again to
/// a new runner) as it reports a crash.
package final class OutputRunnerWatchdog: @unchecked Sendable {  // the timer is set up in init and runs on its own queue; what it keeps is behind `watch`
    private let timer: DispatchSourceTimer
    private let watch: Mutex<RunnerLimits>

    /// Nil when `limits` hold neither memory nor CPU.
    package init?(limits: ResourceLimits, runner: RunnerTransport, label: String, logger: Logger) {
        guard !RunnerLimits(limits: limits).isEmpty else { return nil }
        watch = Mutex(RunnerLimits(limits: limits))
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "vigil.limits.\(label)"))
        timer.setEventHandler { [weak self, weak runner] in
            guard let self, let runner, let process = runner.currentProcess, process.cgroup == nil, !process.isDead else { return }
            let now = monotonicNanoseconds()
            if let why = watch.withLock({ $0.check(pid: process.pid, dataLimit: process.dataLimit, now: now) }) {
                logger.error("\(why): ending its runner (pid \(process.pid))")
                process.terminate(because: why)
            }
        }
        let period = Int(RunnerLimits.period)
        timer.schedule(deadline: .now() + .nanoseconds(period), repeating: .nanoseconds(period), leeway: .milliseconds(20))
        timer.resume()
    }

    package func cancel() { timer.cancel() }

    deinit { timer.cancel() }
}
