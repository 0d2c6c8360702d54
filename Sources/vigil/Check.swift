import ArgumentParser
import Foundation
import VigilABI
import VigilCore
import VigilConformance
import VigilIsolation
import VigilRuntime

extension Plugins {
    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Check that a plugin keeps the ABI's contract, running it in a child process.",
            discussion: """
            Loads the plugin in a child process and checks: negotiation; its self-description (names, types, \
            defaults that type-check, event kinds and fields); create with default options (or those given with \
            --option/--options); start, poll, stop twice on one instance (a push plugin is watched for events \
            instead of polled); stop on a stopped instance, then destroy; two instances at once; that no emit \
            arrives after stop returned; and that every event emitted matches the declared kinds, field names \
            and types. It reports whether events came from threads of the plugin's own, and the time each call \
            took. A crash or a hang of the plugin ends the child, not this command: the report names the signal \
            or the deadline, and the call it happened in. Exits 0 when every check passed (a check skipped, for \
            example for a required option without a value, does not fail), 1 when one failed, 2 when the plugin \
            could not be checked (not found, refused by the loader, unusable options).
            """)

        @Argument(help: "A plugin name, or a path to a .so file.") var plugin: String
        @Option(name: .customLong("option"), help: ArgumentHelp("Give option NAME the value VALUE, as a manifest's options: would. Repeatable; wins over --options.", valueName: "NAME=VALUE"))
        var optionPairs: [String] = []
        @Option(name: .customLong("options"), help: ArgumentHelp("Options as a YAML mapping, e.g. '{threads: 2, message: hi}'.", valueName: "YAML"))
        var optionsYAML: String?
        @Option(help: ArgumentHelp("Deadline of each call into the plugin (e.g. 500ms, 5s).", valueName: "DURATION"))
        var timeout = "5s"
        @OptionGroup var plugins: PluginDirOptions

        // The child's side (this command, run again by itself).
        @Option(name: .customLong("child-fd"), help: .hidden) var childFD: Int32?
        @Option(name: .customLong("expect-name"), help: .hidden) var expectName: String?

        func validate() throws {
            for pair in optionPairs {
                guard let eq = pair.firstIndex(of: "="), eq != pair.startIndex else {
                    throw ValidationError("--option \(pair): write NAME=VALUE")
                }
            }
            guard try parseDuration(timeout) > 0 else { throw ValidationError("--timeout must be more than 0") }
        }

        func run() async throws {
            if let childFD {
                var request = Conformance.Request(path: plugin, expectedName: expectName,
                                                  optionPairs: optionPairs, optionsYAML: optionsYAML)
                request.allowUnsafePlugins = plugins.allowUnsafePlugins
                Conformance.runChild(request, fd: childFD)
                // Plugin threads that outlived their instances may still run: leave now.
                fflush(nil)
                _exit(0)
            }
            let status = ConformanceRunner.run(
                reference: plugin, catalog: plugins.catalog(manifest: nil), timeout: try parseDuration(timeout),
                childArguments: { path, name in
                    var args = ["plugins", "check", "--child-fd", "\(ConformanceRunner.childFD)"]
                    if plugins.allowUnsafePlugins { args.append("--allow-unsafe-plugins") }
                    // NAME=VALUE in one argument: a value may start with '-'.
                    if let name { args.append("--expect-name=\(name)") }
                    args += optionPairs.map { "--option=\($0)" }
                    if let optionsYAML { args.append("--options=\(optionsYAML)") }
                    return args + ["--", path]
                },
                report: { line in
                    print(line)
                    fflush(nil)
                },
                error: { FileHandle.standardError.write(Data("\($0)\n".utf8)) })
            if status != 0 { throw ExitCode(status) }
        }
    }
}
