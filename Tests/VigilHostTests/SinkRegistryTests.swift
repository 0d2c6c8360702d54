import Foundation
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The sink types come from one place (the files under Sources/VigilSinks/Sinks,
/// listed at build time) and each is documented where operators look.
@Suite struct SinkRegistryTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// docs/sinks.md has a row for each type in its table of sink types, and
    /// a section headed "## `TYPE`" that names each of the type's keys (in a table
    /// or its example).
    @Test func everySinkTypeHasItsRowAndEveryKeyIsDocumented() throws {
        let sinks = try String(contentsOf: Self.root.appending(path: "docs/sinks.md"), encoding: .utf8)
        #expect(Set(SinkTypes.standard.names).isSuperset(of: ["file", "log", "null", "otlp", "plugin", "prometheus", "remote_write", "socket", "syslog"]))
        for type in SinkTypes.standard.types {
            #expect(sinks.contains("| `\(type.type)` |") || sinks.contains("| `\(type.type)` `"),
                    "docs/sinks.md's table of sink types has no row for '\(type.type)'")
            guard let start = sinks.range(of: "\n## `\(type.type)`\n") else {
                Issue.record("docs/sinks.md has no section '## `\(type.type)`'")
                continue
            }
            let rest = sinks[start.upperBound...]
            let section = rest[..<(rest.range(of: "\n## ")?.lowerBound ?? rest.endIndex)]
            for key in type.keys {
                #expect(section.contains("`\(key)`") || section.contains("\(key):"),
                        "sink type '\(type.type)': key '\(key)' is not documented in its section of docs/sinks.md")
            }
        }
    }

    @Test func everyTypeIsReadAndBuiltThroughTheRegistry() throws {
        // One sink of each type, read by the loader and built by the runtime
        // with no code that names the type.
        let text = """
        monitors: { m: { plugin: heartbeat } }
        sinks:
          a: { type: null }
          b: { type: log, stream: stdout }
          c: { type: file, path: /tmp/vigil-registry-test.jsonl }
          d: { type: socket, connect: "udp://127.0.0.1:9" }
          e: { type: syslog, connect: "udp://127.0.0.1:9" }
          f: { type: prometheus, listen: "tcp://127.0.0.1:19798" }
          g: { type: otlp, endpoint: "http://127.0.0.1:9" }
          h: { type: plugin, plugin: nothing-here }
          i: { type: remote_write, url: "http://127.0.0.1:9/api/v1/write" }
        """
        let (manifest, diagnostics) = ManifestLoader(file: "m.yaml").load(text)
        #expect(!diagnostics.contains { $0.level == .error }, "\(diagnostics)")
        let sinks = try #require(manifest?.sinks)
        #expect(sinks.map(\.type) == ["null", "log", "file", "socket", "syslog", "prometheus", "otlp", "plugin", "remote_write"])
        for sink in sinks {
            let built = SinkBuild.make(sink, host: "h", logger: .init(label: "t"), bindNow: false)
            #expect(String(describing: Swift.type(of: built)).contains("Sink"), "\(sink.type): \(Swift.type(of: built))")
        }
    }

    /// The build plugin's tool, run on declarations as people write them.
    @Test func theListerFindsEveryDeclarationForm() throws {
        let tool = Self.root.appending(path: ".build/debug/vigil-sink-list")
        guard FileManager.default.isExecutableFile(atPath: tool.path) else {
            Issue.record("no \(tool.path): swift build builds it")
            return
        }
        let dir = FileManager.default.temporaryDirectory.appending(path: "vigil-sink-list-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let source = dir.appending(path: "A.swift")
        try """
        /// struct InAComment: SinkType {
        extension FirstConfig: SinkType {
        package struct Second: SinkType, Sendable {
        @available(*, deprecated) public final class Third: Hashable, SinkType {}
        struct NotOne: SinkTypeish {
        extension FirstConfig: SinkType {
        """.write(to: source, atomically: true, encoding: .utf8)
        let output = dir.appending(path: "out.swift")
        let process = Process()
        process.executableURL = tool
        process.arguments = [output.path, source.path]
        try process.run()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let generated = try String(contentsOf: output, encoding: .utf8)
        #expect(generated.contains("FirstConfig.self,\n        Second.self,\n        Third.self,\n    ])"), "\(generated)")
        #expect(!generated.contains("InAComment") && !generated.contains("NotOne"))
    }
}
