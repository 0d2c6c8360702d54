@preconcurrency import CVigilPlugin
import VigilIsolation
import Foundation
import Glibc
import VigilABI
import VigilCore

/// The result of one call into the plugin.
struct CallResult {
    var status: vigil_status
    var message: String
    var nanoseconds: Int64

    var ok: Bool { status == VIGIL_OK }
    /// "VIGIL_E_FATAL: the message" (or the status alone).
    var said: String {
        let name = ConformanceProtocol.statusName(status)
        return message.isEmpty ? name : "\(name): \(shownText(message))"
    }
}

/// What one check found; reported as one line.
struct CheckOutcome {
    var failures: [String] = []
    var notes: [String] = []
    var skipped: String?

    mutating func fail(_ why: String) { failures.append(why) }
    var passed: Bool { failures.isEmpty && skipped == nil }
}

/// One run of the checks, in the child: the plugin, its instances and the
/// options, and the calls into the plugin, each announced (`begin`) before it
/// is made and reported (`end`) after it returns. The checks themselves, and
/// their order, are in ConformanceChecks.swift.
final class ConformanceSession {
    typealias Name = Conformance.CheckName

    let request: Conformance.Request
    let out: ProtocolWriter
    var plugin: LoadedPlugin!
    var ledger: EmitLedger!
    var probes: [ProbeInstance] = []
    var options: [(name: String, value: OptionValue)] = []

    init(request: Conformance.Request, writer: ProtocolWriter) {
        self.request = request
        self.out = writer
    }

    var descriptor: vigil_plugin_descriptor { plugin.descriptor }
    var polled: Bool { plugin.descriptor.poll != nil }

    // MARK: - reporting

    func report(_ name: String, _ outcome: CheckOutcome, pass detail: String = "") {
        if !outcome.failures.isEmpty {
            out.send("check", name, "fail", (outcome.failures + outcome.notes).joined(separator: "; "))
        } else if let skipped = outcome.skipped {
            out.send("check", name, "skip", ([skipped] + outcome.notes).joined(separator: "; "))
        } else {
            out.send("check", name, "pass", ([detail].filter { !$0.isEmpty } + outcome.notes).joined(separator: "; "))
        }
    }

    // MARK: - calls

    /// One call into the plugin, announced before and reported after.
    func call(_ name: String, _ probe: ProbeInstance?,
                      _ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> CallResult {
        let instance = probe?.id ?? "-"
        out.send("begin", name, instance)
        var message = [CChar](repeating: 0, count: pluginErrorCapacity)
        let started = monotonicNanoseconds()
        let status = message.withUnsafeMutableBufferPointer { buffer in
            var error = vigil_error(size: UInt32(MemoryLayout<vigil_error>.size), reserved: 0,
                                    message: buffer.baseAddress, capacity: buffer.count)
            return body(&error)
        }
        let took = monotonicNanoseconds() - started
        let text = status == VIGIL_OK ? "" : pluginMessage(message)
        out.send("end", name, instance, "\(took)", ConformanceProtocol.statusName(status), text)
        return CallResult(status: status, message: text, nanoseconds: took)
    }

    func create(_ id: String) -> (ProbeInstance, CallResult) {
        let probe = ProbeInstance(id: id, ledger: ledger)
        probes.append(probe)
        var arena = StringArena()
        defer { arena.free() }
        var cOptions = options.map { vigil_option(name: arena.str($0.name), value: arena.value($0.value)) }
        let instanceName = arena.str("check-\(id)")
        let interval: Int64 = plugin.description.effectiveInterval(nil)
        var handle: UnsafeMutableRawPointer?
        var result = cOptions.withUnsafeMutableBufferPointer { buffer in
            var args = vigil_create_args()
            args.size = UInt32(MemoryLayout<vigil_create_args>.size)
            args.instance_name = instanceName
            args.host = probe.context.pointer
            args.api = HostTable.shared
            args.options = UnsafePointer(buffer.baseAddress)
            args.option_count = buffer.count
            args.interval_ns = interval
            return call("create", probe) { err in descriptor.create(&args, &handle, err) }
        }
        if result.ok {
            if let handle {
                probe.handle = handle
            } else {
                result.status = VIGIL_E_FATAL
                result.message = "create returned VIGIL_OK but set no instance"
            }
        }
        return (probe, result)
    }

    /// Emits are accepted from the start of start until stop returns.
    func start(_ p: ProbeInstance) -> CallResult {
        p.setPhase(.started)
        let result = call("start", p) { err in descriptor.start(p.handle, err) }
        if !result.ok { p.setPhase(.stopped(monotonicNanoseconds())) }  // a failed start leaves it stopped
        return result
    }

    func poll(_ p: ProbeInstance) -> CallResult {
        call("poll", p) { err in descriptor.poll(p.handle, err) }
    }

    func stop(_ p: ProbeInstance) -> CallResult {
        let result = call("stop", p) { err in descriptor.stop(p.handle, err) }
        p.ledger.lock.withLock { _ in
            if case .started = p.phase { p.phase = .stopped(monotonicNanoseconds()) }
        }
        return result
    }

    func destroy(_ p: ProbeInstance) -> CallResult {
        guard let handle = p.handle else { return CallResult(status: VIGIL_OK, message: "", nanoseconds: 0) }
        p.handle = nil
        return call("destroy", p) { _ in
            descriptor.destroy(handle)
            return VIGIL_OK
        }
    }

    func sleep(nanoseconds: Int64) {
        var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    func accepted(_ p: ProbeInstance) -> Int { ledger.lock.withLock { _ in p.accepted } }

    /// For push plugins: waits until each instance emitted once, or the push wait is over.
    func waitForEvents(_ probes: [ProbeInstance], since: [Int]) -> Bool {
        let deadline = monotonicNanoseconds() + request.pushWait
        while monotonicNanoseconds() < deadline {
            if zip(probes, since).allSatisfy({ accepted($0) > $1 }) { return true }
            sleep(nanoseconds: 5_000_000)
        }
        return zip(probes, since).allSatisfy { accepted($0) > $1 }
    }
}
