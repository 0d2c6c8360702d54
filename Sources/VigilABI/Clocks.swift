import Glibc

/// CLOCK_MONOTONIC in nanoseconds: for deadlines and durations.
@inline(__always)
package func monotonicNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// CLOCK_REALTIME in nanoseconds since the epoch: for event times.
@inline(__always)
package func realtimeNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// `base + delta` that stops at the ends of Int64 instead of trapping: for
/// deadlines built from durations a plugin or a manifest gave.
@inline(__always)
package func saturatingAdd(_ base: Int64, _ delta: Int64) -> Int64 {
    let (sum, overflow) = base.addingReportingOverflow(delta)
    return overflow ? (delta > 0 ? .max : .min) : sum
}

/// `value * factor`, saturating (backoff doubling).
@inline(__always)
package func saturatingMultiply(_ value: Int64, _ factor: Int64) -> Int64 {
    let (product, overflow) = value.multipliedReportingOverflow(by: factor)
    return overflow ? ((value < 0) != (factor < 0) ? .min : .max) : product
}
