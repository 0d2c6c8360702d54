import Foundation
import Testing
import VigilABI
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// `make install`'s layout: PREFIX/bin/vigil finds PREFIX/lib/vigil/plugins
/// by itself and treats the plugins there as its own (in process, not
/// probed), whatever PREFIX is.
@Suite(.startsProcesses, .offThePool) struct InstalledLayoutTests {
    @Test func theInstalledDirectoryIsLibVigilPluginsBesideBin() {
        #expect(PluginCatalog.installedDirectory(executableDirectory: "/usr/local/bin") == "/usr/local/lib/vigil/plugins")
        #expect(PluginCatalog.installedDirectory(executableDirectory: "/opt/vigil/bin/") == "/opt/vigil/lib/vigil/plugins")
        #expect(PluginCatalog.installedDirectory(executableDirectory: "//srv//x//bin") == "/srv/x/lib/vigil/plugins")
        #expect(PluginCatalog.installedDirectory(executableDirectory: "/bin") == "/lib/vigil/plugins")
        #expect(PluginCatalog.installedDirectory(executableDirectory: "/") == "/lib/vigil/plugins")
        #expect(PluginCatalog.installedDirectory(executableDirectory: "") == "/lib/vigil/plugins")
    }

    @Test func theSearchPathIsExtraThenTheHostsOwnDirectories() throws {
        let exe = try #require(PluginCatalog.executableDirectory())
        let dirs = PluginCatalog.standardDirectories(extra: ["/a", "/b"])
        #expect(dirs == ["/a", "/b", exe, PluginCatalog.installedDirectory(executableDirectory: exe), PluginCatalog.systemDirectory])
    }

    /// The real binary, linked into PREFIX/bin of a temporary prefix, with
    /// heartbeat.so in PREFIX/lib/vigil/plugins: found by name, listed, and
    /// run in process as the host's own.
    @Test func aVigilInAPrefixFindsAndTrustsItsPlugins() throws {
        let prefix = try TestEnv.tempDir()
        let bin = prefix + "/bin", plugins = prefix + "/lib/vigil/plugins", work = prefix + "/work"
        for dir in [bin, plugins, work] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o755])
        }
        // A hard link (the same file: /proc/self/exe names the link's path); a copy across file systems.
        if link(TestEnv.vigil, bin + "/vigil") != 0 { try FileManager.default.copyItem(atPath: TestEnv.vigil, toPath: bin + "/vigil") }
        try FileManager.default.copyItem(atPath: try TestEnv.cPlugin("heartbeat"), toPath: plugins + "/heartbeat.so")
        chmod(plugins + "/heartbeat.so", 0o755)
        try TestEnv.write("""
        monitors:
          beat: { plugin: heartbeat, interval: 100ms }
        sinks:
          out: { type: null }
        """, to: work + "/vigil.yaml")

        let validate = try TestEnv.run(bin + "/vigil", ["validate", work + "/vigil.yaml"], timeout: 60)
        #expect(validate.status == 0, "\(validate.stderr)")
        #expect(validate.stdout.contains("beat: isolation: none (a plugin of the host's own directory)"), "\(validate.stdout)")

        let list = try TestEnv.run(bin + "/vigil", ["plugins", "list"], timeout: 60)
        #expect(list.stdout.contains(plugins + "/heartbeat.so"), "\(list.stdout)\(list.stderr)")

        let run = try TestEnv.run(bin + "/vigil", ["run", work + "/vigil.yaml", "--for", "1s", "--control", "none"], timeout: 60)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("monitor 'beat' runs in process (a plugin of the host's own directory)"), "\(run.stderr)")
        try? FileManager.default.removeItem(atPath: prefix)
    }
}
