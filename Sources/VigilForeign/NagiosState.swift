/// A check's state: its exit status as the guidelines define it.
public enum NagiosState: Int, Sendable, CaseIterable, CustomStringConvertible {
    case ok = 0, warning = 1, critical = 2, unknown = 3

    /// 0–3 as they are; every other status (4–255 are reserved), and a
    /// death by signal, is UNKNOWN.
    public init(exitStatus: Int) {
        self = NagiosState(rawValue: exitStatus) ?? .unknown
    }

    public var description: String {
        switch self {
        case .ok: "OK"
        case .warning: "WARNING"
        case .critical: "CRITICAL"
        case .unknown: "UNKNOWN"
        }
    }
}

/// Nagios' soft and hard states for one service check: a problem is SOFT
/// until it has been seen `maxAttempts` times in a row (checked again every
/// retry interval meanwhile), then HARD; a change between problem states
/// once HARD stays HARD; a recovery is HARD after a HARD problem and SOFT
/// after a SOFT one. Before the first result the check is taken as OK and
/// HARD, as Nagios takes a service it has not checked yet.
public struct NagiosStateMachine: Sendable, Equatable {
    public enum StateType: String, Sendable { case soft = "SOFT", hard = "HARD" }

    public let maxAttempts: Int
    public private(set) var state: NagiosState = .ok
    public private(set) var type: StateType = .hard
    /// 1 while OK; the how-many-th result in a row of a problem, at most `maxAttempts`.
    public private(set) var attempt = 1

    public init(maxAttempts: Int) {
        self.maxAttempts = max(1, maxAttempts)
    }

    /// What one result changed.
    public struct Step: Sendable, Equatable {
        public var previous: NagiosState
        public var previousType: StateType
        /// The state changed, or a problem became HARD (a SOFT recovery
        /// settling into OK is no change).
        public var changed: Bool
        /// The next check is a retry (a SOFT problem): at the retry interval.
        public var retry: Bool
    }

    public mutating func record(_ result: NagiosState) -> Step {
        let previous = state, previousType = type
        if result == .ok {
            type = previous == .ok ? .hard : previousType
            attempt = 1
        } else if previous == .ok {
            attempt = 1
            type = maxAttempts <= 1 ? .hard : .soft
        } else if previousType == .hard {
            attempt = maxAttempts
            type = .hard
        } else {
            attempt = min(attempt + 1, maxAttempts)
            type = attempt >= maxAttempts ? .hard : .soft
        }
        state = result
        return Step(previous: previous, previousType: previousType,
                    changed: previous != state || (state != .ok && previousType == .soft && type == .hard),
                    retry: state != .ok && type == .soft)
    }
}
