import ArgumentParser
import Foundation
import VigilCore
import VigilHost

struct Plugins: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List and describe the plugins this host can load.",
        subcommands: [List.self, Describe.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List every plugin in the plugin directories: name, version, ABI version and path.",
            discussion: "Searches --plugin-dir, the manifest's plugin_dirs (with --manifest), the directory of the vigil executable, then /usr/local/lib/vigil/plugins. Shared objects that are not Vigil plugins are skipped; refused plugins are listed with the reason.")

        @Option(help: "Also search the plugin_dirs of this manifest.") var manifest: String?
        @OptionGroup var plugins: PluginDirOptions

        func run() async throws {
            let manifest = self.manifest.flatMap { ManifestFile.load($0).0 }
            let catalog = plugins.catalog(manifest: manifest)
            var rows: [[String]] = []
            var refused: [String] = []
            for path in catalog.discover() where PluginCatalog.exportsEntry(path: path) {
                switch catalog.load(path: path) {
                case .success(let plugin):
                    let d = plugin.description
                    rows.append([d.name, d.version, "\(d.abiMajor).\(d.abiMinor)", path])
                case .failure(let refusal):
                    refused.append(refusal.description)
                }
            }
            if rows.isEmpty {
                print("no plugins found in \(catalog.directories.joined(separator: ", "))")
            } else {
                printTable(header: ["NAME", "VERSION", "ABI", "PATH"], rows: rows)
            }
            for line in refused { FileHandle.standardError.write(Data("\(line)\n".utf8)) }
        }
    }

    struct Describe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show a plugin's self-description: options with types, defaults and docs; event kinds and fields.")

        @Argument(help: "A plugin name, or a path to a .so file.") var plugin: String
        @OptionGroup var plugins: PluginDirOptions

        func run() async throws {
            let catalog = plugins.catalog(manifest: nil)
            switch catalog.load(reference: plugin) {
            case .failure(let refusal):
                FileHandle.standardError.write(Data("vigil: \(refusal)\n".utf8))
                throw ExitCode(1)
            case .success(let loaded):
                print(Self.render(loaded.description))
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
