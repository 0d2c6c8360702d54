import Glibc
import Testing
import VigilKitTesting

/// The `time` plugin (libtime.so): the wall clock (the test host's), the
/// clock sources of a fixture sysfs, and adjtimex replayed from a recorded
/// reading (`<machine>/adjtimex`), so that its scaling is checked; the live
/// syscall is only run, by MachineTests and `vigil plugins check`.
@Suite(.serialized) struct TimePluginTests {
    init() {
        setenv("TZ", "UTC", 1)  // the clock kind reports the process's zone
        tzset()
    }

    /// The capture: unsynchronized (TIME_ERROR, STA_UNSYNC), µs units.
    @Test func capture() throws {
        let root = machines + "/capture"
        try PluginGolden(plugin: "time", name: "capture").check(options: "{ sysfs: \(root)/sys, adjtimex: \(root)/adjtimex }")
    }

    /// A disciplined clock with STA_NANO (offset and jitter in ns), TAI and
    /// PPS; poll 2: a second clocksource device appears and device 0 switches
    /// to tsc.
    @Test func oldKernel() throws {
        let tree = try TempTree(copying: machines + "/old-kernel")
        let devices = tree.sys + "/devices/system/clocksource"
        try PluginGolden(plugin: "time", name: "old-kernel").check(options: "{ sysfs: \(tree.sys), adjtimex: \(tree.path)/adjtimex }") { _ in
            try tree.write(devices + "/clocksource0/current_clocksource", "tsc")
            try TempTree.copy(devices + "/clocksource0", to: devices + "/clocksource1")
        }
    }

    @Test func aRelativeRecordingIsRefused() throws {
        let host = try PluginTestHost(path: productsDir + "/libtime.so")
        #expect(throws: (any Error).self) { _ = try host.instance(options: "{ adjtimex: adjtimex }", interval: .seconds(1)) }
    }

    @Test func theSyscallRuns() throws {
        let instance = try PluginTestHost(path: productsDir + "/libtime.so").instance(options: "{}", interval: .seconds(1))
        try instance.start()
        try instance.stop()
        let timex = instance.events(kind: "timex")
        #expect(timex.count <= 1)
        #expect(instance.events(kind: "clock").count == 1)
    }
}
