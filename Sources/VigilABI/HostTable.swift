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
    /// `emit`, inside the read section the host table entered for the call
    /// (`Epochs.host`): what the callbacks object is kept alive by. The
    /// runtime routes the event inside it. An implementation that must wait
    /// (for room in a blocking sink) keeps itself alive, leaves the section,
    /// waits, and enters another into `section`; the others need not know
    /// (the default calls `emit`).
    func emit(_ event: UnsafePointer<vigil_event>?, in section: inout Epochs.Section) -> vigil_status
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

extension PluginHostCallbacks {
    package func emit(_ event: UnsafePointer<vigil_event>?, in section: inout Epochs.Section) -> vigil_status {
        emit(event)
    }
}

/// The opaque `vigil_host_ctx` of one instance (one create attempt), as its
/// owner holds it: the callbacks it leads to, until `retire` (after
/// `destroy`, or a failed `create`); then every call through it is ignored
/// (emit answers VIGIL_E_STOPPED) and counted as late.
///
/// The pointer the plugin is given is not this object's address but a
/// handle, a slot of `HostContexts` and the slot's generation, so a plugin
/// thread that outlives `destroy` and calls with a stale handle reaches
/// nothing, whatever the host freed since. Retiring releases the callbacks
/// (the instance, with all it holds) after a grace period; freeing this
/// object gives the slot back after another, to be used again under a new
/// generation. A reload that replaces a monitor thus leaves nothing behind
/// but the slot's 32 bytes, used again by the next.
package final class HostContext: Sendable {
    let slot: Int
    let generation: UInt32

    private init(slot: Int, generation: UInt32) {
        self.slot = slot
        self.generation = generation
    }

    /// A new context for `callbacks`, which it holds until `retire`.
    package static func make(for callbacks: any PluginHostCallbacks) -> HostContext {
        let (slot, generation) = HostContexts.table.occupy(CallbackBox(callbacks))
        return HostContext(slot: slot, generation: generation)
    }

    /// The handle given to the plugin.
    package var pointer: OpaquePointer { HostContexts.handle(slot: slot, generation: generation) }

    /// After `destroy` (or a failed `create`): nothing the plugin calls with
    /// this context reaches the callbacks any more; they are released once
    /// no call in progress can still be using them.
    package func retire() { HostContexts.table.retire(slot: slot) }

    package var isRetired: Bool { HostContexts.table.isRetired(slot: slot) }

    /// Calls through the context after `retire` (while this object lives).
    package var lateCalls: UInt64 { HostContexts.table.lateCalls(slot: slot) }

    deinit {
        HostContexts.table.retire(slot: slot)
        HostContexts.table.vacate(slot: slot)
    }
}

/// What a context's slot holds: the callbacks, in one retained object whose
/// address fits an atomic word.
final class CallbackBox: Sendable {
    let callbacks: any PluginHostCallbacks
    init(_ callbacks: any PluginHostCallbacks) { self.callbacks = callbacks }
}

/// The slots behind every context handle: chunks allocated as needed and
/// never moved or freed (a handle must stay readable), 32 bytes a slot,
/// used again once vacated. A slot is its generation (the handle must
/// carry the same), its callbacks (0 once retired) and its late calls.
package final class HostContexts: @unchecked Sendable {  // the slots are atomics; allocation is behind `free`
    package static let table = HostContexts()

    static var chunkSlots: Int { 256 }
    static var chunkCount: Int { 4096 }
    /// Atomics per slot: generation, callbacks, late calls, padding.
    static var slotWords: Int { 4 }
    private let chunks: UnsafeMutablePointer<Atomic<Int>>
    private let free = Mutex<(vacant: [Int], next: Int)>(([], 0))
    /// Calls through handles whose context was freed (counted nowhere else).
    package var orphanedCalls: UInt64 { UInt64(bitPattern: Int64(orphaned.pointee.load(ordering: .relaxed))) }
    private let orphaned = UnsafeMutablePointer<Atomic<Int>>.allocate(capacity: 1)
    let epochs = Epochs.host

    private init() {
        chunks = UnsafeMutablePointer<Atomic<Int>>.allocate(capacity: Self.chunkCount)
        for i in 0..<Self.chunkCount { (chunks + i).initialize(to: Atomic(0)) }
        orphaned.initialize(to: Atomic(0))
    }

    static func handle(slot: Int, generation: UInt32) -> OpaquePointer {
        OpaquePointer(bitPattern: UInt(slot + 1) << 32 | UInt(generation))!
    }

    /// Slot `i`'s first word, or nil for a slot never allocated (a handle
    /// the host never gave).
    @inline(__always)
    private func words(_ i: Int) -> UnsafeMutablePointer<Atomic<Int>>? {
        guard i >= 0, i < Self.chunkSlots * Self.chunkCount else { return nil }
        let chunk = chunks[i / Self.chunkSlots].load(ordering: .acquiring)
        guard chunk != 0, let base = UnsafeMutablePointer<Atomic<Int>>(bitPattern: chunk) else { return nil }
        return base + (i % Self.chunkSlots) * Self.slotWords
    }

    fileprivate func occupy(_ box: CallbackBox) -> (Int, UInt32) {
        let slot = free.withLock { f -> Int in
            if let i = f.vacant.popLast() { return i }
            let i = f.next
            precondition(i < Self.chunkSlots * Self.chunkCount, "more than a million plugin contexts at once")
            f.next += 1
            if i % Self.chunkSlots == 0 {
                let chunk = UnsafeMutablePointer<Atomic<Int>>.allocate(capacity: Self.chunkSlots * Self.slotWords)
                for j in 0..<(Self.chunkSlots * Self.slotWords) { (chunk + j).initialize(to: Atomic(0)) }
                chunks[i / Self.chunkSlots].store(Int(bitPattern: UInt(bitPattern: chunk)), ordering: .releasing)
            }
            return i
        }
        let w = words(slot)!
        w[2].store(0, ordering: .relaxed)
        w[1].store(Int(bitPattern: UInt(bitPattern: Unmanaged.passRetained(box).toOpaque())), ordering: .releasing)
        return (slot, UInt32(truncatingIfNeeded: w[0].load(ordering: .relaxed)))
    }

    fileprivate func retire(slot: Int) {
        let old = words(slot)!
        let box = old[1].exchange(0, ordering: .sequentiallyConsistent)
        guard box != 0 else { return }
        epochs.afterGrace { Unmanaged<CallbackBox>.fromOpaque(UnsafeRawPointer(bitPattern: box)!).release() }
    }

    /// The slot's owner is gone: its handles stop matching now, and the
    /// slot is used again after a grace period (a late call in progress may
    /// still count itself in it).
    fileprivate func vacate(slot: Int) {
        words(slot)![0].wrappingAdd(1, ordering: .sequentiallyConsistent)
        epochs.afterGrace { [self] in free.withLock { $0.vacant.append(slot) } }
    }

    fileprivate func isRetired(slot: Int) -> Bool { words(slot)![1].load(ordering: .acquiring) == 0 }

    fileprivate func lateCalls(slot: Int) -> UInt64 {
        UInt64(bitPattern: Int64(words(slot)![2].load(ordering: .relaxed)))
    }

    /// Calls `body` with the callbacks `ctx` leads to, inside a read section
    /// that keeps them alive (and that `body` may replace, see
    /// `PluginHostCallbacks.emit(_:in:)`); `late` when the context is retired
    /// or gone, the call counted.
    @inline(__always)
    func call<R>(_ ctx: OpaquePointer, late: @autoclosure () -> R, counted: Bool = true,
                 _ body: (any PluginHostCallbacks, inout Epochs.Section) -> R) -> R {
        let bits = UInt(bitPattern: Int(bitPattern: ctx))
        guard let w = words(Int(truncatingIfNeeded: bits >> 32) &- 1) else {
            if counted { orphaned.pointee.wrappingAdd(1, ordering: .relaxed) }
            return late()
        }
        var section = epochs.enter()
        defer { epochs.leave(section) }
        let box = w[1].load(ordering: .sequentiallyConsistent)
        guard UInt32(truncatingIfNeeded: w[0].load(ordering: .sequentiallyConsistent)) == UInt32(truncatingIfNeeded: bits),
              let raw = UnsafeRawPointer(bitPattern: box) else {
            if counted {
                let stillOwned = UInt32(truncatingIfNeeded: w[0].load(ordering: .relaxed)) == UInt32(truncatingIfNeeded: bits)
                (stillOwned ? w + 2 : orphaned).pointee.wrappingAdd(1, ordering: .relaxed)
            }
            return late()
        }
        return Unmanaged<CallbackBox>.fromOpaque(raw)._withUnsafeGuaranteedRef { body($0.callbacks, &section) }
    }

    /// `call` for a call that may wait (a log line, availability): the
    /// callbacks are retained and the section left before `body` runs.
    func callOutside(_ ctx: OpaquePointer, _ body: (any PluginHostCallbacks) -> Void) {
        guard let callbacks = call(ctx, late: nil, { callbacks, _ in Optional(callbacks) }) else { return }
        body(callbacks)
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
        // The event path: the callbacks are reached inside a read section,
        // so no reference count is touched per event, and the section is
        // the one the event is routed in.
        api.emit = { ctx, event in
            guard let ctx else { return VIGIL_E_INVALID_ARGUMENT }
            return HostContexts.table.call(ctx, late: VIGIL_E_STOPPED) { callbacks, section in
                callbacks.emit(event, in: &section)
            }
        }
        api.log = { ctx, level, message in
            guard let ctx else { return }
            let (text, cut) = pluginString(message, limit: HostLimits.logMessageBytes)
            HostContexts.table.callOutside(ctx) { $0.log(level: Int(clamping: level.rawValue), message: text, cut: cut) }
        }
        api.set_availability = { ctx, available, reason in
            guard let ctx else { return }
            let text = available != 0 ? "" : pluginString(reason, limit: HostLimits.reasonBytes).text
            HostContexts.table.callOutside(ctx) { $0.setAvailability(available != 0, reason: text) }
        }
        api.now_ns = { ctx in
            // The clock is harmless after destroy: answered, not counted.
            guard let ctx else { return realtimeNanoseconds() }
            return HostContexts.table.call(ctx, late: realtimeNanoseconds(), counted: false) { callbacks, _ in callbacks.now() }
        }
        api.finished = { ctx in
            guard let ctx else { return }
            HostContexts.table.callOutside(ctx) { $0.markFinished() }
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
