import LinuxProbes
import Testing

/// The cgroup v2 file formats as `LinuxProbes.Cgroup` reads them: lenient,
/// a bad line skipped and counted, never a trap.
@Suite struct CgroupParsersTests {
    @Test func flatKeyedKeepsNewKeysAndSkipsGarbage() {
        let (values, malformed) = Cgroup.flatKeyed(
            "usage_usec 12\nuser_usec 18446744073709551615\nnr_bursts 0\nsystem_usec\nthrottled_usec -3\nbad 1 2\n\n   \nhuge 99999999999999999999\n")
        #expect(values == ["usage_usec": 12, "user_usec": UInt64.max, "nr_bursts": 0])
        #expect(malformed == 4)
        #expect(Cgroup.flatKeyed("").values.isEmpty)
    }

    @Test func singleValuesAndMax() {
        #expect(Cgroup.single("max\n") == .max)
        #expect(Cgroup.single(" 536870912\n") == .value(536_870_912))
        #expect(Cgroup.single("") == nil)
        #expect(Cgroup.single("12 13") == nil)
        #expect(Cgroup.single("-1") == nil)
    }

    @Test func ioStatPerDevice() {
        let (lines, malformed) = Cgroup.ioStat("""
            8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=5 dios=6 cost.vrate=100.00 cost.usage=7
            259:0 rbytes=18446744073709551615 wbytes=x
            sda rbytes=1
            8: rbytes=1
            :0 rbytes=1
            253:1
            """)
        #expect(lines == [
            Cgroup.IOStatLine(device: "8:0", values: ["rbytes": 1, "wbytes": 2, "rios": 3, "wios": 4, "dbytes": 5, "dios": 6, "cost.usage": 7]),
            Cgroup.IOStatLine(device: "259:0", values: ["rbytes": UInt64.max]),
            Cgroup.IOStatLine(device: "253:1", values: [:]),
        ])
        #expect(malformed == 3)
    }

    @Test func entriesSplitFilesAndGroups() {
        #expect(Cgroup.entries("/nonexistent/cgroup") == nil)
    }
}
