import VigilKit

/// One event as one JSON object on one line, in the schema every JSON sink
/// of Vigil writes:
///
///     {"time":"2026-11-21T21:50:29.123456Z","host":"web-1","monitor":"cpu","plugin":"cpu","kind":"sample","severity":"info","seq":1042,"fields":{"usage":0.12}}
///
/// `time` is UTC to the microsecond (RFC 3339); integers are written
/// exactly, doubles in the shortest form that reads back the same, NaN and
/// infinities as `null` (JSON has no text for them); strings are escaped as
/// JSON requires (`"`, `\`, control characters), so a line never holds a raw
/// newline.
enum JSONLine {
    /// Appends the event's line, with its `\n`, to `out`.
    static func append(_ event: OutputEvent, to out: inout [UInt8]) {
        out += #"{"time":""#.utf8
        out += timestamp(event.time).utf8
        out += #"","host":"#.utf8
        quote(event.host, to: &out)
        out += #","monitor":"#.utf8
        quote(event.monitor, to: &out)
        out += #","plugin":"#.utf8
        quote(event.plugin, to: &out)
        out += #","kind":"#.utf8
        quote(event.kind, to: &out)
        out += #","severity":""#.utf8
        out += severityName(event.severity).utf8
        out += #"","seq":"#.utf8
        out += String(event.seq).utf8
        out += #","fields":{"#.utf8
        for (i, field) in event.fields.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            quote(field.name, to: &out)
            out.append(UInt8(ascii: ":"))
            switch field.value {
            case .int(let n): out += String(n).utf8
            case .double(let d): out += (d.isFinite ? d.description : "null").utf8
            case .bool(let b): out += (b ? "true" : "false").utf8
            case .string(let s): quote(s, to: &out)
            }
        }
        out += "}}\n".utf8
    }

    static func severityName(_ severity: Severity) -> String {
        switch severity {
        case .debug: "debug"
        case .info: "info"
        case .notice: "notice"
        case .warning: "warning"
        case .error: "error"
        case .critical: "critical"
        }
    }

    /// A JSON string: quotes, backslashes and control characters escaped.
    static func quote(_ text: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += #"\""#.utf8
            case UInt8(ascii: "\\"): out += #"\\"#.utf8
            case UInt8(ascii: "\n"): out += #"\n"#.utf8
            case UInt8(ascii: "\r"): out += #"\r"#.utf8
            case UInt8(ascii: "\t"): out += #"\t"#.utf8
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += #"\u00"#.utf8
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Nanoseconds since the epoch as `YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC,
    /// microseconds, rounded down).
    static func timestamp(_ nanoseconds: Int64) -> String {
        let micros = nanoseconds >= 0 ? nanoseconds / 1_000 : (nanoseconds - 999) / 1_000
        let seconds = micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000
        let fraction = micros - seconds * 1_000_000
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let ofDay = seconds - days * 86_400
        let (year, month, day) = civil(days)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let micro = String(fraction)
        return "\(year)-\(two(month))-\(two(day))T\(two(ofDay / 3600)):\(two(ofDay / 60 % 60)):\(two(ofDay % 60))."
            + String(repeating: "0", count: 6 - micro.count) + micro + "Z"
    }

    /// The proleptic Gregorian date of a day count from 1970-01-01.
    static func civil(_ days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        // Days since 0000-03-01, split into 400-year eras of 146097 days,
        // so that February, with its leap day, ends each year.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shifted = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shifted + 2) / 5 + 1
        let month = shifted < 10 ? shifted + 3 : shifted - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
