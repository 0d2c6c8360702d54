import VigilChildProcess
import Foundation
import Logging
import Synchronization
import Testing
import VigilABI
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// A datagram unix socket bound by the test, standing in for systemd's
/// notification socket: collects each datagram with the time it came.
final class NotifyReceiver: @unchecked Sendable {
    let fd: Int32
    /// What `NOTIFY_SOCKET` should say: the path, or `@name`.
    let address: String
    private let received = Mutex<[(at: Date, text: String)]>([])
    private let stopped = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    /// `abstract`: bind `@name` in the abstract namespace instead of a path in `dir`.
    /// `read: false`: never read, with the smallest receive buffer (a receiver that stalls).
    init(dir: String, abstract: Bool = false, read: Bool = true) throws {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket: \(String(cString: strerror(errno)))") }
        let name = abstract ? "vigil-test-notify-\(getpid())-\(UUID().uuidString.prefix(8))" : dir + "/notify.sock"
        address = abstract ? "@" + name : name
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let offset = abstract ? 1 : 0
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, byte) in name.utf8.enumerated() { raw[offset + i] = byte }
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + offset + name.utf8.count + (abstract ? 0 : 1))
        let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0 else { throw TestFailure("bind \(address): \(String(cString: strerror(errno)))") }
        if !read {
            var size: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            done.signal()
            return
        }
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !stopped.load(ordering: .acquiring) {
                var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&p, 1, 50) > 0 else { continue }
                let n = recv(fd, &buffer, buffer.count, 0)
                if n > 0 {
                    let text = String(decoding: buffer[0..<n], as: UTF8.self)
                    received.withLock { $0.append((Date(), text)) }
                }
            }
            done.signal()
        }
        thread.start()
    }

    var messages: [String] { received.withLock { $0.map(\.text) } }
    var timed: [(at: Date, text: String)] { received.withLock { $0 } }

    func close() {
        stopped.store(true, ordering: .releasing)
        done.wait()
        Glibc.close(fd)
        if !address.hasPrefix("@") { unlink(address) }
    }
}

/// sd_notify without libsystemd, through the real binary: READY=1 once the
/// monitors run, STOPPING=1 at SIGTERM, WATCHDOG=1 at half WATCHDOG_USEC;
/// hostile values of the variables; and the journal's priority prefixes.
@Suite(.serialized, .startsProcesses, .offThePool) struct SystemdNotifyRunTests {
    static func manifest(_ dir: String, _ monitors: String = "  beat: { plugin: heartbeat, interval: 100ms }") throws -> String {
        let path = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
        \(monitors)
        sinks:
          out: { type: null }
        """, to: path)
        return path
    }

    static func start(_ manifest: String, _ environment: [String: String], for duration: String = "20s") throws -> RunningProcess {
        try TestEnv.start(TestEnv.vigil, ["run", manifest, "--control", "none", "--for", duration], environment: environment)
    }

    @Test func readyAfterStartWatchdogPingsAndStoppingAtSigterm() throws {
        let dir = try TestEnv.tempDir()
        let receiver = try NotifyReceiver(dir: dir)
        defer { receiver.close() }
        // A monitor in a runner process: the runner must not inherit the variables.
        let process = try Self.start(try Self.manifest(dir, """
          beat: { plugin: heartbeat, interval: 100ms }
          isolated: { plugin: heartbeat, interval: 100ms, isolation: process }
        """), ["NOTIFY_SOCKET": receiver.address, "WATCHDOG_USEC": "100000"])
        #expect(SinkRunTests.waitUntil(15) { receiver.messages.contains { $0.hasPrefix("READY=1") } })
        let ready = receiver.messages.first { $0.hasPrefix("READY=1") }
        #expect(ready == "READY=1\nSTATUS=2 monitors, 1 sink")

        // Runners are children of the host: NOTIFY_SOCKET and WATCHDOG_* are not in their environment.
        let children = (try? String(contentsOfFile: "/proc/\(process.pid)/task/\(process.pid)/children", encoding: .utf8)) ?? ""
        var runnerEnvironments: [String] = []
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.pid)/task")) ?? [] {
            let list = (try? String(contentsOfFile: "/proc/\(process.pid)/task/\(task)/children", encoding: .utf8)) ?? ""
            for child in (list + " " + children).split(separator: " ") {
                if let data = FileManager.default.contents(atPath: "/proc/\(child)/environ") {
                    runnerEnvironments.append(String(decoding: data, as: UTF8.self))
                }
            }
        }
        #expect(!runnerEnvironments.isEmpty, "no runner process found under \(process.pid)")
        for environment in runnerEnvironments {
            #expect(!environment.contains("NOTIFY_SOCKET="))
            #expect(!environment.contains("WATCHDOG_USEC="))
        }

        // Pings every 50 ms: a second brings about 20 (a loaded machine fewer).
        let before = receiver.messages.filter { $0 == "WATCHDOG=1" }.count
        Thread.sleep(forTimeInterval: 1)
        let pings = receiver.messages.filter { $0 == "WATCHDOG=1" }.count - before
        #expect(pings >= 5 && pings <= 40, "\(pings) pings in one second at WATCHDOG_USEC=100000")
        #expect(!receiver.messages.contains { $0.hasPrefix("STOPPING=1") })

        process.signal(SIGTERM)
        let output = process.wait(timeout: 30)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("systemd watchdog: WATCHDOG=1 every 50ms"), "\(output.stderr)")
        #expect(SinkRunTests.waitUntil(2) { receiver.messages.contains("STOPPING=1\nSTATUS=stopping") })
        let messages = receiver.messages.filter { $0 != "WATCHDOG=1" }
        #expect(messages == ["READY=1\nSTATUS=2 monitors, 1 sink", "STOPPING=1\nSTATUS=stopping"], "\(messages)")
    }

    /// SIGHUP: RELOADING=1 (with MONOTONIC_USEC) when the reload begins,
    /// READY=1 when it was applied, and again around one that is refused.
    @Test func aReloadIsAnnouncedAndReadyAgain() throws {
        let dir = try TestEnv.tempDir()
        let receiver = try NotifyReceiver(dir: dir)
        defer { receiver.close() }
        let manifest = try Self.manifest(dir)
        let process = try Self.start(manifest, ["NOTIFY_SOCKET": receiver.address])
        #expect(SinkRunTests.waitUntil(15) { receiver.messages.contains { $0.hasPrefix("READY=1") } })
        _ = try Self.manifest(dir, "  beat: { plugin: heartbeat, interval: 100ms }\n  two: { plugin: heartbeat, interval: 100ms }")
        process.signal(SIGHUP)
        #expect(SinkRunTests.waitUntil(10) { receiver.messages.count >= 3 })
        try TestEnv.write("monitors: [", to: manifest)
        process.signal(SIGHUP)
        #expect(SinkRunTests.waitUntil(10) { receiver.messages.count >= 5 })
        process.signal(SIGTERM)
        #expect(process.wait(timeout: 30).status == 0)
        #expect(SinkRunTests.waitUntil(2) { receiver.messages.count == 6 })
        let messages = receiver.messages
        #expect(messages.count == 6, "\(messages)")
        guard messages.count == 6 else { return }
        #expect(messages[1].hasPrefix("RELOADING=1\nMONOTONIC_USEC="), "\(messages)")
        #expect(messages[2] == "READY=1\nSTATUS=2 monitors, 1 sink")
        #expect(messages[3].hasPrefix("RELOADING=1\nMONOTONIC_USEC="))
        #expect(messages[4] == "READY=1\nSTATUS=2 monitors, 1 sink")  // refused: the two run on
        #expect(messages[5] == "STOPPING=1\nSTATUS=stopping")
    }

    @Test func anAbstractSocketIsNotified() throws {
        let dir = try TestEnv.tempDir()
        let receiver = try NotifyReceiver(dir: dir, abstract: true)
        defer { receiver.close() }
        let output = try Self.start(try Self.manifest(dir), ["NOTIFY_SOCKET": receiver.address], for: "1s").wait(timeout: 30)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(SinkRunTests.waitUntil(2) { receiver.messages.count == 2 })
        #expect(receiver.messages == ["READY=1\nSTATUS=1 monitor, 1 sink", "STOPPING=1\nSTATUS=stopping"])
    }

    /// Values no systemd would set: each is reported naming the variable, and
    /// the host runs and stops as usual, with no watchdog.
    @Test(arguments: ["0", "-1", "12abc", " 100", "+100", "1e6", "0x10", "18446744073709551615",
                      "99999999999999999999999999", String(repeating: "9", count: 100)])
    func hostileWatchdogUsecIsRefused(_ value: String) throws {
        let dir = try TestEnv.tempDir()
        let receiver = try NotifyReceiver(dir: dir)
        defer { receiver.close() }
        let output = try Self.start(try Self.manifest(dir), ["NOTIFY_SOCKET": receiver.address, "WATCHDOG_USEC": value],
                                    for: "1s").wait(timeout: 30)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("WATCHDOG_USEC='") && output.stderr.contains("the systemd watchdog is not served"),
                "\(output.stderr)")
        #expect(SinkRunTests.waitUntil(2) { receiver.messages.count == 2 })
        #expect(receiver.messages == ["READY=1\nSTATUS=1 monitor, 1 sink", "STOPPING=1\nSTATUS=stopping"])
    }

    /// The largest value systemd allows pings hourly (no overflow, no trap);
    /// 1 µs pings every 10 ms, not in a busy loop.
    @Test func extremeWatchdogUsecIsHeldToItsBounds() throws {
        let dir = try TestEnv.tempDir()
        let huge = try NotifyReceiver(dir: dir)
        defer { huge.close() }
        let hugeOutput = try Self.start(try Self.manifest(dir), ["NOTIFY_SOCKET": huge.address, "WATCHDOG_USEC": "18446744073709551614"],
                                        for: "1s").wait(timeout: 30)
        #expect(hugeOutput.status == 0, "\(hugeOutput.stderr)")
        #expect(hugeOutput.stderr.contains("WATCHDOG=1 every 1h"), "\(hugeOutput.stderr)")
        #expect(SinkRunTests.waitUntil(2) { huge.messages.contains { $0.hasPrefix("STOPPING=1") } })
        #expect(huge.messages.filter { $0 == "WATCHDOG=1" }.count == 1)  // the first, at once

        let dir2 = try TestEnv.tempDir()
        let tiny = try NotifyReceiver(dir: dir2)
        defer { tiny.close() }
        let tinyOutput = try Self.start(try Self.manifest(dir2), ["NOTIFY_SOCKET": tiny.address, "WATCHDOG_USEC": "1"],
                                        for: "2s").wait(timeout: 30)
        #expect(tinyOutput.status == 0, "\(tinyOutput.stderr)")
        #expect(tinyOutput.stderr.contains("WATCHDOG_USEC=1 is under 20 ms; pinging every 10 ms"), "\(tinyOutput.stderr)")
        let pings = tiny.timed.filter { $0.text == "WATCHDOG=1" }
        // At most one per 10 ms over the run (2 s and the start and stop around it).
        #expect(pings.count >= 20, "\(pings.count)")
        if let first = pings.first, let last = pings.last {
            let span = last.at.timeIntervalSince(first.at)
            #expect(Double(pings.count - 1) <= span / 0.010 + 5, "\(pings.count) pings in \(span) s")
        }
    }

    /// A receiver that never reads (its queue full at once) costs nothing:
    /// sends do not block, the failure is logged once, shutdown is prompt.
    @Test func aReceiverThatNeverReadsDoesNotStallTheHost() throws {
        let dir = try TestEnv.tempDir()
        let receiver = try NotifyReceiver(dir: dir, read: false)
        defer { receiver.close() }
        let process = try Self.start(try Self.manifest(dir), ["NOTIFY_SOCKET": receiver.address, "WATCHDOG_USEC": "20000"])
        Thread.sleep(forTimeInterval: 2)
        let stopAsked = Date()
        process.signal(SIGTERM)
        let output = process.wait(timeout: 30)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(Date().timeIntervalSince(stopAsked) < 10)
        let warnings = output.stderr.split(separator: "\n").filter { $0.contains("systemd notification") }
        #expect(warnings.count == 1, "\(warnings)")
        #expect(warnings.first?.contains("Resource temporarily unavailable; repeats are not logged") == true, "\(warnings)")
    }

    @Test(arguments: [("relative/notify.sock", "is neither an absolute path nor @name"),
                      ("@", "is neither an absolute path nor @name"),
                      ("/" + String(repeating: "n", count: 200), "is 201 bytes long, over the 107")])
    func unusableNotifySocketIsReported(_ value: String, _ says: String) throws {
        let dir = try TestEnv.tempDir()
        let output = try Self.start(try Self.manifest(dir), ["NOTIFY_SOCKET": value, "WATCHDOG_USEC": "100000"], for: "1s")
            .wait(timeout: 30)
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stderr.contains("NOTIFY_SOCKET") && output.stderr.contains(says), "\(output.stderr)")
        #expect(output.stderr.contains("WATCHDOG_USEC is set but NOTIFY_SOCKET is not usable"), "\(output.stderr)")
    }

    @Test func aSocketNobodyHoldsIsLoggedOnce() throws {
        let dir = try TestEnv.tempDir()
        let output = try Self.start(try Self.manifest(dir), ["NOTIFY_SOCKET": dir + "/nobody.sock", "WATCHDOG_USEC": "20000"],
                                    for: "1s").wait(timeout: 30)
        #expect(output.status == 0, "\(output.stderr)")
        let warnings = output.stderr.split(separator: "\n").filter { $0.contains("systemd notification") }
        #expect(warnings.count == 1, "\(warnings)")
        #expect(warnings.first?.contains("No such file or directory") == true, "\(warnings)")
    }

    /// stderr is a file whose device and inode JOURNAL_STREAM names: every
    /// line starts with `<N>`, N the level's syslog priority, and has no time.
    @Test func journalStreamLinesCarryPrioritiesAndNoTime() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.manifest(dir, "  beat: { plugin: heartbeat, interval: 100ms }\n  gone: { plugin: no_such_plugin }")
        let matching = try runWithStderrFile(dir + "/journal.log", manifest: manifest) { "\($0.st_dev):\($0.st_ino)" }
        let lines = matching.split(separator: "\n").map(String.init)
        #expect(lines.count >= 4, "\(matching)")
        let priorities = ["<7>debug", "<6>info", "<5>notice", "<4>warning", "<3>error", "<2>critical"]
        // `<N>level` first: no time before or after the priority.
        for line in lines {
            #expect(priorities.contains { line.hasPrefix($0 + " ") }, "\(line)")
        }
        #expect(lines.contains { $0.hasPrefix("<3>error [vigil] ") }, "\(matching)")   // the unknown plugin
        #expect(lines.contains { $0.hasPrefix("<5>notice [vigil] started 1 monitor and 1 sink") }, "\(matching)")
        #expect(lines.contains { $0.hasPrefix("<6>info [vigil] stopped;") }, "\(matching)")

        // Another inode (stderr redirected elsewhere), or a malformed value: plain lines with their time.
        let others: [(stat) -> String] = [
            { st in "\(st.st_dev):\(UInt64(st.st_ino) + 1)" }, { st in "\(st.st_dev)" }, { _ in ":" }, { _ in "x:y" },
            { st in "\(st.st_dev):\(st.st_ino):1" }, { st in "-\(st.st_dev):\(st.st_ino)" },
            { st in "99999999999999999999:\(st.st_ino)" },
        ]
        for (i, make) in others.enumerated() {
            let plain = try runWithStderrFile(dir + "/plain\(i).log", manifest: manifest, journalStream: make)
            let first = plain.split(separator: "\n").first.map(String.init) ?? ""
            #expect(first.hasPrefix("20") && first.contains("T") && !first.hasPrefix("<"), "\(first)")
        }
    }

    /// Runs `vigil run manifest --for 1s` with stderr on a new file at `path`
    /// and JOURNAL_STREAM made from the file's stat; returns what it wrote.
    private func runWithStderrFile(_ path: String, manifest: String, journalStream: (stat) -> String) throws -> String {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw TestFailure("open \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw TestFailure("fstat \(path)") }
        var environment = ProcessInfo.processInfo.environment
        environment["JOURNAL_STREAM"] = journalStream(st)
        let spawn = Spawn(program: TestEnv.vigil, arguments: [TestEnv.vigil, "run", manifest, "--control", "none", "--for", "1s"],
                          environment: environment, descriptors: [0: .null, 1: .null, 2: .parent(fd)])
        let pid = try spawn.start()
        var status: Int32 = 0
        let deadline = Date().addingTimeInterval(30)
        while waitpid(pid, &status, WNOHANG) == 0 {
            if Date() > deadline { kill(pid, SIGKILL) }
            usleep(20_000)
        }
        return (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }
}

/// The parts, without a process: parsing of the variables, the datagrams,
/// the journal check and line format.
@Suite(.startsProcesses, .offThePool) struct SystemdNotifyUnitTests {
    @Test func parsesWhatSystemdSets() {
        let env = SystemdEnvironment(notifySocket: "/run/systemd/notify", watchdogUsec: "30000000", watchdogPid: nil, pid: 42)
        #expect(env.address == .path("/run/systemd/notify"))
        #expect(env.watchdogPeriod == .seconds(15))
        #expect(env.problems.isEmpty)
        let abstract = SystemdEnvironment(notifySocket: "@/org/freedesktop/systemd1/notify/1", watchdogUsec: nil, watchdogPid: nil, pid: 42)
        #expect(abstract.address == .abstract("/org/freedesktop/systemd1/notify/1"))
        #expect(abstract.watchdogPeriod == nil)
        let none = SystemdEnvironment(notifySocket: nil, watchdogUsec: nil, watchdogPid: nil, pid: 42)
        #expect(none.address == nil && none.watchdogPeriod == nil && none.problems.isEmpty)
    }

    @Test func watchdogPidNamesTheProcessServed() {
        let ours = SystemdEnvironment(notifySocket: "/n", watchdogUsec: "1000000", watchdogPid: "42", pid: 42)
        #expect(ours.watchdogPeriod == .milliseconds(500))
        let theirs = SystemdEnvironment(notifySocket: "/n", watchdogUsec: "1000000", watchdogPid: "43", pid: 42)
        #expect(theirs.watchdogPeriod == nil && theirs.problems.isEmpty)
        for bad in ["0", "-42", "42x", "4294967296", "99999999999999999999999"] {
            let env = SystemdEnvironment(notifySocket: "/n", watchdogUsec: "1000000", watchdogPid: bad, pid: 42)
            #expect(env.watchdogPeriod == nil)
            #expect(env.problems.count == 1 && env.problems[0].hasPrefix("WATCHDOG_PID='"), "\(env.problems)")
        }
    }

    @Test func periodsAreHalfTheTimeoutWithinBounds() {
        func period(_ usec: String) -> Duration? {
            SystemdEnvironment(notifySocket: "/n", watchdogUsec: usec, watchdogPid: nil, pid: 1).watchdogPeriod
        }
        #expect(period("3") == .milliseconds(10))
        #expect(period("20000") == .milliseconds(10))
        #expect(period("20002") == .microseconds(10001))
        #expect(period("7200000000") == .seconds(3600))
        #expect(period("7200000002") == .seconds(3600))
        #expect(period("18446744073709551614") == .seconds(3600))
        #expect(period("18446744073709551615") == nil)
        #expect(period("") == nil)
    }

    @Test func sendsEachMessageAsOneDatagram() throws {
        let dir = try TestEnv.tempDir()
        for abstract in [false, true] {
            let receiver = try NotifyReceiver(dir: dir, abstract: abstract)
            defer { receiver.close() }
            let notifier = SystemdNotifier(environment: SystemdEnvironment(notifySocket: receiver.address, watchdogUsec: nil,
                                                                           watchdogPid: nil, pid: getpid()))
            let before = monotonicNanoseconds() / 1000
            notifier.reloading()
            notifier.ready(status: "two\nlines")
            notifier.status("a\u{2028}b")
            notifier.watchdogPing()
            notifier.stopping()
            let after = monotonicNanoseconds() / 1000
            #expect(SinkRunTests.waitUntil(5) { receiver.messages.count == 5 })
            let messages = receiver.messages
            #expect(messages.count == 5)
            guard messages.count == 5 else { continue }
            let reloading = messages[0].split(separator: "\n")
            #expect(reloading.first == "RELOADING=1")
            let usec = reloading.last.flatMap { $0.hasPrefix("MONOTONIC_USEC=") ? Int64($0.dropFirst(15)) : nil }
            #expect(usec.map { $0 >= before && $0 <= after } == true, "\(messages[0]) not within \(before)…\(after)")
            #expect(messages[1] == "READY=1\nSTATUS=two lines")
            #expect(messages[2] == "STATUS=a b")
            #expect(Array(messages[3...]) == ["WATCHDOG=1", "STOPPING=1\nSTATUS=stopping"])
            #expect(notifier.failures == 0)
        }
    }

    @Test func withoutNotifySocketNothingIsSentAndNothingStarts() {
        let notifier = SystemdNotifier(environment: SystemdEnvironment(notifySocket: nil, watchdogUsec: "100000",
                                                                       watchdogPid: nil, pid: getpid()))
        #expect(!notifier.isActive)
        #expect(notifier.environment.watchdogPeriod == nil)
        notifier.adoptEnvironment(logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        notifier.ready()
        notifier.stopping()
        #expect(notifier.failures == 0)
    }

    @Test func aFullReceiverCountsFailuresWithoutBlocking() throws {
        let dir = try TestEnv.tempDir()
        let receiver = try NotifyReceiver(dir: dir, read: false)
        defer { receiver.close() }
        let notifier = SystemdNotifier(environment: SystemdEnvironment(notifySocket: receiver.address, watchdogUsec: nil,
                                                                       watchdogPid: nil, pid: getpid()))
        let start = Date()
        for _ in 0..<10_000 { notifier.watchdogPing() }
        #expect(Date().timeIntervalSince(start) < 10)
        #expect(notifier.failures > 0)
    }

    @Test func journalStreamMatchesOnlyTheDescriptorItNames() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        var st = stat()
        #expect(fstat(fds[1], &st) == 0)
        #expect(JournalStream.matches(fd: fds[1], value: "\(st.st_dev):\(st.st_ino)"))
        for value in [nil, "", ":", "\(st.st_dev):", ":\(st.st_ino)", "\(st.st_dev):\(UInt64(st.st_ino) + 1)",
                      "\(st.st_dev):\(st.st_ino):0", " \(st.st_dev):\(st.st_ino)", "+\(st.st_dev):\(st.st_ino)",
                      "18446744073709551616:\(st.st_ino)", String(repeating: "1", count: 10_000) + ":1"] as [String?] {
            #expect(!JournalStream.matches(fd: fds[1], value: value), "\(value ?? "nil")")
        }
        #expect(!JournalStream.matches(fd: -1, value: "\(st.st_dev):\(st.st_ino)"))
    }

    @Test func journalLinesStartWithTheSyslogPriority() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let levels: [(Logger.Level, String)] = [(.trace, "<7>trace"), (.debug, "<7>debug"), (.info, "<6>info"), (.notice, "<5>notice"),
                                                (.warning, "<4>warning"), (.error, "<3>error"), (.critical, "<2>critical")]
        var handler = VigilLogHandler(label: "vigil", fileDescriptor: fds[1], journal: true)
        handler.logLevel = .trace
        let logger = Logger(label: "vigil") { _ in handler }
        for (level, _) in levels { logger.log(level: level, "a\nb") }
        close(fds[1])
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        while case let n = read(fds[0], &buffer, buffer.count), n > 0 { data += buffer[0..<n] }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(lines == levels.map { "\($0.1) [vigil] a\\nb" })
    }
}
