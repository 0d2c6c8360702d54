@preconcurrency import CVigilPlugin
import Glibc
import Synchronization
import VigilABI
import VigilCore

/// Everything the plugin handed to the host table, across all instances.
/// Guarded by `lock`, which each emit takes once; it guards the instances'
/// counts too, so that an emit is judged and counted in one section.
final class EmitLedger: @unchecked Sendable {  // its records change only with `lock` held
    let lock = Mutex(())
    let kinds: [EventSpec]
    /// An output has nothing to emit: its emits are answered as `vigil run`
    /// answers them (VIGIL_E_UNSUPPORTED) and counted by their instance.
    let isOutput: Bool
    /// The thread that makes every call into the plugin.
    let driver: pthread_t
    /// The host's own decoder: what `vigil run` refuses is a failure here.
    let decoder: EventDecoder

    // Guarded by `lock`.
    private(set) var total = 0
    private(set) var fromPluginThreads = 0
    private(set) var pluginThreads = Set<UInt>()
    private(set) var kindCounts: [Int]
    private(set) var problemOrder: [String] = []
    private(set) var problemCounts: [String: Int] = [:]
    private(set) var otherProblems = 0

    init(plugin: PluginDescription) {
        self.kinds = plugin.events
        self.isOutput = plugin.kind == .output
        self.kindCounts = Array(repeating: 0, count: plugin.events.count)
        self.driver = pthread_self()
        self.decoder = EventDecoder(monitor: "check", plugin: plugin.name, events: plugin.events)
    }

    /// A mismatch with the declarations, counted once per distinct message.
    func problemLocked(_ message: String) {
        if let n = problemCounts[message] {
            problemCounts[message] = n + 1
        } else if problemOrder.count < 40 {
            problemOrder.append(message)
            problemCounts[message] = 1
        } else {
            otherProblems += 1
        }
    }

    func problem(_ message: String) { lock.withLock { _ in problemLocked(message) } }

    /// Judges one event with the host's decoder, recording what it refuses
    /// and where it differs from the declarations. Returns the status the
    /// host's emit would answer for it while running.
    func checkLocked(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        total += 1
        let me = pthread_self()
        if pthread_equal(me, driver) == 0 {
            fromPluginThreads += 1
            if pluginThreads.count < 4096 { pluginThreads.insert(UInt(me)) }
        }
        var kindIndex = -1
        var mismatches: [DeclarationMismatch] = []
        do {
            _ = try decoder.decode(event, now: realtimeNanoseconds, kindIndex: &kindIndex, mismatches: &mismatches)
        } catch {
            problemLocked("refused by the host (\(error.reason.name)): \(error.message)")
            return error.status
        }
        if kindIndex >= 0 { kindCounts[kindIndex] += 1 }
        for mismatch in mismatches { problemLocked(mismatch.description) }
        return VIGIL_OK
    }
}

/// One instance under test, and the host context the plugin gets for it.
/// Kept alive for the life of the process: a plugin thread may hold the
/// context long after destroy.
final class ProbeInstance: PluginHostCallbacks, @unchecked Sendable {  // its mutable fields are guarded by `ledger.lock`
    enum Phase {
        case created
        case started
        /// Since this monotonic time (stop returned, or start failed).
        case stopped(Int64)
    }

    let id: String
    let ledger: EmitLedger
    var handle: UnsafeMutableRawPointer?
    private(set) lazy var context = HostContext.make(for: self)

    // Guarded by `ledger.lock`.
    var phase = Phase.created
    var accepted = 0
    var beforeStart = 0
    var afterStop = 0
    var firstLateDelay: Int64?
    var logs = 0
    var finished = 0
    /// Emits of an output's instance (refused with VIGIL_E_UNSUPPORTED).
    var outputEmits = 0

    init(id: String, ledger: EmitLedger) {
        self.id = id
        self.ledger = ledger
    }

    func setPhase(_ phase: Phase) { ledger.lock.withLock { _ in self.phase = phase } }

    func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        ledger.lock.withLock { _ in
            if ledger.isOutput {
                outputEmits += 1
                return VIGIL_E_UNSUPPORTED
            }
            let status = ledger.checkLocked(event)
            switch phase {
            case .started:
                accepted += 1
                return status
            case .created:
                beforeStart += 1
                return VIGIL_E_STOPPED
            case .stopped(let since):
                afterStop += 1
                let delay = monotonicNanoseconds() - since
                firstLateDelay = min(firstLateDelay ?? delay, delay)
                return VIGIL_E_STOPPED
            }
        }
    }

    func log(level: Int, message: String, cut: Int) { ledger.lock.withLock { _ in logs += 1 } }
    func setAvailability(_ available: Bool, reason: String) {}
    func now() -> Int64 { realtimeNanoseconds() }
    func markFinished() { ledger.lock.withLock { _ in finished += 1 } }
}
