import Foundation
import Testing

/// The authoring kit seen from outside: every plugin this repository ships
/// passes `vigil plugins check`, and what only a plugin can validate is
/// reported by `vigil validate` at the manifest's line and column.
@Suite(.serialized, .startsProcesses, .offThePool) struct AuthoringKitTests {
    @Test("a shipped plugin passes vigil plugins check", arguments: ["cpu", "memory", "load", "heartbeat", "flood", "ticker"])
    func shippedPluginPassesTheCheck(name: String) throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", "--plugin-dir", try TestEnv.cPlugins(), name],
                                     timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains(" 0 failed"))
    }

    static let laptop = TestEnv.fixture("machines/laptop")

    @Test("a catalogue plugin passes vigil plugins check on a fixture tree", arguments: [
        ("power", "{ sysfs: \(Self.laptop)/sys }"),
        ("thermal", "{ sysfs: \(Self.laptop)/sys }"),
        ("storage", "{}"),
        ("files", "{ paths: [\(NSTemporaryDirectory())] }"),
        ("display", "{ sysfs: \(Self.laptop)/sys }"),
        ("wifi", "{ procfs: \(Self.laptop)/proc, sysfs: \(Self.laptop)/sys }"),
        ("process", "{ procfs: \(Self.laptop)/proc, name: nginx }"),
        ("sensors", "{ sysfs: \(Self.laptop)/sys }"),
        ("devices", "{ sysfs: \(Self.laptop)/sys }"),
        ("network", "{ sysfs: \(Self.laptop)/sys, procfs: \(Self.laptop)/proc }"),
        ("clock", "{ rootfs: \(Self.laptop) }"),
        ("radio", "{ sysfs: \(Self.laptop)/sys, devfs: \(Self.laptop)/dev }"),
        ("system", "{ procfs: \(Self.laptop)/proc, sysfs: \(Self.laptop)/sys, rootfs: \(Self.laptop) }"),
    ])
    func cataloguePluginPassesTheCheck(name: String, options: String) throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", name, "--options", options], timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        // The fixture has the source: every check ran, none was skipped for want of it.
        #expect(!result.stdout.contains("VIGIL_E_UNAVAILABLE") && !result.stdout.contains("SKIP"), "\(result.stdout)")
    }

    @Test func theRustExamplePassesTheCheck() throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", try RustExamplePlugin.path(),
                                                     "--option", "procfs=\(ExampleRustPluginTests.server)"], timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
    }

    @Test func theFFIPluginPassesTheCheckWithASignature() throws {
        let result = try TestEnv.run(TestEnv.vigil, [
            "plugins", "check", "ffi",
            "--options", "{ library: libm.so.6, symbol: cos, args: [ {double: 0} ], returns: double, fields: [value] }",
        ], timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
    }

    @Test("every shipped manifest is valid", arguments: ["manifests", "manifests/examples"])
    func everyShippedManifestIsValid(in folder: String) throws {
        let dir = TestEnv.repoRoot + "/" + folder
        let files = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".yaml") }
        #expect(!files.isEmpty)
        for file in files {
            // With the C plugins' directory: examples use the collectd plugin.
            let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/" + file, "--plugin-dir", try TestEnv.cPlugins()],
                                         timeout: 60)
            #expect(result.status == 0, "\(file): \(result.stderr)")
        }
    }

    @Test func validateReportsWhatTheFFIPluginRefusesAtItsLineAndColumn() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/ffi.yaml"
        try TestEnv.write("""
        monitors:
          good:
            plugin: ffi
            options: { library: libm.so.6, symbol: cos, args: [ {double: 0} ], returns: double, fields: [value] }
          badtype:
            plugin: ffi
            options:
              library: libc.so.6
              symbol: getloadavg
              args: [ {out: "double[3]"}, {int33: 3} ]
              returns: int32
              fields: [count, load1, load5, load15]
          fields:
            plugin: ffi
            options:
              library: libc.so.6
              symbol: getloadavg
              args: [ {out: "double[3]"}, {int32: 3} ]
              returns: int32
              fields: [count, load1]
          nolib:
            plugin: ffi
            options:
              library: libvigil-does-not-exist.so
              symbol: f
          nosym:
            plugin: ffi
            options:
              library: libm.so.6
              symbol: no_such_function_here
        sinks:
          none: { type: null }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["validate", manifest], timeout: 60)
        #expect(result.status == 1)
        let lines = result.stderr.split(separator: "\n").map(String.init)
        func line(_ prefix: String) -> String? { lines.first { $0.hasPrefix(manifest + ":" + prefix) } }
        #expect(line("10:35: error: monitor 'badtype': options.args[1]")?.contains("int33") == true, "\(result.stderr)")
        #expect(line("20:7: error: monitor 'fields': options.fields:") != nil, "\(result.stderr)")
        #expect(line("24:7: error: monitor 'nolib': options.library:")?.contains("libvigil-does-not-exist.so") == true,
                "\(result.stderr)")
        #expect(line("30:7: error: monitor 'nosym': options.symbol:")?.contains("no_such_function_here") == true,
                "\(result.stderr)")
        #expect(!result.stderr.contains("'good'"), "\(result.stderr)")
        #expect(result.stderr.contains("4 errors"))
    }
}
