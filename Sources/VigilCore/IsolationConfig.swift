/// Where a monitor's plugin, or a sink's output plugin, runs.
///
///     isolation: process            # top level: every monitor's and plugin sink's default
///     monitors:
///       sensor:
///         plugin: ./plugins/vendor-sensor.so
///         isolation: process        # or none
///         restart: on-failure       # always | never
///         restart_backoff: { min: 1s, max: 5m }
///         max_restarts: 5
///         restart_window: 10m
///         limits: { memory: 200MiB, cpu: 25%, open_files: 256 }
///         user: nobody
public enum Isolation: String, Sendable, CaseIterable {
    /// In a runner process of its own, supervised by the host, so that a crash
    /// or hang of the plugin is not the host's.
    case process
    /// In the host's process.
    case none
}

/// When a runner that ended is started again.
public enum RestartPolicy: String, Sendable, CaseIterable {
    /// Only when it failed.
    case onFailure = "on-failure"
    /// Whenever it ended.
    case always
    /// Never: the failure is reported and the monitor stays down.
    case never
}

/// What a runner may use. Nil: not limited.
public struct ResourceLimits: Sendable, Equatable {
    /// Bytes of memory (`memory: 200MiB`), at least `ManifestLimits.minRunnerMemory`.
    public var memory: Int64?
    /// CPU time in percent of one core (`cpu: 25%`); past 100 for several cores.
    public var cpuPercent: Double?
    /// Open file descriptors (`open_files: 256`): RLIMIT_NOFILE.
    public var openFiles: Int?

    public init(memory: Int64? = nil, cpuPercent: Double? = nil, openFiles: Int? = nil) {
        self.memory = memory
        self.cpuPercent = cpuPercent
        self.openFiles = openFiles
    }

    /// No limit is set.
    public var isEmpty: Bool { memory == nil && cpuPercent == nil && openFiles == nil }
}

/// How the host restarts a runner that ended.
public struct SupervisionConfig: Sendable, Equatable {
    /// `restart:`
    public var restart: RestartPolicy = .onFailure
    /// `restart_backoff: { min, max }`: the first wait before a restart and
    /// the largest one (ns).
    public var backoffMin: Int64 = 1_000_000_000
    public var backoffMax: Int64 = 300_000_000_000
    /// `max_restarts:` restarts within `restartWindow`; one more and the
    /// monitor is given up. 0: report the first failure, never restart.
    public var maxRestarts: Int = 5
    /// `restart_window:` (ns).
    public var restartWindow: Int64 = 600_000_000_000

    public init() {}
}

// MARK: - reading them from the manifest

extension ManifestLoader {
    /// The keys that configure a runner: they apply only to isolation: process.
    static let runnerKeys = ["restart", "restart_backoff", "max_restarts", "restart_window", "limits", "user"]
    /// The monitor keys read here.
    static let isolationKeys = ["isolation"] + runnerKeys
    package static let backoffKeys = ["min", "max"]
    package static let resourceLimitKeys = ["memory", "cpu", "open_files"]

    /// An `isolation:` value, if valid, with where it is written.
    func loadIsolation(_ node: ConfigNode, _ d: inout Diags) -> (Isolation, SourceLocation)? {
        d.choice(node, what: "'isolation'", of: Isolation.self).map { ($0, node.location) }
    }

    /// A monitor's isolation keys into `monitor`. `inherited` is the top-level
    /// `isolation:`; with isolation: none, the keys for a runner are warned about.
    func loadIsolationKeys(_ keys: Keys, into monitor: inout MonitorConfig, inherited: (Isolation, SourceLocation)?,
                           _ d: inout Diags) {
        var effective = inherited
        if let node = keys["isolation"], let own = loadIsolation(node, &d) {
            (monitor.isolation, monitor.isolationLocation) = own
            effective = own
        }
        loadSupervision(keys, into: &monitor.supervision, &d)
        if let node = keys["limits"],
           let limits = Keys(nested: node, what: "'limits'", of: keys.context, known: Self.resourceLimitKeys,
                             example: "limits: { memory: 200MiB, cpu: 25%, open_files: 256 }", &d) {
            monitor.limits = loadLimits(limits, &d)
            monitor.limitsLocation = node.location
        }
        if let node = keys["user"], let user = loadUser(node, &d) {
            monitor.user = user
            monitor.userLocation = node.location
        }
        guard let (isolation, at) = effective, isolation == .none else { return }
        let source = at == monitor.isolationLocation ? "" : "the top-level "
        for entry in keys.entries where Self.runnerKeys.contains(entry.key.text) {
            d.warning(entry.key.location, "'\(entry.key.text)' applies only to isolation: process",
                      hint: "\(keys.context) runs in vigil's own process (\(source)isolation: none at \(at)); remove '\(entry.key.text)' or set isolation: process")
        }
    }

    func loadSupervision(_ keys: Keys, into s: inout SupervisionConfig, _ d: inout Diags) {
        if let node = keys["restart"], let policy = d.choice(node, what: "'restart'", of: RestartPolicy.self) {
            s.restart = policy
        }
        if let node = keys["restart_backoff"],
           let backoff = Keys(nested: node, what: "'restart_backoff'", of: keys.context, known: Self.backoffKeys,
                              example: "restart_backoff: { min: 1s, max: 5m }", &d) {
            loadBackoff(backoff, into: &s, &d)
        }
        if let node = keys["max_restarts"], let n = d.int(node, what: "'max_restarts'", in: 0...ManifestLimits.maxRestarts) {
            s.maxRestarts = Int(n)
        }
        if let node = keys["restart_window"],
           let ns = d.duration(node, what: "'restart_window'", atLeast: ManifestLimits.minRestartWindow) {
            s.restartWindow = ns
        }
    }

    /// `min` and `max`, each at least `ManifestLimits.minRestartBackoff`, and
    /// `min` ≤ `max` once both are known (the default standing in for one not written).
    package func loadBackoff(_ keys: Keys, into s: inout SupervisionConfig, _ d: inout Diags) {
        var bothValid = true
        let bounds: [(String, WritableKeyPath<SupervisionConfig, Int64>)] = [("min", \.backoffMin), ("max", \.backoffMax)]
        for (key, value) in bounds {
            guard let node = keys[key] else { continue }
            if let ns = d.duration(node, what: "'restart_backoff.\(key)'", atLeast: ManifestLimits.minRestartBackoff) {
                s[keyPath: value] = ns
            } else {
                bothValid = false
            }
        }
        guard bothValid, s.backoffMin > s.backoffMax else { return }
        let min = Units.formatDuration(s.backoffMin), max = Units.formatDuration(s.backoffMax)
        if let node = keys["max"] {
            d.error(node.location, "'restart_backoff.max' (\(max)) is shorter than 'min' (\(min)\(keys["min"] == nil ? ", the default" : ""))")
        } else if let node = keys["min"] {
            d.error(node.location, "'restart_backoff.min' (\(min)) is longer than the default 'max' (\(max))",
                    hint: "write a 'max' as well: restart_backoff: { min: \(min), max: \(min) }")
        }
    }

    package func loadLimits(_ keys: Keys, _ d: inout Diags) -> ResourceLimits {
        var limits = ResourceLimits()
        if let node = keys["memory"], let bytes = d.size(node, what: "'limits.memory'") {
            if bytes < ManifestLimits.minRunnerMemory {
                d.error(node.location, "'limits.memory' must be at least \(Units.formatSize(ManifestLimits.minRunnerMemory))",
                        hint: "the runner is the vigil binary: the Swift runtime and Foundation it loads take about 18MiB before the plugin starts")
            } else {
                limits.memory = bytes
            }
        }
        if let node = keys["cpu"] {
            limits.cpuPercent = d.percent(node, what: "'limits.cpu'", in: ManifestLimits.cpuPercent,
                                          hint: "write a percentage of one core: 25% for a quarter of a core, 200% for two cores")
        }
        if let node = keys["open_files"], let n = d.int(node, what: "'limits.open_files'", in: ManifestLimits.openFiles) {
            limits.openFiles = Int(n)
        }
        return limits
    }

    /// A user name or numeric uid, as far as it can be checked without the
    /// user database: whether it exists is the runtime's to find out.
    package func loadUser(_ node: ConfigNode, _ d: inout Diags) -> String? {
        guard let user = d.string(node, what: "'user'") else { return nil }
        if user.isEmpty {
            d.error(node.location, "'user' is empty", hint: "name a user (nobody) or give a numeric uid (65534)")
            return nil
        }
        if let control = user.unicodeScalars.first(where: { $0.properties.generalCategory == .control }) {
            d.error(node.location, "'user' holds a control character (U+\(ManifestText.hex(control.value)))")
            return nil
        }
        if user.allSatisfy({ ("0"..."9").contains($0) }), (Int64(user) ?? .max) > ManifestLimits.maxUID {
            d.error(node.location, "'user' \(user) is not a uid: a numeric user is at most \(ManifestLimits.maxUID)")
            return nil
        }
        return user
    }
}
