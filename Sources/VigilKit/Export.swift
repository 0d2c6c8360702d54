@_exported @preconcurrency import CVigilPlugin
import Synchronization

/// The entry point's parameters, so that a plugin's export is one line:
///
///     @_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(CPUMonitor.self, a, r) }
public typealias VigilEntryArgs = UnsafePointer<vigil_entry_args>?
public typealias VigilEntryResult = UnsafeMutablePointer<vigil_entry_result>?

/// Turns a `Monitor` type into the plugin's answer to `vigil_plugin_entry`.
/// One plugin image exports one monitor type.
///
/// Whether the monitor is polled is decided at compile time (the overload for
/// `PolledMonitor` is the more specific): a dynamic protocol cast here would
/// make the Swift runtime scan every loaded image's conformances, tens of
/// milliseconds in a host that has Foundation loaded.
public enum VigilKit {
    public static func export<M: Monitor>(_ type: M.Type, _ args: VigilEntryArgs, _ result: VigilEntryResult) -> vigil_status {
        vigil_negotiate(args, result, Registry.entry(for: type, poll: nil).descriptor)
    }

    public static func export<M: PolledMonitor>(_ type: M.Type, _ args: VigilEntryArgs, _ result: VigilEntryResult) -> vigil_status {
        vigil_negotiate(args, result, Registry.entry(for: type, poll: { monitor in monitor.poll }).descriptor)
    }
}

/// How `create` makes an instance of an exported type.
enum Factory {
    case monitor((RawOptions, MonitorContext.Parts) throws(MonitorError) -> InstanceBox)
    case output((RawOptions, OutputContext) throws(PluginError) -> OutputBox)
}

/// The types of one kind (monitors, outputs) exported from this image, each
/// with its descriptor and factory: built once and kept for the life of the
/// process (the host never unloads plugins). A plugin image exports one; a
/// test process may hold several, and `VigilKitTesting` says which one a
/// `create` is for.
///
/// Not generic, and a list of its own nodes rather than an array: a generic
/// class (with its `Mutex` and array of entries) is metadata the runtime
/// instantiates by mangled name in every plugin image, a fifth of what a
/// load's entry point cost.
final class ExportedTypes: Sendable {
    final class Entry: @unchecked Sendable {  // immutable; the descriptor is permanent, `make` reads only what it captured
        let type: ObjectIdentifier
        let descriptor: UnsafePointer<vigil_plugin_descriptor>
        let make: Factory
        /// The entry exported before this one.
        let earlier: Entry?

        init(type: ObjectIdentifier, descriptor: UnsafePointer<vigil_plugin_descriptor>, make: Factory, earlier: Entry?) {
            self.type = type
            self.descriptor = descriptor
            self.make = make
            self.earlier = earlier
        }

        /// This entry or an earlier one, for `type`.
        func find(_ type: ObjectIdentifier) -> Entry? {
            var entry: Entry? = self
            while let e = entry, e.type != type { entry = e.earlier }
            return entry
        }
    }

    private struct State {
        /// The last exported.
        var latest: Entry?
        /// The entry `create` is for while a test host creates an instance.
        var creating: Entry?
    }

    private let state = Mutex(State())
    private let creatingLock = Mutex(())

    /// The entry of `type`; `build` makes its descriptor and factory the first time.
    func entry(for type: Any.Type, _ build: () -> (descriptor: UnsafePointer<vigil_plugin_descriptor>, make: Factory)) -> Entry {
        let id = ObjectIdentifier(type)
        return state.withLock { state in
            if let entry = state.latest?.find(id) { return entry }
            let (descriptor, make) = build()
            let entry = Entry(type: id, descriptor: descriptor, make: make, earlier: state.latest)
            state.latest = entry
            return entry
        }
    }

    /// The factory `create` uses: the test host's choice, else the image's first (only) type.
    var factory: Factory? {
        state.withLock { state in
            if let creating = state.creating { return creating.make }
            var first = state.latest
            while let earlier = first?.earlier { first = earlier }
            return first?.make
        }
    }

    /// Runs `body`, a call of the descriptor's `create`, so that it creates
    /// `type` (exported before; else `body` runs as it is).
    func creating<R>(_ type: Any.Type, _ body: () -> R) -> R {
        let id = ObjectIdentifier(type)
        guard let entry = state.withLock({ $0.latest?.find(id) }) else { return body() }
        return creatingLock.withLock { _ in
            state.withLock { $0.creating = entry }
            defer { state.withLock { $0.creating = nil } }
            return body()
        }
    }
}

/// The monitor types exported from this image.
enum Registry {
    static let monitors = ExportedTypes()

    /// `poll` binds an instance's poll method; nil for push monitors.
    static func entry<M: Monitor>(for type: M.Type, poll: ((M) -> () throws(MonitorError) -> Void)?) -> ExportedTypes.Entry {
        monitors.entry(for: type) {
            let spec = M.spec
            let kinds = spec.events
            let make = Factory.monitor { raw, parts throws(MonitorError) in
                let context = MonitorContext(instanceName: parts.name, interval: parts.interval, host: parts.host,
                                             api: parts.api, kinds: kinds)
                let options = try M.Options(decoding: raw)
                let monitor = try M(options: options, context: context)
                var bound: (() throws(MonitorError) -> Void)?
                if let poll { bound = poll(monitor) }
                return InstanceBox(context: context, start: monitor.start, poll: bound, stop: monitor.stop)
            }
            return (build(spec, options: M.Options.declarations + spec.options, polled: poll != nil), make)
        }
    }

    /// The descriptor, its strings and arrays in permanent C memory, written
    /// in place: no Swift arrays of C structs on the way.
    static func build(_ spec: PluginSpec, options: [OptionDecl], polled: Bool) -> UnsafePointer<vigil_plugin_descriptor> {
        let str = Permanent.str
        let events = Permanent.array(vigil_event_spec.self, spec.events.count) { i in
            let e = spec.events[i]
            let fields = Permanent.array(vigil_field_spec.self, e.fields.count) { j in
                let f = e.fields[j]
                let flags = (f.identity || e.key.contains(f.name) ? UInt32(VIGIL_FIELD_IDENTITY) : 0)
                    | (f.counter ? UInt32(VIGIL_FIELD_COUNTER) : 0)
                return vigil_field_spec(size: UInt32(MemoryLayout<vigil_field_spec>.size), type: f.type.rawValue,
                                        name: str(f.name), unit: str(f.unit), doc: str(f.doc), flags: flags, reserved: 0)
            }
            return vigil_event_spec(size: UInt32(MemoryLayout<vigil_event_spec>.size),
                                    flags: (e.dynamicFields ? UInt32(VIGIL_EVENT_DYNAMIC_FIELDS) : 0)
                                        | (e.policy == .changes ? UInt32(VIGIL_EVENT_ON_CHANGE) : 0), kind: str(e.kind),
                                    doc: str(e.doc), fields: fields, field_count: e.fields.count)
        }
        var d = vigil_plugin_descriptor()
        d.size = UInt32(MemoryLayout<vigil_plugin_descriptor>.size)
        d.kind = UInt32(VIGIL_PLUGIN_MONITOR.rawValue)
        d.name = str(spec.name)
        d.version = str(spec.version)
        d.description = str(spec.summary)
        d.options = Permanent.options(options)
        d.option_count = options.count
        d.events = events
        d.event_count = spec.events.count
        d.default_interval_ns = polled ? spec.defaultInterval : 0
        d.create = { args, out, err in Callbacks.create(args, out, err) }
        d.start = { instance, err in Callbacks.start(instance, err) }
        d.poll = polled ? { instance, err in Callbacks.poll(instance, err) } : nil
        d.stop = { instance, err in Callbacks.stop(instance, err) }
        d.destroy = { instance in Callbacks.destroy(instance) }
        return Permanent.array(vigil_plugin_descriptor.self, 1) { _ in d }!
    }
}

/// C copies of a self-description, made once and never freed: the host
/// keeps pointers into a descriptor until the process exits.
enum Permanent {
    static func str(_ s: String) -> vigil_str {
        var s = s
        return s.withUTF8 { bytes in
            let p = strings.withLock { $0.take(bytes.count + 1) }
            if let base = bytes.baseAddress { UnsafeMutableRawPointer(p).copyMemory(from: base, byteCount: bytes.count) }
            p[bytes.count] = 0
            return vigil_str(ptr: p, len: bytes.count)
        }
    }

    /// The strings' bytes, carved from blocks of 16 KiB: one allocation for
    /// a descriptor's strings, where one each (200 for memory's 70 fields)
    /// was a third of the entry point of a plugin with many fields.
    private static let strings = Mutex(Arena())

    private struct Arena {
        static let block = 16_384
        var next: UnsafeMutablePointer<CChar>?
        var left = 0

        mutating func take(_ count: Int) -> UnsafeMutablePointer<CChar> {
            if count > Self.block { return UnsafeMutablePointer<CChar>.allocate(capacity: count) }
            if count > left || next == nil {
                next = UnsafeMutablePointer<CChar>.allocate(capacity: Self.block)
                left = Self.block
            }
            let p = next!
            next = p + count
            left -= count
            return p
        }
    }

    /// `count` elements, the i-th `element(i)`; nil when there are none.
    static func array<T>(_: T.Type, _ count: Int, _ element: (Int) -> T) -> UnsafePointer<T>? {
        guard count > 0 else { return nil }
        let p = UnsafeMutablePointer<T>.allocate(capacity: count)
        for i in 0..<count { (p + i).initialize(to: element(i)) }
        return UnsafePointer(p)
    }

    static func options(_ options: [OptionDecl]) -> UnsafePointer<vigil_option_spec>? {
        array(vigil_option_spec.self, options.count) { i in
            let o = options[i]
            return vigil_option_spec(size: UInt32(MemoryLayout<vigil_option_spec>.size), type: o.type.rawValue, name: str(o.name),
                                     default_text: str(o.defaultValue ?? ""), doc: str(o.doc),
                                     flags: o.required ? UInt32(VIGIL_OPTION_REQUIRED) : 0, reserved: 0,
                                     example_text: str(o.exampleValue ?? ""))
        }
    }
}

/// For VigilKitTesting, which runs several monitor types in one process.
package enum VigilKitTestSupport {
    /// Runs `body`, a call of the descriptor's `create`, so that it creates `type`
    /// (exported through `VigilKit.export` before).
    package static func creating<M: Monitor>(_ type: M.Type, _ body: () -> vigil_status) -> vigil_status {
        Registry.monitors.creating(type, body)
    }
}

extension MonitorContext {
    /// What create knows before the monitor exists.
    struct Parts {
        var name: String
        var interval: Int64
        var host: OpaquePointer
        var api: UnsafePointer<vigil_host_api>
    }
}

/// One instance as the host holds it: the monitor's calls, bound to it, and
/// whether it runs (so start and stop are idempotent).
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

    func startIfStopped() throws(MonitorError) {
        guard !started else { return }
        context.willStart()
        do {
            try start()
        } catch {
            context.didStop()  // join whatever it spawned before failing
            throw error
        }
        started = true
    }

    func stopIfStarted() {
        guard started else { return }
        stop()
        context.didStop()
        started = false
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
        guard let args, let out, case .monitor(let make)? = Registry.monitors.factory, let created = createArgs(args),
              let host = created.args.host, let api = created.args.api else { return VIGIL_E_INVALID_ARGUMENT }
        let parts = MonitorContext.Parts(name: string(created.args.instance_name), interval: created.args.interval_ns,
                                         host: host, api: api)
        do {
            let box = try make(created.options, parts)
            out.pointee = Unmanaged.passRetained(box).toOpaque()
            return VIGIL_OK
        } catch {
            return fail(error, err)
        }
    }

    /// create's arguments, copied under the size rule (min(their size, ours)
    /// into a zeroed struct), and the options as the host typed them.
    struct CreateArgs {
        var args: vigil_create_args
        var options: RawOptions
    }

    /// Nil when the arguments are smaller than ABI 1.0's.
    static func createArgs(_ args: UnsafePointer<vigil_create_args>) -> CreateArgs? {
        var a = vigil_create_args()
        let theirs = Int(UnsafeRawPointer(args).load(as: UInt32.self))
        guard theirs >= MemoryLayout<vigil_create_args>.offset(of: \vigil_create_args.interval_ns)! + 8 else { return nil }
        withUnsafeMutableBytes(of: &a) { dst in
            dst.copyMemory(from: UnsafeRawBufferPointer(start: args, count: min(theirs, MemoryLayout<vigil_create_args>.size)))
        }
        var names: [String] = []
        var values: [RawOptions.Raw] = []
        names.reserveCapacity(a.option_count)
        values.reserveCapacity(a.option_count)
        for i in 0..<a.option_count {
            guard let option = a.options?[i] else { break }
            names.append(string(option.name))
            let v = option.value
            switch v.type {
            case UInt32(VIGIL_TYPE_BOOL.rawValue): values.append(.bool(v.as.boolean != 0))
            case UInt32(VIGIL_TYPE_INT.rawValue): values.append(.int(v.as.i64))
            case UInt32(VIGIL_TYPE_DOUBLE.rawValue): values.append(.double(v.as.f64))
            case UInt32(VIGIL_TYPE_STRING.rawValue): values.append(.string(string(v.as.str)))
            case UInt32(VIGIL_TYPE_DURATION.rawValue): values.append(.duration(v.as.i64))
            case UInt32(VIGIL_TYPE_SIZE.rawValue): values.append(.size(v.as.i64))
            case UInt32(VIGIL_TYPE_JSON.rawValue): values.append(.json(string(v.as.str)))
            default: values.append(.none)
            }
        }
        return CreateArgs(args: a, options: RawOptions(names: names, values: values))
    }

    static func start(_ instance: UnsafeMutableRawPointer?, _ err: UnsafeMutablePointer<vigil_error>?) -> vigil_status {
        guard let box = box(instance) else { return VIGIL_E_INVALID_ARGUMENT }
        do {
            try box.startIfStopped()
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
        box.stopIfStarted()
        return VIGIL_OK
    }

    static func destroy(_ instance: UnsafeMutableRawPointer?) {
        guard let instance else { return }
        let box = Unmanaged<InstanceBox>.fromOpaque(instance).takeRetainedValue()
        box.stopIfStarted()
    }

    static func string(_ s: vigil_str) -> String {
        guard s.len > 0, let p = s.ptr else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: p, count: s.len), as: UTF8.self)
    }
}
