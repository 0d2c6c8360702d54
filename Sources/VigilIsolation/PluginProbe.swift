@preconcurrency import CVigilPlugin
import CVigilSys
import VigilABI
import Foundation
import Glibc
import Synchronization
import VigilCore

/// A trial of a plugin file in a child process (`ChildProcess`): the child
/// loads it as the host would (the file checks, dlopen and its constructors,
/// the entry point, the self-description) and, when asked, creates and
/// destroys instances of it with a manifest's options, and reports each step
/// on its pipe. A crash or a hang costs the child, never this process: the
/// parent enforces a deadline on each call and names the signal or the
/// deadline, and the call. The parent takes the description the child sends
/// as untrusted input: held to the same checks as a description read
/// in-process, else the plugin is refused. Used by `vigil plugins list`,
/// `describe` and `vigil validate` for every plugin, which they then never
/// load themselves, and by `vigil run` for plugins from untrusted directories
/// before it loads them itself.
///
/// The child → parent stream, one line a step, fields as in
/// `ConformanceProtocol` (tab-separated, escaped):
///
///     begin   CALL  SUBJECT                   a call is about to be made (load -, create MONITOR)
///     end     CALL  SUBJECT  NS  [STATUS  MESSAGE]   …and returned after NS nanoseconds
///     description JSON                        the plugin loaded and described itself, in full
///                                             (`PluginDescription.json()`; never cut, at most
///                                             `ChildProcess.maxLineBytes`)
///     refused KIND  REASON                    the loader refused it (KIND: noentry, refused)
///     skip    MONITOR  REASON                 a monitor that was not created (options do not bind)
///     timing  LOAD_NS  CREATE_NS|-  VETTING_NS  DLOPEN_NS  ENTRY_NS  READING_NS
///                                             with --timing: load, and create with default
///                                             options; the load's steps (`LoadPhases`)
///     done
public struct PluginProber: Sendable {
    /// The create that `--timing` measures, with default options.
    package static let timingInstance = "(timing)"

    /// This executable's arguments that reach `PluginProbe.runChild` (the
    /// hidden command), before the probe's own options.
    public var command: [String]
    /// Passed on to the child: skip the owner and permission rules there too.
    public var allowUnsafe: Bool
    /// Deadline of the load: dlopen with the constructors it runs, the entry point.
    public var loadTimeout: Int64

    public init(command: [String], allowUnsafe: Bool, loadTimeout: Int64 = 5_000_000_000) {
        self.command = command
        self.allowUnsafe = allowUnsafe
        self.loadTimeout = loadTimeout
    }

    /// One monitor to create in the child: its name in `manifest`, and the
    /// deadline of its create.
    public struct Create: Sendable {
        public var monitor: String
        public var timeout: Int64
        public init(monitor: String, timeout: Int64) {
            self.monitor = monitor
            self.timeout = timeout
        }
    }

    /// Probes `path`: loads it in a child and creates `creates` there (their
    /// options read from `manifest`). A create that crashes or hangs ends
    /// that child; the monitors after it are tried in a new one.
    public func probe(path: String, manifest: String? = nil, creates: [Create] = [], timing: Bool = false) -> ProbeReport {
        var report = ProbeReport()
        var remaining = creates
        repeat {
            var args = command + ["--child-fd", "\(ChildProcess.childFD)"]
            if allowUnsafe { args.append("--allow-unsafe-plugins") }
            if timing { args.append("--timing") }
            // The monitors to create go on the child's stdin (a memfd of
            // NUL-separated names), not in its arguments: 100,000 of them
            // passed ARG_MAX.
            var input: Int32?
            if let manifest, !remaining.isEmpty {
                args += ["--manifest=\(manifest)", "--creates-on-stdin"]
                do {
                    input = try Self.namesFile(remaining.map(\.monitor))
                } catch {
                    report.load = .failed("cannot start the probe process: \(error)")
                    return report
                }
            }
            args += ["--", path]
            let child: ChildProcess
            do {
                child = try ChildProcess.spawn(arguments: args, input: input)
                if let input { close(input) }
            } catch {
                if let input { close(input) }
                report.load = .failed("cannot start the probe process: \(error)")
                return report
            }
            var session = ProbeSession(path: path, loadTimeout: loadTimeout, creates: remaining)
            session.follow(child, into: &report)
            // Loaded but a create ended the child: go on after that monitor.
            guard case .loaded = report.load, let stopped = session.failedCreate,
                  let index = remaining.firstIndex(where: { $0.monitor == stopped }) else { break }
            remaining.removeSubrange(...index)
        } while !remaining.isEmpty
        return report
    }
}

extension PluginProber {
    package struct InputFailure: Error, CustomStringConvertible {
        package var description: String
    }

    /// A memfd holding `names`, each ended by a NUL, read from its start.
    static func namesFile(_ names: [String]) throws(InputFailure) -> Int32 {
        let fd = vigil_memfd_create("vigil-probe-creates")
        guard fd >= 0 else { throw InputFailure(description: "memfd_create: \(String(cString: strerror(errno)))") }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(names.reduce(0) { $0 + $1.utf8.count + 1 })
        for name in names {
            bytes += name.utf8
            bytes.append(0)
        }
        var written = 0
        while written < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let why = String(cString: strerror(errno))
                close(fd)
                throw InputFailure(description: "writing the monitors' names: \(why)")
            }
            written += n
        }
        lseek(fd, 0, SEEK_SET)
        return fd
    }

    /// The names a parent wrote with `namesFile`, from descriptor `fd`.
    public static func readNames(from fd: Int32) -> [String] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        return bytes.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
    }
}

/// What a probe found.
public struct ProbeReport: Sendable {
    public enum Load: Sendable {
        /// Not reported: the child ended before it loaded anything.
        case unknown
        /// It loaded, and described itself: the description the child sent,
        /// as well-formed as one this process would read (its `path` is the
        /// file probed).
        case loaded(PluginDescription)
        /// The loader refused it (in the child); `notAPlugin` when it exports no entry symbol.
        case refused(reason: String, notAPlugin: Bool)
        /// It crashed or hung while loading, or the child could not run.
        case failed(String)
    }

    public enum Create: Sendable {
        /// create returned this status (the instance was destroyed at once).
        case returned(status: vigil_status, message: String)
        /// create crashed or did not return in time.
        case failed(String)
        /// Not created: its options do not bind (reported by the parent's own resolution).
        case skipped(String)
    }

    public var load: Load = .unknown
    /// By monitor name.
    public var creates: [String: Create] = [:]
    /// Monitors whose plugin said its instance cannot run in the host's
    /// process, with its words: created again as in a runner, where `run`
    /// will put them.
    public var movedToRunner: [String: String] = [:]
    /// With timing: nanoseconds to load, and to create (and destroy) one instance with default options.
    public var timing: (load: Int64, create: Int64?)?
    /// With timing: the load's steps.
    public var loadPhases: LoadPhases?

    /// The plugin's self-description, when it loaded.
    public var pluginDescription: PluginDescription? {
        if case .loaded(let description) = load { description } else { nil }
    }

    /// Why the file is refused, or nil when it loaded.
    public var refusal: String? {
        switch load {
        case .loaded: nil
        case .unknown: "the probe process ended before it loaded the plugin"
        case .refused(let reason, _): reason
        case .failed(let reason): reason
        }
    }
}

/// The parent's side of one child: reads its lines, keeps the call in
/// flight, kills the child past that call's deadline.
package struct ProbeSession {
    /// The file the child was told to load.
    let path: String
    let loadTimeout: Int64
    let creates: [PluginProber.Create]
    /// Each create's deadline by monitor (a 100,000-monitor manifest looked
    /// each up in the list: quadratic).
    let createTimeouts: [String: Int64]
    /// Outside any call the child only binds options: silence this long
    /// means it is stuck.
    static let idleTimeout: Int64 = 10_000_000_000
    /// Reading the manifest in the child is the host's own work, not the
    /// plugin's: a large one is given this long, and never blamed on it.
    static let manifestTimeout: Int64 = 300_000_000_000

    var inFlight: (call: String, subject: String, since: Int64, deadline: Int64)?
    var done = false
    /// The monitor whose create ended the child.
    var failedCreate: String?

    init(path: String, loadTimeout: Int64, creates: [PluginProber.Create]) {
        self.path = path
        self.loadTimeout = loadTimeout
        self.creates = creates
        self.createTimeouts = Dictionary(creates.map { ($0.monitor, $0.timeout) }, uniquingKeysWith: { a, _ in a })
    }

    static let loadCall = "load (dlopen, its constructors and vigil_plugin_entry)"

    /// Takes one line of the child's stream into `report`.
    mutating func handle(_ line: Substring, into report: inout ProbeReport) -> ChildProcess.LineMeaning {
        let f = ConformanceProtocol.split(line)
        func field(_ i: Int) -> String { i < f.count ? f[i] : "" }
        switch field(0) {
        case "begin":
            let now = monotonicNanoseconds()
            let subject = field(2)
            let timeout = switch field(1) {
            case "create": createTimeouts[subject] ?? loadTimeout
            case "manifest": Self.manifestTimeout
            default: loadTimeout
            }
            inFlight = (field(1), subject, now, now + timeout)
            return .callBegan(deadline: now + timeout)
        case "end":
            inFlight = nil
            if field(1) == "create" && field(2) != PluginProber.timingInstance {
                let status = vigil_status(rawValue: UInt32(bitPattern: Int32(field(4)) ?? Int32(VIGIL_E_FATAL.rawValue)))
                report.creates[field(2)] = .returned(status: status, message: field(5))
            }
            return .callEnded
        case "description": report.load = described(line, json: field(1))
        case "refused": report.load = .refused(reason: field(2), notAPlugin: field(1) == "noentry")
        case "skip": report.creates[field(1)] = .skipped(field(2))
        case "moved": report.movedToRunner[field(1)] = field(2)
        case "timing":
            report.timing = (Int64(field(1)) ?? 0, field(2) == "-" ? nil : Int64(field(2)))
            if let vetting = Int64(field(3)), let dlopen = Int64(field(4)), let entry = Int64(field(5)), let reading = Int64(field(6)) {
                report.loadPhases = LoadPhases(vetting: vetting, dlopen: dlopen, entry: entry, reading: reading)
            }
        case "done":
            done = true
            return .done
        default: break  // a torn last line
        }
        return .other
    }

    /// The load a `description` line reports: the description, read as
    /// `init(json:)` reads untrusted JSON and held to the ABI versions this
    /// host speaks, as the loader holds it; else a refusal that says why.
    func described(_ line: Substring, json: String) -> ProbeReport.Load {
        func malformed(_ why: String) -> ProbeReport.Load {
            .refused(reason: "malformed self-description: \(why)", notAPlugin: false)
        }
        guard line.utf8.count <= ChildProcess.maxLineBytes else {
            return malformed("the probe process sent a description line over \(Units.formatSize(Int64(ChildProcess.maxLineBytes)))")
        }
        var description: PluginDescription
        do {
            description = try PluginDescription(json: json)
        } catch {
            return malformed("\(error)")
        }
        if let problem = PluginLoader.abiProblem(major: description.abiMajor, minor: description.abiMinor) {
            return .refused(reason: problem, notAPlugin: false)
        }
        description.path = path
        return .loaded(description)
    }

    mutating func follow(_ child: ChildProcess, into report: inout ProbeReport) {
        // A child whose stream closed before `done` is killed at once.
        let ending = child.follow(idleTimeout: Self.idleTimeout, closeGrace: 0) { line in handle(line, into: &report) }

        // How it ended, when it did not end well.
        var failure: String?
        let call = inFlight
        if ending == .timedOut, let call {
            failure = "did not return within \(Units.formatDuration(call.deadline - call.since)); the probe was killed"
        } else if ending == .stalled {
            failure = "the probe process went silent for \(Units.formatDuration(Self.idleTimeout)) outside any plugin call and was killed"
        } else if let signal = child.signal, !(done && signal == SIGKILL) {
            failure = "crashed with \(ChildProcess.signalName(signal))"
        } else if let code = child.exitCode, code != 0, !done {
            failure = "the probe process exited with status \(code)"
        } else if !done {
            failure = "the probe process ended early"
        }
        guard let failure else { return }
        switch call?.call {
        case "manifest":
            // The host's own work: every create it was to make is reported
            // as not made, none blamed on the plugin.
            for create in creates where report.creates[create.monitor] == nil {
                report.creates[create.monitor] = .skipped("the probe process \(failure.hasPrefix("did not return") ? "took longer than \(Units.formatDuration(Self.manifestTimeout)) reading the manifest" : failure) before creating it")
            }
        case "create":
            let monitor = call!.subject
            failedCreate = monitor
            report.creates[monitor] = .failed(failure.hasPrefix("the probe") ? "\(failure) during create" : "create \(failure)")
        case "load":
            report.load = .failed(failure.hasPrefix("the probe") ? "\(failure) during \(Self.loadCall)"
                                                                 : "\(Self.loadCall) \(failure)")
        default:
            if case .loaded = report.load {
                // Outside a call, after the load (a plugin thread?): the
                // creates not reported are the ones it did not get to.
                if let next = creates.first(where: { report.creates[$0.monitor] == nil }) {
                    failedCreate = next.monitor
                    report.creates[next.monitor] = .failed("not created: \(failure), outside any plugin call (a thread of the plugin?)")
                }
            } else {
                report.load = .failed(failure)
            }
        }
    }
}

/// A plugin known only by what its probe child said: the description it sent
/// (held to the checks of an in-process load; `path` as the plugin was named)
/// and the rest of the probe's report (the creates of `validate`, timing).
/// Nothing of it runs in this process.
public struct ProbedPlugin: DescribedPlugin {
    public var description: PluginDescription
    public var report: ProbeReport
}

/// Probes of plugin files, at most once per file, and what they found:
/// plugins described by their probe child alone (`describe`, for `validate`
/// and `plugins describe`, which never load a plugin), and the hook a
/// catalog's vetting calls before it loads a file in-process (`vetting`, for
/// `run`).
public final class PluginProbes: Sendable {
    public enum Scope: Sendable {
        /// Every file.
        case all
        /// Files outside the vigil executable's directory and the system
        /// plugin directory (`run`): those are the host's own.
        case untrusted
    }

    public let prober: PluginProber
    /// What `vetting` probes.
    let scope: Scope
    /// With a manifest: each file's probe also creates the instances of the
    /// monitors that use it (`validate`).
    let manifest: Manifest?
    /// Each probe also times the load and a create with default options.
    let timing: Bool
    /// How many probe children `probeAll` runs at once.
    public let parallelism: Int
    /// Finds plugin files, and checks them in this process before they are
    /// probed (owner, permissions, ELF headers; none of their code runs).
    public let catalog: PluginCatalog
    private let caches = Mutex(Caches())
    private let trusted: [String]
    /// Reports kept across this run's reloads (`run` only).
    private let cache: ProbeReportCache?

    private struct Caches {
        var reports: [String: ProbeReport] = [:]
        /// `createsByFile`, once.
        var groupedCreates: [String: [PluginProber.Create]]?
        /// By real path: the file checks' verdict, once per file (their warnings too).
        var vetted: [String: Result<String, PluginFileRefusal>] = [:]
    }

    /// The host's own plugin directories (real paths): the `vigil`
    /// executable's, the installed `../lib/vigil/plugins` beside it, and the
    /// system one (`PluginCatalog.ownDirectories`). Their plugins are not
    /// probed before an in-process load, and stay in process unless a
    /// manifest says otherwise.
    public static func hostDirectories() -> [String] {
        PluginCatalog.ownDirectories().compactMap(PluginFile.realPath(of:))
    }

    /// `warn` takes the warnings of the file checks the unsafe-plugins
    /// override skips (default: standard error).
    public init(prober: PluginProber, scope: Scope, manifest: Manifest? = nil, directories: [String],
                timing: Bool = false, parallelism: Int = PluginProbes.defaultParallelism,
                warn: (@Sendable (String) -> Void)? = nil, cache: ProbeReportCache? = nil) {
        self.prober = prober
        // A report that creates a manifest's instances or times the load is this call's alone.
        self.cache = manifest == nil && !timing ? cache : nil
        self.scope = scope
        self.manifest = manifest
        self.timing = timing
        // Timed probes one at a time: children running beside each other
        // on a few cores would time each other, not the plugin.
        self.parallelism = timing ? 1 : max(1, parallelism)
        self.catalog = PluginCatalog(directories: directories, vetting: PluginVetting(
            policy: PluginFilePolicy(allowUnsafe: prober.allowUnsafe), warn: warn ?? PluginVetting.warnOnStandardError))
        self.trusted = PluginProbes.hostDirectories()
    }

    /// The plugin a manifest or the command line names (a name to look up,
    /// or a path), as its probe child described it.
    public func describe(reference: String) -> Result<ProbedPlugin, PluginRefusal> {
        catalog.load(reference: reference, using: describe(path:))
    }

    /// The plugin at `path`: checked here, loaded and described in its probe child.
    public func describe(path: String) -> Result<ProbedPlugin, PluginRefusal> {
        let realPath: String
        switch vet(path) {
        case .failure(let refusal): return .failure(PluginRefusal(path: path, reason: refusal.reason))
        case .success(let checked): realPath = checked
        }
        let report = report(for: realPath)
        guard var description = report.pluginDescription else {
            return .failure(PluginRefusal(path: path, reason: report.refusal ?? "no description"))
        }
        description.path = path
        return .success(ProbedPlugin(description: description, report: report))
    }

    /// One probe child per CPU, at least 2 (much of a probe is the child's
    /// exec and dynamic linking, not ours to wait on), at most 4.
    public static var defaultParallelism: Int { min(4, max(2, ProcessInfo.processInfo.activeProcessorCount)) }

    /// Probes the files at `paths` that pass the file checks, `parallelism`
    /// children at a time, so that `describe` and `report` find them done. The
    /// checks run here first, one file after another, so that their warnings
    /// come in the order of `paths`.
    public func probeAll(paths: [String]) {
        var files: [String] = []
        var seen: Set<String> = []
        for path in paths where seen.insert(path).inserted {
            guard case .success(let realPath) = vet(path), !files.contains(realPath),
                  caches.withLock({ $0.reports[realPath] == nil }) else { continue }
            files.append(realPath)
        }
        let found = Self.inParallel(files.count, width: parallelism) { [self, files] i in
            prober.probe(path: files[i], manifest: manifest?.file, creates: creates(for: files[i]), timing: timing)
        }
        caches.withLock { caches in
            for (realPath, report) in zip(files, found) { caches.reports[realPath] = report }
        }
    }

    /// `body(0..<count)` on at most `width` threads at once; the results in index order.
    static func inParallel<T: Sendable>(_ count: Int, width: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
        let work = ParallelWork<T>(count)
        let finished = DispatchGroup()
        for _ in 0..<min(width, count) {
            finished.enter()
            Thread.detachNewThread {
                while let i = work.next() {
                    work.store(body(i), at: i)
                }
                finished.leave()
            }
        }
        finished.wait()
        return work.results
    }

    /// The file checks of `path`, once per file: its real path, or why it is refused.
    package func vet(_ path: String) -> Result<String, PluginFileRefusal> {
        let key = PluginFile.realPath(of: path) ?? path
        if let known = caches.withLock({ $0.vetted[key] }) { return known }
        let result = catalog.vetting.open(path).map(\.realPath)
        caches.withLock { $0.vetted[key] = result }
        return result
    }

    /// The vetting a catalog runs each file through: the file checks under
    /// `policy`, then this probe.
    package func vetting(policy: PluginFilePolicy, warn: @escaping @Sendable (String) -> Void) -> PluginVetting {
        PluginVetting(policy: policy, warn: warn, probe: { [self] file in refusal(for: file) })
    }

    func refusal(for file: PluginFile) -> PluginFileRefusal? {
        if scope == .untrusted, trusted.contains(PluginFile.parent(of: file.realPath)) { return nil }
        let report = report(for: file.realPath)
        return report.refusal.map { PluginFileRefusal(path: file.path, rule: .probe, reason: $0) }
    }

    /// The probe of the file at `realPath`, run on first use.
    public func report(for realPath: String) -> ProbeReport {
        if let known = caches.withLock({ $0.reports[realPath] }) { return known }
        let probe = { self.prober.probe(path: realPath, manifest: self.manifest?.file, creates: self.creates(for: realPath),
                                        timing: self.timing) }
        let report = cache?.report(for: realPath, allowUnsafe: prober.allowUnsafe, probe: probe) ?? probe()
        caches.withLock { $0.reports[realPath] = report }
        return report
    }

    /// The manifest's monitors whose plugin is the file at `realPath`.
    func creates(for realPath: String) -> [PluginProber.Create] {
        createsByFile()[realPath] ?? []
    }

    /// The manifest's monitors to create, by the real path of their plugin
    /// file: found once, each plugin reference looked up once (100,000
    /// monitors of one plugin looked the file up 100,000 times per file).
    private func createsByFile() -> [String: [PluginProber.Create]] {
        caches.withLock { caches in
            if let grouped = caches.groupedCreates { return grouped }
            var grouped: [String: [PluginProber.Create]] = [:]
            var realPaths: [String: String?] = [:]
            if let manifest {
                for monitor in manifest.monitors {
                    let key = (monitor.pluginIsPath ? "path:" : "name:") + manifest.pluginReference(of: monitor)
                    let realPath: String?
                    if let known = realPaths[key] {
                        realPath = known
                    } else {
                        realPath = file(of: monitor, in: manifest).flatMap(PluginFile.realPath(of:))
                        realPaths[key] = realPath
                    }
                    guard let realPath else { continue }
                    grouped[realPath, default: []].append(PluginProber.Create(monitor: monitor.name, timeout: Self.createTimeout(monitor)))
                }
            }
            caches.groupedCreates = grouped
            return grouped
        }
    }

    /// The file of `monitor`'s plugin, if there is one to find.
    package func file(of monitor: MonitorConfig, in manifest: Manifest) -> String? {
        let reference = manifest.pluginReference(of: monitor)
        return monitor.pluginIsPath ? reference : catalog.locate(reference)
    }

    /// The deadline of create, as `MonitorInstance` gives every call: the
    /// monitor's `timeout`, else the larger of 5 s and its interval.
    static func createTimeout(_ monitor: MonitorConfig) -> Int64 {
        monitor.timeout ?? max(5_000_000_000, monitor.interval ?? 0)
    }
}

/// The indices `inParallel`'s threads take in turn, and their results.
private final class ParallelWork<T: Sendable>: Sendable {
    private let state: Mutex<(next: Int, results: [T?])>

    init(_ count: Int) { state = Mutex((0, Array(repeating: nil, count: count))) }

    /// The next index nobody took yet; nil when all are taken.
    func next() -> Int? {
        state.withLock { s in
            guard s.next < s.results.count else { return nil }
            defer { s.next += 1 }
            return s.next
        }
    }

    func store(_ result: T, at i: Int) { state.withLock { $0.results[i] = result } }

    var results: [T] { state.withLock { $0.results.map { $0! } } }
}

/// Probe reports kept for the life of a `vigil run`, across its reloads: a
/// reload resolves the monitors it changes again, and a plugin file that
/// did not change since its probe (same device, inode, size and
/// modification time: `PluginFileIdentity`, as quarantine tells a changed
/// file) is not probed again. A probe is a child process, ~20 ms of CPU;
/// 20 reloads a second that each changed a monitor spent a core's fifth on
/// probing the same file (issue 24's reload workload).
public final class ProbeReportCache: Sendable {
    private let entries = Mutex<[String: (identity: PluginFileIdentity, allowUnsafe: Bool, report: ProbeReport)]>([:])

    public init() {}

    func report(for realPath: String, allowUnsafe: Bool, probe: () -> ProbeReport) -> ProbeReport {
        let identity = PluginFileIdentity(path: realPath)
        if let identity, let known = entries.withLock({ $0[realPath] }),
           known.identity == identity, known.allowUnsafe == allowUnsafe {
            return known.report
        }
        let report = probe()
        // Kept only if the file is still the one probed.
        if let identity, PluginFileIdentity(path: realPath) == identity {
            entries.withLock { $0[realPath] = (identity, allowUnsafe, report) }
        }
        return report
    }
}
