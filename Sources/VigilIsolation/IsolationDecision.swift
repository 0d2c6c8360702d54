import VigilABI
import VigilCore

/// Where a monitor's plugin runs, decided once per monitor (issue 12's rule):
///
/// 1. the monitor's own `isolation:`;
/// 2. else the manifest's top-level `isolation:`;
/// 3. else plugins shipped in the host's own directories (beside the `vigil`
///    executable, ../lib/vigil/plugins from it, and /usr/local/lib/vigil/plugins:
///    `PluginCatalog.ownDirectories`) run in process, and
///    every other plugin runs in a runner process.
public struct IsolationDecision: Sendable, Equatable {
    public var isolation: Isolation
    /// Why, in words for `validate` and the log.
    public var reason: String
    /// How a runner's `limits:` are enforced, when it has memory or cpu limits.
    public var limitsEnforcement: String?

    /// Whether the host may move the monitor into a runner when its plugin
    /// says it cannot run in the host's process (create's
    /// VIGIL_E_UNSUPPORTED): when neither the monitor nor the manifest says
    /// `isolation:`.
    public static func movable(_ monitor: MonitorConfig, in manifest: Manifest) -> Bool {
        monitor.isolation == nil && manifest.isolation == nil
    }

    /// A plugin's reason for needing a process of its own, without the
    /// `options.NAME: ` it may start with (the place is said apart).
    public static func reasonForProcess(_ message: String) -> String {
        guard message.hasPrefix("options."), let colon = message.firstRange(of: ": ") else { return message }
        return String(message[colon.upperBound...])
    }

    public static func decide(for monitor: MonitorConfig, in manifest: Manifest, path: String?,
                              hostDirectories: [String]) -> IsolationDecision {
        decide(own: monitor.isolation, of: "monitor", manifestDefault: manifest.isolation, path: path,
               hostDirectories: hostDirectories)
    }

    /// The same rule for an output plugin's sink (`of: "sink"`), or anything
    /// else that says its own `isolation:`; `manifestDefault` is the
    /// manifest's top-level one.
    public static func decide(own: Isolation?, of what: String, manifestDefault: Isolation?, path: String?,
                              hostDirectories: [String]) -> IsolationDecision {
        if let chosen = own {
            return IsolationDecision(isolation: chosen, reason: "the \(what) says so")
        }
        if let chosen = manifestDefault {
            return IsolationDecision(isolation: chosen, reason: "the manifest's default")
        }
        if let path, let real = PluginFile.realPath(of: path), hostDirectories.contains(PluginFile.parent(of: real)) {
            return IsolationDecision(isolation: .none, reason: "a plugin of the host's own directory")
        }
        return IsolationDecision(isolation: .process, reason: "a plugin from outside the host's own directories")
    }
}
