import Foundation
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The disk buffer's files: records in order across segments, what a
/// restart finds (acknowledged, sent, torn), and corruption skipped with a
/// count, never a crash.
@Suite struct DiskBufferTests {
    static func payloads(_ range: Range<Int>, size: Int = 40) -> [[UInt8]] {
        range.map { i in Array("record \(i) ".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: size) }
    }

    /// Reads and acknowledges everything the buffer holds, `batch` at a
    /// time, as the delivery thread does; the records' texts in order.
    static func drain(_ buffer: DiskBuffer, batch: Int = 1000) -> [String] {
        var seen: [String] = []
        while true {
            let records = buffer.read(max: batch)
            if records.isEmpty { break }
            seen += text(records)
            buffer.acknowledge(upTo: records.last!.end, records: records.count)
        }
        return seen
    }

    static func text(_ records: [(payload: [UInt8], end: DiskBuffer.Position)]) -> [String] {
        records.map { String(decoding: $0.payload.prefix { $0 != UInt8(ascii: "x") }, as: UTF8.self) }
    }

    @Test func recordsComeBackInOrderAcrossSegmentsAndAcknowledgedSegmentsGo() throws {
        let dir = try TestEnv.tempDir("buffer-order")
        // 8 MiB: segments of 1 MiB.
        let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        _ = try buffer.append(Self.payloads(0..<30_000))
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".seg") }
        #expect(segments.count > 1)
        let seen = Self.drain(buffer)
        #expect(seen == (0..<30_000).map { "record \($0) " })
        #expect(buffer.pendingRecords == 0)
        // Only the segment being written is left.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".seg") }.count == 1)
    }

    @Test func aRestartSendsWhatWasNotAcknowledgedAndCountsWhatWasSent() throws {
        let dir = try TestEnv.tempDir("buffer-restart")
        do {
            let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .always)
            _ = try buffer.append(Self.payloads(0..<100))
            let first = buffer.read(max: 30)
            buffer.markSent(upTo: first.last!.end)
            buffer.acknowledge(upTo: first.last!.end, records: 30)
            let second = buffer.read(max: 20)
            buffer.markSent(upTo: second.last!.end)
            // A crash here: 20 handed to the peer, not acknowledged.
        }
        let again = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .always)
        #expect(again.recovery.pending == 70)
        #expect(again.recovery.possibleDuplicates == 20)
        #expect(Self.text(again.read(max: 1000)) == (30..<100).map { "record \($0) " })
    }

    /// A disk that refuses in the middle of an append (here the next
    /// segment's name is taken by a directory; on a full disk, ENOSPC):
    /// what was written before counts as in the buffer, the rest does not.
    @Test func aRefusedAppendCountsOnlyWhatReachedTheDisk() throws {
        let dir = try TestEnv.tempDir("buffer-refused")
        // 512 KiB: segments of 64 KiB.
        let buffer = try DiskBuffer(directory: dir, maxBytes: 512 << 10, fsync: .never)
        _ = try buffer.append(Self.payloads(0..<1))
        try FileManager.default.createDirectory(atPath: dir + "/0000000000000002.seg", withIntermediateDirectories: false)
        var written = -1
        do {
            _ = try buffer.append(Self.payloads(1..<3_000, size: 100))
        } catch let failure as DiskBuffer.Failure {
            written = failure.written
        }
        #expect(written > 0 && written < 2_999, "\(written)")
        #expect(buffer.pendingRecords == 1 + written)
        // What it counts is what comes back.
        let back = Self.drain(buffer)
        #expect(back == (0..<(1 + written)).map { "record \($0) " })
    }

    /// A `state` cut to nothing (written when the disk was full, by an
    /// earlier vigil) says nothing of what was sent: every record waiting
    /// is sent again as a possible duplicate, never as a first send.
    @Test func anEmptiedStateMakesEveryRecordAPossibleDuplicate() throws {
        let dir = try TestEnv.tempDir("buffer-empty-state")
        do {
            let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .always)
            _ = try buffer.append(Self.payloads(0..<50))
            let sent = buffer.read(max: 50)
            buffer.markSent(upTo: sent.last!.end)
        }
        try Data().write(to: URL(fileURLWithPath: dir + "/state"))
        let again = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .always)
        #expect(again.recovery.stateDistrusted)
        #expect(again.recovery.pending == 50 && again.recovery.possibleDuplicates == 50)
        #expect(Self.text(again.read(max: 100)) == (0..<50).map { "record \($0) " })
    }

    /// The directory removed while the buffer is in use: the next append
    /// makes it again (with its lock) and goes on; what the removed
    /// segments held is counted when it is read, not delivered.
    @Test func aDirectoryRemovedFromUnderTheBufferIsMadeAgain() throws {
        let parent = try TestEnv.tempDir("buffer-removed")
        let dir = parent + "/buf"
        let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        _ = try buffer.append(Self.payloads(0..<10))
        try FileManager.default.removeItem(atPath: dir)
        #expect(try buffer.append(Self.payloads(10..<20)) == 10)
        #expect(buffer.directoryRecreated == 1)
        #expect(FileManager.default.fileExists(atPath: dir + "/lock"))
        let back = Self.drain(buffer, batch: 100)
        #expect(back == (10..<20).map { "record \($0) " })
        #expect(buffer.corruptSegments >= 1)
        // A second buffer cannot take the new directory.
        #expect(throws: DiskBuffer.Failure.self) { try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never) }
    }

    @Test func aTornRecordAtTheEndIsCutAndNewRecordsFollowIt() throws {
        let dir = try TestEnv.tempDir("buffer-torn")
        do {
            let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
            _ = try buffer.append(Self.payloads(0..<10))
        }
        let segment = dir + "/0000000000000001.seg"
        let handle = try #require(FileHandle(forWritingAtPath: segment))
        handle.seekToEndOfFile()
        handle.write(Data([0x56, 0x4C, 0x47, 0x31, 0xFF, 0x00]))  // half a header
        handle.closeFile()
        let again = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        #expect(again.recovery.truncatedBytes == 6)
        #expect(again.recovery.pending == 10)
        _ = try again.append(Self.payloads(10..<12))
        #expect(Self.text(again.read(max: 100)) == (0..<12).map { "record \($0) " })
    }

    @Test func aCorruptRecordEndsItsSegmentWhichIsCountedAndTheNextIsRead() throws {
        let dir = try TestEnv.tempDir("buffer-corrupt")
        let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        _ = try buffer.append(Self.payloads(0..<20_000))  // two segments at least
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".seg") }.sorted()
        #expect(segments.count >= 2)
        // Flip a byte in the middle of the first segment's tenth record's payload.
        let first = dir + "/" + segments[0]
        var bytes = try Data(contentsOf: URL(fileURLWithPath: first))
        let recordBytes = DiskBuffer.headerBytes + Self.payloads(9..<10)[0].count
        bytes[9 * recordBytes + DiskBuffer.headerBytes + 3] ^= 0xFF
        try bytes.write(to: URL(fileURLWithPath: first))
        let seen = Self.drain(buffer, batch: 5000)
        #expect(seen.prefix(9) == ArraySlice((0..<9).map { "record \($0) " }))
        #expect(buffer.corruptSegments == 1 && buffer.corruptBytes > 0)
        // Everything of the second segment on arrived.
        #expect(seen.last == "record 19999 ")
        #expect(!seen.contains("record 9 "))
    }

    @Test func garbageInTheDirectoryIsNeverACrash() throws {
        let dir = try TestEnv.tempDir("buffer-garbage")
        try TestEnv.write("ack 99999999999999999999 -5\nsent x y\n", to: dir + "/state")
        try Data((0..<4096).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: dir + "/0000000000000001.seg"))
        var huge = Data([0x56, 0x4C, 0x47, 0x31])  // the magic, then a length of 4 GiB - 1
        huge += Data([0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0])
        try huge.write(to: URL(fileURLWithPath: dir + "/0000000000000002.seg"))
        try TestEnv.write("not a segment", to: dir + "/notes.txt")
        try FileManager.default.createDirectory(atPath: dir + "/0000000000000003.seg", withIntermediateDirectories: true)
        let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        #expect(buffer.read(max: 100).isEmpty)
        _ = try buffer.append(Self.payloads(0..<3))
        #expect(Self.text(buffer.read(max: 100)) == (0..<3).map { "record \($0) " })
        #expect(FileManager.default.fileExists(atPath: dir + "/notes.txt"))
    }

    @Test func dropOldestRemovesAWholeSegmentAndSaysHowManyRecords() throws {
        let dir = try TestEnv.tempDir("buffer-drop")
        let buffer = try DiskBuffer(directory: dir, maxBytes: 1 << 20, fsync: .never)  // 128 KiB segments
        _ = try buffer.append(Self.payloads(0..<10_000))
        let before = buffer.pendingRecords
        let dropped = buffer.dropOldest()
        #expect(dropped > 0 && buffer.pendingRecords == before - dropped)
        #expect(Self.text(buffer.read(max: 1)) == ["record \(dropped) "])
        #expect(buffer.wouldOverflow(adding: 2 << 20))
    }

    @Test func oneDirectoryIsHeldByOneBufferAtATime() throws {
        let dir = try TestEnv.tempDir("buffer-lock")
        let first = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        #expect(throws: DiskBuffer.Failure.self) { try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never) }
        first.close()
        _ = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
    }

    @Test func aSegmentRemovedFromUnderTheBufferIsCountedAndAStateAheadIsDistrusted() throws {
        let dir = try TestEnv.tempDir("buffer-missing")
        do {
            let buffer = try DiskBuffer(directory: dir, maxBytes: 1 << 20, fsync: .never)  // 128 KiB segments
            _ = try buffer.append(Self.payloads(0..<10_000))
            buffer.close()
        }
        let segments = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".seg") }.sorted()
        #expect(segments.count >= 3)
        try FileManager.default.removeItem(atPath: dir + "/" + segments[1])
        let again = try DiskBuffer(directory: dir, maxBytes: 1 << 20, fsync: .never)
        while !again.read(max: 1000).isEmpty {}
        #expect(again.corruptSegments == 1 && again.missingSegments == 1)
        again.close()

        // A state that points past the data: everything again, all possibly duplicates.
        try TestEnv.write("ack 999 5\nsent 999 5\n", to: dir + "/state")
        let distrusting = try DiskBuffer(directory: dir, maxBytes: 1 << 20, fsync: .never)
        #expect(distrusting.recovery.stateDistrusted)
        #expect(distrusting.recovery.pending > 0 && distrusting.recovery.possibleDuplicates == distrusting.recovery.pending)
    }

    @Test func aDirectoryOthersCanWriteIsRefused() throws {
        let dir = try TestEnv.tempDir("buffer-mode")
        chmod(dir, 0o777)
        #expect(throws: DiskBuffer.Failure.self) { try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never) }
        chmod(dir, 0o700)
        _ = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
    }

    @Test func segmentsEmptiedFromUnderTheBufferAreCountedMissing() throws {
        let dir = try TestEnv.tempDir("buffer-emptied")
        do {
            let buffer = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
            _ = try buffer.append(Self.payloads(0..<500))
            let first = buffer.read(max: 100)
            buffer.acknowledge(upTo: first.last!.end, records: 100)  // state: 400 waiting
            buffer.close()
        }
        for name in try FileManager.default.contentsOfDirectory(atPath: dir) where name.hasSuffix(".seg") {
            truncate(dir + "/" + name, 0)
        }
        let again = try DiskBuffer(directory: dir, maxBytes: 8 << 20, fsync: .never)
        #expect(again.recovery.missingRecords == 400)
        #expect(again.corruptSegments == 1)
    }

    /// What the buffer remembers of its events' monitors: written once per
    /// instance, read back by the next process, per monitor and plugin (a
    /// name the manifest gave another plugin since keeps its own), and a
    /// file left garbled, hostile or huge is not used, and said.
    @Test func theMonitorsOfBufferedEventsAreRememberedAndAGarbledFileIsNot() throws {
        let dir = try TestEnv.tempDir("remembered")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        func description(_ plugin: String) -> PluginDescription {
            PluginDescription(
                name: plugin, version: "1", summary: "", abiMajor: 1, abiMinor: 4, options: [],
                events: [EventSpec(kind: "tick", doc: "", fields: [FieldSpec(name: "entity", type: .int, identity: true)])],
                defaultInterval: 1_000_000_000, polled: false, path: "/x/\(plugin).so")
        }
        final class Instance: Sendable {}
        let first = Instance(), second = Instance()
        let flood = MonitorFacts(instance: ObjectIdentifier(first), description: description("flood"), interval: 2_000_000_000, running: true)
        let batch = [Event(time: 0, monitor: "f", plugin: "flood", kind: "tick", fields: [Field("entity", .int(1))]),
                     Event(time: 0, monitor: "gone", plugin: "x", kind: "tick", fields: [])]
        var asked = 0
        let remembered = RememberedMonitors(bufferDirectory: dir)
        for _ in 0..<3 {
            remembered.note(batch) { monitor in
                asked += 1
                return monitor == "f" ? flood : nil
            }
        }
        #expect(asked == 6 && remembered.untold() == nil)
        // The same name, another plugin, after a reload: a line of its own.
        let beat = MonitorFacts(instance: ObjectIdentifier(second), description: description("beat"), interval: 1_000_000_000, running: true)
        remembered.note([Event(time: 0, monitor: "f", plugin: "beat", kind: "tick", fields: [])]) { _ in beat }
        let lines = try String(contentsOfFile: dir + "/monitors.jsonl", encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 2, "\(lines.count) lines")
        let next = RememberedMonitors(bufferDirectory: dir)
        let kept = try #require(next.facts(of: "f", plugin: "flood"))
        #expect(kept.description == description("flood") && kept.interval == 2_000_000_000 && !kept.running)
        #expect(next.facts(of: "f")?.description.name == "beat" && next.facts(of: "gone") == nil && next.facts().count == 1)
        // Behind the process's directory: a running monitor's facts first, the remembered one's when the event's plugin is another.
        let seen = MonitorDirectory(MonitorDirectory(), remembering: next)
        #expect(seen.facts(of: "f", plugin: "flood")?.description.name == "flood")
        // Torn, hostile or too large: the bad lines skipped (and said), the good kept; a huge file not read at all.
        let good = lines[0]
        try TestEnv.write("{not json\n" + good + "\n" + #"{"monitor":"f","interval_ns":1,"description":{"name":""}}"# + "\n{\"monitor\":", to: dir + "/monitors.jsonl")
        let torn = RememberedMonitors(bufferDirectory: dir)
        #expect(torn.facts().count == 1 && torn.untold()?.contains("3 lines that are no monitor's description skipped") == true)
        // A line appended after the torn one is its own (the torn one is ended first), and the file is compacted.
        let third = Instance()
        torn.note([Event(time: 0, monitor: "b", plugin: "beat", kind: "tick", fields: [])]) { _ in
            MonitorFacts(instance: ObjectIdentifier(third), description: description("beat"), interval: 1_000_000_000, running: true)
        }
        let mended = RememberedMonitors(bufferDirectory: dir)
        #expect(mended.facts(of: "b", plugin: "beat") != nil && mended.facts(of: "f", plugin: "flood") != nil && mended.untold() == nil)
        let fd = open(dir + "/monitors.jsonl", O_WRONLY | O_TRUNC)
        #expect(ftruncate(fd, off_t(RememberedMonitors.maxFileBytes + 1)) == 0)
        close(fd)
        let huge = RememberedMonitors(bufferDirectory: dir)
        #expect(huge.facts().isEmpty && huge.untold()?.contains("not read") == true)
        // A link left where the file is written is not followed.
        try FileManager.default.removeItem(atPath: dir + "/monitors.jsonl")
        try TestEnv.write("victim\n", to: dir + "/victim")
        #expect(symlink(dir + "/victim", dir + "/monitors.jsonl") == 0)
        let linked = RememberedMonitors(bufferDirectory: dir)
        linked.note(batch) { $0 == "f" ? flood : nil }
        #expect(try String(contentsOfFile: dir + "/victim", encoding: .utf8) == "victim\n")
        #expect(linked.untold()?.contains("cannot") == true)
    }
}
