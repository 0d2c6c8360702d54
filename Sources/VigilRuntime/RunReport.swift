import Foundation
import Logging
import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

@preconcurrency import CVigilPlugin

/// What a run did, written by `--summary FILE` as JSON (snake_case keys)
/// and told, in part, by the exit lines: per sink what was written and what
/// was lost, by reason; per monitor what it emitted; per rule with a program,
/// how its runs went; and the process's CPU time and memory (for benchmarks
/// and operators' scripts).
public struct RunSummary: Codable, Sendable {
    public struct Sink: Codable, Sendable {
        public var name: String
        public var type: String
        /// Events the sink's queue took.
        public var accepted: UInt64
        /// Events delivered.
        public var written: UInt64
        /// Events lost, by reason (`queue_full`, `shutdown`, `write_failed`,
        /// `kernel_buffer`, `too_large`).
        public var lost: LossCounts
        /// `lost.queue_full + lost.shutdown` (kept for older scripts).
        public var dropped: UInt64
        /// `lost.write_failed + lost.kernel_buffer + lost.too_large` (the same).
        public var failed: UInt64
        public var highWater: Int
        public var queueSize: Int
        /// Events delivered cut short to fit their transport (syslog's size limits).
        public var truncated: UInt64 = 0
        /// Events written that a stream sink's kernel still held, on a
        /// healthy connection, when the sink closed it at exit: handed on by
        /// the kernel after vigil ended, not lost, and not confirmed.
        public var unconfirmed: UInt64 = 0
        /// Events a listening sink had no client for: not written, not lost.
        public var noClient: UInt64 = 0
        /// What happened to its transport, by `TransportEvent` name (the
        /// non-zero ones): reconnections, a peer that closed, a file or
        /// directory made again, clients cut off.
        public var transport: [String: UInt64] = [:]
        /// A disk buffer's account (nil without one): kept for the next
        /// start, replayed from the last run, possible duplicates, corrupt
        /// segments skipped.
        var buffer: SinkBufferReport?
        /// Monotonic times of the first and last delivery (0: none).
        public var firstWriteNs: Int64
        public var lastWriteNs: Int64
        /// An output plugin's (`type: plugin`; absent for other sinks): where
        /// it ran, its runners that ended (crashes, hangs killed) and the new
        /// ones started.
        public var isolation: String?
        public var crashes: UInt64?
        public var restarts: UInt64?
        /// An output plugin's writes answered RETRY (in whole or in part)
        /// and the events in them answered RETRY, written again.
        public var retries: UInt64?
        public var retriedEvents: UInt64?
        /// Removed by a reload: its counts are the run's, but it no longer runs.
        public var retired: Bool = false
        /// A `history` sink's points it did not keep, by reason (`max_series`,
        /// `out_of_order`) and those it let go for room (`max_memory`): its
        /// events were delivered, so these are no events lost, but said.
        public var historyDropped: [String: UInt64]?
        /// A `remote_write` sink's queue and samples (absent for other sinks).
        public var sendQueue: SendQueueReport?
    }

    public struct Monitor: Codable, Sendable {
        public var name: String
        /// Removed by a reload: its counts are the run's, but it no longer runs.
        public var retired: Bool = false
        public var emitted: UInt64
        /// Emits refused, in all and by reason (`malformed`, `duplicate_field`…;
        /// docs/plugins.md has the list).
        public var refused: UInt64
        public var refusedBy: [String: UInt64]
        /// Calls through the handle of a destroyed instance (ignored).
        public var lateCalls: UInt64
        /// Log messages cut at 8 KiB.
        public var logCuts: UInt64
        /// Log lines dropped over the rate limit (`PluginLogLimit`).
        public var logSuppressed: UInt64
        public var polls: UInt64
        public var pollErrors: UInt64
        public var pollNs: UInt64
    }

    public struct Action: Codable, Sendable {
        public var rule: String
        public var started: Int
        public var succeeded: Int
        public var failed: Int
        public var timedOut: Int
        public var skipped: Int
    }

    public var elapsedNs: Int64
    public var cpuSeconds: Double
    /// CPU time of the host's children that ended: runners above all (and
    /// probes, rule actions).
    public var childrenCpuSeconds: Double
    public var maxRssKib: Int
    public var privateDirtyKib: Int
    /// Events sequenced by the host (every emitted event that was not refused).
    public var events: UInt64
    /// Events no route sent anywhere (not a loss: nothing asked for them).
    public var unrouted: UInt64
    /// Events lost in all sinks, every reason.
    public var lost: UInt64
    /// Parts of disk buffer segments skipped as corrupt: the events in them
    /// are lost, how many cannot be known. Any makes the exit status 3.
    public var corruptBufferParts: Int {
        sinks.reduce(0) { $0 + ($1.buffer?.corruptSegments ?? 0) }
    }
    public var sinks: [Sink]
    public var monitors: [Monitor]
    public var actions: [Action]

    /// The summary as one line of JSON.
    public func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.keyEncodingStrategy = .convertToSnakeCase
        encoder.outputFormatting = [.sortedKeys]
        return try encoder.encode(self) + Data("\n".utf8)
    }
}

extension VigilRuntime {
    /// The counters of the run so far (complete once `run` has returned).
    func summary() -> RunSummary {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        func seconds(_ usage: rusage) -> Double {
            Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6
                + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
        }
        let cpu = seconds(usage)
        var children = rusage()
        getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &children)
        // Sinks and monitors a reload retired count too: what they lost is
        // the run's. One entry per name; those no longer in the manifest say so.
        let (sinkNames, monitorNames) = (Set(self.sinks.map(\.config.name)), Set(instances.map(\.name)))
        let sinks = sinkFigures.map { s in
            var s = s
            s.retired = !sinkNames.contains(s.name)
            return s
        }
        let monitors = monitorFigures.map { f in
            RunSummary.Monitor(name: f.name, retired: !monitorNames.contains(f.name), emitted: f.emitted, refused: f.refused,
                               refusedBy: f.refusedBy, lateCalls: f.lateCalls, logCuts: f.logCuts,
                               logSuppressed: f.logSuppressed, polls: f.polls, pollErrors: f.pollErrors, pollNs: f.pollNanoseconds)
        }
        let actions = ruleSpecs.filter { $0.exec != nil }.map { rule in
            let c = self.actions.counters(for: rule.name)
            return RunSummary.Action(rule: rule.name, started: c.started, succeeded: c.succeeded, failed: c.failed,
                                     timedOut: c.timedOut, skipped: c.skipped)
        }
        return RunSummary(elapsedNs: stopped.subtractingSaturating(started), cpuSeconds: cpu,
                          childrenCpuSeconds: seconds(children), maxRssKib: usage.ru_maxrss,
                          privateDirtyKib: Self.privateDirtyKiB(), events: bus.lastSequence,
                          unrouted: bus.unrouted.load(ordering: .relaxed),
                          lost: sinks.reduce(0) { $0 &+ $1.lost.total }, sinks: sinks, monitors: monitors, actions: actions)
    }

    /// Writes `summary` as JSON to `path` (`--summary`).
    func writeSummary(_ summary: RunSummary, to path: String) {
        do {
            try summary.json().write(to: URL(fileURLWithPath: path))
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

    /// Logs what every sink delivered and lost, by reason. "none lost" only
    /// when every counter of every sink is zero.
    func report(_ summary: RunSummary) {
        for s in summary.sinks {
            var notes: [String] = []
            if s.truncated > 0 { notes.append("\(s.truncated) truncated to fit") }
            if s.unconfirmed > 0 { notes.append("\(s.unconfirmed) still in the kernel's send queue at exit, unconfirmed") }
            if s.noClient > 0 { notes.append("\(s.noClient) not sent: no client was connected") }
            let head = "sink \(s.name) (\(s.type)\(s.retired ? ", removed by a reload" : "")): \(s.written) written" + (notes.isEmpty ? "" : " (\(notes.joined(separator: "; ")))")
            var tail = "queue high-water \(s.highWater)/\(s.queueSize)"
            if let crashes = s.crashes, crashes > 0 {
                tail += "; its output's runner ended \(counted(crashes, "time")) and was restarted \(s.restarts ?? 0)"
            }
            if let b = s.buffer {
                tail += "; disk buffer: \(b.buffered) kept for the next start"
                if b.replayed > 0 { tail += ", \(b.replayed) replayed from the last run (\(b.possibleDuplicates) possibly sent twice)" }
                if b.corruptSegments > 0 { tail += ", \(b.corruptSegments) corrupt segment parts skipped (\(b.corruptBytes) bytes)" }
            }
            if let dropped = s.historyDropped, dropped.values.contains(where: { $0 > 0 }) {
                // Points, not events: the events reached the history; what it did not keep of them is said.
                tail += "; history: points not kept: " + dropped.sorted { $0.key < $1.key }.filter { $0.value > 0 }
                    .map { "\($0.value) \($0.key == "max_memory" ? "let go for max_memory" : $0.key)" }.joined(separator: ", ")
            }
            if let q = s.sendQueue {
                tail += "; remote write: \(q.samplesSent) of \(q.samplesIn) samples sent in \(counted(q.requests, "request")), \(counted(q.retries, "attempt")) retried"
                // Samples of delivered events the protocol cannot carry are "not sent";
                // those of events lost with their request, "lost".
                let unsendable: Set<String> = ["out_of_order", "max_series"]
                let notSent = q.samplesLost.filter { $0.value > 0 && unsendable.contains($0.key) }.sorted { $0.key < $1.key }
                let lost = q.samplesLost.filter { $0.value > 0 && !unsendable.contains($0.key) }.sorted { $0.key < $1.key }
                if !lost.isEmpty { tail += ", samples lost: " + lost.map { "\($0.value) \($0.key)" }.joined(separator: ", ") }
                if !notSent.isEmpty { tail += ", samples not sent: " + notSent.map { "\($0.value) \($0.key)" }.joined(separator: ", ") }
                if q.staleMarkers > 0 { tail += ", \(counted(q.staleMarkers, "series", plural: "series")) ended with a stale marker" }
            }
            if s.lost.total > 0 {
                logger.warning("\(head), \(s.lost.total) lost: \(s.lost.description); \(tail)")
            } else {
                logger.info("\(head), none lost; \(tail)")
            }
        }
        for monitor in summary.monitors where monitor.refused > 0 {
            let reasons = monitor.refusedBy.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            logger.warning("monitor \(monitor.name): emits refused: \(reasons)")
        }
        let corrupt = summary.corruptBufferParts
        // Written, but not confirmed delivered: said beside "none lost", never hidden by it.
        let unconfirmed = summary.sinks.reduce(UInt64(0)) { $0 &+ $1.unconfirmed }
        var still = unconfirmed > 0 ? "; \(unconfirmed) still in the kernel's send queues at exit, unconfirmed" : ""
        // Samples a remote_write sink could not send though their events
        // were delivered (the protocol carries one sample a millisecond per
        // series; max_series): said beside "none lost" too.
        var unsent: [String: UInt64] = [:]
        for s in summary.sinks {
            for (reason, n) in s.sendQueue?.samplesLost ?? [:] where n > 0 && (reason == "out_of_order" || reason == "max_series") {
                unsent[reason, default: 0] &+= n
            }
        }
        if !unsent.isEmpty {
            let total = unsent.values.reduce(0, &+)
            still += "; \(total) samples not sent by remote_write sinks (" + unsent.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ") + ")"
        }
        // A monitor left running makes the run exit 1, before lost events' 3.
        let status = abandoned.isEmpty ? "exit status 3" : "exit status 1, for the monitors left running"
        if summary.lost == 0 && corrupt == 0 {
            logger.info("stopped; \(summary.events) events, none lost\(still)")
        } else if corrupt > 0 {
            logger.warning("stopped; \(summary.events) events, \(summary.lost) lost in sinks, and the events of \(corrupt) corrupt disk buffer parts lost, how many unknown (\(status))")
        } else {
            logger.warning("stopped; \(summary.events) events, \(summary.lost) lost in sinks (\(status))")
        }
    }
}

extension SinkRunner {
    /// Its counters now, as the summary shows them.
    var figures: RunSummary.Sink {
        let s = stats
        return RunSummary.Sink(name: s.name, type: s.type, accepted: s.accepted, written: s.written, lost: s.lost,
                               dropped: s.dropped, failed: s.failed, highWater: s.highWater,
                               queueSize: config.queueCapacity, truncated: s.truncated,
                               unconfirmed: s.unconfirmed, noClient: s.noClient, transport: s.transport,
                               buffer: sink.bufferReport,
                               firstWriteNs: firstWrite, lastWriteNs: lastWrite,
                               isolation: s.isolation?.rawValue, crashes: s.crashes, restarts: s.restarts,
                               retries: s.retries, retriedEvents: s.retriedEvents,
                               historyDropped: sink.history.map { store in
                                   let losses = store.losses
                                   return ["max_series": losses.seriesRefused, "out_of_order": losses.outOfOrder,
                                           "max_memory": losses.memoryPoints]
                               },
                               sendQueue: sink.sendQueue)
    }
}

extension RunSummary.Sink {
    /// `later`'s counts added to these, as one sink of the run under one
    /// name: counts summed, the high-water mark the highest, the rest
    /// (type, queue size, disk buffer, isolation) as the later one says.
    mutating func add(_ later: RunSummary.Sink) {
        type = later.type
        accepted &+= later.accepted
        written &+= later.written
        for reason in LossReason.allCases { lost[reason] &+= later.lost[reason] }
        dropped &+= later.dropped
        failed &+= later.failed
        highWater = Swift.max(highWater, later.highWater)
        queueSize = later.queueSize
        truncated &+= later.truncated
        unconfirmed &+= later.unconfirmed
        noClient &+= later.noClient
        for (what, n) in later.transport { transport[what, default: 0] &+= n }
        buffer = later.buffer ?? buffer
        if firstWriteNs == 0 || (later.firstWriteNs != 0 && later.firstWriteNs < firstWriteNs) { firstWriteNs = later.firstWriteNs }
        lastWriteNs = Swift.max(lastWriteNs, later.lastWriteNs)
        isolation = later.isolation ?? isolation
        func sum(_ a: UInt64?, _ b: UInt64?) -> UInt64? { a == nil && b == nil ? nil : (a ?? 0) &+ (b ?? 0) }
        crashes = sum(crashes, later.crashes)
        restarts = sum(restarts, later.restarts)
        retries = sum(retries, later.retries)
        retriedEvents = sum(retriedEvents, later.retriedEvents)
        if let more = later.historyDropped { historyDropped = (historyDropped ?? [:]).merging(more) { $0 &+ $1 } }
        if let more = later.sendQueue { sendQueue = sendQueue.map { $0.adding(more) } ?? more }
    }

    /// One entry per name, in the order names first appear.
    static func merged(_ sinks: [RunSummary.Sink]) -> [RunSummary.Sink] {
        mergedByName(sinks, name: \.name) { $0.add($1) }
    }
}
