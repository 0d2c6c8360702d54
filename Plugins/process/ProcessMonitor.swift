import Glibc
import LinuxProbes
import Synchronization
import VigilKit

/// One process, named or found through a pidfile: when it starts, exits and
/// restarts, and its CPU and memory each poll, from `<procfs>/PID/*`.
/// XestiMonitors' ApplicationStateMonitor (and PortMonitor's "is it up") on
/// Linux.
///
/// Polled: each poll scans `<procfs>` for the matching processes (or reads
/// the pidfile), reports the ones that appeared or went away, and samples
/// the watched ones. Where `procfs` is the real `/proc`, each watched process
/// also gets a pidfd (`pidfd_open`, syscall 434) that a worker polls, so an
/// exit is reported at once rather than at the next poll; on a fixture tree,
/// or where `pidfd_open` fails (ENOSYS on kernels before 5.3, EPERM under
/// some seccomp policies), exits are seen by the polls alone. A log line on
/// every start says which.
///
/// The exit status is known only while the process is a zombie (exited, not
/// yet reaped by its parent): `stat`'s field 52 then holds it in the form
/// waitpid(2) gives, for processes the host may read (ptrace read access:
/// the same user, or CAP_SYS_PTRACE). A pidfd of a process that is not the
/// host's child tells that it exited, not how, so the monitor reads `stat` as
/// soon as the pidfd fires, which usually comes before the parent reaps it;
/// when the parent was faster (or the poll only saw the process gone), the
/// exited event has neither `exit_code` nor `signal`.
final class ProcessMonitor: PolledMonitor, @unchecked Sendable {  // shared state is behind `shared`
    static let spec = PluginSpec(
        name: "process", version: "1.0.0",
        summary: "A named process or a pidfile's: started, exited (at once via pidfd on /proc), restarted, and its CPU and RSS each poll",
        defaultInterval: .seconds(5),
        events: [
            .occurrence("started", doc: """
                A watched process is there: on start, one per process already running (existing: true), the \
                snapshot; then one per process that appears, or that becomes the watched one.
                """, fields: [
                FieldDecl("pid", .int, doc: "the process ID"),
                FieldDecl("command", .string, doc: "its command line (cmdline, arguments joined by spaces), or [comm] when empty"),
                FieldDecl("existing", .bool, doc: "true when it was already running when the monitor started (the snapshot)"),
            ]),
            .occurrence("exited", doc: """
                A watched process went away (or became a zombie). Severity warning when it exited with a non-zero \
                code or was killed by a signal. exit_code and signal are only there when the status could be read: \
                while the process was a zombie (see the plugin's documentation); a pidfd of a non-child says that it \
                exited, not how.
                """, fields: [
                FieldDecl("pid", .int, doc: "the process ID"),
                FieldDecl("command", .string, doc: "its command line, as reported when it started"),
                FieldDecl("exit_code", .int, doc: "the status it passed to exit(), 0 to 255, when known and it exited normally"),
                FieldDecl("signal", .int, doc: "the signal that ended it, when known and it was killed"),
                FieldDecl("detected", .string, doc: "how the exit was seen: pidfd (at once) or poll (at the next poll)"),
            ]),
            .occurrence("restarted", doc: """
                A matching process that was not there at the previous poll appeared while a watched one had exited \
                since then: the new one replaces the old. Comes after the old one's exited and the new one's started.
                """, fields: [
                FieldDecl("old_pid", .int, doc: "the process that exited"),
                FieldDecl("new_pid", .int, doc: "the process that replaced it"),
                FieldDecl("command", .string, doc: "the new process's command line"),
            ]),
            .occurrence("not_running", doc: """
                No process matches: on start when none does (the snapshot), then once each time the last watched \
                process is gone. Not an error.
                """, fields: [
                FieldDecl("target", .string, doc: "what is watched: name NAME or pidfile PATH"),
                FieldDecl("reason", .string, doc: "why nothing matches (no process of that name; the pidfile is missing, malformed, or names a process that is gone)"),
            ]),
            EventDecl("usage", doc: """
                Each poll, one per watched process: CPU over the interval since the previous poll and resident \
                memory now.
                """, fields: [
                FieldDecl("pid", .int, doc: "the process ID", identity: true),
                FieldDecl("cpu", .double, unit: "percent",
                          doc: "CPU time (utime + stime, from stat) since the previous poll over the time between the polls, in % of one core (may exceed 100 for several threads); absent on a process's first sample"),
                FieldDecl("cpu_time", .double, unit: "seconds", doc: "CPU time used since it started: (utime + stime) / clock ticks per second", counter: true),
                FieldDecl("rss", .int, unit: "bytes", doc: "resident memory: VmRSS from status, else statm's resident pages × page size"),
                FieldDecl("threads", .int, unit: "threads", doc: "its threads (stat's num_threads)"),
            ], policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var name: String?
        var pidfile: String?
        var all = false
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests; pidfd only where it is /proc)."),
            // `plugins check` is given this name, which need not be running: the
            // check sees the monitor say so, which is what it is there to see.
            .optional("name", \.name, example: "sshd",
                      doc: "Watch processes whose comm is this, or whose command line's first word has this basename (name or pidfile is required)."),
            .optional("pidfile", \.pidfile,
                      doc: "Watch the process whose PID this file holds (re-read every poll); with name, that process must also match it."),
            .option("all", \.all, doc: "Watch every matching process rather than only the oldest (ignored with a pidfile)."))
    }

    /// A process as one scan read it.
    struct Sample {
        var id: Identity
        var command: String
        var ticks: UInt64
        var threads: Int64
        var rss: Int64?
    }

    /// A PID and its start time (stat field 22), which tells a process from a
    /// later one that reused its PID.
    struct Identity: Equatable {
        var pid: Int32
        var start: UInt64
    }

    /// A process being watched.
    struct Watched {
        var id: Identity
        var command: String
        var pidfd: Int32 = -1
        var ticks: UInt64
        var time: Int64
    }

    /// What the poll and the pidfd worker share.
    struct Shared {
        var watched: [Watched] = []
        /// Exits reported since the previous poll, oldest first, for restarts.
        var exitedSincePoll: [Identity] = []
        /// Exits the worker reported that the poll may still have seen alive.
        var gone: [Identity] = []
        /// Pidfds of processes the poll stopped watching; the worker closes them.
        var retired: [Int32] = []
    }

    private let context: MonitorContext
    private let root: FSRoot
    private let name: String?
    private let pidfile: String?
    private let all: Bool
    private let target: String
    private let ticksPerSecond: Double
    private let pageSize: Int64
    private let shared = Mutex(Shared())

    // Touched only by the lifecycle calls (the instance's serial context).
    private var usePidfd = false
    private var wake: (read: Int32, write: Int32) = (-1, -1)
    private var firstPoll = true
    private var wasRunning = false
    private var seenLastPoll: [Identity] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.procfs.isEmpty else { throw .invalidOption("procfs", "must not be empty") }
        let name = options.name.flatMap { $0.isEmpty ? nil : $0 }
        let pidfile = options.pidfile.flatMap { $0.isEmpty ? nil : $0 }
        guard name != nil || pidfile != nil else {
            throw .invalidOption("name", "give name or pidfile: one of the two is required")
        }
        if let name, name.contains("/") {
            throw .invalidOption("name", "a process name, not a path (\"\(name)\"); its basename is matched")
        }
        if let pidfile, !pidfile.hasPrefix("/") {
            throw .invalidOption("pidfile", "\"\(pidfile)\" is not an absolute path")
        }
        self.context = context
        self.root = FSRoot(options.procfs)
        self.name = name
        self.pidfile = pidfile
        self.all = options.all && pidfile == nil
        self.target = pidfile.map { "pidfile \($0)" } ?? "name \(name!)"
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        self.ticksPerSecond = ticks > 0 ? Double(ticks) : 100
        let page = sysconf(Int32(_SC_PAGESIZE))
        self.pageSize = page > 0 ? Int64(page) : 4096
    }

    deinit {
        // The worker (which closes the pidfds and the wake pipe) has been
        // joined by now; this is what a start that never spawned it left.
        closeLeftovers()
    }

    func start() throws(MonitorError) {
        closeLeftovers()
        shared.withLock { $0 = Shared() }
        firstPoll = true
        wasRunning = false
        seenLastPoll = []
        guard FSRoot.isDirectory(root.root) else { throw .unavailable("\(root.root) does not exist or is not a directory") }

        usePidfd = false
        if let why = pidfdUnusable() {
            context.log(.info, "watching \(target): exits are seen at each poll of \(root.root) (no pidfd: \(why))")
            return
        }
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            context.log(.info, "watching \(target): exits are seen at each poll of \(root.root) (no pidfd: pipe: \(Self.errorText(errno)))")
            return
        }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        wake = (fds[0], fds[1])
        let wakeRead = fds[0]
        let worker = context.spawn("pidfd") { [self] token in watchPidfds(token, wakeRead) }
        guard worker != nil else {
            closeLeftovers()
            throw .temporary("could not start the pidfd worker")
        }
        usePidfd = true
        context.log(.info, "watching \(target): exits are reported at once through pidfd")
    }

    func stop() {
        // The SDK joins the pidfd worker after this returns; the worker closes
        // the pidfds and the wake pipe on its way out.
    }

    /// Why pidfds cannot be used here, or nil when they can.
    private func pidfdUnusable() -> String? {
        guard let real = realpath(root.root, nil) else { return "cannot resolve \(root.root)" }
        defer { free(real) }
        guard String(cString: real) == "/proc" else { return "\(root.root) is not the real /proc (a fixture tree)" }
        let fd = Self.pidfdOpen(getpid())
        guard fd >= 0 else { return "pidfd_open failed: \(Self.errorText(errno))" }
        close(fd)
        return nil
    }

    private func closeLeftovers() {
        if wake.read >= 0 { close(wake.read) }
        if wake.write >= 0 { close(wake.write) }
        wake = (-1, -1)
        let fds = shared.withLock { s -> [Int32] in
            let fds = s.watched.map(\.pidfd).filter { $0 >= 0 } + s.retired
            for i in s.watched.indices { s.watched[i].pidfd = -1 }
            s.retired = []
            return fds
        }
        for fd in fds { close(fd) }
    }

    // MARK: polling

    func poll() throws(MonitorError) {
        guard FSRoot.isDirectory(root.root) else { throw .unavailable("\(root.root) does not exist or is not a directory") }
        let now = context.now()
        let (matches, reason) = findMatches()
        var chosen = matches
        if !all, let oldest = matches.min(by: { ($0.id.start, $0.id.pid) < ($1.id.start, $1.id.pid) }) { chosen = [oldest] }

        // Reconcile with what is watched, under the lock the worker shares.
        var exits: [Watched] = []
        var starts: [Sample] = []
        var restarts: [(old: Identity, new: Sample)] = []
        var usage: [(Sample, cpu: Double?)] = []
        let seenBefore = seenLastPoll
        let first = firstPoll
        shared.withLock { s in
            chosen.removeAll { sample in s.gone.contains(sample.id) }
            s.gone.removeAll { id in !matches.contains { $0.id == id } }
            for w in s.watched where !chosen.contains(where: { $0.id == w.id }) {
                if processAlive(w.id) {
                    // Still running, but no longer the one watched (a pidfile now
                    // names another): stop watching it, without an exit.
                    context.log(.debug, "no longer watching pid \(w.id.pid): \(target) names another process")
                } else {
                    exits.append(w)
                    s.exitedSincePoll.append(w.id)
                }
                if w.pidfd >= 0 { s.retired.append(w.pidfd) }
            }
            s.watched.removeAll { w in !chosen.contains { $0.id == w.id } }
            for sample in chosen {
                if let i = s.watched.firstIndex(where: { $0.id == sample.id }) {
                    let seconds = Double(now - s.watched[i].time) / 1e9
                    let cpu = seconds > 0
                        ? 100 * Double(sample.ticks &- s.watched[i].ticks) / (ticksPerSecond * seconds) : nil
                    usage.append((sample, sample.ticks >= s.watched[i].ticks ? cpu : nil))
                    s.watched[i].ticks = sample.ticks
                    s.watched[i].time = now
                } else {
                    starts.append(sample)
                    usage.append((sample, nil))
                    s.watched.append(Watched(id: sample.id, command: sample.command, ticks: sample.ticks, time: now))
                    if !first, !seenBefore.contains(sample.id), !s.exitedSincePoll.isEmpty {
                        restarts.append((s.exitedSincePoll.removeFirst(), sample))
                    }
                }
            }
            s.exitedSincePoll = []
        }
        seenLastPoll = matches.map(\.id)

        for w in exits { reportExit(pid: w.id.pid, start: w.id.start, command: w.command, detected: "poll") }
        for sample in starts {
            context.emit("started", ["pid": .int(Int64(sample.id.pid)), "command": .string(sample.command),
                                     "existing": .bool(first)])
        }
        for (old, new) in restarts {
            context.emit("restarted", ["old_pid": .int(Int64(old.pid)), "new_pid": .int(Int64(new.id.pid)),
                                       "command": .string(new.command)])
        }
        if chosen.isEmpty {
            if first || wasRunning {
                context.emit("not_running", ["target": .string(target), "reason": .string(reason)])
            }
        }
        wasRunning = !chosen.isEmpty
        firstPoll = false
        for (sample, cpu) in usage {
            var fields: [(String, Value)] = [("pid", .int(Int64(sample.id.pid)))]
            if let cpu { fields.append(("cpu", .double(cpu))) }
            fields.append(("cpu_time", .double(Double(sample.ticks) / ticksPerSecond)))
            if let rss = sample.rss { fields.append(("rss", .int(rss))) }
            fields.append(("threads", .int(sample.threads)))
            context.emit("usage", fields: fields)
        }
        if usePidfd { openPidfds() }
    }

    /// The matching processes that are running (zombies excluded), and why
    /// there are none when so.
    private func findMatches() -> ([Sample], String) {
        if let pidfile {
            guard let text = try? FSRoot("/").readText(pidfile) else { return ([], "\(pidfile) cannot be read") }
            let word = text.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" }).first
            guard let word, let pid = Int32(word), pid > 0 else { return ([], "\(pidfile) does not hold a PID") }
            guard let sample = read(pid: pid), name.map({ matchesName(pid, $0) }) ?? true else {
                return ([], name == nil ? "pid \(pid) from \(pidfile) is not running"
                                        : "pid \(pid) from \(pidfile) is not running, or is not \(name!)")
            }
            return ([sample], "")
        }
        let name = self.name!
        var found: [Sample] = []
        for pid in pids() where matchesName(pid, name) {
            if let sample = read(pid: pid) { found.append(sample) }
        }
        return (found, "no process named \(name)")
    }

    /// The numeric entries of the procfs root.
    private func pids() -> [Int32] {
        guard let dir = opendir(root.root) else { return [] }
        defer { closedir(dir) }
        var pids: [Int32] = []
        while let entry = readdir(dir) {
            let pid = withUnsafeBytes(of: entry.pointee.d_name) { raw -> Int32? in
                let bytes = raw.prefix { $0 != 0 }
                guard !bytes.isEmpty, bytes.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
                return Int32(String(decoding: bytes, as: UTF8.self))
            }
            if let pid { pids.append(pid) }
        }
        return pids.sorted()
    }

    /// comm is `name`, or the first word of cmdline has `name` as its basename.
    private func matchesName(_ pid: Int32, _ name: String) -> Bool {
        if let comm = try? root.readText("\(pid)/comm"), Self.trimmed(comm) == name { return true }
        guard let cmdline = try? root.readBytes("\(pid)/cmdline") else { return false }
        let argv0 = cmdline.prefix { $0 != 0 }
        let word = String(decoding: argv0, as: UTF8.self).split(separator: " ", omittingEmptySubsequences: false).first ?? ""
        return Self.basename(String(word)) == name
    }

    /// A running process's figures; nil when it is gone, a zombie, or unreadable.
    private func read(pid: Int32) -> Sample? {
        guard let stat = try? root.readText("\(pid)/stat"), let s = Stat(stat), !s.isDead else { return nil }
        var command = ""
        if let cmdline = try? root.readBytes("\(pid)/cmdline") {
            var args = cmdline.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            while args.last == "" { args.removeLast() }
            command = args.joined(separator: " ")
        }
        if command.isEmpty {
            let comm = (try? root.readText("\(pid)/comm")).map(Self.trimmed) ?? s.comm
            command = "[\(comm)]"
        }
        return Sample(id: Identity(pid: pid, start: s.startTime), command: command, ticks: s.utime &+ s.stime,
                      threads: s.threads, rss: rss(pid))
    }

    /// VmRSS from status (kB), else statm's resident pages; nil when neither reads.
    private func rss(_ pid: Int32) -> Int64? {
        if let status = try? root.readText("\(pid)/status") {
            for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
                let parts = line.dropFirst(6).split(separator: " ", omittingEmptySubsequences: true)
                    .flatMap { $0.split(separator: "\t") }
                if let kb = parts.first.flatMap({ Int64($0) }) { return Saturating.product(kb, 1024) }
            }
        }
        if let statm = try? root.readText("\(pid)/statm") {
            let parts = statm.split(separator: " ")
            if parts.count >= 2, let pages = Int64(Self.trimmed(String(parts[1]))) { return Saturating.product(pages, pageSize) }
        }
        return nil
    }

    private func processAlive(_ id: Identity) -> Bool {
        guard let text = try? root.readText("\(id.pid)/stat"), let s = Stat(text) else { return false }
        return s.startTime == id.start && !s.isDead
    }

    /// Emits `exited`, with the status when the process is still a zombie we may read.
    private func reportExit(pid: Int32, start: UInt64, command: String, detected: String) {
        var fields: [(String, Value)] = [("pid", .int(Int64(pid))), ("command", .string(command))]
        var severity = Severity.info
        if let text = try? root.readText("\(pid)/stat"), let s = Stat(text), s.startTime == start, s.isDead,
           let status = s.exitCode {
            if status & 0x7f == 0 {
                let code = (status >> 8) & 0xff
                fields.append(("exit_code", .int(code)))
                if code != 0 { severity = .warning }
            } else {
                fields.append(("signal", .int(status & 0x7f)))
                severity = .warning
            }
        }
        fields.append(("detected", .string(detected)))
        context.emit("exited", severity: severity, fields: fields)
    }

    // MARK: pidfd

    /// Opens a pidfd for each watched process that has none, and wakes the
    /// worker to add them.
    private func openPidfds() {
        let missing = shared.withLock { $0.watched.filter { $0.pidfd < 0 }.map(\.id) }
        guard !missing.isEmpty else { return }
        var opened: [(Identity, Int32)] = []
        for id in missing {
            let fd = Self.pidfdOpen(id.pid)
            guard fd >= 0 else {
                context.log(.debug, "pidfd_open(\(id.pid)) failed: \(Self.errorText(errno)); its exit is seen at the next poll")
                continue
            }
            // The PID may have been reused between the scan and the open.
            guard processAlive(id) else {
                close(fd)
                continue
            }
            opened.append((id, fd))
        }
        let unused = shared.withLock { s -> [Int32] in
            var unused: [Int32] = []
            for (id, fd) in opened {
                if let i = s.watched.firstIndex(where: { $0.id == id }), s.watched[i].pidfd < 0 {
                    s.watched[i].pidfd = fd
                } else {
                    unused.append(fd)
                }
            }
            return unused
        }
        for fd in unused { close(fd) }
        var one: UInt8 = 1
        _ = Glibc.write(wake.write, &one, 1)
    }

    /// The worker: waits on every watched process's pidfd and reports each
    /// exit as it happens. Closes the pidfds and the wake pipe when cancelled.
    private func watchPidfds(_ token: Worker.Token, _ wakeRead: Int32) {
        while !token.isCancelled {
            let fds = shared.withLock { s -> [Int32] in
                for fd in s.retired { close(fd) }
                s.retired = []
                return s.watched.map(\.pidfd).filter { $0 >= 0 }
            }
            var polled = [pollfd(fd: token.cancelFD, events: Int16(POLLIN), revents: 0),
                          pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
            polled += fds.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let n = Glibc.poll(&polled, nfds_t(polled.count), -1)
            if n < 0 {
                if errno == EINTR { continue }
                context.log(.warning, "poll on pidfds failed: \(Self.errorText(errno)); exits are seen at each poll")
                break
            }
            if polled[0].revents != 0 || token.isCancelled { break }
            if polled[1].revents != 0 {
                var buffer = [UInt8](repeating: 0, count: 64)
                while Glibc.read(wakeRead, &buffer, buffer.count) > 0 {}
            }
            for p in polled.dropFirst(2) where p.revents != 0 { pidfdReady(p.fd) }
        }
        // Cancelled: nothing polls the descriptors any more.
        let leftovers = shared.withLock { s -> [Int32] in
            let fds = s.watched.map(\.pidfd).filter { $0 >= 0 } + s.retired
            for i in s.watched.indices { s.watched[i].pidfd = -1 }
            s.retired = []
            return fds
        }
        for fd in leftovers { close(fd) }
    }

    private func pidfdReady(_ fd: Int32) {
        let exited = shared.withLock { s -> Watched? in
            guard let i = s.watched.firstIndex(where: { $0.pidfd == fd }) else { return nil }
            let w = s.watched.remove(at: i)
            s.exitedSincePoll.append(w.id)
            s.gone.append(w.id)
            return w
        }
        guard let exited else { return }
        // Read the status before closing: the process is a zombie until reaped.
        reportExit(pid: exited.id.pid, start: exited.id.start, command: exited.command, detected: "pidfd")
        close(fd)
    }

    /// pidfd_open(2), through syscall(2): Glibc before 2.36 has no wrapper,
    /// and Swift cannot call the variadic syscall() directly. -1 and errno
    /// on failure.
    static func pidfdOpen(_ pid: Int32) -> Int32 {
        guard let call = syscallFunction else {
            errno = ENOSYS
            return -1
        }
        return Int32(truncatingIfNeeded: call(434, Int(pid), 0))  // SYS_pidfd_open on every architecture
    }

    /// syscall(2) with three integer arguments. Calling the variadic function
    /// through a fixed prototype is sound where integer arguments travel in
    /// the same registers either way (the x86-64 and AArch64 Linux ABIs).
    private typealias SyscallFunction = @convention(c) (Int, Int, Int) -> Int
    private static let syscallFunction: SyscallFunction? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "syscall") else { return nil }  // RTLD_DEFAULT
        return unsafeBitCast(symbol, to: SyscallFunction.self)
    }()

    // MARK: text

    static func trimmed(_ text: String) -> String { FSRoot.trimmed(text) }

    static func basename(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }

    static func errorText(_ code: Int32) -> String { String(cString: strerror(code)) }
}

/// The fields of `/proc/PID/stat` this monitor uses.
struct Stat {
    var comm: String
    var state: Character
    var utime: UInt64
    var stime: UInt64
    var threads: Int64
    var startTime: UInt64
    /// Field 52 (Linux 3.5+), in waitpid(2) form; 0 unless the reader may ptrace-read the process.
    var exitCode: Int64?

    /// Exited: a zombie (Z) or dead (X, x).
    var isDead: Bool { state == "Z" || state == "X" || state == "x" }

    /// Parses `pid (comm) state ppid …`; comm may hold spaces and parentheses,
    /// so the fields start after the last ')'.
    init?(_ text: String) {
        guard let open = text.firstIndex(of: "("), let close = text.lastIndex(of: ")") , open < close else { return nil }
        comm = String(text[text.index(after: open)..<close])
        let rest = text[text.index(after: close)...].split(whereSeparator: { $0 == " " || $0 == "\n" })
        // rest[0] is field 3 (state): field N is rest[N - 3].
        guard rest.count >= 20, let state = rest[0].first,
              let utime = UInt64(rest[11]), let stime = UInt64(rest[12]),
              let threads = Int64(rest[17]), let start = UInt64(rest[19]) else { return nil }
        self.state = state
        self.utime = utime
        self.stime = stime
        self.threads = threads
        self.startTime = start
        self.exitCode = rest.count >= 50 ? Int64(rest[49]) : nil
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(ProcessMonitor.self, a, r) }
