import Foundation
import Glibc
import Testing

/// A copy of the laptop fixture, damaged as a hostile or broken /proc and
/// /sys would be, under the real `vigil`: no plugin traps the host, none
/// holds it past its end, and a monitor that cannot be stopped is said in
/// the exit status. (Found by outside testing: each of these took the
/// whole host down, or held a `--for 2s` run for 12–20 s and exited 0.)
@Suite(.serialized, .startsProcesses, .offThePool)
struct HostileTreeRunTests {
    /// A fresh copy of the laptop fixture in `dir`/tree.
    static func tree(in dir: String) throws -> String {
        let tree = dir + "/tree"
        let copy = try TestEnv.run("/bin/cp", ["-a", TestEnv.fixture("machines/laptop"), tree])
        try #require(copy.status == 0, "\(copy.stderr)")
        return tree
    }

    /// Runs `monitors` (manifest lines under `monitors:`) for `duration`
    /// with a file sink; the output, its events and the seconds it took.
    static func run(_ monitors: String, for duration: String = "2s", in dir: String) throws
        -> (output: TestEnv.Output, events: [[String: Any]], seconds: Double) {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try TestEnv.write("plugin_dirs: [\(try TestEnv.cPlugins())]\nmonitors:\n" + monitors
                          + "\nsinks:\n  out: { type: file, path: \(dir)/events.jsonl }\n", to: dir + "/m.yaml")
        let started = Date()
        let output = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--for", duration, "--control", "none"], timeout: 60)
        return (output, NagiosRunTests.events(dir + "/events.jsonl"), Date().timeIntervalSince(started))
    }

    static func replaceWithFIFO(_ path: String) throws {
        try? FileManager.default.removeItem(atPath: path)
        try #require(mkfifo(path, 0o644) == 0, "mkfifo \(path): \(String(cString: strerror(errno)))")
    }

    @Test func fifosWhereAttributesWereHoldNoMonitor() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tree = try Self.tree(in: dir)
        try Self.replaceWithFIFO(tree + "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2/idVendor")
        try Self.replaceWithFIFO(tree + "/etc/timezone")
        let run = try Self.run("""
              devices: { plugin: devices, options: { sysfs: \(tree)/sys } }
              clock: { plugin: clock, options: { rootfs: \(tree) } }
              load: { plugin: load, interval: 200ms, options: { procfs: \(tree)/proc } }
            """, in: dir)
        #expect(run.output.status == 0, "\(run.output.stderr)")
        #expect(run.seconds < 8, "a 2 s run took \(run.seconds) s: \(run.output.stderr)")
        #expect(NagiosRunTests.of(run.events, monitor: "load", kind: "sample").count >= 5)
        #expect(run.events.contains { $0["monitor"] as? String == "devices" }, "devices emitted nothing: \(run.output.stderr)")
    }

    @Test func symlinkLoopsInAWatchedTreeAreWalkedOnce() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let watched = dir + "/d"
        try FileManager.default.createDirectory(atPath: watched + "/a/b", withIntermediateDirectories: true)
        for name in ["x", "y", "z"] { try FileManager.default.createSymbolicLink(atPath: watched + "/a/" + name, withDestinationPath: "..") }
        let run = try Self.run("""
              files: { plugin: files, options: { paths: ["\(watched)"], recursive: true } }
            """, in: dir)
        #expect(run.output.status == 0, "\(run.output.stderr)")
        #expect(run.seconds < 8, "a 2 s run took \(run.seconds) s: \(run.output.stderr)")
    }

    /// Numbers at Int64's ends where a plugin multiplies, sums or takes a
    /// magnitude: each saturates, and the host and its other monitors go on.
    @Test func numbersAtInt64sEndsDoNotTrapTheHost() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let tree = try Self.tree(in: dir)
        let status = tree + "/proc/412/status"
        try String(contentsOfFile: status, encoding: .utf8)
            .replacingOccurrences(of: "VmRSS:\t      10240 kB", with: "VmRSS:\t9007199254740992 kB")
            .write(toFile: status, atomically: true, encoding: .utf8)
        try "Inter-| sta-|   Quality        |   Discarded packets               | Missed | WE\n face | tus | link level noise |  nwid  crypt   frag  retry   misc | beacon | 22\nwlp2s0: 0000   58.  -52.  -256 9223372036854775807 1 0 0 0 0\n"
            .write(toFile: tree + "/proc/net/wireless", atomically: true, encoding: .utf8)
        let battery = tree + "/sys/class/power_supply/BAT0/"
        try "-9223372036854775808\n".write(toFile: battery + "power_now", atomically: true, encoding: .utf8)
        let run = try Self.run("""
              process: { plugin: process, interval: 200ms, options: { procfs: \(tree)/proc, name: nginx, all: true } }
              wifi: { plugin: wifi, interval: 200ms, options: { procfs: \(tree)/proc, sysfs: \(tree)/sys } }
              power: { plugin: power, interval: 200ms, options: { sysfs: \(tree)/sys } }
              load: { plugin: load, interval: 200ms, options: { procfs: \(tree)/proc } }
            """, in: dir)
        #expect(run.output.status == 0, "\(run.output.stderr)")
        #expect(NagiosRunTests.of(run.events, monitor: "load", kind: "sample").count >= 5)
        let rss = NagiosRunTests.of(run.events, monitor: "process", kind: "usage").compactMap { $0["rss"] as? Int }
        #expect(rss.contains(Int.max), "\(rss)")
        // Discharging from Int64's end at a rate of 1, and charging from
        // Int64.min to Int64.max: each estimate saturates.
        for (state, now, field) in [("Discharging", "9223372036854775807", "time_to_empty"),
                                    ("Charging", "-9223372036854775808", "time_to_full")] {
            for (file, text) in [("status", state), ("energy_now", now), ("energy_full", "9223372036854775807"), ("power_now", "1")] {
                try (text + "\n").write(toFile: battery + file, atomically: true, encoding: .utf8)
            }
            let power = try Self.run("""
                  power: { plugin: power, interval: 200ms, options: { sysfs: \(tree)/sys } }
                """, in: dir + "/" + state)
            #expect(power.output.status == 0, "\(power.output.stderr)")
            let estimates = NagiosRunTests.of(power.events, monitor: "power", kind: "battery").compactMap { $0[field] as? Int }
            #expect(!estimates.isEmpty && estimates.allSatisfy { $0 == Int.max }, "\(state): \(estimates)")
        }
    }

    /// A plugin in vigil's process that will not stop cannot be ended: the
    /// run goes on without it and says so in its exit status.
    @Test func aMonitorThatWillNotStopMakesTheRunExit1() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let run = try Self.run("""
              hang: { plugin: hang_in_stop, interval: 1s, isolation: none }
            """, for: "1s", in: dir)
        #expect(run.output.status == 1, "\(run.output.stderr)")
        #expect(run.output.stderr.contains("monitors hang would not stop and were left running; exit status 1"), "\(run.output.stderr)")
    }
}
