import Glibc
import VigilChildProcess
import VigilForeign
import VigilKit

/// Runs one Monitoring Plugins check (`check_*`, as Nagios, Icinga, Naemon
/// and Sensu run them) every interval and turns what it says into events:
/// its state with Nagios' SOFT and HARD types, its text, long output and
/// perfdata, and what the run cost.
///
/// Each run is a child of its own (`ChildRun`): never through a shell, with
/// a clean environment (`LC_ALL=C`, a fixed PATH, and what `env` adds), in a
/// process group of its own that is ended whole when the check exits or
/// times out (SIGTERM, then SIGKILL, then reaped), so no zombie and no
/// grandchild outlives it. The check file is held to the rules plugins are
/// (`FileTrust`), again before every run.
final class NagiosMonitor: PolledMonitor, @unchecked Sendable {  // immutable but for `machine`, the worker's alone
    static let spec = PluginSpec(
        name: "nagios", version: "1.0.0",
        summary: "Runs a Monitoring Plugins check (check_*) and reports its state, output and perfdata",
        defaultInterval: .seconds(60),
        events: [
            EventDecl("check", doc: """
                One per run of the check. Beside the declared fields, one number per perfdata label, named as \
                the label is (characters other than letters, digits and _ as _; perf_ before a name the check \
                event already has), in the base unit of its UOM (seconds, bytes, percent; a counter's c as is).
                """, fields: [
                FieldDecl("state", .string, doc: "OK, WARNING, CRITICAL or UNKNOWN"),
                FieldDecl("status", .int, doc: "the state as a number: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN"),
                FieldDecl("exit_status", .int, doc: "what the check exited with; -1 when it did not exit (a signal, a timeout, not run)"),
                FieldDecl("state_type", .string, doc: "SOFT while a problem is not yet confirmed by max_check_attempts results in a row, else HARD"),
                FieldDecl("attempt", .int, doc: "1 while OK; the how-many-th problem result in a row, at most max_check_attempts"),
                FieldDecl("max_attempts", .int),
                FieldDecl("output", .string, doc: "the first line, without its perfdata"),
                FieldDecl("long_output", .string, doc: "the lines after it, up to the perfdata that continues after a |"),
                FieldDecl("stderr", .string, doc: "the first KiB the check wrote to standard error, if any"),
                FieldDecl("duration", .double, unit: "seconds", doc: "from start to exit"),
                FieldDecl("waited", .double, unit: "seconds", doc: "time the run waited for a slot (the bound on checks at once)"),
                FieldDecl("cpu_user", .double, unit: "seconds", doc: "the check's own user CPU time (not what it left running)"),
                FieldDecl("cpu_system", .double, unit: "seconds"),
                FieldDecl("peak_memory", .int, unit: "bytes", doc: "the check's peak resident memory, as read while it ran (absent when it ended first)"),
                FieldDecl("timed_out", .bool, doc: "ended for running past timeout: the state is UNKNOWN"),
                FieldDecl("output_cut", .bool, doc: "the check printed more than 64 KiB; the rest was read and dropped"),
                FieldDecl("perfdata_errors", .int, doc: "perfdata of this run that could not be read (each logged)"),
            ], policy: .samples, dynamicFields: true),
            EventDecl("perfdata", doc: "One per perfdata label of each run, with its thresholds.", fields: [
                FieldDecl("label", .string, doc: "as the check wrote it, unquoted"),
                FieldDecl("value", .double, doc: "as written (absent when the check wrote U)"),
                FieldDecl("uom", .string, doc: "the unit of measure as written"),
                FieldDecl("base_value", .double, doc: "the value in base_unit"),
                FieldDecl("base_unit", .string, doc: "seconds, bytes, percent, counter, or the UOM as written"),
                FieldDecl("warn", .string, doc: "the warning range as written ([@][start:][end])"),
                FieldDecl("crit", .string, doc: "the critical range as written"),
                FieldDecl("min", .double),
                FieldDecl("max", .double),
                FieldDecl("level", .string, doc: "ok, warning or critical: where the value falls by the ranges"),
            ], policy: .samples, key: ["label"]),
            .occurrence("state_change", doc: "The state changed, or a problem became HARD.", fields: [
                FieldDecl("state", .string),
                FieldDecl("previous_state", .string),
                FieldDecl("state_type", .string),
                FieldDecl("previous_state_type", .string),
                FieldDecl("attempt", .int),
                FieldDecl("output", .string),
            ]),
        ])

    struct Options: DeclaredOptions {
        var command: [String] = []
        var timeout: Duration = .seconds(10)
        var maxCheckAttempts = 3
        var retryInterval: Duration = .seconds(30)
        var spread: Duration?
        var concurrency = 0
        var killGrace: Duration = .seconds(1)
        var env: JSONValue = .object([])
        var pluginDirs: [String] = ["/usr/lib/nagios/plugins", "/usr/lib/monitoring-plugins", "/usr/local/nagios/libexec",
                                    "/usr/lib64/nagios/plugins"]
        static let schema = OptionSchema<Options>(
            .required("command", \.command, example: "[/usr/lib/nagios/plugins/check_dummy, \"0\", fine]",
                      doc: "The check and its arguments, run without a shell; a name without / is looked up in plugin_dirs."),
            .option("timeout", \.timeout, doc: "A run still going after this is ended (its whole process group) and is UNKNOWN."),
            .option("max_check_attempts", \.maxCheckAttempts, doc: "Problem results in a row before the state is HARD."),
            .option("retry_interval", \.retryInterval, doc: "Between runs while a problem is SOFT."),
            .optional("spread", \.spread, example: "0s", doc: "Each run waits a share of this after its poll, fixed by the instance's name, so checks of one interval are spread over it (default: the interval; 0s: at once)."),
            .option("concurrency", \.concurrency, doc: "Most checks running at once in this process, over every nagios instance (the smallest given wins; 0: the number of cores)."),
            .option("kill_grace", \.killGrace, doc: "Between SIGTERM and SIGKILL when a run times out."),
            .option("env", \.env, doc: "Variables added to the check's environment (LC_ALL=C and a fixed PATH)."),
            .option("plugin_dirs", \.pluginDirs, doc: "Where a check named without a / is looked up, in order."))
    }

    static let path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    static let captureLimit = 65_536
    static let stderrShown = 1_024
    static let declared = Set(spec.events[0].fields.map(\.name))

    private let context: MonitorContext
    private let options: Options
    private let environment: [String: String]
    /// The check's state across runs; the worker's alone.
    private var machine: NagiosStateMachine
    /// Perfdata values left out of the last check event that said so: said
    /// again only when their number changes, not at every run.
    private var toldOmitted = 0
    /// The polls, handed to the worker.
    private let requests: PollRequests

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard let program = options.command.first, !program.isEmpty else {
            throw .invalidOption("command", "give the check to run, as in [check_load, -w, \"5,4,3\", -c, \"10,8,6\"]")
        }
        if program.contains("/") && !program.hasPrefix("/") {
            throw .invalidOption("command", "'\(program)' is a relative path: give an absolute one, or a name to look up in plugin_dirs")
        }
        guard options.timeout > .zero else { throw .invalidOption("timeout", "must be more than 0") }
        guard options.retryInterval > .zero else { throw .invalidOption("retry_interval", "must be more than 0") }
        guard options.killGrace >= .zero else { throw .invalidOption("kill_grace", "must not be negative") }
        guard (1...1000).contains(options.maxCheckAttempts) else {
            throw .invalidOption("max_check_attempts", "must be between 1 and 1000")
        }
        guard options.concurrency >= 0 else { throw .invalidOption("concurrency", "must not be negative") }
        var environment = ["LC_ALL": "C", "PATH": Self.path]
        guard case .object(let extra) = options.env else { throw .invalidOption("env", "must map names to strings") }
        for (name, value) in extra {
            guard Self.isVariableName(name) else { throw .invalidOption("env", "'\(name)' is not a variable name") }
            guard case .string(let text) = value, !text.utf8.contains(0) else {
                throw .invalidOption("env.\(name)", "must be a string")
            }
            environment[name] = text
        }
        self.context = context
        self.options = options
        self.environment = environment
        self.machine = NagiosStateMachine(maxAttempts: options.maxCheckAttempts)
        self.requests = try PollRequests()
    }

    static func isVariableName(_ name: String) -> Bool {
        guard let first = name.utf8.first, first == UInt8(ascii: "_") || (first | 0x20) >= 0x61 && (first | 0x20) <= 0x7a else { return false }
        return name.utf8.allSatisfy { $0 == UInt8(ascii: "_") || ($0 | 0x20) >= 0x61 && ($0 | 0x20) <= 0x7a || $0 >= 0x30 && $0 <= 0x39 }
    }

    func start() throws(MonitorError) {
        switch resolve() {
        case .success: break
        case .failure(let refusal): throw refusal.missing ? .unavailable(refusal.text) : .invalidConfig(refusal.text)
        }
        machine = NagiosStateMachine(maxAttempts: options.maxCheckAttempts)
        CheckSlots.shared.register(self, concurrency: options.concurrency)
        context.spawn("check") { [self] token in run(token) }
    }

    func stop() {
        CheckSlots.shared.unregister(self)
        requests.clear()
    }

    /// Asks the worker for a run and returns at once: the host's poll never
    /// waits for a check. A poll while a run is due or running is answered
    /// by that run.
    func poll() throws(MonitorError) { requests.ask() }

    // MARK: the check file

    struct Refusal: Error {
        var text: String
        /// Not there (unavailable), rather than refused.
        var missing: Bool
    }

    /// The check's path as found (a name looked up in plugin_dirs) and its
    /// real path, trusted: what runs.
    func resolve() -> Result<(found: String, real: String), Refusal> {
        let program = options.command[0]
        var candidates: [String] = []
        if program.hasPrefix("/") { candidates = [program] } else { candidates = options.pluginDirs.map { $0 + "/" + program } }
        guard let found = candidates.first(where: { access($0, X_OK) == 0 }) else {
            let looked = program.hasPrefix("/") ? "" : " (looked in \(options.pluginDirs.joined(separator: ", ")))"
            return .failure(Refusal(text: "check \(program) is not there or not executable\(looked)", missing: true))
        }
        guard let real = FileTrust.realPath(of: found) else {
            return .failure(Refusal(text: "check \(found): \(String(cString: strerror(errno)))", missing: true))
        }
        var st = stat()
        guard stat(real, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            return .failure(Refusal(text: "check \(real) is not a regular file", missing: false))
        }
        let problems = FileTrust.problems(real: real, file: st, owners: FileTrust.defaultOwners(), noun: "check")
        if let problem = problems.first {
            return .failure(Refusal(text: "check \(real) refused: \(problem.text); \(problem.fix)", missing: false))
        }
        return .success((found, real))
    }

    // MARK: the schedule

    /// The worker: a run at each poll, after the instance's share of
    /// `spread` (so checks polled together run spread over it), and while
    /// a problem is SOFT also every retry interval after the last run.
    private func run(_ token: Worker.Token) {
        let spread = options.spread.map { max(0, $0.nanoseconds) } ?? context.interval.nanoseconds
        let offset = Int64(Double(spread) * Self.share(of: context.instanceName))
        var retryDue: Int64?
        while !token.isCancelled {
            let now = Worker.monotonicNow()
            var due = requests.waiting.map { $0 &+ offset }
            if let retry = retryDue { due = min(due ?? retry, retry) }
            if let due, due <= now {
                requests.take()
                retryDue = nil
                guard let retry = check(token) else { return }
                if retry { retryDue = now &+ max(options.retryInterval.nanoseconds, 1_000_000) }
                continue
            }
            if !requests.wait(token, until: due) { return }
        }
    }

    /// Where in [0, 1) the instance's runs fall: FNV-1a of its name, mixed
    /// by murmur3's finalizer (FNV alone barely moves the high bits for
    /// names that differ in their last letter: check1, check2).
    static func share(of name: String) -> Double {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in name.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        hash ^= hash >> 33
        hash &*= 0xff51_afd7_ed55_8ccd
        hash ^= hash >> 33
        hash &*= 0xc4ce_b9fe_1a85_ec53
        hash ^= hash >> 33
        return Double(hash >> 11) / Double(UInt64(1) << 53)
    }

    // MARK: one run

    /// Runs the check once and emits what it said. Returns whether the next
    /// run is a retry, or nil when the instance is stopping.
    private func check(_ token: Worker.Token) -> Bool? {
        let asked = Worker.monotonicNow()
        guard CheckSlots.shared.acquire(isCancelled: { token.isCancelled }) else { return nil }
        let waited = Worker.monotonicNow() - asked
        var result: Run
        switch resolve() {
        case .failure(let refusal):
            CheckSlots.shared.release()
            result = Run(state: .unknown, output: "UNKNOWN: cannot run the check: \(refusal.text)")
        case .success(let real):
            // argv[0] as found, not as resolved: check_ftp, check_pop and
            // check_udp are links to check_tcp that know what to do by it.
            var argv = options.command
            argv[0] = real.found
            do {
                let child = try ChildRun.spawn(argv: argv, program: real.real, environment: environment, searchPath: false)
                let ending = child.supervise(input: [], timeout: options.timeout.nanoseconds, killGrace: options.killGrace.nanoseconds,
                                             captureLimit: Self.captureLimit, endGroup: true, cancel: token.cancelFD)
                CheckSlots.shared.release()
                if ending.cancelled { return nil }
                result = Run(ending, timeout: options.timeout)
            } catch {
                CheckSlots.shared.release()
                result = Run(state: .unknown, output: "UNKNOWN: cannot run the check: \(error)")
            }
        }
        result.waited = waited
        return emit(result)
    }

    /// One run, read.
    struct Run {
        var state: NagiosState
        var exitStatus: Int64 = -1
        var parsed = NagiosOutput()
        var stderr = ""
        var duration: Int64 = 0
        var waited: Int64 = 0
        var userCPU: Int64?
        var systemCPU: Int64?
        var peakMemory: Int64?
        var timedOut = false
        var cut = false

        init(state: NagiosState, output: String) {
            self.state = state
            self.parsed = NagiosOutput(text: output)
        }

        init(_ ending: ChildRun.Ending, timeout: Duration) {
            parsed = NagiosOutput.parse(ending.stdout, cut: ending.stdoutCut)
            cut = ending.stdoutCut
            if cut {
                parsed.errors.append("the output was cut at \(NagiosMonitor.captureLimit / 1024) KiB: what came after it, perfdata too, was dropped")
            }
            stderr = String(decoding: ending.stderr.prefix(NagiosMonitor.stderrShown), as: UTF8.self)
            duration = ending.duration
            userCPU = ending.userCPU
            systemCPU = ending.systemCPU
            peakMemory = ending.peakMemory
            timedOut = ending.timedOut
            let raw = ending.status ?? -1
            if ending.timedOut {
                state = .unknown
                let printed = [parsed.text, parsed.longOutput].filter { !$0.isEmpty }.joined(separator: "\n")
                parsed = NagiosOutput(text: "UNKNOWN: the check timed out after \(NagiosMonitor.text(timeout)) and was ended", longOutput: printed)
            } else if ending.status == nil {
                state = .unknown
                parsed.text = "UNKNOWN: the check's exit status was lost (reaped by the kernel)"
            } else if raw & 0x7f != 0 {
                state = .unknown
                let printed = [parsed.text, parsed.longOutput].filter { !$0.isEmpty }.joined(separator: "\n")
                parsed = NagiosOutput(text: "UNKNOWN: the check was ended by signal \(raw & 0x7f)", longOutput: printed,
                                      perfdata: [], errors: [])
            } else {
                let status = Int((raw >> 8) & 0xff)
                exitStatus = Int64(status)
                state = NagiosState(exitStatus: status)
                if parsed.text.isEmpty && parsed.longOutput.isEmpty {
                    parsed.text = "(the check printed nothing; it exited with \(status))"
                }
            }
        }
    }

    /// `10s`, `1.5s`.
    static func text(_ duration: Duration) -> String {
        let ms = duration.nanoseconds / 1_000_000
        return ms % 1000 == 0 ? "\(ms / 1000)s" : "\(Double(ms) / 1000)s"
    }

    private static func severity(_ state: NagiosState) -> Severity {
        switch state {
        case .ok: .info
        case .warning: .warning
        case .critical: .critical
        case .unknown: .error
        }
    }

    private func emit(_ run: Run) -> Bool {
        let step = machine.record(run.state)
        for error in run.parsed.errors {
            context.log(.warning, "perfdata of \(options.command[0]) not read: \(error)")
        }
        func seconds(_ ns: Int64) -> Value { .double(Double(ns) / 1e9) }
        var fields: [(String, Value)] = [
            ("state", .string(run.state.description)), ("status", .int(Int64(run.state.rawValue))),
            ("exit_status", .int(run.exitStatus)), ("state_type", .string(machine.type.rawValue)),
            ("attempt", .int(Int64(machine.attempt))), ("max_attempts", .int(Int64(machine.maxAttempts))),
            ("output", .text(run.parsed.text)), ("long_output", .text(run.parsed.longOutput)),
            ("duration", seconds(run.duration)), ("waited", seconds(run.waited)),
            ("timed_out", .bool(run.timedOut)), ("output_cut", .bool(run.cut)),
            ("perfdata_errors", .int(Int64(run.parsed.errors.count))),
        ]
        if !run.stderr.isEmpty { fields.append(("stderr", .text(run.stderr))) }
        if let cpu = run.userCPU { fields.append(("cpu_user", seconds(cpu))) }
        if let cpu = run.systemCPU { fields.append(("cpu_system", seconds(cpu))) }
        if let peak = run.peakMemory { fields.append(("peak_memory", .int(peak))) }
        var names = Self.declared
        // What the host takes of one event: a datum past it is in its
        // perfdata event only, and the check event still goes.
        var omitted = 0
        for datum in run.parsed.perfdata {
            guard let value = datum.base.value else { continue }
            let name = Self.fieldName(for: datum.label, taken: Self.declared)
            guard !names.contains(name) else { continue }  // a label given twice: the first
            guard name.utf8.count <= Int(VIGIL_MAX_NAME_BYTES), fields.count < Int(VIGIL_MAX_EVENT_FIELDS) else {
                omitted += 1
                continue
            }
            names.insert(name)
            fields.append((name, .double(value)))
        }
        if omitted != toldOmitted, omitted > 0 {
            context.log(.warning, "\(omitted) perfdata values of \(options.command[0]) are not fields of its check event (more than \(VIGIL_MAX_EVENT_FIELDS) fields, or a label over \(VIGIL_MAX_NAME_BYTES) bytes): each is in its perfdata event")
        }
        toldOmitted = omitted
        let severity = Self.severity(run.state)
        context.emit("check", severity: severity, fields: fields)

        for datum in run.parsed.perfdata {
            var perf: [(String, Value)] = [("label", .string(datum.label)), ("uom", .string(datum.uom))]
            let base = datum.base
            if let value = datum.value { perf.append(("value", .double(value))) }
            if let value = base.value { perf.append(("base_value", .double(value))) }
            perf.append(("base_unit", .string(base.unit)))
            if let warn = datum.warn { perf.append(("warn", .string(warn.text))) }
            if let crit = datum.crit { perf.append(("crit", .string(crit.text))) }
            if let min = datum.min { perf.append(("min", .double(min))) }
            if let max = datum.max { perf.append(("max", .double(max))) }
            if let value = datum.value {
                let level = datum.crit?.alerts(value) == true ? "critical" : datum.warn?.alerts(value) == true ? "warning" : "ok"
                perf.append(("level", .string(level)))
            }
            context.emit("perfdata", fields: perf)
        }

        if step.changed {
            context.emit("state_change", severity: severity, fields: [
                ("state", .string(run.state.description)), ("previous_state", .string(step.previous.description)),
                ("state_type", .string(machine.type.rawValue)), ("previous_state_type", .string(step.previousType.rawValue)),
                ("attempt", .int(Int64(machine.attempt))), ("output", .text(run.parsed.text)),
            ])
        }
        return step.retry
    }

    /// A perfdata label as a field name: letters, digits and _, not starting
    /// with a digit, and perf_ before a name the event already has.
    static func fieldName(for label: String, taken: Set<String>) -> String {
        var name = String(String.UnicodeScalarView(label.unicodeScalars.map { c in
            c.isASCII && (c.properties.isAlphabetic || ("0"..."9").contains(c) || c == "_") ? c : "_"
        }))
        if name.isEmpty || name.unicodeScalars.first.map({ ("0"..."9").contains($0) }) == true { name = "_" + name }
        return taken.contains(name) ? "perf_" + name : name
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(NagiosMonitor.self, a, r) }
