@preconcurrency import CVigilPlugin
import VigilABI
import VigilCore

/// What crosses between the host and a plugin runner: calls and replies on
/// the control socket (one SEQPACKET message each), events and the plugin's
/// other host calls as ring records. Both ends are this binary; the host
/// reads everything as if it were not.
package enum RunnerWire {
    /// A control message is at most this long (a description with many
    /// options is the longest): a longer one breaks the channel.
    static let maxMessage = 4 << 20

    package enum Call: UInt8 {
        case create = 1, start, poll, stop, destroy
        /// An output's: a part of a batch (no reply), the batch's last part
        /// (the call: its answer is the reply), flush.
        case writePart, write, flush
        var name: String {
            switch self {
            case .create: "create"
            case .start: "start"
            case .poll: "poll"
            case .stop: "stop"
            case .destroy: "destroy"
            case .writePart, .write: "write"
            case .flush: "flush"
            }
        }
    }

    package enum Message: UInt8 {
        /// ok (u8); then the description (JSON) or the refusal.
        case hello = 1
        /// status (i32), message, calls after destroy so far (u64).
        case reply = 2
        /// An output's answer to a write: a reply, then retry-after (i64),
        /// the number of verdicts (u32) and one `vigil_write_verdict` byte each.
        case answer = 3
    }

    /// A reply's fields; with the verdicts of a write's answer.
    package struct Reply {
        var status: vigil_status
        var message: String
        var lateCalls: UInt64
        var answer: (retryAfter: Int64, verdicts: [UInt8])?
        /// Where in the ring the records that must come before this reply
        /// end: for a `start` or a `poll`, those of the call's own thread
        /// that did not fit in the call area (0: none); for the other calls,
        /// every record before the reply (nil: every one, an output's answer).
        var recordsEnd: UInt64?
        /// A `start`'s or a `poll`'s records in the ring's call area: the
        /// call's number (0: none) and their bytes. Taken before the ring's.
        var callSequence: UInt32 = 0
        var callLength: UInt32 = 0
    }

    /// Reads a `reply` or an `answer`; nil for anything else.
    static func decodeReply(_ r: inout WireReader) -> Reply? {
        guard let type = r.u8().flatMap(Message.init(rawValue:)), type != .hello, let status = r.u32(),
              let text = r.string(), let late = r.u64() else { return nil }
        var reply = Reply(status: vigil_status(rawValue: status), message: text, lateCalls: late)
        if type == .answer {
            guard let retryAfter = r.i64(), let verdicts = r.bytes() else { return nil }
            reply.answer = (retryAfter, Array(verdicts))
        } else {
            guard let end = r.u64(), let sequence = r.u32(), let length = r.u32() else { return nil }
            reply.recordsEnd = end
            reply.callSequence = sequence
            reply.callLength = length
        }
        return r.atEnd ? reply : nil
    }

    // MARK: - calls (host → runner)

    static func encodeCreate(name: String, options: [BoundOption], interval: Int64) -> [UInt8] {
        var w = WireWriter()
        w.u8(Call.create.rawValue)
        w.string(name)
        w.i64(interval)
        w.u32(UInt32(clamping: options.count))
        for option in options {
            w.string(option.name)
            encode(option.value, into: &w)
        }
        return w.bytes
    }

    static func encodeCall(_ call: Call) -> [UInt8] { [call.rawValue] }

    package struct CreateRequest {
        var name: String
        var interval: Int64
        var options: [BoundOption]
    }

    static func decodeCreate(_ r: inout WireReader) -> CreateRequest? {
        guard let name = r.string(), let interval = r.i64(), let count = r.u32() else { return nil }
        var options: [BoundOption] = []
        for _ in 0..<min(Int(count), 65_536) {
            guard let name = r.string(), let value = decodeOptionValue(&r) else { return nil }
            options.append(BoundOption(name: name, value: value))
        }
        return r.failed ? nil : CreateRequest(name: name, interval: interval, options: options)
    }

    private static func encode(_ value: OptionValue, into w: inout WireWriter) {
        switch value {
        case .none: w.u8(0)
        case .bool(let b): w.u8(1); w.u8(b ? 1 : 0)
        case .int(let i): w.u8(2); w.i64(i)
        case .double(let d): w.u8(3); w.f64(d)
        case .string(let s): w.u8(4); w.string(s)
        case .duration(let ns): w.u8(5); w.i64(ns)
        case .size(let n): w.u8(6); w.i64(n)
        case .json(let text): w.u8(7); w.string(text)
        }
    }

    private static func decodeOptionValue(_ r: inout WireReader) -> OptionValue? {
        switch r.u8() {
        case 0: OptionValue.none
        case 1: r.u8().map { .bool($0 != 0) }
        case 2: r.i64().map { .int($0) }
        case 3: r.f64().map { .double($0) }
        case 4: r.string().map { .string($0) }
        case 5: r.i64().map { .duration($0) }
        case 6: r.i64().map { .size($0) }
        case 7: r.string().map { .json($0) }
        default: nil
        }
    }

    // MARK: - messages (runner → host)

    static func encodeReply(status: vigil_status, message: String, lateCalls: UInt64, recordsEnd: UInt64,
                            callSequence: UInt32 = 0, callLength: UInt32 = 0) -> [UInt8] {
        var w = WireWriter(capacity: 64 + message.utf8.count)
        w.u8(Message.reply.rawValue)
        w.u32(status.rawValue)
        w.string(message)
        w.u64(lateCalls)
        w.u64(recordsEnd)
        w.u32(callSequence)
        w.u32(callLength)
        return w.bytes
    }

    /// The runner loaded the plugin: its description (JSON) and what the
    /// description does not say (whether an output has a `flush`).
    static func encodeHello(description: [UInt8], flushes: Bool) -> [UInt8] {
        var w = WireWriter(capacity: description.count + 8)
        w.u8(Message.hello.rawValue)
        w.u8(1)
        w.u32(UInt32(clamping: description.count))
        for byte in description { w.u8(byte) }
        w.u8(flushes ? 1 : 0)
        return w.bytes
    }

    static func encodeAnswer(_ answer: OutputBatch.Answer, lateCalls: UInt64) -> [UInt8] {
        var w = WireWriter(capacity: 32 + answer.message.utf8.count + answer.verdicts.count)
        w.u8(Message.answer.rawValue)
        w.u32(answer.status.rawValue)
        w.string(answer.message)
        w.u64(lateCalls)
        w.i64(answer.retryAfter)
        w.u32(UInt32(clamping: answer.verdicts.count))
        for verdict in answer.verdicts { w.u8(verdict.raw) }
        return w.bytes
    }

    // MARK: - an output's batch (host → runner)

    /// The most bytes of a batch in one control message: a SEQPACKET
    /// message must fit the socket's send buffer (about 208 KiB by
    /// default), so a larger batch crosses in parts.
    static let writePartBytes = 64 << 10

    /// A batch as the runner rebuilds it for `OutputBatch.write`: the
    /// attempt, the host name, and each event with its stamps (seq, time,
    /// monitor, plugin), kind, severity and fields; in parts of at most
    /// `writePartBytes`, each a message, the last one the call.
    static func encodeWrite(_ events: [Event], host: String, attempt: UInt32) -> [[UInt8]] {
        var w = WireWriter(capacity: 64 + events.count * 96)
        w.u32(attempt)
        w.string(host)
        w.u32(UInt32(clamping: events.count))
        for event in events {
            w.u64(event.seq)
            w.i64(event.time)
            w.u8(event.severity.rawValue)
            w.string(event.kind)
            w.string(event.monitor)
            w.string(event.plugin)
            w.u32(UInt32(clamping: event.fields.count))
            for field in event.fields {
                w.string(field.name)
                switch field.value {
                case .double(let d): w.u8(UInt8(VIGIL_TYPE_DOUBLE.rawValue)); w.f64(d)
                case .int(let i): w.u8(UInt8(VIGIL_TYPE_INT.rawValue)); w.i64(i)
                case .bool(let b): w.u8(UInt8(VIGIL_TYPE_BOOL.rawValue)); w.u8(b ? 1 : 0)
                case .string(let s): w.u8(UInt8(VIGIL_TYPE_STRING.rawValue)); w.string(s)
                }
            }
        }
        let body = w.bytes
        var parts: [[UInt8]] = []
        var start = 0
        repeat {
            let end = min(body.count, start + writePartBytes)
            var part = [end == body.count ? Call.write.rawValue : Call.writePart.rawValue]
            part.append(contentsOf: body[start..<end])
            parts.append(part)
            start = end
        } while start < body.count
        return parts
    }

    package struct WriteRequest {
        var attempt: UInt32
        var host: String
        var events: [Event]
    }

    /// A batch's parts put together (without their call bytes); nil when
    /// they do not make one.
    static func decodeWrite(_ body: UnsafeRawBufferPointer) -> WriteRequest? {
        var r = WireReader(body)
        guard let attempt = r.u32(), let host = r.string(), let count = r.u32() else { return nil }
        var events: [Event] = []
        // Each event takes at least 37 bytes: a count cannot ask for more room than the message has.
        events.reserveCapacity(min(Int(count), r.remaining / 37))
        for _ in 0..<Int(count) {
            guard let seq = r.u64(), let time = r.i64(), let severity = r.u8(), let kind = r.string(),
                  let monitor = r.string(), let plugin = r.string(), let fieldCount = r.u32(),
                  Int(fieldCount) <= r.remaining else { return nil }
            var fields: [Field] = []
            fields.reserveCapacity(Int(fieldCount))
            for _ in 0..<Int(fieldCount) {
                guard let name = r.string(), let type = r.u8() else { return nil }
                let value: FieldValue
                switch UInt32(type) {
                case VIGIL_TYPE_DOUBLE.rawValue: guard let d = r.f64() else { return nil }; value = .double(d)
                case VIGIL_TYPE_INT.rawValue: guard let i = r.i64() else { return nil }; value = .int(i)
                case VIGIL_TYPE_BOOL.rawValue: guard let b = r.u8() else { return nil }; value = .bool(b != 0)
                case VIGIL_TYPE_STRING.rawValue: guard let s = r.string() else { return nil }; value = .string(s)
                default: return nil
                }
                fields.append(Field(name, value))
            }
            events.append(Event(time: time, monitor: monitor, plugin: plugin, kind: kind,
                                severity: Severity(rawValue: severity) ?? .info, seq: seq, fields: fields))
        }
        return r.atEnd && !events.isEmpty ? WriteRequest(attempt: attempt, host: host, events: events) : nil
    }

    static func encodeFlush(deadline: Int64) -> [UInt8] {
        var w = WireWriter()
        w.u8(Call.flush.rawValue)
        w.i64(deadline)
        return w.bytes
    }

    static func encodeRefusal(_ reason: String) -> [UInt8] {
        var w = WireWriter()
        w.u8(Message.hello.rawValue)
        w.u8(0)
        w.string(reason)
        return w.bytes
    }

    // MARK: - ring records

    /// A name that crosses as the index of a declared name (its kind's, or
    /// the kind's among its plugin's): the high bit set in place of a
    /// length (a name is at most 256 bytes). The host turns it back into its
    /// decoder's own copy of the name, matched without comparing bytes.
    static let declaredMarker: UInt32 = 0x8000_0000

    /// An event record as the runner's decoder hands over the parts of an
    /// event it accepted (`DecodedEventParts`): time, severity, kind, then
    /// each field's name, ABI type and value; a name as its length and
    /// bytes, or a declared name as `declaredMarker` | its index. Written
    /// into `capacity` bytes at `base`; past them only counted (`length`
    /// is then the room it needs).
    package struct EventRecord: DecodedEventParts {
        let base: UnsafeMutableRawPointer
        let capacity: Int
        /// Bytes of the record so far, written or (past `capacity`) not.
        private(set) var length = 0

        init(into base: UnsafeMutableRawPointer, capacity: Int) {
            self.base = base
            self.capacity = capacity
        }

        /// Whether the whole record was written.
        var fits: Bool { length <= capacity }

        @inline(__always)
        private mutating func put<T>(_ v: T) {
            let n = MemoryLayout<T>.size
            if length + n <= capacity { (base + length).storeBytes(of: v, toByteOffset: 0, as: T.self) }
            length += n
        }

        @inline(__always)
        private mutating func put(bytes: UnsafeRawPointer?, count: Int) {
            put(UInt32(truncatingIfNeeded: count).littleEndian)
            if count > 0, let bytes, length + count <= capacity { (base + length).copyMemory(from: bytes, byteCount: count) }
            length += count
        }

        @inline(__always)
        private mutating func put(_ s: vigil_str) { put(bytes: s.ptr, count: s.len) }

        package mutating func begin(kind: consuming String, declared: Int, time: Int64, severity: Severity, fieldCount: Int) {
            put(time.littleEndian)
            put(severity.rawValue)
            if declared >= 0 {
                put((declaredMarker | UInt32(declared)).littleEndian)
            } else {
                var kind = kind
                kind.withUTF8 { put(bytes: $0.baseAddress, count: $0.count) }
            }
            put(UInt32(truncatingIfNeeded: fieldCount).littleEndian)
        }

        package mutating func field(name: vigil_str, declared: Int, declaredName: consuming String?, value: vigil_value) {
            if declared >= 0 { put((declaredMarker | UInt32(declared)).littleEndian) } else { put(name) }
            put(UInt8(truncatingIfNeeded: value.type))
            switch value.type {
            case UInt32(VIGIL_TYPE_DOUBLE.rawValue): put(value.as.f64.bitPattern.littleEndian)
            case UInt32(VIGIL_TYPE_INT.rawValue): put(value.as.i64.littleEndian)
            case UInt32(VIGIL_TYPE_BOOL.rawValue): put(UInt8(value.as.boolean != 0 ? 1 : 0))
            default: put(value.as.str)
            }
        }
    }

    private enum WireName {
        case bytes(vigil_str)
        case declared(Int)
    }

    /// A name as `EventRecord` wrote it; nil past the record's end.
    private static func readName(_ r: inout WireReader) -> WireName? {
        guard let length = r.peekU32() else { return nil }
        if length & declaredMarker != 0 {
            _ = r.u32()
            return .declared(Int(length & ~declaredMarker))
        }
        return r.bytes().map { .bytes(vigil_str(ptr: $0.baseAddress?.assumingMemoryBound(to: CChar.self), len: $0.count)) }
    }

    /// Rebuilds a plugin's `vigil_event` in `event` from an event record,
    /// pointing into `payload`, with `fields` as room for the fields
    /// (`EventLimits.fields` of them) — for the host's decoder to judge as
    /// it judges an in-process plugin's. False when the record is not an
    /// event record (the runner broke the channel). No closure: the
    /// channel's receiver is called on the result without being retained.
    /// Names sent as declared indexes (`declaredMarker`) become `decoder`'s own
    /// copies of the names; an index past the declarations breaks the channel.
    static func rebuildEvent(_ payload: UnsafeRawBufferPointer, into target: UnsafeMutablePointer<vigil_event>,
                             fields: UnsafeMutablePointer<vigil_field>, decoder: EventDecoder? = nil) -> Bool {
        var r = WireReader(payload)
        guard let time = r.i64(), let severity = r.u8(), let kindName = readName(&r), let count = r.u32() else { return false }
        let kind: vigil_str
        var kindIndex = -1
        switch kindName {
        case .bytes(let bytes):
            kind = bytes
        case .declared(let index):
            guard let declared = decoder?.declaredKind(index) else { return false }
            kind = declared
            kindIndex = index
        }
        var event = vigil_event()
        event.size = UInt32(MemoryLayout<vigil_event>.size)
        event.kind = kind
        event.severity = UInt32(severity)
        event.time_ns = time
        event.field_count = Int(count)
        event.fields = UnsafePointer(fields)
        // More fields than the decoder takes: it refuses on the count alone.
        if Int(count) <= EventLimits.fields {
            for i in 0..<Int(count) {
                guard let fieldName = readName(&r), let type = r.u8() else { return false }
                let name: vigil_str
                switch fieldName {
                case .bytes(let bytes):
                    name = bytes
                case .declared(let index):
                    // A field named by index belongs to a kind named by index.
                    guard let declared = decoder?.declaredField(kind: kindIndex, index) else { return false }
                    name = declared
                }
                var value = vigil_value()
                value.type = UInt32(type)
                switch UInt32(type) {
                case VIGIL_TYPE_DOUBLE.rawValue:
                    guard let d = r.f64() else { return false }
                    value.as.f64 = d
                case VIGIL_TYPE_INT.rawValue:
                    guard let v = r.i64() else { return false }
                    value.as.i64 = v
                case VIGIL_TYPE_BOOL.rawValue:
                    guard let b = r.u8() else { return false }
                    value.as.boolean = Int32(b != 0 ? 1 : 0)
                case VIGIL_TYPE_STRING.rawValue:
                    guard let s = r.bytes() else { return false }
                    value.as.str = vigil_str(ptr: s.baseAddress?.assumingMemoryBound(to: CChar.self), len: s.count)
                default:
                    return false
                }
                fields[i] = vigil_field(name: name, value: value)
            }
            guard r.atEnd else { return false }
        }
        target.pointee = event
        return true
    }
}
