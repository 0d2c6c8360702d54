import Glibc
import Synchronization

/// Polls handed to a worker, for a polled monitor whose work takes longer
/// than a poll should (a check run, a scrape over the network): `poll`
/// calls `ask()` and returns at once, and the monitor's worker
/// (`context.spawn`) takes the request and does the work on its own thread.
/// Polls that come while one is waiting or being worked on are one request,
/// so a slow source delays only its own next run, and the host's poll
/// never waits for it.
public final class PollRequests: @unchecked Sendable {  // `asked` is a Mutex; the pipe is made once in init
    /// When the earliest request not yet taken came (monotonic ns).
    private let asked = Mutex<Int64?>(nil)
    private let pipe: (read: Int32, write: Int32)

    public init() throws(MonitorError) {
        var fds: [Int32] = [-1, -1]
        guard Glibc.pipe(&fds) == 0 else { throw .temporary("cannot make a pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        pipe = (fds[0], fds[1])
    }

    deinit {
        close(pipe.read)
        close(pipe.write)
    }

    /// From `poll`: a request, joined to one already waiting.
    public func ask() {
        let now = Worker.monotonicNow()
        asked.withLock { if $0 == nil { $0 = now } }
        var one: UInt8 = 1
        _ = write(pipe.write, &one, 1)
    }

    /// When the waiting request came (monotonic ns), without taking it; nil: none.
    public var waiting: Int64? { asked.withLock { $0 } }

    /// Takes the waiting request: when it came, or nil when there was none.
    @discardableResult
    public func take() -> Int64? { asked.withLock { let time = $0; $0 = nil; return time } }

    /// Forgets a waiting request (the instance stops).
    public func clear() { asked.withLock { $0 = nil } }

    /// From the worker: waits for a request made since the last wait (a
    /// request still waiting does not end it: the worker may be holding it
    /// back until a time of its own), or until `deadline` (monotonic ns;
    /// nil: none), or the worker's cancellation. False when cancelled.
    public func wait(_ token: Worker.Token, until deadline: Int64? = nil) -> Bool {
        let timeout = deadline.map { Duration.nanoseconds(max(0, $0 - Worker.monotonicNow())) }
        if token.waitFor(fd: pipe.read, events: Int16(POLLIN), timeout: timeout) == .cancelled { return false }
        var drain = [UInt8](repeating: 0, count: 64)
        while read(pipe.read, &drain, drain.count) > 0 {}
        return !token.isCancelled
    }
}
