@preconcurrency import CVigilPlugin
import Foundation
import Logging
import VigilABI
import VigilCore

extension VigilRuntime {
    /// A JSON summary of the run: per sink and per monitor counters, the time
    /// each sink spent from its first to its last write, and the process's CPU
    /// time and memory (for benchmarks and for operators' scripts).
    func writeSummary(to path: String) {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        let cpu = Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
            + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        var out: [UInt8] = []
        func key(_ k: String) { JSONLineEncoder.appendString(k, to: &out); out.append(UInt8(ascii: ":")) }
        func num<T: BinaryInteger>(_ k: String, _ v: T, last: Bool = false) {
            key(k); JSONLineEncoder.appendInteger(v, to: &out); if !last { out.append(UInt8(ascii: ",")) }
        }
        out += Array("{".utf8)
        num("elapsed_ns", stopped - started)
        key("cpu_seconds"); JSONLineEncoder.appendDouble(cpu, to: &out); out.append(UInt8(ascii: ","))
        num("max_rss_kib", usage.ru_maxrss)
        num("private_dirty_kib", Self.privateDirtyKiB())
        num("events", bus.lastSequence)
        num("unrouted", bus.unrouted.load(ordering: .relaxed))
        key("sinks"); out.append(UInt8(ascii: "["))
        for (i, runner) in sinks.enumerated() {
            let s = runner.stats
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("name"); JSONLineEncoder.appendString(s.name, to: &out); out.append(UInt8(ascii: ","))
            key("type"); JSONLineEncoder.appendString(s.type, to: &out); out.append(UInt8(ascii: ","))
            num("written", s.written); num("dropped", s.dropped); num("failed", s.failed)
            num("high_water", s.highWater)
            num("first_write_ns", runner.firstWrite); num("last_write_ns", runner.lastWrite, last: true)
            out.append(UInt8(ascii: "}"))
        }
        out += Array("],".utf8)
        key("monitors"); out.append(UInt8(ascii: "["))
        for (i, instance) in instances.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("name"); JSONLineEncoder.appendString(instance.name, to: &out); out.append(UInt8(ascii: ","))
            num("emitted", instance.emitted.load(ordering: .relaxed))
            num("refused", instance.refusals.total)
            num("polls", instance.polls.load(ordering: .relaxed))
            num("poll_errors", instance.pollErrors.load(ordering: .relaxed))
            num("poll_ns", instance.pollNanoseconds.load(ordering: .relaxed), last: true)
            out.append(UInt8(ascii: "}"))
        }
        out += Array("],".utf8)
        key("actions"); out.append(UInt8(ascii: "["))
        for (i, rule) in resolution.rules.filter({ $0.exec != nil }).enumerated() {
            let c = actions.counters(for: rule.name)
            if i > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            key("rule"); JSONLineEncoder.appendString(rule.name, to: &out); out.append(UInt8(ascii: ","))
            num("started", c.started); num("succeeded", c.succeeded); num("failed", c.failed)
            num("timed_out", c.timedOut); num("skipped", c.skipped, last: true)
            out.append(UInt8(ascii: "}"))
        }
        out += Array("]}\n".utf8)
        do {
            try Data(out).write(to: URL(fileURLWithPath: path))
        } catch {
            logger.error("cannot write the summary to \(path): \(error)")
        }
    }

    /// Private_Dirty of this process (/proc/self/smaps_rollup), KiB; 0 if unknown.
    static func privateDirtyKiB() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/smaps_rollup", encoding: .utf8) else { return 0 }
        for line in text.split(separator: "\n") where line.hasPrefix("Private_Dirty:") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0
        }
        return 0
    }

    /// Logs what every sink delivered and dropped.
    func report() {
        var lost = false
        for stats in sinks.map(\.stats) {
            let line = "sink \(stats.name) (\(stats.type)): \(stats.written) written, \(stats.dropped) dropped (queue full), \(stats.failed) failed, queue high-water \(stats.highWater)/\(manifest.sinks.first { $0.name == stats.name }!.queueCapacity)"
            if stats.dropped > 0 || stats.failed > 0 {
                lost = true
                logger.warning("\(line)")
            } else {
                logger.info("\(line)")
            }
        }
        for instance in instances where instance.refusals.total > 0 {
            let reasons = instance.refusals.snapshot.map { "\($0.count) \($0.reason.name)" }.joined(separator: ", ")
            logger.warning("monitor \(instance.name): emits refused: \(reasons)")
        }
        if !lost { logger.info("stopped; \(bus.lastSequence) events, none lost") }
    }

}
