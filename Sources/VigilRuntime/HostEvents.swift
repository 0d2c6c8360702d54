import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks

/// The host as a monitor of its own life: events of monitor `vigil`, plugin
/// `vigil`, routed like any other.
package final class HostEvents: SinkCrashReporting, @unchecked Sendable {  // `bus` and `route` are set once by `connect`, before any event
    static let spec = [
        EventSpec(kind: "started", doc: "The host started its monitors and sinks.", fields: [
            FieldSpec(name: "version", type: .string), FieldSpec(name: "monitors", type: .int, unit: "count"),
            FieldSpec(name: "sinks", type: .int, unit: "count"), FieldSpec(name: "pid", type: .int),
        ]),
        EventSpec(kind: "plugin_refused", doc: "A monitor could not run: its plugin was refused or its options are invalid.", fields: [
            FieldSpec(name: "monitor", type: .string), FieldSpec(name: "plugin", type: .string),
            FieldSpec(name: "reason", type: .string),
        ]),
        EventSpec(kind: "instance_failed", doc: "A monitor instance failed and was stopped.", fields: [
            FieldSpec(name: "monitor", type: .string), FieldSpec(name: "plugin", type: .string),
            FieldSpec(name: "call", type: .string), FieldSpec(name: "status", type: .string),
            FieldSpec(name: "message", type: .string),
        ]),
        EventSpec(kind: "instance_crashed", doc: "A monitor's runner process ended in a call or between calls: a crash, an exit, a hang or a crossed limit.", fields: [
            FieldSpec(name: "monitor", type: .string), FieldSpec(name: "plugin", type: .string),
            FieldSpec(name: "call", type: .string), FieldSpec(name: "signal", type: .string),
            FieldSpec(name: "exit_status", type: .int), FieldSpec(name: "reason", type: .string),
            FieldSpec(name: "last_log", type: .string),
        ]),
        EventSpec(kind: "sink_crashed", doc: "An output plugin's runner process ended in a call or between calls: a crash, an exit, a hang; a new runner takes the next write.", fields: [
            FieldSpec(name: "sink", type: .string), FieldSpec(name: "plugin", type: .string),
            FieldSpec(name: "call", type: .string), FieldSpec(name: "signal", type: .string),
            FieldSpec(name: "exit_status", type: .int), FieldSpec(name: "reason", type: .string),
            FieldSpec(name: "events", type: .int, unit: "count"), FieldSpec(name: "last_log", type: .string),
        ]),
        EventSpec(kind: "instance_quarantined", doc: "A monitor restarted too often and waits for its plugin file to change or for a restart to be asked for.", fields: [
            FieldSpec(name: "monitor", type: .string), FieldSpec(name: "plugin", type: .string),
            FieldSpec(name: "restarts", type: .int, unit: "count"), FieldSpec(name: "window_s", type: .double, unit: "seconds"),
        ]),
        EventSpec(kind: "reloaded", doc: "The host applied a changed manifest: what it added, removed and restarted; the rest ran on untouched.", fields: [
            FieldSpec(name: "added", type: .string), FieldSpec(name: "removed", type: .string),
            FieldSpec(name: "changed", type: .string), FieldSpec(name: "unchanged", type: .int, unit: "count"),
        ]),
        EventSpec(kind: "monitor_stopped", doc: "An operator stopped a monitor (vigil ctl stop, or the stop of a restart); after a stop it stays stopped until started.", fields: [
            FieldSpec(name: "monitor", type: .string),
        ]),
        EventSpec(kind: "monitor_started", doc: "An operator started a monitor (vigil ctl start, or the start of a restart).", fields: [
            FieldSpec(name: "monitor", type: .string),
        ]),
        EventSpec(kind: "stopping", doc: "The host is stopping its monitors, then draining its sinks.", fields: [
            FieldSpec(name: "reason", type: .string),
        ]),
    ]

    /// Set once, by `connect`, before any event.
    private var bus: EventBus?
    private var route: Route?
    private let clock: @Sendable () -> Int64

    init(clock: @escaping @Sendable () -> Int64) {
        self.clock = clock
    }

    func connect(bus: EventBus) {
        route = bus.route(source: Manifest.hostMonitorName, kinds: HostEvents.spec.map(\.kind))
        self.bus = bus
    }

    package func publish(_ kind: String, _ severity: Severity, _ fields: [Field]) {
        guard let bus, let route else { return }
        let event = Event(time: clock(), monitor: Manifest.hostMonitorName, plugin: Manifest.hostMonitorName,
                          kind: kind, severity: severity, fields: FieldStorage.shared.take(holding: fields))
        bus.publish(event, route: route, kindIndex: Self.spec.firstIndex { $0.kind == kind } ?? -1, wait: false)
    }

    func instanceFailed(monitor: String, plugin: String, call: String, status: String, message: String) {
        publish("instance_failed", .error, [
            Field("monitor", .string(monitor)), Field("plugin", .string(plugin)), Field("call", .string(call)),
            Field("status", .string(status)), Field("message", .string(message)),
        ])
    }

    /// `plugin` is the file's path; `signal` and `exit_status` are present
    /// when the runner ended that way; `last_log` is its last log lines.
    func instanceCrashed(monitor: String, plugin: String, call: String, death: RunnerDeath, lastLog: [String]) {
        var fields = [Field("monitor", .string(monitor)), Field("plugin", .string(plugin)), Field("call", .string(call))]
        if let signal = death.signal { fields.append(Field("signal", .string(ChildProcess.shortSignalName(signal)))) }
        if let code = death.exitCode { fields.append(Field("exit_status", .int(Int64(code)))) }
        fields.append(Field("reason", .string(death.description)))
        fields.append(Field("last_log", .string(lastLog.joined(separator: "\n"))))
        publish("instance_crashed", .error, fields)
    }

    /// An output's runner ended: `plugin` is the file's path; `events` the
    /// batch in the call (a write), if any.
    package func sinkCrashed(sink: String, plugin: String, call: String, death: RunnerDeath, events: Int?, lastLog: [String]) {
        var fields = [Field("sink", .string(sink)), Field("plugin", .string(plugin)), Field("call", .string(call))]
        if let signal = death.signal { fields.append(Field("signal", .string(ChildProcess.shortSignalName(signal)))) }
        if let code = death.exitCode { fields.append(Field("exit_status", .int(Int64(code)))) }
        fields.append(Field("reason", .string(death.description)))
        if let events { fields.append(Field("events", .int(Int64(events)))) }
        fields.append(Field("last_log", .string(lastLog.joined(separator: "\n"))))
        publish("sink_crashed", .error, fields)
    }

    func instanceQuarantined(monitor: String, plugin: String, restarts: Int, window: Int64) {
        publish("instance_quarantined", .critical, [
            Field("monitor", .string(monitor)), Field("plugin", .string(plugin)),
            Field("restarts", .int(Int64(restarts))), Field("window_s", .double(Double(window) / 1e9)),
        ])
    }

    func pluginRefused(monitor: String, plugin: String, reason: String) {
        publish("plugin_refused", .error, [
            Field("monitor", .string(monitor)), Field("plugin", .string(plugin)), Field("reason", .string(reason)),
        ])
    }
}
