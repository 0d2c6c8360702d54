import Testing
@testable import VigilCore

/// A plugin's INVALID_CONFIG message may name an option path; the host points
/// at that node of the manifest.
@Suite("Option paths in plugin messages")
struct OptionPathTests {
    static let text = """
    monitors:
      loadavg:
        plugin: ffi
        options:
          library: libc.so.6
          args: [ {out: "double[3]"}, {int33: 3} ]
          spec:
            inner: [1, 2]
    sinks:
      none: { type: null }
    """

    func monitor() throws -> MonitorConfig {
        let (manifest, diagnostics) = ManifestLoader(file: "m.yaml").load(Self.text)
        guard let monitor = manifest?.monitors.first else { throw ManifestErrors(diagnostics) }
        return monitor
    }

    @Test("a path is located down to the key (or list item) it names", arguments: [
        ("options.library: cannot load", 5, 7),
        ("options.args[1]: unknown type \"int33\"", 6, 35),
        ("options.args[0].out: not a number type", 6, 16),
        ("options.spec.inner[1]: too big", 8, 20),
    ])
    func located(message: String, line: Int, column: Int) throws {
        let (location, text) = try monitor().locate(pluginMessage: message)
        #expect(location == SourceLocation(file: "m.yaml", line: line, column: column))
        #expect(text == message)
    }

    @Test func anOptionNotWrittenPointsAtTheOptionsKey() throws {
        let m = try monitor()
        let (location, text) = m.locate(pluginMessage: "options.returns: unknown type")
        #expect(location == m.optionsLocation)
        #expect(text == "options.returns: unknown type")
    }

    @Test func aMessageWithoutAPathPointsAtTheMonitor() throws {
        let m = try monitor()
        let (location, text) = m.locate(pluginMessage: "no such device")
        #expect(location == m.location)
        #expect(text == "no such device")
    }

    @Test func aPathPastTheNodesStopsAtTheDeepestOneFound() throws {
        let (location, _) = try monitor().locate(pluginMessage: "options.args[7]: missing")
        #expect(location.line == 6)
    }
}
