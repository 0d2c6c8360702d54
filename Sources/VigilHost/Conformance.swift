@preconcurrency import CVigilPlugin
import Foundation
import Glibc
import VigilABI
import VigilCore

/// `vigil plugins check`, the child's side: loads one plugin in this process
/// (a child the parent can lose), drives its C ABI directly through the
/// loaded descriptor with a host table of its own that records every emit,
/// and streams one line per step to the parent (see `ConformanceProtocol`).
/// A crash or a hang here is the parent's to report, naming the call in
/// progress: every call into the plugin is announced (`begin`) before it is
/// made and reported (`end`) after it returns.
public enum Conformance {
    public struct Request: Sendable {
        /// The plugin file (the parent resolved names to paths).
        public var path: String
        /// When the parent was given a name: the name the plugin must describe itself with.
        public var expectedName: String?
        /// `--option NAME=VALUE`, as given.
        public var optionPairs: [String]
        /// `--options YAML`: a mapping.
        public var optionsYAML: String?
        /// How long a push plugin (no poll) is given to emit after start.
        public var pushWait: Int64
        /// How long emits are watched for after each stop returned.
        public var lateWindow: Int64
        /// `--allow-unsafe-plugins`: skip the owner and permission rules (PluginFile.swift).
        public var allowUnsafePlugins = false

        public init(path: String, expectedName: String? = nil, optionPairs: [String] = [], optionsYAML: String? = nil,
                    pushWait: Int64 = 1_000_000_000, lateWindow: Int64 = 250_000_000) {
            self.path = path
            self.expectedName = expectedName
            self.optionPairs = optionPairs
            self.optionsYAML = optionsYAML
            self.pushWait = pushWait
            self.lateWindow = lateWindow
        }
    }

    /// Runs every check, writing the protocol to `fd`. Returns when the checks
    /// are done; the caller should then leave at once (`_exit`): plugin threads
    /// that outlive their instances may still be running.
    public static func runChild(_ request: Request, fd: Int32) {
        // A crash is expected here and reported by the parent: no core file.
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        // Not inherited by whatever a plugin may run.
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        ConformanceSession(request: request, writer: ProtocolWriter(fd: fd)).run()
    }

    /// The checks, in the order they run and are reported.
    enum CheckName {
        static let negotiation = "negotiation"
        static let description = "self-description"
        static let createDefaults = "create with default options"
        static let createGiven = "create with the given options"
        static let lifecycle = "start/poll/stop twice"
        static let stopStopped = "start and stop again, destroy"
        static let twoInstances = "two instances at once"
        static let pluginThreads = "emits from plugin threads"
        static let noLateEmit = "no emit after stop"
        static let declarations = "events match declarations"
    }
}

/// The child → parent stream: one line per step, tab-separated fields, with
/// backslash, tab, CR and LF escaped in each field.
///
///     plugin  NAME  VERSION  ABI  MODE  PATH     what was loaded (MODE: "polled 1s" or "push")
///     step    CHECK                              the check now running
///     begin   CALL  INSTANCE                     a call into the plugin is about to be made
///     end     CALL  INSTANCE  NS  STATUS  MESSAGE   …and returned, after NS nanoseconds
///     check   CHECK  pass|fail|skip|info  DETAIL
///     refused REASON                             the loader refused the plugin
///     unusable REASON                            the options given cannot be used
///     done
///
/// INSTANCE is "-" for calls outside an instance (`load`: dlopen and the entry point).
enum ConformanceProtocol {
    static func escape(_ field: String) -> String {
        guard field.contains(where: { $0 == "\\" || $0 == "\t" || $0 == "\n" || $0 == "\r" }) else { return field }
        var out = ""
        for c in field.unicodeScalars {
            switch c {
            case "\\": out += "\\\\"
            case "\t": out += "\\t"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func unescape(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var out = ""
        var escaped = false
        for c in field.unicodeScalars {
            if escaped {
                switch c {
                case "t": out += "\t"
                case "n": out += "\n"
                case "r": out += "\r"
                default: out.unicodeScalars.append(c)
                }
                escaped = false
            } else if c == "\\" {
                escaped = true
            } else {
                out.unicodeScalars.append(c)
            }
        }
        return out
    }

    static func split(_ line: Substring) -> [String] {
        line.split(separator: "\t", omittingEmptySubsequences: false).map(unescape)
    }

    static func statusName(_ status: vigil_status) -> String { statusSymbol(status) }
}

/// Writes protocol lines to the parent, each with one write(2) where it fits
/// in a pipe's atomic size, so that a line is never half there when the
/// process dies.
final class ProtocolWriter: @unchecked Sendable {
    private let fd: Int32
    private let lock = Lock()

    init(fd: Int32) { self.fd = fd }

    func send(_ fields: String...) {
        var line = fields.map(ConformanceProtocol.escape).joined(separator: "\t")
        if line.utf8.count > 3_900 {
            // Cut on a character boundary, well under PIPE_BUF (4096).
            var cut = ""
            for c in line {
                if cut.utf8.count + c.utf8.count > 3_880 { break }
                cut.append(c)
            }
            line = cut + "…"
        }
        let bytes = Array((line + "\n").utf8)
        lock.withLock {
            var offset = 0
            while offset < bytes.count {
                let n = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    return  // the parent is gone: nobody to tell
                }
                offset += n
            }
        }
    }
}

/// Everything the plugin handed to the host table, across all instances.
/// Guarded by `lock`, which each emit takes once.
final class EmitLedger: @unchecked Sendable {
    let lock = Lock()
    let kinds: [EventSpec]
    /// The thread that makes every call into the plugin.
    let driver: pthread_t
    /// The host's own decoder: what `vigil run` refuses is a failure here.
    let decoder: EventDecoder

    // Guarded by `lock`.
    private(set) var total = 0
    private(set) var fromPluginThreads = 0
    private(set) var pluginThreads = Set<UInt>()
    private(set) var kindCounts: [Int]
    private(set) var problemOrder: [String] = []
    private(set) var problemCounts: [String: Int] = [:]
    private(set) var otherProblems = 0

    init(plugin: PluginDescription) {
        self.kinds = plugin.events
        self.kindCounts = Array(repeating: 0, count: plugin.events.count)
        self.driver = pthread_self()
        self.decoder = EventDecoder(monitor: "check", plugin: plugin.name, events: plugin.events)
    }

    /// A mismatch with the declarations, counted once per distinct message.
    func problemLocked(_ message: String) {
        if let n = problemCounts[message] {
            problemCounts[message] = n + 1
        } else if problemOrder.count < 40 {
            problemOrder.append(message)
            problemCounts[message] = 1
        } else {
            otherProblems += 1
        }
    }

    func problem(_ message: String) { lock.withLock { problemLocked(message) } }

    /// Judges one event with the host's decoder, recording what it refuses
    /// and where it differs from the declarations. Returns the status the
    /// host's emit would answer for it while running.
    func checkLocked(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        total += 1
        let me = pthread_self()
        if pthread_equal(me, driver) == 0 {
            fromPluginThreads += 1
            if pluginThreads.count < 4096 { pluginThreads.insert(UInt(me)) }
        }
        var kindIndex = -1
        var mismatches: [DeclarationMismatch] = []
        do {
            _ = try decoder.decode(event, now: realtimeNanoseconds, kindIndex: &kindIndex, mismatches: &mismatches)
        } catch {
            problemLocked("refused by the host (\(error.reason.name)): \(error.message)")
            return error.status
        }
        if kindIndex >= 0 { kindCounts[kindIndex] += 1 }
        for mismatch in mismatches { problemLocked(mismatch.description) }
        return VIGIL_OK
    }
}

/// One instance under test, and the host context the plugin gets for it.
/// Kept alive for the life of the process: a plugin thread may hold the
/// context long after destroy.
final class ProbeInstance: PluginHostCallbacks, @unchecked Sendable {
    enum Phase {
        case created
        case started
        /// Since this monotonic time (stop returned, or start failed).
        case stopped(Int64)
    }

    let id: String
    let ledger: EmitLedger
    var handle: UnsafeMutableRawPointer?
    private(set) lazy var context = HostContext.make(for: self)

    // Guarded by `ledger.lock`.
    var phase = Phase.created
    var accepted = 0
    var beforeStart = 0
    var afterStop = 0
    var firstLateDelay: Int64?
    var logs = 0
    var finished = 0

    init(id: String, ledger: EmitLedger) {
        self.id = id
        self.ledger = ledger
    }

    func setPhase(_ phase: Phase) { ledger.lock.withLock { self.phase = phase } }

    func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        ledger.lock.withLock {
            let status = ledger.checkLocked(event)
            switch phase {
            case .started:
                accepted += 1
                return status
            case .created:
                beforeStart += 1
                return VIGIL_E_STOPPED
            case .stopped(let since):
                afterStop += 1
                let delay = monotonicNanoseconds() - since
                firstLateDelay = min(firstLateDelay ?? delay, delay)
                return VIGIL_E_STOPPED
            }
        }
    }

    func log(level: Int, message: String, cut: Int) { ledger.lock.withLock { logs += 1 } }
    func setAvailability(_ available: Bool, reason: String) {}
    func now() -> Int64 { realtimeNanoseconds() }
    func markFinished() { ledger.lock.withLock { finished += 1 } }
}

/// The result of one call into the plugin.
struct CallResult {
    var status: vigil_status
    var message: String
    var nanoseconds: Int64

    var ok: Bool { status == VIGIL_OK }
    /// "VIGIL_E_FATAL: the message" (or the status alone).
    var said: String {
        let name = ConformanceProtocol.statusName(status)
        return message.isEmpty ? name : "\(name): \(shownText(message))"
    }
}

/// What one check found; reported as one line.
struct CheckOutcome {
    var failures: [String] = []
    var notes: [String] = []
    var skipped: String?

    mutating func fail(_ why: String) { failures.append(why) }
    var passed: Bool { failures.isEmpty && skipped == nil }
}

/// One run of the checks, in the child.
final class ConformanceSession {
    typealias Name = Conformance.CheckName

    let request: Conformance.Request
    let out: ProtocolWriter
    private var plugin: LoadedPlugin!
    private var ledger: EmitLedger!
    private var probes: [ProbeInstance] = []
    private var options: [(name: String, value: OptionValue)] = []

    init(request: Conformance.Request, writer: ProtocolWriter) {
        self.request = request
        self.out = writer
    }

    private var descriptor: vigil_plugin_descriptor { plugin.descriptor }
    private var polled: Bool { plugin.descriptor.poll != nil }

    func run() {
        defer { out.send("done") }
        guard load() else { return }
        checkDescription()
        guard bindOptions() else { return }
        guard let a = checkCreate() else {
            finalChecks()
            return
        }
        let running = checkLifecycle(a)
        checkStopWhenStopped(a)
        if running { checkTwoInstances() } else {
            report(Name.twoInstances, CheckOutcome(skipped: "the first instance did not run"))
        }
        finalChecks()
    }

    // MARK: - reporting

    private func report(_ name: String, _ outcome: CheckOutcome, pass detail: String = "") {
        if !outcome.failures.isEmpty {
            out.send("check", name, "fail", (outcome.failures + outcome.notes).joined(separator: "; "))
        } else if let skipped = outcome.skipped {
            out.send("check", name, "skip", ([skipped] + outcome.notes).joined(separator: "; "))
        } else {
            out.send("check", name, "pass", ([detail].filter { !$0.isEmpty } + outcome.notes).joined(separator: "; "))
        }
    }

    // MARK: - calls

    /// One call into the plugin, announced before and reported after.
    private func call(_ name: String, _ probe: ProbeInstance?,
                      _ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> CallResult {
        let instance = probe?.id ?? "-"
        out.send("begin", name, instance)
        var message = [CChar](repeating: 0, count: 1024)
        let started = monotonicNanoseconds()
        let status = message.withUnsafeMutableBufferPointer { buffer in
            var error = vigil_error(size: UInt32(MemoryLayout<vigil_error>.size), reserved: 0,
                                    message: buffer.baseAddress, capacity: buffer.count)
            return body(&error)
        }
        let took = monotonicNanoseconds() - started
        let text = status == VIGIL_OK ? "" : pluginMessage(message)
        out.send("end", name, instance, "\(took)", ConformanceProtocol.statusName(status), text)
        return CallResult(status: status, message: text, nanoseconds: took)
    }

    private func create(_ id: String) -> (ProbeInstance, CallResult) {
        let probe = ProbeInstance(id: id, ledger: ledger)
        probes.append(probe)
        var arena = StringArena()
        defer { arena.free() }
        var cOptions = options.map { vigil_option(name: arena.str($0.name), value: arena.value($0.value)) }
        let instanceName = arena.str("check-\(id)")
        let interval: Int64 = polled ? (plugin.description.defaultInterval > 0 ? plugin.description.defaultInterval : 10_000_000_000) : 0
        var handle: UnsafeMutableRawPointer?
        var result = cOptions.withUnsafeMutableBufferPointer { buffer in
            var args = vigil_create_args()
            args.size = UInt32(MemoryLayout<vigil_create_args>.size)
            args.instance_name = instanceName
            args.host = probe.context.pointer
            args.api = HostTable.shared
            args.options = UnsafePointer(buffer.baseAddress)
            args.option_count = buffer.count
            args.interval_ns = interval
            return call("create", probe) { err in descriptor.create(&args, &handle, err) }
        }
        if result.ok {
            if let handle {
                probe.handle = handle
            } else {
                result.status = VIGIL_E_FATAL
                result.message = "create returned VIGIL_OK but set no instance"
            }
        }
        return (probe, result)
    }

    /// Emits are accepted from the start of start until stop returns.
    private func start(_ p: ProbeInstance) -> CallResult {
        p.setPhase(.started)
        let result = call("start", p) { err in descriptor.start(p.handle, err) }
        if !result.ok { p.setPhase(.stopped(monotonicNanoseconds())) }  // a failed start leaves it stopped
        return result
    }

    private func poll(_ p: ProbeInstance) -> CallResult {
        call("poll", p) { err in descriptor.poll(p.handle, err) }
    }

    private func stop(_ p: ProbeInstance) -> CallResult {
        let result = call("stop", p) { err in descriptor.stop(p.handle, err) }
        p.ledger.lock.withLock {
            if case .started = p.phase { p.phase = .stopped(monotonicNanoseconds()) }
        }
        return result
    }

    private func destroy(_ p: ProbeInstance) -> CallResult {
        guard let handle = p.handle else { return CallResult(status: VIGIL_OK, message: "", nanoseconds: 0) }
        p.handle = nil
        return call("destroy", p) { _ in
            descriptor.destroy(handle)
            return VIGIL_OK
        }
    }

    private func sleep(nanoseconds: Int64) {
        var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    private func accepted(_ p: ProbeInstance) -> Int { ledger.lock.withLock { p.accepted } }

    /// For push plugins: waits until each instance emitted once, or the push wait is over.
    private func waitForEvents(_ probes: [ProbeInstance], since: [Int]) -> Bool {
        let deadline = monotonicNanoseconds() + request.pushWait
        while monotonicNanoseconds() < deadline {
            if zip(probes, since).allSatisfy({ accepted($0) > $1 }) { return true }
            sleep(nanoseconds: 5_000_000)
        }
        return zip(probes, since).allSatisfy { accepted($0) > $1 }
    }

    // MARK: - the checks

    private func load() -> Bool {
        out.send("step", Name.negotiation)
        var outcome: Result<LoadedPlugin, PluginRefusal>!
        _ = call("load", nil) { _ in
            // Warnings of skipped rules go to our stderr, which is the parent's.
            outcome = PluginLoader.load(path: request.path, vetting: PluginVetting(
                policy: PluginFilePolicy(allowUnsafe: request.allowUnsafePlugins)))
            return VIGIL_OK
        }
        switch outcome! {
        case .failure(let refusal):
            out.send("refused", refusal.reason)
            return false
        case .success(let loaded):
            if let expected = request.expectedName, loaded.description.name != expected {
                out.send("refused", "the file describes itself as plugin '\(loaded.description.name)', not '\(expected)'")
                return false
            }
            plugin = loaded
        }
        let d = plugin.description
        ledger = EmitLedger(plugin: d)
        let interval = d.defaultInterval > 0 ? Units.formatDuration(d.defaultInterval) : "10s (the host's default)"
        out.send("plugin", d.name, d.version, "\(d.abiMajor).\(d.abiMinor)", d.polled ? "polled, default interval \(interval)" : "push (not polled)", d.path)
        out.send("check", Name.negotiation, "pass",
                 "chose ABI \(d.abiMajor).\(d.abiMinor); this host speaks \(VIGIL_ABI_MAJOR).\(VIGIL_ABI_MINOR)")
        return true
    }

    private func checkDescription() {
        out.send("step", Name.description)
        let d = plugin.description
        var outcome = CheckOutcome()
        // The loader refuses a description with problems; asked again here so
        // that this check stands on its own.
        for problem in d.problems() { outcome.fail(problem) }
        for event in d.events where event.fields.isEmpty && !event.dynamicFields {
            outcome.notes.append("kind '\(shownText(event.kind))' declares no fields")
        }
        let defaults = d.options.filter { $0.defaultText != nil }.count
        let dynamic = d.events.filter(\.dynamicFields).map { "'\($0.kind)'" }
        var detail = d.options.isEmpty ? "no options, "
            : "\(d.options.count) option\(d.options.count == 1 ? "" : "s") (\(defaults) with a default, which type-check\(defaults == 1 ? "s" : "")), "
        detail += "\(d.events.count) event kind\(d.events.count == 1 ? "" : "s")"
        if !dynamic.isEmpty { detail += " (dynamic fields: \(dynamic.joined(separator: ", ")))" }
        report(Name.description, outcome, pass: detail)
    }

    /// Declared defaults, then `--options`, then `--option`: every declared
    /// option's value, or why there is none.
    private func bindOptions() -> Bool {
        let d = plugin.description
        let location = SourceLocation(file: "defaults", line: 1, column: 1)
        let (defaults, _) = OptionBinder.bind(MonitorConfig(name: "check", plugin: d.path, location: location), to: d)
        var values: [String: OptionValue] = [:]
        for option in defaults { values[option.name] = option.value }
        var given: [(String, ConfigNode)] = []
        if let yaml = request.optionsYAML {
            let (node, problems) = ConfigParser(file: "--options", environment: ProcessInfo.processInfo.environment).parse(yaml)
            if let error = problems.first(where: { $0.level == .error }) {
                out.send("unusable", "--options: \(error.message)")
                return false
            }
            guard case .mapping(let entries, _)? = node else {
                out.send("unusable", "--options must be a YAML mapping of option names to values, e.g. '{threads: 2}'")
                return false
            }
            given += entries.map { ($0.key.text, $0.value) }
        }
        for pair in request.optionPairs {
            guard let eq = pair.firstIndex(of: "="), eq != pair.startIndex else {
                out.send("unusable", "--option \(pair): write NAME=VALUE")
                return false
            }
            let name = String(pair[..<eq]), text = String(pair[pair.index(after: eq)...])
            let where_ = SourceLocation(file: "--option \(name)", line: 1, column: 1)
            var node = ConfigNode.scalar(ConfigScalar(text, at: where_))
            // A json option takes any YAML: parse it, as a manifest's value would be.
            if d.options.first(where: { $0.name == name })?.type == .json, !text.isEmpty,
               case (let parsed?, let problems) = ConfigParser(file: where_.file, environment: [:]).parse(text),
               !problems.contains(where: { $0.level == .error }) {
                node = parsed
            }
            given.append((name, node))
        }
        let declared = d.options.map(\.name)
        for (name, node) in given {
            guard let spec = d.options.first(where: { $0.name == name }) else {
                let hint = Suggest.hint(for: name, in: declared)
                    ?? (declared.isEmpty ? "plugin '\(d.name)' takes no options" : "its options: \(declared.joined(separator: ", "))")
                out.send("unusable", "unknown option '\(name)' for plugin '\(d.name)' (\(hint))")
                return false
            }
            switch OptionBinder.convert(node, to: spec.type) {
            case .success(let value): values[name] = value
            case .failure(let why):
                out.send("unusable", "option '\(name)' of plugin '\(d.name)' must be \(spec.type.withArticle): \(why)")
                return false
            }
        }
        let name = createCheckName
        let missing = d.options.filter { values[$0.name] == nil }
        if !missing.isEmpty {
            let list = missing.map { "'\($0.name)' (\($0.type))" }.joined(separator: ", ")
            let example = missing.map { "--option \($0.name)=VALUE" }.joined(separator: " ")
            out.send("check", name, "skip",
                     "option\(missing.count == 1 ? "" : "s") \(list) \(missing.count == 1 ? "is" : "are") required and \(missing.count == 1 ? "has" : "have") no default: give \(missing.count == 1 ? "it" : "them") with \(example)")
            out.send("check", "instance checks", "skip", "not run without an instance")
            return false
        }
        options = d.options.map { ($0.name, values[$0.name] ?? .none) }
        return true
    }

    private var createCheckName: String {
        request.optionPairs.isEmpty && request.optionsYAML == nil ? Name.createDefaults : Name.createGiven
    }

    private func checkCreate() -> ProbeInstance? {
        let name = createCheckName
        out.send("step", name)
        let (a, result) = create("a")
        let shownOptions = options.map { "\($0.name)=\($0.value)" }.joined(separator: ", ")
        var outcome = CheckOutcome()
        if result.status == VIGIL_E_UNAVAILABLE || result.status == VIGIL_E_TEMPORARY {
            outcome.skipped = "create returned \(result.said) (retried later by the host)"
        } else if !result.ok {
            outcome.fail("create returned \(result.said)")
        }
        report(name, outcome, pass: options.isEmpty ? "no options" : shownOptions)
        guard result.ok else {
            out.send("check", "instance checks", "skip", "not run without an instance")
            return nil
        }
        return a
    }

    /// start, then poll (or, for a push plugin, a wait for events), then stop,
    /// on each instance; then a wait for late emits. False when not every
    /// instance could start.
    private func round(_ instances: [ProbeInstance], _ outcome: inout CheckOutcome) -> Bool {
        var started: [ProbeInstance] = []
        for p in instances {
            let result = start(p)
            if result.ok {
                started.append(p)
                continue
            }
            if result.status == VIGIL_E_UNAVAILABLE || result.status == VIGIL_E_TEMPORARY {
                outcome.skipped = "start of instance \(p.id) returned \(result.said) (the source may not exist on this machine)"
            } else {
                outcome.fail("start of instance \(p.id) returned \(result.said)")
            }
            break
        }
        if started.count == instances.count {
            if polled {
                for p in started {
                    let result = poll(p)
                    switch result.status {
                    case VIGIL_OK: break
                    case VIGIL_E_TEMPORARY, VIGIL_E_UNAVAILABLE:
                        outcome.notes.append("poll of instance \(p.id) returned \(result.said) (tolerated by the host)")
                    default:
                        outcome.fail("poll of instance \(p.id) returned \(result.said) (the host would stop and destroy the instance)")
                    }
                }
            } else {
                let before = started.map(accepted)
                if !waitForEvents(started, since: before) {
                    let silent = zip(started, before).filter { accepted($0) == $1 }.map(\.0.id)
                    outcome.notes.append("push plugin: no event from instance \(silent.joined(separator: ", ")) within \(Units.formatDuration(request.pushWait)) of start")
                }
            }
        }
        for p in started {
            let result = stop(p)
            if !result.ok { outcome.fail("stop of instance \(p.id) returned \(result.said)") }
        }
        // Emits that arrive now are late: counted by the ledger.
        sleep(nanoseconds: request.lateWindow)
        return started.count == instances.count
    }

    /// start → poll → stop → start → poll → stop on one instance. Returns
    /// whether the instance ran.
    private func checkLifecycle(_ a: ProbeInstance) -> Bool {
        out.send("step", Name.lifecycle)
        var outcome = CheckOutcome()
        var ran = round([a], &outcome)
        if ran && outcome.failures.isEmpty { ran = round([a], &outcome) }
        let events = accepted(a)
        let how = polled ? "start, poll, stop, twice" : "start, wait for events, stop, twice"
        report(Name.lifecycle, outcome, pass: "\(how): \(events) event\(events == 1 ? "" : "s") accepted")
        return ran && outcome.failures.isEmpty
    }

    /// The header: stop on a stopped instance must be harmless; then destroy.
    private func checkStopWhenStopped(_ a: ProbeInstance) {
        out.send("step", Name.stopStopped)
        var outcome = CheckOutcome()
        let stopped = stop(a)
        if !stopped.ok { outcome.fail("stop of a stopped instance returned \(stopped.said)") }
        // Start is idempotent too: a second start of a started instance does nothing.
        let first = start(a)
        if first.ok {
            let second = start(a)
            if !second.ok { outcome.fail("start of a started instance returned \(second.said)") }
            let stop = stop(a)
            if !stop.ok { outcome.fail("stop after a second start returned \(stop.said)") }
        } else if first.status != VIGIL_E_UNAVAILABLE && first.status != VIGIL_E_TEMPORARY {
            outcome.fail("start after stop returned \(first.said)")
        }  // unavailable here (no source on this machine) is not a failure, as in the first round
        _ = destroy(a)
        report(Name.stopStopped, outcome, pass: "stop of a stopped and start of a started instance returned VIGIL_OK")
    }

    /// Two instances created and started together, both stopped, both destroyed.
    private func checkTwoInstances() {
        out.send("step", Name.twoInstances)
        var outcome = CheckOutcome()
        let (b, rb) = create("b")
        var created = [b]
        if rb.ok {
            let (c, rc) = create("c")
            if rc.ok { created.append(c) } else { outcome.fail("create of instance c (while b exists) returned \(rc.said)") }
        } else {
            outcome.fail("create of instance b returned \(rb.said)")
            created = []
        }
        if created.count == 2 { _ = round(created, &outcome) }
        for p in created { _ = destroy(p) }
        let events = created.map { "\($0.id): \(accepted($0))" }.joined(separator: ", ")
        report(Name.twoInstances, outcome, pass: "created, started, \(polled ? "polled" : "watched"), stopped and destroyed side by side; events \(events)")
    }

    private func finalChecks() {
        let (total, fromThreads, threads, counts, problems, others) = ledger.lock.withLock {
            (ledger.total, ledger.fromPluginThreads, ledger.pluginThreads.count, ledger.kindCounts,
             ledger.problemOrder.map { ($0, ledger.problemCounts[$0] ?? 0) }, ledger.otherProblems)
        }
        let perProbe = ledger.lock.withLock {
            probes.map { ($0.id, $0.beforeStart, $0.afterStop, $0.firstLateDelay, $0.finished) }
        }

        out.send("step", Name.pluginThreads)
        if fromThreads > 0 {
            out.send("check", Name.pluginThreads, "info",
                     "seen: \(fromThreads) of \(total) emits came from \(threads) thread\(threads == 1 ? "" : "s") other than the calling one (accepted, as the ABI allows)")
        } else {
            out.send("check", Name.pluginThreads, "info",
                     total == 0 ? "none seen (no emits at all)" : "none seen: all \(total) emits came from the calling thread")
        }

        out.send("step", Name.noLateEmit)
        var late = CheckOutcome()
        let after = perProbe.filter { $0.2 > 0 }.map { id, _, count, delay, _ in
            "instance \(id): \(count)" + (delay.map { String(format: ", the first %.1f ms after stop returned", Double($0) / 1e6) } ?? "")
        }
        if !after.isEmpty {
            late.fail("emits arrived after stop returned (refused with VIGIL_E_STOPPED): \(after.joined(separator: "; ")); stop must join every thread that emits")
        }
        let before = perProbe.filter { $0.1 > 0 }.map { "instance \($0.0): \($0.1)" }
        if !before.isEmpty {
            late.fail("emits arrived before start (refused with VIGIL_E_STOPPED): \(before.joined(separator: "; ")); create must not emit")
        }
        report(Name.noLateEmit, late,
               pass: "none in the \(Units.formatDuration(request.lateWindow)) after each stop")

        out.send("step", Name.declarations)
        var matching = CheckOutcome()
        for (message, count) in problems {
            matching.fail(count > 1 ? "\(message) (\(count) times)" : message)
        }
        if others > 0 { matching.fail("\(others) more mismatches") }
        let seen = zip(ledger.kinds, counts).filter { $0.1 > 0 }.map { "\($0.0.kind) \($0.1)" }
        let detail = total == 0 ? "no events were emitted"
            : "\(total) event\(total == 1 ? "" : "s")\(seen.isEmpty ? "" : ": " + seen.joined(separator: ", "))"
        report(Name.declarations, matching, pass: detail)
    }
}
