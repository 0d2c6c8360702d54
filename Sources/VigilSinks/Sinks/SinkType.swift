import Logging
import VigilABI
import VigilCore
import VigilIsolation

/// A sink type: its settings as the manifest reads them (`SinkSettings`),
/// and how the runtime builds and checks it. One type, in one file, per
/// `type:`; the runtime asks every sink the same questions, through this
/// protocol and `EventSink`, and never by its concrete type.
///
/// Adding one is adding its file here, under Sinks/ (settings, `read`,
/// `makeSink`, the sink itself): the SinkRegistry build plugin lists every
/// type declared `SinkType` in these files into `SinkTypes.standard`
/// (declare it on one line: `extension XSinkConfig: SinkType {`). Then
/// its docs in docs/sinks.md and its tests.
package protocol SinkType: SinkSettings {
    /// The sink these settings describe. The disk buffer in front (when
    /// `diskBuffer` is set) and binding a listening sink are the runtime's.
    func makeSink(_ build: SinkBuild) -> any EventSink
    /// What the machine says of these settings now, before anything starts
    /// (a file sink whose path is a directory): an error refuses `run` and
    /// fails `validate`, at the settings' place in the manifest.
    func preflight(_ sink: SinkConfig) -> [Diagnostic]
    /// What `validate` can say with the plugin probes at hand (an output
    /// plugin found, described, and taking its options).
    func validate(_ sink: SinkConfig, in manifest: Manifest, probes: PluginProbes) -> [Diagnostic]
    /// Where it will run, for `validate`'s summary ("isolation: process
    /// (why)"; a remote_write sink's shards and receiver); nil for sinks
    /// that run in their one thread of the host's.
    func placement(in manifest: Manifest, catalog: PluginCatalog) -> String?
}

extension SinkType {
    package func preflight(_ sink: SinkConfig) -> [Diagnostic] { [] }
    package func validate(_ sink: SinkConfig, in manifest: Manifest, probes: PluginProbes) -> [Diagnostic] { [] }
    package func placement(in manifest: Manifest, catalog: PluginCatalog) -> String? { nil }
}

/// Where a sink reports that the plugin behind it crashed, as a host event
/// (the runtime's `HostEvents`).
package protocol SinkCrashReporting: AnyObject, Sendable {
    func sinkCrashed(sink: String, plugin: String, call: String, death: RunnerDeath, events: Int?, lastLog: [String])
}

/// What a sink type is given to build its sink.
package struct SinkBuild {
    var config: SinkConfig
    /// The host name the encoders write.
    var host: String
    var logger: Logger
    /// The monitors' facts (OTLP resource attributes, Prometheus' target labels).
    var directory: MonitorDirectory?
    /// A relative `plugin:` path is the manifest's directory's.
    var manifestDirectory: String
    /// The manifest's top-level `isolation:`.
    var manifestIsolation: Isolation?
    /// Where an output's runner reports its crashes (the runtime's host events).
    var hostEvents: (any SinkCrashReporting)?
    /// Where output plugins are found.
    var catalog: PluginCatalog?

    /// The monitors' facts now (none without a directory).
    func facts() -> [String: MonitorFacts] { directory?.facts() ?? [:] }
}

extension SinkConfig {
    /// The runtime's half of its settings: every type in `SinkTypes.standard` is a `SinkType`.
    package var sinkType: any SinkType {
        guard let type = settings as? any SinkType else {
            preconditionFailure("sink '\(name)': type '\(type)' is read by the manifest but has no SinkType to build it")
        }
        return type
    }
}

extension SinkBuild {
    /// The sink `config` describes, behind its disk buffer when it has one;
    /// a listening sink binds now unless `bindNow` is false (a reload binds
    /// it once the sink it replaces has let go of the address).
    package static func make(_ config: SinkConfig, host: String, logger: Logger, bindNow: Bool = true,
                         directory: MonitorDirectory? = nil, manifestDirectory: String = "", manifestIsolation: Isolation? = nil,
                         hostEvents: (any SinkCrashReporting)? = nil, catalog: PluginCatalog? = nil) -> any EventSink {
        var sinkLogger = logger
        sinkLogger[metadataKey: "sink"] = "\(config.name)"
        var build = SinkBuild(config: config, host: host, logger: logger, directory: directory, manifestDirectory: manifestDirectory,
                              manifestIsolation: manifestIsolation, hostEvents: hostEvents, catalog: catalog)
        let buffer = config.settings.diskBuffer.flatMap { $0.kind == .disk ? $0 : nil }
        // Behind a disk buffer the sink also sees the monitors whose events
        // the buffer holds from before a restart or reload.
        let remembered = buffer.map { RememberedMonitors(bufferDirectory: $0.path) }
        if let remembered { build.directory = MonitorDirectory(directory, remembering: remembered) }
        var sink = config.sinkType.makeSink(build)
        // Opened on the sink's thread: a buffer that cannot be opened is
        // logged as critical, and every event given to the sink is counted
        // lost, `write_failed`, never sent without the guarantee asked for.
        if let buffer, let remembered {
            sink = DiskBufferedSink(inner: sink, config: buffer, name: config.name, host: host, logger: logger,
                                    remembered: remembered, live: directory)
        }
        if bindNow { sink.bind(logger: sinkLogger) }
        return sink
    }
}

extension ManifestLoader {
    /// A loader that knows this host's sink types.
    package init(file: String, environment: [String: String] = [:], source: (any ManifestSource)? = nil) {
        self.init(file: file, environment: environment, source: source, sinkTypes: .standard)
    }
}
