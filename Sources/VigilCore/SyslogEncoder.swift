/// Events as RFC 5424 syslog messages:
///
///     <PRI>1 TIMESTAMP HOSTNAME APP-NAME PROCID MONITOR [event@32473 monitor="M" kind="K" seq="N"][vigil@32473 FIELD="VALUE"…] MONITOR/KIND seq=N FIELD=VALUE…
///
/// PRI is facility × 8 + the event's severity (debug 7 … critical 2);
/// TIMESTAMP the event's time in UTC to the microsecond (the RFC's six
/// digits); MSGID the monitor's name, what a receiver filters on (rsyslog's
/// `$msgid`); a first structured-data element, `event`, names the monitor,
/// the kind and the sequence number in full (MSGID holds 32 characters), a
/// second, `vigil`, holds the fields; both SD-IDs carry 32473, the
/// enterprise number IANA reserves for examples and documentation (Vigil has
/// none of its own); MSG repeats them readably for receivers that drop
/// structured data.
///
/// Header parts are held to their grammar (printable US-ASCII, their
/// lengths); parameter names to SD-NAME (32 printable characters but `=`,
/// space, `]` and `"`); values escape `"`, `\` and `]`. A message longer
/// than `maxSize` is cut to fit, the readable MSG first, then whole
/// parameters from the end, never inside an escape or a UTF-8 sequence;
/// `append` says so, for the sink to count.
public struct SyslogEncoder: Sendable {
    public enum Facility: Int, Sendable, CaseIterable {
        case kern = 0, user, mail, daemon, auth, syslog, lpr, news, uucp, cron, authpriv, ftp
        case local0 = 16, local1, local2, local3, local4, local5, local6, local7

        public static func named(_ name: String) -> Facility? {
            allCases.first { "\($0)" == name.lowercased() }
        }
    }

    /// The SD-ID of the fields' element.
    public static let sdID = "vigil@32473"
    /// The SD-ID of the element that names the event: monitor, kind, seq.
    public static let eventSDID = "event@32473"
    /// The least `maxSize` accepted: the header, the element's brackets and some room.
    public static let minimumSize = 480

    let facility: Facility
    let maxSize: Int
    /// `HOSTNAME APP-NAME PROCID `, held to the grammar once.
    private let middle: [UInt8]

    public init(facility: Facility, appName: String, host: String, procID: Int32, maxSize: Int) {
        self.facility = facility
        self.maxSize = max(maxSize, Self.minimumSize)
        var middle: [UInt8] = []
        Self.appendHeaderPart(host, max: 255, to: &middle)
        middle.append(UInt8(ascii: " "))
        Self.appendHeaderPart(appName, max: 48, to: &middle)
        middle.append(UInt8(ascii: " "))
        middle += String(procID).utf8
        middle.append(UInt8(ascii: " "))
        self.middle = middle
    }

    /// The RFC's severity for an event's.
    public static func severity(_ s: Severity) -> Int {
        switch s {
        case .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// Appends one message, unframed; returns true when it was cut to `maxSize`.
    @discardableResult
    public func append(_ event: Event, to out: inout [UInt8]) -> Bool {
        let start = out.count
        out.append(UInt8(ascii: "<"))
        out += String(facility.rawValue * 8 + Self.severity(event.severity)).utf8
        out += ">1 ".utf8
        Self.appendTimestamp(event.time, to: &out)
        out.append(UInt8(ascii: " "))
        out += middle
        Self.appendHeaderPart(event.monitor, max: 32, to: &out)
        out.append(UInt8(ascii: " "))
        // Which event: never cut (names are bounded by the manifest, kinds by the ABI).
        out += "[\(Self.eventSDID) monitor=\"".utf8
        Self.appendSDValue(.string(event.monitor), to: &out)
        out += "\" kind=\"".utf8
        Self.appendSDValue(.string(event.kind), to: &out)
        out += "\" seq=\"\(event.seq)\"]".utf8
        // The fields: whole parameters while they fit, with room for `]`.
        var truncated = false
        if !event.fields.isEmpty {
            out += "[\(Self.sdID)".utf8
            var param: [UInt8] = []
            for field in event.fields {
                param.removeAll(keepingCapacity: true)
                param.append(UInt8(ascii: " "))
                Self.appendSDName(field.name, to: &param)
                param += "=\"".utf8
                Self.appendSDValue(field.value, to: &param)
                param.append(UInt8(ascii: "\""))
                if out.count - start + param.count + 1 > maxSize {
                    truncated = true
                    break
                }
                out += param
            }
            out.append(UInt8(ascii: "]"))
        }
        // MSG: what the element says, readably, in what room is left.
        var message: [UInt8] = [UInt8(ascii: " ")]
        message += "\(event.monitor)/\(event.kind) seq=\(event.seq)".utf8
        for field in event.fields {
            message.append(UInt8(ascii: " "))
            message += field.name.utf8
            message.append(UInt8(ascii: "="))
            Self.appendReadable(field.value, to: &message)
        }
        let room = maxSize - (out.count - start)
        if message.count <= room {
            out += message
        } else {
            truncated = true
            var cut = max(0, room)
            // Never inside a UTF-8 sequence: back up over continuation bytes.
            while cut > 0 && cut < message.count && message[cut] & 0xC0 == 0x80 { cut -= 1 }
            if cut > 1 { out += message[..<cut] }
        }
        return truncated
    }

    /// `2026-11-21T21:50:29.123456Z`: the RFC allows six fractional digits.
    static func appendTimestamp(_ ns: Int64, to out: inout [UInt8]) {
        var nine: [UInt8] = []
        JSONLineEncoder.appendTimestamp(ns, to: &nine)  // `…:29.123456789Z`
        out += nine.dropLast(4)
        out.append(UInt8(ascii: "Z"))
    }

    /// Printable US-ASCII only (others as `_`), at most `max` bytes; `-` when empty.
    static func appendHeaderPart(_ text: String, max: Int, to out: inout [UInt8]) {
        var n = 0
        for b in text.utf8 where n < max {
            out.append(b >= 33 && b <= 126 ? b : UInt8(ascii: "_"))
            n += 1
        }
        if n == 0 { out.append(UInt8(ascii: "-")) }
    }

    /// SD-NAME: 1 to 32 printable US-ASCII but `=`, space, `]` and `"`.
    static func appendSDName(_ name: String, to out: inout [UInt8]) {
        var n = 0
        for b in name.utf8 where n < 32 {
            let ok = b >= 33 && b <= 126 && b != UInt8(ascii: "=") && b != UInt8(ascii: "]") && b != UInt8(ascii: "\"")
            out.append(ok ? b : UInt8(ascii: "_"))
            n += 1
        }
        if n == 0 { out.append(UInt8(ascii: "_")) }
    }

    /// PARAM-VALUE: UTF-8 with `"`, `\` and `]` escaped by a backslash.
    static func appendSDValue(_ value: FieldValue, to out: inout [UInt8]) {
        switch value {
        case .string(let s):
            for b in s.utf8 {
                if b == UInt8(ascii: "\"") || b == UInt8(ascii: "\\") || b == UInt8(ascii: "]") { out.append(UInt8(ascii: "\\")) }
                out.append(b)
            }
        default: appendReadable(value, to: &out)
        }
    }

    static func appendReadable(_ value: FieldValue, to out: inout [UInt8]) {
        switch value {
        case .string(let s):
            // Line breaks would end the message for a line-based reader.
            for b in s.utf8 { out.append(b == 10 || b == 13 ? UInt8(ascii: " ") : b) }
        case .int(let i): out += String(i).utf8
        case .double(let d): out += (d.isNaN ? "NaN" : d.isInfinite ? (d > 0 ? "+Inf" : "-Inf") : "\(d)").utf8
        case .bool(let b): out += (b ? "true" : "false").utf8
        }
    }
}
