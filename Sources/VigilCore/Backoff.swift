/// Exponential backoff, the one every retry of the host waits by: a
/// connecting sink's reconnection, a held file batch, an output's RETRY
/// answers and its runner's restarts, OTLP's retries, a monitor's
/// supervisor and its start retries.
///
/// The waits are `min`, 2×`min`, 4×`min`… up to `max` (saturating: any
/// Int64 from a manifest is safe), each shortened by up to `jitter` of itself
/// at random so that hosts or monitors that failed together do not retry
/// together. Pure apart from the random draw, which a test can pass in.
public struct Backoff: Sendable, Equatable {
    public let min: Int64
    public let max: Int64
    /// The part of each wait that is random: 0 for none, 0.5 for waits
    /// between half and all of the step.
    public let jitter: Double
    /// Waits handed out since the last `reset` (the next step is `min` × 2^attempts).
    public private(set) var attempts = 0

    public init(min: Int64, max: Int64, jitter: Double = 0.5) {
        self.min = Swift.max(min, 1)
        self.max = Swift.max(max, self.min)
        self.jitter = Swift.min(Swift.max(jitter, 0), 1)
    }

    /// The step of attempt `n`, before jitter: `min` × 2^n, at most `max`.
    public func step(_ n: Int) -> Int64 {
        var delay = min
        for _ in 0..<Swift.max(n, 0) where delay < max { delay = delay.multipliedSaturating(by: 2) }
        return Swift.min(delay, max)
    }

    /// The wait of attempt `n`: its step less up to `jitter` of it;
    /// `random` in 0..<1 (drawn when not given).
    public func wait(attempt n: Int, random: Double = Double.random(in: 0..<1)) -> Int64 {
        let delay = step(n)
        return delay - Int64(Double(delay) * jitter * Swift.min(Swift.max(random, 0), 1))
    }

    /// The next wait, counting the attempt.
    public mutating func next(random: Double = Double.random(in: 0..<1)) -> Int64 {
        let wait = wait(attempt: attempts, random: random)
        if step(attempts) < max { attempts += 1 }  // past max the step no longer grows
        return wait
    }

    /// Back to `min`, after a success.
    public mutating func reset() { attempts = 0 }
}
