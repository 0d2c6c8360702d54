@preconcurrency import CVigilPlugin
import Synchronization

/// What one side of the boundary does with a plugin's calls to the host: the
/// runtime routes them, the checker records and judges them, the test kit
/// collects them, a validation probe ignores them. Every side is reached
/// through the same C table (`HostTable.shared`), so a plugin meets one host
/// whoever runs it.
///
/// Strings arrive already copied and capped (`HostLimits`); the event arrives
/// as the plugin gave it, for the side to decode with `EventDecoder`.
package protocol PluginHostCallbacks: AnyObject, Sendable {
    /// `event` is NULL when the plugin passed NULL: decode it all the same,
    /// so that the refusal is counted where every other one is.
    func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status
    /// `cut`: bytes of the message beyond `HostLimits.logMessageBytes`, dropped.
    func log(level: Int, message: String, cut: Int)
    func setAvailability(_ available: Bool, reason: String)
    func now() -> Int64
    func markFinished()
}

/// Bounds on what the host copies out of a plugin (documented in the header).
package enum HostLimits {
    /// A log message is cut here; the cut is counted and said.
    package static let logMessageBytes = Int(VIGIL_MAX_LOG_BYTES)
    /// An availability reason is cut here.
    package static let reasonBytes = Int(VIGIL_MAX_REASON_BYTES)
}

/// The opaque `vigil_host_ctx` of one instance (one create attempt): the
/// callbacks it leads to, and whether the instance has been destroyed. Once
/// retired, every call through it is ignored (emit answers VIGIL_E_STOPPED)
/// and counted: a plugin thread that outlives `destroy` reaches nothing.
///
/// Contexts are never freed (a plugin may keep the pointer in a thread that
/// never ends); each holds its callbacks object.
package final class HostContext: @unchecked Sendable {  // `callbacks` never changes; the flags are atomics
    package let callbacks: any PluginHostCallbacks
    private let retired = Atomic<Bool>(false)
    /// Calls that arrived after `retire`.
    package let lateCalls = Atomic<UInt64>(0)

    private init(callbacks: any PluginHostCallbacks) {
        self.callbacks = callbacks
    }

    /// A new context for `callbacks`, as the pointer a plugin is given. The
    /// context holds `callbacks` for good: a side that must be freed (the
    /// test kit's instances) hands over a `WeakHostCallbacks`.
    package static func make(for callbacks: any PluginHostCallbacks) -> HostContext {
        HostContext(callbacks: callbacks)
    }

    /// The pointer handed to the plugin (retained for the life of the process).
    package private(set) lazy var pointer: OpaquePointer = OpaquePointer(Unmanaged.passRetained(self).toOpaque())

    /// After `destroy` (or a failed `create`): nothing the plugin calls with
    /// this context reaches the callbacks any more.
    package func retire() { retired.store(true, ordering: .releasing) }

    package var isRetired: Bool { retired.load(ordering: .acquiring) }

    @inline(__always)
    static func live(_ ctx: OpaquePointer?) -> HostContext? {
        guard let ctx else { return nil }
        let context = Unmanaged<HostContext>.fromOpaque(UnsafeRawPointer(ctx)).takeUnretainedValue()
        guard !context.isRetired else {
            context.lateCalls.add(1, ordering: .relaxed)
            return nil
        }
        return context
    }
}

/// The one const table of host functions every plugin receives, whoever
/// hosts it. Allocated once, never freed.
package enum HostTable {
    package nonisolated(unsafe) static let shared: UnsafePointer<vigil_host_api> = {
        var api = vigil_host_api()
        api.size = UInt32(MemoryLayout<vigil_host_api>.size)
        api.abi_major = UInt16(VIGIL_ABI_MAJOR)
        api.abi_minor = UInt16(VIGIL_ABI_MINOR)
        // The event path: the context is used as guaranteed by the plugin's
        // pointer (contexts are never freed), so no reference count is
        // touched per event.
        api.emit = { ctx, event in
            guard let ctx else { return VIGIL_E_INVALID_ARGUMENT }
            return Unmanaged<HostContext>.fromOpaque(UnsafeRawPointer(ctx))._withUnsafeGuaranteedRef { context in
                guard !context.isRetired else {
                    context.lateCalls.wrappingAdd(1, ordering: .relaxed)
                    return VIGIL_E_STOPPED
                }
                return context.callbacks.emit(event)
            }
        }
        api.log = { ctx, level, message in
            guard let context = HostContext.live(ctx) else { return }
            let (text, cut) = pluginString(message, limit: HostLimits.logMessageBytes)
            context.callbacks.log(level: Int(clamping: level.rawValue), message: text, cut: cut)
        }
        api.set_availability = { ctx, available, reason in
            guard let context = HostContext.live(ctx) else { return }
            let text = available != 0 ? "" : pluginString(reason, limit: HostLimits.reasonBytes).text
            context.callbacks.setAvailability(available != 0, reason: text)
        }
        api.now_ns = { ctx in
            // The clock is harmless after destroy: answered, not counted.
            guard let ctx else { return realtimeNanoseconds() }
            return Unmanaged<HostContext>.fromOpaque(UnsafeRawPointer(ctx)).takeUnretainedValue().callbacks.now()
        }
        api.finished = { ctx in
            guard let context = HostContext.live(ctx) else { return }
            context.callbacks.markFinished()
        }
        let table = UnsafeMutablePointer<vigil_host_api>.allocate(capacity: 1)
        table.initialize(to: api)
        return UnsafePointer(table)
    }()
}

/// Callbacks that lead to an object the context must not keep alive (a
/// test kit's instance, freed by its test): calls after it is gone are
/// ignored.
package final class WeakHostCallbacks: PluginHostCallbacks, @unchecked Sendable {  // its one weak reference is loaded atomically by the runtime
    private weak var target: (any PluginHostCallbacks)?

    package init(_ target: any PluginHostCallbacks) { self.target = target }

    package func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status { target?.emit(event) ?? VIGIL_E_STOPPED }
    package func log(level: Int, message: String, cut: Int) { target?.log(level: level, message: message, cut: cut) }
    package func setAvailability(_ available: Bool, reason: String) { target?.setAvailability(available, reason: reason) }
    package func now() -> Int64 { target?.now() ?? realtimeNanoseconds() }
    package func markFinished() { target?.markFinished() }
}

/// Callbacks that do nothing: the host side of instances created only to be
/// checked (`vigil validate`), never started.
package final class InertHost: PluginHostCallbacks {
    package init() {}
    package func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status { VIGIL_E_STOPPED }
    package func log(level: Int, message: String, cut: Int) {}
    package func setAvailability(_ available: Bool, reason: String) {}
    package func now() -> Int64 { realtimeNanoseconds() }
    package func markFinished() {}
}
