import VigilIsolation
import Foundation
import Glibc
import VigilABI
import VigilCore

/// `vigil plugins check`, the parent's side: resolves the plugin as
/// `describe` does, runs the checks in a child process (this executable
/// again, told so by `childArguments`) and turns the child's stream of lines
/// (`ConformanceProtocol`) into a report, enforcing a deadline on every call
/// into the plugin. A plugin that crashes or hangs kills the child, never
/// this process, and the report names the signal or the deadline, and the
/// call it happened in.
public enum ConformanceRunner {
    /// The child's descriptor for the protocol stream.
    public static let childFD: Int32 = ChildProcess.childFD

    /// Exit statuses: all checks passed (skips allowed), some failed, the
    /// plugin could not be checked at all.
    public static let passed: Int32 = 0, failed: Int32 = 1, notChecked: Int32 = 2

    /// Runs the checks and writes the report through `report`, one line per
    /// call; refusals go through `error`. `childArguments` gives the child's
    /// arguments (after the executable) for the resolved path and, when a name
    /// was given, the name the plugin must have. Returns the exit status.
    public static func run(reference: String, catalog: PluginCatalog, timeout: Int64,
                           childArguments: (_ path: String, _ expectedName: String?) -> [String],
                           report: @escaping (String) -> Void, error: (String) -> Void) -> Int32 {
        let isPath = reference.contains("/") || reference.hasSuffix(".so")
        let path: String
        if isPath {
            path = reference
        } else if let found = catalog.locate(reference) {
            path = found
        } else {
            error("vigil: " + PluginRefusal(path: reference, reason:
                "no plugin named '\(reference)' in \(catalog.directories.joined(separator: ", "))").description)
            return notChecked
        }
        let child: ChildProcess
        do {
            child = try ChildProcess.spawn(arguments: childArguments(path, isPath ? nil : reference))
        } catch let failure {
            error("vigil: cannot start the checker process: \(failure)")
            return notChecked
        }
        var state = ReportState(path: path, timeout: timeout, report: report)
        report("Checking \(path)")
        return state.follow(child, error: error)
    }
}

/// What the child said so far, and the report being written.
struct ReportState {
    let path: String
    let timeout: Int64
    let report: (String) -> Void

    var step: String?
    var inFlight: (call: String, instance: String, since: Int64)?
    var lastEnded: (call: String, instance: String)?
    var refused: String?
    var unusable: String?
    var done = false
    var passed = 0, failed = 0, skipped = 0
    /// Per instance ("-" for load), the calls in order with their times.
    var timings: [(instance: String, calls: [String])] = []

    init(path: String, timeout: Int64, report: @escaping (String) -> Void) {
        self.path = path
        self.timeout = timeout
        self.report = report
    }

    static let nameWidth = 30

    func row(_ verdict: String, _ name: String, _ detail: String) {
        let padded = name.count >= Self.nameWidth ? name : name + String(repeating: " ", count: Self.nameWidth - name.count)
        report("  \(verdict)  \(padded)  \(detail)".trimmingTrailingSpaces())
    }

    mutating func timing(_ instance: String, _ entry: String) {
        if let i = timings.firstIndex(where: { $0.instance == instance }) {
            timings[i].calls.append(entry)
        } else {
            timings.append((instance, [entry]))
        }
    }

    static func ms(_ ns: Int64) -> String { String(format: "%.3f", Double(ns) / 1e6) }

    /// Takes one line of the child's stream into the report.
    mutating func handle(_ line: Substring) -> ChildProcess.LineMeaning {
        let f = ConformanceProtocol.split(line)
        func field(_ i: Int) -> String { i < f.count ? f[i] : "" }
        switch field(0) {
        case "plugin":
            report("  plugin \(field(1)) \(field(2)), ABI \(field(3)), \(field(4))")
        case "step":
            step = field(1)
        case "begin":
            let now = monotonicNanoseconds()
            inFlight = (field(1), field(2), now)
            return .callBegan(deadline: now + timeout)
        case "end":
            inFlight = nil
            lastEnded = (field(1), field(2))
            let ns = Int64(field(3)) ?? 0
            let status = field(4)
            timing(field(2), "\(field(1)) \(Self.ms(ns))" + (status == "VIGIL_OK" || field(1) == "load" ? "" : " (\(status))"))
            return .callEnded
        case "check":
            switch field(2) {
            case "pass": passed += 1; row("PASS", field(1), field(3))
            case "fail": failed += 1; row("FAIL", field(1), field(3))
            case "skip": skipped += 1; row("SKIP", field(1), field(3))
            default: row("INFO", field(1), field(3))
            }
        case "refused": refused = field(1)
        case "unusable": unusable = field(1)
        case "done":
            done = true
            return .done
        default: break  // a line from a newer vigil, or a torn last line: ignored
        }
        return .other
    }

    /// "poll of instance a", "load (dlopen and the entry point)".
    static func describe(call: String, instance: String) -> String {
        if instance == "-" { return call == "load" ? "load (dlopen and vigil_plugin_entry)" : call }
        return "\(call) of instance \(instance)"
    }

    /// Follows the child to its end; returns the exit status.
    mutating func follow(_ child: ChildProcess, error: (String) -> Void) -> Int32 {
        // Outside calls the child only waits briefly (push plugins, late emits):
        // silence for this long means it is stuck.
        let idleDeadline = timeout + 10_000_000_000
        // A child whose stream closed before `done` gets a second to exit.
        let ending = child.follow(idleTimeout: idleDeadline, closeGrace: 1_000_000_000) { line in handle(line) }

        if let refused {
            error("vigil: " + PluginRefusal(path: path, reason: refused).description)
            return ConformanceRunner.notChecked
        }
        if let unusable {
            error("vigil: cannot check \(path): \(unusable)")
            return ConformanceRunner.notChecked
        }

        let where_ = step ?? "checker"
        var ended: String?
        if ending == .timedOut, let timedOut = inFlight {
            ended = "\(Self.describe(call: timedOut.call, instance: timedOut.instance)) did not return within "
                + "\(Units.formatDuration(timeout)) (--timeout); the checker process was killed"
            timing(timedOut.instance, "\(timedOut.call) >\(Self.ms(timeout)) (killed)")
        } else if ending == .stalled {
            ended = "the checker process went silent for \(Units.formatDuration(idleDeadline)) outside any plugin call and was killed"
        } else if let signal = child.signal, !(done && signal == SIGKILL) {
            let name = ChildProcess.signalName(signal)
            if let call = inFlight {
                ended = "the plugin crashed: \(name) in \(Self.describe(call: call.call, instance: call.instance))"
                timing(call.instance, "\(call.call) (\(ChildProcess.shortSignalName(signal)))")
            } else {
                let after = lastEnded.map { "after \(Self.describe(call: $0.call, instance: $0.instance)) returned" }
                ended = "the checker process died from \(name) outside any plugin call ("
                    + [after, done ? "after the checks" : nil, "in a plugin thread?"].compactMap { $0 }.joined(separator: "; ") + ")"
            }
        } else if let code = child.exitCode, code != 0 {
            let during = inFlight.map { " during \(Self.describe(call: $0.call, instance: $0.instance)) (the plugin called exit?)" } ?? ""
            ended = "the checker process exited with status \(code)\(during)"
            if let call = inFlight { timing(call.instance, "\(call.call) (exit \(code))") }
        } else if !done {
            ended = "the checker process ended before the checks were done"
                + (inFlight.map { ", during \(Self.describe(call: $0.call, instance: $0.instance))" } ?? "")
        }
        if let ended {
            failed += 1
            row("FAIL", where_, ended)
            if !done { report("  (the checks after it were not run)") }
        }

        if !timings.isEmpty {
            report("Call timings (ms):")
            let width = max(4, timings.map { $0.instance == "-" ? 4 : $0.instance.count + 9 }.max() ?? 4)
            for (instance, calls) in timings {
                let label = instance == "-" ? "host" : "instance \(instance)"
                report("  " + label + String(repeating: " ", count: max(0, width - label.count)) + "  " + calls.joined(separator: ", "))
            }
        }
        report("\(passed) passed, \(failed) failed" + (skipped > 0 ? ", \(skipped) skipped" : ""))
        return failed > 0 ? ConformanceRunner.failed : ConformanceRunner.passed
    }
}

private extension String {
    func trimmingTrailingSpaces() -> String {
        var s = self
        while s.last == " " { s.removeLast() }
        return s
    }
}
