import VigilABI
import Foundation
import Testing

/// `vigil new-plugin`: the real binary generates each scaffold, which is then
/// built, tested and checked with the tools its README names (make, cargo,
/// swift), exactly as generated.
///
/// The Swift scaffold builds part of Vigil's dependency graph (VigilKitTesting
/// needs VigilHost and its packages): about a minute the first time. Its
/// scratch path is shared by every run under the products directory, so later
/// runs only rebuild the generated package (seconds).
@Suite struct NewPluginTests {
    /// Runs `vigil new-plugin ARGUMENTS`.
    static func generate(_ arguments: [String]) throws -> TestEnv.Output {
        try TestEnv.run(TestEnv.vigil, ["new-plugin"] + arguments, timeout: 60)
    }

    /// Runs `program` and requires exit 0, naming the step in the failure.
    @discardableResult
    static func succeed(_ step: String, _ program: String, _ arguments: [String], environment: [String: String]? = nil,
                        timeout: TimeInterval) throws -> TestEnv.Output {
        let result = try TestEnv.run(program, arguments, environment: environment, timeout: timeout)
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
    /// itself `name`.
    static func expectCheckPasses(_ path: String, name: String) throws {
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", path], timeout: 120)
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
        #expect(check.stdout.contains("plugin \(name) 0.1.0, ABI 1."), "\(check.stdout)")
        #expect(check.stdout.hasSuffix("8 passed, 0 failed\n"), "\(check.stdout)")
    }

    // MARK: - refusals

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

    @Test func refusesASwiftTargetNameTheVigilPackageHas() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = try Self.generate(["load", "--lang", "swift", "--dir", dir + "/load"])
        #expect(result.status == 1)
        #expect(result.stderr.contains("already has a target named LoadPlugin"), "\(result.stderr)")
    }

    @Test func writesIntoDotSlashNameByDefault() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let result = try TestEnv.run("/bin/sh", ["-c", "cd \"$1\" && exec \"$2\" new-plugin probe --lang rust", "sh", dir, TestEnv.vigil])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(FileManager.default.fileExists(atPath: dir + "/probe/Cargo.toml"))
        #expect(result.stdout.contains("Created the Rust monitor plugin 'probe' in \(dir)/probe"), "\(result.stdout)")
        #expect(result.stdout.contains("cargo build --release --offline"))
    }

    // MARK: - C

    @Test(.enabled(if: NewPluginTests.hasMake, "needs make"))
    func cScaffoldBuildsPassesItsTestAndTheCheck() throws {
        let name = "np_c_probe"
        let base = try TestEnv.tempDir()
        let dir = base + "/" + name
        let generated = try Self.generate([name, "--lang", "c", "--dir", dir])
        #expect(generated.status == 0, "\(generated.stderr)")
        #expect(generated.stdout.contains("make check"), "\(generated.stdout)")
        // The header is the source tree's, byte for byte.
        #expect(FileManager.default.contents(atPath: dir + "/vigil_plugin.h")
                == FileManager.default.contents(atPath: TestEnv.repoRoot + "/Sources/CVigilPlugin/include/vigil_plugin.h"))
        #expect(try Self.text(dir + "/\(name).c").contains(".name = VIGIL_STR(\"\(name)\")"))

        let cc = try #require(Self.cCompiler(), "no C compiler (cc, gcc, clang)")
        let build = try Self.succeed("make", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)"], timeout: 120)
        #expect(build.stdout.contains("-std=c99 -Wall -Wextra -Werror -pedantic"), "\(build.stdout)")
        let test = try Self.succeed("make test", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)", "test"], timeout: 120)
        #expect(test.stdout.contains("test_\(name): all "), "\(test.stdout)")
        // `make check` runs the vigil that generated the directory.
        let check = try Self.succeed("make check", "/usr/bin/env", ["make", "-C", dir, "CC=\(cc)", "check"], timeout: 120)
        #expect(check.stdout.contains("8 passed, 0 failed"), "\(check.stdout)")
        try Self.expectCheckPasses(dir + "/\(name).so", name: name)
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
    }

    // MARK: - Rust

    @Test func rustScaffoldBuildsPassesItsTestsAndTheCheck() throws {
        let name = "np_rust_probe"
        let base = try TestEnv.tempDir()
        let dir = base + "/" + name
        let generated = try Self.generate([name, "--lang", "rust", "--dir", dir])
        #expect(generated.status == 0, "\(generated.stderr)")
        // The bindings are the source tree's Rust example's, byte for byte.
        #expect(FileManager.default.contents(atPath: dir + "/src/abi.rs")
                == FileManager.default.contents(atPath: TestEnv.repoRoot + "/Plugins/examples/rust/abi.rs"))
        #expect(try Self.text(dir + "/Cargo.toml").contains("name = \"\(name)\""))

        let cargo = try #require(Self.cargo(), "cargo not found (not on PATH, not in $HOME/.cargo/bin): Rust 1.63 or later")
        // rustc is found next to cargo (rustup installs both in one directory).
        let path = URL(fileURLWithPath: cargo).deletingLastPathComponent().path + ":"
            + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        let environment = ["PATH": path, "CARGO_TARGET_DIR": dir + "/target"]
        let manifest = ["--manifest-path", dir + "/Cargo.toml"]
        try Self.succeed("cargo build", cargo, ["build", "--release", "--offline"] + manifest,
                         environment: environment, timeout: 600)
        let test = try Self.succeed("cargo test", cargo, ["test", "--offline"] + manifest,
                                    environment: environment, timeout: 600)
        #expect(test.stdout.contains("test result: ok."), "\(test.stdout)")
        // The host finds plugins by file name: NAME.so.
        try FileManager.default.copyItem(atPath: dir + "/target/release/lib\(name).so", toPath: dir + "/\(name).so")
        try Self.expectCheckPasses(dir + "/\(name).so", name: name)
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
    }

    // MARK: - Swift

    @Test func swiftScaffoldBuildsPassesItsTestsAndTheCheck() throws {
        let name = "np_swift_probe"
        let base = try TestEnv.tempDir()
        let dir = base + "/" + name
        let generated = try Self.generate([name, "--lang", "swift", "--dir", dir])
        #expect(generated.status == 0, "\(generated.stderr)")
        // By default the package depends on the sources vigil was built from.
        let package = try Self.text(dir + "/Package.swift")
        let root = URL(fileURLWithPath: TestEnv.repoRoot).standardizedFileURL.path
        #expect(package.contains(".package(path: \"\(root)\")"), "\(package)")
        #expect(package.contains(".library(name: \"\(name)\", type: .dynamic"), "\(package)")
        #expect(FileManager.default.fileExists(atPath: dir + "/Sources/NpSwiftProbePlugin/NpSwiftProbeMonitor.swift"))
        #expect(FileManager.default.fileExists(atPath: dir + "/Tests/NpSwiftProbePluginTests/NpSwiftProbeTests.swift"))

        let swift = try #require(Self.onPath("swift"), "swift not on PATH")
        // Shared by every run (same package and target names), so that only
        // the first one builds Vigil's dependencies.
        let scratch = TestEnv.productsDir + "/new-plugin-swift-build"
        let common = ["--package-path", dir, "--scratch-path", scratch]
        try Self.succeed("swift build", swift, ["build"] + common, timeout: 900)
        let test = try Self.succeed("swift test", swift, ["test"] + common, timeout: 900)
        #expect(test.stdout.contains("passed") || test.stderr.contains("passed"), "\(test.stdout)\(test.stderr)")
        try Self.expectCheckPasses(scratch + "/debug/lib\(name).so", name: name)
        try? FileManager.default.removeItem(atPath: base)  // kept when a step failed
    }
}
