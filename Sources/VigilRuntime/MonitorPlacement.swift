import Logging
import VigilABI
import VigilCore
import VigilIsolation

@preconcurrency import CVigilPlugin

/// A monitor whose plugin says, from an in-process `create`, that this
/// instance cannot run in the host's process (VIGIL_E_UNSUPPORTED: collectd's
/// network or exec plugins, which start threads, catch signals or fork) is
/// moved into a runner process of its own when neither the monitor nor the
/// manifest chose where it runs, and the log says so in one line. Where one
/// of them says `isolation: none`, the answer stands, and is the manifest's
/// error, as `validate` reports it (`ResolvedManifest.judge`).
extension VigilRuntime {
    /// Whether `answer` from `instance`'s in-process create asks for a
    /// runner that the runtime may give it.
    func asksForRunner(_ instance: MonitorInstance, _ answer: (status: vigil_status, message: String)?) -> Bool {
        guard let answer, answer.status == VIGIL_E_UNSUPPORTED, instance.transport is InProcessTransport else { return false }
        return IsolationDecision.movable(instance.config, in: manifest)
    }

    /// A new instance of `instance`'s monitor, served by a runner process,
    /// in its place among the running monitors; nil when the runner could not
    /// start (logged; the old instance then fails as its create said) or the
    /// monitor left meanwhile (a reload).
    func moveToRunner(_ instance: MonitorInstance, because why: String) -> MonitorInstance? {
        let manifest = self.manifest
        let (started, limits) = HostedPlugin.startRunner(for: instance.config, path: instance.description.path,
                                                         allowUnsafe: options.allowUnsafePlugins || manifest.allowUnsafePlugins)
        let plugin: HostedPlugin
        switch started {
        case .success(let runner):
            plugin = runner
        case .failure(let refusal):
            logger.error("monitor '\(instance.name)' cannot run in the host's process (\(why)), and its runner did not start: \(refusal.reason)")
            return nil
        }
        let moved = Self.instance(.init(config: instance.config, plugin: plugin, options: instance.options), manifest: manifest,
                                  bus: bus, hostEvents: hostEvents, conditions: conditions, logger: logger,
                                  schedulesPolls: once == nil)
        guard replace(instance, with: moved) else {
            if case .runner(let process, _) = plugin { process.finish() }
            return nil
        }
        watchDone(moved)
        if isStopping { moved.hostIsStopping() }
        logger.info("monitor '\(instance.name)' moves to a runner process: its plugin cannot run in the host's (\(IsolationDecision.reasonForProcess(why)))\(limits.map { "; \($0)" } ?? "")")
        return moved
    }

    /// Creates `instance` (a monitor a reload added), moving it into a runner
    /// if its plugin asks for one, then launches it.
    func launchPlaced(_ instance: MonitorInstance) {
        instance.prepare { [self] answer in
            if asksForRunner(instance, answer), let moved = moveToRunner(instance, because: answer?.message ?? "") {
                moved.launch()
            } else {
                instance.launch()
            }
        }
    }
}
