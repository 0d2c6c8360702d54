import Foundation
import Logging
import ServiceLifecycle

/// `vigil run --watch`: the manifest is reloaded when it, or a file it
/// includes, changes. inotify watches the directories that hold them (an
/// editor saves by writing a new file and renaming it over the old, and a
/// new fragment appears in its directory), and the names in them that
/// matter; a burst of changes (a save, a `cp -r conf.d`) makes one reload,
/// 300 ms after the last. The descriptor is read by a dispatch source, so
/// a host with nothing changing does not wake for it.
package struct ManifestWatchService: Service {
    let runtime: VigilRuntime
    let logger: Logger
    /// Quiet time after the last change before reloading.
    static let settle: Int64 = 300_000_000

    package func run() async throws {
        let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else {
            logger.error("--watch: inotify is not available (\(String(cString: strerror(errno)))); reload with SIGHUP or vigil ctl reload")
            return
        }
        let watcher = Watcher(fd: fd, runtime: runtime, logger: logger)
        watcher.rewatch()
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: watcher.queue)
        source.setEventHandler { watcher.drain() }
        source.setCancelHandler { close(fd) }
        source.resume()
        try? await gracefulShutdown()
        source.cancel()
        watcher.queue.sync { watcher.cancelled = true }
    }

    /// Everything here runs on `queue`.
    package final class Watcher: @unchecked Sendable {  // everything here runs on `queue`
        let fd: Int32
        let runtime: VigilRuntime
        let logger: Logger
        let queue = DispatchQueue(label: "vigil.watch")
        /// Watched directories (watch descriptor → path); the files of
        /// interest in them; and the directories `include:` patterns read,
        /// where any change matters (a fragment added or removed).
        private var directories: [Int32: String] = [:]
        private var files: Set<String> = []
        private var includeDirectories: Set<String> = []
        private var pending: DispatchWorkItem?
        var cancelled = false

        init(fd: Int32, runtime: VigilRuntime, logger: Logger) {
            self.fd = fd
            self.runtime = runtime
            self.logger = logger
        }

        /// Watches the directories of the manifest's files, and the
        /// directories it includes from (the nearest existing parent of one
        /// not made yet), as the manifest in force now says: a reload may
        /// have added an include.
        func rewatch() {
            let manifest = runtime.manifest
            let wanted = manifest.files.map(Self.absolute)
            files = Set(wanted)
            includeDirectories = Set(manifest.includeDirectories.map(Self.absolute))
            var dirs = Set(wanted.map(Self.parent))
            for dir in includeDirectories {
                var existing = dir
                while !existing.isEmpty, existing != "/", !FileManager.default.fileExists(atPath: existing) {
                    existing = Self.parent(existing)
                }
                dirs.insert(existing.isEmpty ? "/" : existing)
            }
            let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB)
            for dir in dirs where !directories.values.contains(dir) {
                let wd = inotify_add_watch(fd, dir, mask)
                if wd >= 0 {
                    directories[wd] = dir
                } else {
                    logger.warning("--watch: cannot watch \(dir): \(String(cString: strerror(errno)))")
                }
            }
            for (wd, dir) in directories where !dirs.contains(dir) {
                inotify_rm_watch(fd, wd)
                directories[wd] = nil
            }
        }

        static func absolute(_ path: String) -> String { URL(fileURLWithPath: path).standardizedFileURL.path }
        static func parent(_ path: String) -> String { (path as NSString).deletingLastPathComponent }

        /// Reads every queued event; one naming a file of interest (or a
        /// YAML file in a watched directory: a new fragment) schedules a reload.
        func drain() {
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            var relevant = false
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                var offset = 0
                while offset + MemoryLayout<inotify_event>.size <= n {
                    let (wd, length) = buffer.withUnsafeBytes { raw -> (Int32, Int) in
                        let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                        return (event.wd, Int(event.len))
                    }
                    let nameStart = offset + MemoryLayout<inotify_event>.size
                    let nameEnd = min(n, nameStart + length)
                    let name = String(decoding: buffer[nameStart..<nameEnd].prefix { $0 != 0 }, as: UTF8.self)
                    if let dir = directories[wd] {
                        let path = dir + "/" + name
                        // The manifest or a fragment; anything in a directory
                        // it includes from; a directory it includes from appearing.
                        if files.contains(path) || includeDirectories.contains(dir)
                            || includeDirectories.contains(where: { $0.hasPrefix(path) }) { relevant = true }
                    } else if wd >= 0 {
                        relevant = true  // IN_IGNORED and the like: look again
                    }
                    offset = nameEnd
                }
            }
            guard relevant, !cancelled else { return }
            pending?.cancel()
            let item = DispatchWorkItem { [self] in
                guard !cancelled else { return }
                let done = DispatchSemaphore(value: 0)
                Task {
                    let result = await runtime.reload(reason: "a watched file changed")
                    if !result.applied { logger.error("--watch: the changed manifest was refused; the running configuration stays") }
                    done.signal()
                }
                done.wait()
                rewatch()
            }
            pending = item
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(ManifestWatchService.settle)), execute: item)
        }
    }
}
