import Foundation
import Testing
import VigilKitTesting

/// The files plugin on real inotify, in temporary directories: what a
/// manifest would watch, changed by the test while the instance runs.
@Suite struct FilesPluginTests {
    func dir() throws -> String {
        let path = NSTemporaryDirectory() + "vigil-files-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    func write(_ text: String, _ path: String) throws { try text.write(toFile: path, atomically: false, encoding: .utf8) }

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libfiles.so") }

    @Test func aSnapshotOnStartThenEachKindOfChange() throws {
        let d = try dir()
        try write("one", d + "/a.conf")
        try write("x", d + "/ignored.txt")
        let files = try host().instance(options: "{ paths: [\"\(d)/*.conf\"], debounce: 0s }")
        try files.start()
        #expect(files.events(kind: "present").map { $0.string("path") } == [d + "/a.conf"])
        #expect(files.events(kind: "present").first?.int("size") == 3)

        try write("two", d + "/b.conf")                                    // created (+ modified)
        try write("more", d + "/a.conf")                                   // modified
        chmod(d + "/a.conf", 0o600)                                        // attributes
        try FileManager.default.moveItem(atPath: d + "/b.conf", toPath: d + "/c.conf")  // renamed
        try FileManager.default.removeItem(atPath: d + "/c.conf")          // deleted
        try write("y", d + "/ignored.txt")                                 // not matched
        files.waitForEvents(1, kind: "deleted")
        try files.stop()

        #expect(files.events(kind: "created").map { $0.string("path") } == [d + "/b.conf"])
        #expect(files.events(kind: "modified").contains { $0.string("path") == d + "/a.conf" })
        #expect(files.events(kind: "attributes").map { $0.string("path") } == [d + "/a.conf"])
        let renamed = files.events(kind: "renamed")
        #expect(renamed.count == 1 && renamed.first?.string("old_path") == d + "/b.conf"
                && renamed.first?.string("path") == d + "/c.conf")
        #expect(files.events(kind: "deleted").map { $0.string("path") } == [d + "/c.conf"])
        #expect(!files.events.contains { $0.string("path")?.hasSuffix("ignored.txt") == true })
        #expect(files.violations.isEmpty, "\(files.violations)")
    }

    @Test func writesWithinTheDebounceWindowAreOneEvent() throws {
        let d = try dir()
        try write("", d + "/log")
        let files = try host().instance(options: "{ paths: [\"\(d)/log\"], debounce: 300ms }")
        try files.start()
        // Writes the worker reads one by one (inotify merges identical queued
        // events), all within the first write's window.
        let handle = try #require(FileHandle(forWritingAtPath: d + "/log"))
        for i in 0..<4 {
            handle.write(Data("line \(i)\n".utf8))
            usleep(40_000)
        }
        try handle.close()
        let modified = files.waitForEvents(1, kind: "modified")
        usleep(500_000)  // a second event would come after another window
        try files.stop()
        #expect(modified.first?.int("changes") ?? 0 >= 1)  // usually 4; a loaded machine may read them merged
        #expect(files.events(kind: "modified").count == 1)
    }

    @Test func aFileReplacedByARenameIsStillWatched() throws {
        let d = try dir()
        try write("v1", d + "/app.yaml")
        let files = try host().instance(options: "{ paths: [\"\(d)/app.yaml\"], debounce: 0s }")
        try files.start()
        // How editors and log rotation replace a file: write a new one, rename over.
        try write("v2", d + "/.app.yaml.tmp")
        rename(d + "/.app.yaml.tmp", d + "/app.yaml")
        files.waitForEvents(1, kind: "created")
        try write("v3", d + "/.app.yaml.tmp")
        rename(d + "/.app.yaml.tmp", d + "/app.yaml")
        files.waitForEvents(2, kind: "created")
        try files.stop()
        // The temporary file is not watched, so its rename onto the path reads as created.
        #expect(files.events(kind: "created").map { $0.string("path") } == [d + "/app.yaml", d + "/app.yaml"])
    }

    @Test func aWatchedDirectoryRecursively() throws {
        let d = try dir()
        try FileManager.default.createDirectory(atPath: d + "/sub", withIntermediateDirectories: true)
        let files = try host().instance(options: "{ paths: [\"\(d)\"], recursive: true, debounce: 0s }")
        try files.start()
        try write("x", d + "/sub/deep")
        try FileManager.default.createDirectory(atPath: d + "/new", withIntermediateDirectories: true)
        files.waitForEvents(2, kind: "created")
        usleep(50_000)  // the watch on the new directory is added on its creation event
        try write("y", d + "/new/inner")
        files.waitForEvents(3, kind: "created")
        try files.stop()
        let created = Set(files.events(kind: "created").compactMap { $0.string("path") })
        #expect(created == [d + "/sub/deep", d + "/new", d + "/new/inner"])
    }

    @Test func pathsUnderAMissingDirectoryAreUnavailable() throws {
        let files = try host().instance(options: "{ paths: [\"/nonexistent-\(UUID().uuidString)/x\"] }")
        do {
            try files.start()
            Issue.record("started without any watch")
        } catch {
            #expect(error.status == "unavailable")
        }
    }

    @Test("bad paths are refused with their option path", arguments: [
        ("{ paths: [relative/x] }", "options.paths[0]: \"relative/x\" is not an absolute path"),
        ("{ paths: [\"/var/*/x.log\"] }", "options.paths[0]: a glob may only be in the last component"),
        ("{ paths: [] }", "options.paths: give at least one path"),
    ])
    func badPaths(options: String, message: String) throws {
        #expect {
            _ = try host().instance(options: options)
        } throws: { error in
            "\(error)".contains(message)
        }
    }
}
