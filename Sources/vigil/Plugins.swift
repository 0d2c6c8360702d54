import ArgumentParser
import Foundation
import VigilABI
import VigilCore
import VigilIsolation
import VigilRuntime

struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List and describe the plugins this host can load.",
        subcommands: [List.self, Describe.self, Check.self, Probe.self, Runner.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List every plugin in the plugin directories: name, version, ABI version and path.",
            discussion: """
            Searches --plugin-dir, the manifest's plugin_dirs (with --manifest), the directory of the vigil \
            executable, ../lib/vigil/plugins from it (an installed vigil's own), then /usr/local/lib/vigil/plugins. Each .so file is checked in this process (owner, \
            permissions, ELF headers; docs/plugins.md), then loaded in a child process only (several at once), \
            so that a plugin that crashes or hangs while loading is refused, not the end of the listing. Shared objects that are not \
            Vigil plugins (no vigil_plugin_entry) are skipped. Plugins that load are listed on stdout; each file \
            refused is reported on stderr after the table, with the rule it broke. Exits 0 when no file was \
            refused, 1 when one was (the table is still complete).
            """)

        @Option(help: "Also search the plugin_dirs of this manifest.") var manifest: String?
        @Flag(help: "Also time each plugin: load (dlopen, negotiation, self-description) and create of one instance with default options, in its child process.")
        var timing = false
        @OptionGroup var plugins: PluginDirOptions

        func run() async throws {
            let manifest = self.manifest.flatMap { ManifestFile.load($0).0 }
            let probes = plugins.probes(manifest: manifest, scope: .all, timing: timing)
            let paths = probes.catalog.discover()
            // Checked here (none of its code runs), then loaded in child processes, several at once.
            probes.probeAll(paths: paths)
            var rows: [[String]] = []
            var refused: [String] = []
            for path in paths {
                switch probes.vet(path) {
                case .failure(let refusal):
                    refused.append(refusal.description)
                case .success(let realPath):
                    let report = probes.report(for: realPath)
                    switch report.load {
                    case .loaded(let d):
                        let time = report.timing.map { String(format: "%.3f", Double($0.load + ($0.create ?? 0)) / 1e6) } ?? "-"
                        // An output says so after its name (monitors are the rule).
                        let name = d.kind == .output ? "\(d.name) (output)" : d.name
                        rows.append([name, d.version, "\(d.abiMajor).\(d.abiMinor)"] + (timing ? [time] : []) + [path])
                    case .refused(_, notAPlugin: true):
                        continue
                    default:
                        refused.append("plugin \(path) refused: \(report.refusal ?? "no reason given")")
                    }
                }
            }
            // By name; one name found twice keeps the search order (the first found is the one used).
            rows = rows.enumerated().sorted { ($0.element[0], $0.offset) < ($1.element[0], $1.offset) }.map(\.element)
            if rows.isEmpty {
                print("no plugins found in \(probes.catalog.directories.joined(separator: ", "))")
            } else {
                printTable(header: ["NAME", "VERSION", "ABI"] + (timing ? ["LOAD+CREATE MS"] : []) + ["PATH"], rows: rows)
            }
            fflush(nil)
            for line in refused { FileHandle.standardError.write(Data("vigil: \(line)\n".utf8)) }
            if !refused.isEmpty { throw ExitCode(1) }
        }
    }

    /// The plugin probe's child (PluginProbe.swift): run by list, validate,
    /// describe and run, never by hand.
    struct Probe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Load a plugin in this (child) process and report to the parent.", shouldDisplay: false)

        @Argument var plugin: String
        @Option(name: .customLong("child-fd")) var childFD: Int32
        @Flag(name: .customLong("allow-unsafe-plugins")) var allowUnsafePlugins = false
        @Option var manifest: String?
        @Option(name: .customLong("create")) var creates: [String] = []
        /// The monitors to create, NUL-separated on stdin (PluginProber.namesFile).
        @Flag(name: .customLong("creates-on-stdin")) var createsOnStdin = false
        @Flag var timing = false

        func run() async throws {
            // Read before the plugin is loaded: its code never sees them.
            let names = creates + (createsOnStdin ? PluginProber.readNames(from: 0) : [])
            PluginProbe.runChild(PluginProbe.Request(path: plugin, allowUnsafe: allowUnsafePlugins, manifest: manifest,
                                                     creates: names, timing: timing), fd: childFD)
            // Plugin threads may still run: leave now.
            fflush(nil)
            _exit(0)
        }
    }

    /// A plugin runner (PluginRunner.swift): one monitor under
    /// `isolation: process`, started by the host with its channel as
    /// descriptors 3–6.
    struct Runner: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Run one plugin for the host that started this process.", shouldDisplay: false)

        @Argument var plugin: String
        @Option var parent: Int32
        @Flag(name: .customLong("allow-unsafe-plugins")) var allowUnsafePlugins = false
        @Option(name: .customLong("open-files")) var openFiles: Int?
        @Option var user: String?
        @Option var cgroup: String?

        /// Synchronous, on the main thread (see `Entry`).
        func run() throws {
            let code = PluginRunner.run(PluginRunner.Request(path: plugin, allowUnsafe: allowUnsafePlugins, parent: parent,
                                                             openFiles: openFiles, user: user, cgroup: cgroup))
            // Plugin threads may still run: leave now.
            fflush(nil)
            _exit(code)
        }
    }

    struct Describe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a plugin's self-description: options with types, defaults and docs; event kinds and fields.",
            discussion: """
            The plugin is loaded in a child process only, which sends its description back: one that crashes \
            or hangs while loading is refused (exit 1), never the end of this command.
            """)

        @Argument(help: "A plugin name, or a path to a .so file.") var plugin: String
        @Flag(help: "Also time loading, step by step (the file's checks, dlopen, the entry point, reading the description), and creating one instance with default options.")
        var timing = false
        @OptionGroup var plugins: PluginDirOptions

        func run() async throws {
            // Loaded, described and timed in a child process only: a crash there is a refusal.
            switch plugins.probes(manifest: nil, scope: .all, timing: timing).describe(reference: plugin) {
            case .failure(let refusal):
                FileHandle.standardError.write(Data("vigil: \(refusal)\n".utf8))
                throw ExitCode(1)
            case .success(let probed):
                print(Self.render(probed.description))
                if timing, let t = probed.report.timing {
                    let ms = { (ns: Int64) in String(format: "%.3f", Double(ns) / 1e6) }
                    let create = t.create.map { "\(ms($0)) ms" } ?? "n/a (required options)"
                    let steps = probed.report.loadPhases.map {
                        " (vetting \(ms($0.vetting)), dlopen \(ms($0.dlopen)), entry \(ms($0.entry)), reading \(ms($0.reading)))"
                    } ?? ""
                    print("timing: load \(ms(t.load)) ms\(steps), create \(create)")
                }
            }
        }

        static func render(_ d: PluginDescription) -> String {
            var out = "\(d.name) \(d.version) — \(d.summary)\n"
            out += "  file: \(d.path)\n  ABI: \(d.abiMajor).\(d.abiMinor)\n"
            if d.kind == .output {
                out += "  an output: takes events and sends them on (ABI 1.5)\n"
            } else {
                out += d.polled ? "  polled, default interval \(d.defaultIntervalShown)\n" : "  push (not polled)\n"
            }
            out += "\nOptions:\n"
            if d.options.isEmpty { out += "  (none)\n" }
            for o in d.options {
                let def = o.required ? "required" : o.defaultText.map { "default \($0)" } ?? "no default"
                let example = o.exampleText.map { ", e.g. \($0)" } ?? ""
                out += "  \(o.name) (\(o.type), \(def)\(example))\n      \(o.doc)\n"
            }
            if d.kind == .output { return out }
            out += "\nEvents:\n"
            for e in d.events + PluginDescription.hostKinds {
                out += "  \(e.kind)\(e.onChange ? " (on change)" : "") — \(e.doc)\n"
                for f in e.fields {
                    let marks = (f.unit.isEmpty ? [] : [f.unit]) + (f.identity ? ["identity"] : []) + (f.counter ? ["counter"] : [])
                    let unit = marks.map { ", \($0)" }.joined()
                    out += "      \(f.name) (\(f.type)\(unit))\(f.doc.isEmpty ? "" : ": \(f.doc)")\n"
                }
                if e.dynamicFields { out += "      … and fields named by the instance's options\n" }
            }
            return out
        }
    }
}

func printTable(header: [String], rows: [[String]]) {
    let all = [header] + rows
    let widths = header.indices.map { i in all.map { $0[i].count }.max() ?? 0 }
    for row in all {
        let line = row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
        print(line)
    }
}
