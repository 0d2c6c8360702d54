/// Arithmetic on numbers that come from a manifest or a plugin (durations,
/// sizes, counts, times): it saturates at the ends of `Int64` instead of
/// trapping, so `now + timeout` with a timeout of ten thousand years is
/// "never", and doubling a backoff of `Int64.max / 2 + 1` is `Int64.max`.
extension Int64 {
    /// `self + other`, clamped to `Int64.min…Int64.max`.
    @inlinable
    public func addingSaturating(_ other: Int64) -> Int64 {
        let (sum, overflow) = addingReportingOverflow(other)
        return overflow ? (other > 0 ? .max : .min) : sum
    }

    /// `self - other`, clamped to `Int64.min…Int64.max`.
    @inlinable
    public func subtractingSaturating(_ other: Int64) -> Int64 {
        let (difference, overflow) = subtractingReportingOverflow(other)
        return overflow ? (other < 0 ? .max : .min) : difference
    }

    /// `self * other`, clamped to `Int64.min…Int64.max`.
    @inlinable
    public func multipliedSaturating(by other: Int64) -> Int64 {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        return overflow ? ((self < 0) == (other < 0) ? .max : .min) : product
    }
}
