import ArgumentParser
import Foundation
import VigilABI
import VigilCore
import VigilHost

struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List and describe the plugins this host can load.",
        subcommands: [List.self, Describe.self, Check.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List every plugin in the plugin directories: name, version, ABI version and path.",
            discussion: "Searches --plugin-dir, the manifest's plugin_dirs (with --manifest), the directory of the vigil executable, then /usr/local/lib/vigil/plugins. Shared objects that are not Vigil plugins are skipped; refused plugins are listed with the reason.")

        @Option(help: "Also search the plugin_dirs of this manifest.") var manifest: String?
        @Flag(help: "Also time each plugin: load (dlopen, negotiation, self-description) and create of one instance with default options, in this process, in order (the first also pays the host's one-time start-up).")
        var timing = false
        @OptionGroup var plugins: PluginDirOptions

        func run() async throws {
            let manifest = self.manifest.flatMap { ManifestFile.load($0).0 }
            let catalog = plugins.catalog(manifest: manifest)
            var rows: [[String]] = []
            var refused: [String] = []
            // With --timing nothing is opened before it is timed (a file that is
            // not a plugin is then listed as refused).
            for path in catalog.discover() where timing || PluginCatalog.exportsEntry(path: path) {
                var time = ""
                if timing, case .success(let t) = PluginTiming.measure(reference: path, catalog: catalog) {
                    time = String(format: "%.3f", Double(t.load + (t.create ?? 0)) / 1e6)
                }
                switch catalog.load(path: path) {
                case .success(let plugin):
                    let d = plugin.description
                    rows.append([d.name, d.version, "\(d.abiMajor).\(d.abiMinor)"] + (timing ? [time] : []) + [path])
                case .failure(let refusal):
                    refused.append(refusal.description)
                }
            }
            if rows.isEmpty {
                print("no plugins found in \(catalog.directories.joined(separator: ", "))")
            } else {
                printTable(header: ["NAME", "VERSION", "ABI"] + (timing ? ["LOAD+CREATE MS"] : []) + ["PATH"], rows: rows)
            }
            for line in refused { FileHandle.standardError.write(Data("\(line)\n".utf8)) }
        }
    }

    struct Describe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a plugin's self-description: options with types, defaults and docs; event kinds and fields.")

        @Argument(help: "A plugin name, or a path to a .so file.") var plugin: String
        @Flag(help: "Also time loading (dlopen, negotiation, self-description) and creating one instance with default options.")
        var timing = false
        @OptionGroup var plugins: PluginDirOptions

        func run() async throws {
            let catalog = plugins.catalog(manifest: nil)
            var timingLine: String?
            if timing {
                switch PluginTiming.measure(reference: plugin, catalog: catalog) {
                case .success(let t):
                    let create = t.create.map { String(format: "%.3f ms", Double($0) / 1e6) } ?? "n/a (required options)"
                    timingLine = String(format: "timing: load %.3f ms, create ", Double(t.load) / 1e6) + create
                case .failure(let refusal):
                    FileHandle.standardError.write(Data("vigil: \(refusal)\n".utf8))
                    throw ExitCode(1)
                }
            }
            switch catalog.load(reference: plugin) {
            case .failure(let refusal):
                FileHandle.standardError.write(Data("vigil: \(refusal)\n".utf8))
                throw ExitCode(1)
            case .success(let loaded):
                print(Self.render(loaded.description))
                if let timingLine { print(timingLine) }
            }
        }

        static func render(_ d: PluginDescription) -> String {
            var out = "\(d.name) \(d.version) — \(d.summary)\n"
            out += "  file: \(d.path)\n  ABI: \(d.abiMajor).\(d.abiMinor)\n"
            out += d.polled ? "  polled, default interval \(Units.formatDuration(d.defaultInterval))\n" : "  push (not polled)\n"
            out += "\nOptions:\n"
            if d.options.isEmpty { out += "  (none)\n" }
            for o in d.options {
                let def = o.required ? "required" : o.defaultText.map { "default \($0)" } ?? "no default"
                out += "  \(o.name) (\(o.type), \(def))\n      \(o.doc)\n"
            }
            out += "\nEvents:\n"
            for e in d.events + PluginDescription.hostKinds {
                out += "  \(e.kind) — \(e.doc)\n"
                for f in e.fields {
                    let unit = f.unit.isEmpty ? "" : ", \(f.unit)"
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
