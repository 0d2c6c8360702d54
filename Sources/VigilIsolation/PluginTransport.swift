@preconcurrency import CVigilPlugin
import Foundation
import Synchronization
import VigilABI
import VigilCore

/// How a plugin's calls reach it: in this process, or in a runner process
/// (`isolation: process`). The monitor instance or plugin sink above it is
/// the same either way (it stamps, routes, supervises, keeps batches until
/// answered for); only where the plugin's code runs differs. Calls are made
/// from the instance's queue or the sink's thread, one at a time. A monitor
/// polls; an output writes and flushes.
package protocol PluginTransport: AnyObject, Sendable {
    /// Whether the plugin polls.
    var polls: Bool { get }
    /// Whether an instance exists (created, not destroyed).
    var hasInstance: Bool { get }
    /// One create attempt, whose host calls reach `receiver`. A failed attempt
    /// leaves nothing behind.
    func create(name: String, options: [BoundOption], interval: Int64, receiver: any RunnerReceiver,
                timeout: Int64) -> CallOutcome
    func start(timeout: Int64) -> CallOutcome
    func poll(timeout: Int64) -> CallOutcome
    func stop(timeout: Int64) -> CallOutcome
    /// Destroys the instance, if any; nothing of it reaches the receiver after.
    func destroy(timeout: Int64)
    /// An output's `write` of `events` as one batch, its answer read by
    /// `OutputBatch`; given up past `timeout` or `giveUpAt()` (the drain
    /// deadline, which may be set while the write runs). In process,
    /// neither can interrupt it.
    func write(_ events: [Event], host: String, attempt: UInt32, timeout: Int64,
               giveUpAt: @escaping () -> Int64) -> WriteOutcome
    /// Whether the output has a `flush`.
    var flushes: Bool { get }
    /// An output's `flush`, to be done by `deadline` (monotonic ns).
    func flush(deadline: Int64, timeout: Int64) -> CallOutcome
    /// Calls the plugin made through contexts of destroyed instances.
    var lateCalls: UInt64 { get }
    /// The process the plugin runs in, when not this one.
    var runnerPID: pid_t? { get }
}

package enum CallOutcome {
    /// The plugin's status and message.
    case returned(vigil_status, String)
    /// The plugin's process ended during the call (or was ended: a hang, a limit).
    case crashed(RunnerDeath)
}

package enum WriteOutcome {
    /// What the output said of each event (`OutputBatch.Answer`).
    case answered(OutputBatch.Answer)
    /// The output's process ended during the write (or was ended: a hang).
    case crashed(RunnerDeath)
}

/// The plugin's code in this process: calls through its descriptor, with a
/// host context per create attempt.
package final class InProcessTransport: PluginTransport, @unchecked Sendable {  // `handle` and `context` change on the instance's queue only; `retired` is behind its lock
    let plugin: LoadedPlugin
    private var handle: UnsafeMutableRawPointer?
    private var context: HostContext?
    private let retired = Mutex<[HostContext]>([])

    package init(plugin: LoadedPlugin) { self.plugin = plugin }

    package var polls: Bool { plugin.descriptor.poll != nil }
    package var hasInstance: Bool { handle != nil }
    package var runnerPID: pid_t? { nil }

    package func create(name: String, options: [BoundOption], interval: Int64, receiver: any RunnerReceiver,
                timeout: Int64) -> CallOutcome {
        var out: UnsafeMutableRawPointer?
        let context = HostContext.make(for: receiver)
        let result = withCreateArgs(name: name, options: options, interval: interval, host: context.pointer,
                                    api: HostTable.shared) { args in
            withPluginError { err in plugin.descriptor.create(&args, &out, err) }
        }
        guard result.0 == VIGIL_OK, let out else {
            retire(context)
            return .returned(result.0 == VIGIL_OK ? VIGIL_E_FATAL : result.0,
                             result.0 == VIGIL_OK ? "create returned OK but no instance" : result.1)
        }
        handle = out
        self.context = context
        return .returned(result.0, result.1)
    }

    package func start(timeout: Int64) -> CallOutcome {
        guard let handle else { return .returned(VIGIL_E_STOPPED, "no instance") }
        let (status, message) = withPluginError { err in plugin.descriptor.start(handle, err) }
        return .returned(status, message)
    }

    package func poll(timeout: Int64) -> CallOutcome {
        guard let handle, let poll = plugin.descriptor.poll else { return .returned(VIGIL_E_STOPPED, "no instance") }
        let (status, message) = withPluginError { err in poll(handle, err) }
        return .returned(status, message)
    }

    package func stop(timeout: Int64) -> CallOutcome {
        guard let handle else { return .returned(VIGIL_E_STOPPED, "no instance") }
        let (status, message) = withPluginError { err in plugin.descriptor.stop(handle, err) }
        return .returned(status, message)
    }

    package func write(_ events: [Event], host: String, attempt: UInt32, timeout: Int64,
               giveUpAt: @escaping () -> Int64) -> WriteOutcome {
        guard let handle else {
            return .answered(OutputBatch.answer(count: events.count, status: VIGIL_E_STOPPED, message: "no instance",
                                                retryAfter: 0, verdict: 0, perEvent: nil))
        }
        let descriptor = plugin.descriptor
        return .answered(OutputBatch.write(events, host: host, attempt: attempt) { b, r, e in descriptor.write(handle, b, r, e) })
    }

    package var flushes: Bool { plugin.descriptor.flush != nil }

    package func flush(deadline: Int64, timeout: Int64) -> CallOutcome {
        guard let handle, let flush = plugin.descriptor.flush else { return .returned(VIGIL_E_STOPPED, "no instance") }
        let (status, message) = withPluginError { err in flush(handle, deadline, err) }
        return .returned(status, message)
    }

    package func destroy(timeout: Int64) {
        guard let handle else { return }
        plugin.descriptor.destroy(handle)
        self.handle = nil
        if let context { retire(context) }
        context = nil
    }

    private func retire(_ context: HostContext) {
        context.retire()
        retired.withLock { $0.append(context) }
    }

    package var lateCalls: UInt64 {
        retired.withLock { $0.reduce(0) { $0 &+ $1.lateCalls } }
    }
}

/// How to start a monitor's or an output's runner (and start it again
/// after a crash).
public struct RunnerLaunch: Sendable {
    var path: String
    var allowUnsafe: Bool
    /// The monitor it serves, or `sink-NAME` (its cgroup's name).
    var monitor = ""
    var limits = ResourceLimits()
    var user: String?
    /// Deadline of loading the plugin in a new runner.
    var loadTimeout: Int64
    /// The `vigil` executable (this one, but for tests).
    var program = "/proc/self/exe"
    /// Where `limits` are enforced by the kernel, when the host could make
    /// cgroups; nil: setrlimit and the watchdog.
    package var cgroups: RunnerCgroups?

    package init(path: String, allowUnsafe: Bool, monitor: String = "", limits: ResourceLimits = ResourceLimits(),
                 user: String? = nil, loadTimeout: Int64, program: String = "/proc/self/exe", cgroups: RunnerCgroups? = nil) {
        self.path = path
        self.allowUnsafe = allowUnsafe
        self.monitor = monitor
        self.limits = limits
        self.user = user
        self.loadTimeout = loadTimeout
        self.program = program
        self.cgroups = cgroups
    }
}

/// The plugin's code in a runner process. A runner serves one instance;
/// a create after a crash starts a new one, which must describe the plugin
/// as the first did (a file replaced under the host is refused).
package final class RunnerTransport: PluginTransport, @unchecked Sendable {  // the runner is behind `current`; the rest changes on the instance's queue only
    let launch: RunnerLaunch
    package let description: PluginDescription
    /// The runner serving the instance: replaced on the instance's queue,
    /// read by the watchdog too.
    private let current: Mutex<RunnerProcess?>
    private var process: RunnerProcess? {
        get { current.withLock { $0 } }
        set { current.withLock { $0 = newValue } }
    }
    private var created = false
    /// Told when the runner dies outside a call (on the runner's channel
    /// thread), with the runner that died: by the time the instance looks,
    /// another may serve it.
    private let onDeath = Mutex<@Sendable (RunnerDeath, RunnerProcess) -> Void>({ _, _ in })
    private let late = Mutex<UInt64>(0)

    /// A transport over `first`, the runner that described the plugin.
    package init(first: RunnerProcess, launch: RunnerLaunch) {
        self.current = Mutex(first)
        self.launch = launch
        self.description = first.description
        self.flushes = first.flushes
    }

    /// Who hears of a runner that died outside a call (the instance).
    package func whenDiedOutsideACall(_ handler: @escaping @Sendable (RunnerDeath, RunnerProcess) -> Void) {
        onDeath.withLock { $0 = handler }
    }

    package var polls: Bool { description.polled }
    package var hasInstance: Bool { created }
    package var runnerPID: pid_t? { process?.pid }
    /// The runner serving the instance now, if one is up.
    package var currentProcess: RunnerProcess? { process }

    package func create(name: String, options: [BoundOption], interval: Int64, receiver: any RunnerReceiver,
                timeout: Int64) -> CallOutcome {
        if process == nil || process?.isDead == true {
            process = nil
            do {
                let fresh = try RunnerProcess.start(launch)
                guard fresh.description.sameContract(as: description), fresh.flushes == flushes else {
                    fresh.finish()
                    return .crashed(RunnerDeath(killedBecause: "the plugin file changed: it no longer describes the kinds and options it was started with"))
                }
                process = fresh
            } catch {
                return .crashed(RunnerDeath(killedBecause: "a new runner could not load the plugin: \(error)"))
            }
        }
        guard let process else { return .crashed(RunnerDeath()) }
        process.attach(receiver) { [weak self, weak process] death in
            guard let self, let process else { return }
            onDeath.withLock { $0 }(death, process)
        }
        let outcome = call(RunnerWire.encodeCreate(name: name, options: options, interval: interval), "create", timeout)
        if case .returned(VIGIL_OK, _) = outcome { created = true }
        return outcome
    }

    package func start(timeout: Int64) -> CallOutcome { call(RunnerWire.encodeCall(.start), "start", timeout) }

    package func poll(timeout: Int64) -> CallOutcome { call(RunnerWire.encodeCall(.poll), "poll", timeout) }

    package func stop(timeout: Int64) -> CallOutcome { call(RunnerWire.encodeCall(.stop), "stop", timeout) }

    package func write(_ events: [Event], host: String, attempt: UInt32, timeout: Int64,
               giveUpAt: @escaping () -> Int64) -> WriteOutcome {
        guard let process else {
            return .answered(OutputBatch.answer(count: events.count, status: VIGIL_E_STOPPED, message: "no instance",
                                                retryAfter: 0, verdict: 0, perEvent: nil))
        }
        switch process.call(RunnerWire.encodeWrite(events, host: host, attempt: attempt), timeout: timeout, name: "write",
                            giveUpAt: giveUpAt) {
        case .answer(let status, let message, let retryAfter, let verdicts):
            // Read as an answer in process is: no more than the batch it was given.
            return .answered(OutputBatch.answer(count: events.count, status: status, message: message, retryAfter: retryAfter,
                                                verdict: UInt32(VIGIL_WRITE_RETRY.rawValue), perEvent: verdicts))
        case .reply(let status, let message):
            // No instance, or a status without verdicts: every event is the status's.
            return .answered(OutputBatch.answer(count: events.count, status: status == VIGIL_OK ? VIGIL_E_FATAL : status,
                                                message: message, retryAfter: 0, verdict: 0, perEvent: nil))
        case .died(let death):
            lost(process)
            return .crashed(death)
        }
    }

    /// As the first runner said: a runner restarted on a changed file must
    /// offer the same contract.
    package let flushes: Bool

    package func flush(deadline: Int64, timeout: Int64) -> CallOutcome {
        call(RunnerWire.encodeFlush(deadline: deadline), "flush", timeout)
    }

    /// Destroys the instance and lets its runner go: the next create starts
    /// a fresh process, so nothing an instance left behind reaches the next.
    package func destroy(timeout: Int64) {
        guard let process else { return }
        if created && !process.isDead { _ = call(RunnerWire.encodeCall(.destroy), "destroy", timeout) }
        created = false
        late.withLock { $0 &+= process.lateCalls }
        process.finish()
        self.process = nil
    }

    /// Ends the runner because of `reason` (a limit crossed); its death is
    /// reported through the call in flight or as a death outside one.
    package func terminate(because reason: String) { process?.terminate(because: reason) }

    /// The runner ended outside a call: forget it (its death was reported).
    package func discard() {
        created = false
        if let process { late.withLock { $0 &+= process.lateCalls } }
        process = nil
    }

    package var lateCalls: UInt64 { late.withLock { $0 } &+ (process?.lateCalls ?? 0) }

    private func call(_ message: [UInt8], _ name: String, _ timeout: Int64) -> CallOutcome {
        guard let process else { return .returned(VIGIL_E_STOPPED, "no instance") }
        switch process.call(message, timeout: timeout, name: name) {
        case .reply(let status, let text), .answer(let status, let text, _, _):
            return .returned(status, text)
        case .died(let death):
            lost(process)
            return .crashed(death)
        }
    }

    /// `process` died in a call: the instance is gone with it.
    private func lost(_ process: RunnerProcess) {
        created = false
        late.withLock { $0 &+= process.lateCalls }
        self.process = nil
    }
}

extension PluginDescription {
    /// Whether `other` offers what a monitor was set up with: the same
    /// kinds, fields and options (a runner restarted on a replaced file
    /// must not change the routes and options the host bound).
    func sameContract(as other: PluginDescription) -> Bool {
        name == other.name && kind == other.kind && events == other.events && options == other.options
    }
}
