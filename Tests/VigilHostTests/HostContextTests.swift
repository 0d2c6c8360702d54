@preconcurrency import CVigilPlugin
import Synchronization
import Testing
import VigilABI

/// The contexts plugins are given: a handle a stale or forged pointer cannot
/// misuse, callbacks freed once retired, slots used again.
@Suite struct HostContextTests {
    /// Callbacks that count emits and say when they are freed.
    final class Counting: PluginHostCallbacks, Sendable {
        let emits = Mutex(0)
        let freed: Wakeup
        init(freed: Wakeup) { self.freed = freed }
        deinit { freed.wake() }
        func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
            emits.withLock { $0 += 1 }
            return VIGIL_OK
        }
        func log(level: Int, message: String, cut: Int) {}
        func setAvailability(_ available: Bool, reason: String) {}
        func now() -> Int64 { 42 }
        func markFinished() {}
    }

    static var api: vigil_host_api { HostTable.shared.pointee }

    @Test func aRetiredContextReachesNothingAndItsCallbacksAreFreedAfterAGracePeriod() {
        let freed = Wakeup()
        let context = HostContext.make(for: Counting(freed: freed))
        #expect(Self.api.emit(context.pointer, nil) == VIGIL_OK)
        #expect(Self.api.now_ns(context.pointer) == 42)
        context.retire()
        #expect(context.isRetired)
        // Nothing reaches the callbacks: emit is refused and counted, the
        // clock is still answered (not counted), the rest is ignored.
        #expect(Self.api.emit(context.pointer, nil) == VIGIL_E_STOPPED)
        #expect(Self.api.now_ns(context.pointer) != 42)
        Self.api.finished(context.pointer)
        #expect(context.lateCalls == 2)
        // The context no longer holds its callbacks: they go once no call
        // in progress can be using them.
        #expect(freed.wait(until: monotonicNanoseconds() + 10_000_000_000))
    }

    @Test func aFreedContextsHandleReachesNoOneAfter() {
        let freed = Wakeup()
        var context: HostContext? = HostContext.make(for: Counting(freed: freed))
        let stale = context!.pointer
        let orphaned = HostContexts.table.orphanedCalls
        context = nil
        #expect(freed.wait(until: monotonicNanoseconds() + 10_000_000_000))
        // Whoever takes the slot next, the old handle's generation is not theirs.
        let next = (0..<64).map { _ in HostContext.make(for: InertHost()) }
        #expect(Self.api.emit(stale, nil) == VIGIL_E_STOPPED)
        #expect(HostContexts.table.orphanedCalls > orphaned)
        #expect(next.allSatisfy { $0.pointer != stale })
    }

    @Test(arguments: [UInt(1), UInt(0xdead_beef_0000_0001), UInt.max, UInt(1) << 63 | 7])
    func aHandleTheHostNeverGaveIsRefused(_ bits: UInt) {
        let handle = OpaquePointer(bitPattern: bits)!
        #expect(Self.api.emit(handle, nil) == VIGIL_E_STOPPED)
        Self.api.log(handle, VIGIL_LOG_INFO, vigil_str())
        Self.api.set_availability(handle, 0, vigil_str())
        Self.api.finished(handle)
        _ = Self.api.now_ns(handle)
    }
}
