import Foundation
import VigilABI
import Logging
import Synchronization
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Sinks and their queues, in-process, over real files and sockets.
/// How many lines a reader has seen so far.
final class Progress: Sendable {
    let lines = Atomic<Int>(0)
}

@Suite struct SinkTests {
    static func event(_ i: Int, monitor: String = "m") -> Event {
        Event(time: 1_700_000_000_000_000_000 + Int64(i), monitor: monitor, plugin: "p", kind: "sample",
              seq: UInt64(i), fields: [Field("i", .int(Int64(i)))])
    }

    static var quietLogger: Logger {
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        return logger
    }

    /// A queue whose sink is woken only to read (a prometheus sink): a
    /// poll's few events leave its consumer asleep; a batch's worth wakes
    /// it, and so does a drain, which is done once the pop after it has
    /// been written, not before. A drain asked of an ended consumer is done at once.
    @Test func aLazyQueueWakesItsConsumerForABatchOrADrainOnly() {
        let q = SinkQueue(capacity: 10_000, overflow: .dropNewest, lazy: true)
        let popped = Mutex<[(events: Int, number: UInt64)]>([])
        let stop = Atomic<Bool>(false)
        let consumer = Thread {
            var batch: [Event] = []
            var lines = EncodedLines()
            while !stop.load(ordering: .relaxed) {
                var number: UInt64 = 0
                _ = q.pop(into: &batch, lines: &lines, timeout: 10_000_000_000, number: &number)
                _ = q.takeWakeRequest()
                popped.withLock { $0.append((batch.count, number)) }
                batch.removeAll()
                q.finishDrains(throughPop: number)
            }
        }
        consumer.start()
        for _ in 0..<1000 where !q.consumerWaiting { usleep(5_000) }  // asleep on the empty queue
        for i in 1...10 { q.push(Self.event(i)) }
        usleep(300_000)
        #expect(popped.withLock { $0.isEmpty }, "a few events woke a lazy consumer")
        let drained = DispatchSemaphore(value: 0)
        q.requestDrain { drained.signal() }
        #expect(drained.wait(timeout: .now() + 5) == .success)
        #expect(popped.withLock { $0.map(\.events) } == [10])
        // A batch's worth wakes it without a drain (once it sleeps again: a
        // consumer still running after the drain takes whatever is queued).
        for _ in 0..<1000 where !q.consumerWaiting { usleep(5_000) }
        for i in 11...(10 + SinkQueue.batchThreshold) { q.push(Self.event(i)) }
        var waited = 0
        while popped.withLock({ $0.count }) < 2 && waited < 500 { usleep(10_000); waited += 1 }
        #expect(popped.withLock { $0.last?.events } == SinkQueue.batchThreshold)
        // A drain asked while nothing is queued is done after the next pop.
        q.requestDrain { drained.signal() }
        #expect(drained.wait(timeout: .now() + 5) == .success)
        stop.store(true, ordering: .relaxed)
        q.wake()
        while consumer.isExecuting { usleep(1_000) }
        q.finishDrains(throughPop: .max, ended: true)
        q.requestDrain { drained.signal() }
        #expect(drained.wait(timeout: .now()) == .success, "a drain of an ended consumer waited")
    }

    /// A drain asked while a batch is in the sink's hands waits for the pop
    /// after it, which takes what was queued since.
    @Test func aDrainWaitsForThePopAfterIt() {
        let q = SinkQueue(capacity: 100, overflow: .dropNewest, lazy: true)
        var batch: [Event] = []
        var lines = EncodedLines()
        var first: UInt64 = 0
        q.push(Self.event(1))
        _ = q.pop(into: &batch, lines: &lines, timeout: 1_000_000, number: &first)
        // Batch 1 is being written; event 2 comes, then a drain.
        q.push(Self.event(2))
        let done = Atomic<Bool>(false)
        q.requestDrain { done.store(true, ordering: .relaxed) }
        q.finishDrains(throughPop: first)
        let early = done.load(ordering: .relaxed)
        #expect(!early, "done before the event queued ahead of it was popped")
        batch.removeAll()
        var second: UInt64 = 0
        _ = q.pop(into: &batch, lines: &lines, timeout: 1_000_000, number: &second)
        #expect(batch.map(\.seq) == [2])
        q.finishDrains(throughPop: second)
        let after = done.load(ordering: .relaxed)
        #expect(after)
    }

    @Test func dropOldestKeepsTheNewestEvents() {
        let q = SinkQueue(capacity: 3, overflow: .dropOldest)
        for i in 1...5 { q.push(Self.event(i)) }
        var batch: [Event] = []
        _ = q.pop(into: &batch, timeout: 1_000_000)
        #expect(batch.map(\.seq) == [3, 4, 5])
        #expect(q.counters.dropped == 2)
    }

    @Test func dropOldestStaysBoundedWhenNothingDrains() {
        // A dead sink with drop_oldest: the queue keeps the newest `capacity`
        // events and its storage does not grow without bound.
        let q = SinkQueue(capacity: 100, overflow: .dropOldest)
        for i in 1...10_000 { q.push(Self.event(i)) }
        #expect(q.counters.depth == 100)
        var batch: [Event] = []
        _ = q.pop(into: &batch, timeout: 1_000_000)
        #expect(batch.map(\.seq) == (9_901...10_000).map(UInt64.init))
        #expect(batch.capacity < 1_000)
    }

    /// Lines made by the producers stay beside their events, whatever the
    /// overflow policy drops (drop_oldest skips a prefix, and compacts).
    /// Lines are made only while a batch's worth is queued (the sink's
    /// thread is behind); below that the sink makes them (empty here).
    @Test(arguments: [600, 2000])
    func linesMadeOnQueueingMatchTheirEventsAfterDrops(capacity: Int) {
        let q = SinkQueue(capacity: capacity, overflow: .dropOldest, lines: JSONLineEncoder(host: "h"))
        for i in 1...10_000 { q.push(Self.event(i)) }
        var batch: [Event] = []
        var lines = EncodedLines()
        _ = q.pop(into: &batch, lines: &lines, timeout: 1_000_000)
        #expect(batch.map(\.seq) == ((10_001 - capacity)...10_000).map(UInt64.init))
        #expect(lines.ends.count == batch.count)
        let expected = batch.map { JSONLineEncoder(host: "h").line($0) + "\n" }
        #expect(batch.indices.map { String(decoding: lines.line($0), as: UTF8.self) } == expected)

        // A queue the sink keeps up with: no line made.
        for i in 1...10 { q.push(Self.event(i)) }
        batch.removeAll()
        lines.removeAll(keepingCapacity: true)
        _ = q.pop(into: &batch, lines: &lines, timeout: 1_000_000)
        #expect(batch.count == 10 && lines.ends.count == 10 && lines.bytes.isEmpty)
    }

    @Test func dropNewestKeepsTheOldestEvents() {
        let q = SinkQueue(capacity: 3, overflow: .dropNewest)
        for i in 1...5 { q.push(Self.event(i)) }
        var batch: [Event] = []
        _ = q.pop(into: &batch, timeout: 1_000_000)
        #expect(batch.map(\.seq) == [1, 2, 3])
        #expect(q.counters.dropped == 2)
    }

    @Test func blockMakesTheProducerWaitAndLosesNothing() async {
        let q = SinkQueue(capacity: 2, overflow: .block)
        let producer = Thread {
            for i in 1...1000 where q.reserve() { q.pushReserved(Self.event(i)) }
            q.close()
        }
        producer.start()
        var all: [Event] = []
        var batch: [Event] = []
        while q.pop(into: &batch, timeout: 100_000_000) {
            all += batch
            batch.removeAll()
        }
        all += batch
        #expect(all.map(\.seq) == (1...1000).map(UInt64.init))
        #expect(q.counters.dropped == 0)
        #expect(q.counters.highWater <= 2)
    }

    @Test func closedQueueDrainsThenEnds() {
        let q = SinkQueue(capacity: 10, overflow: .dropOldest)
        q.push(Self.event(1))
        q.close()
        q.push(Self.event(2))
        var batch: [Event] = []
        #expect(q.pop(into: &batch, timeout: 1_000_000))
        #expect(batch.map(\.seq) == [1])
        batch.removeAll()
        #expect(!q.pop(into: &batch, timeout: 1_000_000))
        #expect(q.counters.dropped == 1)
    }

    func runner(_ sink: any EventSink, _ settings: any SinkSettings, queue: Int = 100_000, overflow: OverflowPolicy = .dropOldest) -> SinkRunner {
        let config = SinkConfig(name: "s", settings: settings, queueCapacity: queue, overflow: overflow,
                                location: SourceLocation(file: "t", line: 1, column: 1))
        return SinkRunner(config: config, sink: sink, logger: Self.quietLogger)
    }

    func readAll(_ fd: Int32, until count: Int, timeout: Double = 10, progress: Progress? = nil) -> [String] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        // `timeout` is how long the stream may be silent, not how long it may
        // take: producers in these tests run on the cooperative pool, which
        // other suites' blocking tests can starve for seconds.
        var deadline = Date().addingTimeInterval(timeout)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        var lines = 0
        while Date() < deadline && lines < count {
            guard poll(&pfd, 1, 100) == 1 else { continue }
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            deadline = Date().addingTimeInterval(timeout)
            data += buffer[0..<n]
            lines += buffer[0..<n].reduce(0) { $0 + ($1 == 10 ? 1 : 0) }
            progress?.lines.store(lines, ordering: .relaxed)
        }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    @Test func slowListenClientIsDisconnectedAndOthersStillGetEverything() async throws {
        let dir = try TestEnv.tempDir()
        let address = SocketAddress.unix(path: dir + "/s.sock")
        var config = SocketSinkConfig(mode: .listen(address))
        config.clientBuffer = 1 << 20
        let sink = SocketListenSink(address: address, config: config, host: "h")
        sink.bind(logger: Self.quietLogger)
        let r = runner(sink, config)
        r.start()
        let slow = try Sockets.connect(address)
        let fast = try Sockets.connect(address)
        var small: Int32 = 4096
        setsockopt(slow, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        try await Task.sleep(for: .milliseconds(120))  // accepted at the next tick
        let total = 20_000
        // The fast client reads everything; the producer waits for it after each
        // chunk, so it keeps up by construction however loaded the machine is.
        let progress = Progress()
        // A blocking reader belongs on a thread of its own, not on the (two-thread)
        // cooperative pool that the other tests share.
        let result = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            let lines = self.readAll(fast, until: total, progress: progress)
            result.withLock { $0 = lines }
            finished.signal()
        }
        // The producer too has a thread of its own: on the cooperative pool,
        // other suites' blocking tests could hold it past the reader's
        // patience (seen in full runs), and the reader would give up.
        let produced = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            for chunk in 0..<20 {
                for i in 1...1000 { r.queue.push(Self.event(chunk * 1000 + i)) }
                let deadline = Date().addingTimeInterval(10)
                while progress.lines.load(ordering: .relaxed) < (chunk + 1) * 1000 && Date() < deadline {
                    usleep(1000)
                }
            }
            produced.signal()
        }
        _ = produced.wait(timeout: .now() + 240)
        _ = finished.wait(timeout: .now() + 30)
        let lines = result.withLock { $0 }
        #expect(lines.count == total)
        #expect(lines.last.flatMap { try? JSONLineDecoder().decode($0).event.seq } == UInt64(total))
        // The slow client, which never read, was cut off rather than waited for.
        var scratch = [UInt8](repeating: 0, count: 1 << 20)
        var got = 0
        while true {
            let n = read(slow, &scratch, scratch.count)
            if n <= 0 { break }
            got += n
        }
        #expect(got < 20_000 * 100)
        close(slow); close(fast)
        await r.stop(drainTimeout: 1_000_000_000)
    }

    @Test func tcpConnectSinkBuffersWhileThePeerIsDownAndReconnects() async throws {
        // A port that is free now: bind, read it, close.
        let probe = try Sockets.listen(.tcp(host: "127.0.0.1", port: 0))
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(probe, $0, &len) } }
        let port = UInt16(bigEndian: addr.sin_port)
        close(probe)

        var config = SocketSinkConfig(mode: .connect(.tcp(host: "127.0.0.1", port: port)))
        config.reconnectMin = 10_000_000
        config.reconnectMax = 50_000_000
        let sink = SocketConnectSink(address: .tcp(host: "127.0.0.1", port: port), config: config, framing: JSONLinesFraming(host: "h"))
        let r = runner(sink, config)
        r.start()
        // Nobody listens yet: these wait in the queue and the batch being retried.
        for i in 1...100 { r.queue.push(Self.event(i)) }
        try await Task.sleep(for: .milliseconds(150))
        let listener = try Sockets.listen(.tcp(host: "127.0.0.1", port: port))
        let client = Sockets.accept(listener)
        let first = readAll(client, until: 100)
        #expect(first.count == 100)
        // The peer goes away; the next events reach the next connection.
        close(client)
        try await Task.sleep(for: .milliseconds(300))
        for i in 101...150 { r.queue.push(Self.event(i)) }
        let again = Sockets.accept(listener)
        let second = readAll(again, until: 50)
        let seqs = second.compactMap { try? JSONLineDecoder().decode($0).event.seq }
        #expect(seqs.suffix(50) == (101...150).map(UInt64.init))
        close(again); close(listener)
        await r.stop(drainTimeout: 500_000_000)
    }

    @Test func udpConnectSinkSendsOneDatagramPerEvent() async throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(fd, $0, len); _ = getsockname(fd, $0, &len) }
        }
        let port = UInt16(bigEndian: addr.sin_port)
        let config = SocketSinkConfig(mode: .connect(.udp(host: "127.0.0.1", port: port)))
        let r = runner(SocketConnectSink(address: .udp(host: "127.0.0.1", port: port), config: config, framing: JSONLinesFraming(host: "h")), config)
        r.start()
        for i in 1...3 { r.queue.push(Self.event(i)) }
        var datagrams: [String] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while datagrams.count < 3, poll(&pfd, 1, 5000) == 1 {
            let n = recv(fd, &buffer, buffer.count, 0)
            datagrams.append(String(decoding: buffer[0..<n], as: UTF8.self))
        }
        #expect(datagrams.count == 3)
        #expect(datagrams.allSatisfy { $0.hasSuffix("}\n") && $0.filter { $0 == "\n" }.count == 1 })
        close(fd)
        await r.stop(drainTimeout: 500_000_000)
    }

    @Test func fileSinkCreatesParentsAppendsAndFlushesOnStop() async throws {
        let dir = try TestEnv.tempDir()
        let path = dir + "/a/b/events.jsonl"
        try FileManager.default.createDirectory(atPath: dir + "/a", withIntermediateDirectories: true)
        try TestEnv.write("previous line\n", to: dir + "/a/keep.txt")
        var config = FileSinkConfig(path: path)
        config.fsync = .never
        let r = runner(FileSink(config: config, host: "h"), config)
        r.start()
        for i in 1...10 { r.queue.push(Self.event(i)) }
        await r.stop(drainTimeout: 1_000_000_000)
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 10)
        // A second run appends.
        let again = runner(FileSink(config: config, host: "h"), config)
        again.start()
        again.queue.push(Self.event(11))
        await again.stop(drainTimeout: 1_000_000_000)
        #expect(try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").count == 11)
        #expect(r.stats.written == 10 && r.stats.failed == 0)
    }

    @Test func unwritableFileCountsFailuresAndNeverCrashes() async throws {
        var config = FileSinkConfig(path: "/proc/vigil-cannot-write-here/events.jsonl")
        config.fsync = .never
        let r = runner(FileSink(config: config, host: "h"), config)
        r.start()
        for i in 1...5 { r.queue.push(Self.event(i)) }
        await r.stop(drainTimeout: 500_000_000)
        #expect(r.stats.failed == 5)
        #expect(r.stats.written == 0)
    }

    @Test func listenNeverRemovesAFileThatIsNotASocket() throws {
        let dir = try TestEnv.tempDir()
        let path = dir + "/events.jsonl"
        try TestEnv.write("precious\n", to: path)
        #expect(throws: Sockets.Failure.self) { try Sockets.listen(.unix(path: path)) }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "precious\n")
        // A stale socket nobody listens on is replaced; a live one is not.
        let first = try Sockets.listen(.unix(path: dir + "/s.sock"))
        #expect(throws: Sockets.Failure.self) { try Sockets.listen(.unix(path: dir + "/s.sock")) }
        close(first)
        let second = try Sockets.listen(.unix(path: dir + "/s.sock"))
        close(second)
    }

    /// A socket closed by its listener but still held for a moment by a
    /// child between fork and exec (here: a child given it on purpose, for
    /// 300 ms) is not "another process listening": listen waits it out. It
    /// refused at once, and a full test run saw it when a test spawned a
    /// process while another closed and listened again.
    @Test func listenWaitsOutAListenerHeldBrieflyByAChild() throws {
        let dir = try TestEnv.tempDir()
        let path = dir + "/s.sock"
        let first = try Sockets.listen(.unix(path: path))
        _ = fcntl(first, F_SETFD, 0)  // inherited by the child below
        var pid: pid_t = 0
        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("0.3"), nil]
        defer { for arg in argv { free(arg) } }
        #expect(posix_spawn(&pid, "/bin/sleep", nil, nil, argv, environ) == 0)
        close(first)
        let began = Date()
        let second = try Sockets.listen(.unix(path: path))
        close(second)
        #expect(Date().timeIntervalSince(began) < 1.1)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }

    @Test func logSinkLineIsReadable() {
        let e = Event(time: 0, monitor: "cpu", plugin: "cpu", kind: "sample",
                      fields: [Field("usage", .double(0.5)), Field("note", .string("two words")), Field("ok", .bool(true)), Field("n", .int(3))])
        #expect(LogSink.text(e) == #"cpu/sample usage=0.5 note="two words" ok=true n=3"#)
    }

    /// Six significant digits in a readable line, not the 17 that read back exactly.
    @Test(arguments: [(0.6015195397151164, "0.60152"), (0.0019982937332635037, "0.00199829"), (0.0, "0"), (-0.0, "0"),
                      (1.72, "1.72"), (25325268992.0, "25325268992"), (123456.789, "123457"), (-42.125, "-42.125"),
                      (0.00001234567, "1.23457e-05"), (1e20, "1e+20"), (Double.nan, "nan"), (-Double.infinity, "-inf"),
                      (0.99999999, "1"), (999999.5, "1000000")])
    func logSinkDoublesAreShort(_ value: Double, _ text: String) {
        #expect(LogSink.readable(value) == text)
    }

    @Test func everyInt64TimeEncodesAsAValidTimestampWithoutTrapping() throws {
        var encoder = JSONLineEncoder(host: "h")
        for (ns, text) in [(Int64.min, "1677-09-21T00:12:43.145224192Z"), (Int64.min + 1, "1677-09-21T00:12:43.145224193Z"),
                           (Int64.max, "2262-04-11T23:47:16.854775807Z"), (-1, "1969-12-31T23:59:59.999999999Z"),
                           (0, "1970-01-01T00:00:00.000000000Z")] {
            var out: [UInt8] = []
            encoder.encode(Event(time: ns, monitor: "m", plugin: "p", kind: "k"), into: &out)
            let line = String(decoding: out, as: UTF8.self)
            #expect(line.hasPrefix(#"{"time":"\#(text)","#), "\(ns): \(line)")
            _ = try JSONSerialization.jsonObject(with: Data(out))
            var stamp: [UInt8] = []
            JSONLineEncoder.appendTimestamp(ns, to: &stamp)
            #expect(String(decoding: stamp, as: UTF8.self) == text)
        }
    }

    @Test func saturatingArithmeticNeverTraps() {
        #expect(Int64.max.addingSaturating(1) == .max)
        #expect(Int64.min.addingSaturating(-1) == .min)
        #expect(Int64.min.subtractingSaturating(1) == .min)
        #expect(Int64.max.subtractingSaturating(-1) == .max)
        #expect((Int64.max / 2 + 1).multipliedSaturating(by: 2) == .max)
        #expect(Int64.min.multipliedSaturating(by: 2) == .min)
        #expect(Int64(3).multipliedSaturating(by: -2) == -6)
        // Timed waits take any deadline: past ones time out at once, the
        // farthest waits until woken.
        let wakeup = Wakeup()
        #expect(!wakeup.wait(until: .min))
        #expect(!wakeup.wait(until: 0))
        Thread.detachNewThread {
            usleep(20_000)
            wakeup.wake()
        }
        #expect(wakeup.wait(until: .max))
    }

    @Test func aHugeReconnectBackoffDoesNotTrap() async throws {
        // Nobody listens on this path; the backoff from the manifest is
        // doubled after the first failure: it must saturate, not trap.
        let dir = try TestEnv.tempDir()
        var config = SocketSinkConfig(mode: .connect(.unix(path: dir + "/nobody.sock")))
        config.reconnectMin = 60_000 * 86_400 * 1_000_000_000
        config.reconnectMax = .max
        let r = runner(SocketConnectSink(address: .unix(path: dir + "/nobody.sock"), config: config, framing: JSONLinesFraming(host: "h")), config)
        r.start()
        for i in 1...3 { r.queue.push(Self.event(i)) }
        try await Task.sleep(for: .milliseconds(200))
        await r.stop(drainTimeout: 100_000_000)
        #expect(r.stats.written == 0)
    }

    @Test func udpCountsEachRefusedDatagramOnceAndNeverAlsoAsWritten() async throws {
        // A bound, unread UDP socket: datagrams up to the limit are taken.
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        var big: Int32 = 4 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, socklen_t(MemoryLayout<Int32>.size))
        withUnsafeMutablePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = bind(fd, $0, len); _ = getsockname(fd, $0, &len) }
        }
        let port = UInt16(bigEndian: addr.sin_port)
        let config = SocketSinkConfig(mode: .connect(.udp(host: "127.0.0.1", port: port)))
        let r = runner(SocketConnectSink(address: .udp(host: "127.0.0.1", port: port), config: config, framing: JSONLinesFraming(host: "h")), config)
        r.start()
        // Every third event is over the 64 KiB datagram limit.
        for i in 1...30 {
            var e = Self.event(i)
            if i % 3 == 0 { e.fields.append(Field("blob", .string(String(repeating: "x", count: 70_000)))) }
            r.queue.push(e)
        }
        await r.stop(drainTimeout: 1_000_000_000)
        var got = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 17)
        while recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT)) > 0 { got += 1 }
        close(fd)
        #expect(got == 20)
        #expect(r.stats.written == 20)
        #expect(r.stats.lost.tooLarge == 10)
        #expect(r.stats.lost.total == 10)

        // The peer gone: each send the kernel refuses (ECONNREFUSED, from the
        // ICMP of an earlier datagram) is one loss; written + lost = sent.
        let gone = runner(SocketConnectSink(address: .udp(host: "127.0.0.1", port: port), config: config, framing: JSONLinesFraming(host: "h")), config)
        gone.start()
        for i in 1...200 { gone.queue.push(Self.event(i)) }
        await gone.stop(drainTimeout: 1_000_000_000)
        #expect(gone.stats.lost.writeFailed > 0)
        #expect(gone.stats.written + gone.stats.lost.total == 200)
    }
}
