import Foundation
import Synchronization
import VigilCore

/// The descriptions of the monitors whose events a disk buffer holds, kept
/// beside its segments in `monitors.json`. Events read back after a restart
/// come from monitors that may no longer be in the manifest: without their
/// plugin's description a sink that keeps series (`remote_write`) would map
/// them without identities (every entity one series, its samples out of
/// order) and without units or counters. With it they are mapped as they
/// were when they were emitted.
///
/// Written on the sink's thread before the events it describes go to disk,
/// once per monitor instance (a reload that changes a monitor writes it
/// again), whole or not at all. Read on the delivery thread when a monitor
/// the events name is not running.
package final class RememberedMonitors: Sendable {
    /// One monitor as the file keeps it.
    private struct Entry: Codable {
        var monitor: String
        var intervalNs: Int64
        var description: PluginDescription

        enum CodingKeys: String, CodingKey {
            case monitor, intervalNs = "interval_ns", description
        }
    }

    /// What makes remembered facts of one description one instance to the
    /// sinks' plans (which are kept per instance).
    private final class Token: Sendable {}

    private struct State {
        var loaded = false
        var entries: [String: (entry: Entry, facts: MonitorFacts, token: Token)] = [:]
        /// Per monitor, the running instance whose description is on disk.
        var written: [String: ObjectIdentifier] = [:]
        /// Monitors in the order they were last written: the oldest go past `most`.
        var order: [String] = []
    }

    /// The most monitors kept: a buffer that outlived more monitors than
    /// this maps the oldest of their events without a description.
    static let most = 4096

    let file: String
    private let state = Mutex(State())

    package init(bufferDirectory: String) {
        file = bufferDirectory + "/monitors.json"
    }

    /// The remembered facts of `monitor` (not running), if it was written.
    package func facts(of monitor: String) -> MonitorFacts? {
        state.withLock { state in
            load(&state)
            return state.entries[monitor]?.facts
        }
    }

    /// Every remembered monitor's facts.
    package func facts() -> [String: MonitorFacts] {
        state.withLock { state in
            load(&state)
            return state.entries.mapValues(\.facts)
        }
    }

    /// Notes the monitors of `batch` as `live` knows them now, and writes
    /// the file when one is new or has another instance than the one written.
    package func note(_ batch: [Event], live: (String) -> MonitorFacts?) {
        var seen: Set<String> = []
        var last = ""
        var changed: [(String, MonitorFacts)] = []
        for event in batch where event.monitor != last {
            last = event.monitor
            guard seen.insert(last).inserted, let facts = live(last) else { continue }
            if state.withLock({ $0.written[last] }) != facts.instance { changed.append((last, facts)) }
        }
        guard !changed.isEmpty else { return }
        let text: [UInt8]? = state.withLock { state in
            load(&state)
            for (monitor, facts) in changed {
                let entry = Entry(monitor: monitor, intervalNs: facts.interval, description: facts.description)
                state.entries[monitor] = Self.remembered(entry)
                state.written[monitor] = facts.instance
                state.order.removeAll { $0 == monitor }
                state.order.append(monitor)
            }
            while state.order.count > Self.most {
                let oldest = state.order.removeFirst()
                state.entries[oldest] = nil
                state.written[oldest] = nil
            }
            let entries = state.order.compactMap { state.entries[$0]?.entry }
            return try? Array(Self.encoder.encode(entries))
        }
        // Not written (a full disk): the events are still buffered, and a
        // replay maps them as it can; the next new monitor tries again.
        if let text, !DiskBuffer.replace(file, with: text, fsync: false) {
            state.withLock { state in for (monitor, _) in changed { state.written[monitor] = nil } }
        }
    }

    private static let encoder = JSONEncoder()

    private static func remembered(_ entry: Entry) -> (entry: Entry, facts: MonitorFacts, token: Token) {
        let token = Token()
        return (entry, MonitorFacts(instance: ObjectIdentifier(token), description: entry.description, interval: entry.intervalNs,
                                    running: false), token)
    }

    /// Reads the file once: what a crash or a hostile hand left unreadable,
    /// or a description that fails the checks a plugin's own does, is not
    /// used (its events are mapped without it, as before the file existed).
    private func load(_ state: inout State) {
        guard !state.loaded else { return }
        state.loaded = true
        guard let data = FileManager.default.contents(atPath: file), data.count <= PluginDescription.maxJSONBytes * 4 else { return }
        guard let entries = try? JSONDecoder().decode([Entry].self, from: data) else { return }
        for entry in entries.suffix(Self.most) where entry.description.problems().isEmpty && state.entries[entry.monitor] == nil {
            state.entries[entry.monitor] = Self.remembered(entry)
            state.order.append(entry.monitor)
        }
    }
}
