import Foundation
import Synchronization
import VigilABI
import VigilIsolation

/// A sink's disk buffer: records appended to segment files in one
/// directory, read back in order by the sink's delivery thread, and removed
/// only once delivered (acknowledged).
///
/// Layout: `NNNNNNNNNNNNNNNN.seg` (the segment number, 16 hex digits), each a
/// run of records `magic u32 | length u32 | crc32c u32 | payload`, little
/// endian; and `state`, two lines `ack SEG OFFSET` and `sent SEG OFFSET`,
/// replaced by rename: everything before `ack` was delivered; what lies
/// between `ack` and `sent` was handed to the peer but not acknowledged when
/// the state was last written (after a crash it is sent again: possible
/// duplicates, counted).
///
/// Nothing read from the directory can trap or hang the host: a record with
/// a bad magic, an impossible length or a wrong checksum ends its segment's
/// readable part (the rest of that segment is skipped and counted, the next
/// segment is read); a truncated record at the end of the newest segment (a
/// crash in the middle of a write) is cut off at recovery; unknown files are
/// left alone.
package final class DiskBuffer: @unchecked Sendable {  // its segments and positions change only with `lock` held
    package enum Fsync: String, Sendable { case always, interval, never }

    package struct Position: Comparable, Equatable, Sendable, CustomStringConvertible {
        var segment: UInt64
        var offset: Int64
        package static func < (a: Position, b: Position) -> Bool { (a.segment, a.offset) < (b.segment, b.offset) }
        package var description: String { "\(segment):\(offset)" }
    }

    /// What recovery found.
    package struct Recovery: Sendable {
        /// Records not yet acknowledged: sent again.
        var pending = 0
        /// Of those, records handed to the peer before the stop or crash.
        var possibleDuplicates = 0
        /// A torn record at the end of the newest segment, cut off (bytes).
        var truncatedBytes: Int64 = 0
        /// `state` pointed past the data: ignored, everything sent again.
        var stateDistrusted = false
        /// Records `state` said were waiting that are not on disk (segments
        /// truncated or emptied from under the buffer): lost.
        var missingRecords = 0
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        /// Records of the refused `append` that were written before the
        /// refusal: they are in the buffer.
        package var written = 0
    }

    static let magic: UInt32 = 0x3147_4C56  // "VLG1" little endian
    static let headerBytes = 12
    /// The largest record accepted (an event's JSON line is far smaller).
    static let maxRecord = 16 << 20

    let directory: String
    let maxBytes: Int64
    let segmentBytes: Int64
    let fsync: Fsync
    /// Held for every change and read of the `var`s below, which the helpers
    /// change in place (so they stay the class's, not a `Mutex`'s value).
    private let lock = Mutex(())
    /// Segment numbers on disk, oldest first, and their sizes.
    private var segments: [(number: UInt64, size: Int64)] = []
    private var writeFD: Int32 = -1
    private var ack: Position
    private var sent: Position
    /// Where the delivery thread reads next (at or past `ack`).
    private var cursor: Position
    private(set) var recovery = Recovery()
    /// Records on disk not yet acknowledged.
    private(set) var pendingRecords = 0
    /// Records handed out by `read` and not yet acknowledged.
    private var readNotAcknowledged = 0
    /// Records skipped because their segment was corrupt, and segments so.
    private(set) var corruptSegments = 0
    private(set) var corruptBytes: Int64 = 0
    /// Segment numbers missing between two present (removed from under the buffer).
    private(set) var missingSegments = 0
    /// Times the directory was made again after it was removed from under the buffer.
    private(set) var directoryRecreated = 0
    private var dirty = false
    /// `DIR/lock`, held (flock) while the buffer is open: two sinks, or two
    /// hosts, never use one directory at once.
    private var lockFD: Int32 = -1

    var totalBytes: Int64 { lock.withLock { _ in segments.reduce(0) { $0 + $1.size } - ack.offset } }
    /// Records waiting (`pendingRecords`), read under the lock from any thread.
    var waiting: Int { lock.withLock { _ in pendingRecords } }

    init(directory: String, maxBytes: Int64, fsync: Fsync) throws {
        self.directory = directory
        self.maxBytes = maxBytes
        self.segmentBytes = max(64 << 10, min(64 << 20, maxBytes / 8))
        self.fsync = fsync
        ack = Position(segment: 1, offset: 0)
        sent = ack
        cursor = ack
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        // Records from it go to the peer as the host's own: a directory others
        // can write to would let them plant events.
        var st = stat()
        guard stat(directory, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw Failure(description: "\(directory) is not a directory")
        }
        if st.st_uid != geteuid() || st.st_mode & 0o022 != 0 {
            throw Failure(description: "\(directory) is \(st.st_uid != geteuid() ? "owned by uid \(st.st_uid), not this user" : "writable by others (mode \(String(st.st_mode & 0o777, radix: 8)))"): others could plant events in it; chmod 700 it, owned by the user vigil runs as")
        }
        lockFD = open(directory + "/lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lockFD >= 0 else {
            throw Failure(description: "cannot open \(directory)/lock: \(String(cString: strerror(errno)))")
        }
        // A child process forked by another thread of this process holds a
        // copy of a lock's descriptor until its exec closes it: a lock let go
        // a moment ago (a reload, a restart of the sink) may read as held
        // for that moment. Asked again for a second before it is refused.
        var held = flock(lockFD, LOCK_EX | LOCK_NB) != 0
        let deadline = monotonicNanoseconds() + 1_000_000_000
        while held && errno == EWOULDBLOCK && monotonicNanoseconds() < deadline {
            usleep(5_000)
            held = flock(lockFD, LOCK_EX | LOCK_NB) != 0
        }
        guard !held else {
            Glibc.close(lockFD)
            lockFD = -1
            throw Failure(description: "\(directory) is in use by another sink or another vigil (its lock is held)")
        }
        try recover()
    }

    deinit {
        if writeFD >= 0 { Glibc.close(writeFD) }
        if lockFD >= 0 { Glibc.close(lockFD) }
    }

    private func path(_ segment: UInt64) -> String {
        directory + "/" + String(format: "%016llx", segment) + ".seg"
    }

    // MARK: recovery

    private func recover() throws {
        var frontGap = false
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var numbers: [UInt64] = []
        for name in names where name.hasSuffix(".seg") && name.count == 20 {
            if let n = UInt64(name.dropLast(4), radix: 16), n > 0 { numbers.append(n) }
        }
        numbers.sort()
        for n in numbers {
            var st = stat()
            guard stat(path(n), &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            segments.append((n, Int64(st.st_size)))
        }
        if let (a, s) = readState() {
            ack = a
            sent = max(s, a)
            // A state ahead of the data it speaks of (tampered, or from
            // another directory) would skip records silently: distrust it,
            // and send everything again, every record a possible duplicate.
            let size = segments.first { $0.number == a.segment }?.size
            if let last = segments.last, a.segment > last.number || (size != nil && a.offset > size!) {
                recovery.stateDistrusted = true
                ack = Position(segment: segments[0].number, offset: 0)
                sent = Position(segment: last.number, offset: last.size)
            }
        } else if let first = segments.first {
            ack = Position(segment: first.number, offset: 0)
            sent = ack
            if FileManager.default.fileExists(atPath: directory + "/state") {
                // A state that says nothing usable (cut short, or emptied):
                // what it said was sent is unknown, so every record is.
                recovery.stateDistrusted = true
                sent = Position(segment: segments[segments.count - 1].number, offset: segments[segments.count - 1].size)
            }
        }
        // Segments wholly before `ack` were delivered: remove them.
        while let first = segments.first, first.number < ack.segment {
            unlink(path(first.number))
            segments.removeFirst()
        }
        if let first = segments.first, first.number > ack.segment {
            // The segment `state` points into is gone (it is never removed
            // before it is acknowledged whole): its records are lost.
            if FileManager.default.fileExists(atPath: directory + "/state") {
                frontGap = true
                missingSegments &+= Int(clamping: first.number &- ack.segment)
            }
            ack = Position(segment: first.number, offset: 0)
        }
        if segments.isEmpty { ack = Position(segment: max(1, ack.segment), offset: 0) }
        if ack.offset > (segments.first?.size ?? 0) { ack.offset = segments.first?.size ?? 0 }
        sent = max(sent, ack)
        cursor = ack
        // Count what waits, find the possible duplicates, and cut a torn tail.
        for (i, segment) in segments.enumerated() {
            let fd = open(path(segment.number), O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { Glibc.close(fd) }
            var offset: Int64 = segment.number == ack.segment ? ack.offset : 0
            while offset < segment.size {
                guard let length = recordLength(fd: fd, at: offset, size: segment.size) else { break }
                let position = Position(segment: segment.number, offset: offset)
                recovery.pending += 1
                if position < sent { recovery.possibleDuplicates += 1 }
                offset += Int64(Self.headerBytes + length)
            }
            if offset < segment.size && i == segments.count - 1 {
                recovery.truncatedBytes = segment.size - offset
                truncate(path(segment.number), off_t(offset))
                segments[i].size = offset
            }
        }
        pendingRecords = recovery.pending
        if let stated = statedRecords, recovery.pending < stated {
            recovery.missingRecords = stated - recovery.pending
        }
        // One count for what went missing before this start, however seen.
        if recovery.missingRecords > 0 || frontGap { corruptSegments += 1 }
        if let last = segments.last {
            writeFD = open(path(last.number), O_WRONLY | O_APPEND | O_CLOEXEC)
            if writeFD < 0 { throw Failure(description: "cannot open \(path(last.number)): \(String(cString: strerror(errno)))") }
        }
    }

    /// The length of the record at `offset` if its header is sound and it
    /// fits in the segment (the checksum is checked when it is read).
    private func recordLength(fd: Int32, at offset: Int64, size: Int64) -> Int? {
        var header = [UInt8](repeating: 0, count: Self.headerBytes)
        guard pread(fd, &header, Self.headerBytes, off_t(offset)) == Self.headerBytes else { return nil }
        let magic = Self.u32(header, 0), length = Int(Self.u32(header, 4))
        guard magic == Self.magic, length > 0, length <= Self.maxRecord,
              offset + Int64(Self.headerBytes + length) <= size else { return nil }
        return length
    }

    /// Records waiting when `state` was last written (`records N`); nil
    /// when it does not say.
    private var statedRecords: Int?

    private func readState() -> (Position, Position)? {
        guard let data = FileManager.default.contents(atPath: directory + "/state"), data.count < 4096,
              let text = String(data: data, encoding: .utf8) else { return nil }
        var ack: Position?, sent: Position?
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, parts[0] == "records", let n = Int(parts[1]), n >= 0 { statedRecords = n }
            guard parts.count == 3, let seg = UInt64(parts[1]), let off = Int64(parts[2]), off >= 0 else { continue }
            if parts[0] == "ack" { ack = Position(segment: seg, offset: off) }
            if parts[0] == "sent" { sent = Position(segment: seg, offset: off) }
        }
        guard let ack else { return nil }
        return (ack, sent ?? ack)
    }

    /// `ack`, `sent`, and how many records wait: appends only add to those,
    /// so finding fewer at the next start means records went missing.
    /// A state that could not be written whole (a full disk) replaces
    /// nothing: the one before stays, which says less was sent than was,
    /// so the next start sends more again (counted possible duplicates),
    /// never less.
    private func writeState() {
        let text = "ack \(ack.segment) \(ack.offset)\nsent \(sent.segment) \(sent.offset)\nrecords \(pendingRecords)\n"
        _ = Self.replace(directory + "/state", with: Array(text.utf8), fsync: fsync == .always)
    }

    /// Writes `bytes` to `path` whole or not at all: into a new file beside
    /// it, renamed over it once every byte was written (and synced, `fsync`).
    /// False, and `path` as it was, when the disk refused.
    static func replace(_ path: String, with bytes: [UInt8], fsync: Bool) -> Bool {
        let tmp = path + ".tmp"
        // Made anew, never through a link someone left in its place.
        unlink(tmp)
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        let whole = writeAll(bytes, to: fd) && (!fsync || Glibc.fsync(fd) == 0)
        Glibc.close(fd)
        guard whole else {
            unlink(tmp)
            return false
        }
        return rename(tmp, path) == 0
    }

    // MARK: writing

    /// Appends `payloads` as records, rolling to a new segment past the
    /// segment size. Throws when the disk refuses (full, read-only): the
    /// records from the first refused one on are not in the buffer.
    func append(_ payloads: [[UInt8]]) throws -> Int {
        try lock.withLock { _ in
            // Records count as in the buffer once their bytes were written.
            var written = 0
            var inChunk = 0
            var chunk: [UInt8] = []
            func flush() throws {
                guard !chunk.isEmpty else { return }
                try writeAll(chunk)
                segments[segments.count - 1].size += Int64(chunk.count)
                chunk.removeAll(keepingCapacity: true)
                written += inChunk
                pendingRecords += inChunk
                inChunk = 0
                dirty = true
            }
            do {
                if writeFD >= 0 && segmentRemoved() {
                    // Its segment (or the directory) was removed from under
                    // the buffer: what it held is lost (counted when read);
                    // what comes now goes to a fresh segment.
                    Glibc.close(writeFD)
                    writeFD = -1
                }
                for payload in payloads {
                    if writeFD < 0 || (segments.last!.size + Int64(chunk.count) >= segmentBytes && (segments.last!.size + Int64(chunk.count)) > 0) {
                        try flush()
                        try roll()
                    }
                    var header = [UInt8](repeating: 0, count: Self.headerBytes)
                    Self.put(Self.magic, &header, 0)
                    Self.put(UInt32(payload.count), &header, 4)
                    Self.put(CRC32C.checksum(payload), &header, 8)
                    chunk += header
                    chunk += payload
                    inChunk += 1
                }
                try flush()
                if fsync == .always { try sync() }
            } catch var failure as Failure {
                failure.written = written
                throw failure
            }
            return written
        }
    }

    /// Whether the segment being written is no longer in the directory.
    private func segmentRemoved() -> Bool {
        var st = stat()
        return fstat(writeFD, &st) == 0 && st.st_nlink == 0
    }

    private func writeAll(_ bytes: [UInt8]) throws {
        guard Self.writeAll(bytes, to: writeFD) else {
            let why = String(cString: strerror(errno))
            // A partial record must not stay: cut the segment back.
            if let last = segments.last { _ = ftruncate(writeFD, off_t(last.size)) }
            throw Failure(description: "cannot write to the disk buffer \(directory): \(why)")
        }
    }

    /// Writes every byte to `fd` (through EINTR and short writes); false,
    /// with errno, when the disk refused the rest.
    static func writeAll(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            done += n
        }
        return true
    }

    private func roll() throws {
        let next = (segments.last?.number ?? ack.segment - 1) + 1
        if writeFD >= 0 {
            if fsync != .never { _ = Glibc.fsync(writeFD) }
            Glibc.close(writeFD)
        }
        writeFD = open(path(next), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        if writeFD < 0 && errno == ENOENT && mkdir(directory, 0o700) == 0 {
            // The directory was removed from under the buffer (its segments
            // with it, counted lost when read): made again, as the file
            // sink makes its directory again.
            directoryRecreated += 1
            // Its lock went with it: held again, so that no other sink or
            // host takes the new directory.
            let fd = open(directory + "/lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            if fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 {
                if lockFD >= 0 { Glibc.close(lockFD) }
                lockFD = fd
            } else if fd >= 0 {
                Glibc.close(fd)
            }
            writeFD = open(path(next), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        }
        guard writeFD >= 0 else { throw Failure(description: "cannot create \(path(next)): \(String(cString: strerror(errno)))") }
        segments.append((next, 0))
    }

    /// fsync of the segment being written (the `interval` policy calls it on a timer).
    func sync() throws {
        guard dirty, writeFD >= 0 else { return }
        if Glibc.fsync(writeFD) != 0 { throw Failure(description: "fsync of the disk buffer failed: \(String(cString: strerror(errno)))") }
        dirty = false
    }

    func syncIfDirty() { lock.withLock { _ in try? sync() } }

    // MARK: reading and acknowledging

    /// Up to `max` records from the cursor, with the position after each.
    /// A corrupt record ends its segment: the rest is skipped and counted.
    func read(max count: Int) -> [(payload: [UInt8], end: Position)] {
        lock.withLock { _ in
            var out: [(payload: [UInt8], end: Position)] = []
            while out.count < count, let index = segments.firstIndex(where: { $0.number >= cursor.segment }) {
                let segment = segments[index]
                if segment.number > cursor.segment { cursor = Position(segment: segment.number, offset: 0) }
                if cursor.offset >= segment.size {
                    // The end of a segment that is not the newest: go on to the next.
                    guard index + 1 < segments.count else { break }
                    let next = segments[index + 1].number
                    if next != segment.number + 1 {
                        // Segments between were removed from under the buffer: their
                        // records are lost (counted once: at recovery when `state` said
                        // how many records waited).
                        if recovery.missingRecords == 0 { corruptSegments += 1 }
                        missingSegments &+= Int(clamping: next &- segment.number &- 1)
                    }
                    cursor = Position(segment: next, offset: 0)
                    continue
                }
                let fd = open(path(segment.number), O_RDONLY | O_CLOEXEC)
                guard fd >= 0 else {
                    skip(segment: index, from: cursor.offset)
                    continue
                }
                defer { Glibc.close(fd) }
                while out.count < count && cursor.offset < segment.size {
                    guard let length = recordLength(fd: fd, at: cursor.offset, size: segment.size) else {
                        skip(segment: index, from: cursor.offset)
                        break
                    }
                    var record = [UInt8](repeating: 0, count: Self.headerBytes + length)
                    guard pread(fd, &record, record.count, off_t(cursor.offset)) == record.count,
                          CRC32C.checksum(record[Self.headerBytes...]) == Self.u32(record, 8) else {
                        skip(segment: index, from: cursor.offset)
                        break
                    }
                    cursor.offset += Int64(record.count)
                    readNotAcknowledged += 1
                    out.append((Array(record[Self.headerBytes...]), cursor))
                }
            }
            return out
        }
    }

    /// Skips the rest of segment `index` from `offset` (corrupt): counted;
    /// the cursor moves to the next segment, or to the end of the newest.
    private func skip(segment index: Int, from offset: Int64) {
        let segment = segments[index]
        corruptSegments += 1
        corruptBytes += segment.size - offset
        if index + 1 < segments.count {
            cursor = Position(segment: segments[index + 1].number, offset: 0)
        } else {
            // The newest segment: later appends go to a fresh one.
            cursor = Position(segment: segment.number, offset: segment.size)
            if writeFD >= 0 { Glibc.close(writeFD); writeFD = -1 }
        }
        // What was in the skipped part is no longer pending: count again,
        // and say so in `state`, so the next start does not count them twice.
        pendingRecords = readNotAcknowledged + recordsFromCursor()
        writeState()
    }

    /// Records whose headers are sound from the cursor on.
    private func recordsFromCursor() -> Int {
        var count = 0
        for segment in segments where segment.number >= cursor.segment {
            let fd = open(path(segment.number), O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { Glibc.close(fd) }
            var offset: Int64 = segment.number == cursor.segment ? cursor.offset : 0
            while offset < segment.size, let length = recordLength(fd: fd, at: offset, size: segment.size) {
                count += 1
                offset += Int64(Self.headerBytes + length)
            }
        }
        return count
    }

    /// Marks what is being handed to the peer (persisted before the send).
    func markSent(upTo position: Position) {
        lock.withLock { _ in
            sent = max(sent, position)
            writeState()
        }
    }

    /// Everything before `position` was delivered: removed from the buffer.
    func acknowledge(upTo position: Position, records: Int) {
        lock.withLock { _ in
            ack = max(ack, position)
            sent = max(sent, ack)
            pendingRecords = max(0, pendingRecords - records)
            readNotAcknowledged = max(0, readNotAcknowledged - records)
            // Delivered segments go; the newest (being written) stays.
            while segments.count > 1 {
                let first = segments[0]
                guard first.number < ack.segment || (first.number == ack.segment && ack.offset >= first.size) else { break }
                unlink(path(first.number))
                segments.removeFirst()
                if ack.segment <= first.number { ack = Position(segment: segments[0].number, offset: 0) }
            }
            writeState()
        }
    }

    /// Removes the oldest segment not yet acknowledged (`when_full:
    /// drop_oldest`); returns the records it held. The cursor and `ack`
    /// move past it.
    func dropOldest() -> Int {
        lock.withLock { _ in
            guard segments.count > 1, let first = segments.first else { return 0 }
            var dropped = 0
            let fd = open(path(first.number), O_RDONLY | O_CLOEXEC)
            if fd >= 0 {
                var offset: Int64 = first.number == ack.segment ? ack.offset : 0
                while offset < first.size, let length = recordLength(fd: fd, at: offset, size: first.size) {
                    dropped += 1
                    offset += Int64(Self.headerBytes + length)
                }
                Glibc.close(fd)
            }
            unlink(path(first.number))
            segments.removeFirst()
            let next = Position(segment: segments[0].number, offset: 0)
            ack = max(ack, next)
            sent = max(sent, next)
            cursor = max(cursor, next)
            pendingRecords = max(0, pendingRecords - dropped)
            writeState()
            return dropped
        }
    }

    /// Bytes on disk not yet acknowledged, and whether `incoming` more would pass `max_size`.
    func wouldOverflow(adding incoming: Int) -> Bool {
        totalBytes + Int64(incoming) > maxBytes
    }

    func close() {
        lock.withLock { _ in
            if writeFD >= 0 {
                if fsync != .never { _ = Glibc.fsync(writeFD) }
                Glibc.close(writeFD)
                writeFD = -1
            }
            writeState()
            if lockFD >= 0 {
                Glibc.close(lockFD)
                lockFD = -1
            }
        }
    }

    static func u32(_ b: some RandomAccessCollection<UInt8>, _ at: Int) -> UInt32 {
        let i = b.index(b.startIndex, offsetBy: at)
        return UInt32(b[i]) | UInt32(b[b.index(i, offsetBy: 1)]) << 8 | UInt32(b[b.index(i, offsetBy: 2)]) << 16
            | UInt32(b[b.index(i, offsetBy: 3)]) << 24
    }

    static func put(_ v: UInt32, _ b: inout [UInt8], _ at: Int) {
        b[at] = UInt8(v & 0xFF)
        b[at + 1] = UInt8(v >> 8 & 0xFF)
        b[at + 2] = UInt8(v >> 16 & 0xFF)
        b[at + 3] = UInt8(v >> 24)
    }
}

/// CRC-32C (Castagnoli), table-driven: the checksum of a disk buffer record.
package enum CRC32C {
    static let table: [UInt32] = (0..<256).map { i -> UInt32 in
        var c = UInt32(i)
        for _ in 0..<8 { c = c & 1 != 0 ? 0x82F6_3B78 ^ (c >> 1) : c >> 1 }
        return c
    }

    static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var c: UInt32 = 0xFFFF_FFFF
        for b in bytes { c = table[Int((c ^ UInt32(b)) & 0xFF)] ^ (c >> 8) }
        return c ^ 0xFFFF_FFFF
    }
}
