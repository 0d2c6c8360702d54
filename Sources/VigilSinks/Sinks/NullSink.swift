import VigilCore

/// Discards every event: measures the host without any output cost.
package final class NullSink: EventSink {
    package func write(_ batch: [Event], context: SinkContext) throws {}
    package func shutdown(context: SinkContext) {}
}

/// `type: null`: no keys of its own.
package struct NullSinkSettings: SinkType {
    package static let type = "null"
    package static let keys: [String] = []
    package init() {}
    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> NullSinkSettings? { NullSinkSettings() }
    package func makeSink(_ build: SinkBuild) -> any EventSink { NullSink() }
}
