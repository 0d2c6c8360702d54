import Foundation
import VigilCore

/// What a supervisor does after a plugin's runner died or its plugin
/// failed: the one restart policy of monitors and output sinks, with the
/// restarts made so far. Pure (the clock and the jitter are passed in), so
/// the policy is tested on its own.
///
/// - A monitor (`monitor(_:)`): the manifest's `restart`,
///   `restart_backoff`, `max_restarts` and `restart_window`; past
///   `max_restarts` in the window, quarantine.
/// - An output sink's runner (`output(_:)`): a sink always restarts its
///   output (its batches wait for it), so only `restart_backoff` applies;
///   the wait doubles with each restart in a row and starts over once a call
///   returned (`succeeded`).
package struct RestartBudget: Sendable {
    package enum Decision: Equatable {
        /// Start again after this many nanoseconds.
        case restart(after: Int64)
        /// Too many restarts in the window: wait for the file to change or
        /// for an operator.
        case quarantine
        /// The policy says never.
        case stop
    }

    private enum Kind { case monitor, output }

    package let config: SupervisionConfig
    private let kind: Kind
    /// When each restart in the current window was decided (monotonic ns);
    /// for an output, each restart since a call last returned.
    package private(set) var recent: [Int64] = []

    /// A monitor's budget.
    package init(config: SupervisionConfig) {
        self.config = config
        self.kind = .monitor
    }

    private init(output config: SupervisionConfig) {
        self.config = config
        self.kind = .output
    }

    /// An output sink's runner: restarted always, never quarantined.
    package static func output(_ config: SupervisionConfig) -> RestartBudget { RestartBudget(output: config) }

    /// Restarts decided within the window ending `now`.
    package func restarts(now: Int64) -> Int {
        recent.filter { now - $0 < config.restartWindow }.count
    }

    /// The decision after a failure at `now`; `jitter` in 0..<1 spreads
    /// restarts of monitors that failed together. `finished`: the plugin
    /// ended on its own (`finished`), which only `always` restarts.
    package mutating func decide(now: Int64, jitter: Double, finished: Bool = false) -> Decision {
        if kind == .output {
            let delay = Self.backoff(config).wait(attempt: recent.count, random: jitter)
            recent.append(now)
            return .restart(after: max(0, delay))
        }
        switch config.restart {
        case .never: return .stop
        case .onFailure where finished: return .stop
        default: break
        }
        recent.removeAll { now - $0 >= config.restartWindow }
        guard recent.count < config.maxRestarts else { return .quarantine }
        // min, 2×min, 4×min… up to max; then between 80 and 100 % of that,
        // so monitors that failed together do not restart together.
        let delay = Self.backoff(config).wait(attempt: recent.count, random: jitter)
        recent.append(now)
        return .restart(after: max(0, delay))
    }

    /// A runner's restart backoff: `restart_backoff`, 20 % jitter.
    package static func backoff(_ config: SupervisionConfig) -> Backoff {
        Backoff(min: config.backoffMin, max: config.backoffMax, jitter: 0.2)
    }

    /// Forgets the restarts (an operator asked for one, or the file changed).
    package mutating func reset() { recent.removeAll() }

    /// A call returned: for an output, the next crash starts the backoff
    /// over. A monitor's restarts count within their window whatever happened.
    package mutating func succeeded() {
        if kind == .output, !recent.isEmpty { recent.removeAll(keepingCapacity: true) }
    }
}

/// A plugin file as the host last saw it: path, inode, size and time of
/// last change (GStreamer's registry keys its blacklist the same way). A
/// quarantine holds until this changes.
package struct PluginFileIdentity: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64
    var size: Int64
    var modified: Int64

    package init?(path: String) {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
        size = Int64(st.st_size)
        modified = Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec)
    }
}
