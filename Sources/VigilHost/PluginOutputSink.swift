@preconcurrency import CVigilPlugin
import Foundation
import Logging
import Synchronization
import VigilABI
import VigilCore

/// A sink of `type: plugin`: an output plugin (ABI 1.5) takes the events,
/// in the host's process. The host keeps each batch until the plugin has
/// answered for every event of it: delivered (OK), counted lost as
/// `rejected` (REJECT, with the plugin's reason in the log), or written
/// again after a backoff (RETRY; the plugin's retry-after when longer) until
/// delivered, rejected or the drain deadline at shutdown (counted lost as
/// `shutdown`). A plugin that cannot be loaded, opened or started, or whose
/// write fails for good, fails the sink: its events are counted lost as
/// `write_failed`, with the reason logged once as critical.
///
/// Everything runs on the sink's own thread (`SinkRunner`), which is what
/// the ABI promises an output: one call at a time.
final class PluginOutputSink: EventSink, @unchecked Sendable {
    private let config: PluginSinkConfig
    private let sinkName: String
    private let host: String
    private let catalog: PluginCatalog
    private var logger: Logger
    private var plugin: LoadedPlugin?
    private var handle: UnsafeMutableRawPointer?
    private var context: HostContext?
    private var failure: String?
    private var opened = false
    private var lastFlush = monotonicNanoseconds()
    private var rejectLogged = monotonicNanoseconds() - 60_000_000_000

    init(config: PluginSinkConfig, name: String, host: String, catalog: PluginCatalog, logger: Logger) {
        self.config = config
        self.sinkName = name
        self.host = host
        self.catalog = catalog
        var logger = logger
        logger[metadataKey: "sink"] = "\(name)"
        self.logger = logger
    }

    var tickInterval: Int64 { plugin?.descriptor.flush != nil ? config.flushInterval : SinkTicks.never }

    /// Loads, binds, creates and starts the output, once; the reason it
    /// could not, otherwise.
    private func open() -> String? {
        if opened { return failure }
        opened = true
        if config.isolation == .process {
            failure = "outputs do not run in a runner process yet; isolation: none runs it in the host's process"
            return failure
        }
        let loaded: LoadedPlugin
        switch catalog.load(reference: config.plugin) {
        case .failure(let refusal):
            failure = "its plugin was refused: \(refusal.reason)"
            return failure
        case .success(let p): loaded = p
        }
        guard loaded.description.kind == .output else {
            failure = "plugin '\(loaded.description.name)' is a monitor, not an output"
            return failure
        }
        // Outputs do not run in runners yet: one from outside the host's own
        // directories runs in its process only when the manifest says so.
        if config.isolation != Isolation.none, let real = PluginFile.realPath(of: loaded.description.path),
           !PluginProbes.hostDirectories().contains(PluginFile.parent(of: real)) {
            failure = "\(loaded.description.path) is not in the host's own directories and outputs do not run in a runner process yet: say `isolation: none` to run it in the host's process"
            return failure
        }
        let (options, problems) = OptionBinder.bind(config.options, at: config.optionsLocation, of: "sink '\(sinkName)'",
                                                    to: loaded.description)
        if let problem = problems.first(where: { $0.level == .error }) {
            failure = "\(problem.location): \(problem.message)"
            return failure
        }
        let callbacks = OutputHost(logger: logger, plugin: loaded.description.name, sink: sinkName)
        let context = HostContext.make(for: callbacks)
        var handle: UnsafeMutableRawPointer?
        let descriptor = loaded.descriptor
        let (status, message) = withCreateArgs(name: sinkName, options: options, interval: 0, host: context.pointer,
                                               api: HostTable.shared) { args in
            withPluginError { err in descriptor.create(&args, &handle, err) }
        }
        guard status == VIGIL_OK, let handle else {
            context.retire()
            failure = "create returned \(statusName(status)): \(message)"
            return failure
        }
        let (started, why) = withPluginError { err in descriptor.start(handle, err) }
        guard started == VIGIL_OK else {
            descriptor.destroy(handle)
            context.retire()
            failure = "start returned \(statusName(started)): \(why)"
            return failure
        }
        self.plugin = loaded
        self.handle = handle
        self.context = context
        logger.info("output plugin \(loaded.description.name) \(loaded.description.version) opened (\(loaded.description.path))")
        return nil
    }

    func write(_ batch: [Event], context sinkContext: SinkContext) throws {
        if let why = open() {
            sinkContext.countLost(batch.count, .writeFailed)
            reportFailureOnce(why)
            return
        }
        var start = 0
        while start < batch.count {
            let end = min(batch.count, start + config.batch)
            deliver(Array(batch[start..<end]), sinkContext)
            start = end
        }
    }

    /// Writes `events` until each is answered for; counts what is lost.
    private func deliver(_ events: [Event], _ sinkContext: SinkContext) {
        guard let plugin, let handle else {
            sinkContext.countLost(events.count, .writeFailed)
            return
        }
        var pending = events
        var attempt: UInt32 = 1
        var wait = config.retryMin
        while !pending.isEmpty {
            if failure != nil {
                sinkContext.countLost(pending.count, .writeFailed)
                return
            }
            let answer = OutputBatch.write(pending, host: host, attempt: attempt) { b, r, e in plugin.descriptor.write(handle, b, r, e) }
            if answer.status != VIGIL_OK && answer.status != VIGIL_E_TEMPORARY {
                failure = "write returned \(statusName(answer.status)): \(answer.message)"
                reportFailureOnce(failure!)
                sinkContext.countLost(pending.count, .writeFailed)
                return
            }
            if answer.rejected > 0 {
                sinkContext.countLost(answer.rejected, .rejected)
                let now = monotonicNanoseconds()
                if now - rejectLogged >= 10_000_000_000 {
                    rejectLogged = now
                    logger.warning("\(answer.rejected) events rejected by the output: \(answer.message.isEmpty ? "no reason given" : answer.message)")
                }
            }
            pending = zip(pending, answer.verdicts).compactMap { $1 == .retry ? $0 : nil }
            guard !pending.isEmpty else { return }
            if sinkContext.shouldAbandon {
                sinkContext.countLost(pending.count, .shutdown)
                return
            }
            // Backoff, jittered, doubled up to retry_max; never shorter than the plugin asked.
            let jittered = wait / 2 + Int64.random(in: 0...max(1, wait / 2))
            sinkContext.pause(max(jittered, min(answer.retryAfter, config.retryMax)))
            wait = min(config.retryMax, wait.multipliedReportingOverflow(by: 2).overflow ? config.retryMax : wait * 2)
            attempt = attempt == UInt32.max ? attempt : attempt + 1
            if sinkContext.shouldAbandon {
                sinkContext.countLost(pending.count, .shutdown)
                return
            }
        }
    }

    func tick(context sinkContext: SinkContext) {
        guard let plugin, let handle, failure == nil, let flush = plugin.descriptor.flush else { return }
        let now = monotonicNanoseconds()
        guard now - lastFlush >= config.flushInterval else { return }
        lastFlush = now
        let (status, message) = withPluginError { err in flush(handle, now.addingSaturating(config.flushInterval), err) }
        if status != VIGIL_OK { logger.warning("flush returned \(statusName(status)): \(message)") }
    }

    func shutdown(context sinkContext: SinkContext) {
        guard let plugin, let handle else { return }
        if failure == nil, let flush = plugin.descriptor.flush {
            let deadline = min(sinkContext.abandonDeadline, monotonicNanoseconds().addingSaturating(5_000_000_000))
            let (status, message) = withPluginError { err in flush(handle, deadline, err) }
            if status != VIGIL_OK { logger.warning("flush at shutdown returned \(statusName(status)): \(message)") }
        }
        let (status, message) = withPluginError { err in plugin.descriptor.stop(handle, err) }
        if status != VIGIL_OK { logger.warning("stop returned \(statusName(status)): \(message)") }
        plugin.descriptor.destroy(handle)
        context?.retire()
        self.handle = nil
    }

    private var failureReported = false
    private func reportFailureOnce(_ why: String) {
        guard !failureReported else { return }
        failureReported = true
        logger.critical("sink '\(sinkName)' failed: \(why); its events are counted lost (write_failed)")
    }
}

/// The host functions an output instance calls: its log lines are the
/// sink's, held to the same limit as a monitor's (`PluginLogLimit`); it has
/// nothing to emit.
private final class OutputHost: PluginHostCallbacks {
    let logger: Logger
    let plugin: String
    let sink: String
    private let limit: Mutex<PluginLogLimit>

    init(logger: Logger, plugin: String, sink: String) {
        self.logger = logger
        self.plugin = plugin
        self.sink = sink
        self.limit = Mutex(PluginLogLimit(now: monotonicNanoseconds()))
    }

    func emit(_ event: UnsafePointer<vigil_event>?) -> vigil_status { VIGIL_E_UNSUPPORTED }
    func log(level: Int, message: String, cut: Int) {
        let verdict = limit.withLock { $0.admit(now: monotonicNanoseconds()) }
        if let note = verdict.note {
            logger.warning("\(PluginLogLimit.text(of: note, monitor: "of sink \(sink)", config: PluginLogLimit.Config()))")
        }
        guard verdict.write else { return }
        let severity = Severity(rawValue: UInt8(clamping: max(0, min(level, 5)))) ?? .info
        logger.log(level: severity.logLevel, "\(message)\(cut > 0 ? "… [cut \(cut) bytes]" : "")", metadata: ["plugin": "\(plugin)"])
    }
    func setAvailability(_ available: Bool, reason: String) {}
    func now() -> Int64 { realtimeNanoseconds() }
    func markFinished() {}
}
