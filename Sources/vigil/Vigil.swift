import ArgumentParser
import CVigilSys
import Foundation
import Logging
import VigilABI
import VigilCore
import VigilIsolation
import VigilSinks
import VigilRuntime
import VigilControl

/// The process's entry. A plugin runner runs on the process's main thread,
/// before anything else: under an async main, libdispatch ends that thread
/// (pthread_exit, then keeps it asleep), and glibc's setuid changes every
/// thread but one that has ended, so a runner given `user:` would keep a
/// thread, the one /proc shows, with the host's credentials.
@main
enum Entry {
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.starts(with: ["plugins", "runner"]) {
            Plugins.Runner.main(Array(arguments.dropFirst(2)))
        }
        // The runners' fork server (RunnerForkServer.swift): returns only in
        // a runner it forked, with that runner's arguments.
        if arguments.starts(with: ["plugins", "fork-server", "--parent"]), arguments.count >= 4,
           let parent = Int32(arguments[3]) {
            Plugins.Runner.main(RunnerForkServer.serve(parent: parent))
        }
        // Plugins loaded by this process run in it, whatever the environment said.
        IsolationEnvironment.set(.none)
        // An exit() that is not ours (a plugin in process) ends with its own
        // status (docs/exit-status.md), not the one the plugin chose.
        vigil_guard_exit()
        Task {
            do {
                var command = try Vigil.parseAsRoot()
                if var command = command as? AsyncParsableCommand {
                    try await command.run()
                } else {
                    try command.run()
                }
            } catch {
                vigil_exit_is_ours()
                Vigil.exit(withError: error)
            }
            vigil_exit_is_ours()
            exit(0)
        }
        dispatchMain()
    }
}

struct Vigil: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vigil",
        abstract: "A monitor host: loads monitor plugins, runs them as a manifest says, routes their events to sinks.",
        version: vigilVersion,
        subcommands: [Run.self, Validate.self, Plugins.self, Ctl.self, Top.self, Tail.self, NewPlugin.self])
}

/// Options shared by the verbs that load plugins.
struct PluginDirOptions: ParsableArguments {
    @Option(name: .customLong("plugin-dir"), help: ArgumentHelp("Also search DIR for plugins (before the manifest's plugin_dirs). Repeatable.", valueName: "DIR"))
    var pluginDirs: [String] = []

    @Flag(name: .customLong("allow-unsafe-plugins"), help: ArgumentHelp(
        "Load plugin files that fail the owner and permission rules (the file, or a directory above it, writable by group or others or owned by another user than root and the one vigil runs as), warning for each; never files that fail the ELF checks. A manifest's 'allow_unsafe_plugins: true' does the same. See docs/plugins.md."))
    var allowUnsafePlugins = false

    func allowUnsafe(_ manifest: Manifest?) -> Bool { allowUnsafePlugins || manifest?.allowUnsafePlugins == true }

    func directories(manifest: Manifest?) -> [String] {
        var dirs = pluginDirs
        if let manifest { dirs += manifest.resolvedPluginDirs }
        return PluginCatalog.standardDirectories(extra: dirs)
    }

    /// The plugin probe: `vigil plugins probe`, hidden.
    func prober(manifest: Manifest?) -> PluginProber {
        PluginProber(command: ["plugins", "probe"], allowUnsafe: allowUnsafe(manifest))
    }

    /// Probes of plugin files in a child process: what `validate` and
    /// `plugins describe` know of a plugin, and what `run` checks before it
    /// loads one itself.
    func probes(manifest: Manifest?, scope: PluginProbes.Scope, creating: Bool = false, timing: Bool = false,
                cache: ProbeReportCache? = nil) -> PluginProbes {
        PluginProbes(prober: prober(manifest: manifest), scope: scope, manifest: creating ? manifest : nil,
                     directories: directories(manifest: manifest), timing: timing, cache: cache)
    }

    func catalog(manifest: Manifest?, probes: PluginProbes? = nil,
                 warn: @escaping @Sendable (String) -> Void = PluginVetting.warnOnStandardError) -> PluginCatalog {
        let policy = PluginFilePolicy(allowUnsafe: allowUnsafe(manifest))
        let vetting = probes?.vetting(policy: policy, warn: warn) ?? PluginVetting(policy: policy, warn: warn)
        return PluginCatalog(directories: directories(manifest: manifest), vetting: vetting)
    }
}

/// Reads and checks a manifest file and what it includes; prints its diagnostics to stderr.
enum ManifestFile {
    /// The file's bytes go to the loader as they are: it reports a NUL or invalid
    /// UTF-8 where it is. (Decoding here first cut the text at its first NUL:
    /// `String(validatingUTF8:)` reads a C string.) At most one byte past the
    /// size limit is read, so /dev/zero or a huge file costs nothing; fragments
    /// are held to the same and to the limits in all (ManifestIncludes.swift).
    static func load(_ path: String) -> (Manifest?, [Diagnostic]) {
        ManifestLoader(file: path, environment: FileManifestSource.environment()).load(from: FileManifestSource())
    }

    /// Sorted by file (the main manifest first, then fragments in the order
    /// read), then line and column.
    static func print(_ diagnostics: [Diagnostic], files: [String] = []) {
        let order = Dictionary(files.enumerated().map { ($1, $0) }, uniquingKeysWith: { a, _ in a })
        let sorted = diagnostics.enumerated().sorted {
            let (a, b) = ($0.element.location, $1.element.location)
            return (order[a.file] ?? files.count, a.line, a.column, $0.offset) < (order[b.file] ?? files.count, b.line, b.column, $1.offset)
        }
        for d in sorted { FileHandle.standardError.write(Data((d.element.description + "\n").utf8)) }
    }
}

/// A duration given on the command line, held to the manifest's bounds
/// (0…365d), so that no deadline built from it can overflow.
func parseDuration(_ text: String) throws -> Int64 {
    guard let ns = Units.parseDuration(text) else {
        throw ValidationError("'\(text)' is not a duration; write 250ms, 5s, 1m…")
    }
    guard ns >= 0, ns <= ManifestLimits.maxDuration else {
        throw ValidationError("'\(text)' is longer than the limit of \(ManifestLimits.maxDurationText)")
    }
    return ns
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the monitors and sinks of a manifest until SIGINT or SIGTERM.",
        discussion: """
        Starts every enabled monitor, polls each at its interval on its own serial queue, and routes events to \
        the sinks. A monitor whose plugin is refused, or whose options are invalid, is reported and skipped; \
        the others run. Plugin files are checked before they are loaded (owner, permissions, ELF headers; \
        docs/plugins.md), and a plugin from outside vigil's own directories (its executable's, ../lib/vigil/plugins from there, \
        /usr/local/lib/vigil/plugins) is \
        loaded once in a child process first, so that one that crashes or hangs while loading is refused. \
        SIGHUP (or 'vigil ctl reload', or a change with --watch) reads the manifest again and applies only what \
        changed: monitors and sinks whose configuration is the same keep running untouched, removed ones stop and \
        drain, added ones start, changed ones restart; an invalid manifest changes nothing. SIGHUP also makes file \
        sinks reopen their files. On SIGINT/SIGTERM (or after --for) every \
        monitor is stopped and every sink drained before exit, within one --drain-timeout.

        Exit status (docs/exit-status.md):
          0   every event a sink took was delivered (with --once: and every monitor started and its poll returned OK)
          1   the run failed: it could not start (a --control socket that cannot be had); with --for or --once a \
        monitor's plugin was refused or its create or start failed (and it did not run since); with --once also \
        a poll that failed or passed its timeout (each reason on stderr)
          2   invalid manifest (or an include of it): nothing was started
          3   events were lost: the exit lines and --summary count them per sink and reason (queue_full, \
        shutdown, which includes a sink stuck past the drain deadline, write_failed, kernel_buffer, too_large)
          64  usage: an unknown option, a bad duration, --json without --once
        When several apply, the first in this order wins: 64, 2, 1, 3. Emits a plugin made that the host \
        refused (counted per monitor and reason) were never taken, so they are not losses; nor are events no \
        sink's match asks for (counted as unrouted). A monitor that fails or is refused in a run without an end \
        (a service) does not change the status: the others ran, and the log, `vigil ctl health` and --summary say so.
        """)

    @Argument(help: "The manifest (YAML).") var manifest: String
    @Option(name: .customLong("for"), help: ArgumentHelp("Stop by itself after DURATION (e.g. 2s, 1m).", valueName: "DURATION"))
    var runFor: String?
    @Option(help: "Log level of the host's messages: debug, info, notice, warning, error (default: the manifest's log_level, else info).")
    var logLevel: String?
    @Option(help: "Host name written in events (default: the manifest's host, else the system's).") var host: String?
    @Option(help: ArgumentHelp("At shutdown, how long a sink that cannot deliver (a peer that is down) may hold on to its events before they are counted as lost.", valueName: "DURATION"))
    var drainTimeout: String = "5s"
    @Option(help: ArgumentHelp("At exit, write a JSON summary (per sink and monitor counters, CPU time, memory) to FILE.", valueName: "FILE"))
    var summary: String?
    @Option(help: ArgumentHelp("The control API's socket (vigil ctl): unix:PATH, or none. Default: $VIGIL_STATE_DIR/vigil.sock, under systemd $RUNTIME_DIRECTORY/vigil.sock, as root /run/vigil/vigil.sock, else $XDG_RUNTIME_DIR/vigil/vigil.sock; a default socket another vigil holds is skipped with a warning naming it; one named here must be had.", valueName: "ADDRESS"))
    var control: String?
    @Option(name: .customLong("control-group"), help: ArgumentHelp("The group the control socket is opened to (mode 0660); default: vigil's own.", valueName: "GROUP"))
    var controlGroup: String?
    @Option(name: .customLong("control-tcp"), help: ArgumentHelp("Also serve the control API on TCP: tcp://127.0.0.1:PORT (port 0: a free one, which the log says). Every request needs the bearer token of --control-token-file. Plain HTTP: an address other than loopback needs --control-tcp-allow-remote.", valueName: "ADDRESS"))
    var controlTCP: String?
    @Option(name: .customLong("control-token-file"), help: ArgumentHelp("The bearer token of --control-tcp: a file of this user (or root) that group and others cannot read (chmod 600); created with a new random token when it does not exist.", valueName: "FILE"))
    var controlTokenFile: String?
    @Flag(name: .customLong("control-tcp-allow-remote"), help: "Let --control-tcp listen on an address other machines reach (no TLS: the token crosses the network in clear).")
    var controlTCPAllowRemote = false
    @Flag(help: "Reload when the manifest (or a file it includes) changes, as SIGHUP and 'vigil ctl reload' do.")
    var watch = false
    @Flag(help: ArgumentHelp("Start every monitor, take one poll (a push-only monitor: its events until the first, at most 1s after its start), print the events on stdout, stop. The manifest's sinks are not made (no file written, no socket bound or connected) and no control socket is opened; rules' programs are not run. Exit 1 if a monitor failed to start or its poll failed (the reason on stderr); a monitor whose source this machine does not have is named on stderr as unavailable, which is not a failure."))
    var once = false
    @Flag(help: "With --once: print JSON Lines instead of one readable line per event.")
    var json = false
    @OptionGroup var plugins: PluginDirOptions

    func validate() throws {
        if json && !once { throw ValidationError("--json goes with --once") }
        if watch && once { throw ValidationError("--once ends by itself; --watch does not go with it") }
        if once && runFor != nil { throw ValidationError("--once ends by itself; --for does not go with it") }
        // Here, not in run(): an error from validate() comes with `vigil run`'s usage, not the top level's.
        _ = try runFor.map(parseDuration)
        _ = try parseDuration(drainTimeout)
    }

    func run() async throws {
        let (loaded, diagnostics) = ManifestFile.load(manifest)
        // --once prints events on stdout; the host says only what went wrong on stderr.
        let level = logLevel.flatMap(Severity.init(name:)) ?? (once ? .warning : nil) ?? loaded?.logLevel ?? .info
        HostLogging.bootstrap(level: level.logLevel)
        let logger = Logger(label: "vigil")
        // Before any child is started: takes NOTIFY_SOCKET and WATCHDOG_* out of the environment.
        SystemdNotifier.shared.adoptEnvironment(logger: logger)
        guard let manifest = loaded, !diagnostics.contains(where: { $0.level == .error }) else {
            ManifestFile.print(diagnostics, files: loaded?.files ?? [self.manifest])
            FileHandle.standardError.write(Data("vigil: \(self.manifest) is not a valid manifest; nothing was started\n".utf8))
            throw ExitCode(2)
        }
        ManifestFile.print(diagnostics, files: manifest.files)  // warnings and notes
        // A file sink that can never open its path is an error of the
        // manifest's, as `validate` says: nothing starts.
        let sinkErrors = ResolvedManifest<HostedPlugin>.sinkPreflightProblems(manifest).filter { $0.level == .error }
        if !sinkErrors.isEmpty {
            ManifestFile.print(sinkErrors, files: manifest.files)
            throw ExitCode(2)
        }
        var options = RunOptions(runFor: try runFor.map(parseDuration))
        options.hostName = host
        options.drainTimeout = try parseDuration(drainTimeout)
        options.summaryPath = summary
        // No control API at all with --once, so no token file either.
        if once {
            options.once = OnceOptions(json: json)
        } else {
            var plane = ControlOptions(address: ControlAddress.standard(), group: controlGroup)
            switch control {
            case "none":
                plane.address = nil
            case let text?:
                plane.address = try ControlAddress(parsing: text)
                plane.required = true
            case nil:
                break
            }
            plane.tcp = try ControlTCPOptions.listener(address: controlTCP, tokenFile: controlTokenFile,
                                                       allowRemote: controlTCPAllowRemote, logger: logger)
            options.controlPlane = plane
        }
        // Plugins from outside the host's own directories are first loaded in a
        // child process: one that crashes or hangs there is refused, not run.
        // One file's probe serves the whole run, reloads included, while the file stays the same.
        let probeCache = ProbeReportCache()
        let catalog = plugins.catalog(manifest: manifest,
                                      probes: plugins.probes(manifest: manifest, scope: .untrusted, cache: probeCache),
                                      warn: { logger.warning("\($0)") })
        // Each plugin runs where IsolationDecision says: in process, or in a
        // runner process of its own that loads it (a crash costs the runner).
        var decisions: [String: IsolationDecision] = [:]
        var resolution = ResolvedManifest<HostedPlugin>.resolve(manifest, catalog: catalog,
                                                                allowUnsafe: plugins.allowUnsafe(manifest), decisions: &decisions)
        if once {  // a look at the monitors must not notify anyone
            for i in resolution.rules.indices { resolution.rules[i].exec = nil }
        }
        for monitor in manifest.monitors {
            guard let d = decisions[monitor.name] else { continue }
            logger.info("monitor '\(monitor.name)' runs \(d.isolation == .process ? "in a runner process" : "in process") (\(d.reason))\(d.limitsEnforcement.map { "; \($0)" } ?? "")")
        }
        for d in resolution.diagnostics {
            let text = "\(d.location): \(d.message)\(d.hint.map { " (\($0))" } ?? "")"
            if d.level == .error { logger.error("\(text)") } else { logger.warning("\(text)") }
        }
        for (config, _) in resolution.refused {
            logger.error("monitor '\(config.name)' will not run; the others go on")
        }
        if !once {  // --once ends by itself; nothing to reload
            options.reloader = reloader(logger: logger, probeCache: probeCache)
            options.watch = watch
        }
        options.outputCatalog = catalog
        options.allowUnsafePlugins = plugins.allowUnsafePlugins
        let runtime = VigilRuntime(manifest: manifest, resolution: resolution, options: options, logger: logger)
        let summary = try await runtime.run()
        // What `validate` would call invalid (its one judgement): nothing ran.
        if !runtime.refusedAtStart.isEmpty {
            ManifestFile.print(runtime.refusedAtStart, files: manifest.files)
            throw ExitCode(2)
        }
        if once {
            let failures = resolution.refused.map { ($0.config.name, "its plugin was refused: \($0.reason)") } + runtime.onceFailures
            for (monitor, reason) in runtime.onceUnavailable {
                FileHandle.standardError.write(Data("vigil: monitor '\(monitor)' unavailable on this machine (not a failure): \(shownText(reason))\n".utf8))
            }
            for (monitor, reason) in failures {
                FileHandle.standardError.write(Data("vigil: monitor '\(monitor)' failed: \(shownText(reason))\n".utf8))
            }
            if !failures.isEmpty { throw ExitCode(1) }
        } else if runFor != nil {
            // A run with an end is a test of the manifest: a monitor that never ran fails it.
            let failures = resolution.refused.map { ($0.config.name, "its plugin was refused: \($0.reason)") } + runtime.startFailures
            // Through the log: under systemd each line keeps its priority.
            for (monitor, reason) in failures {
                logger.error("monitor '\(monitor)' failed to start: \(shownText(reason)); exit status 1")
            }
            if !failures.isEmpty { throw ExitCode(1) }
        }
        // An in-process plugin that hangs in start or stop cannot be ended
        // (a runner's would be, and its run exits 1 for it): said the same.
        let abandoned = runtime.abandoned
        if !abandoned.isEmpty {
            logger.error("monitors \(abandoned.joined(separator: ", ")) would not stop and were left running; exit status 1")
            throw ExitCode(1)
        }
        if summary.lost > 0 || summary.corruptBufferParts > 0 { throw ExitCode(3) }
    }
}

extension Run {
    /// How a reload reads and resolves the manifest: as at start, with new
    /// plugin files found, except that monitors which did not change keep
    /// the plugin they run with.
    func reloader(logger: Logger, probeCache: ProbeReportCache) -> ManifestReloader {
        let path = manifest
        let plugins = self.plugins
        return { reuse in
            let (loaded, diagnostics) = ManifestFile.load(path)
            guard let manifest = loaded, !diagnostics.contains(where: { $0.level == .error }) else {
                return .invalid(diagnostics)
            }
            let catalog = plugins.catalog(manifest: manifest,
                                          probes: plugins.probes(manifest: manifest, scope: .untrusted, cache: probeCache),
                                          warn: { logger.warning("\($0)") })
            var decisions: [String: IsolationDecision] = [:]
            let resolution = ResolvedManifest<HostedPlugin>.resolve(manifest, catalog: catalog,
                                                                    allowUnsafe: plugins.allowUnsafe(manifest),
                                                                    decisions: &decisions, reuse: { reuse($0, manifest) })
            return .ready(manifest, resolution, warnings: diagnostics)
        }
    }
}

struct Validate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a manifest without starting anything.",
        discussion: """
        Reports every problem as FILE:LINE:COLUMN: error: … with a hint: unknown keys, duplicate names, wrong \
        types, bad durations, sizes and addresses, unknown plugins, and options that the plugin's \
        self-description does not accept, and thresholds and rules that name monitors, kinds or fields the \
        plugins do not have or compare values of the wrong type (docs/rules.md). Each plugin is loaded and asked to describe itself, and each monitor's \
        instance is created with its options and destroyed at once, so that the plugin can refuse values only \
        it can check (reported at the option's place when the plugin names it); none is started. Plugin files \
        are checked before they are loaded (owner, permissions, ELF headers; docs/plugins.md), and each is \
        loaded and its instances created in a child process only, never in this one, each create under its monitor's timeout \
        (else the larger of 5s and its interval): a plugin that crashes or hangs is an error at its monitor, \
        naming the signal or the deadline. \
        A manifest is plain UTF-8 YAML of at most 4MiB: NUL bytes, control characters, tags and a second document \
        are errors, aliases may repeat 10000 nodes in all, nesting is 64 levels, durations are at most 365d. \
        File sink paths and unix socket paths are checked against the file system and the kernel's limit, and \
        match patterns against the kinds the plugins emit. The fragments an 'include:' names are read and checked \
        as part of the manifest, each problem at its own file's line and column, and a monitor, sink or rule \
        defined in two files is an error at both (docs/manifest.md). Exits 0 only when the manifest is valid.
        """)

    @Argument(help: "The manifest (YAML).") var manifest: String
    @OptionGroup var plugins: PluginDirOptions

    func run() async throws {
        let (loaded, diagnostics) = ManifestFile.load(manifest)
        var all = diagnostics
        if let loaded {
            // Every plugin file is loaded, and each monitor's instance created,
            // in a child process only: a crash or a hang is an error, not our end.
            let probes = plugins.probes(manifest: loaded, scope: .all, creating: true)
            let resolution = ResolvedManifest.resolve(loaded, probes: probes)
            all += resolution.diagnostics + resolution.validateInstances()
            all += SinkValidation.diagnostics(loaded, probes: probes)
        }
        ManifestFile.print(all, files: loaded?.files ?? [manifest])
        let errors = all.filter { $0.level == .error }.count
        let warnings = all.filter { $0.level == .warning }.count
        guard errors == 0, let loaded else {
            FileHandle.standardError.write(Data("\(manifest): \(counted(errors, "error")), \(counted(warnings, "warning"))\n".utf8))
            throw ExitCode(1)
        }
        let thresholds = loaded.monitors.reduce(0) { $0 + $1.thresholds.count }
        let conditions = (thresholds > 0 ? ", \(counted(thresholds, "threshold"))" : "")
            + (loaded.rules.isEmpty ? "" : ", \(counted(loaded.rules.count, "rule"))")
        // Where each monitor's plugin will run under `vigil run`.
        let catalog = plugins.catalog(manifest: loaded)
        let host = PluginProbes.hostDirectories()
        for monitor in loaded.monitors {
            let reference = loaded.pluginReference(of: monitor)
            let path = monitor.pluginIsPath ? reference : catalog.locate(reference)
            let d = IsolationDecision.decide(for: monitor, in: loaded, path: path, hostDirectories: host)
            print("  \(monitor.name): \(d.isolation == .process ? "isolation: process" : "isolation: none") (\(d.reason))")
        }
        for (sink, placement) in SinkValidation.placements(loaded, catalog: catalog) {
            print("  sink \(sink): \(placement)")
        }
        let fragments = loaded.files.count - 1
        print("\(manifest)\(fragments > 0 ? " and \(counted(fragments, "included file"))" : ""): valid: \(counted(loaded.monitors.count, "monitor")) (\(loaded.monitors.filter(\.enabled).count) enabled), \(counted(loaded.sinks.count, "sink"))\(conditions)\(warnings > 0 ? ", \(counted(warnings, "warning"))" : "")")
    }
}
