@preconcurrency import CVigilPlugin
import Glibc
import VigilCore

/// Events as an output plugin's `write` takes them (ABI 1.5), and what it
/// answered: the one encoder of batches and decoder of answers, for the
/// host's plugin sinks, the checker and the test kit alike.
///
/// A batch is laid out in one allocation that lives for the call: the
/// strings' bytes, then the fields, then the `vigil_output_event`s, then the
/// per-event verdicts the plugin may write.
package enum OutputBatch {
    /// What the plugin said of each event of a batch.
    package enum Verdict: Equatable, Sendable {
        case ok
        case retry
        case reject

        /// A `vigil_write_verdict`; one this host does not know is a retry.
        package init(raw: UInt32) {
            switch raw {
            case UInt32(VIGIL_WRITE_OK.rawValue): self = .ok
            case UInt32(VIGIL_WRITE_REJECT.rawValue): self = .reject
            default: self = .retry
            }
        }

        /// Its `vigil_write_verdict`.
        package var raw: UInt8 {
            switch self {
            case .ok: UInt8(VIGIL_WRITE_OK.rawValue)
            case .retry: UInt8(VIGIL_WRITE_RETRY.rawValue)
            case .reject: UInt8(VIGIL_WRITE_REJECT.rawValue)
            }
        }
    }

    package struct Answer: Equatable, Sendable {
        /// One per event, in order.
        package var verdicts: [Verdict]
        /// With a retry: the least the plugin asked to wait (ns), 0 for the host's backoff.
        package var retryAfter: Int64
        /// The call's status, and its message (the reason of rejects, or why it failed).
        package var status: vigil_status
        package var message: String

        package init(verdicts: [Verdict], retryAfter: Int64, status: vigil_status, message: String) {
            self.verdicts = verdicts
            self.retryAfter = retryAfter
            self.status = status
            self.message = message
        }

        package var delivered: Int { verdicts.count { $0 == .ok } }
        package var retried: Int { verdicts.count { $0 == .retry } }
        package var rejected: Int { verdicts.count { $0 == .reject } }
    }

    /// Calls `write` with `events` as one batch (`attempt` from 1) and reads
    /// its answer, believing no more than it was given: a verdict it did not
    /// write is the batch's, an unknown one is a retry, a negative retry-after
    /// is none, and a failed call retries (TEMPORARY) or rejects nothing and
    /// retries everything (any other status, which the caller treats as the
    /// sink's failure). Per-event verdicts with `per_event` pointed elsewhere
    /// are such a failure (FATAL).
    package static func write(_ events: [Event], host: String, attempt: UInt32,
                              with write: (UnsafePointer<vigil_batch>, UnsafeMutablePointer<vigil_write_result>,
                                           UnsafeMutablePointer<vigil_error>) -> vigil_status) -> Answer {
        precondition(!events.isEmpty, "a batch holds at least one event")
        // The strings' bytes, in the order they are pointed to.
        var text: [UInt8] = Array(host.utf8)
        var fieldCount = 0
        for event in events {
            text += event.kind.utf8
            text += event.monitor.utf8
            text += event.plugin.utf8
            for field in event.fields {
                text += field.name.utf8
                if case .string(let s) = field.value { text += s.utf8 }
            }
            fieldCount += event.fields.count
        }
        let fieldBytes = fieldCount * MemoryLayout<vigil_field>.stride
        let eventBytes = events.count * MemoryLayout<vigil_output_event>.stride
        let align = MemoryLayout<vigil_output_event>.alignment
        let textBytes = (text.count + align - 1) / align * align
        let total = textBytes + fieldBytes + eventBytes + events.count
        let memory = UnsafeMutableRawPointer.allocate(byteCount: max(total, 1), alignment: align)
        defer { memory.deallocate() }
        let textBase = memory.bindMemory(to: UInt8.self, capacity: textBytes)
        text.withUnsafeBufferPointer { textBase.update(from: $0.baseAddress!, count: text.count) }
        let fieldBase = (memory + textBytes).bindMemory(to: vigil_field.self, capacity: max(fieldCount, 1))
        let eventBase = (memory + textBytes + fieldBytes).bindMemory(to: vigil_output_event.self, capacity: events.count)
        let verdictBase = (memory + textBytes + fieldBytes + eventBytes).bindMemory(to: UInt8.self, capacity: events.count)

        var cursor = 0
        func take(_ bytes: Int) -> vigil_str {
            defer { cursor += bytes }
            return vigil_str(ptr: bytes == 0 ? nil : UnsafeRawPointer(textBase + cursor).assumingMemoryBound(to: CChar.self),
                             len: bytes)
        }
        let hostStr = take(host.utf8.count)
        var nextField = 0
        for (i, event) in events.enumerated() {
            var e = vigil_output_event()
            e.size = UInt32(MemoryLayout<vigil_output_event>.size)
            e.severity = UInt32(event.severity.rawValue)
            e.kind = take(event.kind.utf8.count)
            e.monitor = take(event.monitor.utf8.count)
            e.plugin = take(event.plugin.utf8.count)
            e.host = hostStr
            e.time_ns = event.time
            e.seq = event.seq
            e.fields = UnsafePointer(fieldBase + nextField)
            e.field_count = event.fields.count
            for field in event.fields {
                var f = vigil_field()
                f.name = take(field.name.utf8.count)
                switch field.value {
                case .double(let d): f.value.type = UInt32(VIGIL_TYPE_DOUBLE.rawValue); f.value.as.f64 = d
                case .int(let n): f.value.type = UInt32(VIGIL_TYPE_INT.rawValue); f.value.as.i64 = n
                case .bool(let b): f.value.type = UInt32(VIGIL_TYPE_BOOL.rawValue); f.value.as.boolean = b ? 1 : 0
                case .string(let s): f.value.type = UInt32(VIGIL_TYPE_STRING.rawValue); f.value.as.str = take(s.utf8.count)
                }
                (fieldBase + nextField).initialize(to: f)
                nextField += 1
            }
            (eventBase + i).initialize(to: e)
            verdictBase[i] = UInt8(VIGIL_WRITE_OK.rawValue)
        }

        var batch = vigil_batch(size: UInt32(MemoryLayout<vigil_batch>.size), attempt: max(1, attempt),
                                events: UnsafePointer(eventBase), count: events.count,
                                event_size: MemoryLayout<vigil_output_event>.stride)
        var result = vigil_write_result()
        result.size = UInt32(MemoryLayout<vigil_write_result>.size)
        result.verdict = UInt32(VIGIL_WRITE_OK.rawValue)
        result.per_event = verdictBase
        // The message is read whatever the status: with rejects it is their reason.
        var buffer = [CChar](repeating: 0, count: pluginErrorCapacity)
        let status = buffer.withUnsafeMutableBufferPointer { b in
            var error = vigil_error(size: UInt32(MemoryLayout<vigil_error>.size), reserved: 0, message: b.baseAddress,
                                    capacity: b.count)
            return write(&batch, &result, &error)
        }
        let message = pluginMessage(buffer)
        if status == VIGIL_OK, result.per_event_used != 0, result.per_event != verdictBase {
            // Verdicts somewhere else are not read (nor is memory the host did
            // not give): left alone, the preset OKs would count every event
            // delivered, whatever the plugin meant.
            return answer(count: events.count, status: VIGIL_E_FATAL,
                          message: "it answered per event with result->per_event moved off the host's array, where alone verdicts are read (vigil_plugin.h); the host will not guess them",
                          retryAfter: 0, verdict: result.verdict, perEvent: nil)
        }
        let perEvent = result.per_event_used != 0 ? Array(UnsafeBufferPointer(start: verdictBase, count: events.count)) : nil
        return answer(count: events.count, status: status, message: message, retryAfter: result.retry_after_ns,
                      verdict: result.verdict, perEvent: perEvent)
    }

    /// What a plugin said of a batch of `count` events, believed no further
    /// than it was given: a failed call retries every event (TEMPORARY) or
    /// is the sink's failure (any other status), an unknown verdict is a
    /// retry, a verdict for an event beyond the batch is ignored and an
    /// event without one (`perEvent` cut short) is retried, a negative
    /// retry-after is none. `perEvent` nil: `verdict` is every event's.
    /// The one reading of an answer: of `write` here, and of an answer that
    /// crossed a runner's channel (a runner's memory is the plugin's).
    package static func answer(count: Int, status: vigil_status, message: String, retryAfter: Int64, verdict: UInt32,
                               perEvent: [UInt8]?) -> Answer {
        guard status == VIGIL_OK else {
            return Answer(verdicts: Array(repeating: .retry, count: count), retryAfter: 0, status: status, message: message)
        }
        let verdicts = perEvent.map { bytes in (0..<count).map { $0 < bytes.count ? Verdict(raw: UInt32(bytes[$0])) : .retry } }
            ?? Array(repeating: Verdict(raw: verdict), count: count)
        return Answer(verdicts: verdicts, retryAfter: max(0, retryAfter), status: status, message: message)
    }
}
