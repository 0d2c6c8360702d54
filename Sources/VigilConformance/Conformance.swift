import VigilIsolation
import Glibc

/// `vigil plugins check`, the child's side: loads one plugin in this process
/// (a child the parent can lose), drives its C ABI directly through the
/// loaded descriptor with a host table of its own that records every emit,
/// and streams one line per step to the parent (see `ConformanceProtocol`).
/// A crash or a hang here is the parent's to report, naming the call in
/// progress: every call into the plugin is announced (`begin`) before it is
/// made and reported (`end`) after it returns.
public enum Conformance {
    public struct Request: Sendable {
        /// The plugin file (the parent resolved names to paths).
        public var path: String
        /// When the parent was given a name: the name the plugin must describe itself with.
        public var expectedName: String?
        /// `--option NAME=VALUE`, as given.
        public var optionPairs: [String]
        /// `--options YAML`: a mapping.
        public var optionsYAML: String?
        /// How long a push plugin (no poll) is given to emit after start.
        public var pushWait: Int64
        /// How long emits are watched for after each stop returned.
        public var lateWindow: Int64
        /// `--allow-unsafe-plugins`: skip the owner and permission rules (PluginFile.swift).
        public var allowUnsafePlugins = false

        public init(path: String, expectedName: String? = nil, optionPairs: [String] = [], optionsYAML: String? = nil,
                    pushWait: Int64 = 1_000_000_000, lateWindow: Int64 = 250_000_000) {
            self.path = path
            self.expectedName = expectedName
            self.optionPairs = optionPairs
            self.optionsYAML = optionsYAML
            self.pushWait = pushWait
            self.lateWindow = lateWindow
        }
    }

    /// Runs every check, writing the protocol to `fd`. Returns when the checks
    /// are done; the caller should then leave at once (`_exit`): plugin threads
    /// that outlive their instances may still be running.
    public static func runChild(_ request: Request, fd: Int32) {
        // A crash is expected here and reported by the parent: no core file.
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        // Not inherited by whatever a plugin may run.
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        ConformanceSession(request: request, writer: ProtocolWriter(fd: fd)).run()
    }

    /// The checks, in the order they run and are reported.
    enum CheckName {
        static let negotiation = "negotiation"
        static let description = "self-description"
        static let createDefaults = "create with default options"
        static let createGiven = "create with the given options"
        static let createExamples = "create with example options"
        static let lifecycle = "start/poll/stop twice"
        static let stopStopped = "start and stop again, destroy"
        static let twoInstances = "two instances at once"
        static let pluginThreads = "emits from plugin threads"
        static let noLateEmit = "no emit after stop"
        static let declarations = "events match declarations"
        static let outputWrites = "output: batches written, flushed"
        static let outputHostile = "output: odd events, closed with a batch pending"
    }
}
