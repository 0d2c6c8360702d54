import VigilABI
import VigilCore

/// The host as a monitor of its own life: events of monitor `vigil`, plugin
/// `vigil`, routed like any other.
final class HostEvents: @unchecked Sendable {
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
        EventSpec(kind: "stopping", doc: "The host is stopping its monitors, then draining its sinks.", fields: [
            FieldSpec(name: "reason", type: .string),
        ]),
    ]

    private var bus: EventBus?
    private var routes: MonitorRoutes?
    private let clock: @Sendable () -> Int64

    init(clock: @escaping @Sendable () -> Int64) {
        self.clock = clock
    }

    func connect(bus: EventBus, compiler: RouteCompiler) {
        self.bus = bus
        self.routes = compiler.routes(monitor: Manifest.hostMonitorName, kinds: Self.spec.map(\.kind))
    }

    func publish(_ kind: String, _ severity: Severity, _ fields: [Field]) {
        guard let bus, let routes else { return }
        var event = Event(time: clock(), monitor: Manifest.hostMonitorName, plugin: Manifest.hostMonitorName,
                          kind: kind, severity: severity, fields: fields)
        bus.publish(&event, to: routes.sinks(kind: kind, severity: severity), wait: false)
    }

    func instanceFailed(monitor: String, plugin: String, call: String, status: String, message: String) {
        publish("instance_failed", .error, [
            Field("monitor", .string(monitor)), Field("plugin", .string(plugin)), Field("call", .string(call)),
            Field("status", .string(status)), Field("message", .string(message)),
        ])
    }

    func pluginRefused(monitor: String, plugin: String, reason: String) {
        publish("plugin_refused", .error, [
            Field("monitor", .string(monitor)), Field("plugin", .string(plugin)), Field("reason", .string(reason)),
        ])
    }
}
