import Foundation
import Glibc
import Testing
import VigilChildProcess

/// `ChildRun`, the one way a child is run to its end under a deadline: the
/// hostile children a Nagios check or a munin plugin can be, on /bin/sh.
/// Each test walks /proc afterwards: nothing of the child's process group
/// may be left.
@Suite("a child run to its end")
struct ChildRunTests {
    static let environment = ["PATH": "/usr/bin:/bin", "LC_ALL": "C"]

    static func run(_ script: String, timeout: Int64 = 5_000_000_000, killGrace: Int64 = 200_000_000,
                    captureLimit: Int = 65_536, endGroup: Bool = false) throws -> (ChildRun, ChildRun.Ending) {
        let child = try ChildRun.spawn(argv: ["/bin/sh", "-c", script], environment: environment, searchPath: false)
        let ending = child.supervise(input: [], timeout: timeout, killGrace: killGrace, captureLimit: captureLimit,
                                     endGroup: endGroup)
        return (child, ending)
    }

    /// The pids whose process group is `group`, from /proc/*/stat.
    static func members(of group: pid_t) -> [pid_t] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return names.compactMap { name -> pid_t? in
            guard let pid = pid_t(name), let stat = try? String(contentsOfFile: "/proc/\(name)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            // After "comm)": state, ppid, pgrp.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 2 && pid_t(fields[2]) == group ? pid : nil
        }
    }

    /// Nothing of the group within `seconds` (a SIGKILL is delivered at once, but the reaping of an orphan by init takes a moment).
    static func expectGroupGone(_ group: pid_t, within seconds: Double = 2) {
        let deadline = Date().addingTimeInterval(seconds)
        while !members(of: group).isEmpty && Date() < deadline { usleep(20_000) }
        #expect(members(of: group).isEmpty, "left of group \(group): \(members(of: group))")
    }

    /// As another user (munin's `user nobody`): the fork path of `Spawn`
    /// does what posix_spawn does for everyone else (its descriptors, its
    /// group, default signals, nothing blocked) and then changes the ids.
    @Test func aChildRunsAsAnotherUserWithNothingElseChanged() throws {
        try #require(geteuid() == 0, "changing user takes root")
        let script = "id -u; id -g; id -G; ls /proc/self/fd | wc -l; grep -E '^Sig(Ign|Blk)' /proc/self/status; ps -o pgid= -p $$"
        let credentials = Spawn.Credentials(uid: 65534, gid: 65534, groups: [65534, 4])
        let child = try ChildRun.spawn(argv: ["/bin/sh", "-c", script], environment: Self.environment, searchPath: false,
                                       credentials: credentials)
        let ending = child.supervise(input: [], timeout: 5_000_000_000, killGrace: 200_000_000, captureLimit: 65_536)
        let lines = String(decoding: ending.stdout, as: UTF8.self).split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(ending.status == 0, "\(lines) \(String(decoding: ending.stderr, as: UTF8.self))")
        #expect(Array(lines.prefix(3)) == ["65534", "65534", "65534 4"], "\(lines)")
        // 0, 1, 2 and the one ls opens to list them: nothing of the host's.
        #expect(lines.count > 3 && lines[3] == "4", "\(lines)")
        #expect(lines.contains("SigIgn:\t0000000000000000") && lines.contains("SigBlk:\t0000000000000000"), "\(lines)")
        #expect(lines.last == String(child.pid), "a process group of its own: \(lines)")
        // The same script spawned as ourselves: the same dispositions and mask.
        let plain = try ChildRun.spawn(argv: ["/bin/sh", "-c", script], environment: Self.environment, searchPath: false)
        let plainEnding = plain.supervise(input: [], timeout: 5_000_000_000, killGrace: 200_000_000, captureLimit: 65_536)
        let plainLines = String(decoding: plainEnding.stdout, as: UTF8.self).split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        // (Less glibc's own 32 and 33, which posix_spawn cannot reset and
        // this sandbox's launcher may have left ignored: the fork path resets them.)
        func signals(_ lines: [String]) -> [UInt64] {
            lines.filter { $0.hasPrefix("Sig") }.map { (UInt64($0.split(separator: "\t").last ?? "", radix: 16) ?? 1) & ~0x1_8000_0000 }
        }
        #expect(signals(plainLines) == [0, 0] && signals(lines) == [0, 0], "\(plainLines) \(lines)")
        // A program that is not there fails the start, as posix_spawn does.
        #expect(throws: SpawnError.self) {
            _ = try ChildRun.spawn(argv: ["/nonexistent/program"], environment: [:], searchPath: false, credentials: credentials)
        }
    }

    @Test func theStatusOutputsAndCostAreTold() throws {
        let (child, ending) = try Self.run("echo out; echo err >&2; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3")
        #expect(ending.status.map { ($0 >> 8) & 0xff } == 3)
        #expect(!ending.timedOut)
        #expect(String(decoding: ending.stdout, as: UTF8.self) == "out\n")
        #expect(String(decoding: ending.stderr, as: UTF8.self) == "err\n")
        #expect(!ending.stdoutCut && !ending.stderrCut)
        #expect((ending.userCPU ?? 0) + (ending.systemCPU ?? 0) > 0)
        #expect((ending.peakMemory ?? 0) > 100_000)
        #expect(ending.duration > 0)
        Self.expectGroupGone(child.pid)
    }

    /// The peak memory is the child's own: a shell that sleeps is small
    /// however large the process that started it, and 64 MiB that a child
    /// touches are counted.
    @Test func thePeakMemoryIsTheChildsOwn() throws {
        let ballast = [UInt8](repeating: 1, count: 96 << 20)  // this process's pages, which a child must not be charged
        let (_, small) = try Self.run("sleep 0.3")
        #expect(small.peakMemory.map { $0 > 0 && $0 < 16 << 20 } == true, "\(String(describing: small.peakMemory))")
        let (_, large) = try Self.run("exec python3 -c 'b = bytearray(64 << 20); import time; time.sleep(0.3)'")
        #expect(large.peakMemory.map { $0 > 64 << 20 && $0 < 160 << 20 } == true, "\(String(describing: large.peakMemory))")
        #expect(ballast.count == 96 << 20)
    }

    /// A child that ends within a millisecond is told without a peak or
    /// with one it really reached (its loader and libc mapped), never with
    /// a reading taken between its exec and its loader (4 KiB).
    @Test func aChildThatEndsAtOnceHasNoPeakFromItsExec() throws {
        var told: [Int64] = []
        for _ in 0..<40 {
            let child = try ChildRun.spawn(argv: ["/bin/true"], environment: Self.environment, searchPath: false)
            let ending = child.supervise(input: [], timeout: 5_000_000_000, killGrace: 200_000_000, captureLimit: 65_536)
            if let peak = ending.peakMemory { told.append(peak) }
        }
        #expect(told.allSatisfy { $0 >= 256 << 10 }, "\(told)")
    }

    @Test func aChildThatSleepsPastItsTimeoutIsEnded() throws {
        let began = Date()
        let (child, ending) = try Self.run("sleep 30", timeout: 300_000_000)
        #expect(ending.timedOut)
        #expect(ending.status.map { $0 & 0x7f } == SIGTERM)
        #expect(Date().timeIntervalSince(began) < 5)
        Self.expectGroupGone(child.pid)
    }

    /// It ignores SIGTERM and leaves a grandchild holding its stdout: SIGKILL
    /// to the group after the grace ends both, and the run does not wait
    /// for the pipe the grandchild held.
    @Test func aChildThatIgnoresSIGTERMAndForksIsEndedWithWhatItStarted() throws {
        let began = Date()
        let (child, ending) = try Self.run("trap '' TERM; (trap '' TERM; sleep 60) & echo started; sleep 60",
                                           timeout: 300_000_000, killGrace: 200_000_000)
        #expect(ending.timedOut)
        #expect(ending.status.map { $0 & 0x7f } == SIGKILL)
        #expect(String(decoding: ending.stdout, as: UTF8.self) == "started\n")
        #expect(Date().timeIntervalSince(began) < 5)
        Self.expectGroupGone(child.pid)
    }

    @Test func tenMegabytesOfOutputAreCutNotHeld() throws {
        let (child, ending) = try Self.run("head -c 10000000 /dev/zero | tr '\\0' x", captureLimit: 4096)
        #expect(ending.status == 0)
        #expect(ending.stdout.count == 4096)
        #expect(ending.stdoutCut)
        Self.expectGroupGone(child.pid)
    }

    /// A check that exits but leaves something running: with `endGroup`
    /// nothing of it outlives the run.
    @Test func whatAChildLeftRunningIsEndedWhenAsked() throws {
        let (child, ending) = try Self.run("sleep 60 >/dev/null 2>&1 & echo done", endGroup: true)
        #expect(ending.status == 0)
        #expect(!ending.timedOut)
        #expect(String(decoding: ending.stdout, as: UTF8.self) == "done\n")
        Self.expectGroupGone(child.pid)
    }

    @Test func theEnvironmentIsExactlyTheOneGiven() throws {
        let (_, ending) = try Self.run("env | sort")
        #expect(String(decoding: ending.stdout, as: UTF8.self).split(separator: "\n").filter { !$0.hasPrefix("PWD=") && !$0.hasPrefix("SHLVL=") && !$0.hasPrefix("_=") }
                == ["LC_ALL=C", "PATH=/usr/bin:/bin"])
    }

    @Test func aProgramThatIsNotThereIsASpawnError() {
        #expect(throws: SpawnError.self) {
            _ = try ChildRun.spawn(argv: ["/nonexistent/check_nothing"], environment: Self.environment, searchPath: false)
        }
    }

    /// A supervisor that is stopping ends the run at once through `cancel`,
    /// as it would a timeout (SIGTERM, SIGKILL after the grace, the group
    /// ended), and says it was cancelled, not timed out.
    @Test func aReadableCancelDescriptorEndsTheRun() throws {
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let child = try ChildRun.spawn(argv: ["/bin/sh", "-c", "trap '' TERM; sleep 30 & sleep 30"], environment: Self.environment,
                                       searchPath: false)
        let writeEnd = fds[1]
        let writer = Thread { usleep(200_000); var one: UInt8 = 1; _ = write(writeEnd, &one, 1) }
        writer.start()
        let began = Date()
        let ending = child.supervise(input: [], timeout: 20_000_000_000, killGrace: 200_000_000, captureLimit: 1024, cancel: fds[0])
        #expect(ending.cancelled && !ending.timedOut)
        #expect(ending.status.map { $0 & 0x7f } == SIGKILL)
        #expect(Date().timeIntervalSince(began) < 3)
        Self.expectGroupGone(child.pid)
    }

    /// argv[0] is what the child sees; `program` is what runs (a check
    /// linked under several names knows its job by argv[0]).
    @Test func argvZeroIsTheNameGivenNotTheFileRun() throws {
        let child = try ChildRun.spawn(argv: ["called-so", "-c", "echo $0"], program: "/bin/sh", environment: Self.environment,
                                       searchPath: false)
        let ending = child.supervise(input: [], timeout: 5_000_000_000, killGrace: 100_000_000, captureLimit: 1024)
        #expect(String(decoding: ending.stdout, as: UTF8.self) == "called-so\n")
    }
}
