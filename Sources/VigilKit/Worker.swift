import Glibc
import Synchronization

/// A thread of a monitor's own, stopped and joined when the instance stops
/// (the ABI requires that `stop` joins every thread the plugin made, so that
/// nothing is emitted after it returns).
public final class Worker: @unchecked Sendable {  // `thread` is set once, before the worker is shared; joining is behind `joined`
    /// What the body of a worker sees: whether to stop, and ways to wait that
    /// end as soon as it should.
    public final class Token: @unchecked Sendable {  // `cancelled` is atomic; the pipe is made once in init
        private let cancelled = Atomic<Bool>(false)
        /// A descriptor that becomes readable when the worker is cancelled:
        /// poll it beside your own descriptors.
        public var cancelFD: Int32 { pipe.read }
        private let pipe: (read: Int32, write: Int32)

        init() {
            var fds: [Int32] = [-1, -1]
            if Glibc.pipe(&fds) == 0 {
                for fd in fds {
                    _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                    _ = fcntl(fd, F_SETFL, O_NONBLOCK)
                }
            }
            pipe = (fds[0], fds[1])
        }

        deinit {
            if pipe.read >= 0 { close(pipe.read) }
            if pipe.write >= 0 { close(pipe.write) }
        }

        public var isCancelled: Bool { cancelled.load(ordering: .acquiring) }

        func cancel() {
            cancelled.store(true, ordering: .releasing)
            var one: UInt8 = 1
            _ = write(pipe.write, &one, 1)
        }

        /// Sleeps for `duration`, or less if the worker is cancelled. Returns
        /// false when cancelled.
        @discardableResult
        public func wait(_ duration: Duration) -> Bool {
            switch waitFor(fd: -1, events: 0, timeout: duration) {
            case .cancelled: false
            default: !isCancelled
            }
        }

        public enum WaitResult: Sendable, Equatable {
            case ready(revents: Int16)
            case timedOut
            case cancelled
        }

        /// Waits until `fd` has `events` (poll(2) flags), `timeout` passes
        /// (nil: no limit), or the worker is cancelled. A negative `fd` waits
        /// for the timeout or the cancellation only.
        public func waitFor(fd: Int32, events: Int16, timeout: Duration?) -> WaitResult {
            var fds = [pollfd(fd: cancelFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: fd, events: events, revents: 0)]
            let deadline = timeout.map { monotonicNow() + $0.nanoseconds }
            while true {
                if isCancelled { return .cancelled }
                var ms: Int32 = -1
                if let deadline {
                    let left = deadline - monotonicNow()
                    if left <= 0 { return .timedOut }
                    ms = Int32(clamping: (left + 999_999) / 1_000_000)
                }
                let n = poll(&fds, fd >= 0 ? 2 : 1, ms)
                if n < 0 {
                    if errno == EINTR { continue }
                    return .cancelled  // poll itself failed: nothing sensible to wait on
                }
                if fds[0].revents != 0 || isCancelled { return .cancelled }
                if fd >= 0, fds[1].revents != 0 { return .ready(revents: fds[1].revents) }
            }
        }
    }

    public let name: String
    public let token = Token()
    private var thread = pthread_t()
    private let joined = Mutex(false)
    private let body: @Sendable (Token) -> Void

    init(name: String, _ body: @escaping @Sendable (Token) -> Void) {
        self.name = name
        self.body = body
        let context = Unmanaged.passRetained(self).toOpaque()
        let status = pthread_create(&thread, nil, { raw in
            let worker = Unmanaged<Worker>.fromOpaque(raw!).takeRetainedValue()
            worker.body(worker.token)
            return nil
        }, context)
        if status != 0 {
            Unmanaged<Worker>.fromOpaque(context).release()
            joined.withLock { $0 = true }  // nothing to join
        }
    }

    /// Cancels the worker and waits for its body to return. Idempotent; never
    /// call it from the worker's own thread.
    public func stop() {
        token.cancel()
        joined.withLock { done in
            guard !done else { return }
            pthread_join(thread, nil)
            done = true
        }
    }
}

extension Worker {
    /// CLOCK_MONOTONIC in nanoseconds, for deadlines in a worker's loop.
    public static func monotonicNow() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}

func monotonicNow() -> Int64 { Worker.monotonicNow() }
