import Foundation
import PackagePlugin

/// Packs the console (issue 31) into the binary at build time: the target's
/// own `assets/` (the page, its script and style) and the charting library
/// as Debian ships it (libjs-dygraphs), with its licence, so that an
/// installed vigil serves the console offline and from nothing else. A
/// machine without libjs-dygraphs still builds: the console then says that
/// its charts are missing and which package brings them.
@main
struct ConsoleAssetsPlugin: BuildToolPlugin {
    /// Where Debian's libjs-dygraphs puts the library and its licence.
    static let dygraphs = "/usr/share/javascript/dygraphs"
    static let dygraphsCopyright = "/usr/share/doc/libjs-dygraphs/copyright"

    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        let assets = target.directoryURL.appending(path: "assets")
        let own = try FileManager.default.contentsOfDirectory(atPath: assets.path)
            .filter { !$0.hasPrefix(".") }
            .sorted()
            .map { (name: $0, path: assets.appending(path: $0).path) }
        let library = [
            (name: "dygraph.min.js", path: "\(Self.dygraphs)/dygraph.min.js"),
            (name: "dygraph.min.css", path: "\(Self.dygraphs)/dygraph.min.css"),
            (name: "dygraphs-copyright.txt", path: Self.dygraphsCopyright),
        ]
        // What is missing is passed as missing, so that the console can say it.
        let found = library.filter { FileManager.default.isReadableFile(atPath: $0.path) }
        let missing = library.filter { !FileManager.default.isReadableFile(atPath: $0.path) }
        let licence = context.package.directoryURL.appending(path: "LICENSE").path
        let inputs = own.map(\.path) + found.map(\.path) + [licence]
        let output = context.pluginWorkDirectoryURL.appending(path: "ConsolePacked.swift")
        let arguments = [output.path, "vigil-LICENSE.txt=\(licence)"]
            + (own + found).map { "\($0.name)=\($0.path)" }
            + missing.map { "\($0.name)=missing:\($0.path)" }
        return [.buildCommand(displayName: "Packing the console's assets into \(target.name)",
                              executable: try context.tool(named: "vigil-console-pack").url,
                              arguments: arguments,
                              inputFiles: inputs.map { URL(fileURLWithPath: $0) }, outputFiles: [output])]
    }
}
