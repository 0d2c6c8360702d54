@preconcurrency import CVigilPlugin
import Synchronization

extension VigilKit {
    /// Turns an `Output` type into the plugin's answer to
    /// `vigil_plugin_entry`. One plugin image exports one type, a monitor or
    /// an output:
    ///
    ///     @_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(LineOutput.self, a, r) }
    public static func export<O: Output>(_ type: O.Type, _ args: VigilEntryArgs, _ result: VigilEntryResult) -> vigil_status {
        vigil_negotiate(args, result, OutputRegistry.entry(for: type).descriptor)
    }
}

extension VigilKitTestSupport {
    /// Runs `body`, a call of the descriptor's `create`, so that it creates
    /// `type` (exported through `VigilKit.export` before).
    package static func creating<O: Output>(_ type: O.Type, _ body: () -> vigil_status) -> vigil_status {
        OutputRegistry.outputs.creating(type, body)
    }
}

/// The output types exported from this image, kept as the monitors' are.
enum OutputRegistry {
    static let outputs = ExportedTypes()

    static func entry<O: Output>(for type: O.Type) -> ExportedTypes.Entry {
        outputs.entry(for: type) {
            let make = Factory.output { raw, context throws(PluginError) in
                let output = try O(options: try O.Options(decoding: raw), context: context)
                return OutputBox(write: output.write, flush: output.flush, start: output.start, stop: output.stop,
                                 close: output.close)
            }
            return (build(O.spec, options: O.Options.declarations + O.spec.options), make)
        }
    }

    static func build(_ spec: OutputSpec, options: [OptionDecl]) -> UnsafePointer<vigil_plugin_descriptor> {
        var d = vigil_plugin_descriptor()
        d.size = UInt32(MemoryLayout<vigil_plugin_descriptor>.size)
        d.kind = UInt32(VIGIL_PLUGIN_OUTPUT.rawValue)
        d.name = Permanent.str(spec.name)
        d.version = Permanent.str(spec.version)
        d.description = Permanent.str(spec.summary)
        d.options = Permanent.options(options)
        d.option_count = options.count
        d.create = { args, out, err in OutputCallbacks.create(args, out, err) }
        d.start = { instance, err in OutputCallbacks.start(instance, err) }
        d.stop = { instance, err in OutputCallbacks.stop(instance, err) }
        d.destroy = { instance in OutputCallbacks.destroy(instance) }
        d.write = { instance, batch, result, err in OutputCallbacks.write(instance, batch, result, err) }
        d.flush = { instance, deadline, err in OutputCallbacks.flush(instance, deadline, err) }
        return Permanent.array(vigil_plugin_descriptor.self, 1) { _ in d }!
    }
}

/// One output as the host holds it: its calls, bound to it, and whether it
/// runs (so start and stop are idempotent).
final class OutputBox {
    let write: (EventBatch) throws(PluginError) -> WriteResult
    let flush: (FlushDeadline) throws(PluginError) -> Void
    let start: () throws(PluginError) -> Void
    let stop: () -> Void
    let close: () -> Void
    var started = false

    init(write: @escaping (EventBatch) throws(PluginError) -> WriteResult,
         flush: @escaping (FlushDeadline) throws(PluginError) -> Void,
         start: @escaping () throws(PluginError) -> Void, stop: @escaping () -> Void, close: @escaping () -> Void) {
        self.write = write
        self.flush = flush
        self.start = start
        self.stop = stop
        self.close = close
    }
}

/// The C side of an output's descriptor: decode the batch, call, encode the
/// answer.
enum OutputCallbacks {
    static func box(_ instance: UnsafeMutableRawPointer?) -> OutputBox? {
        instance.map { Unmanaged<OutputBox>.fromOpaque($0).takeUnretainedValue() }
    }

    static func create(_ args: UnsafePointer<vigil_create_args>?, _ out: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                       _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let args, let out, case .output(let make)? = OutputRegistry.outputs.factory, let created = Callbacks.createArgs(args),
              let host = created.args.host, let api = created.args.api else { return VIGIL_E_INVALID_ARGUMENT }
        let context = OutputContext(sinkName: Callbacks.string(created.args.instance_name), host: host, api: api)
        do {
            let box = try make(created.options, context)
            out.pointee = Unmanaged.passRetained(box).toOpaque()
            return VIGIL_OK
        } catch {
            return Callbacks.fail(error, err)
        }
    }

    static func start(_ instance: UnsafeMutableRawPointer?, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance) else { return VIGIL_E_INVALID_ARGUMENT }
        guard !box.started else { return VIGIL_OK }
        do {
            try box.start()
            box.started = true
            return VIGIL_OK
        } catch {
            return Callbacks.fail(error, err)
        }
    }

    static func stop(_ instance: UnsafeMutableRawPointer?, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance) else { return VIGIL_E_INVALID_ARGUMENT }
        if box.started {
            box.stop()
            box.started = false
        }
        return VIGIL_OK
    }

    static func destroy(_ instance: UnsafeMutableRawPointer?) {
        guard let instance else { return }
        let box = Unmanaged<OutputBox>.fromOpaque(instance).takeRetainedValue()
        if box.started { box.stop() }
        box.close()
    }

    static func write(_ instance: UnsafeMutableRawPointer?, _ batch: UnsafePointer<vigil_batch>?,
                      _ result: UnsafeMutablePointer<vigil_write_result>?, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance), let batch, let result,
              Int(result.pointee.size) >= MemoryLayout<vigil_write_result>.size,
              case let (attempt, decoded)? = BatchDecoder.decode(batch) else {
            return Callbacks.fail(.fatal("write: a batch or result smaller than ABI 1.5's, or malformed"), err)
        }
        // Malformed events (never from a conforming host) are rejected here;
        // the output sees the others.
        let valid = decoded.indices.filter { decoded[$0] != nil }
        let answer: WriteResult
        do {
            answer = valid.isEmpty ? .ok : try box.write(EventBatch(attempt: attempt, events: valid.map { decoded[$0]! }))
        } catch {
            return Callbacks.fail(error, err)
        }
        var verdicts = Array(repeating: WriteVerdict.reject, count: decoded.count)
        for (i, verdict) in zip(valid, answer.verdicts(count: valid.count)) { verdicts[i] = verdict }
        var reason = answer.reason
        if valid.count < decoded.count {
            let malformed = "\(decoded.count - valid.count) malformed event(s) in the batch"
            reason = reason.isEmpty ? malformed : reason + "; " + malformed
        }
        encode(verdicts, retryAfter: answer.retryAfter, into: result)
        // The message goes with OK: it is the rejects' reason, read whatever the status.
        if !reason.isEmpty { _ = Callbacks.fail(PluginError(.temporary, reason), err) }
        return VIGIL_OK
    }

    static func flush(_ instance: UnsafeMutableRawPointer?, _ deadline: Int64, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance) else { return VIGIL_E_INVALID_ARGUMENT }
        do {
            try box.flush(FlushDeadline(monotonicNanoseconds: deadline))
            return VIGIL_OK
        } catch {
            return Callbacks.fail(error, err)
        }
    }

    /// One verdict for the batch when all agree, else one per event.
    static func encode(_ verdicts: [WriteVerdict], retryAfter: Duration, into result: UnsafeMutablePointer<vigil_write_result>) {
        func raw(_ v: WriteVerdict) -> UInt32 {
            switch v {
            case .ok: UInt32(VIGIL_WRITE_OK.rawValue)
            case .retry: UInt32(VIGIL_WRITE_RETRY.rawValue)
            case .reject: UInt32(VIGIL_WRITE_REJECT.rawValue)
            }
        }
        let (s, atto) = retryAfter.components
        result.pointee.retry_after_ns = max(0, s.multipliedReportingOverflow(by: 1_000_000_000).partialValue + atto / 1_000_000_000)
        let first = verdicts.first ?? .ok
        if verdicts.allSatisfy({ $0 == first }) {
            result.pointee.verdict = raw(first)
        } else if let perEvent = result.pointee.per_event {
            for (i, v) in verdicts.enumerated() { perEvent[i] = UInt8(raw(v)) }
            result.pointee.per_event_used = 1
        } else {
            // No room per event: retry everything rather than claim a delivery.
            result.pointee.verdict = raw(.retry)
        }
    }
}

/// `vigil_batch` read as Swift values, under the size rule: the batch and
/// each event copied min(their size, ours) into zeroed structs, events
/// stepped by the host's `event_size`.
enum BatchDecoder {
    /// The attempt and every event, nil for a malformed one; nil for a
    /// malformed batch.
    static func decode(_ batch: UnsafePointer<vigil_batch>) -> (Int, [OutputEvent?])? {
        guard let b: vigil_batch = sized(UnsafeRawPointer(batch), least: MemoryLayout<vigil_batch>.size),
              b.event_size >= MemoryLayout<vigil_output_event>.size, b.count == 0 || b.events != nil else { return nil }
        let base = UnsafeRawPointer(b.events)
        var events: [OutputEvent?] = []
        events.reserveCapacity(b.count)
        for i in 0..<b.count {
            guard let base, let e: vigil_output_event = sized(base + i * b.event_size,
                                                              least: MemoryLayout<vigil_output_event>.size) else {
                events.append(nil)
                continue
            }
            events.append(event(e))
        }
        return (Int(b.attempt), events)
    }

    /// A size-prefixed struct copied into a zeroed one; nil below `least`.
    static func sized<T>(_ p: UnsafeRawPointer, least: Int) -> T? {
        let theirs = Int(p.loadUnaligned(as: UInt32.self))
        guard theirs >= least else { return nil }
        let copy = UnsafeMutableRawPointer.allocate(byteCount: MemoryLayout<T>.size, alignment: MemoryLayout<T>.alignment)
        defer { copy.deallocate() }
        copy.initializeMemory(as: UInt8.self, repeating: 0, count: MemoryLayout<T>.size)
        copy.copyMemory(from: p, byteCount: min(theirs, MemoryLayout<T>.size))
        return copy.load(as: T.self)
    }

    static func event(_ e: vigil_output_event) -> OutputEvent? {
        for s in [e.kind, e.host, e.monitor, e.plugin] where s.ptr == nil && s.len > 0 { return nil }
        guard e.field_count == 0 || e.fields != nil else { return nil }
        var fields: [EventField] = []
        fields.reserveCapacity(e.field_count)
        var unknown = 0
        for i in 0..<e.field_count {
            let f = e.fields![i]
            guard f.name.ptr != nil || f.name.len == 0 else { return nil }
            let value: Value
            switch f.value.type {
            case UInt32(VIGIL_TYPE_BOOL.rawValue): value = .bool(f.value.as.boolean != 0)
            case UInt32(VIGIL_TYPE_INT.rawValue): value = .int(f.value.as.i64)
            case UInt32(VIGIL_TYPE_DOUBLE.rawValue): value = .double(f.value.as.f64)
            case UInt32(VIGIL_TYPE_STRING.rawValue):
                guard f.value.as.str.ptr != nil || f.value.as.str.len == 0 else { return nil }
                value = .string(Callbacks.string(f.value.as.str))
            default:
                unknown += 1
                continue
            }
            fields.append(EventField(Callbacks.string(f.name), value))
        }
        return OutputEvent(host: Callbacks.string(e.host), monitor: Callbacks.string(e.monitor),
                           plugin: Callbacks.string(e.plugin), seq: e.seq, time: e.time_ns,
                           severity: Severity(rawValue: min(e.severity, Severity.critical.rawValue)) ?? .critical,
                           kind: Callbacks.string(e.kind), fields: fields, unknownFields: unknown)
    }
}
