@preconcurrency import CVigilPlugin
import VigilChildProcess
import CVigilSys
import Foundation
import Glibc
import Synchronization
import VigilABI
import VigilCore

/// What the host does with a runner's records: the instance's own host
/// functions (`MonitorInstance`), so an isolated plugin's events take the
/// same path as an in-process plugin's.
package protocol RunnerReceiver: PluginHostCallbacks {
    /// An emit the runner's decoder refused (the plugin got the status).
    func countRefusal(_ defect: EventDefect)
    /// The decoder `emit` judges with, whose declared names the runner's
    /// records name by index; nil for a receiver that takes no events.
    var eventDecoder: EventDecoder? { get }
}

/// How a runner ended.
package struct RunnerDeath: Sendable, CustomStringConvertible {
    /// The signal that killed it, or nil.
    package var signal: Int32?
    /// Its exit status, or nil.
    package var exitCode: Int32?
    /// Why the host killed it, when it did (a call past its timeout, a limit).
    package var killedBecause: String?

    package var description: String {
        var text: String
        if let signal {
            text = "killed by \(ChildProcess.signalName(signal))"
        } else if let exitCode {
            text = "exited with status \(exitCode)"
        } else {
            text = "ended"
        }
        if let killedBecause { text = "\(killedBecause); \(text)" }
        return text
    }
}

/// The host's end of one plugin runner (`PluginRunner`): the process, its
/// control socket and ring, and a thread that takes the ring's records in
/// order and the replies after them. Calls are made one at a time (the
/// instance's queue) and wait for their reply, the runner's death or their
/// deadline; a call past its deadline kills the runner.
public final class RunnerProcess: @unchecked Sendable {  // what the channel thread shares is behind `state`; `deliveredCall` and the scratch buffers are the channel thread's alone
    package struct StartFailure: Error, CustomStringConvertible {
        package var description: String
    }

    package enum Outcome {
        case reply(vigil_status, String)
        /// An output's answer to a write, its verdicts as they crossed the
        /// channel (`OutputBatch.answer` reads them).
        case answer(vigil_status, String, retryAfter: Int64, verdicts: [UInt8])
        case died(RunnerDeath)
    }

    package let pid: pid_t
    /// The runner's cgroup, when the kernel enforces its limits.
    package let cgroup: RunnerCgroup?
    /// The RLIMIT_DATA the host gave it (no cgroup, a memory limit).
    package let dataLimit: Int64?
    /// The plugin as the runner loaded and described it.
    package let description: PluginDescription
    /// An output's: it has a `flush` (its description does not say).
    let flushes: Bool
    /// What the plugin started, ended with the runner.
    private let descendants: RunnerDescendants
    private let control: ControlSocket
    private let ring: SharedRing
    private let dataEvent: Int32
    private let spaceEvent: Int32

    private let state = Mutex(Shared())
    /// A call waits here for its reply or the runner's death (`Shared.waiting`).
    private let replied = Wakeup()

    /// What the channel thread and the calls share.
    private struct Shared {
        var receiver: (any RunnerReceiver)?
        var pendingReply: RunnerWire.Reply?
        var death: RunnerDeath?
        var killReason: String?
        /// Calls of destroyed instances the runner ignored (it counts them).
        var lateCalls: UInt64 = 0
        /// Called once, on the channel thread, when the runner dies outside a call.
        var onDeath: (@Sendable (RunnerDeath) -> Void)?
        var callInFlight = false
        /// Waits in `replied` for `pendingReply` or `death` to be set.
        var waiting = 0
        /// The socket, ring and eventfds are closed: the runner was reaped. A
        /// process object outlives its runner (a replaced instance keeps the
        /// plugin it was resolved with), so they are closed then, not at deinit.
        var closed = false
    }
    /// The last call whose records in the call area were delivered (channel thread only).
    private var deliveredCall: UInt32 = 0
    /// Room for a rebuilt event and its fields.
    private let eventScratch = UnsafeMutablePointer<vigil_event>.allocate(capacity: 1)
    private let fieldScratch = UnsafeMutablePointer<vigil_field>.allocate(capacity: EventLimits.fields)

    private init(pid: pid_t, description: PluginDescription, flushes: Bool, control: ControlSocket, ring: SharedRing,
                 dataEvent: Int32, spaceEvent: Int32, descendants: RunnerDescendants, dataLimit: Int64?) {
        self.pid = pid
        self.flushes = flushes
        self.descendants = descendants
        self.cgroup = descendants.cgroup
        self.dataLimit = dataLimit
        self.description = description
        self.control = control
        self.ring = ring
        self.dataEvent = dataEvent
        self.spaceEvent = spaceEvent
    }

    deinit {
        state.withLock { closeDescriptors(&$0) }
        fieldScratch.deallocate()
        eventScratch.deallocate()
    }

    /// Closes the socket and the eventfds (under `state`) and releases the
    /// ring; once.
    private func closeDescriptors(_ shared: inout Shared) {
        guard !shared.closed else { return }
        shared.closed = true
        close(control.fd)
        close(dataEvent)
        close(spaceEvent)
        ring.release()
    }

    /// Starts a runner as `launch` says and waits (up to its load timeout)
    /// for it to load the plugin and describe it. A refusal, a crash or a
    /// hang while loading is a `StartFailure` naming it.
    package static func start(_ launch: RunnerLaunch,
                      ringCapacity: Int = SharedRing.defaultCapacity) throws(StartFailure) -> RunnerProcess {
        let path = launch.path, program = launch.program
        var cgroup: RunnerCgroup?
        if let cgroups = launch.cgroups {
            switch cgroups.make(monitor: launch.monitor, limits: launch.limits) {
            case .success(let made): cgroup = made
            case .failure(let why): throw StartFailure(description: why.description)
            }
        }
        // A runner that never came up leaves no group behind (removing twice is harmless).
        var handedOver = false
        defer { if !handedOver { cgroup?.remove() } }
        let ring: SharedRing
        do { ring = try SharedRing.create(capacity: ringCapacity) } catch { throw StartFailure(description: "\(error)") }
        var pair: [Int32] = [-1, -1]
        guard vigil_seqpacket_pair(&pair) == 0 else {
            throw StartFailure(description: "socketpair: \(String(cString: strerror(errno)))")
        }
        let dataEvent = vigil_eventfd(), spaceEvent = vigil_eventfd()
        guard dataEvent >= 0, spaceEvent >= 0 else {
            let why = String(cString: strerror(errno))
            for fd in [pair[0], pair[1], dataEvent, spaceEvent] where fd >= 0 { close(fd) }
            throw StartFailure(description: "eventfd: \(why)")
        }
        var arguments = [program == "/proc/self/exe" ? CommandLine.arguments.first ?? "vigil" : program,
                         "plugins", "runner", path, "--parent", "\(getpid())"]
        if launch.allowUnsafe { arguments.append("--allow-unsafe-plugins") }
        if let n = launch.limits.openFiles { arguments += ["--open-files", "\(n)"] }
        if let user = launch.user { arguments += ["--user", user] }
        if let cgroup { arguments += ["--cgroup", cgroup.path] }
        var environment = ProcessInfo.processInfo.environment
        environment["SWIFT_BACKTRACE"] = "enable=no"
        // Inherited by whatever the plugin starts: how the host finds it to end it.
        let tag = RunnerDescendants.newTag()
        environment[RunnerDescendants.variable] = tag
        let spawn = Spawn(program: program, arguments: arguments, environment: environment,
                          descriptors: [0: .null, 1: .parent(2), 2: .parent(2),
                                        PluginRunner.controlFD: .parent(pair[1]), PluginRunner.ringFD: .parent(ring.fd),
                                        PluginRunner.dataEventFD: .parent(dataEvent),
                                        PluginRunner.spaceEventFD: .parent(spaceEvent)],
                          newProcessGroup: true)
        let pid: pid_t
        do {
            pid = try RunnerForkServer.for(program: program).start(spawn, tag: tag) ?? spawn.startFromSpawnerThread()
            live.withLock { $0.count += 1 }
        } catch {
            for fd in [pair[0], pair[1], dataEvent, spaceEvent] { close(fd) }
            throw StartFailure(description: "cannot start a runner: \(error)")
        }
        close(pair[1])
        let descendants = RunnerDescendants(group: pid, tag: tag, cgroup: cgroup)
        let control = ControlSocket(fd: pair[0])
        // The hello: the description, or why the plugin was refused.
        var pfd = pollfd(fd: control.fd, events: Int16(POLLIN), revents: 0)
        let deadline = monotonicNanoseconds().addingSaturating(launch.loadTimeout)
        var ready: Int32 = 0
        repeat {
            let left = max(0, deadline - monotonicNanoseconds())
            ready = poll(&pfd, 1, Int32(clamping: (left + 999_999) / 1_000_000))
        } while ready < 0 && errno == EINTR
        // Worded as the probe words a load that went wrong.
        let load = "load (dlopen, its constructors and \(VIGIL_ENTRY_SYMBOL))"
        func abandon(_ why: String, ended: Bool = false) -> StartFailure {
            _ = kill(pid, SIGKILL)
            let death = Self.reap(pid, descendants)
            Self.reaped()
            for fd in [control.fd, dataEvent, spaceEvent] { close(fd) }
            guard ended, let death else { return StartFailure(description: why) }
            if let signal = death.signal { return StartFailure(description: "\(load) crashed with \(ChildProcess.signalName(signal))") }
            return StartFailure(description: "\(load) ended the runner with exit status \(death.exitCode ?? 0)")
        }
        guard ready > 0 else {
            throw abandon("\(load) took longer than \(seconds(launch.loadTimeout))")
        }
        guard let hello = control.receive() else {
            throw abandon("the runner ended while loading the plugin", ended: true)
        }
        let parsed: Result<(PluginDescription, Bool), StartFailure> = hello.withUnsafeBytes { raw in
            var r = WireReader(raw)
            guard r.u8() == RunnerWire.Message.hello.rawValue, let ok = r.u8() else {
                return .failure(StartFailure(description: "the runner sent no greeting"))
            }
            if ok == 0 { return .failure(StartFailure(description: r.string() ?? "refused")) }
            guard let json = r.bytes() else { return .failure(StartFailure(description: "the runner's greeting is cut short")) }
            do {
                var description = try PluginDescription(json: String(decoding: json, as: UTF8.self))
                description.path = path
                return .success((description, r.u8() == 1))
            } catch {
                return .failure(StartFailure(description: "the runner's description of the plugin is not valid: \(error)"))
            }
        }
        let description: PluginDescription, flushes: Bool
        switch parsed {
        case .failure(let failure): throw abandon(failure.description)
        case .success(let d): (description, flushes) = d
        }
        // Without a cgroup, the watchdog ends a runner over its memory limit,
        // and the kernel refuses allocations past twice the limit above what
        // the runner itself holds now (RLIMIT_DATA: heap and private
        // mappings), so that a leak faster than the watchdog looks cannot
        // take the machine's memory meanwhile.
        var dataLimit: Int64?
        if cgroup == nil, let memory = launch.limits.memory, let held = RunnerLimits.sample(pid: pid)?.data {
            let cap = held.addingSaturating(memory.multipliedSaturating(by: 2))
            if vigil_limit_data(pid, UInt64(cap)) == 0 { dataLimit = cap }
        }
        let process = RunnerProcess(pid: pid, description: description, flushes: flushes, control: control, ring: ring,
                                    dataEvent: dataEvent, spaceEvent: spaceEvent, descendants: descendants,
                                    dataLimit: dataLimit)
        handedOver = true
        Thread.detachNewThread { process.channel() }
        return process
    }

    /// Where the runner's records go from now on, and who hears of a death
    /// outside a call.
    func attach(_ receiver: any RunnerReceiver, onDeath: @escaping @Sendable (RunnerDeath) -> Void) {
        state.withLock { s in
            s.receiver = receiver
            s.onDeath = onDeath
        }
    }

    /// Makes one call and waits for its reply; past `timeout` the runner is
    /// killed and the call ends with its death.
    func call(_ message: [UInt8], timeout: Int64, name: String) -> Outcome {
        call([message], timeout: timeout, name: name)
    }

    /// Makes one call of several messages (a batch in parts; the last one
    /// is the call) and waits for its reply; past `timeout`, counted from the
    /// first part, or past `giveUpAt()` (monotonic ns, read again every
    /// 100 ms: a drain deadline set while the call runs), the runner is
    /// killed and the call ends with its death.
    func call(_ messages: [[UInt8]], timeout: Int64, name: String, giveUpAt: (() -> Int64)? = nil) -> Outcome {
        var deadline = monotonicNanoseconds().addingSaturating(timeout)
        let died = state.withLock { s -> RunnerDeath? in
            if let death = s.death { return death }
            s.callInFlight = true
            s.pendingReply = nil
            return nil
        }
        if let died { return .died(died) }
        // Sent under the lock: the channel closes the socket under it once
        // the runner has ended. A message fits the socket's buffer, so only
        // a runner that does not read blocks a sender: then the wait for
        // room is made without the lock, and ends at the deadline.
        var timedOut = false
        var unsent: String?
        sending: for message in messages {
            while true {
                // Nil: the runner has ended.
                guard let sent = state.withLock({ s in s.death == nil ? control.trySend(message) : nil }) else { break sending }
                switch sent {
                case .sent: continue sending
                case .failed(EPIPE), .failed(ECONNRESET): break sending  // the runner is gone: its death is on the way
                case .failed(let error):
                    unsent = "the host could not send \(name) to the runner: \(String(cString: strerror(error)))"
                    break sending
                case .full:
                    let left = deadline - monotonicNanoseconds()
                    if left <= 0 {
                        timedOut = true
                        break sending
                    }
                    var pfd = pollfd(fd: control.fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&pfd, 1, Int32(clamping: min(left / 1_000_000 + 1, 50)))
                }
            }
        }
        // The host gave up on the call and ended the runner: a reply that
        // comes while it ends (a runner that ignores SIGTERM answers until
        // the SIGKILL) is not the call's outcome, its end is. Taken, it left
        // the death for the next call, blamed on that call.
        var gaveUp = false
        var graced = false
        var waitTimedOut = false
        waiting: while true {
            let now = monotonicNanoseconds()
            let givenUp = now >= (giveUpAt?() ?? .max)
            let step = state.withLock { s -> CallWait in
                // A wait that timed out takes its count back (see `Wakeup`).
                if waitTimedOut && s.waiting > 0 { s.waiting -= 1 }
                waitTimedOut = false
                guard s.pendingReply == nil && s.death == nil else { return .answered }
                // The timeout is the plugin's: a reply already on the socket at
                // the deadline came in time, and waits only for the channel to
                // take the records before it (one bounded drain). Looked at
                // under the lock, as the socket is open only while it is held.
                if !timedOut && !givenUp && unsent == nil && now >= deadline && !graced && control.hasMessage() {
                    return .graced
                }
                if timedOut || now >= deadline || givenUp || unsent != nil { return .givenUp }
                s.waiting += 1
                return .waiting
            }
            switch step {
            case .answered:
                break waiting
            case .graced:
                graced = true
                deadline = now.addingSaturating(max(timeout, 1_000_000_000))
            case .givenUp:
                gaveUp = true
                terminate(because: unsent ?? (givenUp && !timedOut && now < deadline
                    ? "\(name) ran past the drain deadline at shutdown"
                    : "\(name) ran past its timeout of \(Self.seconds(timeout))"))
                while state.withLock({ s in
                    guard s.death == nil else { return false }
                    s.waiting += 1
                    return true
                }) {
                    replied.wait()
                }
                break waiting
            case .waiting:
                // A wake-up left by an earlier wait only ends this one early: the loop looks again.
                waitTimedOut = !replied.wait(until: giveUpAt == nil ? deadline : min(deadline, now.addingSaturating(100_000_000)))
            }
        }
        return state.withLock { s -> Outcome in
            s.callInFlight = false
            if let reply = s.pendingReply {
                s.pendingReply = nil
                if gaveUp, let death = s.death { return .died(death) }
                if let answer = reply.answer {
                    return .answer(reply.status, reply.message, retryAfter: answer.retryAfter, verdicts: answer.verdicts)
                }
                return .reply(reply.status, reply.message)
            }
            return .died(s.death!)
        }
    }

    /// Where a call's wait for its reply stands.
    private enum CallWait {
        /// The reply came, or the runner ended.
        case answered
        /// Past the deadline with the reply already on the socket.
        case graced
        /// Past the deadline, or the call could not be sent: the runner is ended.
        case givenUp
        /// Counted in `Shared.waiting`: to wait in `replied`.
        case waiting
    }

    /// Kills the runner because of `reason` (SIGTERM, then SIGKILL a second
    /// later); its death is reported with the reason.
    func terminate(because reason: String) {
        let first = state.withLock { s -> Bool in
            guard s.death == nil, s.killReason == nil else { return false }
            s.killReason = reason
            return true
        }
        guard first else { return }
        _ = kill(pid, SIGTERM)
        let pid = pid
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) { [weak self] in
            if let self, !self.isDead { _ = kill(pid, SIGKILL) }
        }
    }

    /// Ends a runner whose instance was destroyed: the runner exits when
    /// its control socket closes; one that does not within a second is killed.
    /// Nothing of it reaches the receiver after, its end included: a runner
    /// let go is not a runner that died (an operator's restart, a reload).
    package func finish() {
        state.withLock { s in
            s.receiver = nil
            s.onDeath = nil
            if !s.closed { shutdown(control.fd, Int32(SHUT_RDWR)) }
        }
        let pid = pid
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) { [weak self] in
            // A runner whose process object is gone was reaped: its pid may be another's now.
            if let self, !self.isDead { _ = kill(pid, SIGKILL) }
        }
    }

    package var isDead: Bool { state.withLock { $0.death != nil } }

    /// Calls of destroyed instances the runner ignored (it counts them).
    var lateCalls: UInt64 { state.withLock { $0.lateCalls } }

    // MARK: - the channel thread

    private func channel() {
        // The reader (and its copy buffer) lives as long as the channel.
        let reader = RingReader(ring: ring, dataEvent: dataEvent, spaceEvent: spaceEvent)
        // The runner's end is seen on its pidfd (Linux 5.3), not only as the
        // end of its socket: a process the plugin forked holds a copy of the
        // socket open after the runner died. Without a pidfd, looked for
        // every 100 ms. A negative fd is one poll skips.
        let pidfd = vigil_pidfd_open(pid)
        defer { if pidfd >= 0 { close(pidfd) } }
        var fds = [pollfd(fd: control.fd, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: dataEvent, events: Int16(POLLIN), revents: 0)]
        // Once the ring is found broken it is read no more: the runner is
        // being ended, and only its channel's end is awaited.
        var broken = false
        // Every drain takes what was published when it began, and no more:
        // a plugin whose threads write as fast as the host reads would
        // otherwise keep the drain going and the control socket unread, and
        // a call's reply would wait behind events sent after it, past the
        // call's timeout (issue 26). Between drains the socket is looked at,
        // without sleeping when records are waiting.
        while true {
            if !broken, let why = drainRing(reader, before: reader.writePosition()) {
                broken = true
                terminate(because: "the runner broke its channel: \(why)")
            }
            var sleep: Int64 = pidfd >= 0 ? -1 : 100_000_000
            if !broken {
                if let most = reader.prepareToSleep() {
                    if most >= 0 && (sleep < 0 || most < sleep) { sleep = most }
                } else {
                    sleep = 0
                }
            }
            let n = vigil_poll_ns(&fds, broken ? 2 : 3, sleep)
            if !broken { reader.wokeUp(signaled: fds[2].revents != 0) }
            if n < 0 && errno != EINTR { break }
            // A reply the runner sent before it ended is taken first.
            guard fds[0].revents != 0 else {
                if fds[1].revents != 0 || (pidfd < 0 && vigil_child_ended(pid, 0) == 1) { break }
                continue
            }
            // What must come before the reply is taken first. A start or a
            // poll carries its own thread's records with it, and says where
            // those that did not fit went in the ring: the reply does not
            // wait for what the plugin's other threads wrote meanwhile. For
            // the other calls, every record before the reply (the runner
            // publishes a record before it answers).
            guard let message = control.receive() else { break }
            let reply = message.withUnsafeBytes { raw -> RunnerWire.Reply? in
                var r = WireReader(raw)
                return RunnerWire.decodeReply(&r)
            }
            if !broken, let reply, reply.callSequence != 0,
               let why = deliverCallRecords(reader, sequence: reply.callSequence, length: reply.callLength) {
                broken = true
                terminate(because: "the runner broke its channel: \(why)")
            }
            let bound = reply?.recordsEnd ?? .max
            if !broken, bound > 0, let why = drainRing(reader, before: min(bound, reader.writePosition())) {
                broken = true
                terminate(because: "the runner broke its channel: \(why)")
            }
            guard handle(message) else {
                terminate(because: "the runner sent a message that is not a reply")
                continue
            }
        }
        // The runner closed its end or ended: what it wrote before is
        // delivered, the records of a call it died in first.
        if !broken {
            let call = reader.callRecords()
            if call.sequence != 0 { _ = deliverCallRecords(reader, sequence: call.sequence, length: call.length) }
            _ = drainRing(reader, before: reader.writePosition())
        }
        var ending = Self.reap(pid, descendants) ?? RunnerDeath()
        Self.reaped()
        let kernelReason = cgroup?.killReason()
        cgroup?.remove()
        let (receiverOnDeath, inCall, waiting) = state.withLock { s -> ((@Sendable (RunnerDeath) -> Void)?, Bool, Int) in
            ending.killedBecause = s.killReason ?? kernelReason
            s.death = ending
            let told = s.onDeath
            // Nothing more comes from it: its descriptors go now, and the
            // instance it served is no longer held.
            s.receiver = nil
            s.onDeath = nil
            closeDescriptors(&s)
            defer { s.waiting = 0 }
            return (told, s.callInFlight, s.waiting)
        }
        replied.wake(waiting)
        if !inCall { receiverOnDeath?(ending) }
    }

    /// Takes the records published before `bound`; why the channel is
    /// broken, or nil.
    private func drainRing(_ reader: RingReader, before bound: UInt64) -> String? {
        // A receiver is attached before the create that gives the plugin a
        // context, so nothing can arrive before it; after it is let go,
        // what still comes is taken and dropped. Bound once, outside the
        // loop: no retain of it per record.
        guard let receiver = state.withLock({ $0.receiver }) else {
            return drop(reader, before: bound)
        }
        let decoder = receiver.eventDecoder
        // A reply waiting is looked for every 512 records (one recv with
        // MSG_PEEK): a drain of a full ring must not keep a call's answer
        // waiting, and the loop takes the reply next.
        var sinceLook = 0
        while true {
            sinceLook &+= 1
            if sinceLook == 512 {
                sinceLook = 0
                if control.hasMessage() { return nil }
            }
            switch reader.next(before: bound) {
            case .empty:
                return nil
            case .corrupt(let why):
                return why
            case .record(let type, let payload):
                if let why = deliver(type, payload, to: receiver, decoder: decoder) { return why }
            }
        }
    }

    /// Delivers the records of call `sequence` in the call area (framed as
    /// in the ring, unpadded), once; why they are malformed, or nil.
    private func deliverCallRecords(_ reader: RingReader, sequence: UInt32, length: UInt32) -> String? {
        guard sequence != deliveredCall else { return nil }
        deliveredCall = sequence
        guard length <= UInt32(SharedRing.Layout.callAreaBytes) else { return "a call's records are longer than their area" }
        let records = reader.copyCallArea(Int(length))
        let receiver = state.withLock { $0.receiver }
        return records.withUnsafeBytes { raw -> String? in
            var offset = 0
            let header = SharedRing.Layout.recordHeader
            while offset < raw.count {
                guard raw.count - offset >= header else { return "a reply's records are cut short" }
                let length = Int(UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
                let rawType = UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self))
                guard length <= raw.count - offset - header else { return "a reply's record runs past its end" }
                guard let type = RingRecord(rawValue: rawType), type != .pad else {
                    return "a reply carries a record of the unknown type \(rawType)"
                }
                let payload = UnsafeRawBufferPointer(rebasing: raw[(offset + header)..<(offset + header + length)])
                offset += header + length
                guard let receiver else { continue }
                if let why = deliver(type, payload, to: receiver, decoder: receiver.eventDecoder) { return why }
            }
            return nil
        }
    }

    /// Takes the records with no receiver to take them.
    private func drop(_ reader: RingReader, before bound: UInt64) -> String? {
        while true {
            switch reader.next(before: bound) {
            case .empty: return nil
            case .corrupt(let why): return why
            case .record: continue
            }
        }
    }

    private func deliver(_ type: RingRecord, _ payload: UnsafeRawBufferPointer, to receiver: any RunnerReceiver,
                         decoder: EventDecoder?) -> String? {
        var r = WireReader(payload)
        switch type {
        case .event:
            guard RunnerWire.rebuildEvent(payload, into: eventScratch, fields: fieldScratch, decoder: decoder) else {
                return "an event record is malformed"
            }
            _ = receiver.emit(eventScratch)
        case .log:
            guard let level = r.u32(), let cut = r.u32(), let message = r.bytes() else { return "a log record is malformed" }
            // Re-cut: the runner's table cut it, but the ring is the plugin's memory.
            let (text, more) = pluginText(message, limit: HostLimits.logMessageBytes)
            receiver.log(level: Int(level), message: text, cut: Int(cut) + more)
        case .availability:
            guard let available = r.u8(), let reason = r.bytes() else { return "an availability record is malformed" }
            receiver.setAvailability(available != 0, reason: pluginText(reason, limit: HostLimits.reasonBytes).0)
        case .finished:
            receiver.markFinished()
        case .refused:
            guard let raw = r.u32(), let message = r.bytes() else { return "a refusal record is malformed" }
            let reason = EmitRefusal(rawValue: Int(raw)) ?? .malformed
            receiver.countRefusal(EventDefect(reason: reason, message: pluginText(message, limit: 4096).0))
        case .pad:
            break
        }
        return nil
    }

    /// A reply; false for anything else.
    private func handle(_ message: [UInt8]) -> Bool {
        message.withUnsafeBytes { raw in
            var r = WireReader(raw)
            guard var reply = RunnerWire.decodeReply(&r) else { return false }
            var text = reply.message
            reply.message = text.withUTF8 { pluginText(UnsafeRawBufferPointer($0), limit: pluginErrorCapacity).0 }
            let waiting = state.withLock { s in
                s.pendingReply = reply
                s.lateCalls = reply.lateCalls
                defer { s.waiting = 0 }
                return s.waiting
            }
            replied.wake(waiting)
            return true
        }
    }

    /// Waits for `pid` to end (killing it if it has not a moment after its
    /// channel closed), ends what its plugin started, and reaps it; its
    /// ending, or nil if it was not our child.
    private static func reap(_ pid: pid_t, _ descendants: RunnerDescendants) -> RunnerDeath? {
        var ended: Int32 = 0
        for _ in 0..<50 {
            ended = vigil_child_ended(pid, 0)
            if ended != 0 { break }
            usleep(2_000)
        }
        if ended == 0 {
            _ = kill(pid, SIGKILL)
            ended = vigil_child_ended(pid, 1)
        }
        guard ended == 1 else { return nil }
        // Ended, not reaped yet: its pid (its group's id) is still its own.
        descendants.killAll()
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, 0)
            if r == pid { return death(status) }
            if r < 0 && errno != EINTR { return nil }
        }
    }

    private static func death(_ status: Int32) -> RunnerDeath {
        let low = status & 0x7F
        if low == 0 { return RunnerDeath(signal: nil, exitCode: (status >> 8) & 0xFF) }
        return RunnerDeath(signal: low, exitCode: nil)
    }

    // MARK: - every runner of this host

    /// Runners started and not yet reaped, and the waits in `liveChanged` for that to change.
    private static let live = Mutex<(count: Int, waiting: Int)>((0, 0))
    private static let liveChanged = Wakeup()

    /// Waits until every runner has been reaped, or `deadline` (monotonic
    /// ns): at the end of a run, so that the host exits after its runners
    /// and their CPU time is in the summary's.
    package static func awaitAll(until deadline: Int64) -> Bool {
        var timedOut = false
        while true {
            // Nil: not yet, and counted in `waiting` (see `Wakeup`).
            let done = live.withLock { live -> Bool? in
                if timedOut && live.waiting > 0 { live.waiting -= 1 }
                if live.count <= 0 { return true }
                if monotonicNanoseconds() >= deadline { return false }
                live.waiting += 1
                return nil
            }
            if let done { return done }
            timedOut = !liveChanged.wait(until: deadline)
        }
    }

    private static func reaped() {
        let waiting = live.withLock { live in
            live.count -= 1
            defer { live.waiting = 0 }
            return live.waiting
        }
        liveChanged.wake(waiting)
    }

    package static func seconds(_ ns: Int64) -> String {
        ns % 1_000_000_000 == 0 ? "\(ns / 1_000_000_000)s" : String(format: "%.3fs", Double(ns) / 1e9)
    }
}

/// Bytes from the runner, read as a plugin's string is: capped at `limit`
/// on a character boundary (the table's own cut); the text and the bytes cut.
private func pluginText(_ bytes: UnsafeRawBufferPointer, limit: Int) -> (String, Int) {
    pluginString(vigil_str(ptr: bytes.baseAddress?.assumingMemoryBound(to: CChar.self), len: bytes.count), limit: limit)
}
