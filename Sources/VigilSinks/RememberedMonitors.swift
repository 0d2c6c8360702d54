import Foundation
import Glibc
import Synchronization
import VigilCore

/// The descriptions of the monitors whose events a disk buffer holds, kept
/// beside its segments in `monitors.jsonl`. Events read back after a
/// restart come from monitors that may no longer be in the manifest, or run
/// another plugin now: without the description they were emitted under, a
/// sink that keeps series (`remote_write`) would map them without
/// identities (every entity one series, its samples out of order), units
/// or counters. With it they are mapped as they were emitted.
///
/// One JSON line per monitor and plugin, appended on the sink's thread
/// before the events it describes go to disk, once per instance (a reload
/// that changes a monitor appends it again); the last line of a monitor
/// and plugin wins. Rewritten whole, by rename, once the lines outnumber
/// the monitors twice. A line a crash tore, or one a hostile hand wrote,
/// is skipped; a file past `maxFileBytes` is not read.
package final class RememberedMonitors: Sendable {
    /// One line of the file.
    private struct Entry: Codable {
        var monitor: String
        var intervalNs: Int64
        var description: PluginDescription

        enum CodingKeys: String, CodingKey {
            case monitor, intervalNs = "interval_ns", description
        }

        var key: String { Self.key(monitor, description.name) }
        static func key(_ monitor: String, _ plugin: String) -> String { monitor + "\u{0}" + plugin }
    }

    /// What makes remembered facts of one description one instance to the
    /// sinks' plans (which are kept per instance).
    private final class Token: Sendable {}

    private struct Remembered {
        var entry: Entry
        var line: [UInt8]
        var facts: MonitorFacts
        var token: Token
    }

    private struct State {
        var loaded = false
        var entries: [String: Remembered] = [:]
        /// Per monitor and plugin, the running instance whose description is on disk.
        var written: [String: ObjectIdentifier] = [:]
        /// Keys in the order they were last written: the oldest go past `most`.
        var order: [String] = []
        /// Per monitor, the key of its plugin written last.
        var latest: [String: String] = [:]
        /// Lines in the file (a compaction is due past twice the entries,
        /// or when the file read had lines not kept).
        var lines = 0
        var compactionDue = false
        /// What went wrong last, and what of it the sink has logged.
        var problem: String?
        var told: String?
    }

    /// The most monitors kept: a buffer that outlived more maps the oldest
    /// of their events without a description.
    static let most = 4096
    /// The largest file read; the writer compacts, and drops the oldest
    /// monitors, to stay under it.
    static let maxFileBytes = 64 << 20

    let file: String
    private let state = Mutex(State())

    package init(bufferDirectory: String) {
        file = bufferDirectory + "/monitors.jsonl"
    }

    /// The remembered facts of `monitor` (with `plugin`, of that plugin's).
    package func facts(of monitor: String, plugin: String? = nil) -> MonitorFacts? {
        state.withLock { state in
            load(&state)
            guard let key = plugin.map({ Entry.key(monitor, $0) }) ?? state.latest[monitor] else { return nil }
            return state.entries[key]?.facts
        }
    }

    /// Every remembered monitor's facts (the last written of each).
    package func facts() -> [String: MonitorFacts] {
        state.withLock { state in
            load(&state)
            var out: [String: MonitorFacts] = [:]
            for (monitor, key) in state.latest { if let r = state.entries[key] { out[monitor] = r.facts } }
            return out
        }
    }

    /// What went wrong (the file not written, or not read) since the last
    /// time this was asked, for the sink to log once.
    package func untold() -> String? {
        state.withLock { state in
            guard state.problem != state.told else { return nil }
            state.told = state.problem
            return state.problem
        }
    }

    /// Notes the monitors of `batch` as `live` knows them now, appending
    /// those that are new or have another instance than the one written.
    package func note(_ batch: [Event], live: (String) -> MonitorFacts?) {
        var seen: Set<String> = []
        var last = ""
        var changed: [MonitorFacts] = []
        var monitors: [String] = []
        for event in batch where event.monitor != last {
            last = event.monitor
            guard seen.insert(last).inserted, let facts = live(last) else { continue }
            let key = Entry.key(last, facts.description.name)
            if state.withLock({ $0.written[key] }) != facts.instance {
                changed.append(facts)
                monitors.append(last)
            }
        }
        guard !changed.isEmpty else { return }
        state.withLock { state in
            load(&state)
            var appended: [UInt8] = []
            var keys: [String] = []
            for (monitor, facts) in zip(monitors, changed) {
                let entry = Entry(monitor: monitor, intervalNs: facts.interval, description: facts.description)
                guard var line = try? Array(Self.encoder.encode(entry)) else { continue }
                line.append(0x0A)
                guard line.count <= Self.maxFileBytes / 8 else { continue }  // one description of 8 MiB: not kept
                appended += line
                state.entries[entry.key] = Self.remembered(entry, line: line)
                state.written[entry.key] = facts.instance
                state.latest[monitor] = entry.key
                keys.append(entry.key)
                state.order.removeAll { $0 == entry.key }
                state.order.append(entry.key)
                state.lines += 1
            }
            if state.order.count > Self.most {
                while state.order.count > Self.most { Self.forgetOldest(&state) }
                state.problem = "more than \(Self.most) monitors: the descriptions written longest ago are forgotten, and their events still on disk replay without them"
            }
            let live = state.order.reduce(0) { $0 + (state.entries[$1]?.line.count ?? 0) }
            if state.compactionDue || state.lines > 2 * state.entries.count + 16 || live + appended.count > Self.maxFileBytes / 2 {
                rewrite(&state)
            } else if !Self.append(appended, to: file) {
                state.problem = "cannot write \(file): \(String(cString: strerror(errno)))"
                // Asked again at the next batch of these monitors.
                for key in keys { state.written[key] = nil }
            }
        }
    }

    /// The file anew from what is kept, the oldest monitors left out until
    /// it is within half of `maxFileBytes`.
    private func rewrite(_ state: inout State) {
        var total = state.order.reduce(0) { $0 + (state.entries[$1]?.line.count ?? 0) }
        while total > Self.maxFileBytes / 2, let oldest = state.order.first {
            total -= state.entries[oldest]?.line.count ?? 0
            Self.forgetOldest(&state)
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(total)
        for key in state.order { if let r = state.entries[key] { bytes += r.line } }
        if DiskBuffer.replace(file, with: bytes, fsync: false) {
            state.lines = state.order.count
            state.compactionDue = false
        } else {
            state.problem = "cannot write \(file): \(String(cString: strerror(errno)))"
            state.written = [:]
        }
    }

    /// The monitor and plugin written longest ago, out of what is kept
    /// (its instance stays marked written: not appended again while it runs).
    private static func forgetOldest(_ state: inout State) {
        let key = state.order.removeFirst()
        if let monitor = state.entries.removeValue(forKey: key)?.entry.monitor, state.latest[monitor] == key {
            state.latest[monitor] = nil
        }
    }

    private static let encoder = JSONEncoder()

    private static func remembered(_ entry: Entry, line: [UInt8]) -> Remembered {
        let token = Token()
        return Remembered(entry: entry, line: line,
                          facts: MonitorFacts(instance: ObjectIdentifier(token), description: entry.description,
                                              interval: entry.intervalNs, running: false),
                          token: token)
    }

    /// Appends whole lines; false when the disk refused, the file cut back
    /// to what it was. A line a crash tore at its end is ended first, so
    /// that it does not swallow the next.
    private static func append(_ bytes: [UInt8], to path: String) -> Bool {
        let fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return false }
        var last: UInt8 = 0x0A
        if st.st_size > 0 { _ = pread(fd, &last, 1, st.st_size - 1) }
        guard DiskBuffer.writeAll(last == 0x0A ? bytes : [0x0A] + bytes, to: fd) else {
            let saved = errno
            _ = ftruncate(fd, st.st_size)
            errno = saved
            return false
        }
        return true
    }

    /// Reads the file once. Lines that do not read as a monitor, or whose
    /// description fails the checks a plugin's own gets, are skipped.
    private func load(_ state: inout State) {
        guard !state.loaded else { return }
        state.loaded = true
        let fd = open(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            if errno != ENOENT { state.problem = "cannot read \(file): \(String(cString: strerror(errno)))" }
            return
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            state.problem = "\(file) is not a regular file: not read"
            return
        }
        guard st.st_size <= Self.maxFileBytes else {
            state.problem = "\(file) is \(st.st_size) bytes, more than \(Self.maxFileBytes): not read"
            return
        }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { read(fd, $0.baseAddress! + count, $0.count - count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            count += n
        }
        // From the newest line back, until `most` monitors are known: the
        // last line of each wins, and lines past four times `most` from
        // the end are not decoded (the next write compacts them away).
        let lines = bytes[..<count].split(separator: 0x0A)
        state.lines = lines.count
        var skipped = 0
        var newestFirst: [String] = []
        let decoder = JSONDecoder()
        for line in lines.reversed().prefix(4 * Self.most) where state.entries.count < Self.most {
            guard line.count <= PluginDescription.maxJSONBytes * 2,
                  let entry = try? decoder.decode(Entry.self, from: Data(line)),
                  entry.description.problems().isEmpty else {
                skipped += 1
                continue
            }
            guard state.entries[entry.key] == nil else { continue }
            state.entries[entry.key] = Self.remembered(entry, line: Array(line) + [0x0A])
            newestFirst.append(entry.key)
            if state.latest[entry.monitor] == nil { state.latest[entry.monitor] = entry.key }
        }
        state.order = newestFirst.reversed()
        // What was skipped goes with the next write's compaction.
        state.compactionDue = skipped > 0 || lines.count > newestFirst.count
        if skipped > 0 { state.problem = "\(file): \(skipped) lines that are no monitor's description skipped" }
    }
}
