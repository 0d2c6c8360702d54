import VigilSinks

extension VigilRuntime: MonitorFactsSource {
    /// The running monitors as the sinks see them (`MonitorDirectory`).
    package func monitorFacts(of monitor: String) -> MonitorFacts? {
        guard let instance = instances.first(where: { $0.name == monitor }) else { return nil }
        return MonitorFacts(instance: ObjectIdentifier(instance), description: instance.description,
                            interval: instance.interval, running: instance.state == .running)
    }

    package func monitorFacts() -> [String: MonitorFacts] {
        var out: [String: MonitorFacts] = [:]
        for instance in instances {
            out[instance.name] = MonitorFacts(instance: ObjectIdentifier(instance), description: instance.description,
                                              interval: instance.interval, running: instance.state == .running)
        }
        return out
    }

    /// The host's own figures, for a `prometheus` sink with `self_metrics: true`.
    package func selfMetrics() -> [UInt8] { SelfMetrics(runtime: self).exposition(sinkSeries: false) }
}
