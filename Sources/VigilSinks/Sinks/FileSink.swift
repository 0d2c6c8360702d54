import Foundation
import Logging
import Synchronization
import SystemPackage
import VigilABI
import VigilCore
import VigilIsolation

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
package final class FileSink: EventSink, @unchecked Sendable {  // an EventSink, called on its runner's thread; `reopenRequested` is atomic
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
    package var tickInterval: Int64 { config.fsync == .interval && dirty ? config.fsyncInterval : SinkTicks.never }

    package func requestReopen() { reopenRequested.store(true, ordering: .releasing) }

    /// The lines are made by the producers; this thread writes them.
    package var producerLines: JSONLineEncoder? { encoder }

    package func write(_ batch: [Event], context: SinkContext) throws {
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
        var backoff = Backoff(min: Self.retryMin, max: Self.retryMax, jitter: 0)
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
                context.pause(backoff.next())
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

    package func tick(context: SinkContext) {
        if reopenRequested.exchange(false, ordering: .acquiring) {
            closeFile(context: context)
            context.logger.info("reopening \(config.path)")
        }
        if config.fsync == .interval, dirty, let fd {
            sync(fd, context: context)
        }
    }

    package func shutdown(context: SinkContext) {
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
        if try Paths.makeParentDirectories(of: config.path), reopening {
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
}

/// `type: file`: `path`, `rotate: { size, keep }`, `fsync`, `fsync_interval`.
package struct FileSinkConfig: Sendable {
    package enum Fsync: String, Sendable, CaseIterable { case never, interval, always }
    package var path: String
    /// Rotate when the file would grow past this many bytes; nil: never.
    package var rotateSize: Int64?
    /// Rotated files kept: `events.jsonl.1` … `events.jsonl.N`.
    package var rotateKeep: Int = 5
    package var fsync: Fsync = .interval
    package var fsyncInterval: Int64 = 1_000_000_000
    /// Where `path` is written.
    package var pathLocation: SourceLocation?
    package init(path: String) { self.path = path }
}

extension FileSinkConfig: SinkType {
    package static let type = "file"
    package static let keys = ["path", "rotate", "fsync", "fsync_interval"]

    package static func read(_ sink: SinkDeclaration, _ d: inout Diags) -> FileSinkConfig? {
        let keys = sink.keys, name = sink.name, at = sink.location
        guard let pathNode = keys["path"] else {
            d.error(at, "file sink '\(name)' has no 'path'", hint: "path: /var/log/vigil/events.jsonl")
            return nil
        }
        guard let path = d.string(pathNode, what: "'path'") else { return nil }
        guard !path.isEmpty, !path.hasSuffix("/") else {
            d.error(pathNode.location, "'path' must name a file, got '\(path)'")
            return nil
        }
        var config = FileSinkConfig(path: path)
        config.pathLocation = pathNode.location
        if let rotate = keys["rotate"],
           let r = Keys(nested: rotate, what: "'rotate'", of: "sink '\(name)'", known: ["size", "keep"],
                        example: "rotate: { size: 64MiB, keep: 5 }", &d) {
            if let size = r["size"], let bytes = d.size(size, what: "'rotate.size'") {
                if bytes < 4096 { d.error(size.location, "'rotate.size' must be at least 4KiB") } else { config.rotateSize = bytes }
            } else if r["size"] == nil {
                d.error(rotate.location, "'rotate' needs a 'size'", hint: "rotate: { size: 64MiB, keep: 5 }")
            }
            if let keep = r["keep"], let n = d.int(keep, what: "'rotate.keep'", in: 1...1000) {
                config.rotateKeep = Int(n)
            }
        }
        if let fsync = keys["fsync"] {
            config.fsync = d.choice(fsync, what: "'fsync'", of: FileSinkConfig.Fsync.self) ?? .interval
        }
        if let interval = keys["fsync_interval"], let ns = d.duration(interval, what: "'fsync_interval'") {
            config.fsyncInterval = max(ns, 1_000_000)
        }
        return config
    }

    package var exclusiveResources: [String] { ["file \(path)"] }

    package func makeSink(_ build: SinkBuild) -> any EventSink {
        FileSink(config: self, host: build.host, holdFailedBatches: build.config.overflow == .block)
    }

    /// What the file system says of `path`, as this user sees it now: an
    /// existing directory there is an error (the sink could never open it),
    /// so is a file where a parent directory must be; a file or nearest
    /// existing parent directory this user cannot write to is a warning (it
    /// may be run as another user; `run` creates missing directories).
    /// A relative path is taken as `run` takes it: from the current directory.
    package func preflight(_ sink: SinkConfig) -> [Diagnostic] {
        let at = pathLocation ?? sink.location
        var info = stat()
        if stat(path, &info) == 0 {
            if info.st_mode & S_IFMT == S_IFDIR {
                return [Diagnostic(at: at, "file sink '\(sink.name)': '\(path)' is a directory; 'path' names the file to write",
                                   hint: "e.g. path: \(path.hasSuffix("/") ? path : path + "/")events.jsonl")]
            }
            if access(path, W_OK) != 0 {
                return [Diagnostic(.warning, at: at, "file sink '\(sink.name)': '\(path)' is not writable by this user (uid \(getuid()))")]
            }
            return []
        }
        // The nearest part of the path that exists must be a directory this user can write into.
        var parent = path
        while true {
            guard let slash = parent.lastIndex(of: "/") else { parent = "."; break }
            parent = slash == parent.startIndex ? "/" : String(parent[..<slash])
            if parent == "/" || stat(parent, &info) == 0 { break }
        }
        if stat(parent, &info) != 0 { return [] }
        if info.st_mode & S_IFMT != S_IFDIR {
            return [Diagnostic(at: at, "file sink '\(sink.name)': '\(path)' cannot be created: '\(parent)' is a file, not a directory")]
        }
        if access(parent, W_OK | X_OK) != 0 {
            return [Diagnostic(.warning, at: at, "file sink '\(sink.name)': directory '\(parent)' is not writable by this user (uid \(getuid())), so '\(path)' cannot be created",
                               hint: "run vigil as a user who may write there, or choose another path")]
        }
        return []
    }
}
