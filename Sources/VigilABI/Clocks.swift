import Glibc

// Public and inlinable (VigilABI is no product): `package` bodies are not
// inlined across modules, and these run per event.

/// CLOCK_MONOTONIC in nanoseconds: for deadlines and durations.
@inlinable
public func monotonicNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}

/// CLOCK_REALTIME in nanoseconds since the epoch: for event times.
@inlinable
public func realtimeNanoseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
}
