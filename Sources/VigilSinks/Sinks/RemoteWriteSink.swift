import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore
import VigilForeign
import VigilIsolation
import VigilPrompb

/// `type: remote_write`: every sample of the events routed to it pushed to
/// a Prometheus remote write 1.0 receiver (Prometheus, Mimir, Cortex,
/// Thanos, VictoriaMetrics), named and labelled exactly as the
/// `prometheus` sink serves them (the same `PrometheusMapping`), each at
/// its event's time, with `external_labels` added.
///
/// The samples wait in a queue of shards (`RemoteWriteShard`), as in
/// Prometheus' own queue manager: a series always in the same shard, so
/// its samples leave in order; a request per `max_samples_per_send`, or
/// fewer after `batch_send_deadline`; 5xx, 429 and no answer retried with
/// backoff and jitter; any other answer refuses the request for good
/// (`rejected`, logged with the answer's first line). The number of shards
/// follows the backlog every 10 s between `min_shards` and `max_shards`.
/// While the receiver is away the shards fill and `write` waits: the
/// sink's queue fills behind it (its overflow policy applies, counted), or
/// the disk buffer in front keeps everything.
///
/// An event counts as written once its samples are queued; if any is
/// given up later it is taken back as lost under that reason. Behind a
/// disk buffer, `write` returns only once every sample of its batch was
/// answered for good, and the buffer removes the events then.
///
/// Staleness, as Prometheus does it: a series not renewed within its ttl
/// (`expire_after`, by default five of its monitor's intervals), or whose
/// monitor stopped, is ended with the stale marker; so is an info series
/// whose strings changed, and at exit every series (`stale_on_exit`).
package final class RemoteWriteSink: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread; the shards share only the outbox
    let config: RemoteWriteSinkConfig
    private let mapping: PrometheusMapping
    private let facts: MonitorFactsLookup
    private let outbox: RemoteWriteOutbox
    private let logger: Logger
    private let name: String
    /// Behind a disk buffer: `write` returns once its samples were answered for.
    private let synchronous: Bool
    private var shards: [RemoteWriteShard] = []
    private var started = false

    /// The series alive, by sample name, then labels (as the mapping writes them).
    private var families: [String: Family] = [:]
    private var seriesCount = 0
    /// Series alive per monitor, and the earliest a series could expire
    /// (seen + ttl, as of the last sweep or the newest series since): the
    /// sweep goes through the series only when a monitor stopped or that
    /// time came, not every second.
    private var seriesOf: [String: Int] = [:]
    private var nextExpiry = Int64.max
    private var loggedLimit = false
    private var loggedOrder = false
    /// Every event numbered below it was returned by an earlier `write`.
    private var returnedThrough: UInt64 = 0
    private var lastSweep: Int64 = 0
    private var lastMetadata: Int64 = 0
    private var reckoning = ShardReckoning()
    /// Nanoseconds the sink's thread waited for room in a shard: since the
    /// last reckoning, and since the last sweep (a series is not expired
    /// while its samples may wait in the sink's queue).
    private var blocked: Int64 = 0
    private var blockedAtSweep: Int64 = 0

    final class Family {
        /// Its help follows the latest a sample brought (see `PrometheusMapping.passThrough`).
        var shape: PrometheusNaming.Shape
        var entries: [String: Entry] = [:]
        /// Of an info family: per entity, the labels of its one series.
        var infoOf: [String: String] = [:]

        init(shape: PrometheusNaming.Shape) { self.shape = shape }
    }

    final class Entry {
        let series: RemoteWriteSeries
        let monitor: String
        /// Monotonic time of the last event that carried it, and the time (ms) of its last sample.
        var seen: Int64
        var lastTime: Int64
        var ttl: Int64
        var onChange: Bool

        init(series: RemoteWriteSeries, monitor: String, seen: Int64, lastTime: Int64, ttl: Int64, onChange: Bool) {
            self.series = series
            self.monitor = monitor
            self.seen = seen
            self.lastTime = lastTime
            self.ttl = ttl
            self.onChange = onChange
        }
    }

    init(config: RemoteWriteSinkConfig, name: String, host: String, logger: Logger,
         facts: @escaping MonitorFactsLookup, synchronous: Bool) {
        self.config = config
        self.name = name
        self.facts = facts
        self.synchronous = synchronous
        var logger = logger
        logger[metadataKey: "sink"] = "\(name)"
        self.logger = logger
        mapping = PrometheusMapping(settings: .init(names: config.names, dropUnmapped: config.dropUnmapped,
                                                    expireAfter: config.expireAfter, host: host), facts: facts)
        outbox = RemoteWriteOutbox(settings: .init(endpoint: config.endpoint, headers: config.headers, credentials: config.credentials,
                                                   capacity: config.capacity, maxSamplesPerSend: config.maxSamplesPerSend,
                                                   batchSendDeadline: config.batchSendDeadline, minBackoff: config.minBackoff,
                                                   maxBackoff: config.maxBackoff, timeout: config.timeout, behindBuffer: synchronous))
    }

    /// Its samples matter once a request's worth is there, or at its tick:
    /// the sink's thread is not woken for each poll's few events.
    package var needsEventsPromptly: Bool { false }

    /// The sweep for stale series, the shards' reckoning, the metadata.
    package var tickInterval: Int64 { 1_000_000_000 }

    /// The shards start with the first call, which brings the runner's context.
    private func start(_ context: SinkContext) {
        guard !started else { return }
        started = true
        outbox.attach(context)
        if let why = Snappy.unavailable {
            logger.critical("remote write needs snappy: \(why); this sink's events are counted lost")
        }
        for i in 0..<config.minShards { addShard(i) }
        reckoning.shards = config.minShards
        let now = monotonicNanoseconds()
        lastSweep = now
        lastMetadata = now
        reckoning.last = now
    }

    private func addShard(_ index: Int) {
        let shard = RemoteWriteShard(index: index, outbox: outbox, logger: logger)
        shard.start(name: name)
        shards.append(shard)
    }

    /// What earlier writes returned, settled since: told to the runner.
    private func settleReturned() {
        outbox.release(through: returnedThrough)
    }

    /// Events mapped and queued at a time: a runner's batch after an outage
    /// can be tens of thousands, whose samples would all be held at once.
    static let chunk = 1024

    private struct GaveUp: Error, CustomStringConvertible {
        var description: String { "the drain deadline passed with the receiver away" }
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        start(context)
        settleReturned()
        let first = outbox.ledger.next
        var done = 0
        while done < batch.count {
            // Past the drain deadline nothing more can leave: the rest is
            // lost to the shutdown, not mapped first.
            if context.shouldAbandon {
                returnedThrough = first + UInt64(done)
                throw SinkWriteError(delivered: done, reason: .shutdown, GaveUp())
            }
            let end = min(batch.count, done + Self.chunk)
            queue(done == 0 && end == batch.count ? batch : Array(batch[done..<end]), context: context)
            done = end
        }
        returnedThrough = first + UInt64(batch.count)
        guard synchronous else { return }  // settled once the runner counted them written: at the next call
        settleReturned()
        for shard in shards { shard.flush() }
        while !outbox.ledger.wait(through: returnedThrough, until: monotonicNanoseconds() + 100_000_000) {
            context.whileWaiting()
        }
    }

    /// Maps `events` into samples, opens their account, and queues each
    /// sample in its series' shard.
    private func queue(_ events: [Event], context: SinkContext) {
        let first = outbox.ledger.next
        var collector = Collector(sink: self, now: monotonicNanoseconds(), first: first, events: events.count,
                                  shards: shards.count)
        mapping.map(events, into: &collector)
        outbox.ledger.open(collector.perEvent)
        var made = 0
        for part in collector.perShard { made += part.count }
        outbox.figures.withLock { f in
            // Every sample made, those not sent (out of order, past max_series) too.
            f.samplesIn &+= UInt64(made - collector.markers + collector.outOfOrder + collector.refused)
            if f.oldestIn == 0 || (collector.oldest > 0 && collector.oldest < f.oldestIn) { f.oldestIn = collector.oldest }
            if collector.outOfOrder > 0 { f.samplesLost["out_of_order", default: 0] &+= UInt64(collector.outOfOrder) }
            if collector.refused > 0 { f.samplesLost["max_series", default: 0] &+= UInt64(collector.refused) }
        }
        if collector.refused > 0, !loggedLimit {
            loggedLimit = true
            logger.warning("\(config.maxSeries) series alive (max_series): samples of new series are not sent (their events were delivered to the sink; counted max_series)")
        }
        if collector.outOfOrder > 0, !loggedOrder {
            loggedOrder = true
            logger.warning("\(collector.outOfOrder) samples not after their series' last one (two events in the same millisecond, or a clock set back) are not sent: receivers refuse a whole request for one (their events were delivered to the sink; counted out_of_order)")
        }
        for (index, part) in collector.perShard.enumerated() where !part.isEmpty {
            let queued = shards[index].push(part[...], context: context, blocked: &blocked)
            if queued < part.count {
                // The host gave up at its drain deadline with the receiver
                // away: what was not queued is lost to the shutdown.
                var rest = Array(part[queued...])
                for later in collector.perShard[(index + 1)...] { rest += later }
                outbox.countLost(rest.count { $0.event != RemoteWriteLedger.none }, "shutdown")
                outbox.settle(rest.lazy.map(\.event), lost: .shutdown)
                break
            }
        }
    }

    /// Behind a disk buffer its sweep (stale markers), metadata and
    /// resharding run on the buffer's delivery thread, where its writes do.
    package var ticksBehindBuffer: Bool { true }

    package func tick(context: SinkContext) {
        start(context)
        settleReturned()
        let now = monotonicNanoseconds()
        if now - lastSweep >= 1_000_000_000 {
            lastSweep = now
            sweep(now: now, behind: context.behindBuffer.load(ordering: .relaxed))
        }
        if config.metadataInterval > 0, now - lastMetadata >= config.metadataInterval {
            lastMetadata = now
            sendMetadata()
        }
        if now - reckoning.last >= ShardReckoning.period {
            reshard(now: now, context: context)
        }
    }

    package func shutdown(context: SinkContext) {
        start(context)
        settleReturned()
        if config.staleOnExit && !context.shouldAbandon {
            var ended: [[RemoteWriteItem]] = Array(repeating: [], count: shards.count)
            for family in families.values {
                for entry in family.entries.values {
                    ended[entry.series.shardKey % shards.count].append(staleMarker(entry))
                }
            }
            for (i, part) in ended.enumerated() where !part.isEmpty { _ = shards[i].push(part[...], context: context, blocked: &blocked) }
            families.removeAll()
            seriesCount = 0
            seriesOf.removeAll()
        }
        for shard in shards { shard.stop() }
        // A shard gives up at the drain deadline; one stuck in a call that
        // does not return is left behind half a second later, and what it
        // held counted lost (shutdown), before the host gives up on the sink.
        let deadline = context.abandonDeadline == .max ? Int64.max : context.abandonDeadline.addingSaturating(500_000_000)
        var stuck = 0
        for shard in shards where !shard.join(until: deadline) { stuck += 1 }
        settleReturned()
        if stuck > 0 {
            logger.error("\(stuck) of the \(shards.count) shards did not end by the drain deadline: what they held \(synchronous ? "stays in the disk buffer, sent at the next start" : "is counted lost (shutdown)")")
            outbox.abandonAll()
        }
        var lost = outbox.figures.withLock { $0.samplesLost }
        // Behind a disk buffer, the samples the deadline cut off are of
        // events the buffer keeps (they were never acknowledged).
        let kept = synchronous ? lost.removeValue(forKey: "shutdown") ?? 0 : 0
        let lostTotal = lost.values.reduce(0, &+)
        if lostTotal > 0 {
            let reasons = lost.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }.joined(separator: ", ")
            logger.warning("remote write to \(config.endpoint.shown): \(lostTotal) samples lost (\(reasons))")
        }
        if kept > 0 {
            logger.notice("remote write to \(config.endpoint.shown): \(kept) samples not sent by the drain deadline; their events stay in the disk buffer")
        }
    }

    package var sendQueue: SendQueueReport? {
        let f = outbox.figures.withLock { $0 }
        let (count, desired) = (shards.count, reckoning.desired)
        var report = SendQueueReport()
        report.url = config.endpoint.shown
        report.shards = count
        report.desiredShards = desired
        report.minShards = config.minShards
        report.maxShards = config.maxShards
        report.capacity = config.capacity
        report.pendingSamples = Int(clamping: Int64(bitPattern: f.samplesIn &- f.samplesSent &- f.samplesLost.values.reduce(0, &+)))
        report.series = seriesCount
        report.samplesIn = f.samplesIn
        report.samplesSent = f.samplesSent
        report.samplesLost = f.samplesLost
        report.requests = f.requests
        report.retries = f.retries
        report.samplesRetried = f.samplesRetried
        report.refusedRequests = f.refusedRequests
        report.bytesSent = f.bytesSent
        report.staleMarkers = f.staleMarkers
        report.metadataSent = f.metadataSent
        // While samples wait: how far the newest delivered is behind the clock.
        report.behindS = report.pendingSamples > 0
            ? Double(max(0, realtimeNanoseconds() / 1_000_000 - max(f.newestSent, f.oldestIn))) / 1000 : 0
        report.lastError = f.lastError
        return report
    }

    // MARK: - series

    /// The series of a sample: found, or made (labels parsed once from the
    /// mapping's text, with `__name__` and the external labels); nil when
    /// `max_series` are alive.
    fileprivate func entry(_ shape: PrometheusNaming.Shape, _ labels: String, _ plan: PrometheusMapping.KindPlan,
                           monitor: String, now: Int64, time: Int64) -> Entry? {
        let family: Family
        if let known = families[shape.name] {
            family = known
            if !shape.help.isEmpty && known.shape.help != shape.help { known.shape.help = shape.help }
        } else {
            family = Family(shape: shape)
            families[shape.name] = family
        }
        if let entry = family.entries[labels] {
            entry.seen = now
            entry.ttl = plan.ttl
            entry.onChange = plan.onChange
            return entry
        }
        guard seriesCount < config.maxSeries else { return nil }
        var pairs: [(String, String)] = [("__name__", shape.name)]
        if !labels.isEmpty,
           let read = try? PrometheusExposition.parse(Array("x{\(labels)} 0\n".utf8)).families.first?.samples.first {
            pairs += read.labels.map { ($0.name, $0.value) }
        }
        for (label, value) in config.externalLabels where !pairs.contains(where: { $0.0 == label }) {
            pairs.append((label, value))
        }
        pairs.sort { Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
        // Serialized once: every request carries them as they are.
        guard let protoLabels = try? RemoteWriteRequest.Builder.labelBytes(pairs.map({ pair -> Prometheus_Label in
            var label = Prometheus_Label()
            label.name = pair.0
            label.value = pair.1
            return label
        })) else { return nil }
        var hasher = Hasher()
        hasher.combine(shape.name)
        hasher.combine(labels)
        let key = hasher.finalize()
        let entry = Entry(series: RemoteWriteSeries(labels: protoLabels, shardKey: Int(truncatingIfNeeded: UInt(bitPattern: key) >> 1)),
                          monitor: monitor, seen: now, lastTime: time - 1, ttl: plan.ttl, onChange: plan.onChange)
        family.entries[labels] = entry
        seriesCount += 1
        seriesOf[monitor, default: 0] += 1
        if !plan.onChange { nextExpiry = min(nextExpiry, now.addingSaturating(plan.ttl)) }
        return entry
    }

    /// An info series whose strings changed: the one it had under the old labels ends.
    fileprivate func replaceInfo(_ shape: PrometheusNaming.Shape, entity: String, labels: String, into collector: inout Collector) {
        guard let family = families[shape.name] else { return }
        let old = family.infoOf[entity]
        family.infoOf[entity] = labels
        guard let old, old != labels, let entry = family.entries.removeValue(forKey: old) else { return }
        seriesCount -= 1
        seriesOf[entry.monitor, default: 1] -= 1
        collector.end(entry)
    }

    /// The marker that ends a series, a millisecond after its last sample:
    /// so that no sample of it still on its way (in the sink's queue behind
    /// a slow receiver, or in a sink a reload replaced) comes after its end,
    /// which receivers refuse, a whole request with it.
    fileprivate func staleMarker(_ entry: Entry) -> RemoteWriteItem {
        RemoteWriteItem(series: entry.series, value: RemoteWriteRequest.staleMarker, time: entry.lastTime &+ 1,
                        event: RemoteWriteLedger.none)
    }

    /// Ends the series not renewed within their ttl, and those of monitors
    /// that no longer run (a series of a kind emitted on change lives while
    /// its monitor runs).
    private func sweep(now: Int64, behind: Bool = false) {
        guard seriesCount > 0, !shards.isEmpty else { return }
        var running: [String: Bool] = [:]
        for monitor in seriesOf.keys { running[monitor] = facts(monitor, nil)?.running == true }
        // While the sink waited for room in its shards, its series' samples
        // may be in its queue, or behind a disk buffer on disk after an
        // outage: none expires by time until it caught up.
        let backlogged = blocked != blockedAtSweep || behind
        blockedAtSweep = blocked
        guard (now >= nextExpiry && !backlogged) || running.values.contains(false) else { return }
        var ended: [[RemoteWriteItem]] = Array(repeating: [], count: shards.count)
        var count = 0
        nextExpiry = .max
        for family in families.values {
            var gone: [String] = []
            for (labels, entry) in family.entries {
                let expires = entry.seen.addingSaturating(entry.ttl)
                let alive = running[entry.monitor] == true && (entry.onChange || now <= expires || backlogged)
                guard !alive else {
                    if !entry.onChange { nextExpiry = min(nextExpiry, expires) }
                    continue
                }
                gone.append(labels)
                seriesOf[entry.monitor, default: 1] -= 1
                ended[entry.series.shardKey % shards.count].append(staleMarker(entry))
                count += 1
            }
            for labels in gone { family.entries[labels] = nil }
            if !gone.isEmpty, !family.infoOf.isEmpty {
                family.infoOf = family.infoOf.filter { family.entries[$0.value] != nil }
            }
        }
        seriesOf = seriesOf.filter { $0.value > 0 }
        guard count > 0, let context = outbox.context else { return }
        seriesCount -= count
        for family in families.values where family.entries.isEmpty { families[family.shape.name] = nil }
        for (i, part) in ended.enumerated() where !part.isEmpty { _ = shards[i].push(part[...], context: context, blocked: &blocked) }
    }

    /// Each family's type and help, as Prometheus sends them (`metadata`).
    private func sendMetadata() {
        guard let shard = shards.first, !families.isEmpty else { return }
        var seen = Set<String>()
        var metadata: [Prometheus_MetricMetadata] = []
        for family in families.values {
            let shape = family.shape
            let name = shape.kind.isWhole ? shape.family : shape.name
            guard seen.insert(name).inserted else { continue }
            var m = Prometheus_MetricMetadata()
            m.metricFamilyName = name
            m.help = shape.help
            switch shape.kind {
            case .counter: m.type = .counter
            case .gauge: m.type = .gauge
            case .histogram: m.type = .histogram
            case .summary: m.type = .summary
            case .untyped: m.type = .unknown
            }
            metadata.append(m)
        }
        metadata.sort { $0.metricFamilyName < $1.metricFamilyName }
        shard.send(metadata: metadata)
    }

    // MARK: - shards

    /// The shards a queue needs, reckoned every 10 s as Prometheus' queue
    /// manager does: the time a sample takes to send (the shards' time in
    /// requests that delivered, per sample) times the rate samples come in,
    /// plus a tenth of the backlog a second. The backlog is how far the
    /// newest sample delivered is behind the clock times that rate, while
    /// samples wait (in the shards, or in the sink's queue while it waited
    /// for room: then the rate mapped is the rate sent, and only the
    /// backlog tells that more shards are needed). Changed only when off by
    /// more than 30 %; never down while more than 10 s behind, never while
    /// sending fails.
    struct ShardReckoning {
        static let period: Int64 = 10_000_000_000
        var last: Int64 = 0
        var shards = 1
        var desired = 1.0
        var samplesIn: UInt64 = 0
        var samplesSent: UInt64 = 0
        var samplesDropped: UInt64 = 0
        var sendNanos: Int64 = 0
        var blocked: Int64 = 0
        /// Rates per second, smoothed (an EWMA of weight 0.2 per period).
        var inRate: Double?
        var outRate: Double?
        var dropRate: Double?
        var busyRate: Double?

        static func smooth(_ old: Double?, _ new: Double) -> Double { old.map { $0 + 0.2 * (new - $0) } ?? new }

        /// The shards wanted, given the figures now; `shards` when no change is due.
        mutating func reckon(_ f: RemoteWriteOutbox.Figures, now: Int64, wallMs: Int64, blocked: Int64, minShards: Int,
                             maxShards: Int) -> Int {
            let seconds = Double(max(1, now - last)) / 1e9
            last = now
            let dropped = f.samplesLost.filter { $0.key == "rejected" || $0.key == "write_failed" }.values.reduce(0, &+)
            inRate = Self.smooth(inRate, Double(f.samplesIn &- samplesIn) / seconds)
            outRate = Self.smooth(outRate, Double(f.samplesSent &- samplesSent) / seconds)
            dropRate = Self.smooth(dropRate, Double(dropped &- samplesDropped) / seconds)
            busyRate = Self.smooth(busyRate, Double(f.sendNanos - sendNanos) / 1e9 / seconds)
            let waited = blocked - self.blocked
            samplesIn = f.samplesIn
            samplesSent = f.samplesSent
            samplesDropped = dropped
            sendNanos = f.sendNanos
            self.blocked = blocked
            guard let inRate, let outRate, let dropRate, let busyRate, outRate > 0 else { return shards }
            let pending = f.samplesIn &- f.samplesSent &- f.samplesLost.values.reduce(0, &+)
            let behind = pending > 0 || waited > 0 ? Double(max(0, wallMs - max(f.newestSent, f.oldestIn))) / 1000 : 0
            let kept = outRate / (outRate + dropRate)
            let timePerSample = busyRate / outRate
            desired = timePerSample * inRate * kept * (1 + 0.1 * behind)
            let lower = Double(shards) * 0.7, upper = Double(shards) * 1.3
            if desired >= lower && desired <= upper { return shards }
            let wanted = min(maxShards, max(minShards, Int(desired.rounded(.up))))
            if wanted < shards && behind > 10 { return shards }
            return wanted
        }
    }

    private func reshard(now: Int64, context: SinkContext) {
        let f = outbox.figures.withLock { $0 }
        let wanted = reckoning.reckon(f, now: now, wallMs: realtimeNanoseconds() / 1_000_000, blocked: blocked,
                                      minShards: config.minShards, maxShards: config.maxShards)
        // Not while sending fails: more shards would only knock harder.
        guard wanted != shards.count, f.failing == 0, now - f.lastFailure > 2 * ShardReckoning.period || f.lastFailure == 0 else { return }
        // A series' shard changes with their number: what is queued goes
        // first, so that no series' samples overtake each other.
        for shard in shards { shard.flush() }
        let deadline = now + ShardReckoning.period
        while !shards.allSatisfy(\.isIdle) {
            if monotonicNanoseconds() > deadline || context.shouldAbandon { return }
            usleep(5_000)
        }
        let before = shards.count
        if wanted > before {
            for i in before..<wanted { addShard(i) }
        } else {
            let gone = shards[wanted...]
            shards.removeLast(before - wanted)
            for shard in gone { shard.stop() }
            for shard in gone { _ = shard.join(until: .max) }  // idle: they end at once
        }
        reckoning.shards = shards.count
        logger.info("remote write to \(config.endpoint.shown): \(counted(before, "shard")) → \(shards.count) (wanted \(String(format: "%.2f", reckoning.desired)))")
    }
}

/// The `remote_write` sink's side of `PrometheusMapping.map`: each sample
/// made a queued item of its series' shard, and counted for its event.
private struct Collector: PrometheusSampleSink {
    unowned let sink: RemoteWriteSink
    let now: Int64
    let first: UInt64
    var perEvent: [Int32]
    var perShard: [[RemoteWriteItem]]
    var index = 0
    var oldest: Int64 = 0
    var outOfOrder = 0
    var refused = 0
    /// Stale markers of info series whose strings changed.
    var markers = 0

    init(sink: RemoteWriteSink, now: Int64, first: UInt64, events: Int, shards: Int) {
        self.sink = sink
        self.now = now
        self.first = first
        perEvent = Array(repeating: 0, count: events)
        perShard = Array(repeating: [], count: max(1, shards))
    }

    mutating func begin(_ index: Int) { self.index = index }

    mutating func sample(_ output: PrometheusMapping.Output, _ labels: String, _ field: PrometheusMapping.Value,
                         _ plan: PrometheusMapping.KindPlan, _ event: Event) {
        let scale = output.shape.scale
        let value: Double
        switch field {
        case .int(let i): value = scale == 1 ? Double(i) : Double(i) * scale
        case .double(let d): value = scale == 1 ? d : d * scale
        case .bool(let b): value = b ? 1 : 0
        }
        add(output.shape, labels, value, plan, event)
    }

    mutating func named(_ shape: PrometheusNaming.Shape, _ labels: String, _ value: Double, _ plan: PrometheusMapping.KindPlan,
                        _ event: Event) {
        add(shape, labels, value, plan, event)
    }

    mutating func info(_ shape: PrometheusNaming.Shape, entity: String, labels: String, _ plan: PrometheusMapping.KindPlan,
                       _ event: Event) {
        add(shape, labels, 1, plan, event)
        sink.replaceInfo(shape, entity: entity, labels: labels, into: &self)
    }

    private mutating func add(_ shape: PrometheusNaming.Shape, _ labels: String, _ value: Double, _ plan: PrometheusMapping.KindPlan,
                              _ event: Event) {
        let time = event.time / 1_000_000
        guard let entry = sink.entry(shape, labels, plan, monitor: event.monitor, now: now, time: time) else {
            refused += 1
            return
        }
        // A receiver refuses a whole request for one sample not after its
        // series' last (Prometheus answers 400).
        guard time > entry.lastTime else {
            outOfOrder += 1
            return
        }
        entry.lastTime = time
        if oldest == 0 || time < oldest { oldest = time }
        perEvent[index] += 1
        perShard[entry.series.shardKey % perShard.count].append(
            RemoteWriteItem(series: entry.series, value: value, time: time, event: first &+ UInt64(index)))
    }

    /// A series ended before its time: its stale marker goes with the samples.
    mutating func end(_ entry: RemoteWriteSink.Entry) {
        markers += 1
        perShard[entry.series.shardKey % perShard.count].append(sink.staleMarker(entry))
    }
}

/// `type: remote_write`: the events' numbers pushed to `url`.
package struct RemoteWriteSinkConfig: Sendable {
    package var endpoint: HTTPPosting.Endpoint
    package var urlLocation: SourceLocation?
    /// Labels every series carries (a series' own label of the same name wins).
    package var externalLabels: [(String, String)] = []
    package var names: PrometheusNameMap?
    package var namesFile: String?
    package var namesLocation: SourceLocation?
    package var dropUnmapped = false
    package var expireAfter: Int64?
    package var maxSeries = 100_000
    /// The queue: samples per shard, shards, a request's samples and wait, the backoff.
    package var capacity = 10_000
    package var minShards = 1
    package var maxShards = 50
    package var maxSamplesPerSend = 2_000
    package var batchSendDeadline: Int64 = 5_000_000_000
    package var minBackoff: Int64 = 30_000_000
    package var maxBackoff: Int64 = 5_000_000_000
    /// One request's deadline (`remote_timeout`).
    package var timeout: Int64 = 30_000_000_000
    package var headers: [(String, String)] = []
    package var credentials: HTTPCredentials?
    package var credentialsLocation: SourceLocation?
    /// How often the families' type and help are sent (0: never).
    package var metadataInterval: Int64 = 60_000_000_000
    /// At exit every series is ended with a stale marker.
    package var staleOnExit = true
    package var buffer: SinkBufferConfig?

    package init(endpoint: HTTPPosting.Endpoint) { self.endpoint = endpoint }
}

extension RemoteWriteSinkConfig: SinkType, DiskBufferable {
    package static let type = "remote_write"
    package static let keys = ["url", "external_labels", "names", "unmapped", "expire_after", "max_series", "queue", "timeout",
                               "headers", "basic_auth", "bearer_token_file", "metadata", "stale_on_exit"]

    static let example = "url: http://127.0.0.1:8428/api/v1/write"

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> RemoteWriteSinkConfig? {
        let keys = sink.keys
        guard let node = keys["url"] else {
            d.error(sink.location, "remote_write sink '\(sink.name)' needs 'url'", hint: example)
            return nil
        }
        guard let text = d.string(node, what: "'url'") else { return nil }
        var config: RemoteWriteSinkConfig
        switch HTTPPosting.parse(text, defaultPort: 80) {
        case .success(let endpoint): config = RemoteWriteSinkConfig(endpoint: endpoint)
        case .failure(let why):
            d.error(node.location, "bad 'url' '\(text)': \(why)", hint: example)
            return nil
        }
        config.urlLocation = node.location
        if let n = keys["external_labels"] {
            for entry in d.entries(of: n, mustBe: "'external_labels' must be a mapping of label names to values",
                                   hint: "external_labels: { region: eu-west, fleet: web }") {
                let label = entry.key.text
                guard isLabelName(label) else {
                    d.error(entry.key.location, "\(ManifestLoader.shown(label)) is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with '__')")
                    continue
                }
                guard let value = d.string(entry.value, what: "external label '\(label)'") else { continue }
                guard !value.isEmpty else {
                    d.error(entry.value.location, "external label '\(label)' is empty (a label with no value is no label)")
                    continue
                }
                guard !config.externalLabels.contains(where: { $0.0 == label }) else { continue }
                config.externalLabels.append((label, value))
            }
        }
        if let node = keys["names"], let path = d.string(node, what: "'names'") {
            config.namesFile = path
            config.namesLocation = node.location
            config.names = PrometheusSinkConfig.readNames(path, at: node.location, loader: sink.loader, &d)
        }
        if let node = keys["unmapped"], let choice = d.choice(node, what: "'unmapped'", from: ["keep", "drop"]) {
            if keys["names"] == nil {
                d.warning(node.location, "'unmapped' has no effect without 'names'", hint: "names: FILE (see docs/sinks.md)")
            }
            config.dropUnmapped = choice == "drop"
        }
        if let node = keys["expire_after"], let ns = d.duration(node, what: "'expire_after'", atLeast: 1_000_000_000) {
            config.expireAfter = ns
        }
        if let node = keys["max_series"], let n = d.int(node, what: "'max_series'", in: 1...10_000_000, unit: " series") {
            config.maxSeries = Int(n)
        }
        if let n = keys["queue"],
           let q = Keys(nested: n, what: "'queue'", of: sink.described,
                        known: ["capacity", "min_shards", "max_shards", "max_samples_per_send", "batch_send_deadline", "min_backoff", "max_backoff"],
                        example: "queue: { capacity: 10000, max_shards: 50, max_samples_per_send: 2000, batch_send_deadline: 5s }", &d) {
            if let v = q["capacity"], let c = d.int(v, what: "'queue.capacity'", in: 1...1_000_000, unit: " samples") { config.capacity = Int(c) }
            if let v = q["max_shards"], let c = d.int(v, what: "'queue.max_shards'", in: 1...200, unit: " shards") { config.maxShards = Int(c) }
            if let v = q["min_shards"], let c = d.int(v, what: "'queue.min_shards'", in: 1...200, unit: " shards") {
                if Int(c) > config.maxShards {
                    d.error(v.location, "'queue.min_shards' (\(c)) is more than 'queue.max_shards' (\(config.maxShards))")
                } else {
                    config.minShards = Int(c)
                }
            }
            if let v = q["max_samples_per_send"], let c = d.int(v, what: "'queue.max_samples_per_send'", in: 1...100_000, unit: " samples") {
                if Int(c) > config.capacity {
                    d.error(v.location, "'queue.max_samples_per_send' (\(c)) is more than 'queue.capacity' (\(config.capacity)): a shard would never fill a request")
                } else {
                    config.maxSamplesPerSend = Int(c)
                }
            }
            if let v = q["batch_send_deadline"], let ns = d.duration(v, what: "'queue.batch_send_deadline'", atLeast: 1_000_000) {
                config.batchSendDeadline = ns
            }
            if let v = q["min_backoff"], let ns = d.duration(v, what: "'queue.min_backoff'", atLeast: 1_000_000) { config.minBackoff = ns }
            if let v = q["max_backoff"], let ns = d.duration(v, what: "'queue.max_backoff'", atLeast: 1_000_000) {
                if ns < config.minBackoff {
                    d.error(v.location, "'queue.max_backoff' is shorter than 'queue.min_backoff' (\(Units.formatDuration(config.minBackoff)))")
                } else {
                    config.maxBackoff = ns
                }
            }
        }
        if let n = keys["queue"], config.capacity.multipliedReportingOverflow(by: config.maxShards).partialValue > 10_000_000 {
            let most = config.capacity * config.maxShards
            d.warning(n.location, "'queue' lets the shards hold up to \(most) samples (about \(Units.formatSize(Int64(most) * 48)) of memory) while the receiver is away",
                      hint: "a disk buffer keeps what an outage holds on disk instead: buffer: { type: disk, path: ... }")
        }
        if let n = keys["timeout"], let ns = d.duration(n, what: "'timeout'", atLeast: 100_000_000) { config.timeout = ns }
        if let n = keys["headers"] {
            config.headers = HTTPPosting.readHeaders(n, own: ["x-prometheus-remote-write-version"],
                                                     ownHint: "the sink sends the protocol's Content-Type, Content-Encoding and version itself",
                                                     example: "headers: { X-Scope-OrgID: fleet-a }", &d)
        }
        config.credentials = HTTPCredentials.read(keys, headers: config.headers, &d)
        config.credentialsLocation = (keys["basic_auth"] ?? keys["bearer_token_file"])?.location
        if let n = keys["metadata"],
           let m = Keys(nested: n, what: "'metadata'", of: sink.described, known: ["send", "interval"],
                        example: "metadata: { send: true, interval: 1m }", &d) {
            var send = true
            if let v = m["send"], let on = d.bool(v, what: "'metadata.send'") { send = on }
            if let v = m["interval"], let ns = d.duration(v, what: "'metadata.interval'", atLeast: 1_000_000_000) { config.metadataInterval = ns }
            if !send { config.metadataInterval = 0 }
        }
        if let n = keys["stale_on_exit"], let on = d.bool(n, what: "'stale_on_exit'") { config.staleOnExit = on }
        return config
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, not `__…` (Prometheus' own).
    static func isLabelName(_ name: String) -> Bool {
        guard let first = name.utf8.first, !name.hasPrefix("__") else { return false }
        func letter(_ c: UInt8) -> Bool { (c | 0x20) >= 0x61 && (c | 0x20) <= 0x7A || c == UInt8(ascii: "_") }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }

    /// A receiver answers for every request.
    package var diskBufferRefusal: String? { nil }

    /// Snappy must be at hand, and the credentials' files readable.
    package func preflight(_ sink: SinkConfig) -> [Diagnostic] {
        var out: [Diagnostic] = []
        let at = urlLocation ?? sink.location
        if let why = Snappy.unavailable {
            out.append(Diagnostic(.error, at: at, "sink '\(sink.name)': remote write compresses with snappy: \(why)"))
        }
        for (key, problem) in credentials?.problems() ?? [] {
            out.append(Diagnostic(.error, at: credentialsLocation ?? at, "sink '\(sink.name)': '\(key)': \(problem)"))
        }
        return out
    }

    /// Where it sends, from which threads, and what keeps its events.
    package func placement(in manifest: Manifest, catalog: PluginCatalog) -> String? {
        let shards = minShards == maxShards ? "\(minShards) shards" : "\(minShards) to \(maxShards) shards"
        return "remote write to \(endpoint.shown) from \(shards) (threads of its own)"
            + (buffer.map { ", behind its disk buffer \($0.path)" } ?? ", its samples in memory only")
    }

    /// With `names:`, what the prometheus sink would say of the families it will not make.
    package func validate(_ sink: SinkConfig, in manifest: Manifest, probes: PluginProbes) -> [Diagnostic] {
        var served = PrometheusSinkConfig()
        served.names = names
        served.namesFile = namesFile
        served.namesLocation = namesLocation
        return served.validate(sink, in: manifest, probes: probes)
    }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        let directory = build.directory
        return RemoteWriteSink(config: self, name: build.config.name, host: build.host, logger: build.logger,
                               facts: { directory?.facts(of: $0, plugin: $1) }, synchronous: buffer != nil)
    }
}
