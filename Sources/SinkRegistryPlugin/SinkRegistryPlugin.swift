import Foundation
import PackagePlugin

/// Lists the sink types of the host (every type declared a `SinkType` in a
/// file under `Sinks/`) into `SinkTypes.standard`, so that a new sink type
/// is one new file and nothing else to remember.
@main
struct SinkRegistryPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        let inputs = target.sourceFiles(withSuffix: "swift").map(\.url)
            .filter { $0.pathComponents.contains("Sinks") }
            .sorted { $0.path < $1.path }
        let output = context.pluginWorkDirectoryURL.appending(path: "SinkTypesStandard.swift")
        return [.buildCommand(displayName: "Listing the sink types of \(target.name)",
                              executable: try context.tool(named: "vigil-sink-list").url,
                              arguments: [output.path] + inputs.map(\.path),
                              inputFiles: inputs, outputFiles: [output])]
    }
}
