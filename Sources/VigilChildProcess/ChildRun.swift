import CVigilSys
import Glibc

/// One child run to its end: the child process and the supervisor's ends
/// of its pipes (all close-on-exec; stdin's, stdout's and stderr's
/// non-blocking, so the supervisor never waits on one of them). A rule's
/// action runs through it, and so will a plugin that runs another
/// program (a Nagios check, a munin plugin).
///
/// The child is started through `Spawn`: never through a shell, `argv[0]`
/// a path or (with `searchPath`) looked up in PATH, in a process group of
/// its own (so a timeout or the supervisor's shutdown also ends what it
/// started), every signal at its default disposition and none blocked, its
/// stdin, stdout and stderr pipes to the supervisor, and no other
/// descriptor of the caller's.
package struct ChildRun: Sendable {
    package var pid: pid_t
    var stdin: Int32
    var stdout: Int32
    var stderr: Int32

    /// Starts `argv` with exactly `environment`: the file `program`, or
    /// where it is nil `argv[0]`.
    /// `credentials`: run as another user (`Spawn.Credentials`).
    package static func spawn(argv: [String], program: String? = nil, environment: [String: String],
                              searchPath: Bool = true, credentials: Spawn.Credentials? = nil) throws(SpawnError) -> ChildRun {
        let program = program ?? argv.first ?? ""
        guard !program.isEmpty else { throw SpawnError(program: program, step: .spawn, code: ENOENT) }
        var opened: [Int32] = []
        defer { for fd in opened { close(fd) } }
        var pipes: [(read: Int32, write: Int32)] = []
        for _ in 0..<3 {
            let ends = try Spawn.pipe(for: program)
            opened += [ends.read, ends.write]
            pipes.append(ends)
        }
        // The runner's ends: stdin's write end, the outputs' read ends.
        let mine = [pipes[0].write, pipes[1].read, pipes[2].read]
        for fd in mine { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        let spawn = Spawn(program: program, searchPath: searchPath, arguments: argv, environment: environment,
                          descriptors: [0: .parent(pipes[0].read), 1: .parent(pipes[1].write), 2: .parent(pipes[2].write)],
                          newProcessGroup: true, credentials: credentials)
        let pid = try spawn.start()
        // Keep the runner's ends open; the deferred close takes the child's.
        opened = [pipes[0].read, pipes[1].write, pipes[2].write]
        return ChildRun(pid: pid, stdin: mine[0], stdout: mine[1], stderr: mine[2])
    }

    /// How a supervised run ended.
    package struct Ending: Sendable {
        /// The wait status; nil when the kernel reaped the child (only if
        /// the host set SIGCHLD to SIG_IGN), and the status is lost.
        package var status: Int32?
        package var timedOut: Bool
        /// Ended early because `cancel` became readable (the supervisor is stopping).
        package var cancelled: Bool = false
        /// The first `captureLimit` bytes of each.
        package var stdout: [UInt8]
        package var stderr: [UInt8]
        /// Whether the child wrote more than `captureLimit` to each (the
        /// rest was read and dropped).
        package var stdoutCut: Bool
        package var stderrCut: Bool
        /// The child's CPU time, user and system, in ns (wait4's rusage: the
        /// child itself, not what it left running); nil when the kernel
        /// reaped it.
        package var userCPU: Int64?
        package var systemCPU: Int64?
        /// The child's peak resident memory in bytes: the highest VmHWM
        /// /proc showed while it ran, read whenever it wrote and every
        /// 100 ms (not at its start, which can be before its loader ran). Not wait4's maxrss, which counts the image the
        /// child was started from, vigil's own pages (Linux keeps the
        /// high-water mark of the memory an exec replaced), unless that is
        /// above vigil's own, when it is the child's and exact. nil when the
        /// child ended before it could be read (a run of a millisecond).
        package var peakMemory: Int64?
        /// From the start of `supervise` to the child's exit, in ns.
        package var duration: Int64
    }

    /// Runs the child to its end on the calling thread, which it keeps:
    ///
    /// - writes `input` to the child's stdin (non-blocking, so a child that
    ///   never reads delays nothing but its own run), then closes it;
    /// - keeps the first `captureLimit` bytes of stdout and stderr and
    ///   discards the rest, so a chatty child never stalls on a full pipe;
    /// - waits for the child through a pidfd (`pidfd_open`, Linux 5.3), or
    ///   where there is none by checking `waitid(WNOHANG)` every 10 ms, and
    ///   never with `waitpid(-1)` or a SIGCHLD handler: the host has other
    ///   children;
    /// - past `timeout` ns (0: none), or as soon as `cancel` (a descriptor,
    ///   -1: none) is readable, sends SIGTERM to the child's process group,
    ///   and SIGKILL `killGrace` later;
    /// - once the child has exited, calls `exited` (the child is a zombie
    ///   until it is reaped: its pid, and so its group's id, is not reused,
    ///   and signalling it is still safe), ends what is left of its group
    ///   (SIGKILL) if it timed out or `endGroup` asks, then reaps it: a
    ///   grandchild that ignored SIGTERM or held its stdout open is gone too.
    ///
    /// SIGPIPE: the host ignores it (`Runtime.run`), but this does not rely
    /// on that: it blocks SIGPIPE on the calling thread, so a child that
    /// exits without reading its stdin costs an EPIPE, never the host.
    package func supervise(input stdin: [UInt8], timeout: Int64, killGrace: Int64, captureLimit: Int,
                           endGroup: Bool = false, cancel: Int32 = -1, exited: () -> Void = {}) -> Ending {
        Self.blockSIGPIPE()
        let began = Self.now()
        var input = stdin[...]
        var stdinFD = self.stdin
        if input.isEmpty { close(stdinFD); stdinFD = -1 }
        var outputs = [Capture(fd: stdout, limit: captureLimit), Capture(fd: stderr, limit: captureLimit)]
        let pidfd = Self.pidfdOpen(pid)
        defer { if pidfd >= 0 { close(pidfd) } }

        let (deadline, overflow) = Self.now().addingReportingOverflow(timeout)
        var termAt = timeout > 0 && !overflow ? deadline : Int64.max
        var killAt = Int64.max
        var timedOut = false
        var cancelled = false
        // Opened once and read again at each sample: /proc's path lookup
        // is most of what a read of it costs.
        let status = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
        defer { if status >= 0 { close(status) } }
        // Not read now, nor on a timer in its first milliseconds: the child
        // may not have run its loader yet (a mark of 4 KiB, even 10 ms in
        // on a loaded machine), and a check that ends within milliseconds
        // would report that as its peak. Read when it writes (it runs its
        // own code then) and every 100 ms, or none is reported.
        var peak: Int64?
        // vigil's own mark as the child's exec left it (see below).
        let ownAtStart = Self.ownHighWater()

        while true {
            var fds: [pollfd] = []
            if pidfd >= 0 { fds.append(pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)) }
            let watchesCancel = cancel >= 0 && !cancelled && !timedOut
            if watchesCancel { fds.append(pollfd(fd: cancel, events: Int16(POLLIN), revents: 0)) }
            if stdinFD >= 0 { fds.append(pollfd(fd: stdinFD, events: Int16(POLLOUT), revents: 0)) }
            for output in outputs where output.fd >= 0 { fds.append(pollfd(fd: output.fd, events: Int16(POLLIN), revents: 0)) }
            var wait = min(termAt, killAt) == .max ? Int64.max : min(termAt, killAt) - Self.now()
            wait = min(wait, pidfd < 0 ? 10_000_000 : 100_000_000)
            let ms: Int32 = wait == .max ? -1 : Int32(clamping: max(0, wait / 1_000_000 + (wait % 1_000_000 == 0 ? 0 : 1)))
            let ready = poll(&fds, nfds_t(fds.count), ms)
            if ready < 0 && errno != EINTR { usleep(10_000) }

            if stdinFD >= 0, Self.writeSome(stdinFD, &input) {
                close(stdinFD)
                stdinFD = -1
            }
            for i in outputs.indices { outputs[i].readAvailable() }
            if let now = Self.highWater(status) { peak = max(peak ?? 0, now) }
            if Self.hasExited(pid) { break }

            if watchesCancel, fds.contains(where: { $0.fd == cancel && $0.revents != 0 }) {
                cancelled = true
                termAt = min(termAt, Self.now())
            }
            let after = Self.now()
            if after >= termAt {
                if !cancelled { timedOut = true }
                termAt = .max
                killAt = after + killGrace
                kill(-pid, SIGTERM)
            } else if after >= killAt {
                killAt = .max
                kill(-pid, SIGKILL)
            }
        }

        let duration = Self.now() - began
        exited()
        if timedOut || cancelled || endGroup { kill(-pid, SIGKILL) }
        if stdinFD >= 0 { close(stdinFD) }
        for i in outputs.indices { outputs[i].finish() }
        var raw: Int32 = 0
        var usage = rusage()
        var reaped: pid_t
        repeat { reaped = wait4(pid, &raw, 0, &usage) } while reaped < 0 && errno == EINTR
        let known = reaped == pid
        // wait4's maxrss is the larger of the child's own peak and the image
        // it was started from: vigil's resident memory when the child's exec
        // replaced it. Past that it is the child's own, and exact. vigil's
        // VmHWM is no sure bound for it read later: the kernel updates the
        // mark lazily, so it can read lower once vigil's memory has shrunk
        // (a check's peak was read as 39 MB, vigil's at its start, in the
        // suite). So the mark is read at the start and at the end, and
        // maxrss counts only 2 MiB above both.
        let ownMark = max(ownAtStart ?? .max, Self.ownHighWater() ?? .max)
        if known, case let (maxrss, overflow) = Int64(usage.ru_maxrss).multipliedReportingOverflow(by: 1024), !overflow,
           ownMark < .max - Self.imageSlack, maxrss > ownMark + Self.imageSlack {
            peak = max(peak ?? 0, maxrss)
        }
        func ns(_ t: timeval) -> Int64 { Int64(t.tv_sec) * 1_000_000_000 + Int64(t.tv_usec) * 1_000 }
        return Ending(status: known ? raw : nil, timedOut: timedOut, cancelled: cancelled, stdout: outputs[0].bytes, stderr: outputs[1].bytes,
                      stdoutCut: outputs[0].cut, stderrCut: outputs[1].cut,
                      userCPU: known ? ns(usage.ru_utime) : nil, systemCPU: known ? ns(usage.ru_stime) : nil,
                      peakMemory: peak,
                      duration: duration)
    }

    /// How far above vigil's own mark wait4's maxrss must be to be the child's.
    static let imageSlack: Int64 = 2 << 20

    /// vigil's own VmHWM.
    static func ownHighWater() -> Int64? {
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return highWater(fd)
    }

    /// VmHWM in bytes from `fd`, an open /proc/PID/status (read from its
    /// start): the peak resident memory of what the process runs now; nil
    /// once it has ended (a zombie has no memory) or when `fd` is -1.
    static func highWater(_ fd: Int32) -> Int64? {
        guard fd >= 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var length = 0
        while length < buffer.count {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + length, $0.count - length, off_t(length)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            length += n
        }
        let key = Array("VmHWM:".utf8)
        var i = 0
        while i + key.count <= length {
            if buffer[i..<(i + key.count)].elementsEqual(key) {
                var kb: Int64 = 0
                var j = i + key.count
                while j < length, buffer[j] == 0x20 || buffer[j] == 0x09 { j += 1 }
                while j < length, buffer[j] >= 0x30 && buffer[j] <= 0x39 {
                    kb = kb.multipliedReportingOverflow(by: 10).partialValue &+ Int64(buffer[j] - 0x30)
                    j += 1
                }
                return kb.multipliedReportingOverflow(by: 1024).overflow ? Int64.max : kb * 1024
            }
            while i < length && buffer[i] != 0x0a { i += 1 }
            i += 1
        }
        return nil
    }

    /// CLOCK_MONOTONIC in ns.
    private static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    /// Whether `pid` has exited, without reaping it.
    private static func hasExited(_ pid: pid_t) -> Bool {
        var info = siginfo_t()
        let r = waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT)
        // ECHILD would mean it was reaped elsewhere; nothing is left to wait for.
        if r < 0 { return errno == ECHILD }
        return info._sifields._sigchld.si_pid == pid
    }

    /// Writes what the pipe takes now. True when there is nothing left to
    /// write or the child closed its end (EPIPE).
    private static func writeSome(_ fd: Int32, _ input: inout ArraySlice<UInt8>) -> Bool {
        while !input.isEmpty {
            let n = input.withUnsafeBytes { write(fd, $0.baseAddress!, $0.count) }
            if n > 0 { input = input.dropFirst(n); continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return false }
            consumePendingSIGPIPE()
            return true
        }
        return true
    }

    /// Blocks SIGPIPE on the calling thread, so a write to a pipe whose
    /// reader is gone fails with EPIPE instead of raising the signal.
    private static func blockSIGPIPE() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &set, nil)
    }

    /// Takes the SIGPIPE an EPIPE left pending on this thread (it is blocked
    /// here), so it is never delivered later.
    private static func consumePendingSIGPIPE() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGPIPE)
        var zero = timespec(tv_sec: 0, tv_nsec: 0)
        while sigtimedwait(&set, nil, &zero) < 0 && errno == EINTR {}
    }

    /// pidfd_open(2); -1 where the kernel has none (a pidfd is always close-on-exec).
    private static func pidfdOpen(_ pid: pid_t) -> Int32 { vigil_pidfd_open(pid) }
}

/// The first `limit` bytes of one of a child's outputs.
private struct Capture {
    var fd: Int32
    let limit: Int
    var bytes: [UInt8] = []
    /// More than `limit` came.
    var cut = false

    /// Reads what is there without blocking; closes the pipe at end of file.
    mutating func readAvailable() {
        guard fd >= 0 else { return }
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n > 0 {
                let room = limit - bytes.count
                if room > 0 { bytes.append(contentsOf: buffer[0..<min(n, room)]) }
                if n > room { cut = true }
                continue
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            close(fd)
            fd = -1
            return
        }
    }

    /// After the child exited: keeps what it left in the pipe and closes it,
    /// even if something the child started still holds the other end.
    mutating func finish() {
        readAvailable()
        if fd >= 0 { close(fd); fd = -1 }
    }
}
