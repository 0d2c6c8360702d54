import VigilKit

// What every monitor of the proc filesystem wrote for itself: its one
// option, its root refused when empty, the file it starts on, and a probe's
// failure told as a poll tells it (the source went: unavailable; anything
// else: temporary). One copy here, so that the next collector is its
// parsing and its events only.

/// `options: { procfs: … }`: the options of a monitor that reads only under
/// the proc filesystem's root.
public struct ProcfsOptions: DeclaredOptions {
    public var procfs = "/proc"

    public init() {}

    public static let schema = OptionSchema<ProcfsOptions>(
        .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."))
}

/// What a monitor that reads only under the proc filesystem's root is made
/// of: `options: { procfs: … }`, its context, and its root (files kept open
/// between polls). A collector subclasses it and is its `start` (the file it
/// needs) and its `poll`:
///
///     final class LoadMonitor: ProcfsMonitor, PolledMonitor {
///         static let spec = PluginSpec(…)
///         func start() throws(MonitorError) { try root.require("loadavg") }
///         func poll() throws(MonitorError) { … try root.pollText("loadavg") … }
///     }
open class ProcfsMonitor {
    public let context: MonitorContext
    public let root: FSRoot

    public required init(options: ProcfsOptions, context: MonitorContext) throws(MonitorError) {
        self.context = context
        self.root = try .monitorRoot(options.procfs, option: "procfs")
    }
}

extension FSRoot {
    /// The root an option names (`option`, for the error), its files kept
    /// open between polls (`keepingFilesOpen`); an empty one is refused.
    public static func monitorRoot(_ path: String, option: String) throws(MonitorError) -> FSRoot {
        guard !path.isEmpty else { throw .invalidOption(option, "must not be empty") }
        return FSRoot(path, keepingFilesOpen: true)
    }

    /// For `start`: unavailable (the host retries) unless `file` is there.
    /// `why` says more (" (no connection tracking)").
    public func require(_ file: String, _ why: String = "") throws(MonitorError) {
        guard exists(file) else { throw .unavailable("\(path(file)) does not exist\(why)") }
    }

    /// `readText` for a poll: a file that went is unavailable, any other
    /// failure temporary.
    public func pollText(_ file: String) throws(MonitorError) -> String {
        try MonitorError.probing { () throws(ProbeError) in try readText(file) }
    }
}

extension MonitorError {
    /// A probe's failure as a poll reports it: unavailable when the source
    /// is not there (`ProbeError.isUnavailable`), else temporary.
    public init(_ error: ProbeError) {
        self.init(error.isUnavailable ? .unavailable : .temporary, error.description)
    }

    /// `body`'s result, or its failure as `init(_:)` tells it.
    public static func probing<T>(_ body: () throws(ProbeError) -> T) throws(MonitorError) -> T {
        do {
            return try body()
        } catch {
            throw MonitorError(error)
        }
    }
}
