import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// `vigil new-plugin` used the way an outside author or an operator might:
/// names that collide with what the copy's code or its build already has,
/// paths with spaces and quotes, scaffolds reached through links. Only C
/// builds here; Swift names are checked by what is generated, not built.
@Suite(.startsProcesses, .offThePool) struct NewPluginHostileTests {
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

    /// `--vigil-path` must name a Vigil checkout (SwiftPM would only say so
    /// at the first build); its path is written as a Swift string literal,
    /// whatever characters it has.
    @Test func vigilPathIsACheckoutWrittenAsASwiftLiteral() throws {
        let swift = try #require(T.onPath("swift"), "swift not on PATH")
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for (path, why) in [(dir, "it has no Package.swift"), ("no/such/dir", "it has no Package.swift")] {
            let result = try T.generate(["probe", "--lang", "swift", "--vigil-path", path, "--dir", dir + "/out"])
            #expect(result.status == 1, "\(path)")
            #expect(result.stderr.contains("is not a Vigil checkout (\(why))"), "\(result.stderr)")
        }
        try FileManager.default.createDirectory(atPath: dir + "/other", withIntermediateDirectories: true)
        try TestEnv.write("// swift-tools-version:6.1\n", to: dir + "/other/Package.swift")
        let other = try T.generate(["probe", "--lang", "swift", "--vigil-path", dir + "/other", "--dir", dir + "/out"])
        #expect(other.status == 1)
        #expect(other.stderr.contains("is a Swift package but not Vigil (it has no Sources/VigilKit)"), "\(other.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/out"))

        // A checkout (a link to this tree) whose directory name has a quote,
        // a backslash and a space.
        let checkout = dir + "/my \"vigil\\ tree"
        try FileManager.default.createSymbolicLink(atPath: checkout, withDestinationPath: TestEnv.repoRoot)
        let result = try T.generate(["probe", "--lang", "swift", "--vigil-path", checkout, "--dir", dir + "/probe"])
        #expect(result.status == 0, "\(result.stderr)")
        let package = try T.text(dir + "/probe/Package.swift")
        #expect(package.contains(#".package(path: "\#(dir)/my \"vigil\\ tree", traits: [])"#), "\(package)")
        #expect(package.contains(#"package: "my \"vigil\\ tree""#), "\(package)")
        // SwiftPM reads it (the manifest alone; nothing is resolved).
        let dump = try T.succeed("swift package dump-package", swift, ["package", "--package-path", dir + "/probe", "dump-package"],
                                 timeout: 300)
        #expect(dump.stdout.contains("my \\\"vigil\\\\ tree"), "\(dump.stdout)")
    }

    /// A vigil whose path has a space, `$` and `#` (an installation under
    /// such a prefix): `make check` runs it, and the printed next steps
    /// quote it for the shell.
    @Test(.enabled(if: NewPluginTests.hasMake, "needs make"))
    func makeCheckRunsAVigilWhosePathHasSpaces() throws {
        let cc = try #require(T.cCompiler(), "no C compiler (cc, gcc, clang)")
        let base = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let bin = base + "/my tools $HOME #1/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: true)
        // A hard link: /proc/self/exe names it, not the build's vigil.
        do { try FileManager.default.linkItem(atPath: TestEnv.vigil, toPath: bin + "/vigil") } catch {
            try FileManager.default.copyItem(atPath: TestEnv.vigil, toPath: bin + "/vigil")
        }
        let vigil = bin + "/vigil"
        let dir = base + "/spaced"
        let generated = try TestEnv.run(vigil, ["new-plugin", "spaced", "--lang", "c", "--dir", dir, "--vigil-source", TestEnv.repoRoot],
                                        timeout: 60)
        #expect(generated.status == 0, "\(generated.stderr)")
        let check = try T.succeed("make check", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)", "check"], timeout: 120)
        #expect(check.stdout.contains(" passed, 0 failed"), "\(check.stdout)")

        let rust = try TestEnv.run(vigil, ["new-plugin", "spaced", "--lang", "rust", "--dir", base + "/rust",
                                           "--vigil-source", TestEnv.repoRoot], timeout: 60)
        #expect(rust.status == 0, "\(rust.stderr)")
        #expect(rust.stdout.contains("  '\(vigil)' plugins check ./spaced.so"), "\(rust.stdout)")
    }

    /// An installation may keep an example's directory elsewhere, behind a
    /// link: it is copied as if it were there (it was "holds no files").
    @Test func anExampleDirectoryThatIsALinkIsFollowed() throws {
        let tree = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: tree) }
        try TestEnv.write("// swift-tools-version:6.1\n", to: tree + "/Package.swift")
        let fm = FileManager.default
        try fm.createDirectory(atPath: tree + "/Sources/CVigilPlugin/include", withIntermediateDirectories: true)
        try fm.copyItem(atPath: TestEnv.repoRoot + "/Sources/CVigilPlugin/include/vigil_plugin.h",
                        toPath: tree + "/Sources/CVigilPlugin/include/vigil_plugin.h")
        try fm.createDirectory(atPath: tree + "/Plugins/examples/c", withIntermediateDirectories: true)
        try fm.createSymbolicLink(atPath: tree + "/Plugins/examples/c/boottime",
                                  withDestinationPath: TestEnv.repoRoot + "/Plugins/examples/c/boottime")
        let result = try T.generate(["linked", "--lang", "c", "--dir", tree + "/out", "--vigil-source", tree])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(fm.fileExists(atPath: tree + "/out/linked.c"), "\(T.files(under: tree + "/out"))")
        #expect(fm.contents(atPath: tree + "/out/vigil_plugin.h") == fm.contents(atPath: tree + "/Sources/CVigilPlugin/include/vigil_plugin.h"))
    }

    /// --force over a copy of another kind (or language) overwrites files of
    /// the same names and removes nothing: the earlier copy's sources stay
    /// (a Swift monitor's, with its own vigil_plugin_entry, would be built
    /// into the output), and the copy says which.
    @Test func forceNamesWhatItKept() throws {
        let base = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let dir = base + "/kept"
        let first = try T.generate(["kept", "--lang", "swift", "--dir", dir])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(!first.stdout.contains("Kept as they were"), "\(first.stdout)")
        try FileManager.default.createDirectory(atPath: dir + "/.build", withIntermediateDirectories: true)
        try TestEnv.write("", to: dir + "/.build/ignored")
        let second = try T.generate(["kept", "--lang", "swift", "--kind", "output", "--dir", dir, "--force"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stdout.contains("Kept as they were (--force removes nothing: remove what an earlier copy left"), "\(second.stdout)")
        #expect(second.stdout.contains("  Sources/KeptPlugin/KeptMonitor.swift\n"), "\(second.stdout)")
        #expect(second.stdout.contains("  Tests/KeptPluginTests/KeptTests.swift\n"), "\(second.stdout)")
        #expect(!second.stdout.contains("ignored") && !second.stdout.contains("  Package.swift\n  Sources/KeptPlugin/KeptMonitor"),
                "\(second.stdout)")
    }
}
