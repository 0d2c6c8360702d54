import LinuxProbes
import VigilKit

/// The load averages and runnable task count from /proc/loadavg.
final class LoadMonitor: ProcfsMonitor, PolledMonitor {
    static let spec = PluginSpec(
        name: "load", version: "1.0.0",
        summary: "Load averages over 1, 5 and 15 minutes and runnable tasks, from /proc/loadavg",
        defaultInterval: .seconds(5),
        events: [
            EventDecl("sample", doc: "The load averages at poll time.", fields: [
                FieldDecl("load1", .double, doc: "average runnable and uninterruptible tasks, 1 minute"),
                FieldDecl("load5", .double, doc: "5 minutes"),
                FieldDecl("load15", .double, doc: "15 minutes"),
                FieldDecl("runnable", .int, unit: "tasks", doc: "tasks runnable now"),
                FieldDecl("entities", .int, unit: "tasks", doc: "scheduling entities (tasks) in the system"),
            ], policy: .samples),
        ])

    func start() throws(MonitorError) { try root.require("loadavg") }

    func poll() throws(MonitorError) {
        let load = try MonitorError.probing { () throws(ProbeError) in try root.loadAvg() }
        context.emit("sample", [
            "load1": .double(load.load1), "load5": .double(load.load5), "load15": .double(load.load15),
            "runnable": .int(Int64(load.runnable)), "entities": .int(Int64(load.entities)),
        ])
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(LoadMonitor.self, a, r) }
