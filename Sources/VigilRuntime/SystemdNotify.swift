import Glibc
import Logging
import Synchronization
import VigilABI
import VigilCore

/// What the service manager handed this process in its environment, checked.
/// The values come from outside, so each is parsed strictly and a value that
/// cannot be used is a problem to log, never a trap:
///
/// - `NOTIFY_SOCKET`: an absolute path, or `@name` for an abstract socket;
///   at most 107 bytes, the kernel's `sun_path` less its NUL.
/// - `WATCHDOG_USEC`: decimal microseconds, 1 to 2^64 − 2 (systemd's own
///   range); the host pings every half of it, at least every hour and at most
///   every 10 ms, so no value can make it spin or overflow a deadline.
/// - `WATCHDOG_PID`: when set, the watchdog is this process's only if it
///   names this pid.
public struct SystemdEnvironment: Sendable, Equatable {
    /// A notification socket address, ready for `sendto`.
    public enum Address: Sendable, Equatable {
        case path(String)
        case abstract(String)
    }

    public var address: Address?
    /// How often to send `WATCHDOG=1`; nil: no watchdog.
    public var watchdogPeriod: Duration?
    /// What was wrong with the variables, one sentence each, naming the variable.
    public var problems: [String] = []

    /// The kernel's `sun_path` is 108 bytes; a path needs its NUL, an
    /// abstract name its leading NUL.
    static let maxAddressBytes = 107
    static let minPeriod: Duration = .milliseconds(10)
    static let maxPeriod: Duration = .seconds(3600)

    public init(notifySocket: String?, watchdogUsec: String?, watchdogPid: String?, pid: pid_t) {
        if let socket = notifySocket, !socket.isEmpty {
            address = Self.parseAddress(socket, problems: &problems)
        }
        guard let usecText = watchdogUsec, !usecText.isEmpty else { return }
        if let pidText = watchdogPid, !pidText.isEmpty {
            guard let named = Self.parseDecimal(pidText), named > 0, named <= UInt64(Int32.max) else {
                problems.append("WATCHDOG_PID='\(Self.shown(pidText))' is not a process id; the systemd watchdog is not served")
                return
            }
            // Another process's watchdog (we were started by the main process): not ours to serve.
            guard pid_t(named) == pid else { return }
        }
        guard let usec = Self.parseDecimal(usecText), usec > 0, usec < UInt64.max else {
            problems.append("WATCHDOG_USEC='\(Self.shown(usecText))' is not a number of microseconds from 1 to \(UInt64.max - 1); the systemd watchdog is not served")
            return
        }
        guard address != nil else {
            problems.append("WATCHDOG_USEC is set but NOTIFY_SOCKET is not usable; the systemd watchdog is not served")
            return
        }
        // Half the timeout, held between 10 ms and an hour (pinging more
        // often than asked is harmless; never is not).
        let halfMicroseconds = usec / 2
        let period: Duration = halfMicroseconds >= UInt64(3_600_000_000) ? Self.maxPeriod
            : .microseconds(Int64(halfMicroseconds))
        if period < Self.minPeriod {
            problems.append("WATCHDOG_USEC=\(usec) is under 20 ms; pinging every 10 ms, which may come too late for it")
        }
        watchdogPeriod = max(Self.minPeriod, period)
    }

    /// Reads the variables, then removes them from the environment, so the
    /// processes the host starts (runners, probes, rule programs) neither
    /// notify systemd as if they were the service nor feed its watchdog.
    static func take() -> SystemdEnvironment {
        let names = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"]
        let values = names.map { name in getenv(name).map { String(cString: $0) } }
        for name in names { unsetenv(name) }
        return SystemdEnvironment(notifySocket: values[0], watchdogUsec: values[1], watchdogPid: values[2], pid: getpid())
    }

    static func parseAddress(_ text: String, problems: inout [String]) -> Address? {
        let bytes = text.utf8.count
        guard bytes <= maxAddressBytes else {
            problems.append("NOTIFY_SOCKET is \(bytes) bytes long, over the \(maxAddressBytes) a unix socket address holds; systemd is not notified")
            return nil
        }
        if text.hasPrefix("/") { return .path(text) }
        if text.hasPrefix("@"), bytes > 1 { return .abstract(String(text.dropFirst())) }
        problems.append("NOTIFY_SOCKET='\(shown(text))' is neither an absolute path nor @name (an abstract socket); systemd is not notified")
        return nil
    }

    /// Digits only (no sign, space or radix prefix); nil past UInt64.
    static func parseDecimal(_ text: String) -> UInt64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        return UInt64(text)
    }

    /// At most 64 characters of an outside value, for a log line (the log
    /// handler escapes control characters).
    static func shown(_ text: String) -> String {
        text.count <= 64 ? text : String(text.prefix(64)) + "…"
    }
}

/// systemd's notification protocol (sd_notify(3)) spoken directly: one
/// datagram per state change to `$NOTIFY_SOCKET`, no libsystemd.
///
/// `vigil run` calls `adoptEnvironment(logger:)` first thing, which reads and
/// unsets the variables and, when `WATCHDOG_USEC` asks for it, starts a task
/// that sends `WATCHDOG=1` every half of it for the rest of the process's
/// life (a task on the cooperative pool: if that pool hangs, the pings stop
/// and systemd restarts the host). Without `WATCHDOG_USEC` nothing is
/// started and nothing wakes up. Then:
///
/// - `ready(status:)`: `READY=1`, once the monitors were launched, and again
///   after a reload;
/// - `reloading()`: `RELOADING=1` with `MONOTONIC_USEC`, when a reload begins;
/// - `stopping()`: `STOPPING=1`, when shutdown begins.
///
/// Without `NOTIFY_SOCKET` every call does nothing. Sends never block: a
/// receiver that does not read loses the message (counted in `failures`),
/// it does not stall the host. Every method is safe from any thread.
public final class SystemdNotifier: Sendable {
    public static let shared = SystemdNotifier(environment: .take())

    public let environment: SystemdEnvironment
    private struct State {
        var fd: Int32 = -1
        var logger: Logger?
        var watchdog: Task<Void, Never>?
        var failures = 0
        var lastErrno: Int32 = 0
    }
    private let state = Mutex(State())

    public init(environment: SystemdEnvironment) {
        self.environment = environment
    }

    /// Whether there is a socket to notify.
    public var isActive: Bool { environment.address != nil }

    /// Logs what was wrong with the environment and starts the watchdog
    /// pings if asked for. Only the first call does anything.
    public func adoptEnvironment(logger: Logger) {
        let first = state.withLock { state -> Bool in
            guard state.logger == nil else { return false }
            state.logger = logger
            return true
        }
        guard first else { return }
        for problem in environment.problems { logger.warning("\(problem)") }
        guard let period = environment.watchdogPeriod else { return }
        let (seconds, attoseconds) = period.components
        logger.info("systemd watchdog: WATCHDOG=1 every \(Units.formatDuration(seconds * 1_000_000_000 + attoseconds / 1_000_000_000))")
        let task = Task.detached { [self] in
            while !Task.isCancelled {
                watchdogPing()
                try? await Task.sleep(for: period)
            }
        }
        state.withLock { $0.watchdog = task }
    }

    /// `READY=1`: the host runs (first start, or a reload finished).
    public func ready(status: String? = nil) {
        notify("READY=1" + (status.map { "\nSTATUS=\(Self.oneLine($0))" } ?? ""))
    }

    /// `RELOADING=1` and the monotonic time (`Type=notify-reload` needs it):
    /// a reload has begun; send `ready()` when it is done.
    public func reloading() {
        notify("RELOADING=1\nMONOTONIC_USEC=\(max(0, monotonicNanoseconds()) / 1000)")
    }

    /// `STOPPING=1`: shutdown has begun.
    public func stopping() {
        notify("STOPPING=1\nSTATUS=stopping")
    }

    /// `WATCHDOG=1`: the host is alive.
    public func watchdogPing() {
        notify("WATCHDOG=1")
    }

    /// `STATUS=…`: free text systemctl status shows.
    public func status(_ text: String) {
        notify("STATUS=\(Self.oneLine(text))")
    }

    /// Messages that could not be sent (no receiver, a full queue).
    public var failures: Int { state.withLock { $0.failures } }

    /// Stops the watchdog pings (tests; the host's end stops them too).
    public func stopWatchdog() {
        state.withLock { $0.watchdog }?.cancel()
    }

    /// A variable's value may not hold a line break: it would start another variable.
    static func oneLine(_ text: String) -> String {
        String(text.map { $0.isNewline ? " " : $0 })
    }

    /// One datagram, never blocking. The first failure of each kind (errno)
    /// is logged; repeats are only counted, so a dead receiver cannot fill
    /// the log at the watchdog's rate.
    func notify(_ message: String) {
        guard let address = environment.address else { return }
        let failure: (Int32, Logger?)? = state.withLock { state in
            if state.fd < 0 {
                state.fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
                if state.fd < 0 { return record(errno, in: &state) }
            }
            let sent = Self.send(message, to: address, fd: state.fd)
            return sent == 0 ? nil : record(sent, in: &state)
        }
        if let (code, logger) = failure, let logger {
            logger.warning("systemd notification '\(message.prefix { $0 != "\n" })' to NOTIFY_SOCKET=\(Self.shown(address)) failed: \(String(cString: strerror(code))); repeats are not logged")
        }
    }

    /// Counts a failure; returns the errno and logger when it is a new kind.
    private func record(_ code: Int32, in state: inout State) -> (Int32, Logger?)? {
        state.failures += 1
        guard code != state.lastErrno else { return nil }
        state.lastErrno = code
        return (code, state.logger)
    }

    static func shown(_ address: SystemdEnvironment.Address) -> String {
        switch address {
        case .path(let path): path
        case .abstract(let name): "@" + name
        }
    }

    /// 0, or the errno of a failed `sendto`.
    static func send(_ message: String, to address: SystemdEnvironment.Address, fd: Int32) -> Int32 {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let (name, offset): (String, Int) = switch address {
        case .path(let path): (path, 0)
        case .abstract(let name): (name, 1)  // sun_path[0] = 0: the abstract namespace
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        var length = 0
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            raw.initializeMemory(as: UInt8.self, repeating: 0)
            let bytes = Array(name.utf8.prefix(raw.count - 1 - offset))
            for (i, byte) in bytes.enumerated() { raw[offset + i] = byte }
            length = offset + bytes.count
        }
        // A path is sent with its NUL; an abstract name is exactly its bytes.
        let addrLength = socklen_t(pathOffset + length + (offset == 0 ? 1 : 0))
        var bytes = Array(message.utf8)
        while true {
            let n = withUnsafePointer(to: &addr) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                    sendto(fd, &bytes, bytes.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT), sa, addrLength)
                }
            }
            if n >= 0 { return 0 }
            if errno == EINTR { continue }
            return errno
        }
    }
}
