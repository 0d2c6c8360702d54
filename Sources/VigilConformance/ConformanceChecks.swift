@preconcurrency import CVigilPlugin
import Foundation
import Glibc
import VigilABI
import VigilCore

/// The checks, in the order they run and are reported: each announces its
/// `step`, makes its calls through the session and reports one `check` line.
extension ConformanceSession {
    func run() {
        defer { out.send("done") }
        guard load() else { return }
        checkDescription()
        guard bindOptions() else { return }
        guard let a = checkCreate() else {
            finalChecks()
            return
        }
        if plugin.description.kind == .output {
            checkOutputWrites(a)
            checkOutputOddEvents()
            return
        }
        let running = checkLifecycle(a)
        checkStopWhenStopped(a)
        if running { checkTwoInstances() } else {
            report(Name.twoInstances, CheckOutcome(skipped: "the first instance did not run"))
        }
        finalChecks()
    }

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
        let interval = d.defaultIntervalShown
        out.send("plugin", d.name, d.version, "\(d.abiMajor).\(d.abiMinor)", d.kind == .output ? "an output" : d.polled ? "polled, default interval \(interval)" : "push (not polled)", d.path)
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
        let examples = d.options.filter { $0.exampleText != nil }.count
        let dynamic = d.events.filter(\.dynamicFields).map { "'\($0.kind)'" }
        var detail = d.options.isEmpty ? "no options, "
            : "\(d.options.count) option\(d.options.count == 1 ? "" : "s") (\(defaults) with a default\(examples > 0 ? ", \(examples) with an example" : ""), which type-check\(defaults + examples == 1 ? "s" : "")), "
        detail += "\(d.events.count) event kind\(d.events.count == 1 ? "" : "s")"
        if !dynamic.isEmpty { detail += " (dynamic fields: \(dynamic.joined(separator: ", ")))" }
        report(Name.description, outcome, pass: detail)
    }

    /// Declared defaults, then `--options`, then `--option`: every declared
    /// option's value, or why there is none. Given none of them, an option
    /// with a declared example (ABI 1.3) takes it instead of its default:
    /// the plugin is checked as shipped, with values its author says work
    /// on any machine.
    private func bindOptions() -> Bool {
        let d = plugin.description
        let location = SourceLocation(file: "defaults", line: 1, column: 1)
        let (defaults, _) = OptionBinder.bind(MonitorConfig(name: "check", plugin: d.path, location: location), to: d)
        var values: [String: OptionValue] = [:]
        for option in defaults { values[option.name] = option.value }
        if request.optionPairs.isEmpty && request.optionsYAML == nil {
            for spec in d.options {
                // The loader refused a description whose example does not type-check.
                if let text = spec.exampleText, case .success(let value) = PluginDescription.value(of: text, as: spec.type, path: d.path) {
                    values[spec.name] = value
                }
            }
        }
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
        guard request.optionPairs.isEmpty && request.optionsYAML == nil else { return Name.createGiven }
        return plugin.description.options.contains { $0.exampleText != nil } ? Name.createExamples : Name.createDefaults
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

    /// An output (ABI 1.5): started, given the same batch of events twice
    /// (attempts 1 and 2), flushed, stopped and destroyed; every answer is
    /// read as the host's sinks read it (OutputBatch).
    private func checkOutputWrites(_ a: ProbeInstance) {
        out.send("step", Name.outputWrites)
        var outcome = CheckOutcome()
        let start = self.start(a)
        guard start.ok else {
            outcome.fail("start returned \(start.said)")
            report(Name.outputWrites, outcome)
            _ = destroy(a)
            return
        }
        let now = realtimeNanoseconds()
        var events: [Event] = []
        for i in 1...3 {
            let fields: [Field] = [Field("value", .double(Double(i) / 4)), Field("count", .int(Int64(i))),
                                   Field("name", .string("event \(i)")), Field("ok", .bool(i % 2 == 0))]
            events.append(Event(time: now, monitor: "check", plugin: "check", kind: "sample", severity: .info, seq: UInt64(i),
                                fields: fields))
        }
        var said: [String] = []
        for attempt in UInt32(1)...2 {
            guard let answer = write(events, host: "vigil-check", attempt: attempt, to: a, "write (attempt \(attempt))", &outcome)
            else { break }
            said.append("attempt \(attempt): \(answer.delivered) delivered, \(answer.retried) to retry, \(answer.rejected) rejected"
                        + (answer.rejected > 0 && !answer.message.isEmpty ? " (\(answer.message))" : ""))
        }
        if descriptor.flush != nil {
            let flush = call("flush", a) { err in descriptor.flush(a.handle, monotonicNanoseconds() + 1_000_000_000, err) }
            if !flush.ok && flush.status != VIGIL_E_TEMPORARY { outcome.fail("flush returned \(flush.said)") }
            said.append("flushed")
        }
        let stop = self.stop(a)
        if !stop.ok { outcome.notes.append("stop returned \(stop.said)") }
        _ = destroy(a)
        failOutputEmits(a, &outcome)
        report(Name.outputWrites, outcome, pass: "a batch of 3 events written twice: " + said.joined(separator: "; "))
    }

    /// A second instance gets what a host may hand over and a plugin
    /// author may not have thought of (no fields, empty and long strings,
    /// NaN and infinities, extreme integers, a batch of one and one of the
    /// largest sink batch), then is stopped and destroyed right after a write,
    /// without a flush: as the host does at a stop while the output answered
    /// RETRY, with the batch still pending on its side.
    private func checkOutputOddEvents() {
        out.send("step", Name.outputHostile)
        var outcome = CheckOutcome()
        let (b, created) = create("b")
        guard created.ok else {
            report(Name.outputHostile, CheckOutcome(skipped: "create of a second instance returned \(created.said)"))
            return
        }
        let started = start(b)
        guard started.ok else {
            outcome.fail("start returned \(started.said)")
            report(Name.outputHostile, outcome)
            _ = destroy(b)
            return
        }
        let now = realtimeNanoseconds()
        let long = String(repeating: "x", count: 4096)
        func event(_ seq: UInt64, _ fields: [Field], kind: String = "sample", monitor: String = "check") -> Event {
            Event(time: now, monitor: monitor, plugin: "check", kind: kind, severity: .warning, seq: seq, fields: fields)
        }
        let odd: [Event] = [
            event(1, []),
            event(2, [Field("", .string("")), Field("empty", .string(""))], kind: ""),
            event(3, [Field("nan", .double(.nan)), Field("inf", .double(.infinity)), Field("minus_inf", .double(-.infinity)),
                      Field("min", .int(.min)), Field("max", .int(.max)), Field("tiny", .double(.leastNonzeroMagnitude))]),
            event(4, [Field(long, .string(long)), Field("quote\"back\\slash\nnew line", .string("\u{0}\u{1}é\u{7F}"))],
                  monitor: "a monitor / with: odd=chars"),
        ]
        let many = (0..<500).map { event(UInt64(100 + $0), [Field("n", .int(Int64($0)))]) }
        var said: [String] = []
        for (what, batch) in [("4 odd events", odd), ("1 event", [odd[2]]), ("\(many.count) events (a plugin sink's default batch)", many)] {
            guard let answer = write(batch, host: "", attempt: 1, to: b, "write of \(what)", &outcome) else { break }
            said.append("\(what): \(answer.delivered) delivered, \(answer.retried) to retry, \(answer.rejected) rejected")
        }
        // Closed with the last batch pending: no flush, stop, destroy.
        let stop = self.stop(b)
        if !stop.ok { outcome.notes.append("stop returned \(stop.said)") }
        let destroyed = destroy(b)
        if !destroyed.ok { outcome.fail("destroy \(destroyed.said)") }
        failOutputEmits(b, &outcome)
        report(Name.outputHostile, outcome, pass: said.joined(separator: "; ") + "; stopped and destroyed without a flush")
    }

    /// `events` written to `p` as one batch, as the host's plugin sinks write
    /// them (OutputBatch), and the output's answer; nil when the call did not
    /// answer. What went wrong fails `outcome`, the write told as `what`
    /// ("write of 1 event"); an answer of TEMPORARY does not: it asks for a retry.
    private func write(_ events: [Event], host: String, attempt: UInt32, to p: ProbeInstance, _ what: String,
                       _ outcome: inout CheckOutcome) -> OutputBatch.Answer? {
        var answer: OutputBatch.Answer?
        let result = call("write", p) { _ in
            answer = OutputBatch.write(events, host: host, attempt: attempt) { batch, result, err in
                descriptor.write(p.handle, batch, result, err)
            }
            return answer!.status
        }
        guard let answer else {
            outcome.fail("\(what) \(result.said)")
            return nil
        }
        if answer.status != VIGIL_OK && answer.status != VIGIL_E_TEMPORARY {
            outcome.fail("\(what) returned \(statusName(answer.status)): \(answer.message)")
        }
        return answer
    }

    /// An output that called emit: `vigil run` refuses every such event
    /// (VIGIL_E_UNSUPPORTED), so the check fails as the run would lose them.
    private func failOutputEmits(_ p: ProbeInstance, _ outcome: inout CheckOutcome) {
        let emits = ledger.lock.withLock { _ in p.outputEmits }
        if emits > 0 {
            outcome.fail("instance \(p.id) called emit \(emits) time\(emits == 1 ? "" : "s"): an output has nothing to emit (answered VIGIL_E_UNSUPPORTED, as vigil run does)")
        }
    }

    private func finalChecks() {
        let (total, fromThreads, threads, counts, problems, others) = ledger.lock.withLock { _ in
            (ledger.total, ledger.fromPluginThreads, ledger.pluginThreads.count, ledger.kindCounts,
             ledger.problemOrder.map { ($0, ledger.problemCounts[$0] ?? 0) }, ledger.otherProblems)
        }
        let perProbe = ledger.lock.withLock { _ in
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

