import Glibc
import LinuxProbes
import VigilKit

/// The system clock and calendar: the wall clock set (stepped), the machine
/// resumed from sleep, the local day changed, the time zone changed.
/// XestiMonitors' TimeMonitor, SystemClockMonitor, CalendarDayMonitor and
/// SystemTimeZoneMonitor on Linux.
///
/// One worker waits with poll(2) on a timerfd on CLOCK_REALTIME, armed as an
/// absolute timer at the next local midnight with TFD_TIMER_CANCEL_ON_SET (it
/// fires at midnight: `day_changed`; its read fails with ECANCELED when the
/// clock is set: `clock_stepped`), on inotify on `<rootfs>/etc` (`localtime`,
/// `timezone`: `timezone_changed`), and wakes every `check_interval` to see
/// whether CLOCK_BOOTTIME − CLOCK_MONOTONIC grew (time spent suspended:
/// `resumed`).
///
/// The local date: with `rootfs: /` it is the process's local time
/// (`localtime_r`, the zone glibc loaded at start or from `TZ`; a running
/// process does not reload a changed /etc/localtime). For any other root the
/// date, and midnight, are computed in UTC: the root's zone is only reported
/// by name, not parsed.
///
/// Untested by the test suite (they need the machine's clock set or the
/// machine suspended): `clock_stepped`, `resumed`, and the arithmetic in
/// `ClockMath`.
final class ClockMonitor: PushMonitor, @unchecked Sendable {  // mutable state is the worker's own
    static let spec = PluginSpec(
        name: "clock", version: "1.0.0",
        summary: "Wall clock steps, resume from sleep, local day and time zone changes, from timerfd and inotify",
        events: [
            EventDecl("snapshot", doc: "On start: the local date, the zone, and the time spent suspended since boot.", fields: [
                FieldDecl("date", .string, doc: "local date, YYYY-MM-DD (UTC unless rootfs is /)"),
                FieldDecl("zone", .string, doc: "zone name from <rootfs>/etc/localtime or <rootfs>/etc/timezone"),
                FieldDecl("suspended", .double, unit: "seconds", doc: "CLOCK_BOOTTIME − CLOCK_MONOTONIC"),
            ], policy: .samples),
            .occurrence("clock_stepped", doc: "The wall clock was set (not slewed).", fields: [
                FieldDecl("delta", .double, unit: "seconds", doc: "how far it moved; negative: backwards"),
            ]),
            .occurrence("resumed", doc: "The machine slept and woke up; seen within `check_interval`.", fields: [
                FieldDecl("slept", .double, unit: "seconds"),
            ]),
            .occurrence("day_changed", doc: "The local calendar date changed (midnight, or a clock step or zone change).",
                        fields: [FieldDecl("date", .string, doc: "the new date, YYYY-MM-DD")]),
            .occurrence("timezone_changed", doc: "The system time zone changed.", fields: [
                FieldDecl("old_zone", .string),
                FieldDecl("new_zone", .string),
            ]),
        ])

    struct Options: DeclaredOptions {
        var rootfs = "/"
        var checkInterval: Duration = .seconds(10)
        static let schema = OptionSchema<Options>(
            .option("rootfs", \.rootfs, doc: "Root whose etc/localtime and etc/timezone name the zone (a fixture tree in tests)."),
            .option("check_interval", \.checkInterval, doc: "How often to look for a suspend (time spent asleep since the last look)."))
    }

    private let context: MonitorContext
    private let options: Options

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard options.rootfs.hasPrefix("/") else {
            throw .invalidOption("rootfs", "\"\(options.rootfs)\" is not an absolute path")
        }
        guard options.checkInterval > .zero else { throw .invalidOption("check_interval", "must be positive") }
        self.options = options
        self.context = context
    }

    private var etc: String { (options.rootfs.hasSuffix("/") ? options.rootfs : options.rootfs + "/") + "etc" }
    private var utc: Bool { options.rootfs != "/" }

    func start() throws(MonitorError) {
        let zone = ClockZone.name(etc: etc)
        let date = ClockMath.date(at: Clocks.realtime(), utc: utc)
        let suspended = Clocks.suspended()
        context.emit("snapshot", ["date": .string(date), "zone": .string(zone), "suspended": .double(Double(suspended) / 1e9)])

        guard let timer = TimerFD.make() else {
            throw .unavailable("timerfd_create(CLOCK_REALTIME): \(String(cString: strerror(errno)))")
        }
        let inotify = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        if inotify >= 0, inotify_add_watch(inotify, etc, ClockZone.mask) < 0 {
            context.log(.warning, "cannot watch \(etc): \(String(cString: strerror(errno))); time zone changes are not seen")
        }
        let state = WorkerState(zone: zone, date: date, suspended: suspended, offset: Clocks.realtime() - Clocks.boottime())
        guard arm(timer) else {
            let reason = String(cString: strerror(errno))
            close(timer)
            if inotify >= 0 { close(inotify) }
            throw .unavailable("timerfd_settime(TFD_TIMER_CANCEL_ON_SET): \(reason)")
        }
        let worker = context.spawn("clock") { [self] token in
            defer {
                close(timer)
                if inotify >= 0 { close(inotify) }
            }
            run(token: token, timer: timer, inotify: inotify, state: state)
        }
        if worker == nil {
            close(timer)
            if inotify >= 0 { close(inotify) }
            throw .temporary("cannot start the worker thread")
        }
    }

    // MARK: the worker

    final class WorkerState: @unchecked Sendable {  // touched by the worker only
        var zone: String
        var date: String
        var suspended: Int64
        /// CLOCK_REALTIME − CLOCK_BOOTTIME: moves only when the clock is set
        /// (or slewed), not when the machine sleeps.
        var offset: Int64
        init(zone: String, date: String, suspended: Int64, offset: Int64) {
            self.zone = zone
            self.date = date
            self.suspended = suspended
            self.offset = offset
        }
    }

    private func run(token: Worker.Token, timer: Int32, inotify: Int32, state: WorkerState) {
        let interval = Int32(clamping: (options.checkInterval.nanoseconds + 999_999) / 1_000_000)
        while !token.isCancelled {
            var fds = [pollfd(fd: token.cancelFD, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: timer, events: Int16(POLLIN), revents: 0),
                       pollfd(fd: inotify, events: Int16(POLLIN), revents: 0)]
            let n = poll(&fds, 3, interval)  // a negative fd (no inotify) is ignored by poll
            if n < 0 {
                if errno == EINTR { continue }
                context.log(.error, "poll: \(String(cString: strerror(errno)))")
                return
            }
            if fds[0].revents != 0 || token.isCancelled { return }

            let resumed = checkSuspend(state)
            if fds[1].revents != 0 { timerReady(timer, state: state, resumed: resumed) }
            if inotify >= 0, fds[2].revents != 0 { zoneMaybeChanged(inotify, token: token, state: state) }
            // Slewing (NTP) moves the offset slowly: follow it so that a step's
            // delta is the step alone.
            state.offset = Clocks.realtime() - Clocks.boottime()
            checkDay(state)
        }
    }

    /// Emits `resumed` when the time spent suspended grew by a second or more.
    private func checkSuspend(_ state: WorkerState) -> Bool {
        let now = Clocks.suspended()
        defer { state.suspended = now }
        guard let slept = ClockMath.slept(before: state.suspended, after: now) else { return false }
        context.emit("resumed", ["slept": .double(slept)])
        return true
    }

    private func timerReady(_ timer: Int32, state: WorkerState, resumed: Bool) {
        var expirations: UInt64 = 0
        let n = read(timer, &expirations, 8)
        if n < 0 && errno == ECANCELED {
            let delta = ClockMath.stepDelta(before: state.offset, after: Clocks.realtime() - Clocks.boottime())
            // A resume also cancels the timer (the kernel sets the clock from
            // the RTC); a step of under a second beside it is that, not a set.
            if !resumed || abs(delta) >= 1 { context.emit("clock_stepped", ["delta": .double(delta)]) }
        }
        // Fired (midnight) or cancelled: either way arm it for the next midnight.
        if !arm(timer) { context.log(.warning, "timerfd_settime: \(String(cString: strerror(errno)))") }
    }

    private func zoneMaybeChanged(_ inotify: Int32, token: Worker.Token, state: WorkerState) {
        // Replacing a link is often two events (unlink, then symlink): read
        // until the directory is quiet for a moment, then compare once.
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var relevant = false
        repeat {
            while true {
                let n = read(inotify, &buffer, buffer.count)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { break }
                relevant = relevant || ClockZone.concernsZone(buffer[..<n])
            }
        } while token.waitFor(fd: inotify, events: Int16(POLLIN), timeout: .milliseconds(100)) != .timedOut
            && !token.isCancelled
        guard relevant, !token.isCancelled else { return }
        let zone = ClockZone.name(etc: etc)
        guard zone != state.zone else { return }
        context.emit("timezone_changed", ["old_zone": .string(state.zone), "new_zone": .string(zone)])
        state.zone = zone
    }

    private func checkDay(_ state: WorkerState) {
        let date = ClockMath.date(at: Clocks.realtime(), utc: utc)
        guard date != state.date else { return }
        state.date = date
        context.emit("day_changed", ["date": .string(date)])
    }

    /// Arms the timer at the next midnight (local, or UTC for another root).
    private func arm(_ timer: Int32) -> Bool {
        TimerFD.arm(timer, at: ClockMath.nextMidnight(after: Clocks.realtime(), utc: utc))
    }
}

// MARK: clocks and arithmetic

enum Clocks {
    static func read(_ clock: clockid_t) -> Int64 {
        var ts = timespec()
        clock_gettime(clock, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
    static func realtime() -> Int64 { read(CLOCK_REALTIME) }
    static func monotonic() -> Int64 { read(CLOCK_MONOTONIC) }
    static func boottime() -> Int64 { read(CLOCK_BOOTTIME) }
    /// CLOCK_BOOTTIME − CLOCK_MONOTONIC: time spent suspended since boot
    /// (monotonic read first, so that the two reads' gap is never negative).
    static func suspended() -> Int64 {
        let monotonic = monotonic()
        return max(0, boottime() - monotonic)
    }
}

/// Pure functions of nanosecond readings, kept apart from the worker.
enum ClockMath {
    /// How far the wall clock was set, in seconds, from CLOCK_REALTIME −
    /// CLOCK_BOOTTIME before and after.
    static func stepDelta(before: Int64, after: Int64) -> Double { Double(after &- before) / 1e9 }

    /// Seconds slept, from CLOCK_BOOTTIME − CLOCK_MONOTONIC before and after;
    /// nil when it grew by less than a second.
    static func slept(before: Int64, after: Int64) -> Double? {
        let grown = after &- before
        return grown >= 1_000_000_000 ? Double(grown) / 1e9 : nil
    }

    /// The calendar date at `realtime` (ns since the epoch): local, or UTC.
    static func date(at realtime: Int64, utc: Bool) -> String {
        var t = time_t(realtime / 1_000_000_000)
        var tm = tm()
        if utc { gmtime_r(&t, &tm) } else { localtime_r(&t, &tm) }
        return format(year: Int(tm.tm_year) + 1900, month: Int(tm.tm_mon) + 1, day: Int(tm.tm_mday))
    }

    static func format(year: Int, month: Int, day: Int) -> String {
        func pad(_ n: Int, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))"
    }

    /// The next midnight after `realtime`, in seconds since the epoch: local
    /// (mktime, so DST days of 23 or 25 hours are right), or UTC.
    static func nextMidnight(after realtime: Int64, utc: Bool) -> Int64 {
        let seconds = realtime / 1_000_000_000
        if utc { return (seconds / 86_400 + 1) * 86_400 }
        var t = time_t(seconds)
        var tm = tm()
        localtime_r(&t, &tm)
        tm.tm_mday += 1
        tm.tm_hour = 0
        tm.tm_min = 0
        tm.tm_sec = 0
        tm.tm_isdst = -1
        let midnight = Int64(mktime(&tm))
        return midnight > seconds ? midnight : (seconds / 86_400 + 1) * 86_400
    }
}

// MARK: the zone

enum ClockZone {
    static let mask = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB)

    /// The zone's name: the target of `etc/localtime` after `zoneinfo/` when
    /// it is a link; else the first line of `etc/timezone`; "UTC" when there
    /// is no `etc/localtime` (what glibc then uses); "unknown" otherwise.
    static func name(etc: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(etc + "/localtime", &buffer, buffer.count - 1)
        if n > 0 {
            let target = String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return zoneName(linkTarget: target)
        }
        if let text = readFile(etc + "/timezone") {
            let line = text.split(separator: "\n").first.map { $0.trimmingSpaces } ?? ""
            if !line.isEmpty { return line }
        }
        return access(etc + "/localtime", F_OK) == 0 ? "unknown" : "UTC"
    }

    /// "/usr/share/zoneinfo/Europe/Paris" → "Europe/Paris" (also under
    /// zoneinfo/posix/ and zoneinfo/right/); a target without zoneinfo as is.
    static func zoneName(linkTarget target: String) -> String {
        var last: Range<String.Index>?
        var start = target.startIndex
        while let r = target[start...].firstRange(of: "zoneinfo/") {
            last = r
            start = r.upperBound
        }
        guard let range = last else { return target }
        var name = String(target[range.upperBound...])
        for prefix in ["posix/", "right/"] where name.hasPrefix(prefix) { name.removeFirst(prefix.count) }
        return name
    }

    /// Whether a read of inotify records names `localtime` or `timezone`
    /// (or overflowed, or the directory itself went).
    static func concernsZone(_ bytes: ArraySlice<UInt8>) -> Bool {
        let header = MemoryLayout<inotify_event>.size
        var offset = bytes.startIndex
        while offset + header <= bytes.endIndex {
            let (mask, length) = bytes.withUnsafeBytes { raw in
                (raw.loadUnaligned(fromByteOffset: offset - bytes.startIndex + 4, as: UInt32.self),
                 Int(raw.loadUnaligned(fromByteOffset: offset - bytes.startIndex + 12, as: UInt32.self)))
            }
            let name = String(decoding: bytes[(offset + header)..<min(bytes.endIndex, offset + header + length)].prefix { $0 != 0 },
                              as: UTF8.self)
            if name == "localtime" || name == "timezone" { return true }
            if mask & UInt32(IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF) != 0 { return true }
            offset += header + length
        }
        return false
    }

    /// A small file's text (at most 64 KiB), through LinuxProbes' reader:
    /// a FIFO at /etc/timezone held the monitor's start forever.
    static func readFile(_ path: String) -> String? {
        (try? FSRoot("/").readBytes(path, atMost: 64 << 10)).map { String(decoding: $0, as: UTF8.self) }
    }
}

extension Substring {
    var trimmingSpaces: String {
        String(drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed().drop { $0 == " " || $0 == "\t" || $0 == "\r" }.reversed())
    }
}

// MARK: timerfd (not in Swift's Glibc module: looked up with dlsym)

enum TimerFD {
    private typealias Create = @convention(c) (Int32, Int32) -> Int32
    private typealias SetTime = @convention(c) (Int32, Int32, UnsafePointer<itimerspec>?, UnsafeMutablePointer<itimerspec>?) -> Int32

    private static let TFD_TIMER_ABSTIME: Int32 = 1
    private static let TFD_TIMER_CANCEL_ON_SET: Int32 = 2

    private static let create: Create? = dlsym(nil, "timerfd_create").map { unsafeBitCast($0, to: Create.self) }
    private static let setTime: SetTime? = dlsym(nil, "timerfd_settime").map { unsafeBitCast($0, to: SetTime.self) }

    /// A non-blocking, close-on-exec timerfd on CLOCK_REALTIME, or nil (errno set).
    static func make() -> Int32? {
        guard let create else {
            errno = ENOSYS
            return nil
        }
        let fd = create(CLOCK_REALTIME, Int32(O_NONBLOCK | O_CLOEXEC))
        return fd >= 0 ? fd : nil
    }

    /// Arms `fd` to fire once at `seconds` since the epoch, cancelled when
    /// the clock is set. Also clears a pending cancellation.
    static func arm(_ fd: Int32, at seconds: Int64) -> Bool {
        guard let setTime else {
            errno = ENOSYS
            return false
        }
        var spec = itimerspec(it_interval: timespec(tv_sec: 0, tv_nsec: 0), it_value: timespec(tv_sec: Int(seconds), tv_nsec: 0))
        return setTime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &spec, nil) == 0
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(ClockMonitor.self, a, r) }
