#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import LinuxProbes
import Testing

/// Absolute path of `Tests/Fixtures/<relative>`, found by walking up from this
/// source file to the directory that contains `Tests/Fixtures`.
private func fixturePath(_ relative: String) -> String {
    var dir = Substring(#filePath)
    while let slash = dir.lastIndex(of: "/") {
        dir = dir[..<slash]
        let base = dir.isEmpty ? "/" : String(dir)
        if FSRoot(base).exists("Tests/Fixtures") {
            return FSRoot(base).path("Tests/Fixtures/" + relative)
        }
    }
    return "Tests/Fixtures/" + relative  // relative to the working directory
}

/// `n` KiB in bytes. (Typed on purpose: `#expect(optionalUInt64 == 8 * 1024)`
/// would infer `AnyHashable` for the literal side and compare wrongly.)
private func kiB(_ n: UInt64) -> UInt64 { n * 1024 }

private func procFixture(_ name: String) -> FSRoot {
    FSRoot(fixturePath("proc/" + name))
}

@Suite("procfs parsers")
struct ProcParsersTests {
    let server = FSRoot(fixturePath("machines/server/proc"))
    let later = procFixture("server-later")
    let old = procFixture("old-kernel")
    let broken = FSRoot(fixturePath("machines/broken/proc"))

    // MARK: FSRoot

    @Test func pathJoinsWithSingleSlash() {
        #expect(FSRoot("/proc").path("stat") == "/proc/stat")
        #expect(FSRoot("/proc/").path("/stat") == "/proc/stat")
        #expect(FSRoot("/proc//").path("//pressure/io") == "/proc/pressure/io")
        #expect(FSRoot("/").path("proc") == "/proc")
        #expect(FSRoot("/proc").path("") == "/proc")
        #expect(FSRoot("fixtures").path("stat") == "fixtures/stat")
    }

    @Test func existsReflectsFixtureTree() {
        #expect(server.exists("stat"))
        #expect(server.exists("pressure/memory"))
        #expect(!old.exists("pressure"))
    }

    /// What a root points at instead of a kernel file cannot hang or
    /// exhaust the poll: a FIFO without a writer, a device that never ends
    /// and a file past the limit are refused at once, by name.
    @Test func aFIFOADeviceAndAHugeFileAreRefusedNotRead() throws {
        var template = Array("/tmp/vigil-probe-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer {
            for name in ["fifo", "huge"] { unlink(dir + "/" + name) }
            rmdir(dir)
        }
        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        let huge = open(dir + "/huge", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600)
        #expect(huge >= 0 && ftruncate(huge, off_t(FSRoot.maxFileBytes + 1)) == 0)
        close(huge)
        let root = FSRoot(dir)
        #expect(throws: ProbeError.malformed(path: dir + "/fifo", line: 0, reason: "not a regular file (a FIFO, a device or a socket), not read")) {
            try root.readText("fifo")
        }
        #expect(throws: ProbeError.malformed(path: "/dev/zero", line: 0, reason: "not a regular file (a FIFO, a device or a socket), not read")) {
            try FSRoot("/dev").readBytes("zero")
        }
        #expect(throws: ProbeError.malformed(path: dir + "/huge", line: 0, reason: "larger than 64 MiB, not read")) {
            try root.readBytes("huge")
        }
    }

    @Test func missingFileIsUnreadableWithPath() {
        let expected = ProbeError.unreadable(path: broken.path("nope"), errno: ENOENT)
        #expect(throws: expected) { try broken.readText("nope") }
        #expect(throws: expected) { try broken.readBytes("nope") }
        #expect(expected.isUnavailable)
    }

    @Test func errorDescriptions() {
        #expect(ProbeError.unreadable(path: "/proc/stat", errno: ENOENT).description
            == "cannot read /proc/stat: No such file or directory")
        #expect(ProbeError.malformed(path: "/proc/stat", line: 3, reason: "bad").description
            == "/proc/stat:3: bad")
        #expect(ProbeError.malformed(path: "/proc/stat", line: 0, reason: "bad").description
            == "/proc/stat: bad")
    }

    // MARK: /proc/stat

    @Test func serverStatCounters() throws {
        let stat = try server.procStat()
        #expect(stat.perCPU.map(\.id) == [0, 1, 2, 3])
        #expect(stat.total == CPUTimes(
            user: 9_332_116, nice: 71_507, system: 3_221_036, idle: 325_025_568,
            iowait: 180_787, irq: 39_822, softirq: 100_814, steal: 4_807, guest: 47_865, guestNice: 1_174))
        #expect(stat.total.total == 337_976_457)  // guest columns not counted
        #expect(stat.counters == nil)  // not asked for
        #expect(stat.total.totalIdle == 325_206_355)
        #expect(stat.total.busy == 12_770_102)
        #expect(stat.times(forCPU: 2)?.user == UInt64(2_411_093))
        #expect(stat.times(forCPU: 7) == nil)
    }

    @Test func serverStatKernelCounters() throws {
        let stat = try server.procStat(counters: true)
        #expect(stat.counters == KernelCounters(
            contextSwitches: 234_567_890, forks: 512_345, interrupts: 98_765_432,
            bootTime: 1_731_000_000, procsRunning: 3, procsBlocked: 0))
        #expect(stat.perCPU.count == 4)
    }

    @Test func kernelCountersAreLenient() throws {
        let stat = try ProcStat.parse("""
            cpu 1 2 3 4
            intr x 1 2
            ctxt 18446744073709551616
            processes 7 extra columns
            btime
            """, counters: true)
        #expect(stat.counters == KernelCounters(forks: 7))
    }

    @Test func aggregateUsageBetweenSnapshots() throws {
        let before = try server.procStat(), after = try later.procStat()
        #expect(after.total.total - before.total.total == 400)
        let usage = try #require(CPUUsage.between(before.total, after.total))
        #expect(usage == CPUUsage(usage: 0.25, user: 0.15, system: 0.1, iowait: 0.05, steal: 0, idle: 0.7))
    }

    @Test(arguments: [
        (0, CPUUsage(usage: 0.5, user: 0.3, system: 0.2, iowait: 0.1, steal: 0, idle: 0.4)),
        (1, CPUUsage(usage: 0.3, user: 0.2, system: 0.1, iowait: 0.05, steal: 0, idle: 0.65)),
        (2, CPUUsage(usage: 0.1, user: 0.05, system: 0.05, iowait: 0.05, steal: 0, idle: 0.85)),
        (3, CPUUsage(usage: 0.1, user: 0.05, system: 0.05, iowait: 0, steal: 0, idle: 0.9)),
    ])
    func perCPUUsageBetweenSnapshots(cpu: Int, expected: CPUUsage) throws {
        let before = try #require(try server.procStat().times(forCPU: cpu))
        let after = try #require(try later.procStat().times(forCPU: cpu))
        #expect(CPUUsage.between(before, after) == expected)
    }

    @Test func usageIsNilWithoutElapsedTimeOrWhenCountersGoBack() throws {
        let before = try server.procStat().total, after = try later.procStat().total
        #expect(CPUUsage.between(before, before) == nil)
        #expect(CPUUsage.between(after, before) == nil)
        #expect(CPUUsage.sinceBoot(CPUTimes()) == nil)
    }

    @Test func iowaitGoingBackAloneCountsAsZero() throws {
        let before = try server.procStat().total
        var after = try later.procStat().total
        after.iowait = before.iowait - 5
        after.idle += 25
        let usage = try #require(CPUUsage.between(before, after))
        #expect(usage.iowait == 0)
        #expect(abs(usage.usage + usage.iowait + usage.idle - 1) < 1e-12)
    }

    @Test func usageSinceBoot() throws {
        let usage = try #require(CPUUsage.sinceBoot(try server.procStat().total))
        #expect(usage.usage == 12_770_102.0 / 337_976_457.0)
        #expect(usage.user == 9_403_623.0 / 337_976_457.0)
        #expect(usage.system == 3_361_672.0 / 337_976_457.0)
        #expect(usage.steal == 4_807.0 / 337_976_457.0)
    }

    @Test func oldKernelStatWithSevenColumns() throws {
        let stat = try old.procStat()
        #expect(stat.total == CPUTimes(
            user: 123_456, nice: 1_234, system: 45_678, idle: 2_345_678,
            iowait: 9_876, irq: 543, softirq: 210))
        #expect(stat.perCPU.count == 2)
        let expectedUsage: Double = 171_121.0 / 2_526_675.0
        #expect(CPUUsage.sinceBoot(stat.total)?.usage == expectedUsage)
    }

    @Test func statWithFourColumns() throws {
        let stat = try ProcStat.parse("cpu  1 2 3 4\ncpu0 1 2 3 4\n")
        #expect(stat.total == CPUTimes(user: 1, nice: 2, system: 3, idle: 4))
        #expect(stat.perCPU == [PerCPUTimes(id: 0, times: CPUTimes(user: 1, nice: 2, system: 3, idle: 4))])
    }

    @Test func brokenStatReportsTruncatedLine() {
        #expect(throws: ProbeError.malformed(
            path: broken.path("stat"), line: 3,
            reason: "expected at least 4 numbers after 'cpu1', found 2")) { try broken.procStat() }
    }

    @Test func malformedStatInputs() {
        #expect(throws: ProbeError.malformed(path: "/proc/stat", line: 0, reason: "no aggregate 'cpu' line")) {
            try ProcStat.parse("intr 1 2\n")
        }
        #expect(throws: ProbeError.malformed(path: "/proc/stat", line: 1, reason: "invalid number 'x' after 'cpu'")) {
            try ProcStat.parse("cpu 1 2 x 4\n")
        }
        #expect(throws: ProbeError.malformed(path: "/proc/stat", line: 2, reason: "invalid CPU label 'cpuX'")) {
            try ProcStat.parse("cpu 1 2 3 4\ncpuX 1 2 3 4\n")
        }
    }

    // MARK: /proc/meminfo

    @Test func serverMemInfo() throws {
        let mem = try server.memInfo()
        #expect(mem.entries.count == 57)
        #expect(mem.total == kiB(65_843_200))
        #expect(mem.free == kiB(28_411_904))
        #expect(mem.available == kiB(49_382_400))
        #expect(mem.buffers == kiB(1_204_224))
        #expect(mem.cached == kiB(20_873_216))
        #expect(mem.swapTotal == kiB(8_388_608))
        #expect(mem.swapFree == kiB(7_340_032))
        #expect(mem.usedRatio == 0.25)
        #expect(mem.swapUsedRatio == 0.125)
        #expect(!mem.availableIsEstimated)
        #expect(mem["HugePages_Total"] == UInt64(16))  // a count, not scaled
        #expect(mem["HugePages_Free"] == UInt64(12))
        #expect(mem["Hugepagesize"] == kiB(2048))
        #expect(mem["Active(anon)"] == kiB(6_234_112))
        #expect(mem["VmallocTotal"] == kiB(34_359_738_367))
    }

    @Test func oldKernelMemInfoEstimatesAvailable() throws {
        let mem = try old.memInfo()
        #expect(mem.entries["MemAvailable"] == nil)
        #expect(mem.available == kiB(256_000 + 128_000 + 640_000))
        #expect(mem.availableIsEstimated)
        #expect(mem.usedRatio == 0.5)
        #expect(mem.swapUsedRatio == 0)
    }

    @Test func noSwapMeansNoSwapRatio() throws {
        let mem = try MemInfo.parse("MemTotal: 100 kB\nMemAvailable: 25 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n")
        #expect(mem.swapUsedRatio == nil)
        #expect(mem.usedRatio == 0.75)
    }

    @Test func brokenMemInfoReportsGarbageLine() {
        #expect(throws: ProbeError.malformed(
            path: broken.path("meminfo"), line: 5, reason: "expected 'Key: value [kB]'")) { try broken.memInfo() }
    }

    @Test func malformedMemInfoInputs() {
        #expect(throws: ProbeError.malformed(path: "/proc/meminfo", line: 1, reason: "unknown unit 'MB' for 'MemTotal'")) {
            try MemInfo.parse("MemTotal: 12 MB\n")
        }
        #expect(throws: ProbeError.malformed(path: "/proc/meminfo", line: 2, reason: "invalid number 'abc' for 'MemTotal'")) {
            try MemInfo.parse("\nMemTotal: abc kB\n")
        }
        #expect(throws: ProbeError.malformed(path: "/proc/meminfo", line: 1, reason: "missing value for 'MemTotal'")) {
            try MemInfo.parse("MemTotal:\n")
        }
    }

    // MARK: /proc/loadavg

    @Test func loadAverages() throws {
        #expect(try server.loadAvg() == LoadAvg(
            load1: 1.72, load5: 1.35, load15: 1.08, runnable: 3, entities: 612, lastPID: 48213))
        #expect(try old.loadAvg() == LoadAvg(
            load1: 0.08, load5: 0.03, load15: 0.01, runnable: 1, entities: 97, lastPID: 3127))
    }

    @Test func emptyLoadAvgIsMalformed() {
        #expect(throws: ProbeError.malformed(
            path: broken.path("loadavg"), line: 1, reason: "expected 5 fields, found 0")) { try broken.loadAvg() }
        #expect(throws: ProbeError.malformed(
            path: "/proc/loadavg", line: 1, reason: "expected runnable/entities, found '1-2'")) {
            try LoadAvg.parse("0.1 0.2 0.3 1-2 5\n")
        }
    }

    @Test(arguments: ["0.00", "1.44", "0.06", "99.99", "12", "123456.789012", "0.1234567890123456789"])
    func decimalsMatchStandardLibrary(text: String) throws {
        #expect(try LoadAvg.parse("\(text) 0 0 1/1 1\n").load1 == Double(text))
    }

    // MARK: /proc/pressure

    @Test func pressureFiles() throws {
        #expect(try server.pressure("memory") == Pressure(
            some: PressureLine(avg10: 0.12, avg60: 0.25, avg300: 0.10, total: 8_123_456),
            full: PressureLine(avg10: 0, avg60: 0.08, avg300: 0.03, total: 3_456_789)))
        #expect(try server.pressure("cpu") == Pressure(
            some: PressureLine(avg10: 2.5, avg60: 1.75, avg300: 1.2, total: 123_456_789),
            full: PressureLine(avg10: 0, avg60: 0, avg300: 0, total: 0)))
        #expect(try server.pressure("io") == Pressure(
            some: PressureLine(avg10: 0.4, avg60: 0.31, avg300: 0.22, total: 45_678_901),
            full: PressureLine(avg10: 0.3, avg60: 0.21, avg300: 0.15, total: 34_567_890)))
    }

    @Test func pressureWithoutFullLine() throws {
        let pressure = try Pressure.parse("some avg10=1.00 avg60=2.00 avg300=3.00 total=4\n")
        #expect(pressure == Pressure(some: PressureLine(avg10: 1, avg60: 2, avg300: 3, total: 4)))
    }

    @Test func pressureMissingOnOldKernel() {
        let expected = ProbeError.unreadable(path: old.path("pressure/memory"), errno: ENOENT)
        #expect(throws: expected) { try old.pressure("memory") }
        #expect(expected.isUnavailable)
    }

    @Test func malformedPressure() {
        #expect(throws: ProbeError.malformed(path: "p", line: 0, reason: "no 'some' line")) {
            try Pressure.parse("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", path: "p")
        }
        #expect(throws: ProbeError.malformed(
            path: "p", line: 1, reason: "expected avg10=, avg60=, avg300= and total= fields")) {
            try Pressure.parse("some avg10=0.00 avg60=0.00 total=0\n", path: "p")
        }
    }

    // MARK: the real machine

    @Test(.enabled(if: FSRoot.proc.exists("stat"))) func realProcParses() throws {
        let proc = FSRoot.proc
        let stat = try proc.procStat()
        #expect(!stat.perCPU.isEmpty)
        #expect(CPUUsage.sinceBoot(stat.total) != nil)
        let mem = try proc.memInfo()
        #expect((mem.total ?? 0) > 0)
        #expect(mem.usedRatio.map { (0...1).contains($0) } == true)
        let load = try proc.loadAvg()
        #expect(load.entities >= load.runnable)
        do {
            let pressure = try proc.pressure("memory")
            #expect(pressure.some.avg10 >= 0)
        } catch {
            #expect(error.isUnavailable)
        }
    }
}

/// `FSRoot(keepingFilesOpen:)`: kernel files held open and read again from
/// offset 0. These read the live /proc and /sys (present on any Linux),
/// since a fixture tree's files are on a disk filesystem and never held.
@Suite("kernel files kept open")
struct KeptOpenFilesTests {
    @Test func aProcFileIsHeldAndReadAnewEachTime() throws {
        let root = FSRoot("/proc", keepingFilesOpen: true)
        func uptime() throws -> Double {
            let text = try root.readText("uptime")
            return try #require(Double(text.split(separator: " ").first ?? ""))
        }
        let first = try uptime()
        #expect(root.openFileCount == 1)
        usleep(30_000)
        let second = try uptime()
        #expect(root.openFileCount == 1)
        #expect(second > first, "the held file was read again from offset 0, not from where the last read ended")
        // A file that grows past one page (procfs makes a page at a time) is read whole.
        let held = try root.readBytes("self/mountinfo")
        let fresh = try FSRoot("/proc").readBytes("self/mountinfo")
        #expect(held == fresh)
        #expect(try root.readBytes("self/mountinfo") == fresh)
        #expect(root.openFileCount == 2)
        root.forgetOpenFiles(under: "self")
        #expect(root.openFileCount == 1)
    }

    @Test(.enabled(if: access("/sys/class/net/lo/mtu", R_OK) == 0))
    func aSysfsAttributeIsHeldAndReadWhole() throws {
        let root = FSRoot("/sys", keepingFilesOpen: true)
        guard case .text(let mtu) = root.attribute("class/net/lo/mtu") else { Issue.record("lo has no mtu"); return }
        #expect(Int(mtu) != nil)
        guard case .text(let again) = root.attribute("class/net/lo/mtu") else { Issue.record("read again failed"); return }
        #expect(again == mtu)
        #expect(root.openFileCount == 1)
        root.forgetOpenFiles(under: "class/net/lo")
        #expect(root.openFileCount == 0)
    }

    @Test func aFixtureFileIsNeverHeldSoAReplacedOneIsReadAsItIsNow() throws {
        var template = Array("/tmp/vigil-kept-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer {
            for name in ["stat", "stat.new"] { unlink(dir + "/" + name) }
            rmdir(dir)
        }
        func write(_ name: String, _ text: String) {
            let fd = open(dir + "/" + name, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0o600)
            _ = text.withCString { Glibc.write(fd, $0, strlen($0)) }
            close(fd)
        }
        write("stat", "old\n")
        let root = FSRoot(dir, keepingFilesOpen: true)
        #expect(try root.readText("stat") == "old\n")
        #expect(root.openFileCount == 0)
        write("stat.new", "new\n")
        rename(dir + "/stat.new", dir + "/stat")
        #expect(try root.readText("stat") == "new\n")
    }

    @Test func anAbsentFileIsUnavailableAndNotHeld() {
        let root = FSRoot("/proc", keepingFilesOpen: true)
        #expect(throws: ProbeError.unreadable(path: "/proc/no-such-file", errno: ENOENT)) { try root.readBytes("no-such-file") }
        #expect(root.openFileCount == 0)
    }

    @Test func entriesSayWhatEachNameIsWithoutAStat() throws {
        var template = Array("/tmp/vigil-entries-XXXXXX".utf8CString)
        let dir = String(cString: try #require(mkdtemp(&template)))
        defer {
            for name in ["eth0", "bonding_masters"] { unlink(dir + "/" + name) }
            rmdir(dir + "/devices-eth0")
            rmdir(dir)
        }
        mkdir(dir + "/devices-eth0", 0o700)
        symlink("devices-eth0", dir + "/eth0")
        close(open(dir + "/bonding_masters", O_CREAT | O_WRONLY | O_CLOEXEC, 0o600))
        let entries = try #require(FSRoot(dir).entries(""))
        #expect(entries.map(\.name) == ["bonding_masters", "devices-eth0", "eth0"])
        let kinds = entries.map(\.kind)
        // tmpfs and ext4 fill d_type; a filesystem that does not says unknown.
        #expect(kinds == [.other, .directory, .symlink] || kinds.allSatisfy { $0 == .unknown })
        #expect(Set(entries.map(\.inode)).count == 3)
        #expect(FSRoot(dir).entries("absent") == nil)
    }
}
