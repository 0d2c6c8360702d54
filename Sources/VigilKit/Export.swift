@preconcurrency import CVigilPlugin
import Synchronization

/// Turns a `Monitor` type into the plugin's answer to `vigil_plugin_entry`.
/// A plugin's whole entry point:
///
///     @_cdecl("vigil_plugin_entry")
///     public func vigilPluginEntry(_ args: UnsafePointer<vigil_entry_args>?,
///                                  _ result: UnsafeMutablePointer<vigil_entry_result>?) -> vigil_status {
///         VigilKit.export(CPUMonitor.self, args, result)
///     }
///
/// One plugin image exports one monitor type.
///
/// Whether the monitor is polled is decided at compile time (the overload for
/// `PolledMonitor` is the more specific): a dynamic protocol cast here would
/// make the Swift runtime scan every loaded image's conformances, tens of
/// milliseconds in a host that has Foundation loaded.
public enum VigilKit {
    public static func export<M: Monitor>(_ type: M.Type, _ args: UnsafePointer<vigil_entry_args>?,
                                          _ result: UnsafeMutablePointer<vigil_entry_result>?) -> vigil_status {
        let descriptor = Registry.descriptor(for: type, polled: false) { options, context throws(MonitorError) in
            let monitor = try M(options: options, context: context)
            return InstanceBox(context: context, start: monitor.start, poll: nil, stop: monitor.stop)
        }
        return vigil_negotiate(args, result, descriptor)
    }

    public static func export<M: PolledMonitor>(_ type: M.Type, _ args: UnsafePointer<vigil_entry_args>?,
                                                _ result: UnsafeMutablePointer<vigil_entry_result>?) -> vigil_status {
        let descriptor = Registry.descriptor(for: type, polled: true) { options, context throws(MonitorError) in
            let monitor = try M(options: options, context: context)
            return InstanceBox(context: context, start: monitor.start, poll: monitor.poll, stop: monitor.stop)
        }
        return vigil_negotiate(args, result, descriptor)
    }
}

/// The descriptor and factory of the image's monitor type, built once and
/// kept for the life of the process (the host never unloads plugins).
enum Registry {
    typealias Factory = (Options, MonitorContext) throws(MonitorError) -> InstanceBox

    struct Entry: @unchecked Sendable {
        var descriptor: UnsafePointer<vigil_plugin_descriptor>
        var make: Factory
    }

    static let current = Mutex<Entry?>(nil)

    static func descriptor<M: Monitor>(for type: M.Type, polled: Bool,
                                       make: @escaping Factory) -> UnsafePointer<vigil_plugin_descriptor> {
        current.withLock { entry in
            if let entry { return entry.descriptor }
            let built = Entry(descriptor: build(M.spec, polled: polled), make: make)
            entry = built
            return built.descriptor
        }
    }

    static var factory: Entry? { current.withLock { $0 } }

    /// Permanent C copies of the spec's strings and arrays.
    static func build(_ spec: PluginSpec, polled: Bool) -> UnsafePointer<vigil_plugin_descriptor> {
        func str(_ s: String) -> vigil_str {
            let bytes = Array(s.utf8)
            let p = UnsafeMutablePointer<CChar>.allocate(capacity: bytes.count + 1)
            bytes.withUnsafeBufferPointer { b in
                UnsafeMutableRawPointer(p).copyMemory(from: b.baseAddress!, byteCount: b.count)
            }
            p[bytes.count] = 0
            return vigil_str(ptr: p, len: bytes.count)
        }
        func array<T>(_ items: [T]) -> UnsafePointer<T>? {
            guard !items.isEmpty else { return nil }
            let p = UnsafeMutablePointer<T>.allocate(capacity: items.count)
            p.initialize(from: items, count: items.count)
            return UnsafePointer(p)
        }
        let options = spec.options.map { o in
            vigil_option_spec(size: UInt32(MemoryLayout<vigil_option_spec>.size), type: o.type.rawValue, name: str(o.name),
                              default_text: str(o.defaultValue ?? ""), doc: str(o.doc),
                              flags: o.required ? UInt32(VIGIL_OPTION_REQUIRED) : 0, reserved: 0)
        }
        let events = spec.events.map { e in
            let fields = e.fields.map { f in
                vigil_field_spec(size: UInt32(MemoryLayout<vigil_field_spec>.size), type: f.type.rawValue,
                                 name: str(f.name), unit: str(f.unit), doc: str(f.doc))
            }
            return vigil_event_spec(size: UInt32(MemoryLayout<vigil_event_spec>.size), flags: e.dynamicFields ? UInt32(VIGIL_EVENT_DYNAMIC_FIELDS) : 0, kind: str(e.kind),
                                    doc: str(e.doc), fields: array(fields), field_count: fields.count)
        }
        var d = vigil_plugin_descriptor()
        d.size = UInt32(MemoryLayout<vigil_plugin_descriptor>.size)
        d.kind = UInt32(VIGIL_PLUGIN_MONITOR.rawValue)
        d.name = str(spec.name)
        d.version = str(spec.version)
        d.description = str(spec.summary)
        d.options = array(options)
        d.option_count = options.count
        d.events = array(events)
        d.event_count = events.count
        d.default_interval_ns = polled ? spec.defaultInterval : 0
        d.create = { args, out, err in Callbacks.create(args, out, err) }
        d.start = { instance, err in Callbacks.start(instance, err) }
        d.poll = polled ? { instance, err in Callbacks.poll(instance, err) } : nil
        d.stop = { instance, err in Callbacks.stop(instance, err) }
        d.destroy = { instance in Callbacks.destroy(instance) }
        let p = UnsafeMutablePointer<vigil_plugin_descriptor>.allocate(capacity: 1)
        p.initialize(to: d)
        return UnsafePointer(p)
    }
}

/// One instance as the host holds it: the monitor's calls, bound to it.
final class InstanceBox {
    let context: MonitorContext
    let start: () throws(MonitorError) -> Void
    let poll: (() throws(MonitorError) -> Void)?
    let stop: () -> Void
    var started = false

    init(context: MonitorContext, start: @escaping () throws(MonitorError) -> Void,
         poll: (() throws(MonitorError) -> Void)?, stop: @escaping () -> Void) {
        self.context = context
        self.start = start
        self.poll = poll
        self.stop = stop
    }
}

/// The C side of the descriptor: unbox, call, map errors to statuses.
enum Callbacks {
    static func fail(_ error: MonitorError, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let err, err.pointee.size >= UInt32(MemoryLayout<vigil_error>.size),
              let buffer = err.pointee.message, err.pointee.capacity > 0 else { return error.status.raw }
        // Whole characters only, within the buffer, then a NUL.
        var bytes: [UInt8] = []
        for scalar in error.message.unicodeScalars {
            guard bytes.count + UTF8.width(scalar) <= err.pointee.capacity - 1 else { break }
            UTF8.encode(scalar) { bytes.append($0) }
        }
        bytes.append(0)
        bytes.withUnsafeBufferPointer { UnsafeMutableRawPointer(buffer).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        return error.status.raw
    }

    static func box(_ instance: UnsafeMutableRawPointer?) -> InstanceBox? {
        instance.map { Unmanaged<InstanceBox>.fromOpaque($0).takeUnretainedValue() }
    }

    static func create(_ args: UnsafePointer<vigil_create_args>?, _ out: UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                       _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let args, let out, let entry = Registry.factory else { return VIGIL_E_INVALID_ARGUMENT }
        // Copy min(their size, ours) into a zeroed struct.
        var a = vigil_create_args()
        let theirs = Int(UnsafeRawPointer(args).load(as: UInt32.self))
        withUnsafeMutableBytes(of: &a) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: args, count: min(theirs, MemoryLayout<vigil_create_args>.size)))
        }
        guard let host = a.host, let api = a.api else { return VIGIL_E_INVALID_ARGUMENT }
        var values: [(name: String, value: Options.Raw)] = []
        values.reserveCapacity(a.option_count)
        for i in 0..<a.option_count {
            guard let option = a.options?[i] else { break }
            let name = string(option.name)
            let v = option.value
            switch v.type {
            case UInt32(VIGIL_TYPE_BOOL.rawValue): values.append((name, .bool(v.as.boolean != 0)))
            case UInt32(VIGIL_TYPE_INT.rawValue): values.append((name, .int(v.as.i64)))
            case UInt32(VIGIL_TYPE_DOUBLE.rawValue): values.append((name, .double(v.as.f64)))
            case UInt32(VIGIL_TYPE_STRING.rawValue): values.append((name, .string(string(v.as.str))))
            case UInt32(VIGIL_TYPE_DURATION.rawValue): values.append((name, .duration(v.as.i64)))
            case UInt32(VIGIL_TYPE_SIZE.rawValue): values.append((name, .size(v.as.i64)))
            case UInt32(VIGIL_TYPE_JSON.rawValue): values.append((name, .json(string(v.as.str))))
            default: values.append((name, Options.Raw.none))
            }
        }
        let context = MonitorContext(instanceName: string(a.instance_name), interval: a.interval_ns, host: host, api: api)
        do {
            let box = try entry.make(Options(values), context)
            out.pointee = Unmanaged.passRetained(box).toOpaque()
            return VIGIL_OK
        } catch {
            return fail(error, err)
        }
    }

    static func start(_ instance: UnsafeMutableRawPointer?, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance) else { return VIGIL_E_INVALID_ARGUMENT }
        if box.started { return VIGIL_OK }  // idempotent
        do {
            try box.start()
            box.started = true
            return VIGIL_OK
        } catch {
            return fail(error, err)
        }
    }

    static func poll(_ instance: UnsafeMutableRawPointer?, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance), let poll = box.poll else { return VIGIL_E_INVALID_ARGUMENT }
        do {
            try poll()
            return VIGIL_OK
        } catch {
            return fail(error, err)
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
        let box = Unmanaged<InstanceBox>.fromOpaque(instance).takeRetainedValue()
        if box.started { box.stop() }
    }

    static func string(_ s: vigil_str) -> String {
        guard s.len > 0, let p = s.ptr else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: p, count: s.len), as: UTF8.self)
    }
}
