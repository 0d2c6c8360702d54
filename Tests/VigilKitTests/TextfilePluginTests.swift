import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `textfile` plugin (node_exporter's textfile collector) on directories
/// written here: what a good file gives, and every way a file can be bad or
/// hostile: each skipped whole, said once in the log, counted in `scrape`,
/// and the good files beside it still read.
@Suite(.serialized) struct TextfilePluginTests {
    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libtextfile.so") }

    func poll(_ directory: String, options: String = "") throws -> TestInstance {
        let instance = try host().instance(options: "{ directory: '\(directory)'\(options.isEmpty ? "" : ", " + options) }")
        try instance.start()  // and the snapshot's poll
        return instance
    }

    static func write(_ path: String, _ text: String) throws {
        try TempTree.write(path, bytes: Array(text.utf8))
    }

    @Test func aGoodFileGivesEverySeriesWithItsFamily() throws {
        let tree = try TempTree()
        try Self.write(tree.path + "/a.prom", """
            # HELP jobs_done_total Jobs done.
            # TYPE jobs_done_total counter
            jobs_done_total{queue="b",host="x"} 7
            temp 21.5

            """)
        let instance = try poll(tree.path)
        let samples = instance.events(kind: "sample")
        #expect(samples.map { $0.string("prometheus_name") } == ["jobs_done_total", "temp"])
        // Labels ordered by name, in the exposition's own syntax.
        #expect(samples[0].string("prometheus_labels") == #"host="x",queue="b""#)
        #expect(samples[0].double("value") == 7 && samples[0].string("type") == "counter" && samples[0].string("help") == "Jobs done.")
        #expect(samples[1].string("type") == "untyped" && samples[1].string("help") == "Metric read from \(tree.path)/a.prom")
        let scrape = try #require(instance.events(kind: "scrape").last)
        #expect(scrape.bool("error") == false && scrape.int("files") == 1 && scrape.int("series") == 2)
        #expect(instance.events(kind: "file").first?.string("file") == tree.path + "/a.prom")
        try instance.stop()
    }

    /// Each bad file is skipped whole, with why, once; the good one is read.
    @Test func badAndHostileFilesAreSkippedAndCounted() throws {
        let tree = try TempTree()
        let d = tree.path
        try Self.write(d + "/good.prom", "ok 1\n")
        try Self.write(d + "/partial.prom", "being_written{a=\"b\"} 1")          // no newline at its end
        try Self.write(d + "/garbage.prom", "\u{1}\u{2} not a metric\n")
        try Self.write(d + "/stamped.prom", "with_time 1 1700000000000\n")
        try Self.write(d + "/twice.prom", "dup 1\ndup 2\n")
        try Self.write(d + "/zz_conflict.prom", "# TYPE ok gauge\nok{x=\"y\"} 1\n")  // ok is untyped in good.prom, read first
        try TempTree.write(d + "/binary.prom", bytes: [0xff, 0x00, 0xfe, 0x0a])
        #expect(mkfifo(d + "/fifo.prom", 0o644) == 0)                              // would block a plain open
        #expect(symlink(d + "/loop.prom", d + "/loop.prom") == 0)                  // a symlink to itself
        #expect(mkdir(d + "/dir.prom", 0o755) == 0)
        try Self.write(d + "/big.prom", String(repeating: "x 1\n", count: 1000))
        try Self.write(d + "/.hidden.prom", "hidden 1\n")
        try Self.write(d + "/other.txt", "not read 1\n")
        let began = Worker.now()
        let instance = try poll(d, options: "max_bytes: 1KiB")
        #expect(Worker.now() - began < 2_000_000_000, "a poll took too long")
        #expect(instance.events(kind: "sample").map { $0.string("prometheus_name") } == ["ok"])
        let scrape = try #require(instance.events(kind: "scrape").last)
        #expect(scrape.bool("error") == true && scrape.int("files") == 11 && scrape.int("skipped") == 10, "\(scrape)")
        let said = instance.logs.map(\.message)
        for (file, why) in [("partial", "no newline at its end"), ("garbage", "line 1, column 1"), ("stamped", "client-side timestamp"),
                            ("twice", "line 2, column 1: dup is given twice"), ("zz_conflict", "another type or help"),
                            ("fifo", "not a regular file"), ("loop", "Too many levels of symbolic links"), ("dir", "not a regular file"),
                            ("big", "more than max_bytes"), ("binary", "a NUL byte")] {
            let line = said.first { $0.contains("\(d)/\(file).prom skipped: ") }
            #expect(line?.contains(why) == true, "\(file): \(said)")
        }
        // Said once: a second poll with the same files logs nothing new.
        let lines = instance.logs.count
        try instance.poll()
        #expect(instance.logs.count == lines)
        // A file that went away is forgotten: back again, it is said again.
        #expect(unlink(d + "/partial.prom") == 0)
        try instance.poll()
        try Self.write(d + "/partial.prom", "being_written{a=\"b\"} 1")
        try instance.poll()
        #expect(instance.logs.count == lines + 1 && instance.logs.last?.message.contains("partial.prom skipped") == true)
        try instance.stop()
    }

    @Test func seriesOverTheBoundSkipTheFileThatPassesIt() throws {
        let tree = try TempTree()
        try Self.write(tree.path + "/a.prom", (0..<50).map { "m{i=\"\($0)\"} 1\n" }.joined())
        try Self.write(tree.path + "/b.prom", (0..<60).map { "n{i=\"\($0)\"} 1\n" }.joined())
        let instance = try poll(tree.path, options: "max_series: 100")
        #expect(instance.events(kind: "sample").count == 50)
        #expect(instance.events(kind: "scrape").last?.int("skipped") == 1)
        try instance.stop()
    }

    /// A long HELP goes with a name's first sample of each poll, cut to what
    /// a field holds; a series whose labels no event can hold is left out
    /// and said; every event emitted is one the host takes.
    @Test func aLongHelpIsSentOncePerNameAndCutAndHugeLabelsAreLeftOut() throws {
        let tree = try TempTree()
        let help = String(repeating: "é", count: 50_000)  // 100,000 bytes
        try Self.write(tree.path + "/a.prom", "# HELP wide \(help)\n# TYPE wide gauge\n"
            + (0..<1000).map { "wide{i=\"\($0)\"} 1\n" }.joined()
            + "huge{l=\"\(String(repeating: "x", count: 70_000))\"} 1\nafter 2\n")
        let instance = try poll(tree.path, options: "max_bytes: 1MiB")
        let samples = instance.events(kind: "sample")
        #expect(samples.map { $0.string("prometheus_name") }.filter { $0 == "wide" }.count == 1000)
        #expect(!samples.contains { $0.string("prometheus_name") == "huge" })
        #expect(samples.last?.string("prometheus_name") == "after" && samples.last?.string("help")?.hasPrefix("Metric read from") == true)
        let helped = samples.filter { $0.string("help") != nil }
        #expect(helped.map { $0.string("prometheus_name") } == ["wide", "after"])
        let cut = try #require(helped.first?.string("help"))
        #expect(cut.hasSuffix("…") && cut.utf8.count <= 65_536 && cut.dropLast().allSatisfy { $0 == "é" })
        #expect(instance.violations.isEmpty, "\(instance.violations.prefix(3))")
        #expect(instance.logs.contains { $0.message.contains("1 series with a name or labels over 65536 bytes (huge…) left out") },
                "\(instance.logs.map(\.message))")
        // The next poll sends the help again, once.
        try instance.poll()
        #expect(instance.events(kind: "sample").filter { $0.string("help") != nil }.count == 4)
        try instance.stop()
    }

    /// No directory: an error, as node_exporter says it; an empty string:
    /// nothing read and no error (node_exporter without the flag).
    @Test func aMissingDirectoryIsAnErrorAndNoneIsNot() throws {
        let missing = try poll("/nonexistent/textfiles")
        #expect(missing.events(kind: "scrape").last?.bool("error") == true)
        #expect(missing.logs.contains { $0.message.contains("cannot list the directory") })
        try missing.stop()
        let none = try host().instance(options: "{ directory: '' }")
        try none.start()
        #expect(none.events(kind: "scrape").last?.bool("error") == false)
        try none.stop()
    }
}

private enum Worker {
    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}
