import Glibc
import VigilCore

/// Where a plugin instance runs, told to the plugin through its process's
/// environment: `VIGIL_ISOLATION=process` in a runner (the plugin is alone
/// in its process), `none` in the host's process. A plugin that can only
/// run alone (collectd's plugins that keep process-wide state, catch
/// signals or exit) refuses in-process creation by it; the probe child of
/// `validate` sets it before each create as `run` would place the monitor.
/// Set only while one thread runs (setenv is not safe beside getenv).
public enum IsolationEnvironment {
    public static let variable = "VIGIL_ISOLATION"

    public static func set(_ isolation: Isolation) {
        setenv(variable, isolation.rawValue, 1)
    }
}
