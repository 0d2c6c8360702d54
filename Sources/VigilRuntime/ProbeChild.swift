import CVigilPlugin
import CVigilSys
import Foundation
import Glibc
import VigilABI
import VigilCore
import VigilIsolation

/// The probe child's side (`vigil plugins probe`, hidden).
public enum PluginProbe {
    public struct Request: Sendable {
        public var path: String
        public var allowUnsafe: Bool
        /// The manifest whose monitors `creates` names.
        public var manifest: String?
        public var creates: [String]
        public var timing: Bool

        public init(path: String, allowUnsafe: Bool, manifest: String?, creates: [String], timing: Bool) {
            self.path = path
            self.allowUnsafe = allowUnsafe
            self.manifest = manifest
            self.creates = creates
            self.timing = timing
        }
    }

    /// The create that `--timing` measures, with default options.
    static var timingInstance: String { PluginProber.timingInstance }

    /// Loads the plugin and creates the instances asked for, writing the
    /// stream to `fd`. The caller should leave at once after (`_exit`):
    /// plugin threads may still run.
    public static func runChild(_ request: Request, fd: Int32) {
        // A crash is expected here and reported by the parent: no core file.
        var noCore = rlimit(rlim_cur: 0, rlim_max: 0)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_CORE.rawValue), &noCore)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        let out = ProtocolWriter(fd: fd)
        // The parent already warned of every rule the override skips.
        let catalog = PluginCatalog(directories: [], vetting: PluginVetting(
            policy: PluginFilePolicy(allowUnsafe: request.allowUnsafe), warn: { _ in }))
        out.send("begin", "load", "-")
        // What a plugin costs a running host, not a fresh process: what a
        // host pays once, for its first plugin, is paid on a copy first.
        let warmUp = request.timing ? PluginTiming.WarmUp(copyOf: request.path) : nil
        let started = monotonicNanoseconds()
        let result = catalog.load(path: request.path)
        let loadTime = monotonicNanoseconds() - started
        out.send("end", "load", "-", "\(loadTime)")
        let plugin: LoadedPlugin
        switch result {
        case .failure(let refusal):
            let noEntry = refusal.reason.contains("does not export '\(VIGIL_ENTRY_SYMBOL)'")
            out.send("refused", noEntry ? "noentry" : "refused", refusal.reason)
            out.send("done")
            return
        case .success(let loaded):
            plugin = loaded
        }
        out.sendWhole("description", plugin.description.json())
        if request.timing {
            // Under the load's deadline: a create that hangs ends the timing, not the listing.
            out.send("begin", "create", PluginProbe.timingInstance)
            warmUp?.create()
            let measured = PluginTiming.measure(reference: request.path, catalog: catalog)
            out.send("end", "create", PluginProbe.timingInstance)
            let create: String
            if case .success(let t) = measured, let ns = t.create {
                create = "\(ns)"
            } else {
                create = "-"
            }
            let p = plugin.phases
            out.send("timing", "\(loadTime)", create, "\(p.vetting)", "\(p.dlopen)", "\(p.entry)", "\(p.reading)")
        }
        if let manifestPath = request.manifest, !request.creates.isEmpty {
            createInstances(request.creates, manifest: manifestPath, plugin: plugin, path: request.path, out: out)
        }
        out.send("done")
    }

    /// Creates and destroys each named monitor's instance with its options
    /// from the manifest, as `vigil validate` would in-process.
    static func createInstances(_ names: [String], manifest path: String, plugin: LoadedPlugin, path pluginPath: String,
                                out: ProtocolWriter) {
        // With its includes: a monitor may be defined in a fragment. The
        // host's own work, said as such: its time is never the plugin's.
        out.send("begin", "manifest", "-")
        let (manifest, problems) = ManifestLoader(file: path, environment: FileManifestSource.environment())
            .load(from: FileManifestSource())
        out.send("end", "manifest", "-")
        guard let manifest else {
            let why = problems.first { $0.level == .error }.map { "\($0.location): \($0.message)" } ?? "cannot read \(path)"
            for name in names { out.send("skip", name, why) }
            return
        }
        let byName = Dictionary(manifest.monitors.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let hostDirectories = PluginProbes.hostDirectories()
        for name in names {
            guard let config = byName[name] else {
                out.send("skip", name, "no monitor '\(name)' in \(path)")
                continue
            }
            let (options, problems) = OptionBinder.bind(config, to: plugin.description)
            if problems.contains(where: { $0.level == .error }) {
                out.send("skip", name, "its options do not bind")
                continue
            }
            let descriptor = plugin.descriptor
            let interval = plugin.description.effectiveInterval(config.interval)
            // The instance is told where `run` would put it, as a runner tells
            // its own; one that cannot run in the host's process, where
            // nothing chose, is created again as `run` would: in a runner.
            let decision = IsolationDecision.decide(for: config, in: manifest, path: pluginPath,
                                                    hostDirectories: hostDirectories)
            var placements = [decision.isolation]
            if decision.isolation == .none && IsolationDecision.movable(config, in: manifest) { placements.append(.process) }
            out.send("begin", "create", name)
            let started = monotonicNanoseconds()
            var status = VIGIL_OK, text = ""
            for placement in placements {
                IsolationEnvironment.set(placement)
                var handle: UnsafeMutableRawPointer?
                (status, text) = withCreateArgs(name: name, options: options, interval: interval,
                                                host: ValidationHost.context.pointer, api: ValidationHost.table) { args in
                    withPluginError { err in descriptor.create(&args, &handle, err) }
                }
                if status == VIGIL_OK, let handle { descriptor.destroy(handle) }
                if status != VIGIL_E_UNSUPPORTED || placement == .process { break }
                out.send("moved", name, text)
            }
            let ns = monotonicNanoseconds() - started
            out.send("end", "create", name, "\(ns)", "\(Int32(bitPattern: status.rawValue))", text)
        }
    }
}
