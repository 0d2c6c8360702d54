#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CVigilTimex
import VigilKit

/// What adjtimex(2) said with `modes` 0 (read only, needs no privilege):
/// its return value, the clock state, and the members of `struct timex`,
/// raw, in the kernel's units.
struct TimexReading: Equatable {
    /// TIME_OK 0, TIME_INS 1, TIME_DEL 2, TIME_OOP 3, TIME_WAIT 4, TIME_ERROR 5.
    var state: Int64 = 0
    var offset: Int64 = 0  // µs, or ns when status has STA_NANO
    var freq: Int64 = 0  // ppm × 2^16
    var maxerror: Int64 = 0  // µs
    var esterror: Int64 = 0  // µs
    var status: Int64 = 0  // STA_* bits
    var constant: Int64 = 0
    var tick: Int64 = 0  // µs
    var ppsfreq: Int64 = 0  // ppm × 2^16
    var jitter: Int64 = 0  // µs, or ns when STA_NANO
    var shift: Int64 = 0  // log2 of the PPS interval, seconds
    var stabil: Int64 = 0  // ppm × 2^16
    var jitcnt: Int64 = 0
    var calcnt: Int64 = 0
    var errcnt: Int64 = 0
    var stbcnt: Int64 = 0
    var tai: Int64 = 0  // seconds

    static let timeError: Int64 = 5
    static let staNano: Int64 = 0x2000

    /// The member named `name` as `struct timex` names it (and `return`: the state).
    private static func member(_ name: Substring) -> WritableKeyPath<TimexReading, Int64>? {
        switch name {
        case "return": \.state
        case "offset": \.offset
        case "freq": \.freq
        case "maxerror": \.maxerror
        case "esterror": \.esterror
        case "status": \.status
        case "constant": \.constant
        case "tick": \.tick
        case "ppsfreq": \.ppsfreq
        case "jitter": \.jitter
        case "shift": \.shift
        case "stabil": \.stabil
        case "jitcnt": \.jitcnt
        case "calcnt": \.calcnt
        case "errcnt": \.errcnt
        case "stbcnt": \.stbcnt
        case "tai": \.tai
        default: nil
        }
    }

    /// A reading recorded as `name value` lines with `struct timex`'s member
    /// names and `return` (lines starting `#` and unknown names are skipped;
    /// a missing member is 0). nil when a value is not a number.
    static func parse(recorded text: String) -> TimexReading? {
        var reading = TimexReading()
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard words.count >= 2 else { continue }
            guard let member = member(words[0]) else { continue }
            guard let value = Int64(words[1]) else { return nil }
            reading[keyPath: member] = value
        }
        return reading
    }

    /// The kernel's (through CVigilTimex), or the errno it failed with.
    static func syscall() -> Result<TimexReading, SyscallError> {
        var t = vigil_timex_reading()
        let state = vigil_timex_read(&t)
        guard state >= 0 else { return .failure(SyscallError(code: -state)) }
        return .success(TimexReading(
            state: Int64(state), offset: t.offset, freq: t.freq, maxerror: t.maxerror, esterror: t.esterror,
            status: t.status, constant: t.constant, tick: t.tick, ppsfreq: t.ppsfreq, jitter: t.jitter,
            shift: t.shift, stabil: t.stabil, jitcnt: t.jitcnt, calcnt: t.calcnt, errcnt: t.errcnt,
            stbcnt: t.stbcnt, tai: t.tai))
    }

    /// An errno from the call.
    struct SyscallError: Error {
        var code: Int32
    }

    /// The `timex` event's fields, in the units node_exporter's timex
    /// collector uses: seconds (offset and jitter in ns with STA_NANO, else
    /// µs; the errors and tick in µs), frequencies as ratios (ppm × 2^16).
    var fields: [(String, Value)] {
        let divisor = status & Self.staNano != 0 ? 1e9 : 1e6
        let ppm16 = 65536.0 * 1e6
        return [
            ("synchronized", .bool(state != Self.timeError)),
            ("state", .int(state)),
            ("offset", .double(Double(offset) / divisor)),
            ("frequency_ratio", .double(1 + Double(freq) / ppm16)),
            ("max_error", .double(Double(maxerror) / 1e6)),
            ("estimated_error", .double(Double(esterror) / 1e6)),
            ("status", .int(status)),
            ("time_constant", .int(constant)),
            ("tick", .double(Double(tick) / 1e6)),
            ("pps_frequency", .double(Double(ppsfreq) / ppm16)),
            ("pps_jitter", .double(Double(jitter) / divisor)),
            ("pps_shift", .int(shift)),
            ("pps_stability", .double(Double(stabil) / ppm16)),
            ("pps_jitter_exceeded", .int(jitcnt)),
            ("pps_calibrations", .int(calcnt)),
            ("pps_calibration_errors", .int(errcnt)),
            ("pps_stability_exceeded", .int(stbcnt)),
            ("tai_offset", .int(tai)),
        ]
    }

    static let decls: [FieldDecl] = [
        FieldDecl("synchronized", .bool, doc: "the kernel deems the clock synchronized: adjtimex did not return TIME_ERROR"),
        FieldDecl("state", .int, doc: "adjtimex's return: 0 TIME_OK, 1 TIME_INS, 2 TIME_DEL (leap second), 3 TIME_OOP, 4 TIME_WAIT, 5 TIME_ERROR"),
        FieldDecl("offset", .double, unit: "seconds", doc: "time offset the kernel is slewing away (offset; ns with STA_NANO, else µs)"),
        FieldDecl("frequency_ratio", .double, unit: "ratio", doc: "clock frequency adjustment as a ratio: 1 + freq / (2^16 × 10^6)"),
        FieldDecl("max_error", .double, unit: "seconds", doc: "maximum error (maxerror, µs)"),
        FieldDecl("estimated_error", .double, unit: "seconds", doc: "estimated error (esterror, µs)"),
        FieldDecl("status", .int, doc: "clock status bits (STA_PLL 1, STA_UNSYNC 64, STA_NANO 0x2000…)"),
        FieldDecl("time_constant", .int, doc: "phase-locked loop time constant (constant)"),
        FieldDecl("tick", .double, unit: "seconds", doc: "time between clock ticks (tick, µs)"),
        FieldDecl("pps_frequency", .double, unit: "ratio", doc: "PPS frequency offset (ppsfreq / (2^16 × 10^6))"),
        FieldDecl("pps_jitter", .double, unit: "seconds", doc: "PPS jitter (jitter; ns with STA_NANO, else µs)"),
        FieldDecl("pps_shift", .int, doc: "PPS interval duration as a power of two: the interval is 2^shift seconds"),
        FieldDecl("pps_stability", .double, unit: "ratio", doc: "PPS stability (stabil / (2^16 × 10^6))"),
        FieldDecl("pps_jitter_exceeded", .int, unit: "events", doc: "PPS jitter limit exceeded (jitcnt)", counter: true),
        FieldDecl("pps_calibrations", .int, unit: "intervals", doc: "PPS calibration intervals (calcnt)", counter: true),
        FieldDecl("pps_calibration_errors", .int, unit: "errors", doc: "PPS calibration errors (errcnt)", counter: true),
        FieldDecl("pps_stability_exceeded", .int, unit: "events", doc: "PPS stability limit exceeded (stbcnt)", counter: true),
        FieldDecl("tai_offset", .int, unit: "seconds", doc: "TAI − UTC (tai); 0 until a time daemon sets it"),
    ]
}
