import ArgumentParser
import Foundation
import Logging
import VigilCore
import VigilHost

@main
struct Vigil: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "vigil",
        abstract: "A monitor host: loads monitor plugins, runs them as a manifest says, routes their events to sinks.",
        version: vigilVersion,
        subcommands: [Run.self, Validate.self, Plugins.self, Tail.self, NewPlugin.self])
}

/// Options shared by the verbs that load plugins.
struct PluginDirOptions: ParsableArguments {
    @Option(name: .customLong("plugin-dir"), help: ArgumentHelp("Also search DIR for plugins (before the manifest's plugin_dirs). Repeatable.", valueName: "DIR"))
    var pluginDirs: [String] = []

    func catalog(manifest: Manifest?) -> PluginCatalog {
        var dirs = pluginDirs
        if let manifest { dirs += manifest.resolvedPluginDirs }
        return PluginCatalog(directories: PluginCatalog.standardDirectories(extra: dirs))
    }
}

/// Reads and checks a manifest file; prints its diagnostics to stderr.
enum ManifestFile {
    static func load(_ path: String) -> (Manifest?, [Diagnostic]) {
        guard let data = FileManager.default.contents(atPath: path) else {
            let why = FileManager.default.fileExists(atPath: path) ? "cannot read it" : "no such file"
            return (nil, [Diagnostic(at: SourceLocation(file: path, line: 1, column: 1), "\(why)")])
        }
        guard let text = String(validatingUTF8: Array(data).map { CChar(bitPattern: $0) } + [0]) ?? String(data: data, encoding: .utf8) else {
            return (nil, [Diagnostic(at: SourceLocation(file: path, line: 1, column: 1), "not a YAML text file (not UTF-8)")])
        }
        if text.utf8.contains(0) {
            return (nil, [Diagnostic(at: SourceLocation(file: path, line: 1, column: 1), "not a YAML text file (it holds NUL bytes)")])
        }
        return ManifestLoader(file: path, environment: ProcessInfo.processInfo.environment).load(text)
    }

    static func print(_ diagnostics: [Diagnostic]) {
        let sorted = diagnostics.sorted {
            ($0.location.line, $0.location.column) < ($1.location.line, $1.location.column)
        }
        for d in sorted { FileHandle.standardError.write(Data((d.description + "\n").utf8)) }
    }
}

func parseDuration(_ text: String) throws -> Int64 {
    guard let ns = Units.parseDuration(text) else {
        throw ValidationError("'\(text)' is not a duration; write 250ms, 5s, 1m…")
    }
    return ns
}

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the monitors and sinks of a manifest until SIGINT or SIGTERM.",
        discussion: """
        Starts every enabled monitor, polls each at its interval on its own serial queue, and routes events to \
        the sinks. A monitor whose plugin is refused, or whose options are invalid, is reported and skipped; \
        the others run. SIGHUP makes file sinks reopen their files. On SIGINT/SIGTERM (or after --for) every \
        monitor is stopped and every sink drained before exit, within one --drain-timeout.

        Exit status: 0 when every routed event was delivered; 3 when a sink lost events (the exit lines and \
        --summary say how many, per sink and reason: queue_full, shutdown, write_failed, kernel_buffer, \
        too_large); 2 for an invalid manifest.
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
    @OptionGroup var plugins: PluginDirOptions

    func run() async throws {
        let (loaded, diagnostics) = ManifestFile.load(manifest)
        let level = logLevel.flatMap(Severity.init(name:)) ?? loaded?.logLevel ?? .info
        HostLogging.bootstrap(level: level.hostLogLevel)
        let logger = Logger(label: "vigil")
        guard let manifest = loaded, !diagnostics.contains(where: { $0.level == .error }) else {
            ManifestFile.print(diagnostics)
            FileHandle.standardError.write(Data("vigil: \(self.manifest) is not a valid manifest; nothing was started\n".utf8))
            throw ExitCode(2)
        }
        ManifestFile.print(diagnostics)  // warnings
        var options = RunOptions(runFor: try runFor.map(parseDuration))
        options.hostName = host
        options.drainTimeout = try parseDuration(drainTimeout)
        options.summaryPath = summary
        let resolution = ManifestResolution.resolve(manifest, catalog: plugins.catalog(manifest: manifest))
        for d in resolution.diagnostics {
            let text = "\(d.location): \(d.message)\(d.hint.map { " (\($0))" } ?? "")"
            if d.level == .error { logger.error("\(text)") } else { logger.warning("\(text)") }
        }
        for (config, _) in resolution.refused {
            logger.error("monitor '\(config.name)' will not run; the others go on")
        }
        let runtime = VigilRuntime(manifest: manifest, resolution: resolution, options: options, logger: logger)
        let summary = try await runtime.run()
        if summary.lost > 0 { throw ExitCode(3) }
    }
}

extension Severity {
    var hostLogLevel: Logger.Level {
        switch self {
        case .debug: .debug
        case .info: .info
        case .notice: .notice
        case .warning: .warning
        case .error: .error
        case .critical: .critical
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
        it can check (reported at the option's place when the plugin names it); none is started. \
        Exits 0 only when the manifest is valid.
        """)

    @Argument(help: "The manifest (YAML).") var manifest: String
    @OptionGroup var plugins: PluginDirOptions

    func run() async throws {
        let (loaded, diagnostics) = ManifestFile.load(manifest)
        var all = diagnostics
        if let loaded {
            let resolution = ManifestResolution.resolve(loaded, catalog: plugins.catalog(manifest: loaded))
            all += resolution.diagnostics + resolution.validateInstances()
        }
        ManifestFile.print(all)
        let errors = all.filter { $0.level == .error }.count
        let warnings = all.count - errors
        guard errors == 0, let loaded else {
            FileHandle.standardError.write(Data("\(manifest): \(errors) error\(errors == 1 ? "" : "s"), \(warnings) warning\(warnings == 1 ? "" : "s")\n".utf8))
            throw ExitCode(1)
        }
        let thresholds = loaded.monitors.reduce(0) { $0 + $1.thresholds.count }
        let conditions = (thresholds > 0 ? ", \(thresholds) threshold\(thresholds == 1 ? "" : "s")" : "")
            + (loaded.rules.isEmpty ? "" : ", \(loaded.rules.count) rule\(loaded.rules.count == 1 ? "" : "s")")
        print("\(manifest): valid: \(loaded.monitors.count) monitors (\(loaded.monitors.filter(\.enabled).count) enabled), \(loaded.sinks.count) sinks\(conditions)\(warnings > 0 ? ", \(warnings) warnings" : "")")
    }
}
