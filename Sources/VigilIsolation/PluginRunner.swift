@preconcurrency import CVigilPlugin
import CVigilSys
import Foundation
import Glibc
import Synchronization
import VigilABI
import VigilCore

/// The plugin's side of `isolation: process`: this executable run again
/// (`vigil plugins runner`, hidden), loading one plugin file exactly as the
/// host does and answering the host's calls with it. The plugin meets the
/// same host table and the same decoder as in the host: only the transport
/// differs. Events, logs, availability and `finished` go into the ring, in
/// the order the plugin made them; each call's reply goes on the control
/// socket after the records the call produced.
///
/// Descriptors, set up by `RunnerProcess`: 3 the control socket (SEQPACKET),
/// 4 the ring's memfd, 5 the host's eventfd (records are waiting), 6 ours
/// (room in the ring).
public enum PluginRunner {
    public struct Request: Sendable {
        public var path: String
        public var allowUnsafe: Bool
        /// The host's pid: a runner whose parent is already gone exits.
        public var parent: pid_t
        public var openFiles: Int?
        public var user: String?
        /// The cgroup to join before loading the plugin.
        public var cgroup: String?

        public init(path: String, allowUnsafe: Bool, parent: pid_t, openFiles: Int? = nil, user: String? = nil,
                    cgroup: String? = nil) {
            self.path = path
            self.allowUnsafe = allowUnsafe
            self.parent = parent
            self.openFiles = openFiles
            self.user = user
            self.cgroup = cgroup
        }
    }

    static let controlFD: Int32 = 3
    static let ringFD: Int32 = 4
    static let dataEventFD: Int32 = 5
    static let spaceEventFD: Int32 = 6

    /// Runs until the host closes the control socket; the process's exit code.
    public static func run(_ request: Request) -> Int32 {
        // Dies with the host, and never outlives a host that died before this line.
        _ = vigil_set_parent_death_signal(SIGKILL)
        guard getppid() == request.parent else { return 70 }
        // A crash is the host's to report: no core file.
        setLimit(RLIMIT_CORE, 0)
        if let n = request.openFiles { setLimit(RLIMIT_NOFILE, rlim_t(n)) }
        for fd in [controlFD, ringFD, dataEventFD, spaceEventFD] { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let control = ControlSocket(fd: controlFD)

        // Into the cgroup first: another user may not move itself.
        if let cgroup = request.cgroup, let why = RunnerCgroup.join(cgroup) {
            control.send(RunnerWire.encodeRefusal(why))
            return 0
        }
        if let user = request.user, let why = switchUser(user) {
            control.send(RunnerWire.encodeRefusal(why))
            return 0
        }
        let ring: SharedRing
        do {
            ring = try SharedRing.attach(fd: ringFD)
        } catch {
            control.send(RunnerWire.encodeRefusal("the runner could not map its ring: \(error)"))
            return 0
        }
        // The host already warned of every rule the override skips.
        // A plugin may ask where it runs (docs/isolation.md): alone in this
        // process. Set before the plugin is loaded, while one thread runs.
        IsolationEnvironment.set(.process)
        let vetting = PluginVetting(policy: PluginFilePolicy(allowUnsafe: request.allowUnsafe), warn: { _ in })
        let plugin: LoadedPlugin
        switch PluginLoader.load(path: request.path, vetting: vetting) {
        case .failure(let refusal):
            control.send(RunnerWire.encodeRefusal(refusal.reason))
            return 0
        case .success(let loaded):
            plugin = loaded
        }
        control.send(RunnerWire.encodeHello(description: Array(plugin.description.json().utf8),
                                            flushes: plugin.description.kind == .output && plugin.descriptor.flush != nil))

        let writer = RingWriter(ring: ring, dataEvent: dataEventFD, spaceEvent: spaceEventFD)
        let session = RunnerSession(plugin: plugin, writer: writer)
        while let message = control.receive() {
            guard let reply = session.handle(message) else {
                FileHandle.standardError.write(Data("vigil runner: the host sent a message that is not a call; leaving\n".utf8))
                break
            }
            // A part of a batch has no reply: the batch's last part has.
            if !reply.isEmpty { control.send(reply) }
        }
        session.end()
        return 0
    }

    private static func setLimit(_ resource: __rlimit_resource, _ value: rlim_t) {
        var limit = rlimit(rlim_cur: value, rlim_max: value)
        _ = setrlimit(__rlimit_resource_t(resource.rawValue), &limit)
    }

    /// Becomes `user` (a name or a numeric uid) with its primary group and
    /// no others; why not, or nil.
    private static func switchUser(_ user: String) -> String? {
        var uid: uid_t
        var gid: gid_t
        if let entry = getpwnam(user) {
            uid = entry.pointee.pw_uid
            gid = entry.pointee.pw_gid
        } else if let n = UInt32(user) {
            uid = n
            gid = getpwuid(n)?.pointee.pw_gid ?? n
        } else {
            return "no user '\(user)' on this host"
        }
        guard geteuid() == 0 || geteuid() == uid else {
            return "running as user '\(user)' needs the host to run as root"
        }
        if geteuid() == uid { return nil }
        var groups = [gid]
        guard setgroups(1, &groups) == 0, setgid(gid) == 0, setuid(uid) == 0 else {
            return "could not become user '\(user)': \(String(cString: strerror(errno)))"
        }
        return nil
    }
}

/// One plugin instance at a time in the runner, and the host calls it makes.
private final class RunnerSession: PluginHostCallbacks, @unchecked Sendable {  // the runner's calls come from its one control thread; plugin threads reach only `accepting` (atomic) and the writer (locked)
    private let plugin: LoadedPlugin
    private let writer: RingWriter
    private var handle: UnsafeMutableRawPointer?
    private var context: HostContext?
    private var retired: [HostContext] = []
    /// The runner's events carry neither monitor nor plugin (the host
    /// stamps them), so its decoder has neither: the empty strings cost
    /// no retain per event. One for the session (no exclusivity check).
    private let decoder: EventDecoder
    private let accepting = Atomic<Bool>(false)
    /// An output's batch, as its parts arrive.
    private var batch: [UInt8] = []

    init(plugin: LoadedPlugin, writer: RingWriter) {
        self.plugin = plugin
        self.writer = writer
        self.decoder = EventDecoder(monitor: "", plugin: "", events: plugin.description.events)
    }

    /// The reply to one call (empty for a part of a batch), or nil when
    /// the message is not one.
    func handle(_ message: [UInt8]) -> [UInt8]? {
        message.withUnsafeBytes { raw -> [UInt8]? in
            var r = WireReader(raw)
            guard let op = r.u8().flatMap(RunnerWire.Call.init(rawValue:)) else { return nil }
            let (status, text): (vigil_status, String)
            switch op {
            case .writePart:
                batch.append(contentsOf: raw[1...])
                return []
            case .write:
                batch.append(contentsOf: raw[1...])
                defer { batch.removeAll(keepingCapacity: batch.count <= 1 << 20) }
                return write()
            case .flush:
                guard let deadline = r.i64() else { return nil }
                guard let handle else { return reply(VIGIL_E_STOPPED, "no instance") }
                guard let flush = plugin.descriptor.flush else { return reply(VIGIL_E_UNSUPPORTED, "no flush") }
                (status, text) = withPluginError { err in flush(handle, deadline, err) }
            case .create:
                guard let request = RunnerWire.decodeCreate(&r) else { return nil }
                (status, text) = create(request)
            case .start:
                guard let handle else { return reply(VIGIL_E_STOPPED, "no instance") }
                accepting.store(true, ordering: .releasing)
                writer.beginCall()
                (status, text) = withPluginError { err in plugin.descriptor.start(handle, err) }
                if status != VIGIL_OK { accepting.store(false, ordering: .releasing) }
                return reply(status, text, call: writer.endCall())
            case .poll:
                guard let handle, let poll = plugin.descriptor.poll else { return reply(VIGIL_E_STOPPED, "no instance") }
                writer.beginCall()
                (status, text) = withPluginError { err in poll(handle, err) }
                return reply(status, text, call: writer.endCall())
            case .stop:
                guard let handle else { return reply(VIGIL_E_STOPPED, "no instance") }
                (status, text) = withPluginError { err in plugin.descriptor.stop(handle, err) }
                accepting.store(false, ordering: .releasing)
            case .destroy:
                destroy()
                (status, text) = (VIGIL_OK, "")
            }
            return reply(status, text)
        }
    }

    private var lateCalls: UInt64 {
        (retired + (context.map { [$0] } ?? [])).reduce(UInt64(0)) { $0 &+ $1.lateCalls }
    }

    /// `call`: what the call's thread wrote (`RingWriter.endCall`), which
    /// the host takes with the reply; without it the host takes every
    /// record written so far before the reply.
    private func reply(_ status: vigil_status, _ message: String, call: RingWriter.CallRecords? = nil) -> [UInt8] {
        RunnerWire.encodeReply(status: status, message: message, lateCalls: lateCalls,
                               recordsEnd: call?.ringEnd ?? writer.position,
                               callSequence: call?.sequence ?? 0, callLength: call?.length ?? 0)
    }

    /// An output's write of the batch whose parts arrived, through the
    /// host's one encoder of batches (`OutputBatch`); its answer, or nil
    /// when the parts do not make a batch.
    private func write() -> [UInt8]? {
        guard let request = batch.withUnsafeBytes({ RunnerWire.decodeWrite($0) }) else { return nil }
        guard let handle else { return reply(VIGIL_E_STOPPED, "no instance") }
        let descriptor = plugin.descriptor
        let answer = OutputBatch.write(request.events, host: request.host, attempt: request.attempt) { b, r, e in
            descriptor.write(handle, b, r, e)
        }
        return RunnerWire.encodeAnswer(answer, lateCalls: lateCalls)
    }

    private func create(_ request: RunnerWire.CreateRequest) -> (vigil_status, String) {
        destroy()
        let context = HostContext.make(for: self)
        var out: UnsafeMutableRawPointer?
        let result = withCreateArgs(name: request.name, options: request.options, interval: request.interval,
                                    host: context.pointer, api: HostTable.shared) { args in
            withPluginError { err in plugin.descriptor.create(&args, &out, err) }
        }
        guard result.0 == VIGIL_OK, let out else {
            context.retire()
            retired.append(context)
            return result.0 == VIGIL_OK ? (VIGIL_E_FATAL, "create returned OK but no instance") : result
        }
        handle = out
        self.context = context
        return result
    }

    private func destroy() {
        accepting.store(false, ordering: .releasing)
        guard let handle else { return }
        plugin.descriptor.destroy(handle)
        self.handle = nil
        if let context {
            context.retire()
            retired.append(context)
        }
        context = nil
    }

    /// The host closed the channel: the instance goes as at shutdown.
    func end() { destroy() }

    // MARK: - the plugin's calls (any thread)

    func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status {
        // An output has nothing to emit, as in the host's process.
        if plugin.description.kind == .output { return VIGIL_E_UNSUPPORTED }
        guard accepting.load(ordering: .acquiring) else {
            return refuse(EventDefect(reason: .stopped, message: "emit outside start…stop"))
        }
        // The decoder writes the record as it checks the event (no `Event`
        // made): into room on the stack, or for a larger event into room of
        // its size, decoded again.
        return withUnsafeTemporaryAllocation(byteCount: 1024, alignment: 8) { stack in
            var record = RunnerWire.EventRecord(into: stack.baseAddress!, capacity: stack.count)
            var kindIndex = -1
            do throws(EventDefect) {
                try decoder.decode(event, now: realtimeNanoseconds, kindIndex: &kindIndex, into: &record)
            } catch {
                return refuse(error)
            }
            if record.fits { return send(record) }
            let length = record.length
            guard length <= writer.maxPayload else { return tooLarge(length) }
            let room = UnsafeMutableRawPointer.allocate(byteCount: length, alignment: 8)
            defer { room.deallocate() }
            var larger = RunnerWire.EventRecord(into: room, capacity: length)
            do throws(EventDefect) {
                try decoder.decode(event, now: realtimeNanoseconds, kindIndex: &kindIndex, into: &larger)
            } catch {
                return refuse(error)
            }
            guard larger.fits else {
                return refuse(EventDefect(reason: .malformed, message: "an event changed while the host read it"))
            }
            return send(larger)
        }
    }

    private func send(_ record: RunnerWire.EventRecord) -> vigil_status {
        let length = record.length
        guard writer.write(.event, length: length, { $0.copyMemory(from: record.base, byteCount: length) }) else {
            return tooLarge(length)
        }
        return VIGIL_OK
    }

    private func tooLarge(_ length: Int) -> vigil_status {
        refuse(EventDefect(reason: .tooLarge,
                           message: "an event encodes to \(length) bytes; an isolated plugin's event is at most \(writer.maxPayload)"))
    }

    /// Sends the refusal for the host to count and returns its status.
    private func refuse(_ defect: EventDefect) -> vigil_status {
        var w = WireWriter()
        w.u32(UInt32(defect.reason.rawValue))
        w.string(String(decoding: defect.message.utf8.prefix(4096), as: UTF8.self))
        let bytes = w.bytes
        writer.write(.refused, length: bytes.count) { p in bytes.withUnsafeBytes { p.copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
        return defect.status
    }

    func log(level: Int, message: String, cut: Int) {
        var w = WireWriter(capacity: message.utf8.count + 12)
        w.u32(UInt32(clamping: max(0, level)))
        w.u32(UInt32(clamping: max(0, cut)))
        w.string(message)
        let bytes = w.bytes
        writer.write(.log, length: bytes.count) { p in bytes.withUnsafeBytes { p.copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
    }

    func setAvailability(_ available: Bool, reason: String) {
        var w = WireWriter()
        w.u8(available ? 1 : 0)
        w.string(reason)
        let bytes = w.bytes
        writer.write(.availability, length: bytes.count) { p in bytes.withUnsafeBytes { p.copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
    }

    func now() -> Int64 { realtimeNanoseconds() }

    func markFinished() {
        writer.write(.finished, length: 0) { _ in }
    }
}

/// One end of the SEQPACKET control socket: whole messages, blocking.
package final class ControlSocket: @unchecked Sendable {  // one side uses it, one message at a time
    let fd: Int32
    private var buffer: [UInt8] = []

    init(fd: Int32) { self.fd = fd }

    func send(_ message: [UInt8]) {
        message.withUnsafeBytes { raw in
            while Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL)) < 0 && errno == EINTR {}
        }
    }

    package enum SendResult {
        case sent, full
        /// Not sent, with the errno: the peer is gone (EPIPE), or the message does not fit.
        case failed(Int32)
    }

    /// Sends `message` without waiting: `full` when the socket's buffer has
    /// no room for it now.
    func trySend(_ message: [UInt8]) -> SendResult {
        message.withUnsafeBytes { raw in
            while true {
                if Glibc.send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) >= 0 { return .sent }
                switch errno {
                case EINTR: continue
                case EAGAIN, ENOBUFS: return .full
                case let error: return .failed(error)
                }
            }
        }
    }

    /// Whether a message is waiting to be received (peeked, not taken).
    func hasMessage() -> Bool {
        var n = 0
        repeat { n = recv(fd, nil, 0, Int32(MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT)) } while n < 0 && errno == EINTR
        return n > 0
    }

    /// The next message (valid until the next call); nil at end of stream,
    /// on error, or for a message longer than `RunnerWire.maxMessage`.
    func receive() -> [UInt8]? {
        // The next message's length first (MSG_PEEK | MSG_TRUNC), so the
        // buffer is only as large as the largest message seen.
        var n = 0
        repeat { n = recv(fd, nil, 0, Int32(MSG_PEEK | MSG_TRUNC)) } while n < 0 && errno == EINTR
        guard n > 0, n <= RunnerWire.maxMessage else { return nil }
        if buffer.count < n { buffer = [UInt8](repeating: 0, count: n) }
        var got = 0
        repeat { got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, n, 0) } } while got < 0 && errno == EINTR
        guard got == n else { return nil }
        return Array(buffer[0..<n])
    }
}
