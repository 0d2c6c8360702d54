import Foundation
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Regressions found by running the real `vigil` binary as an outsider would:
/// hostile plugins, dying peers, vanishing files, full disks, kill -9, two
/// hosts on one socket. Every count is exact: what was delivered plus what
/// the host counted as lost is what was emitted.
@Suite(.serialized, .startsProcesses, .offThePool) struct SinkRunTests {
    /// The per-sink part of `--summary`.
    struct SinkSummary {
        var name: String
        var written: Int
        /// By reason, as the JSON names them (`queue_full`…).
        var lost: [String: Int]
        var lostTotal: Int { lost.values.reduce(0, +) }
        /// Written, in the kernel's send queue at exit.
        var unconfirmed = 0
    }

    struct Summary {
        var events: Int
        var sinks: [SinkSummary]
        subscript(sink name: String) -> SinkSummary? { sinks.first { $0.name == name } }
    }

    /// `--summary` as a script would read it, by its JSON names.
    static func summary(_ path: String) throws -> Summary {
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any] ?? [:]
        let sinks = (json["sinks"] as? [[String: Any]] ?? []).map { s in
            SinkSummary(name: s["name"] as? String ?? "", written: s["written"] as? Int ?? -1,
                        lost: s["lost"] as? [String: Int] ?? [:], unconfirmed: s["unconfirmed"] as? Int ?? -1)
        }
        return Summary(events: json["events"] as? Int ?? -1, sinks: sinks)
    }

    static func lines(_ path: String) throws -> [String] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .dropLast().map(String.init)
    }

    /// Polls `condition` every 10 ms for up to `seconds`.
    @discardableResult
    static func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            if Date() >= deadline { return false }
            usleep(10_000)
        }
        return true
    }

    @Test func aPluginCannotForgeHostLinesNorCrashTheEncoderWithItsTime() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          forger: { plugin: log_forger, interval: 1h }
        sinks:
          console: { type: log, format: text, stream: stdout }
          journal: { type: file, path: \(dir)/events.jsonl }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "700ms"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let all = (result.stderr + result.stdout).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        // Every line starts with the host's own time stamp: none with the forged one.
        let year = String(Calendar(identifier: .gregorian).component(.year, from: Date()))
        #expect(all.allSatisfy { $0.hasPrefix(year + "-") }, "\(all.filter { !$0.hasPrefix(year + "-") })")
        #expect(!all.contains { $0.hasPrefix("2026-01-01T00:00:00.000Z") })
        // No raw control characters reach a terminal.
        #expect(!(result.stderr + result.stdout).unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" || $0.value == 0x7F })
        // The plugin's line is attributed before its text, which is escaped.
        let warning = all.first { $0.contains("innocent") }
        #expect(warning?.contains(#" warning [vigil] monitor=forger plugin=log_forger: innocent\n2026-01-01"#) == true, "\(warning ?? "")")
        #expect(warning?.hasSuffix(#"FORGED log\r\x1b[31mred\x1b[0m\x07"#) == true)
        // 1 MiB of text is cut to 8 KiB, and the cut is shown.
        let big = all.first { $0.contains("AAAA") }
        #expect(big?.hasSuffix("A… [cut \((1 << 20) - 8192) bytes]") == true)
        #expect((big?.utf8.count ?? 0) < 8192 + 200)
        // The event's kind and field name, escaped in the text sink.
        #expect(result.stdout.contains(#"forger/sample\n2026-01-01T00:00:00.000Z critical [vigil] FORGED kind f\n"#))
        // A negative time (INT64_MIN) is refused by the decoder and counted;
        // INT64_MAX is written as valid RFC 3339 (the encoder takes any
        // Int64, as SinkTests shows for INT64_MIN too).
        let events = try Self.lines(dir + "/events.jsonl").map { try JSONLineDecoder().decode($0).event }
        let times = events.filter { $0.monitor == "forger" && $0.kind == "sample" }.map(\.time)
        #expect(times == [.max])
        #expect(result.stderr.contains("monitor forger: emits refused: 1 bad_time"), "\(result.stderr)")
        let text = try String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8)
        #expect(text.contains(#""time":"2262-04-11T23:47:16.854775807Z""#))
    }

    /// `n` flood events at `rate`/s (0: as fast as possible).
    static func floodManifest(_ dir: String, count: Int, rate: Int = 0, sink: String) throws -> String {
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        # In process: these tests are about sinks (and one limits the file
        # size, which a runner's ring could not be made under).
        isolation: none
        monitors:
          flood: { plugin: flood, options: { count: \(count), rate: \(rate) } }
        sinks:
          out: \(sink)
        """, to: manifest)
        return manifest
    }

    /// Everything a stream gives until its end.
    static func readToEnd(_ fd: Int32) -> [UInt8] {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        return received
    }

    /// The lines of whatever `fd` reads from its start.
    static func readLines(fd: Int32) -> [Substring] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var offset: off_t = 0
        while true {
            let n = pread(fd, &buffer, buffer.count, offset)
            if n <= 0 { break }
            data += buffer[0..<n]
            offset += off_t(n)
        }
        return String(decoding: data, as: UTF8.self).split(separator: "\n")
    }

    @Test func theFileSinkNoticesItsDirectoryDeletedAndRecreatesIt() throws {
        let dir = try TestEnv.tempDir()
        let path = dir + "/out/events.jsonl"
        let manifest = try Self.floodManifest(dir, count: 3000, rate: 2000, sink: "{ type: file, path: \(path), fsync: never }")
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--summary", dir + "/summary.json"])
        var st = stat()
        #expect(Self.waitUntil(20) { stat(path, &st) == 0 && st.st_size > 10_000 })
        // Keep the first file readable after it is unlinked, to count what went into it.
        let old = open(path, O_RDONLY | O_CLOEXEC)
        #expect(old >= 0)
        #expect(try TestEnv.run("/bin/rm", ["-rf", dir + "/out"]).status == 0)
        let result = vigil.wait(timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let before = Self.readLines(fd: old)
        close(old)
        let after = try Self.lines(path)
        #expect(!before.isEmpty && !after.isEmpty, "\(before.count) lines before the delete, \(after.count) after")
        let events = try (before.map(String.init) + after).map { try JSONLineDecoder().decode($0).event }
        #expect(events.filter { $0.kind == "flood" }.count == 3000)
        #expect(events.map(\.seq) == Array(1...UInt64(events.count)), "no event lost or repeated across the two files")
        let summary = try Self.summary(dir + "/summary.json")
        #expect(summary[sink: "out"]?.written == events.count)
        #expect(summary[sink: "out"]?.lostTotal == 0)
        #expect(result.stderr.contains("was deleted; made it again"), "the recreation is told: \(result.stderr)")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json"))) as? [String: Any]
        let transport = (json?["sinks"] as? [[String: Any]])?.first { $0["name"] as? String == "out" }?["transport"] as? [String: Int]
        #expect(transport?["directory_recreated"] == 1, "and counted: \(transport ?? [:])")
    }

    @Test func aLineTornByKill9IsEndedBeforeTheNextRunWrites() throws {
        let dir = try TestEnv.tempDir()
        let path = dir + "/events.jsonl"
        let manifest = try Self.floodManifest(dir, count: 0, sink: "{ type: file, path: \(path), fsync: never, overflow: block }")
        let first = try TestEnv.start(TestEnv.vigil, ["run", manifest])
        var st = stat()
        #expect(Self.waitUntil(20) { stat(path, &st) == 0 && st.st_size > 1 << 20 })
        first.signal(SIGKILL)
        _ = first.wait(timeout: 10)
        var text = try String(contentsOfFile: path, encoding: .utf8)
        if text.hasSuffix("\n") {
            // The kill fell between two writes: tear the last line as a write cut short would.
            let handle = FileHandle(forWritingAtPath: path)!
            handle.seekToEndOfFile()
            handle.write(Data(#"{"time":"2026-11-2"#.utf8))
            try handle.close()
            text = try String(contentsOfFile: path, encoding: .utf8)
        }
        let torn = text.split(separator: "\n").count
        let second = try TestEnv.run(TestEnv.vigil, ["run", try Self.floodManifest(dir, count: 10, sink: "{ type: file, path: \(path) }")],
                                     timeout: 30)
        #expect(second.status == 0, "\(second.stderr)")
        let lines = try Self.lines(path)
        // Only the torn line is not JSON; the second run's events are whole lines after it.
        #expect(lines.count == torn + 12)
        let bad = lines.indices.filter { (try? JSONLineDecoder().decode(lines[$0])) == nil }
        #expect(bad == [torn - 1])
        let again = try lines[torn...].map { try JSONLineDecoder().decode($0).event }
        #expect(again.map(\.seq) == Array(1...12))
    }

    @Test func aFullDiskHoldsABlockingSinksBatchUntilThereIsRoom() throws {
        // Disk full, simulated with RLIMIT_FSIZE (SIGXFSZ ignored: write fails
        // with EFBIG); room is made by moving the full file away, as logrotate would.
        let dir = try TestEnv.tempDir()
        let path = dir + "/events.jsonl"
        let manifest = try Self.floodManifest(dir, count: 8000, sink: "{ type: file, path: \(path), fsync: never, overflow: block, queue_size: 100 }")
        let vigil = try TestEnv.start("/bin/sh", ["-c", "ulimit -f 512 && trap '' XFSZ && exec \"$0\" \"$@\"", TestEnv.vigil,
                                                 "run", manifest, "--summary", dir + "/summary.json"])
        var moved: [String] = []
        var lastSize: off_t = -1
        var still = 0
        let deadline = Date().addingTimeInterval(60)
        while vigil.isRunning && Date() < deadline {
            usleep(50_000)
            var st = stat()
            guard stat(path, &st) == 0 else { continue }
            still = st.st_size == lastSize && st.st_size > 0 ? still + 1 : 0
            lastSize = st.st_size
            if still >= 4 {  // full: no growth for 200 ms
                let to = dir + "/full.\(moved.count)"
                rename(path, to)
                moved.append(to)
                still = 0
            }
        }
        let result = vigil.wait(timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(moved.count >= 2, "the limit was hit and room made \(moved.count) times")
        #expect(result.stderr.contains("holding"), "\(result.stderr)")
        var events: [Event] = []
        // The run may end while the file looks full (no growth for 200 ms),
        // and that last file then moves too: read whichever files there are.
        for file in moved + [path] where access(file, F_OK) == 0 {
            let text = try String(contentsOfFile: file, encoding: .utf8)
            #expect(text.isEmpty || text.hasSuffix("\n"), "\(file) ends with a whole line")
            events += try Self.lines(file).map { try JSONLineDecoder().decode($0).event }
        }
        #expect(events.filter { $0.kind == "flood" }.count == 8000)
        #expect(events.map(\.seq) == Array(1...UInt64(events.count)))
        let summary = try Self.summary(dir + "/summary.json")
        #expect(summary[sink: "out"]?.written == events.count)
        #expect(summary[sink: "out"]?.lostTotal == 0)
    }

    @Test func sigtermWithAProducerBlockedOnAFullSinkTakesOneDrainTimeout() throws {
        let dir = try TestEnv.tempDir()
        let manifest = try Self.floodManifest(dir, count: 0, sink: """
            { type: socket, connect: "unix:\(dir)/nobody.sock", overflow: block, queue_size: 100 }
            """)
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--drain-timeout", "2s", "--summary", dir + "/summary.json"])
        usleep(800_000)
        let signalled = Date()
        vigil.signal(SIGTERM)
        let result = vigil.wait(timeout: 30)
        let took = Date().timeIntervalSince(signalled)
        #expect(result.status == 3, "\(result.stderr)")
        #expect(took < 3.5, "shutdown took \(took) s with --drain-timeout 2s")
        let summary = try Self.summary(dir + "/summary.json")
        let out = try #require(summary[sink: "out"])
        #expect(out.written == 0)
        #expect(out.lost["queue_full"] == 0, "nothing was dropped for a full queue: block waits")
        #expect((out.lost["shutdown"] ?? 0) > 100)
        #expect(out.written + out.lostTotal == summary.events, "every sequenced event is delivered or counted lost")
        #expect(result.stderr.contains("lost: 0 queue_full, \(out.lost["shutdown"]!) shutdown"), "\(result.stderr)")
    }

    /// A TCP listener on 127.0.0.1 with a small receive buffer; returns (fd, port).
    /// The next connection to `listener`, waited for up to 20 s; -1 if none came.
    static func acceptNext(_ listener: Int32) -> Int32 {
        var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, 20_000) == 1 else { return -1 }
        return Sockets.accept(listener)
    }

    /// A flood of `count` to a TCP collector that has not read yet, the run
    /// ended by `--for 1s` with a 300 ms drain: the host and the collector's
    /// end of the connection.
    static func floodToCollector(_ dir: String, count: Int, queueSize: Int? = nil) throws -> (RunningProcess, Int32) {
        let (listener, port) = try tcpListener(receiveBuffer: 4096)
        defer { close(listener) }
        let queue = queueSize.map { ", queue_size: \($0)" } ?? ""
        let manifest = try floodManifest(dir, count: count, sink: """
            { type: socket, connect: "tcp://127.0.0.1:\(port)", overflow: block\(queue) }
            """)
        // Three seconds: under CI's load one second once went by before the
        // flood had emitted more than a slow collector takes, and the run
        // the test is about (a deadline in the middle of a stream) was not had.
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--for", "3s", "--drain-timeout", "300ms",
                                                      "--control", "none", "--summary", dir + "/summary.json"])
        return (vigil, acceptNext(listener))
    }

    /// `port` 0: any free one.
    static func tcpListener(receiveBuffer: Int32 = 16_384, port: UInt16 = 0) throws -> (Int32, UInt16) {
        // Close-on-exec: a listener inherited by the vigil under test would
        // stay open (and take connections into its backlog) after we close it.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var size = receiveBuffer
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var reuse: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = port.bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
        }
        guard ok, listen(fd, 4) == 0 else { throw TestFailure("tcp listener: \(errno)") }
        return (fd, UInt16(bigEndian: addr.sin_port))
    }

    @Test func aTCPCollectorThatStallsThenDiesCostsOnlyEventsCountedLost() throws {
        let dir = try TestEnv.tempDir()
        let (listener, port) = try Self.tcpListener()
        let manifest = try Self.floodManifest(dir, count: 0, sink: """
            { type: socket, connect: "tcp://127.0.0.1:\(port)", overflow: block, queue_size: 1000 }
            """)
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--drain-timeout", "1s", "--summary", dir + "/summary.json"])
        var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
        #expect(poll(&pfd, 1, 20_000) == 1)
        let peer = Sockets.accept(listener)
        // Read a while, then stop reading: the window closes, vigil's send queue fills.
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while received.count < 200_000 {
            let n = read(peer, &buffer, buffer.count)
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        var unread: Int32 = -1
        var stable = 0
        while stable < 5 {  // what waits in our receive queue stops growing
            usleep(100_000)
            var now: Int32 = 0
            _ = ioctl(peer, UInt(FIONREAD), &now)
            stable = now == unread ? stable + 1 : 0
            unread = now
        }
        // Everything the kernel took for us (read, or unread in the queue) counts as delivered to it.
        let peeked = recv(peer, &buffer, buffer.count, Int32(MSG_PEEK | MSG_DONTWAIT))
        received += buffer[0..<max(0, peeked)]
        // The collector dies with data unread (a reset), and nobody listens any more.
        close(listener)
        close(peer)
        usleep(500_000)
        vigil.signal(SIGTERM)
        let result = vigil.wait(timeout: 30)
        #expect(result.status == 3, "\(result.stderr)")
        let delivered = received.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
        let summary = try Self.summary(dir + "/summary.json")
        let out = try #require(summary[sink: "out"])
        #expect(delivered > 1000)
        #expect(out.written == delivered, "written counts only what reached the peer: \(out); unread \(unread), peeked \(peeked), received \(received.count)")
        #expect((out.lost["kernel_buffer"] ?? 0) > 1000, "the send queue's events are lost, and counted: \(out)")
        #expect(out.lost["queue_full"] == 0)
        #expect(out.written + out.lostTotal == summary.events, "\(out), \(summary.events) events")
        #expect(result.stderr.contains("never left the kernel's send queue"), "\(result.stderr)")
    }

    /// A collector that closes the connection: the sink says so, connects
    /// again, and counts both (issue 26: they happened without a word).
    @Test func aPeerThatClosesIsToldAndCountedAndConnectedToAgain() throws {
        let dir = try TestEnv.tempDir()
        let (listener, port) = try Self.tcpListener()
        defer { close(listener) }
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 20ms }
        sinks:
          out: { type: socket, connect: "tcp://127.0.0.1:\(port)", match: [beat], retry_min: 10ms, retry_max: 100ms }
        """, to: manifest)
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--for", "3s", "--control", "none",
                                                      "--summary", dir + "/summary.json"])
        let first = Self.acceptNext(listener)
        try #require(first >= 0)
        var scratch = [UInt8](repeating: 0, count: 4096)
        _ = read(first, &scratch, scratch.count)
        close(first)
        let second = Self.acceptNext(listener)
        try #require(second >= 0, "the sink connects again")
        defer { close(second) }
        let ender = Thread { _ = Self.readToEnd(second) }
        ender.start()
        let result = vigil.wait(timeout: 30)
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json"))) as? [String: Any]
        let transport = (json?["sinks"] as? [[String: Any]])?.first { $0["name"] as? String == "out" }?["transport"] as? [String: Int] ?? [:]
        #expect(transport["reconnected", default: 0] >= 1, "\(transport)")
        #expect(result.stderr.contains("connected to tcp://127.0.0.1:\(port) again"), "\(result.stderr)")
    }

    /// A disk-buffered socket sink whose peer was never reachable sent
    /// nothing: the next start replays every event as new, none as a
    /// possible duplicate (issue 26), and they all arrive.
    @Test func eventsNeverSentAreNotPossibleDuplicates() throws {
        let dir = try TestEnv.tempDir()
        let (listener, port) = try Self.tcpListener()
        close(listener)  // nobody listens there now
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 50ms }
        sinks:
          out:
            type: socket
            connect: "tcp://127.0.0.1:\(port)"
            match: [beat]
            buffer: { type: disk, path: \(dir)/buffer }
        """, to: manifest)
        let first = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "1s", "--drain-timeout", "300ms", "--control", "none"],
                                    timeout: 60)
        #expect(first.status == 0, "\(first.stderr)")
        // The peer now listens; the second run replays what the first kept.
        let (again, samePort) = try Self.tcpListener(port: port)
        defer { close(again) }
        #expect(samePort == port)
        let second = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--for", "1s", "--control", "none",
                                                       "--summary", dir + "/summary.json"])
        let peer = Self.acceptNext(again)
        try #require(peer >= 0)
        defer { close(peer) }
        let result = second.wait(timeout: 30)
        let lines = Self.readToEnd(peer).reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
        #expect(result.status == 0, "\(result.stderr)")
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: dir + "/summary.json"))) as? [String: Any]
        let sink = (json?["sinks"] as? [[String: Any]])?.first { $0["name"] as? String == "out" }
        let buffer = sink?["buffer"] as? [String: Any] ?? [:]
        let replayed = buffer["replayed"] as? Int ?? -1
        #expect(replayed >= 10, "\(buffer)")
        #expect(buffer["possible_duplicates"] as? Int == 0, "\(buffer)")
        #expect(lines >= replayed, "\(lines) lines, \(buffer)")
        #expect(result.stderr.contains("(0 of them sent before"), "\(result.stderr)")
    }

    /// What a healthy TCP collector has not taken when the drain deadline
    /// comes is handed on by the kernel after vigil exits: counted written
    /// and unconfirmed, not lost, and the run exits 0 (issue 26). The
    /// collector here reads nothing until vigil has ended, then everything.
    @Test func eventsInTheSendQueueAtExitAreUnconfirmedNotLost() throws {
        let dir = try TestEnv.tempDir()
        let (vigil, peer) = try Self.floodToCollector(dir, count: 1500)
        try #require(peer >= 0)
        defer { close(peer) }
        let result = vigil.wait(timeout: 30)
        let received = Self.readToEnd(peer)
        let lines = received.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
        let summary = try Self.summary(dir + "/summary.json")
        let out = try #require(summary[sink: "out"])
        #expect(result.status == 0, "\(result.stderr)")
        // The flood's 1500 and the host's own events.
        #expect(summary.events >= 1500)
        #expect(lines == summary.events && received.last == 10, "the kernel delivered every event after vigil ended")
        #expect(out.written == summary.events && out.lostTotal == 0, "\(out)")
        #expect(out.unconfirmed > 500, "\(out)")
        #expect(result.stderr.contains("unconfirmed"), "\(result.stderr)")
    }

    /// A drain deadline that comes while the collector, reading about
    /// 800 KB/s, is far behind: what the kernel had is delivered after exit
    /// (unconfirmed), what it never had is lost and counted exactly, and the
    /// stream ends at a line's end, not inside one.
    @Test func aDeadlineInTheMiddleOfAStreamCountsExactlyAndEndsAtALine() throws {
        let dir = try TestEnv.tempDir()
        let (vigil, peer) = try Self.floodToCollector(dir, count: 200_000, queueSize: 1000)
        try #require(peer >= 0)
        defer { close(peer) }
        final class SlowReader: Sendable {
            let received = Mutex<[UInt8]>([])
            let stop = Mutex(false)
        }
        let slow = SlowReader()
        let ended = DispatchSemaphore(value: 0)
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 16_384)
            while !slow.stop.withLock({ $0 }) {
                let n = read(peer, &buffer, buffer.count)
                if n <= 0 { break }
                slow.received.withLock { $0 += buffer[0..<n] }
                usleep(20_000)
            }
            ended.signal()
        }
        reader.start()
        let result = vigil.wait(timeout: 30)
        slow.stop.withLock { $0 = true }
        ended.wait()
        let received = slow.received.withLock { $0 } + Self.readToEnd(peer)
        let summary = try Self.summary(dir + "/summary.json")
        let out = try #require(summary[sink: "out"])
        let delivered = received.reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
        #expect(result.status == 3, "\(result.stderr)")
        #expect(received.last == 10, "the stream ends at a line's end")
        #expect(out.written == delivered, "\(out); \(delivered) received")
        #expect(out.unconfirmed > 0, "\(out)")
        #expect(out.lost["kernel_buffer", default: 0] == 0, "\(out)")
        #expect(out.written + out.lostTotal == summary.events, "\(out), \(summary.events) events")
    }

    @Test func twoHostsOnOneListenPathCannotBothClaimIt() throws {
        let dir = try TestEnv.tempDir()
        let socket = dir + "/events.sock"
        func manifest(_ name: String) throws -> String {
            let path = dir + "/\(name).yaml"
            try TestEnv.write("""
            plugin_dirs: [\(try TestEnv.cPlugins())]
            monitors:
              beat: { plugin: heartbeat, interval: 20ms }
            sinks:
              live: { type: socket, listen: "unix:\(socket)" }
            """, to: path)
            return path
        }
        let first = try TestEnv.start(TestEnv.vigil, ["run", try manifest("first"), "--for", "6s"])
        #expect(Self.waitUntil(20) { access(socket, F_OK) == 0 })
        let second = try TestEnv.run(TestEnv.vigil, ["run", try manifest("second"), "--for", "500ms"], timeout: 30)
        #expect(second.stderr.contains("\(socket) is held by another vigil (pid \(first.pid): \(TestEnv.vigil) run "), "\(second.stderr)")
        // The second host's exit left the first's socket in place, and working.
        #expect(access(socket, F_OK) == 0)
        let tail = try TestEnv.run(TestEnv.vigil, ["tail", "unix:\(socket)", "--count", "3", "--raw"], timeout: 10)
        #expect(tail.status == 0, "\(tail.stderr)")
        #expect(tail.stdout.split(separator: "\n").count == 3)
        first.signal(SIGINT)
        let result = first.wait(timeout: 15)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(access(socket, F_OK) != 0, "the owner removes its socket at exit")
        // The beats while no client was connected were not written, and not lost.
        let line = result.stderr.split(separator: "\n").first { $0.contains("sink live (socket): ") } ?? ""
        #expect(line.contains(" not sent: no client was connected") && line.contains("none lost"), "\(result.stderr)")
    }

    @Test func twoHostsStartedTogetherOnOneListenPathLeaveOneOwner() throws {
        let dir = try TestEnv.tempDir()
        let socket = dir + "/events.sock"
        let path = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          beat: { plugin: heartbeat, interval: 20ms }
        sinks:
          live: { type: socket, listen: "unix:\(socket)" }
        """, to: path)
        let a = try TestEnv.start(TestEnv.vigil, ["run", path, "--for", "1500ms", "--control", "none"])
        let b = try TestEnv.start(TestEnv.vigil, ["run", path, "--for", "3s", "--control", "none"])
        let first = a.wait(timeout: 30)
        // Whoever won, the path still answers after the host that exited first is gone.
        let held = [first.stderr].filter { $0.contains("is held by another vigil") }.count
        let tail = try TestEnv.run(TestEnv.vigil, ["tail", "unix:\(socket)", "--count", "2", "--raw"], timeout: 10)
        let second = b.wait(timeout: 30)
        let refusals = [first.stderr, second.stderr].filter { $0.contains("is held by another vigil") }.count
        #expect(refusals == 1, "exactly one host was refused the path")
        if held == 1 {
            #expect(tail.status == 0 && tail.stdout.split(separator: "\n").count == 2, "the owner still serves: \(tail.stderr)")
        }
    }
}
