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
    /// The top-level `interval:`: that of every monitor that does not say
    /// its own (applied by the loader); nil: each plugin's default.
    public var interval: Int64?

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
    public var pluginIsPath: Bool { Self.namesFile(plugin) }

    /// True when a plugin reference names a file (it has a '/' or ends in
    /// `.so`) rather than a plugin to look up by name. Read as bytes: through
    /// Foundation's `contains`, the first call in a process set up its string
    /// search, 0.1 ms charged to the first plugin a host loads.
    public static func namesFile(_ reference: String) -> Bool {
        reference.utf8.contains(UInt8(ascii: "/")) || reference.hasSuffix(".so")
    }
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
    /// What its `type:` reads and builds (a `SinkType` in the host).
    package var settings: any SinkSettings
    /// Its `type:`.
    public var type: String { Swift.type(of: settings).type }
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

    package init(name: String, settings: any SinkSettings, match: [String] = ["*"], minSeverity: Severity = .debug,
                 queueCapacity: Int = SinkConfig.defaultQueueCapacity, overflow: OverflowPolicy = .dropOldest,
                 location: SourceLocation) {
        self.name = name
        self.settings = settings
        self.match = match
        self.minSeverity = minSeverity
        self.queueCapacity = queueCapacity
        self.overflow = overflow
        self.location = location
    }

    public static let defaultQueueCapacity = 65_536
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
