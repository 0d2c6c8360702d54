import VigilABI

/// When a consumer that hands events on one at a time should wait a moment
/// for a batch instead: the sink queue's thread, and a runner's channel
/// thread reading its ring. Both would otherwise take turns with their
/// producer per event (a wake-up, a sleep, each a system call) whenever they
/// are a little faster than it.
///
/// The consumer counts what it takes; while the arrival rate, measured over
/// windows of 10 ms, is at least `aboveRate`, it lingers up to `nanoseconds`
/// for a batch whenever it finds only a few events. Below that rate every
/// event is taken at once, so a quiet monitor sees no added latency.
package struct BatchLinger {
    /// The longest a consumer lingers (the latency it may add at high rates).
    package static let nanoseconds: Int64 = 200_000
    /// Events a second from which lingering pays.
    static let aboveRate = 100_000
    static let window: Int64 = 10_000_000

    private var windowEvents = 0
    private var windowStart = monotonicNanoseconds()
    /// Events come fast enough to linger for.
    package private(set) var fast = false

    package init() {}

    /// The consumer took `n` events at `now` (monotonic ns).
    @inline(__always)
    package mutating func took(_ n: Int, now: Int64) {
        windowEvents &+= n
        let elapsed = now &- windowStart
        guard elapsed >= Self.window else { return }
        fast = windowEvents.multipliedReportingOverflow(by: 1_000_000_000).partialValue / Int(elapsed) >= Self.aboveRate
        windowEvents = 0
        windowStart = now
    }
}
