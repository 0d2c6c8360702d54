import Foundation
import VigilABI
import VigilCore
import VigilRuntime
import VigilSinks

/// The host's own counters in Prometheus' text format (`GET /metrics`):
/// the numbers the exit summary and `GET /v1/status` show, read when asked
/// (no registry kept beside them, nothing updated per event for it).
/// Monitors and sinks a reload replaced are summed into their name's
/// series, so every counter only grows for the life of the process.
package struct SelfMetrics {
    let runtime: VigilRuntime

    func exposition() -> [UInt8] {
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
        out.family("vigil_events_total", .counter, "Events a monitor emitted that the host accepted.")
        for f in figures { out.sample("vigil_events_total", ["monitor": f.name], Double(f.emitted)) }
        out.family("vigil_events_refused_total", .counter, "Emits the host refused, by reason (the event was malformed or came outside start…stop).")
        for f in figures {
            for (reason, count) in f.refusedBy.sorted(by: { $0.key < $1.key }) {
                out.sample("vigil_events_refused_total", [("monitor", f.name), ("reason", reason)], Double(count))
            }
        }
        out.family("vigil_monitor_log_lines_suppressed_total", .counter, "Plugin log lines dropped over the rate limit (100 at once, then 20 a second).")
        for f in figures { out.sample("vigil_monitor_log_lines_suppressed_total", ["monitor": f.name], Double(f.logSuppressed)) }
        out.family("vigil_monitor_polls_total", .counter, "Polls of a monitor's plugin.")
        for f in figures { out.sample("vigil_monitor_polls_total", ["monitor": f.name], Double(f.polls)) }
        out.family("vigil_monitor_poll_errors_total", .counter, "Polls that returned an error.")
        for f in figures { out.sample("vigil_monitor_poll_errors_total", ["monitor": f.name], Double(f.pollErrors)) }
        out.family("vigil_monitor_crashes_total", .counter, "Runner processes of a monitor that ended: crashes, hangs, limits.")
        for f in figures { out.sample("vigil_monitor_crashes_total", ["monitor": f.name], Double(f.crashes)) }
        out.family("vigil_monitor_restarts_total", .counter, "Restarts of a monitor by its supervisor.")
        for f in figures { out.sample("vigil_monitor_restarts_total", ["monitor": f.name], Double(f.restarts)) }
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
        out.family("vigil_sink_events_truncated_total", .counter, "Events a sink delivered cut short to fit its transport (counted in written too).")
        for name in sinkNames {
            out.sample("vigil_sink_events_truncated_total", ["sink": name], Double(stats[name]?.truncated ?? 0))
        }
        out.family("vigil_sink_transport_events_total", .counter, "What happened to a sink's transport: reconnected, peer_closed, file_reopened, directory_recreated, client_cut.")
        for name in sinkNames {
            for (what, n) in (stats[name]?.transport ?? [:]).sorted(by: { $0.key < $1.key }) {
                out.sample("vigil_sink_transport_events_total", [("sink", name), ("what", what)], Double(n))
            }
        }
        out.family("vigil_sink_crashes_total", .counter, "Runner processes of an output plugin's sink that ended: crashes, hangs, limits.")
        for name in sinkNames {
            if let crashes = stats[name]?.crashes { out.sample("vigil_sink_crashes_total", ["sink": name], Double(crashes)) }
        }
        out.family("vigil_sink_restarts_total", .counter, "New runners of an output plugin's sink started after one ended.")
        for name in sinkNames {
            if let restarts = stats[name]?.restarts { out.sample("vigil_sink_restarts_total", ["sink": name], Double(restarts)) }
        }
        out.family("vigil_sink_retries_total", .counter, "Writes of an output plugin's sink answered RETRY, in whole or in part.")
        for name in sinkNames {
            if let retries = stats[name]?.retries { out.sample("vigil_sink_retries_total", ["sink": name], Double(retries)) }
        }
        out.family("vigil_sink_retried_events_total", .counter, "Events an output plugin answered RETRY for, written again.")
        for name in sinkNames {
            if let retried = stats[name]?.retriedEvents { out.sample("vigil_sink_retried_events_total", ["sink": name], Double(retried)) }
        }
        out.family("vigil_sink_failed", .gauge, "1 when an output plugin's sink has failed for good (its events are lost, or kept in its disk buffer), else 0.")
        for runner in live {
            let s = runner.stats
            if s.isolation != nil { out.sample("vigil_sink_failed", ["sink": s.name], s.failedForGood == nil ? 0 : 1) }
        }
        out.family("vigil_sink_queue_depth", .gauge, "Events waiting in a sink's queue.")
        for runner in live { out.sample("vigil_sink_queue_depth", ["sink": runner.config.name], Double(runner.queue.depth)) }
        out.family("vigil_sink_queue_capacity", .gauge, "The bound of a sink's queue.")
        for runner in live { out.sample("vigil_sink_queue_capacity", ["sink": runner.config.name], Double(runner.config.queueCapacity)) }

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
        for runner in live { runner.sink.appendExposition(to: &bytes) }
        return bytes
    }
}
