/// A validated manifest: what `vigil run` starts. Plugin options are kept as
/// written until the plugin's self-description is known (see `OptionBinder`).
public struct Manifest: Sendable {
    /// The main manifest file.
    public var file: String
    /// Every file the manifest was built from, in the order read: the main
    /// file first, then the fragments its `include:` patterns matched (each
    /// pattern's matches sorted by name). What a reload re-reads, and a watch
    /// watches.
    public var files: [String]
    /// The `include:` patterns as written, with where each is written.
    public var includes: [IncludePattern] = []
    /// The directories the `include:` patterns with wildcards look into,
    /// resolved, in order, each once, whether it exists or not: a file added
    /// to one may change the manifest (a watch watches them, or their parent
    /// when one does not exist yet).
    public var includeDirectories: [String] = []
    /// Overrides the host name written in every event.
    public var host: String?
    /// Log level of the host's own messages.
    public var logLevel: Severity
    /// Directories searched for plugins, as written (relative to the manifest's directory).
    public var pluginDirs: [String]
    /// `allow_unsafe_plugins: true`: load plugin files that fail the owner and
    /// permission rules (with a warning each), as `--allow-unsafe-plugins` does.
    public var allowUnsafePlugins = false
    public var monitors: [MonitorConfig]
    public var sinks: [SinkConfig]
    /// Conditions over several monitors' latest values (see RulesConfig.swift).
    public var rules: [RuleConfig] = []
    /// The top-level `isolation:`: that of every monitor and plugin sink that does not say its own.
    /// Nil: the host's rule decides (see IsolationConfig.swift).
    public var isolation: Isolation?
    /// Where the top-level `isolation:` value is written.
    public var isolationLocation: SourceLocation?

    public init(file: String, host: String? = nil, logLevel: Severity = .info, pluginDirs: [String] = [],
                monitors: [MonitorConfig] = [], sinks: [SinkConfig] = []) {
        self.file = file
        self.files = [file]
        self.host = host
        self.logLevel = logLevel
        self.pluginDirs = pluginDirs
        self.monitors = monitors
        self.sinks = sinks
    }

    /// The directory of the manifest file ("" for a file in the current
    /// directory): relative paths in the manifest are taken from here.
    public var directory: String {
        guard let slash = file.lastIndex(of: "/") else { return "" }
        return slash == file.startIndex ? "/" : String(file[..<slash])
    }

    /// Plugin directories with relative ones resolved against `directory`.
    public var resolvedPluginDirs: [String] {
        pluginDirs.map { $0.hasPrefix("/") || directory.isEmpty ? $0 : "\(directory)/\($0)" }
    }

    /// What `monitor`'s `plugin:` names: a plugin name to look up, or a path,
    /// a relative one resolved against `directory` like `plugin_dirs`.
    public func pluginReference(of monitor: MonitorConfig) -> String {
        // The directory only for a relative path: a name (most monitors) needs none.
        guard monitor.pluginIsPath, !monitor.plugin.hasPrefix("/") else { return monitor.plugin }
        return Self.pluginReference(monitor.plugin, isPath: true, in: directory)
    }

    /// What a plugin sink's `plugin:` names, resolved as a monitor's is.
    public func pluginReference(of sink: PluginSinkConfig) -> String {
        Self.pluginReference(sink.plugin, isPath: sink.pluginIsPath, in: directory)
    }

    /// `plugin`, a relative path resolved against `directory` (a manifest's).
    public static func pluginReference(_ plugin: String, isPath: Bool, in directory: String) -> String {
        isPath && !plugin.hasPrefix("/") && !directory.isEmpty ? "\(directory)/\(plugin)" : plugin
    }

    /// The name of the host's own monitor, under which it emits events about itself.
    public static let hostMonitorName = "vigil"
}

public struct MonitorConfig: Sendable {
    public var name: String
    /// A plugin name (`cpu`) or a path to a shared library (`./plugins/x.so`).
    public var plugin: String
    /// Nil: the plugin's default interval.
    public var interval: Int64?
    /// Deadline of each call into the plugin; a call past it is reported.
    /// Nil: the larger of 5 s and the interval.
    public var timeout: Int64?
    public var enabled: Bool
    /// The `options:` mapping as written.
    public var options: [ConfigEntry]
    /// Thresholds on the monitor's numeric fields.
    public var thresholds: [ThresholdConfig] = []
    /// Where the plugin runs. Nil: the manifest's top-level `isolation:`,
    /// else the host's rule.
    public var isolation: Isolation?
    /// Where the monitor's own `isolation:` value is written.
    public var isolationLocation: SourceLocation?
    /// How an isolated monitor's runner is restarted (isolation: process only).
    public var supervision = SupervisionConfig()
    /// What an isolated monitor's runner may use (isolation: process only).
    public var limits = ResourceLimits()
    /// Where the `limits:` mapping is written.
    public var limitsLocation: SourceLocation?
    /// Run the runner as this user, a name or a numeric uid (isolation:
    /// process only). Nil: as the user vigil runs as.
    public var user: String?
    /// Where the `user:` value is written.
    public var userLocation: SourceLocation?
    public var location: SourceLocation
    public var pluginLocation: SourceLocation
    public var optionsLocation: SourceLocation

    public init(name: String, plugin: String, interval: Int64? = nil, enabled: Bool = true,
                options: [ConfigEntry] = [], location: SourceLocation) {
        self.name = name
        self.plugin = plugin
        self.interval = interval
        self.enabled = enabled
        self.options = options
        self.location = location
        self.pluginLocation = location
        self.optionsLocation = location
    }

    /// True when `plugin` names a file rather than a plugin to look up.
    public var pluginIsPath: Bool { plugin.contains("/") || plugin.hasSuffix(".so") }
}

/// What a sink does when its queue is full.
public enum OverflowPolicy: String, Sendable, CaseIterable {
    /// Discard the oldest queued event to make room (the default: keep the latest state).
    case dropOldest = "drop_oldest"
    /// Discard the event being added.
    case dropNewest = "drop_newest"
    /// Make the emitting plugin wait until there is room. Never loses an event;
    /// a stalled sink stalls every producer that routes to it.
    case block
}

public struct SinkConfig: Sendable {
    public var name: String
    public var kind: SinkKind
    /// Globs over `MONITOR/KIND`; a pattern without `/` means `MONITOR/*`; a
    /// leading `!` excludes.
    public var match: [String]
    public var minSeverity: Severity
    /// Events the sink's queue holds before its overflow policy applies.
    public var queueCapacity: Int
    public var overflow: OverflowPolicy
    public var location: SourceLocation
    /// Where each entry of `match` is written (empty when `match` was not).
    public var matchLocations: [SourceLocation] = []

    public init(name: String, kind: SinkKind, match: [String] = ["*"], minSeverity: Severity = .debug,
                queueCapacity: Int = SinkConfig.defaultQueueCapacity, overflow: OverflowPolicy = .dropOldest,
                location: SourceLocation) {
        self.name = name
        self.kind = kind
        self.match = match
        self.minSeverity = minSeverity
        self.queueCapacity = queueCapacity
        self.overflow = overflow
        self.location = location
    }

    public static let defaultQueueCapacity = 65_536
}

public enum SinkKind: Sendable {
    case log(LogSinkConfig)
    case file(FileSinkConfig)
    case socket(SocketSinkConfig)
    /// Serves the events' values as Prometheus series.
    case prometheus(PrometheusSinkConfig)
    /// RFC 5424 messages to a syslog daemon.
    case syslog(SyslogSinkConfig)
    /// OTLP/HTTP to an OpenTelemetry receiver.
    case otlp(OTLPSinkConfig)
    /// An output plugin (ABI 1.5) takes the events.
    case plugin(PluginSinkConfig)
    /// Discards every event (for benchmarks and for measuring the router).
    case null

    public var typeName: String {
        switch self {
        case .log: "log"
        case .file: "file"
        case .socket: "socket"
        case .prometheus: "prometheus"
        case .syslog: "syslog"
        case .otlp: "otlp"
        case .plugin: "plugin"
        case .null: "null"
        }
    }
}

/// A sink run by an output plugin (ABI 1.5):
///
///     sinks:
///       graphite:
///         type: plugin
///         plugin: graphite            # a name in plugin_dirs, or a path
///         options: { host: 127.0.0.1, port: 2003 }
///         batch: 500                  # events per write, at most
///         retry_min: 100ms            # backoff of RETRY answers
///         retry_max: 30s
///         flush_interval: 1s          # flush() of an output that buffers
///         isolation: process          # or none; the default as for monitors
///         write_timeout: 10s          # a write in a runner past this kills it
///         timeout: 5s                 # every other call (create, start, flush, stop)
///         restart_backoff: { min: 100ms, max: 30s }   # isolation: process only,
///         limits: { memory: 200MiB }                  # as for monitors
///         user: nobody
///         buffer: { type: disk, path: /var/lib/vigil/buffer/graphite }
public struct PluginSinkConfig: Sendable {
    public var plugin: String
    public var pluginLocation: SourceLocation
    /// `plugin` is a path, not a name (as a monitor's: a `/` or a `.so`).
    public var pluginIsPath: Bool { plugin.contains("/") || plugin.hasSuffix(".so") }
    /// The `options:` mapping as written.
    public var options: [ConfigEntry] = []
    public var optionsLocation: SourceLocation
    public var batch = 500
    public var retryMin: Int64 = 100_000_000
    public var retryMax: Int64 = 30_000_000_000
    public var flushInterval: Int64 = 1_000_000_000
    /// Where it runs. Nil: the manifest's top-level `isolation:`, else the
    /// host's rule (IsolationDecision), as for a monitor.
    public var isolation: Isolation?
    public var isolationLocation: SourceLocation?
    /// How long one `write` may take; in a runner, one past it is killed and
    /// the batch written again to a new one. In the host's process a write
    /// cannot be interrupted: one past it is only logged.
    public var writeTimeout: Int64 = 10_000_000_000
    public var writeTimeoutLocation: SourceLocation?
    /// How long each other call may take (create, start, flush, stop, destroy).
    public var timeout: Int64 = 5_000_000_000
    public var timeoutLocation: SourceLocation?
    /// The runner's restarts after a crash or a hang (isolation: process):
    /// only `restart_backoff` applies (restart and quarantine do not: a sink
    /// always restarts its output, and a batch that crashed it
    /// `maxBatchCrashes` times is counted lost).
    public var supervision: SupervisionConfig = {
        var s = SupervisionConfig()
        s.backoffMin = 100_000_000
        s.backoffMax = 30_000_000_000
        return s
    }()
    public var supervisionLocation: SourceLocation?
    /// What the runner may use (isolation: process).
    public var limits = ResourceLimits()
    public var limitsLocation: SourceLocation?
    /// Run the runner as this user (isolation: process).
    public var user: String?
    public var userLocation: SourceLocation?

    /// Crashes (or hangs) of the output in one batch's writes after which the
    /// batch is counted lost (`write_failed`), so that a batch that kills
    /// every output cannot stall the sink.
    public static let maxBatchCrashes = 3
    /// `buffer: { type: disk }`: events kept on disk until the output
    /// answered for them (OK or REJECT), across crashes and restarts.
    public var buffer: SinkBufferConfig?

    public init(plugin: String, pluginLocation: SourceLocation) {
        self.plugin = plugin
        self.pluginLocation = pluginLocation
        self.optionsLocation = pluginLocation
    }

    public static let maxBatch = 100_000
}

public struct LogSinkConfig: Sendable {
    public enum Stream: String, Sendable, CaseIterable { case stderr, stdout }
    public enum Format: String, Sendable, CaseIterable { case text, json }
    public var stream: Stream = .stderr
    public var format: Format = .text
    public init() {}
}

public struct FileSinkConfig: Sendable {
    public enum Fsync: String, Sendable, CaseIterable { case never, interval, always }
    public var path: String
    /// Rotate when the file would grow past this many bytes; nil: never.
    public var rotateSize: Int64?
    /// Rotated files kept: `events.jsonl.1` … `events.jsonl.N`.
    public var rotateKeep: Int = 5
    public var fsync: Fsync = .interval
    public var fsyncInterval: Int64 = 1_000_000_000
    /// Where `path` is written.
    public var pathLocation: SourceLocation?
    public init(path: String) { self.path = path }
}

/// `type: prometheus`: the events' numbers as series at
/// `http://listen/metrics`.
public struct PrometheusSinkConfig: Sendable {
    public static let defaultPort: UInt16 = 9798
    public var listenHost = "127.0.0.1"
    public var listenPort: UInt16 = PrometheusSinkConfig.defaultPort
    /// A series goes this long after the last event that carried it; nil:
    /// five of its monitor's intervals (five minutes for one not polled).
    public var expireAfter: Int64?
    /// The most series held; past it new series are not made (counted).
    public var maxSeries = 100_000
    /// Where `listen` is written.
    public var listenLocation: SourceLocation?
    public init() {}
}

/// `buffer:` of a network sink (socket connect, syslog over TCP, otlp).
public struct SinkBufferConfig: Sendable {
    public enum Kind: String, Sendable, CaseIterable { case memory, disk }
    public enum WhenFull: String, Sendable, CaseIterable {
        case block
        case dropOldest = "drop_oldest"
        case dropNewest = "drop_newest"
    }
    public enum Fsync: String, Sendable, CaseIterable { case always, interval, never }
    public var kind: Kind
    /// The disk buffer's directory (its own, one per sink).
    public var path: String
    public var maxSize: Int64 = 1 << 30
    public var whenFull: WhenFull = .block
    public var fsync: Fsync = .interval
    public var location: SourceLocation
    public init(kind: Kind, path: String, location: SourceLocation) {
        self.kind = kind
        self.path = path
        self.location = location
    }
}

/// `type: otlp`: OTLP/HTTP to `endpoint` (`http://HOST:PORT[/PATH]`; the
/// signals' paths `/v1/logs` and `/v1/metrics` are appended).
public struct OTLPSinkConfig: Sendable {
    public enum Signal: String, Sendable, CaseIterable { case logs, metrics }
    public enum Encoding: String, Sendable, CaseIterable { case protobuf, json }
    public enum Compression: String, Sendable, CaseIterable { case gzip, none }

    public var host: String
    public var port: UInt16
    /// The endpoint's path, without a trailing `/` ("" for none).
    public var basePath: String
    public var signals: [Signal] = [.logs]
    public var encoding: Encoding = .protobuf
    public var compression: Compression = .gzip
    /// Sent with every request (an `Authorization`, a tenant).
    public var headers: [(String, String)] = []
    /// A request carries at most this many events…
    public var batchEvents = 512
    /// …and this many bytes before compression…
    public var batchBytes = 4 << 20
    /// …and a partial batch waits at most this long for more.
    public var batchTimeout: Int64 = 1_000_000_000
    /// Backoff between retries (429, 502, 503, 504, connection errors).
    public var retryMin: Int64 = 500_000_000
    public var retryMax: Int64 = 30_000_000_000
    /// One request's deadline.
    public var timeout: Int64 = 10_000_000_000
    public var endpointLocation: SourceLocation?
    public var buffer: SinkBufferConfig?

    public init(host: String, port: UInt16, basePath: String) {
        self.host = host
        self.port = port
        self.basePath = basePath
    }

    /// `http://HOST[:PORT][/PATH]`, port 4318 by default; nil with why not.
    public static func parseEndpoint(_ text: String) -> Result<(host: String, port: UInt16, path: String), EndpointError> {
        if text.hasPrefix("https://") { return .failure(.https) }
        guard text.hasPrefix("http://") else { return .failure(.scheme) }
        var rest = Substring(text.dropFirst(7))
        var path = ""
        if let slash = rest.firstIndex(of: "/") {
            path = String(rest[slash...])
            rest = rest[..<slash]
        }
        while path.hasSuffix("/") { path.removeLast() }
        if path.contains(where: { $0 == "?" || $0 == "#" || $0 == " " || $0.asciiValue.map { $0 < 0x21 } ?? false }) {
            return .failure(.path)
        }
        var host = rest
        var port: UInt16 = 4318
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return .failure(.host) }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = UInt16(after.dropFirst()), p > 0 else { return .failure(.port) }
                port = p
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = rest[..<colon]
            guard let p = UInt16(rest[rest.index(after: colon)...]), p > 0 else { return .failure(.port) }
            port = p
        }
        guard !host.isEmpty, host.count <= 253 else { return .failure(.host) }
        return .success((String(host), port, path))
    }

    public enum EndpointError: Error, CustomStringConvertible {
        case https, scheme, host, port, path
        public var description: String {
            switch self {
            case .https: "https is not supported by this build (no TLS library): send to a collector on loopback or through a TLS-terminating proxy"
            case .scheme: "an endpoint is http://HOST[:PORT][/PATH]"
            case .host: "the endpoint has no host"
            case .port: "the endpoint's port is not 1-65535"
            case .path: "the endpoint's path may not hold a query, a fragment or spaces"
            }
        }
    }
}

/// `type: syslog`: RFC 5424 to `connect` (udp://, tcp:// with octet
/// counting, or unix: datagrams, as /dev/log takes them).
public struct SyslogSinkConfig: Sendable {
    public var address: SocketAddress
    public var appName = "vigil"
    public var facility: SyslogEncoder.Facility = .daemon
    /// The longest message sent; longer ones are cut (counted). nil: the
    /// transport's (`defaultMaxMessageSize`).
    public var maxMessageSize: Int?
    public var reconnectMin: Int64 = 100_000_000
    public var reconnectMax: Int64 = 30_000_000_000
    public var addressLocation: SourceLocation?
    public var buffer: SinkBufferConfig?

    public init(address: SocketAddress) { self.address = address }

    /// 2048 over UDP (RFC 5426 asks receivers for that much, no more), 8 KiB
    /// on a stream or /dev/log (rsyslog's and syslog-ng's default).
    public var effectiveMaxMessageSize: Int {
        if let maxMessageSize { return maxMessageSize }
        if case .udp = address { return 2048 }
        return 8192
    }
}

public struct SocketSinkConfig: Sendable {
    public enum Mode: Sendable, Equatable {
        case connect(SocketAddress)
        case listen(SocketAddress)
    }
    public var mode: Mode
    /// First and largest wait between reconnection attempts (connect mode).
    public var reconnectMin: Int64 = 100_000_000
    public var reconnectMax: Int64 = 30_000_000_000
    /// Bytes a listening sink holds for one client before disconnecting it.
    public var clientBuffer: Int64 = 4 << 20
    /// Where the `connect` or `listen` address is written.
    public var addressLocation: SourceLocation?
    /// `buffer: { type: disk }` (connect only).
    public var buffer: SinkBufferConfig?
    public init(mode: Mode) { self.mode = mode }
}

extension MonitorConfig {
    /// Where a plugin's complaint about an option points in the manifest. A
    /// plugin's INVALID_CONFIG message may start with `options.NAME`, then
    /// `[INDEX]` or `.KEY` steps into list and map values, then `: `
    /// (`options.args[1].int32: out of range`). Returns the location of the
    /// deepest key the path reaches, or list item where it ends in one (the
    /// `options:` key when the option was not written, a default being at
    /// fault), and the message.
    public func locate(pluginMessage message: String) -> (location: SourceLocation, message: String) {
        guard message.hasPrefix("options."), let colon = message.firstRange(of: ": ") else { return (location, message) }
        let path = message[message.index(message.startIndex, offsetBy: 8)..<colon.lowerBound]
        let rest = String(message[colon.upperBound...])
        var steps: [PathStep] = []
        var name = ""
        var i = path.startIndex
        while i < path.endIndex, path[i] != "[", path[i] != "." { name.append(path[i]); i = path.index(after: i) }
        while i < path.endIndex {
            if path[i] == "[" {
                guard let close = path[i...].firstIndex(of: "]"), let n = Int(path[path.index(after: i)..<close]) else { break }
                steps.append(.index(n))
                i = path.index(after: close)
            } else {
                var key = ""
                i = path.index(after: i)
                while i < path.endIndex, path[i] != "[", path[i] != "." { key.append(path[i]); i = path.index(after: i) }
                steps.append(.key(key))
            }
        }
        guard let entry = options.first(where: { $0.key.text == name }) else {
            return (optionsLocation, "options.\(path): \(rest)")
        }
        // Reported at the deepest key the path names (the item of a list
        // where it ends in one): the key is what the message is about, as a
        // configuration's own errors are reported (issue 25).
        var node = entry.value, at = entry.key.location
        walk: for step in steps {
            switch (step, node) {
            case (.index(let n), .sequence(let items, _)) where n >= 0 && n < items.count:
                node = items[n]
                at = node.location
            case (.key(let k), .mapping(let entries, _)):
                guard let next = entries.first(where: { $0.key.text == k }) else { break walk }
                node = next.value
                at = next.key.location
            default: break walk
            }
        }
        return (at, "options.\(path): \(rest)")
    }

    private enum PathStep { case index(Int), key(String) }
}

/// One pattern of a manifest's `include:`.
public struct IncludePattern: Sendable, Equatable {
    /// As written (relative to the main manifest's directory, or absolute).
    public var pattern: String
    public var location: SourceLocation

    public init(pattern: String, location: SourceLocation) {
        self.pattern = pattern
        self.location = location
    }
}

/// The bounds a manifest is held to, so that no value in it can trap, hang
/// or exhaust the host: each refusal names the limit it passed.
public enum ManifestLimits {
    /// The largest manifest file read (a manifest is a page or two of text).
    public static let maxFileBytes = 4 << 20
    /// The main manifest and its fragments together, in bytes.
    public static let maxTotalBytes = 8 << 20
    /// Fragments an `include:` may bring in, in all.
    public static let maxIncludedFiles = 256
    /// Names of one directory an `include:` pattern looks at: a pattern over
    /// a huge directory is refused, not walked.
    public static let maxIncludeDirectoryEntries = 4096
    /// The file-name part of an `include:` pattern (the part with wildcards),
    /// in bytes: NAME_MAX, which no file name passes; it bounds the matching.
    public static let maxIncludeNamePatternBytes = 255
    /// A whole `include:` pattern, in bytes (PATH_MAX).
    public static let maxIncludePatternBytes = 4096
    /// Nodes that aliases may bring in, in all (`*name` repeats its anchor's
    /// whole subtree; nine levels of nine are a billion nodes).
    public static let maxAliasNodes = 10_000
    /// Nesting of lists and mappings, aliases expanded.
    public static let maxDepth = 64
    /// Byte-level problems reported before the rest are summed up in one line.
    public static let maxTextProblems = 20
    /// The longest duration a manifest takes (intervals, timeouts, backoffs, holds).
    public static let maxDuration: Int64 = 365 * 86_400_000_000_000
    public static let maxDurationText = "365d"
    /// The largest size a manifest takes (rotation sizes).
    public static let maxSize: Int64 = 1 << 50
    public static let maxSizeText = "1PiB"
    /// A listening socket sink holds this much per client in memory, at most.
    public static let maxClientBuffer: Int64 = 1 << 30
    /// Events a sink's queue may hold.
    public static let maxQueueSize: Int64 = 1 << 24
    /// A unix socket path, in bytes: `sun_path` is 108 bytes with its NUL.
    public static let maxUnixPathBytes = 107
    /// The shortest wait before restarting a runner: less is a busy loop of forks.
    public static let minRestartBackoff: Int64 = 10_000_000
    /// The shortest window in which restarts are counted against `max_restarts`.
    public static let minRestartWindow: Int64 = 1_000_000_000
    /// Restarts allowed within one window (0: report the failure, never restart).
    public static let maxRestarts: Int64 = 1000
    /// The least memory a runner may be limited to: a runner is the vigil
    /// binary, and the Swift runtime and Foundation it loads take about 18MiB
    /// (resident) before the plugin does anything.
    public static let minRunnerMemory: Int64 = 32 << 20
    /// CPU limits, in percent of one core: from 1% to 64 cores.
    public static let cpuPercent: ClosedRange<Double> = 1...6400
    /// RLIMIT_NOFILE of a runner: at least its standard streams, its channel to
    /// the host and a few for the plugin; at most Linux's default `fs.nr_open`,
    /// past which the limit cannot be raised without changing the machine.
    public static let openFiles: ClosedRange<Int64> = 16...1_048_576
    /// The largest numeric uid: `(uid_t)-1` means "no change" to setresuid.
    public static let maxUID: Int64 = 4_294_967_294
}
