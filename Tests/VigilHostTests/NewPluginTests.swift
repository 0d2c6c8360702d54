import Foundation
import Synchronization
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// `vigil new-plugin` and the example plugins it copies. Each example
/// (`Plugins/examples/{c,rust,swift}/NAME`) is built, tested and checked as
/// it stands, and so is the plugin the real binary makes from it under
/// another name, with the tools its README names (make, cargo, swift).
///
/// The Swift examples as they stand depend on Vigil by URL and version. The
/// tests make that real: a git repository of this source tree, tagged with
/// this vigil's version, stands in for the release (`VigilRelease`), and
/// SwiftPM reaches it through a mirror of the URL. The plugins new-plugin
/// makes from them depend on this tree by path and build without that
/// mirror. The packages of each kind share one scratch path, so Vigil's part
/// (VigilKit, VigilKitTesting, Yams) is built once for each.
@Suite(.startsProcesses, .offThePool) struct NewPluginTests {
    /// Every scaffold: language, kind, and the example's plugin name.
    static let scaffolds: [(lang: String, kind: String, example: String)] = [
        ("c", "monitor", "boottime"), ("c", "output", "graphite"),
        ("rust", "monitor", "boottime"), ("rust", "output", "influx"),
        ("swift", "monitor", "boottime"), ("swift", "output", "jsonl"),
    ]
    static let cScaffolds = scaffolds.filter { $0.lang == "c" }.map { "\($0.kind):\($0.example)" }
    static let rustScaffolds = scaffolds.filter { $0.lang == "rust" }.map { "\($0.kind):\($0.example)" }
    static let swiftScaffolds = scaffolds.filter { $0.lang == "swift" }.map { "\($0.kind):\($0.example)" }

    /// Runs `vigil new-plugin ARGUMENTS`.
    static func generate(_ arguments: [String], in cwd: String? = nil) throws -> TestEnv.Output {
        if let cwd {
            return try TestEnv.run("/bin/sh", ["-c", "cd \"$1\" && shift && exec \"$@\"", "sh", cwd, TestEnv.vigil, "new-plugin"] + arguments,
                                   timeout: 60)
        }
        return try TestEnv.run(TestEnv.vigil, ["new-plugin"] + arguments, timeout: 60)
    }

    /// Runs `program` and requires exit 0, naming the step in the failure.
    @discardableResult
    static func succeed(_ step: String, _ program: String, _ arguments: [String], environment: [String: String]? = nil,
                        timeout: TimeInterval) throws -> TestEnv.Output {
        var result = try TestEnv.run(program, arguments, environment: environment, timeout: timeout)
        if result.status == 139 && result.stderr.contains("Program crashed") && result.stderr.contains("libdispatch") {
            // swift-build itself crashed in libdispatch's event loop (seen once
            // in a full run: "_dispatch_event_loop_drain", a toolchain bug,
            // nothing of the scaffold's): the step once more, said in the log.
            print("\(step) crashed in the toolchain's libdispatch; once more")
            result = try TestEnv.run(program, arguments, environment: environment, timeout: timeout)
        }
        guard result.status == 0 else {
            throw TestFailure("\(step) exited \(result.status):\n\(result.stdout)\n\(result.stderr)")
        }
        return result
    }

    static func text(_ path: String) throws -> String {
        try String(contentsOfFile: path, encoding: .utf8)
    }

    /// `name` on PATH, as the shell finds it.
    static func onPath(_ name: String) -> String? {
        let dirs = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
        for dir in dirs where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") { return "\(dir)/\(name)" }
        return nil
    }

    /// The C compiler as scripts/build-c-plugins picks it: $CC, else cc, gcc
    /// or clang on PATH, else the clang next to swift.
    static func cCompiler() -> String? {
        if let cc = ProcessInfo.processInfo.environment["CC"], !cc.isEmpty { return cc }
        for name in ["cc", "gcc", "clang"] { if let path = onPath(name) { return path } }
        if let swift = onPath("swift") {
            let clang = URL(fileURLWithPath: swift).resolvingSymlinksInPath().deletingLastPathComponent().path + "/clang"
            if FileManager.default.isExecutableFile(atPath: clang) { return clang }
        }
        return nil
    }

    /// Cargo as scripts/build-rust-plugins finds it: $CARGO, else on PATH,
    /// else $HOME/.cargo/bin/cargo.
    static func cargo() -> String? {
        let env = ProcessInfo.processInfo.environment
        if let cargo = env["CARGO"], !cargo.isEmpty { return cargo.contains("/") ? cargo : onPath(cargo) }
        if let path = onPath("cargo") { return path }
        if let home = env["HOME"], FileManager.default.isExecutableFile(atPath: home + "/.cargo/bin/cargo") {
            return home + "/.cargo/bin/cargo"
        }
        return nil
    }

    static let hasMake = onPath("make") != nil

    /// `vigil plugins check PATH` passed every check, and the plugin calls
    /// itself `name` and is the `kind` it should be.
    static func expectCheckPasses(_ path: String, name: String, kind: String) throws {
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", path], timeout: 120)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("plugin \(name) "), "\(check.stdout)")
        #expect(check.stdout.hasSuffix(" passed, 0 failed\n"), "\(check.stdout)")
        let describe = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", path], timeout: 60)
        #expect(describe.status == 0, "\(describe.stderr)")
        #expect(describe.stdout.contains("an output: takes events and sends them on") == (kind == "output"), "\(describe.stdout)")
    }

    /// Every file under `dir`, relative, skipping build directories.
    static func files(under dir: String) -> [String] {
        var out: [String] = []
        let walker = FileManager.default.enumerator(atPath: dir)
        while let relative = walker?.nextObject() as? String {
            let last = (relative as NSString).lastPathComponent
            if [".build", "target", ".swiftpm"].contains(last) { walker?.skipDescendants(); continue }
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: dir + "/" + relative, isDirectory: &isDirectory), !isDirectory.boolValue {
                out.append(relative)
            }
        }
        return out.sorted()
    }

    /// The copy names nothing after the example any more: neither its name
    /// nor (Swift) its UpperCamelCase form appear in a path or a text.
    static func expectNoTraceOf(_ example: String, in dir: String, lang: String) throws {
        let words = [example] + (lang == "swift" ? [example.prefix(1).uppercased() + example.dropFirst()] : [])
        for relative in files(under: dir) {
            let text = try text(dir + "/" + relative)
            for word in words {
                #expect(!relative.contains(word), "\(relative) is named after the example \(example)")
                #expect(!text.contains(word), "\(relative) still says \(word): \(text.components(separatedBy: "\n").filter { $0.contains(word) }.prefix(3))")
            }
        }
    }

    /// The example's directory copied to a fresh place, links followed, as
    /// `make install` installs it (so building it writes nothing into the tree).
    static func copyOfExample(_ lang: String, _ example: String) throws -> String {
        let base = try TestEnv.tempDir("example-\(lang)-\(example)")
        try succeed("cp -RL", "/bin/cp", ["-RL", TestEnv.repoRoot + "/Plugins/examples/\(lang)/\(example)", base + "/" + example],
                    timeout: 60)
        for build in [".build", "target", ".swiftpm", "Package.resolved"] {
            try? FileManager.default.removeItem(atPath: base + "/\(example)/\(build)")
        }
        return base + "/" + example
    }

    // MARK: - refusals and defaults

    @Test func refusesANameThatIsNotAPluginName() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for bad in ["Bad", "9lives", "with-dash", "_x", "caf\u{E9}", ""] {
            let result = try Self.generate([bad, "--lang", "c", "--dir", dir + "/out"])
            #expect(result.status != 0, "\(bad)")
            #expect(result.stderr.contains("is not a plugin name: write [a-z][a-z0-9_]*"), "\(bad): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/out"), "nothing is written for a bad name")
    }

    @Test func refusesNamesTheLanguageCannotTake() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for (name, lang, why) in [("vigil", "swift", "Vigil's package has a product of that name"),
                                  (String(repeating: "a", count: 65), "c", "65 characters long")] {
            let result = try Self.generate([name, "--lang", lang, "--dir", dir + "/out"])
            #expect(result.status != 0, "\(name)")
            #expect(result.stderr.contains(why), "\(name): \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/out"))
    }

    /// C uses the name only inside longer identifiers: a keyword or a libc
    /// function's name makes a plugin that builds and passes its test.
    @Test(.enabled(if: NewPluginTests.hasMake, "needs make"), arguments: ["int", "send", "main", "errno", "stdin"])
    func cTakesNamesThatAreCWords(_ name: String) throws {
        let cc = try #require(Self.cCompiler(), "no C compiler (cc, gcc, clang)")
        let base = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: base) }
        for kind in ["monitor", "output"] {
            let dir = base + "/" + kind
            let generated = try Self.generate([name, "--lang", "c", "--kind", kind, "--dir", dir])
            #expect(generated.status == 0, "\(generated.stderr)")
            let test = try Self.succeed("make test (\(name), \(kind))", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)", "all", "test"],
                                        timeout: 120)
            #expect(test.stdout.contains("test_\(name): all "), "\(test.stdout)")
        }
    }

    /// Rust uses the name for the library and in strings only: a keyword
    /// or the name of one of Rust's own crates builds and passes its tests.
    @Test(arguments: ["fn", "std"])
    func rustTakesNamesThatAreRustWords(_ name: String) throws {
        let cargo = try #require(Self.cargo(), "cargo not found (not on PATH, not in $HOME/.cargo/bin): Rust 1.63 or later")
        let path = URL(fileURLWithPath: cargo).deletingLastPathComponent().path + ":"
            + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let base = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let generated = try Self.generate([name, "--lang", "rust", "--dir", base + "/p"])
        #expect(generated.status == 0, "\(generated.stderr)")
        let test = try Self.succeed("cargo test (\(name))", cargo, ["test", "--offline", "--manifest-path", base + "/p/Cargo.toml"],
                                    environment: ["PATH": path, "CARGO_TARGET_DIR": base + "/target"], timeout: 600)
        #expect(test.stdout.contains("test result: ok."), "\(test.stdout)")
    }

    @Test func refusesANonEmptyDirectoryUnlessForced() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("mine\n", to: dir + "/notes.txt")
        let refused = try Self.generate(["probe", "--lang", "c", "--dir", dir])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("\(dir) is not empty"), "\(refused.stderr)")
        #expect(refused.stderr.contains("nothing was written") && refused.stderr.contains("--force"), "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["notes.txt"])

        let forced = try Self.generate(["probe", "--lang", "c", "--dir", dir, "--force"])
        #expect(forced.status == 0, "\(forced.stderr)")
        #expect(try Self.text(dir + "/notes.txt") == "mine\n", "--force leaves other files alone")
        #expect(FileManager.default.fileExists(atPath: dir + "/probe.c"))
    }

    @Test func refusesASourceTreeWithoutPackageSwift() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = try Self.generate(["probe", "--lang", "c", "--dir", dir + "/out", "--vigil-source", dir])
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(dir) is not a Vigil source tree (it has no Package.swift)"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/out"))
    }

    /// The scaffolds are found next to the binary, never at a path compiled
    /// into it: a copy of vigil outside any source tree or installation says
    /// where it looked.
    @Test func aVigilWithNeitherInstallationNorSourcesSaysWhereItLooked() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/bin", withIntermediateDirectories: true)
        // Copied by cp: a file this process held open for writing could be
        // inherited by a child another test forks meanwhile (ETXTBSY at exec).
        try Self.succeed("cp vigil", "/bin/cp", [TestEnv.vigil, dir + "/bin/vigil"], timeout: 60)
        let result = try TestEnv.run(dir + "/bin/vigil", ["new-plugin", "probe", "--lang", "c", "--dir", dir + "/out"],
                                     environment: ["LD_LIBRARY_PATH": ProcessInfo.processInfo.environment["LD_LIBRARY_PATH"] ?? ""])
        #expect(result.status == 1)
        #expect(result.stderr.contains("cannot find the plugin scaffolds"), "\(result.stderr)")
        #expect(result.stderr.contains("\(dir)/share/vigil/examples is missing"), "\(result.stderr)")
        #expect(result.stderr.contains("--vigil-source DIR"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/out"))

        // The same binary in an installed layout finds the installed examples.
        try FileManager.default.createDirectory(atPath: dir + "/share/vigil", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir + "/include/vigil", withIntermediateDirectories: true)
        try Self.succeed("install-examples", TestEnv.repoRoot + "/scripts/install-examples", [dir + "/share/vigil/examples"], timeout: 60)
        try FileManager.default.copyItem(atPath: TestEnv.repoRoot + "/Sources/CVigilPlugin/include/vigil_plugin.h",
                                         toPath: dir + "/include/vigil/vigil_plugin.h")
        let installed = try TestEnv.run(dir + "/bin/vigil", ["new-plugin", "probe", "--lang", "c", "--dir", dir + "/out"],
                                        environment: ["LD_LIBRARY_PATH": ProcessInfo.processInfo.environment["LD_LIBRARY_PATH"] ?? ""])
        #expect(installed.status == 0, "\(installed.stderr)")
        #expect(installed.stdout.contains("from the c/boottime example of the installation in \(dir)"), "\(installed.stdout)")

        // And an installation named with --vigil-source, from anywhere.
        let named = try Self.generate(["probe2", "--lang", "c", "--dir", dir + "/out2", "--vigil-source", dir])
        #expect(named.status == 0, "\(named.stderr)")
        #expect(named.stdout.contains("of the installation in \(dir)"), "\(named.stdout)")
        #expect(FileManager.default.contents(atPath: dir + "/out/vigil_plugin.h")
                == FileManager.default.contents(atPath: dir + "/include/vigil/vigil_plugin.h"))
    }

    /// Target names are unique across a package graph: every plugin target
    /// of Vigil's Package.swift is refused as a Swift plugin's, and nothing
    /// else is (the binary holds the list; this keeps it true).
    @Test func refusesEverySwiftTargetNameTheVigilPackageHas() throws {
        let manifest = try Self.text(TestEnv.repoRoot + "/Package.swift")
        let targets = manifest.split(separator: "\n").compactMap { line -> String? in
            guard line.contains("plugin(\""), let range = line.range(of: "target: \"") else { return nil }
            return String(line[range.upperBound...].prefix { $0 != "\"" })
        }
        #expect(targets.count >= 17, "\(targets)")
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for target in targets {
            let name = String(target.dropLast("Plugin".count)).lowercased()
            let result = try Self.generate([name, "--lang", "swift", "--dir", dir + "/\(name)"])
            #expect(result.status == 1, "\(name)")
            #expect(result.stderr.lowercased().contains("already has a target named \(target.lowercased())"), "\(name): \(result.stderr)")
        }
        let other = try Self.generate(["entropy", "--lang", "swift", "--dir", dir + "/entropy"])
        #expect(other.status == 0, "\(other.stderr)")
    }

    @Test func vigilPathIsForSwiftAndMakesAPathDependency() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        for option in [["--vigil-path", TestEnv.repoRoot], ["--vigil-url"]] {
            let refused = try Self.generate(["probe", "--lang", "c", "--dir", dir + "/c"] + option)
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("\(option[0]) is for Swift plugins"), "\(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/c"))

        let byPath = try Self.generate(["probe", "--lang", "swift", "--vigil-path", TestEnv.repoRoot, "--dir", dir + "/swift"])
        #expect(byPath.status == 0, "\(byPath.stderr)")
        let package = try Self.text(dir + "/swift/Package.swift")
        let root = URL(fileURLWithPath: TestEnv.repoRoot).standardizedFileURL
        #expect(package.contains(".package(path: \"\(root.path)\", traits: [])"), "\(package)")
        #expect(!package.contains(".package(url:"), "\(package)")
        #expect(package.contains("package: \"\(root.lastPathComponent.lowercased())\""), "\(package)")
        #expect(byPath.stdout.contains("Depends on Vigil's SDK by path: \(root.path) (--vigil-path).\nNext:\n"), "\(byPath.stdout)")
    }

    /// With no flag, a Swift plugin depends by path on the source tree the
    /// examples came from (this one: the tests' vigil was built in it), and
    /// the output says so before the next steps.
    @Test func withNoFlagASwiftPluginDependsOnTheSourceTreeByPath() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let root = URL(fileURLWithPath: TestEnv.repoRoot).standardizedFileURL
        for kind in ["monitor", "output"] {
            let result = try Self.generate(["probe", "--lang", "swift", "--kind", kind, "--dir", dir + "/" + kind])
            #expect(result.status == 0, "\(result.stderr)")
            let package = try Self.text(dir + "/\(kind)/Package.swift")
            #expect(package.contains("\n        .package(path: \"\(root.path)\", traits: []),\n"), "\(package)")
            #expect(!package.contains(".package(url:") && !package.contains("package: \"vigil\""), "\(package)")
            #expect(package.contains(".product(name: \"VigilKitTesting\", package: \"\(root.lastPathComponent.lowercased())\")"), "\(package)")
            #expect(result.stdout.contains("""
                Depends on Vigil's SDK by path: \(root.path) (the sources the example came from).
                Next:
                  cd \(dir)/\(kind)

                """), "\(result.stdout)")
        }
        let help = try TestEnv.run(TestEnv.vigil, ["new-plugin", "--help"], timeout: 60)
        #expect(help.status == 0, "\(help.stderr)")
        let words = help.stdout.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for phrase in ["A Swift plugin depends on Vigil's SDK by path", "PREFIX/share/vigil/sdk", "--vigil-url [<URL>]",
                       "(default as flag: \(VigilRelease.url))", "The output says which it wrote."] {
            #expect(words.contains(phrase), "\(phrase): \(help.stdout)")
        }
    }

    /// --vigil-url keeps the URL form, for a published release: this
    /// vigil's URL and version, or another URL (its last component names
    /// the package); a word that is no URL, or both --vigil-path and
    /// --vigil-url, is refused before anything is written.
    @Test func vigilURLWritesAReleaseByURLAndVersion() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let byDefault = try Self.generate(["probe", "--lang", "swift", "--dir", dir + "/default", "--vigil-url"])
        #expect(byDefault.status == 0, "\(byDefault.stderr)")
        let versioned = try Self.text(dir + "/default/Package.swift")
        #expect(versioned.contains(".package(url: \"\(VigilRelease.url)\", from: \"\(vigilVersion)\", traits: [])"), "\(versioned)")
        #expect(versioned.contains(".product(name: \"VigilKit\", package: \"vigil\")"), "\(versioned)")
        #expect(byDefault.stdout.contains("""
            Depends on Vigil's SDK by URL and version: \(VigilRelease.url) from \(vigilVersion) (--vigil-url); \
            `swift build` fetches it, so a release must be published there.

            """), "\(byDefault.stdout)")

        for (option, url) in [(["--vigil-url", "https://git.example.org/me/Vigil-Fork.git"], "https://git.example.org/me/Vigil-Fork.git"),
                              (["--vigil-url=git@git.example.org:me/fork"], "git@git.example.org:me/fork")] {
            let other = try Self.generate(["probe", "--lang", "swift", "--dir", dir + "/other", "--force"] + option)
            #expect(other.status == 0, "\(other.stderr)")
            let package = try Self.text(dir + "/other/Package.swift")
            #expect(package.contains(".package(url: \"\(url)\", from: \"\(vigilVersion)\", traits: [])"), "\(package)")
            let identity = url.hasSuffix(".git") ? "vigil-fork" : "fork"
            #expect(package.contains(".product(name: \"VigilKit\", package: \"\(identity)\")"), "\(package)")
        }

        for (arguments, why) in [(["--vigil-url", "fork"], "--vigil-url fork is not a git URL"),
                                 (["--vigil-url", "--vigil-path", TestEnv.repoRoot], "--vigil-path and --vigil-url name two places")] {
            let refused = try Self.generate(["probe", "--lang", "swift", "--dir", dir + "/refused"] + arguments)
            #expect(refused.status != 0, "\(arguments)")
            #expect(refused.stderr.contains(why), "\(arguments): \(refused.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/refused"))
    }

    /// An installation without its SDK (an older `make install`, or one
    /// whose SDK was removed) is refused at new-plugin time with what to
    /// pass, rather than left to fail at the plugin's first build; C is
    /// made as before, and so is Swift with --vigil-url. With the SDK in
    /// place (scripts/install-sdk, as make install runs it), a Swift plugin
    /// depends on it by path, without traits (it declares none).
    @Test func anInstallationDependsOnItsSDKOrSaysWhatToPass() throws {
        let prefix = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: prefix) }
        try FileManager.default.createDirectory(atPath: prefix + "/include/vigil", withIntermediateDirectories: true)
        try Self.succeed("install-examples", TestEnv.repoRoot + "/scripts/install-examples", [prefix + "/share/vigil/examples"], timeout: 60)
        try FileManager.default.copyItem(atPath: TestEnv.repoRoot + "/Sources/CVigilPlugin/include/vigil_plugin.h",
                                         toPath: prefix + "/include/vigil/vigil_plugin.h")
        let refused = try Self.generate(["probe", "--lang", "swift", "--dir", prefix + "/out", "--vigil-source", prefix])
        #expect(refused.status == 1)
        #expect(refused.stderr == """
            vigil new-plugin: \(prefix)/share/vigil/sdk is missing (Vigil's SDK, which make install puts beside the examples), \
            so a Swift plugin would have nothing to build against; nothing was written. \
            Pass --vigil-path DIR (a Vigil checkout or SDK) or --vigil-url [URL] (a published release)

            """, "one line, what to pass: \(refused.stderr)")
        #expect(!FileManager.default.fileExists(atPath: prefix + "/out"))
        let byURL = try Self.generate(["probe", "--lang", "swift", "--dir", prefix + "/url", "--vigil-source", prefix, "--vigil-url"])
        #expect(byURL.status == 0, "\(byURL.stderr)")
        let c = try Self.generate(["probe", "--lang", "c", "--dir", prefix + "/c", "--vigil-source", prefix])
        #expect(c.status == 0, "\(c.stderr)")

        try Self.succeed("install-sdk", TestEnv.repoRoot + "/scripts/install-sdk",
                         [prefix + "/share/vigil/sdk", TestEnv.repoRoot + "/.build/checkouts"], timeout: 60)
        let made = try Self.generate(["probe", "--lang", "swift", "--dir", prefix + "/out", "--vigil-source", prefix])
        #expect(made.status == 0, "\(made.stderr)")
        let package = try Self.text(prefix + "/out/Package.swift")
        #expect(package.contains("\n        .package(path: \"\(prefix)/share/vigil/sdk\"),\n"), "\(package)")
        #expect(package.contains(".product(name: \"VigilKit\", package: \"sdk\")"), "\(package)")
        #expect(made.stdout.contains("Depends on Vigil's SDK by path: \(prefix)/share/vigil/sdk (installed with the example).\n"),
                "\(made.stdout)")
    }

    @Test func writesIntoDotSlashNameByDefault() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = try Self.generate(["probe", "--lang", "rust", "--kind", "output"], in: dir)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir + "/probe/Cargo.toml"))
        #expect(result.stdout.contains("Created the Rust output plugin 'probe' in \(dir)/probe"), "\(result.stdout)")
        #expect(result.stdout.contains("cargo build --release --offline"))
    }

    // MARK: - C

    /// The example as it stands, and the plugin made from it: `make`,
    /// `make test`, `make check`.
    @Test(.enabled(if: NewPluginTests.hasMake, "needs make"), arguments: NewPluginTests.cScaffolds)
    func cScaffold(_ scaffold: String) throws {
        let (kind, example) = (String(scaffold.split(separator: ":")[0]), String(scaffold.split(separator: ":")[1]))
        let cc = try #require(Self.cCompiler(), "no C compiler (cc, gcc, clang)")
        let asItStands = try Self.copyOfExample("c", example)
        try Self.succeed("make (the example)", "/usr/bin/env",
                         ["make", "-C", asItStands, "CC=\(cc)", "VIGIL=\(TestEnv.vigil)", "all", "test", "check"], timeout: 180)
        try Self.expectCheckPasses(asItStands + "/\(example).so", name: example, kind: kind)

        let name = "np_c_\(kind)"
        let base = try TestEnv.tempDir()
        let dir = base + "/" + name
        let generated = try Self.generate([name, "--lang", "c", "--kind", kind, "--dir", dir])
        #expect(generated.status == 0, "\(generated.stderr)")
        #expect(generated.stdout.contains("make check"), "\(generated.stdout)")
        // The header is the source tree's, byte for byte, not a link.
        #expect(FileManager.default.contents(atPath: dir + "/vigil_plugin.h")
                == FileManager.default.contents(atPath: TestEnv.repoRoot + "/Sources/CVigilPlugin/include/vigil_plugin.h"))
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/vigil_plugin.h")) == nil)
        #expect(try Self.text(dir + "/\(name).c").contains(".name = VIGIL_STR(\"\(name)\")"))
        try Self.expectNoTraceOf(example, in: dir, lang: "c")

        let build = try Self.succeed("make", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)"], timeout: 120)
        #expect(build.stdout.contains("-std=c99 -Wall -Wextra -Werror -pedantic"), "\(build.stdout)")
        let test = try Self.succeed("make test", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)", "test"], timeout: 120)
        #expect(test.stdout.contains("test_\(name): all "), "\(test.stdout)")
        // `make check` runs the vigil that generated the directory.
        let check = try Self.succeed("make check", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)", "check"], timeout: 120)
        #expect(check.stdout.contains(" passed, 0 failed"), "\(check.stdout)")
        try Self.expectCheckPasses(dir + "/\(name).so", name: name, kind: kind)
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
        try? FileManager.default.removeItem(atPath: (asItStands as NSString).deletingLastPathComponent)
    }

    // MARK: - Rust

    /// The example's unit tests as it stands (its target directory outside
    /// the tree), and the plugin made from it: build, unit tests, check.
    @Test(arguments: NewPluginTests.rustScaffolds)
    func rustScaffold(_ scaffold: String) throws {
        let (kind, example) = (String(scaffold.split(separator: ":")[0]), String(scaffold.split(separator: ":")[1]))
        let cargo = try #require(Self.cargo(), "cargo not found (not on PATH, not in $HOME/.cargo/bin): Rust 1.63 or later")
        // rustc is found next to cargo (rustup installs both in one directory).
        let path = URL(fileURLWithPath: cargo).deletingLastPathComponent().path + ":"
            + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let base = try TestEnv.tempDir()
        let exampleTest = try Self.succeed(
            "cargo test (the example)", cargo,
            ["test", "--offline", "--manifest-path", TestEnv.repoRoot + "/Plugins/examples/rust/\(example)/Cargo.toml"],
            environment: ["PATH": path, "CARGO_TARGET_DIR": base + "/example-target"], timeout: 600)
        #expect(exampleTest.stdout.contains("test result: ok."), "\(exampleTest.stdout)")

        let name = "np_rust_\(kind)"
        let dir = base + "/" + name
        let generated = try Self.generate([name, "--lang", "rust", "--kind", kind, "--dir", dir])
        #expect(generated.status == 0, "\(generated.stderr)")
        // The bindings are the source tree's, byte for byte, not a link.
        #expect(FileManager.default.contents(atPath: dir + "/src/abi.rs")
                == FileManager.default.contents(atPath: TestEnv.repoRoot + "/Plugins/examples/rust/abi.rs"))
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: dir + "/src/abi.rs")) == nil)
        #expect(try Self.text(dir + "/Cargo.toml").contains("name = \"\(name)\""))
        try Self.expectNoTraceOf(example, in: dir, lang: "rust")

        let environment = ["PATH": path, "CARGO_TARGET_DIR": dir + "/target"]
        let manifest = ["--manifest-path", dir + "/Cargo.toml"]
        try Self.succeed("cargo build", cargo, ["build", "--release", "--offline"] + manifest,
                         environment: environment, timeout: 600)
        let test = try Self.succeed("cargo test", cargo, ["test", "--offline"] + manifest,
                                    environment: environment, timeout: 600)
        #expect(test.stdout.contains("test result: ok."), "\(test.stdout)")
        // The host finds plugins by file name: NAME.so.
        try FileManager.default.copyItem(atPath: dir + "/target/release/lib\(name).so", toPath: dir + "/\(name).so")
        try Self.expectCheckPasses(dir + "/\(name).so", name: name, kind: kind)
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
    }
}

/// The Swift scaffolds, one at a time: they share scratch paths.
@Suite(.serialized, .startsProcesses, .offThePool) struct SwiftScaffoldTests {
    /// The example as it stands (a copy, so that SwiftPM's Package.resolved
    /// is not written into the tree), depending on VigilKit and
    /// VigilKitTesting by version from the tagged repository, and the plugin
    /// new-plugin makes from it with no flag, in a temporary directory,
    /// depending on this source tree by path, as its author would build it:
    /// no mirror of Vigil's URL, no configuration. Build, test, check.
    @Test(arguments: NewPluginTests.swiftScaffolds)
    func swiftScaffold(_ scaffold: String) throws {
        let (kind, example) = (String(scaffold.split(separator: ":")[0]), String(scaffold.split(separator: ":")[1]))
        let swift = try #require(NewPluginTests.onPath("swift"), "swift not on PATH")

        // The example as it stands depends on this release by URL and version;
        // that form is built by aPluginByURLBuildsAgainstTheRelease (a plugin
        // new-plugin --vigil-url made from the same example), once, not here
        // for each example again: CI's 20 minutes.
        let asItStands = try NewPluginTests.copyOfExample("swift", example)
        let package = try NewPluginTests.text(asItStands + "/Package.swift")
        #expect(package.contains(".package(url: \"\(VigilRelease.url)\", from: \"\(vigilVersion)\", traits: [])"),
                "the example depends on this release of Vigil by URL and version: \(package)")

        let name = "np_swift_\(kind)"
        let base = try TestEnv.tempDir()
        let dir = base + "/" + name
        let generated = try NewPluginTests.generate([name, "--lang", "swift", "--kind", kind, "--dir", dir])
        #expect(generated.status == 0, "\(generated.stderr)")
        #expect(generated.stdout.contains("Depends on Vigil's SDK by path: \(TestEnv.repoRoot) (the sources the example came from)."),
                "\(generated.stdout)")
        #expect(try NewPluginTests.text(dir + "/Package.swift").contains(".package(path: \"\(TestEnv.repoRoot)\", traits: [])"))
        let type = "NpSwift" + kind.prefix(1).uppercased() + kind.dropFirst()
        #expect(FileManager.default.fileExists(atPath: dir + "/Sources/\(type)Plugin"), "\(NewPluginTests.files(under: dir))")
        #expect(FileManager.default.fileExists(atPath: dir + "/Tests/\(type)PluginTests"), "\(NewPluginTests.files(under: dir))")
        try NewPluginTests.expectNoTraceOf(example, in: dir, lang: "swift")
        try Self.build(dir, name: name, kind: kind, swift: swift, scratch: TestEnv.productsDir + "/vigil-by-path/scratch")
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
        try? FileManager.default.removeItem(atPath: (asItStands as NSString).deletingLastPathComponent)
    }

    /// --vigil-url writes the example's own line back: the plugin builds
    /// against the tagged repository as the example does.
    @Test func aPluginByURLBuildsAgainstTheRelease() throws {
        let swift = try #require(NewPluginTests.onPath("swift"), "swift not on PATH")
        let release = try VigilRelease.shared()
        let base = try TestEnv.tempDir()
        let dir = base + "/np_swift_url"
        let generated = try NewPluginTests.generate(["np_swift_url", "--lang", "swift", "--dir", dir, "--vigil-url"])
        #expect(generated.status == 0, "\(generated.stderr)")
        try Self.build(dir, name: "np_swift_url", kind: "monitor", swift: swift, scratch: release.scratch,
                       options: ["--config-path", release.configuration])
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
    }

    static func build(_ dir: String, name: String, kind: String, swift: String, scratch: String, options: [String] = []) throws {
        let common = ["--package-path", dir, "--scratch-path", scratch, "--disable-dependency-cache"] + options
        try NewPluginTests.succeed("swift build \(name)", swift, ["build", "--build-tests"] + common, timeout: 900)
        let test = try NewPluginTests.succeed("swift test \(name)", swift, ["test", "--skip-build"] + common, timeout: 300)
        #expect((test.stdout + test.stderr).contains("passed"), "\(test.stdout)\(test.stderr)")
        #expect(!(test.stdout + test.stderr).contains("failed"), "\(test.stdout)\(test.stderr)")
        try NewPluginTests.expectCheckPasses(scratch + "/debug/lib\(name).so", name: name, kind: kind)
    }
}

/// This source tree as a release of Vigil that a package outside it can
/// depend on by URL and version: a git repository of the tree's files (with
/// changes not yet committed), tagged with this vigil's version, which a
/// SwiftPM mirror puts in place of the URL the scaffolds name. Made once per
/// test run.
struct VigilRelease: Sendable {
    /// The URL the Swift scaffolds depend on.
    static let url = "https://github.com/vigil-monitor/vigil"

    /// The tagged repository.
    let repository: String
    /// A SwiftPM configuration directory with the mirror (`--config-path`).
    let configuration: String
    /// The scratch path the Swift packages share.
    let scratch: String

    private static let made = Mutex<VigilRelease?>(nil)

    static func shared() throws -> VigilRelease {
        try made.withLock { made in
            if let made { return made }
            let base = TestEnv.productsDir + "/vigil-release"
            let scratch = base + "/scratch"
            // A repository of its own per run, so that no clone of an earlier
            // run's (same tag, other commit) is taken for it; the scratch
            // path keeps only its build products from one run to the next.
            for old in (try? FileManager.default.contentsOfDirectory(atPath: base)) ?? [] where old.hasPrefix("repository-") {
                try? FileManager.default.removeItem(atPath: base + "/" + old)
            }
            for state in ["checkouts", "repositories", "workspace-state.json", "configuration"] {
                try? FileManager.default.removeItem(atPath: (state == "configuration" ? base : scratch) + "/" + state)
            }
            let repository = base + "/repository-\(UUID().uuidString.prefix(8))"
            try FileManager.default.createDirectory(atPath: repository, withIntermediateDirectories: true)
            // The tree's files as git sees them: tracked and new, not ignored.
            // A tree that is no git checkout (make dist's tarball, unpacked) is
            // all sources: every file but the build's.
            let files: [String]
            if FileManager.default.fileExists(atPath: TestEnv.repoRoot + "/.git") {
                files = try NewPluginTests.succeed(
                    "git ls-files", "/usr/bin/env",
                    ["git", "-C", TestEnv.repoRoot, "ls-files", "--cached", "--others", "--exclude-standard"], timeout: 60)
                    .stdout.split(separator: "\n").map(String.init)
            } else {
                let walker = FileManager.default.enumerator(atPath: TestEnv.repoRoot)
                var found: [String] = []
                while let relative = walker?.nextObject() as? String {
                    if relative.hasPrefix(".build") || relative.hasPrefix(".swiftpm") { walker?.skipDescendants(); continue }
                    var isDirectory: ObjCBool = false
                    if FileManager.default.fileExists(atPath: TestEnv.repoRoot + "/" + relative, isDirectory: &isDirectory), !isDirectory.boolValue {
                        found.append(relative)
                    }
                }
                files = found
            }
            for relative in files {
                let from = TestEnv.repoRoot + "/" + relative
                let to = repository + "/" + relative
                guard FileManager.default.fileExists(atPath: from) || (try? FileManager.default.destinationOfSymbolicLink(atPath: from)) != nil
                else { continue }  // deleted, not yet committed
                try FileManager.default.createDirectory(atPath: (to as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: from, toPath: to)
            }
            let git = ["/usr/bin/env", "git", "-C", repository, "-c", "user.name=Vigil tests", "-c", "user.email=tests@vigil.invalid",
                       "-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false"]
            for step in [["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "Vigil \(vigilVersion), as the tests found it"],
                         ["tag", vigilVersion]] {
                try NewPluginTests.succeed("git \(step[0])", git[0], Array(git.dropFirst()) + step, timeout: 120)
            }
            let configuration = base + "/configuration"
            try FileManager.default.createDirectory(atPath: configuration, withIntermediateDirectories: true)
            let mirrors = """
                { "version": 1, "object": [ { "original": "\(url)", "mirror": "\(URL(fileURLWithPath: repository).absoluteString)" } ] }
                """
            try TestEnv.write(mirrors, to: configuration + "/mirrors.json")
            let release = VigilRelease(repository: repository, configuration: configuration, scratch: scratch)
            made = release
            return release
        }
    }
}
