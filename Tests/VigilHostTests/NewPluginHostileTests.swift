import Foundation
import Testing
@testable import VigilHost

/// `vigil new-plugin` used the way an outside author or an operator might:
/// names that collide with what the copy's code or its build already has.
/// Only C builds here; Swift names are checked by what is generated, not
/// built.
@Suite struct NewPluginHostileTests {
    typealias T = NewPluginTests

    /// The C scaffolds name functions and data `NAME_create`, `NAME_start`,
    /// …; a NAME for which one of those is already declared by the header or
    /// a system header the file includes (`va_start`, a macro of <stdarg.h>;
    /// `vigil_plugin_descriptor`, the header's type) makes a plugin that does
    /// not compile, so it is refused. The names are found by preprocessing
    /// each scaffold's includes.
    @Test(.enabled(if: NewPluginTests.hasMake, "needs make"))
    func cRefusesNamesWhoseIdentifiersTheHeadersDeclare() throws {
        let cc = try #require(T.cCompiler(), "no C compiler (cc, gcc, clang)")
        let base = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let header = TestEnv.repoRoot + "/Sources/CVigilPlugin/include/vigil_plugin.h"
        var clashing: Set<String> = []
        for example in ["boottime", "graphite"] {
            let dir = TestEnv.repoRoot + "/Plugins/examples/c/\(example)"
            let sources = [dir + "/\(example).c", dir + "/test_\(example).c"]
            // The suffixes the copy puts after NAME.
            var suffixes: Set<String> = []
            for source in sources {
                for word in try T.text(source).split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") })
                where word.hasPrefix(example + "_") {
                    suffixes.insert(String(word.dropFirst(example.count)))
                }
            }
            for source in sources {
                // What the file includes, before anything of its own.
                let lines = try T.text(source).split(separator: "\n")
                    .filter { $0.hasPrefix("#define _") || $0.hasPrefix("#include <") }
                let probe = base + "/probe.c"
                try TestEnv.write(lines.joined(separator: "\n") + "\n#include \"\(header)\"\n", to: probe)
                let expanded = try T.succeed("cc -E", cc, ["-E", "-dD", probe], timeout: 60)
                for word in expanded.stdout.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") }) {
                    for suffix in suffixes where word.hasSuffix(suffix) && word.count > suffix.count {
                        let name = word.dropLast(suffix.count)
                        if Self.isPluginName(name) { clashing.insert(String(name)) }
                    }
                }
            }
        }
        #expect(clashing.isSuperset(of: ["va", "vigil_plugin"]), "\(clashing.sorted())")
        for name in clashing.sorted() {
            let result = try T.generate([name, "--lang", "c", "--dir", base + "/out"])
            #expect(result.status != 0, "\(name) makes a C plugin that does not compile")
            #expect(result.stderr.contains("cannot name a c plugin"), "\(name): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: base + "/out"))
    }

    /// [a-z][a-z0-9_]*, as new-plugin takes it.
    static func isPluginName(_ s: Substring) -> Bool {
        guard let first = s.first, first.isASCII, first.isLowercase else { return false }
        return s.allSatisfy { $0.isASCII && ($0.isLowercase || $0.isNumber || $0 == "_") }
    }

    /// A Swift NAME whose type would take a name the example's code uses
    /// for something else is refused (`polled`: `final class PolledMonitor:
    /// PolledMonitor`); one that only shadows a VigilKit type the example
    /// never names is fine (`push`: PushMonitor; `test`: TestOutput of
    /// VigilKitTesting; both build and pass their tests).
    @Test func swiftRefusesATypeNameTheExampleUses() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let polled = try T.generate(["polled", "--lang", "swift", "--dir", dir + "/polled"])
        #expect(polled.status == 1)
        #expect(polled.stderr.contains("declare PolledMonitor, a name the example's code already gives to something else"),
                "\(polled.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/polled"))
        for (name, kind) in [("push", "monitor"), ("test", "output"), ("polled", "output")] {
            let result = try T.generate([name, "--lang", "swift", "--kind", kind, "--dir", dir + "/\(name)-\(kind)"])
            #expect(result.status == 0, "\(name) \(kind): \(result.stderr)")
        }
    }

    /// A Swift plugin's package resolves every package Vigil depends on; a
    /// package directory with one of their names (its identity) is taken for
    /// that package, and resolution fails (`yams`: "product 'Yams' … not
    /// found in package 'Yams'"). Checked against Package.resolved.
    @Test func swiftRefusesADirectoryNamedLikeAVigilDependency() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let resolved = try T.text(TestEnv.repoRoot + "/Package.resolved")
        let identities = resolved.split(separator: "\n").filter { $0.contains("\"identity\"") }
            .compactMap { $0.split(separator: "\"").dropFirst(3).first.map(String.init) }
        #expect(identities.contains("yams"), "\(identities)")
        for identity in identities {
            let result = try T.generate(["probe", "--lang", "swift", "--dir", dir + "/" + identity])
            #expect(result.status == 1, "\(identity)")
            #expect(result.stderr.contains("has the same directory name as a package Vigil depends on (\(identity))"),
                    "\(identity): \(result.stderr)")
        }
        let yams = try T.generate(["yams", "--lang", "swift"], in: dir)
        #expect(yams.status == 1, "NAME is the directory by default")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
        let c = try T.generate(["yams", "--lang", "c"], in: dir)
        #expect(c.status == 0, "C and Rust resolve no Swift packages: \(c.stderr)")
    }
}
