import Glibc
import LinuxProbes
import Synchronization
import VigilKit

/// Changes to files and directories, pushed by inotify: created, modified,
/// attributes changed, deleted, renamed (old and new path), for paths and
/// globs, with modifications of one path coalesced over a debounce window.
/// XestiMonitors' FileSystemObjectMonitor on Linux.
///
/// A file is watched through its directory, so a file replaced by a rename
/// (editors, log rotation) or created later is still seen. A glob may only
/// be in the last component (`/var/log/*.log`).
final class FilesMonitor: PushMonitor, @unchecked Sendable {  // shared state is behind `state`
    static let spec = PluginSpec(
        name: "files", version: "1.0.0",
        summary: "Files created, modified, changed in attributes, deleted or renamed, from inotify",
        events: [
            EventDecl("present", doc: "On start, one event per watched path that exists: the snapshot.", fields: [
                FieldDecl("path", .string),
                FieldDecl("is_dir", .bool),
                FieldDecl("size", .int, unit: "bytes"),
                FieldDecl("mtime", .double, unit: "seconds", doc: "last modification, seconds since the epoch"),
            ], policy: .samples),
            .occurrence("created", doc: "A path appeared (created, or moved in from an unwatched place).",
                        fields: [FieldDecl("path", .string), FieldDecl("is_dir", .bool)]),
            .occurrence("modified", doc: "Its content changed; repeats within `debounce` are one event.",
                        fields: [FieldDecl("path", .string), FieldDecl("changes", .int, doc: "writes coalesced")]),
            .occurrence("attributes", doc: "Permissions, owner, timestamps or links changed.",
                        fields: [FieldDecl("path", .string)]),
            .occurrence("deleted", doc: "A path went away (deleted, or moved out to an unwatched place).",
                        fields: [FieldDecl("path", .string), FieldDecl("is_dir", .bool)]),
            .occurrence("renamed", doc: "Moved within the watched paths.", fields: [
                FieldDecl("path", .string, doc: "the new path"),
                FieldDecl("old_path", .string),
                FieldDecl("is_dir", .bool),
            ]),
        ])

    struct Options: DeclaredOptions {
        var paths: [String] = []
        var rootfs = "/"
        var recursive = false
        var debounce: Duration = .milliseconds(200)
        static let schema = OptionSchema<Options>(
            .required("paths", \.paths, example: "[/tmp]", doc: "Files, directories, or globs in the last component (`/etc/*.conf`)."),
            .option("rootfs", \.rootfs, doc: "Root the paths are under (a fixture tree in tests)."),
            .option("recursive", \.recursive, doc: "Also watch the subdirectories of watched directories."),
            .option("debounce", \.debounce, doc: "Modifications of one path within this window are one event (0: every write)."))
    }

    /// What one inotify watch (one directory) reports.
    struct Watch {
        var directory: String
        /// nil: every entry; else only names matching one of these patterns.
        var patterns: [String]?
    }

    private let context: MonitorContext
    private let options: Options
    private var fd: Int32 = -1
    private let state = Mutex(State())

    struct State {
        var watches: [Int32: Watch] = [:]
        /// Modifications waiting for their debounce window: path → (deadline, count).
        var pending: [(path: String, deadline: Int64, count: Int64)] = []
    }

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.paths.isEmpty else { throw .invalidOption("paths", "give at least one path") }
        for (i, path) in options.paths.enumerated() {
            guard path.hasPrefix("/") else { throw .invalidOption("paths[\(i)]", "\"\(path)\" is not an absolute path") }
            let directory = Self.parent(path)
            guard !directory.contains(where: { "*?[".contains($0) }) else {
                throw .invalidOption("paths[\(i)]", "a glob may only be in the last component, as in /var/log/*.log")
            }
        }
        guard options.debounce >= .zero else { throw .invalidOption("debounce", "must not be negative") }
        self.options = options
        self.context = context
    }

    func start() throws(MonitorError) {
        // A restart: the previous worker was joined after stop, so its
        // descriptor and watches can go now.
        if fd >= 0 { close(fd) }
        state.withLock { $0 = State() }
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else { throw .temporary("inotify_init1: \(String(cString: strerror(errno)))") }
        var watched = 0
        for path in options.paths {
            let full = resolve(path)
            if FSRoot.isDirectory(full), !hasGlob(path) {
                watched += addWatch(full, patterns: nil) ? 1 : 0
                if options.recursive { addSubdirectories(of: full) }
                snapshot(full)
            } else {
                let directory = Self.parent(full), name = Self.lastComponent(full)
                watched += addWatch(directory, patterns: [name]) ? 1 : 0
                for entry in FSRoot.listDirectory(directory) ?? [] where fnmatch(name, entry, 0) == 0 { snapshot(directory + "/" + entry) }
            }
        }
        guard watched > 0 else {
            close(fd)
            fd = -1
            throw .unavailable("none of the paths' directories exists: \(options.paths.joined(separator: ", "))")
        }
        let fd = self.fd
        context.spawn("inotify") { [self] token in
            while !token.isCancelled {
                let timeout = nextDeadline().map { Duration.nanoseconds(max(0, $0 - Worker.monotonicNow())) }
                switch token.waitFor(fd: fd, events: Int16(POLLIN), timeout: timeout) {
                case .cancelled: return
                case .ready: drain()
                case .timedOut: break
                }
                flushDue()
            }
        }
    }

    func stop() {
        // The SDK joins the worker after this returns; the descriptor is
        // closed in deinit, once nothing reads it.
    }

    deinit { if fd >= 0 { close(fd) } }

    // MARK: inotify

    private static let mask: UInt32 = UInt32(IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_ATTRIB
                                              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

    @discardableResult
    private func addWatch(_ directory: String, patterns: [String]?) -> Bool {
        let wd = inotify_add_watch(fd, directory, Self.mask)
        guard wd >= 0 else {
            context.log(.debug, "cannot watch \(directory): \(String(cString: strerror(errno)))")
            return false
        }
        state.withLock { state in
            if var existing = state.watches[wd] {
                // One directory, several paths: all of its entries, or the union of the patterns.
                if let old = existing.patterns, let new = patterns { existing.patterns = old + new } else { existing.patterns = nil }
                state.watches[wd] = existing
            } else {
                state.watches[wd] = Watch(directory: directory, patterns: patterns)
            }
        }
        return true
    }

    /// Watches every directory below `directory`, each once: a symbolic
    /// link is not followed (two links to `..` made the walk exponential and
    /// held the start forever), nor a directory met before in this walk (a
    /// bind mount of a parent).
    private func addSubdirectories(of directory: String) {
        var seen = Set<[UInt64]>()
        var pending = [directory]
        while let dir = pending.popLast() {
            for entry in FSRoot.listDirectory(dir) ?? [] {
                let path = dir + "/" + entry
                var st = stat()
                guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR,
                      seen.insert([UInt64(st.st_dev), UInt64(st.st_ino)]).inserted else { continue }
                addWatch(path, patterns: nil)
                pending.append(path)
            }
        }
    }

    /// Reads every queued inotify event and turns them into Vigil events;
    /// a move's two halves (same cookie) in one read become one `renamed`.
    private func drain() {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            var records: [(wd: Int32, mask: UInt32, cookie: UInt32, name: String)] = []
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= n {
                let (wd, mask, cookie, length) = buffer.withUnsafeBytes { raw in
                    (raw.loadUnaligned(fromByteOffset: offset, as: Int32.self),
                     raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self),
                     raw.loadUnaligned(fromByteOffset: offset + 8, as: UInt32.self),
                     Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self)))
                }
                let nameBytes = buffer[(offset + header)..<min(n, offset + header + length)].prefix { $0 != 0 }
                records.append((wd, mask, cookie, String(decoding: nameBytes, as: UTF8.self)))
                offset += header + length
            }
            handle(records)
        }
    }

    private func handle(_ records: [(wd: Int32, mask: UInt32, cookie: UInt32, name: String)]) {
        var movedFrom: [(cookie: UInt32, path: String, isDir: Bool)] = []
        for record in records {
            if record.mask & UInt32(IN_Q_OVERFLOW) != 0 {
                context.log(.warning, "inotify queue overflowed: some changes were not seen")
                continue
            }
            guard let watch = state.withLock({ $0.watches[record.wd] }) else { continue }
            if record.mask & UInt32(IN_IGNORED) != 0 {
                state.withLock { _ = $0.watches.removeValue(forKey: record.wd) }
                continue
            }
            let isDir = record.mask & UInt32(IN_ISDIR) != 0
            if record.mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF) != 0 {
                // A directory whose parent is watched is told by the parent's
                // event (a rename inside the tree is no deletion); a watched
                // path itself only by its own.
                let parent = Self.parent(watch.directory)
                let told = state.withLock { $0.watches.values.contains { $0.directory == parent && $0.patterns == nil } }
                if watch.patterns == nil && !told { emit("deleted", watch.directory, isDir: true) }
                continue
            }
            guard !record.name.isEmpty, matches(watch, record.name) else { continue }
            let path = watch.directory + "/" + record.name
            let mask = record.mask
            if mask & UInt32(IN_MOVED_FROM) != 0 {
                movedFrom.append((record.cookie, path, isDir))
            } else if mask & UInt32(IN_MOVED_TO) != 0 {
                if let i = movedFrom.firstIndex(where: { $0.cookie == record.cookie }) {
                    let from = movedFrom.remove(at: i)
                    context.emit("renamed", ["path": .string(path), "old_path": .string(from.path), "is_dir": .bool(isDir)])
                    // Its watches and those below it go on under the new name.
                    if isDir { rename(from.path, to: path) }
                } else {
                    emit("created", path, isDir: isDir)
                    // Moved in from outside: it and what is below it.
                    if isDir && options.recursive && watch.patterns == nil {
                        addWatch(path, patterns: nil)
                        addSubdirectories(of: path)
                    }
                }
            } else if mask & UInt32(IN_CREATE) != 0 {
                emit("created", path, isDir: isDir)
                if isDir && options.recursive && watch.patterns == nil {
                    addWatch(path, patterns: nil)
                    addSubdirectories(of: path)
                }
            } else if mask & UInt32(IN_DELETE) != 0 {
                emit("deleted", path, isDir: isDir)
            } else if mask & UInt32(IN_MODIFY) != 0 {
                modified(path)
            } else if mask & UInt32(IN_ATTRIB) != 0 {
                context.emit("attributes", ["path": .string(path)])
            }
        }
        // A move whose other half is outside the watched paths: its
        // watches go, or what happens out there would be told as in here.
        for from in movedFrom {
            emit("deleted", from.path, isDir: from.isDir)
            if from.isDir { unwatch(under: from.path) }
        }
    }

    /// The watches of `old` and below it, now at `new`.
    private func rename(_ old: String, to new: String) {
        state.withLock { state in
            for (wd, var watch) in state.watches where watch.directory == old || watch.directory.hasPrefix(old + "/") {
                watch.directory = new + watch.directory.dropFirst(old.count)
                state.watches[wd] = watch
            }
        }
    }

    /// Removes the watches of `path` and below it.
    private func unwatch(under path: String) {
        let gone = state.withLock { state in
            let gone = state.watches.filter { $0.value.directory == path || $0.value.directory.hasPrefix(path + "/") }.map(\.key)
            for wd in gone { state.watches[wd] = nil }
            return gone
        }
        for wd in gone { _ = inotify_rm_watch(fd, wd) }
    }

    private func emit(_ kind: String, _ path: String, isDir: Bool) {
        if kind == "deleted" { flush(path) }
        context.emit(kind, ["path": .string(path), "is_dir": .bool(isDir)])
    }

    // MARK: debounce

    private func modified(_ path: String) {
        let window = options.debounce.nanoseconds
        guard window > 0 else {
            context.emit("modified", ["path": .string(path), "changes": .int(1)])
            return
        }
        state.withLock { state in
            if let i = state.pending.firstIndex(where: { $0.path == path }) {
                state.pending[i].count += 1
            } else {
                state.pending.append((path, Worker.monotonicNow() + window, 1))
            }
        }
    }

    private func nextDeadline() -> Int64? { state.withLock { $0.pending.map(\.deadline).min() } }

    private func flushDue() {
        let now = Worker.monotonicNow()
        let due = state.withLock { state -> [(path: String, deadline: Int64, count: Int64)] in
            let due = state.pending.filter { $0.deadline <= now }
            state.pending.removeAll { $0.deadline <= now }
            return due
        }
        for m in due { context.emit("modified", ["path": .string(m.path), "changes": .int(m.count)]) }
    }

    /// Emits a pending modification of `path` now (before its deletion).
    private func flush(_ path: String) {
        let pending = state.withLock { state -> (path: String, deadline: Int64, count: Int64)? in
            guard let i = state.pending.firstIndex(where: { $0.path == path }) else { return nil }
            return state.pending.remove(at: i)
        }
        if let pending { context.emit("modified", ["path": .string(pending.path), "changes": .int(pending.count)]) }
    }

    // MARK: paths

    private func snapshot(_ path: String) {
        var st = stat()
        guard stat(path, &st) == 0 else { return }
        let mtime = Double(st.st_mtim.tv_sec) + Double(st.st_mtim.tv_nsec) / 1e9
        context.emit("present", ["path": .string(path), "is_dir": .bool((st.st_mode & S_IFMT) == S_IFDIR),
                                 "size": .int(Int64(st.st_size)), "mtime": .double(mtime)])
    }

    private func matches(_ watch: Watch, _ name: String) -> Bool {
        guard let patterns = watch.patterns else { return true }
        return patterns.contains { fnmatch($0, name, 0) == 0 }
    }

    private func resolve(_ path: String) -> String {
        let root = options.rootfs.hasSuffix("/") ? String(options.rootfs.dropLast()) : options.rootfs
        return root + path
    }

    private func hasGlob(_ path: String) -> Bool { Self.lastComponent(path).contains { "*?[".contains($0) } }

    static func parent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }

    static func lastComponent(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return path }
        return String(path[path.index(after: slash)...])
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(FilesMonitor.self, a, r) }
