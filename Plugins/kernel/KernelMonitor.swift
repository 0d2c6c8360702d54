import LinuxProbes
import VigilKit

/// Two kernel tables' use, from /proc/sys: file handles (node_exporter's
/// filefd collector) and the entropy pool (its entropy collector).
///
/// One plugin for both, not two: each is two numbers from the same procfs
/// root read in the same poll, and in a manifest that runs node_exporter's
/// whole catalogue (the stand-in) every plugin loaded is one more shared
/// library mapped and one more monitor scheduled, for no separation gained:
/// the kinds stay apart (`files`, `entropy`) and each is emitted when its
/// files are there, the other's absence notwithstanding.
final class KernelMonitor: ProcfsMonitor, PolledMonitor {
    static let spec = PluginSpec(
        name: "kernel", version: "1.0.0",
        summary: "File handles allocated and their limit, and the entropy pool, from /proc/sys",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("files", doc: "File handles, from sys/fs/file-nr.", fields: [
                FieldDecl("allocated", .int, unit: "handles", doc: "file handles allocated (the first figure of file-nr)"),
                FieldDecl("maximum", .int, unit: "handles", doc: "the most the kernel will allocate (fs.file-max, the third figure)"),
            ], policy: .samples),
            EventDecl("entropy", doc: "The kernel's entropy pool, from sys/kernel/random.", fields: [
                FieldDecl("available", .int, unit: "bits", doc: "entropy available (entropy_avail); 256 always on Linux 5.18+"),
                FieldDecl("pool_size", .int, unit: "bits", doc: "size of the pool (poolsize); absent where the file is"),
            ], policy: .samples),
        ])

    private static let fileNr = "sys/fs/file-nr"
    private static let entropyAvail = "sys/kernel/random/entropy_avail"
    private static let poolSize = "sys/kernel/random/poolsize"

    func start() throws(MonitorError) {
        guard root.exists(Self.fileNr) || root.exists(Self.entropyAvail) else {
            throw .unavailable("neither \(root.path(Self.fileNr)) nor \(root.path(Self.entropyAvail)) exists")
        }
    }

    func poll() throws(MonitorError) {
        var problems: [String] = []
        var emitted = 0
        // Each file: its numbers, nil when absent; a file that is there but
        // unreadable or garbled is a problem, reported once both kinds had their turn.
        func numbers(_ file: String) -> [Int64]? {
            do {
                let text = try root.readText(file)
                let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" })
                let values = words.compactMap { Int64($0) }
                guard !values.isEmpty, values.count == words.count else {
                    problems.append("\(root.path(file)): expected numbers, found '\(text.prefix(40))'")
                    return nil
                }
                return values
            } catch {
                if !error.isUnavailable { problems.append(error.description) }
                return nil
            }
        }
        if let files = numbers(Self.fileNr) {
            if files.count >= 3 {
                context.emit("files", ["allocated": .int(files[0]), "maximum": .int(files[2])])
                emitted += 1
            } else {
                problems.append("\(root.path(Self.fileNr)): expected 3 numbers, found \(files.count)")
            }
        }
        if let available = numbers(Self.entropyAvail) {
            var fields: [(String, Value)] = [("available", .int(available[0]))]
            if let pool = numbers(Self.poolSize) { fields.append(("pool_size", .int(pool[0]))) }
            context.emit("entropy", fields: fields)
            emitted += 1
        }
        if !problems.isEmpty { throw .temporary(problems.joined(separator: "; ")) }
        if emitted == 0 {
            throw .unavailable("neither \(root.path(Self.fileNr)) nor \(root.path(Self.entropyAvail)) exists")
        }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(KernelMonitor.self, a, r) }
