import Foundation
import Testing

/// Every plugin the project ships passes `vigil plugins check` as shipped,
/// with no option given: the Swift plugins the package builds (one per
/// directory of Plugins/, lib<name>.so or libvigil-<name>.so beside vigil)
/// and the C plugins scripts/build-c-plugins builds (heartbeat, flood, the
/// ticker example). A plugin whose source this machine lacks may skip the
/// instance checks (unavailable); none may fail.
@Suite(.startsProcesses, .offThePool) struct ShippedPluginsCheckTests {
    /// The plugin files, found from the sources, so that a new plugin is checked without a list to edit.
    static func shipped() throws -> [String] {
        let dirs = try FileManager.default.contentsOfDirectory(atPath: TestEnv.repoRoot + "/Plugins")
        var paths: [String] = []
        for name in dirs.sorted() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: TestEnv.repoRoot + "/Plugins/" + name, isDirectory: &isDirectory),
                  isDirectory.boolValue, name != "examples" else { continue }
            if FileManager.default.fileExists(atPath: TestEnv.repoRoot + "/Plugins/\(name)/\(name).c") {
                paths.append(try TestEnv.cPlugin(name))
                continue
            }
            let candidates = ["lib\(name).so", "libvigil-\(name).so"].map { TestEnv.productsDir + "/" + $0 }
            guard let path = candidates.first(where: { FileManager.default.fileExists(atPath: $0) }) else {
                throw TestFailure("Plugins/\(name) was not built: none of \(candidates.joined(separator: ", "))")
            }
            paths.append(path)
        }
        paths.append(try TestEnv.cPlugin("ticker"))
        paths.append(try TestEnv.cPlugin("graphite"))
        return paths
    }

    @Test func everyShippedPluginIsFound() throws {
        let names = try Self.shipped().map { ($0 as NSString).lastPathComponent }
        for name in ["libcpu.so", "libprocess.so", "libfiles.so", "libvigil-ffi.so", "libdevices.so",
                     "heartbeat.so", "flood.so", "ticker.so", "graphite.so"] {
            #expect(names.contains(name), "\(names)")
        }
    }

    @Test(arguments: try ShippedPluginsCheckTests.shipped())
    func passesPluginsCheckAsShipped(path: String) throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", path], timeout: 180)
        let report = result.stdout + result.stderr
        #expect(result.status == 0, "\(report)")
        #expect(!report.contains("FAIL"), "\(report)")
        #expect(result.stdout.contains(" passed, 0 failed"), "\(report)")
        // Each creates an instance: from its defaults, or from its declared examples.
        let create = result.stdout.split(separator: "\n").first { $0.contains("create with ") }
        #expect(create?.hasPrefix("  PASS  create with ") == true, "\(report)")
    }

    /// The plugins whose create needs values declare examples (ABI 1.3),
    /// and the check says it used them.
    @Test(arguments: [("libprocess.so", "name=sshd"), ("libfiles.so", #"paths=["/tmp"]"#),
                      ("libvigil-ffi.so", "library=libc.so.6, symbol=getpid")])
    func pluginsThatNeedValuesAreCheckedWithTheirExamples(file: String, shown: String) throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", TestEnv.productsDir + "/" + file], timeout: 180)
        let create = result.stdout.split(separator: "\n").first { $0.contains("create with ") }.map(String.init) ?? ""
        #expect(create.hasPrefix("  PASS  create with example options"), "\(result.stdout)")
        #expect(create.contains(shown), "\(create)")
    }

    /// Given options, the examples are not used: process without name or
    /// pidfile is refused, as in a manifest.
    @Test func givenOptionsTheExamplesAreNotUsed() throws {
        let given = try TestEnv.run(TestEnv.vigil, ["plugins", "check", TestEnv.productsDir + "/libprocess.so",
                                                    "--option", "procfs=/proc"], timeout: 180)
        #expect(given.status == 1)
        #expect(given.stdout.contains("FAIL  create with the given options"), "\(given.stdout)")
        #expect(given.stdout.contains("give name or pidfile"), "\(given.stdout)")
    }

    @Test func describeShowsAnExample() throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", TestEnv.productsDir + "/libprocess.so"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("  name (string, no default, e.g. sshd)"), "\(result.stdout)")
    }
}
