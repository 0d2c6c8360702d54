import Foundation
import ServiceLifecycle
import Synchronization
import SystemPackage
import VigilABI
import VigilCore
import VigilSinks

@preconcurrency import CVigilPlugin

/// `vigil run --once`: every monitor started, one poll taken (or a push-only
/// plugin's start snapshot), the events printed on stdout, everything stopped
/// (like `telegraf --test`, `collectd -T`). The manifest's sinks are not
/// made: no file is created, no socket bound or connected; the runtime routes
/// every monitor's, threshold's and rule's event to one `OnceSink` instead.
public struct OnceOptions: Sendable {
    /// JSON Lines instead of one readable line per event.
    public var json = false
    /// How long a push-only monitor (a plugin without `poll`) is given after
    /// its start returned to emit its first event: it is done at its first
    /// event, or when this has passed with none (not a failure: a source with
    /// nothing to say yet, such as a file watch, says nothing).
    public var pushWait: Int64 = 1_000_000_000

    public init(json: Bool = false) { self.json = json }

    /// The one sink of a `--once` run: every monitor's events and the
    /// conditions', not the host's own (`vigil/*`: a failure is told on stderr).
    /// (Its kind says what it is, a log on stdout; the runtime makes an `OnceSink` for it.)
    static let sink = SinkConfig(name: "stdout", settings: LogSinkConfig.onStdout, match: ["*", "!\(Manifest.hostMonitorName)"],
                                 queueCapacity: SinkConfig.defaultQueueCapacity, overflow: .block,
                                 location: SourceLocation(file: "--once", line: 1, column: 1))

    /// `manifest` with its sinks replaced by the stdout sink.
    func manifest(replacingSinksOf manifest: Manifest) -> Manifest {
        var once = manifest
        once.sinks = [Self.sink]
        return once
    }
}

extension LogSinkConfig {
    static var onStdout: LogSinkConfig {
        var config = LogSinkConfig()
        config.stream = .stdout
        return config
    }
}

/// Writes each event to stdout: `cpu/sample info usage=0.12 user=0.08`, or
/// its JSON line. Control characters a plugin sends are shown escaped. A
/// write that fails (stdout closed, /dev/full) throws, so its events are
/// counted lost (`write_failed`) and the run exits 3.
package final class OnceSink: EventSink, @unchecked Sendable {  // a sink: called on its runner's thread only
    private let json: Bool
    private var encoder: JSONLineEncoder
    private var buffer: [UInt8] = []

    init(json: Bool, host: String) {
        self.json = json
        self.encoder = JSONLineEncoder(host: host)
    }

    package func write(_ batch: [Event], context: SinkContext) throws {
        buffer.removeAll(keepingCapacity: true)
        for event in batch {
            if json {
                encoder.encode(event, into: &buffer)
            } else {
                appendShownText(Self.line(event), to: &buffer)
                buffer.append(UInt8(ascii: "\n"))
            }
        }
        try FileDescriptor.standardOutput.writeAll(buffer)
    }

    /// `MONITOR/KIND SEVERITY FIELD=VALUE …`, fields as the text log sink writes them.
    static func line(_ event: Event) -> String {
        let text = LogSink.text(event)
        let head = "\(event.monitor)/\(event.kind)"
        return "\(head) \(event.severity.name)\(text.dropFirst(head.count))"
    }

    package func shutdown(context: SinkContext) {}
}

/// What each monitor of a `--once` run came to: ended when every monitor is
/// done, or at its deadline. A monitor is done when it has failed (create,
/// start or poll refused, unavailable, crashed), when its one poll has
/// returned (polled plugins), or at its first event or `pushWait` after it
/// started (push-only ones). One that is not done within its `timeout` (the
/// deadline of each call into it; by default the larger of 5 s and its
/// interval) from its launch is cut off and failed.
package final class OnceRun: Sendable {
    /// What a monitor came to.
    enum Verdict: Sendable, Equatable {
        case done
        /// Its source is not on this machine (no battery, no wifi): said, not
        /// a failure, as the catalogue says of each plugin's unavailability.
        case unavailable(String)
        case failed(String)
    }

    let options: OnceOptions
    private let outcomes = Mutex<[String: Verdict]>([:])

    init(options: OnceOptions) { self.options = options }

    /// Monitors that did not come through, with the reason, in the manifest's order.
    func failures(of instances: [MonitorInstance]) -> [(monitor: String, reason: String)] {
        let outcomes = outcomes.withLock { $0 }
        return instances.compactMap { instance in
            switch outcomes[instance.name] {
            case .failed(let reason): (instance.name, reason)
            case .done, .unavailable: nil
            case .none: (instance.name, "the run ended before it was done")
            }
        }
    }

    /// Monitors whose source this machine does not have, with why, in the manifest's order.
    func unavailable(of instances: [MonitorInstance]) -> [(monitor: String, reason: String)] {
        let outcomes = outcomes.withLock { $0 }
        return instances.compactMap { instance in
            if case .unavailable(let reason) = outcomes[instance.name] { (instance.name, reason) } else { nil }
        }
    }

    /// Waits until every instance is done (checking every 10 ms), then
    /// returns, which shuts the group down. SIGINT/SIGTERM end it sooner.
    /// The instances are asked for by name at each look: one whose plugin
    /// asked for a process of its own is replaced as the run starts.
    func watch(_ instances: @escaping () -> [MonitorInstance]) async {
        let launched = monotonicNanoseconds()
        var runningSince: [String: Int64] = [:]
        var pendingNames = Set(instances().map(\.name))
        while !pendingNames.isEmpty, !Task.isCancelled {
            let now = monotonicNanoseconds()
            let pending = instances().filter { pendingNames.contains($0.name) }
            pendingNames = Set(pending.filter { instance in
                let status = instance.status
                let reason = status.lastError?.text
                let verdict: Verdict?
                switch status.state {
                case .failed, .quarantined, .restarting:
                    verdict = .failed(reason ?? "it \(status.state == .failed ? "failed" : "crashed")")
                case .retrying:
                    verdict = status.available ? .failed(reason ?? "it could not start") : .unavailable(status.unavailableReason)
                case .running where instance.crashes.load(ordering: .relaxed) > 0:
                    // Its runner ended and a new one is up already (the watch
                    // looked before, and after, the restart).
                    verdict = .failed(reason ?? "its runner ended")
                case .running where !status.available:
                    // Running, and said its source is not here (a poll answered UNAVAILABLE).
                    verdict = .unavailable(status.unavailableReason)
                case .running where instance.transport.polls:
                    if status.lastPoll != nil {
                        verdict = instance.pollErrors.load(ordering: .relaxed) > 0 ? .failed(reason ?? "its poll failed") : .done
                    } else {
                        verdict = nil
                    }
                case .running:
                    let since = runningSince[instance.name] ?? now
                    runningSince[instance.name] = since
                    verdict = instance.emitted.load(ordering: .relaxed) > 0 || now - since >= options.pushWait ? .done : nil
                case .idle, .stopped:
                    verdict = nil
                }
                if let verdict {
                    outcomes.withLock { $0[instance.name] = verdict }
                    return false
                }
                if now - launched >= instance.timeout {
                    let call = status.state == .idle ? "create or start" : "its poll"
                    outcomes.withLock { $0[instance.name] = .failed("\(call) did not return within its timeout of \(Units.formatDuration(instance.timeout)); cut off") }
                    return false
                }
                return true
            }.map(\.name))
            if !pendingNames.isEmpty { try? await Task.sleep(for: .milliseconds(10)) }
        }
    }
}

/// Runs `OnceRun.watch`; its return shuts the group down.
package struct OnceService: Service {
    let once: OnceRun
    let runtime: VigilRuntime

    package func run() async throws {
        await cancelWhenGracefulShutdown { await once.watch { runtime.instances } }
    }
}

extension VigilRuntime {
    /// After a `--once` run: the monitors that failed to start, whose poll
    /// failed or was cut off, each with its reason; empty for another run.
    public var onceFailures: [(monitor: String, reason: String)] {
        once?.failures(of: instances) ?? []
    }

    /// After a run: the monitors whose last create or start failed (not
    /// UNAVAILABLE, not TEMPORARY; failed for good, or a runner's restarts
    /// still failing at the end), each with its last error. A `--for` run
    /// exits 1 for them.
    public var startFailures: [(monitor: String, reason: String)] {
        instances.compactMap { instance in
            let status = instance.status
            guard instance.failedToStart.load(ordering: .relaxed) else { return nil }
            return (instance.name, status.lastError?.text ?? "it failed to start")
        }
    }

    /// After a `--once` run: the monitors whose source this machine does
    /// not have, each with why (not failures); empty for another run.
    public var onceUnavailable: [(monitor: String, reason: String)] {
        once?.unavailable(of: instances) ?? []
    }
}
