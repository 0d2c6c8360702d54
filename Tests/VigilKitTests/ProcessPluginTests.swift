import Foundation
import Testing
import VigilKitTesting

/// The `process` plugin, built as libprocess.so: against copies of the procfs
/// fixture in Tests/Fixtures/proc/process (see the README there), and on the
/// real /proc with a child process the test starts and kills.
@Suite(.serialized) struct ProcessPluginTests {
    static let fixture = repoRoot + "/Tests/Fixtures/machines/laptop/proc"

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libprocess.so") }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "process" && d.polled && d.defaultInterval == 5_000_000_000)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["procfs:string:/proc", "name:string:-", "pidfile:string:-", "all:bool:false"])
        #expect(d.events.map(\.kind) == ["started", "exited", "restarted", "not_running", "usage"])
        #expect(d.events[4].fields.map(\.unit) == ["", "percent", "seconds", "bytes", "threads"])
    }

    @Test func theOldestMatchSampledEachPoll() throws {
        let tree = try ProcTree(copying: Self.fixture)
        let p = try host().instance(options: "{ procfs: \(tree.path), name: nginx }", interval: .seconds(10))
        try p.start()
        #expect(p.logs.contains { $0.message.contains("no pidfd") && $0.message.contains("not the real /proc") })
        let started = p.events(kind: "started")
        #expect(started.map { $0.int("pid") } == [412])
        #expect(started.first?.string("command") == "nginx: master process /usr/sbin/nginx -g daemon on;")
        #expect(started.first?.bool("existing") == true)
        let first = try #require(p.events(kind: "usage").first)
        #expect(first.int("pid") == 412 && first.double("cpu") == nil)
        #expect(first.double("cpu_time") == 20 && first.int("rss") == 10_485_760 && first.int("threads") == 1)

        // 150 ticks (1.5 s of CPU) over 10 s: 15 % of a core.
        try tree.setCPU(412, utime: 1600, stime: 550)
        try tree.setRSS(412, kB: 12288)
        try p.advance(by: .seconds(10))
        let second = try #require(p.events(kind: "usage").last)
        #expect(second.double("cpu") == 15 && second.double("cpu_time") == 21.5 && second.int("rss") == 12_582_912)
        // Nothing used: 0 %.
        try p.advance(by: .seconds(10))
        #expect(p.events(kind: "usage").map { $0.double("cpu") } == [nil, 15, 0])
        #expect(p.events.count == 4)

        // The master goes: exited; the worker, already there, is the oldest now
        // (started, not a restart).
        try tree.remove(412)
        try p.advance(by: .seconds(10))
        #expect(p.events(kind: "exited").map { "\($0.int("pid")!):\($0.string("detected")!)" } == ["412:poll"])
        #expect(p.events(kind: "exited").first?.int("exit_code") == nil)
        #expect(p.events(kind: "started").map { $0.int("pid") } == [412, 413])
        #expect(p.events(kind: "started").last?.bool("existing") == false)
        #expect(p.events(kind: "restarted").isEmpty)

        // The worker goes and a new nginx comes up in the same interval: a restart.
        try tree.remove(413)
        try tree.clone(412, from: Self.fixture, as: 2001, start: 90_000)
        try p.advance(by: .seconds(10))
        let restarted = p.events(kind: "restarted")
        #expect(restarted.map { "\($0.int("old_pid")!)->\($0.int("new_pid")!)" } == ["413->2001"])
        #expect(p.events(kind: "started").map { $0.int("pid") } == [412, 413, 2001])
        #expect(p.events(kind: "usage").last?.int("pid") == 2001)

        // Gone for good: exited, then not_running once.
        try tree.remove(2001)
        try p.advance(by: .seconds(20))
        #expect(p.events(kind: "not_running").map { $0.string("reason") } == ["no process named nginx"])
        #expect(p.events(kind: "exited").count == 3)
        try p.stop()
        #expect(p.violations.isEmpty, "\(p.violations)")
    }

    @Test func everyMatchWithAll() throws {
        let tree = try ProcTree(copying: Self.fixture)
        let p = try host().instance(options: "{ procfs: \(tree.path), name: nginx, all: true }", interval: .seconds(10))
        try p.start()
        #expect(p.events(kind: "started").map { $0.int("pid") } == [412, 413])
        #expect(p.events(kind: "usage").map { $0.int("rss") } == [10_485_760, 20_971_520])

        // A zombie has exited: its status is in stat until it is reaped.
        try tree.setState(413, "Z", exitCode: 1 << 8)  // exit(1), as waitpid(2) encodes it
        try tree.clone(413, from: Self.fixture, as: 414, start: 60_000)
        try tree.setCPU(412, utime: 1500, stime: 800)  // 300 ticks in 10 s
        try p.advance(by: .seconds(10))
        let exited = try #require(p.events(kind: "exited").first)
        #expect(exited.int("pid") == 413 && exited.int("exit_code") == 1 && exited.int("signal") == nil)
        #expect(exited.severity == .warning)
        #expect(p.events(kind: "restarted").map { "\($0.int("old_pid")!)->\($0.int("new_pid")!)" } == ["413->414"])
        let usage = p.events(kind: "usage").suffix(2)
        #expect(usage.map { $0.int("pid") } == [412, 414])
        #expect(usage.map { $0.double("cpu") } == [30, nil])

        // Killed by SIGTERM.
        try tree.setState(412, "Z", exitCode: 15)
        try p.advance(by: .seconds(10))
        #expect(p.events(kind: "exited").last.map { "\($0.int("pid")!):\($0.int("signal")!)" } == "412:15")
        #expect(p.events(kind: "not_running").isEmpty)
        try p.stop()
        #expect(p.violations.isEmpty, "\(p.violations)")
    }

    @Test func aLongNameByItsCommandLineAndAPidfile() throws {
        let tree = try ProcTree(copying: Self.fixture)
        let byName = try host().instance(options: "{ procfs: \(tree.path), name: very-long-daemon-name }")
        try byName.start()
        #expect(byName.events(kind: "started").map { $0.int("pid") } == [777])
        #expect(byName.events(kind: "started").first?.string("command") == "/usr/local/bin/very-long-daemon-name --flag")
        #expect(byName.events(kind: "usage").first?.int("rss") == 1000 * Int64(sysconf(Int32(_SC_PAGESIZE))))
        try byName.stop()

        let pidfile = tree.path + "/app.pid"
        try "777\n".write(toFile: pidfile, atomically: true, encoding: .utf8)
        let p = try host().instance(options: "{ procfs: \(tree.path), pidfile: \(pidfile) }", interval: .seconds(10))
        try p.start()
        #expect(p.events(kind: "started").map { $0.int("pid") } == [777])
        // The daemon restarts and rewrites its pidfile.
        try tree.remove(777)
        try tree.clone(777, from: Self.fixture, as: 780, start: 70_000)
        try "780\n".write(toFile: pidfile, atomically: true, encoding: .utf8)
        try p.advance(by: .seconds(10))
        #expect(p.events(kind: "exited").map { $0.int("pid") } == [777])
        #expect(p.events(kind: "restarted").map { "\($0.int("old_pid")!)->\($0.int("new_pid")!)" } == ["777->780"])
        // A stale pidfile: not running, said once.
        try tree.remove(780)
        try p.advance(by: .seconds(20))
        #expect(p.events(kind: "not_running").map { $0.string("reason") } == ["pid 780 from \(pidfile) is not running"])
        try p.stop()
        #expect(p.violations.isEmpty, "\(p.violations)")

        // With a name too, the pidfile's process must match it.
        try "412\n".write(toFile: pidfile, atomically: true, encoding: .utf8)
        let both = try host().instance(options: "{ procfs: \(tree.path), pidfile: \(pidfile), name: very-long-daemon-name }")
        try both.start()
        #expect(both.events.map(\.kind) == ["not_running"])
        try both.stop()
    }

    @Test func notRunningIsASnapshotAndMissingProcfsIsUnavailable() throws {
        let p = try host().instance(options: "{ procfs: \(Self.fixture), name: postgres }")
        try p.start()
        #expect(p.events.map(\.kind) == ["not_running"])
        #expect(p.events.first?.string("target") == "name postgres")
        try p.stop()

        let missing = try host().instance(options: "{ procfs: /nonexistent-\(UUID().uuidString), name: x }")
        do {
            try missing.start()
            Issue.record("started without a procfs")
        } catch {
            #expect(error.status == "unavailable")
        }
    }

    @Test("bad options are refused with their option path", arguments: [
        ("{ all: true }", "options.name: give name or pidfile"),
        ("{ name: \"\" }", "options.name: give name or pidfile"),
        ("{ name: /usr/bin/x }", "options.name: a process name, not a path"),
        ("{ pidfile: run/x.pid }", "options.pidfile: \"run/x.pid\" is not an absolute path"),
        ("{ procfs: \"\", name: x }", "options.procfs: must not be empty"),
    ])
    func badOptions(options: String, message: String) throws {
        #expect {
            _ = try host().instance(options: options)
        } throws: { error in
            "\(error)".contains(message)
        }
    }

    /// The real /proc: a copy of sleep with a name of its own, killed by the
    /// test; the pidfd reports the exit at once, with the signal (read while
    /// the child is a zombie, before the test reaps it).
    @Test func aRealChildKilledIsReportedAtOnceThroughPidfd() throws {
        let name = "vsl" + UUID().uuidString.prefix(8).lowercased()
        let dir = NSTemporaryDirectory() + "vigil-process-\(name)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let binary = dir + "/" + name
        try FileManager.default.copyItem(atPath: "/bin/sleep", toPath: binary)

        let p = try host().instance(options: "{ name: \(name) }", interval: .seconds(60))
        try p.start()
        #expect(p.events.map(\.kind) == ["not_running"])

        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup(binary), strdup("30"), nil]
        defer { argv.forEach { free($0) } }
        #expect(posix_spawn(&pid, binary, nil, nil, argv, environ) == 0)
        var reaped = false
        defer {
            if !reaped {
                kill(pid, SIGKILL)
                var status: Int32 = 0
                waitpid(pid, &status, 0)
            }
        }
        // Wait until the exec is done (comm is the new name).
        for _ in 0..<200 {
            if let comm = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8), comm.hasPrefix(name) { break }
            usleep(10_000)
        }
        try p.poll()
        #expect(p.events(kind: "started").map { $0.int("pid") } == [Int64(pid)])
        #expect(p.events(kind: "started").first?.string("command") == "\(binary) 30")
        #expect(p.events(kind: "usage").last?.int("rss") ?? 0 > 0)
        #expect(p.logs.contains { $0.message.contains("through pidfd") })

        let killed = Date()
        kill(pid, SIGKILL)
        let exited = p.waitForEvents(1, kind: "exited", timeout: .seconds(5))
        let delay = Date().timeIntervalSince(killed)
        var status: Int32 = 0
        #expect(waitpid(pid, &status, 0) == pid)
        reaped = true
        let e = try #require(exited.first)
        #expect(e.int("pid") == Int64(pid) && e.string("detected") == "pidfd")
        #expect(e.int("signal") == Int64(SIGKILL) && e.int("exit_code") == nil)
        #expect(delay < 2, "exited came after \(delay) s")

        try p.poll()  // the next poll: nothing left
        #expect(p.events(kind: "not_running").count == 2)
        #expect(p.events(kind: "exited").count == 1)
        try p.stop()
        #expect(p.violations.isEmpty, "\(p.violations)")
    }
}

/// A copy of the fixture tree in a temporary directory, changed by the tests.
private final class ProcTree {
    let path: String
    let fm = FileManager.default

    init(copying source: String) throws {
        path = NSTemporaryDirectory() + "vigil-proc-\(UUID().uuidString.prefix(8))"
        try fm.copyItem(atPath: source, toPath: path)
    }

    deinit { try? fm.removeItem(atPath: path) }

    func remove(_ pid: Int) throws { try fm.removeItem(atPath: "\(path)/\(pid)") }

    /// A copy of the fixture's process `pid` as process `newPid` started at `start` ticks.
    func clone(_ pid: Int, from fixture: String, as newPid: Int, start: Int) throws {
        try fm.copyItem(atPath: "\(fixture)/\(pid)", toPath: "\(path)/\(newPid)")
        try editStat(newPid) { fields in
            fields[0] = String(newPid)
            fields[21] = String(start)
        }
    }

    func setCPU(_ pid: Int, utime: Int, stime: Int) throws {
        try editStat(pid) { fields in
            fields[13] = String(utime)
            fields[14] = String(stime)
        }
    }

    func setState(_ pid: Int, _ state: String, exitCode: Int) throws {
        try editStat(pid) { fields in
            fields[2] = state
            fields[51] = String(exitCode)
        }
    }

    func setRSS(_ pid: Int, kB: Int) throws {
        let file = "\(path)/\(pid)/status"
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map {
            $0.hasPrefix("VmRSS:") ? "VmRSS:\t\(kB) kB" : String($0)
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
    }

    /// Rewrites stat with `change` applied to its fields (field N at index N − 1;
    /// the fixtures' comm has no spaces).
    private func editStat(_ pid: Int, _ change: (inout [String]) -> Void) throws {
        let file = "\(path)/\(pid)/stat"
        var fields = try String(contentsOfFile: file, encoding: .utf8)
            .split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init)
        change(&fields)
        try (fields.joined(separator: " ") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
    }
}
