import Foundation
import Logging
import Synchronization
import SystemPackage
import VigilABI
import VigilCore

/// Discards every event: measures the host without any output cost.
final class NullSink: EventSink {
    func write(_ batch: [Event], context: SinkContext) throws {}
    func shutdown(context: SinkContext) {}
}

/// One readable line per event through swift-log (text), or JSON Lines, on
/// stderr or stdout.
final class LogSink: EventSink, @unchecked Sendable {
    private let config: LogSinkConfig
    private var encoder: JSONLineEncoder
    private var logger: Logger
    private var buffer: [UInt8] = []

    init(config: LogSinkConfig, host: String) {
        self.config = config
        self.encoder = JSONLineEncoder(host: host)
        let fd: Int32 = config.stream == .stdout ? 1 : 2
        var logger = Logger(label: "events") { label in VigilLogHandler(label: label, fileDescriptor: fd, showLabel: false) }
        logger.logLevel = .trace
        self.logger = logger
    }

    func write(_ batch: [Event], context: SinkContext) throws {
        switch config.format {
        case .json:
            // The host's own log lines share this stream. Writes of at most
            // PIPE_BUF bytes, cut at line ends, are atomic on a pipe, so a host
            // line never lands inside an event line.
            let fd = FileDescriptor(rawValue: config.stream == .stdout ? 1 : 2)
            buffer.removeAll(keepingCapacity: true)
            for event in batch {
                let before = buffer.count
                encoder.encode(event, into: &buffer)
                if buffer.count > Int(PIPE_BUF) && before > 0 {
                    try fd.writeAll(buffer[..<before])
                    buffer.removeFirst(before)
                }
            }
            try fd.writeAll(buffer)
        case .text:
            for event in batch {
                logger.log(level: event.severity.logLevel, "\(LogSink.text(event))")
            }
        }
    }

    /// `cpu/sample usage=0.12 user=0.08 message="two words"`
    static func text(_ event: Event) -> String {
        var s = "\(event.monitor)/\(event.kind)"
        for field in event.fields {
            s += " \(field.name)="
            switch field.value {
            case .double(let d): s += "\(d)"  // nan and inf read as such in a log line
            case .int(let i): s += "\(i)"
            case .bool(let b): s += b ? "true" : "false"
            case .string(let str):
                if str.isEmpty || str.contains(where: { $0 == " " || $0 == "\"" || $0 == "=" || $0.isNewline || $0.asciiValue.map { $0 < 0x20 } == true }) {
                    var quoted: [UInt8] = []
                    JSONLineEncoder.appendString(str, to: &quoted)
                    s += String(decoding: quoted, as: UTF8.self)
                } else {
                    s += str
                }
            }
        }
        return s
    }

    func shutdown(context: SinkContext) {}
}

/// JSON Lines appended to a file: created (mode 0640, with parent directories)
/// on first write, rotated by size keeping N files, reopened on SIGHUP
/// (logrotate's move-then-signal), fsync'd per policy, flushed on exit.
///
/// Before each batch it checks that the file it holds open is still the one
/// at its path: a file deleted (its directory too) or replaced under it is
/// reopened, recreated as on first write, rather than written into unseen.
/// A file that does not end in a newline (a line torn by kill -9 or a crash)
/// gets one before the first new line. A failed write never leaves half a
/// line; with `overflow: block` the batch is held and retried with backoff
/// (the producers wait, as `block` promises) until it goes through or the
/// drain deadline passes at shutdown; otherwise it is lost (`write_failed`).
final class FileSink: EventSink, @unchecked Sendable {
    private let config: FileSinkConfig
    private let holdFailedBatches: Bool
    private var encoder: JSONLineEncoder
    private var fd: FileDescriptor?
    private var size: Int64 = 0
    private var buffer: [UInt8] = []
    /// Events whose lines are in `buffer`, and events of this batch already in the file.
    private var buffered = 0
    private var flushed = 0
    private var dirty = false
    private let reopenRequested = Atomic<Bool>(false)

    /// The first and longest wait between retries of a held batch.
    static let retryMin: Int64 = 100_000_000
    static let retryMax: Int64 = 5_000_000_000

    init(config: FileSinkConfig, host: String, holdFailedBatches: Bool = false) {
        self.config = config
        self.holdFailedBatches = holdFailedBatches
        self.encoder = JSONLineEncoder(host: host)
        buffer.reserveCapacity(1 << 20)
    }

    /// Only an unsynced file under `fsync: interval` needs a tick; SIGHUP wakes the thread.
    var tickInterval: Int64 { config.fsync == .interval && dirty ? config.fsyncInterval : SinkTicks.never }

    func requestReopen() { reopenRequested.store(true, ordering: .releasing) }

    /// The lines are made by the producers; this thread writes them.
    var producerLines: JSONLineEncoder? { encoder }

    func write(_ batch: [Event], context: SinkContext) throws {
        if reopenRequested.exchange(false, ordering: .acquiring) { closeFile(context: context) }
        buffer.removeAll(keepingCapacity: true)
        buffered = 0
        flushed = 0
        let lines = context.lines
        do {
            for i in batch.indices {
                let before = buffer.count
                // A line the producer made, or made here.
                if let line = lines?.line(i), !line.isEmpty {
                    buffer.append(contentsOf: line)
                } else {
                    encoder.encode(batch[i], into: &buffer)
                }
                if let limit = config.rotateSize, size.addingSaturating(Int64(buffer.count)) > limit,
                   size + Int64(before) > 0 {
                    // This line would carry the file past its size: write what
                    // came before it, rotate, and start the new file with it.
                    let line = Array(buffer[before...])
                    buffer.removeSubrange(before...)
                    try flushBuffer(context: context)
                    try rotate(context: context)
                    buffer.append(contentsOf: line)
                }
                buffered += 1
            }
            try flushBuffer(context: context)
        } catch {
            buffer.removeAll(keepingCapacity: true)
            throw SinkWriteError(delivered: flushed, error)
        }
        if config.fsync == .always, let fd { sync(fd, context: context) }
    }

    /// Writes `buffer` (whole lines) to the file; with `holdFailedBatches`,
    /// retries a failure with backoff until it succeeds or the sink must give up.
    private func flushBuffer(context: SinkContext) throws {
        guard !buffer.isEmpty else { return }
        var backoff = Self.retryMin
        var logged = false
        while true {
            do {
                try flushOnce(context: context)
                if logged { context.logger.notice("writing to \(config.path) again") }
                return
            } catch {
                guard holdFailedBatches, !context.shouldAbandon else { throw error }
                if !logged {
                    context.logger.error("cannot write to \(config.path): \(error); holding \(buffered) events and retrying (overflow: block)")
                    logged = true
                }
                context.pause(backoff)
                backoff = min(backoff.multipliedSaturating(by: 2), Self.retryMax)
            }
        }
    }

    private func flushOnce(context: SinkContext) throws {
        let fd = try openIfNeeded(context: context)
        do {
            try fd.writeAll(buffer)
        } catch {
            // A write cut short (disk full, I/O error) would leave half a line
            // for the next one to be appended to: cut the file back to the last
            // whole line. We are its only writer.
            _ = ftruncate(fd.rawValue, off_t(size))
            throw error
        }
        size += Int64(buffer.count)
        buffer.removeAll(keepingCapacity: true)
        flushed += buffered
        buffered = 0
        dirty = true
    }

    /// fsync, reporting a failure (the data may not be on disk).
    private func sync(_ fd: FileDescriptor, context: SinkContext?) {
        if fsync(fd.rawValue) != 0 {
            context?.logger.error("fsync of \(config.path) failed: \(String(cString: strerror(errno)))")
        }
        dirty = false
    }

    func tick(context: SinkContext) {
        if reopenRequested.exchange(false, ordering: .acquiring) {
            closeFile(context: context)
            context.logger.info("reopening \(config.path)")
        }
        if config.fsync == .interval, dirty, let fd {
            sync(fd, context: context)
        }
    }

    func shutdown(context: SinkContext) {
        closeFile(context: context)
    }

    /// The open file, if it is still the one at the path; else the file at
    /// the path, opened (created with its directories if need be).
    private func openIfNeeded(context: SinkContext? = nil) throws -> FileDescriptor {
        var reopening = false
        if let fd {
            if isStillAtPath(fd) { return fd }
            // Deleted or replaced under us: what went into it before stays
            // there; what comes now goes to the path.
            closeFile(context: nil)
            reopening = true
        }
        if try FileSink.makeParentDirectories(of: config.path), reopening {
            context?.logger.warning("the directory of \(config.path) was deleted; made it again")
            context?.count(.directoryRecreated)
        } else if reopening {
            context?.logger.notice("\(config.path) was deleted or replaced; writing to a new file there")
            context?.count(.fileReopened)
        }
        let permissions: FilePermissions = [.ownerReadWrite, .groupRead]
        let fd: FileDescriptor
        do {
            // A file we create gets exactly 0640, whatever the umask.
            fd = try FileDescriptor.open(FilePath(config.path), .writeOnly,
                                         options: [.append, .create, .exclusiveCreate, .closeOnExec], permissions: permissions)
            _ = fchmod(fd.rawValue, permissions.rawValue)
        } catch Errno.fileExists {
            fd = try FileDescriptor.open(FilePath(config.path), .writeOnly, options: [.append, .closeOnExec])
        }
        var st = stat()
        size = fstat(fd.rawValue, &st) == 0 ? Int64(st.st_size) : 0
        self.fd = fd
        if size > 0 && !FileSink.endsWithNewline(config.path, size: size) {
            // A line torn by a crash or kill -9: end it, so the next event
            // starts a line of its own (the torn one stays invalid JSON alone).
            if (try? fd.writeAll([UInt8(ascii: "\n")])) != nil { size += 1 }
        }
        return fd
    }

    /// Whether `fd` is the file at the path: not unlinked, same device and inode.
    private func isStillAtPath(_ fd: FileDescriptor) -> Bool {
        var open = stat(), atPath = stat()
        guard fstat(fd.rawValue, &open) == 0, open.st_nlink > 0, stat(config.path, &atPath) == 0 else { return false }
        return open.st_dev == atPath.st_dev && open.st_ino == atPath.st_ino
    }

    /// Whether the file's last byte (of `size`) is a newline.
    static func endsWithNewline(_ path: String, size: Int64) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return true }  // cannot tell: leave it
        defer { close(fd) }
        var last: UInt8 = 0
        return pread(fd, &last, 1, off_t(size - 1)) != 1 || last == UInt8(ascii: "\n")
    }

    /// Closes the file, syncing it first unless the policy is `never` (a
    /// rotated or reopened file must not lose its last interval).
    private func closeFile(context: SinkContext?) {
        if let fd {
            if dirty && config.fsync != .never { sync(fd, context: context) }
            try? fd.close()
        }
        fd = nil
        dirty = false
    }

    /// events.jsonl → events.jsonl.1 → … → events.jsonl.N (the oldest is removed);
    /// the next write opens a new events.jsonl.
    private func rotate(context: SinkContext) throws {
        closeFile(context: context)
        let path = config.path
        unlink("\(path).\(config.rotateKeep)")
        if config.rotateKeep > 1 {
            for i in stride(from: config.rotateKeep - 1, through: 1, by: -1) {
                Glibc.rename("\(path).\(i)", "\(path).\(i + 1)")
            }
        }
        if Glibc.rename(path, "\(path).1") != 0 && errno != ENOENT {
            throw Errno(rawValue: errno)
        }
        size = 0
    }

    /// Whether a directory had to be made.
    @discardableResult
    static func makeParentDirectories(of path: String) throws -> Bool {
        var parent = FilePath(path)
        parent.removeLastComponent()
        guard !parent.isEmpty else { return false }
        var st = stat()
        if stat(parent.string, &st) == 0 { return false }
        try FileManager.default.createDirectory(atPath: parent.string, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o750])
        return true
    }
}
