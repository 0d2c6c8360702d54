import Foundation
import VigilABI
import VigilCore
import VigilHistory
import VigilSinks

/// The host's own counters in Prometheus' text format (`GET /metrics`):
/// the numbers the exit summary and `GET /v1/status` show, read when asked
/// (no registry kept beside them, nothing updated per event for it).
/// Monitors and sinks a reload replaced are summed into their name's
/// series, so every counter only grows for the life of the process.
package struct SelfMetrics {
    let runtime: VigilRuntime

    package init(runtime: VigilRuntime) { self.runtime = runtime }

    /// The figures, and after them the series of every `prometheus` sink
    /// when `sinkSeries` (the control API's `/metrics`; a sink that serves
    /// the figures beside its own series asks without).
    package func exposition(sinkSeries: Bool = true) -> [UInt8] {
        var out = PrometheusText()
        let figures = runtime.monitorFigures
        let current = runtime.instances
        let sinks = runtime.sinkFigures
        let live = runtime.sinks

        out.family("vigil_build_info", .gauge, "The running vigil's version.")
        out.sample("vigil_build_info", ["version": vigilVersion], 1)
        out.family("vigil_uptime_seconds", .gauge, "Seconds since the host started its services.")
        let started = runtime.started
        out.sample("vigil_uptime_seconds", [], started > 0 ? Double(max(0, monotonicNanoseconds() - started)) / 1e9 : 0)

        // Per monitor name, with the instances a reload replaced (MonitorFigures).
        /// A counter with a sample per monitor name.
        func perMonitor(_ family: String, _ help: String, _ value: (MonitorFigures) -> UInt64) {
            out.family(family, .counter, help)
            for f in figures { out.sample(family, ["monitor": f.name], Double(value(f))) }
        }
        perMonitor("vigil_events_total", "Events a monitor emitted that the host accepted.") { $0.emitted }
        out.family("vigil_events_refused_total", .counter, "Emits the host refused, by reason (the event was malformed or came outside start…stop).")
        for f in figures {
            for (reason, count) in f.refusedBy.sorted(by: { $0.key < $1.key }) {
                out.sample("vigil_events_refused_total", [("monitor", f.name), ("reason", reason)], Double(count))
            }
        }
        perMonitor("vigil_monitor_log_lines_suppressed_total",
                   "Plugin log lines dropped over the rate limit (100 at once, then 20 a second).") { $0.logSuppressed }
        perMonitor("vigil_monitor_polls_total", "Polls of a monitor's plugin.") { $0.polls }
        perMonitor("vigil_monitor_poll_errors_total", "Polls that returned an error.") { $0.pollErrors }
        perMonitor("vigil_monitor_crashes_total", "Runner processes of a monitor that ended: crashes, hangs, limits.") { $0.crashes }
        perMonitor("vigil_monitor_restarts_total", "Restarts of a monitor by its supervisor.") { $0.restarts }
        out.family("vigil_monitor_up", .gauge, "1 when the monitor runs, 0 when it is stopped, failed, quarantined or waiting for its source.")
        for instance in current { out.sample("vigil_monitor_up", ["monitor": instance.name], instance.state == .running ? 1 : 0) }
        out.family("vigil_monitor_available", .gauge, "1 when the monitor's source is available.")
        for instance in current { out.sample("vigil_monitor_available", ["monitor": instance.name], instance.status.available ? 1 : 0) }

        out.family("vigil_plugin_call_seconds", .histogram, "How long calls into plugins took, by monitor and call.")
        for f in figures {
            let name = f.name
            for (call, h) in f.callTimes.sorted(by: { $0.key < $1.key }) {
                var cumulative: UInt64 = 0
                for (i, bound) in CallTimes.bounds.enumerated() {
                    cumulative &+= h.buckets[i]
                    out.sample("vigil_plugin_call_seconds_bucket", [("monitor", name), ("call", call), ("le", PrometheusText.number(bound))],
                               Double(cumulative))
                }
                out.sample("vigil_plugin_call_seconds_bucket", [("monitor", name), ("call", call), ("le", "+Inf")], Double(h.count))
                out.sample("vigil_plugin_call_seconds_sum", [("monitor", name), ("call", call)], Double(h.sumNanoseconds) / 1e9)
                out.sample("vigil_plugin_call_seconds_count", [("monitor", name), ("call", call)], Double(h.count))
            }
        }

        // Per sink name, with the runners a reload replaced.
        var sinkNames: [String] = []
        var stats: [String: RunSummary.Sink] = [:]
        for s in sinks {
            sinkNames.append(s.name)
            stats[s.name] = s
        }
        out.family("vigil_sink_events_total", .counter, "Events a sink took, by outcome: accepted (queued), written, or lost by reason.")
        for name in sinkNames {
            guard let entry = stats[name] else { continue }
            out.sample("vigil_sink_events_total", [("sink", name), ("outcome", "accepted")], Double(entry.accepted))
            out.sample("vigil_sink_events_total", [("sink", name), ("outcome", "written")], Double(entry.written))
            for reason in LossReason.allCases {
                out.sample("vigil_sink_events_total", [("sink", name), ("outcome", reason.name)], Double(entry.lost[reason]))
            }
        }
        /// A counter with a sample per sink name that `value` has a figure for.
        func perSink(_ family: String, _ help: String, _ value: (RunSummary.Sink) -> UInt64?) {
            out.family(family, .counter, help)
            for name in sinkNames {
                if let n = stats[name].flatMap(value) { out.sample(family, ["sink": name], Double(n)) }
            }
        }
        perSink("vigil_sink_events_truncated_total",
                "Events a sink delivered cut short to fit its transport (counted in written too).") { $0.truncated }
        perSink("vigil_sink_events_no_client_total",
                "Events a listening sink had no client connected for: neither written nor lost.") { $0.noClient }
        out.family("vigil_sink_transport_events_total", .counter, "What happened to a sink's transport: reconnected, peer_closed, file_reopened, directory_recreated, client_cut.")
        for name in sinkNames {
            for (what, n) in (stats[name]?.transport ?? [:]).sorted(by: { $0.key < $1.key }) {
                out.sample("vigil_sink_transport_events_total", [("sink", name), ("what", what)], Double(n))
            }
        }
        perSink("vigil_sink_crashes_total",
                "Runner processes of an output plugin's sink that ended: crashes, hangs, limits.") { $0.crashes }
        perSink("vigil_sink_restarts_total", "New runners of an output plugin's sink started after one ended.") { $0.restarts }
        perSink("vigil_sink_retries_total", "Writes of an output plugin's sink answered RETRY, in whole or in part.") { $0.retries }
        perSink("vigil_sink_retried_events_total", "Events an output plugin answered RETRY for, written again.") { $0.retriedEvents }
        out.family("vigil_sink_failed", .gauge, "1 when an output plugin's sink has failed for good (its events are lost, or kept in its disk buffer), else 0.")
        for runner in live {
            let s = runner.stats
            if s.isolation != nil { out.sample("vigil_sink_failed", ["sink": s.name], s.failedForGood == nil ? 0 : 1) }
        }
        out.family("vigil_sink_queue_depth", .gauge, "Events waiting in a sink's queue.")
        for runner in live { out.sample("vigil_sink_queue_depth", ["sink": runner.config.name], Double(runner.queue.depth)) }
        out.family("vigil_sink_queue_capacity", .gauge, "The bound of a sink's queue.")
        for runner in live { out.sample("vigil_sink_queue_capacity", ["sink": runner.config.name], Double(runner.config.queueCapacity)) }

        let senders = live.compactMap { runner in runner.sink.sendQueue.map { (runner.config.name, $0) } }
        if !senders.isEmpty {
            out.family("vigil_remote_write_samples_total", .counter,
                       "Samples a remote_write sink made of its events, by outcome: in (made), sent (answered 2xx), or lost by reason.")
            for (name, r) in senders {
                out.sample("vigil_remote_write_samples_total", [("sink", name), ("outcome", "in")], Double(r.samplesIn))
                out.sample("vigil_remote_write_samples_total", [("sink", name), ("outcome", "sent")], Double(r.samplesSent))
                for (reason, n) in r.samplesLost.sorted(by: { $0.key < $1.key }) {
                    out.sample("vigil_remote_write_samples_total", [("sink", name), ("outcome", reason)], Double(n))
                }
            }
            func each(_ family: String, _ type: PrometheusText.Kind, _ help: String, _ value: (SendQueueReport) -> Double) {
                out.family(family, type, help)
                for (name, r) in senders { out.sample(family, ["sink": name], value(r)) }
            }
            each("vigil_remote_write_samples_pending", .gauge, "Samples queued in a remote_write sink's shards or in a request not yet answered.") {
                Double($0.pendingSamples)
            }
            each("vigil_remote_write_samples_retried_total", .counter, "Samples in requests that were retried (5xx, 429, no answer).") {
                Double($0.samplesRetried)
            }
            each("vigil_remote_write_requests_total", .counter, "Requests a remote_write receiver answered 2xx.") { Double($0.requests) }
            each("vigil_remote_write_retries_total", .counter, "Attempts retried: answered 5xx or 429, or not answered.") { Double($0.retries) }
            each("vigil_remote_write_refused_requests_total", .counter, "Requests refused for good with a 4xx other than 429 (their samples lost, rejected).") {
                Double($0.refusedRequests)
            }
            each("vigil_remote_write_sent_bytes_total", .counter, "Compressed bytes of the requests delivered.") { Double($0.bytesSent) }
            each("vigil_remote_write_stale_markers_total", .counter, "Series ended with Prometheus' stale marker.") { Double($0.staleMarkers) }
            each("vigil_remote_write_series", .gauge, "Series a remote_write sink keeps alive.") { Double($0.series) }
            each("vigil_remote_write_shards", .gauge, "Shards sending now.") { Double($0.shards) }
            each("vigil_remote_write_shards_desired", .gauge, "Shards the last reckoning asked for (10 s apart).") { $0.desiredShards }
            each("vigil_remote_write_shards_max", .gauge, "The most shards (queue.max_shards).") { Double($0.maxShards) }
            each("vigil_remote_write_shards_min", .gauge, "The fewest shards (queue.min_shards).") { Double($0.minShards) }
            each("vigil_remote_write_shard_capacity", .gauge, "Samples a shard holds at most (queue.capacity).") { Double($0.capacity) }
            each("vigil_remote_write_behind_seconds", .gauge, "While samples wait: how far the newest sample delivered is behind the clock.") { $0.behindS }
        }

        let histories = live.compactMap { runner in runner.sink.history.map { (runner.config.name, $0.figures) } }
        if !histories.isEmpty {
            out.family("vigil_history_series", .gauge, "Series a history sink keeps.")
            for (name, f) in histories { out.sample("vigil_history_series", ["sink": name], Double(f.series)) }
            out.family("vigil_history_points", .gauge, "Points a history sink holds: every point (tier points) and per minute (tier minutes).")
            for (name, f) in histories {
                out.sample("vigil_history_points", [("sink", name), ("tier", "points")], Double(f.points))
                out.sample("vigil_history_points", [("sink", name), ("tier", "minutes")], Double(f.minutes))
            }
            out.family("vigil_history_bytes", .gauge, "Bytes a history sink holds, within its max_memory.")
            for (name, f) in histories { out.sample("vigil_history_bytes", ["sink": name], Double(f.bytes)) }
            out.family("vigil_history_dropped_total", .counter, "Points a history sink dropped or did not keep, by reason: max_memory (oldest blocks), max_series, out_of_order.")
            for (name, f) in histories {
                out.sample("vigil_history_dropped_total", [("sink", name), ("reason", "max_memory")], Double(f.losses.memoryPoints))
                out.sample("vigil_history_dropped_total", [("sink", name), ("reason", "max_series")], Double(f.losses.seriesRefused))
                out.sample("vigil_history_dropped_total", [("sink", name), ("reason", "out_of_order")], Double(f.losses.outOfOrder))
            }
        }

        out.family("vigil_events_unrouted_total", .counter, "Events that matched no sink.")
        out.sample("vigil_events_unrouted_total", [], Double(runtime.bus.unrouted.load(ordering: .relaxed)))
        out.family("vigil_events_sequenced_total", .counter, "Events given a sequence number: every event of the run.")
        out.sample("vigil_events_sequenced_total", [], Double(runtime.bus.lastSequence))
        let reloads = runtime.reloadCounts
        out.family("vigil_reloads_total", .counter, "Reloads of the manifest, by result.")
        out.sample("vigil_reloads_total", ["result": "applied"], Double(reloads.done))
        out.sample("vigil_reloads_total", ["result": "refused"], Double(reloads.failed))
        // The series of `prometheus` sinks, as they serve them: one scrape of
        // the control API has the host's figures and the events' values.
        var bytes = out.bytes
        if sinkSeries {
            for runner in live {
                // What was queued before this scrape, written first (50 ms at most).
                if !runner.sink.needsEventsPromptly { _ = runner.drain(timeout: 50_000_000) }
                runner.sink.appendExposition(to: &bytes)
            }
        }
        return bytes
    }
}
