import ArgumentParser
import Foundation

/// `vigil new-plugin NAME --lang swift|c|rust`: writes a small, complete,
/// tested monitor plugin to start from. The plugin code comes from the
/// templates in `Templates/`; what must never drift from the ABI — the C
/// header, the Rust bindings, the Swift SDK — is taken from the Vigil source
/// tree itself (`--vigil-source`) when the plugin is generated.
struct NewPlugin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new-plugin",
        abstract: "Create a monitor plugin to start from, in Swift, C or Rust, with its tests.",
        discussion: """
        Writes a small, complete polled monitor named NAME: it reads the first number of PROCFS/uptime \
        (options `procfs`, default /proc, and `recent`), emits one `sample` event with `uptime` (seconds) and \
        `recently_booted`, reports a missing file as unavailable and a bad value as invalid configuration at \
        its option. As generated, it builds, passes its own tests and `vigil plugins check`.

          c      NAME.c; test_NAME.c, which loads NAME.so with a fake host;
                 a Makefile (make, make test, make check); vigil_plugin.h.
          rust   a Cargo package (cdylib, no dependencies, Rust 1.63):
                 src/lib.rs with its unit tests; src/abi.rs, the bindings.
          swift  a SwiftPM package that depends on the Vigil sources by path
                 (VigilKit, VigilKitTesting): Sources/<Name>Plugin/ and
                 Tests/<Name>PluginTests/, with a PluginTestHost test.

        The Vigil sources are the tree this vigil was built from, unless --vigil-source names another. The \
        C header (Sources/CVigilPlugin/include/vigil_plugin.h) and the Rust bindings \
        (Plugins/examples/rust/abi.rs) are copied from there as they are, so they never drift from the ABI.
        """)

    enum Language: String, ExpressibleByArgument, CaseIterable {
        case swift, c, rust
    }

    @Argument(help: "The plugin's name, [a-z][a-z0-9_]*: what manifests write as `plugin: NAME`.")
    var name: String

    @Option(help: "The language: swift, c or rust.")
    var lang: Language

    @Option(help: ArgumentHelp("The directory to create (default: ./NAME).", valueName: "DIR"))
    var dir: String?

    @Flag(help: "Write into DIR even if it is not empty, overwriting files of the same names.")
    var force = false

    @Option(name: .customLong("vigil-source"),
            help: ArgumentHelp("The Vigil source tree (with Package.swift) to take the C header, the Rust bindings and the Swift SDK from.",
                               valueName: "DIR"))
    var vigilSource: String = NewPlugin.builtFrom

    /// The source tree this binary was built from: this file is
    /// `ROOT/Sources/vigil/NewPlugin.swift`.
    static let builtFrom = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    func validate() throws {
        guard Self.isPluginName(name) else {
            throw ValidationError("'\(name)' is not a plugin name: write [a-z][a-z0-9_]* (a lowercase letter, then lowercase letters, digits or _)")
        }
    }

    static func isPluginName(_ s: String) -> Bool {
        guard let first = s.unicodeScalars.first, ("a"..."z").contains(first) else { return false }
        return s.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
    }

    /// `disk_temp` → `DiskTemp`: the Swift types and targets.
    static func typeName(_ name: String) -> String {
        name.split(separator: "_").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
    }

    func run() async throws {
        do {
            try generate()
        } catch let failure as Failure {
            FileHandle.standardError.write(Data("vigil new-plugin: \(failure.message)\n".utf8))
            throw ExitCode.failure
        }
    }

    struct Failure: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    /// One file to write: its path in the plugin directory, its text, and a
    /// few words on what it is.
    struct File {
        var path: String
        var text: String
        var about: String
    }

    private func generate() throws {
        let fm = FileManager.default
        let cwd = fm.currentDirectoryPath
        let source = Self.absolute(vigilSource, from: cwd)
        guard fm.fileExists(atPath: source + "/Package.swift") else {
            throw Failure("\(source) is not a Vigil source tree (it has no Package.swift); name one with --vigil-source DIR")
        }
        let target = Self.absolute(dir ?? name, from: cwd)
        let vigil = Self.executablePath()
        let type = Self.typeName(name)
        let tokens = [
            "@NAME@": name, "@TYPE@": type, "@VIGIL@": vigil, "@VIGIL_SOURCE@": source,
            // SwiftPM names a package dependency by path by its directory's name.
            "@VIGIL_PACKAGE@": URL(fileURLWithPath: source).lastPathComponent.lowercased(),
        ]

        // Everything is read and checked before anything is written.
        let files: [File]
        let next: [(String, String)]
        switch lang {
        case .c:
            let header = try Self.read(source, "Sources/CVigilPlugin/include/vigil_plugin.h")
            files = [
                File(path: "\(name).c", text: Self.render(CTemplate.plugin, tokens), about: "the plugin"),
                File(path: "test_\(name).c", text: Self.render(CTemplate.test, tokens),
                     about: "a test program: loads \(name).so with a fake host"),
                File(path: "vigil_plugin.h", text: header, about: "the plugin ABI, copied from the Vigil sources"),
                File(path: "Makefile", text: Self.render(CTemplate.makefile, tokens), about: "make, make test, make check"),
                File(path: "README.md", text: Self.render(CTemplate.readme, tokens), about: "how to build, test, run"),
                File(path: ".gitignore", text: Self.render(CTemplate.gitignore, tokens), about: ""),
            ]
            next = [("make", "builds \(name).so"), ("make test", "runs test_\(name) on it"),
                    ("make check", "vigil plugins check ./\(name).so")]
        case .rust:
            let bindings = try Self.read(source, "Plugins/examples/rust/abi.rs")
            files = [
                File(path: "Cargo.toml", text: Self.render(RustTemplate.cargo, tokens), about: "a cdylib, no dependencies"),
                File(path: "src/lib.rs", text: Self.render(RustTemplate.lib, tokens), about: "the plugin, with its unit tests"),
                File(path: "src/abi.rs", text: bindings, about: "the bindings of vigil_plugin.h, copied from the Vigil sources"),
                File(path: "README.md", text: Self.render(RustTemplate.readme, tokens), about: "how to build, test, run"),
                File(path: ".gitignore", text: Self.render(RustTemplate.gitignore, tokens), about: ""),
            ]
            next = [("cargo build --release --offline", "target/release/lib\(name).so"),
                    ("cargo test --offline", "the unit tests"),
                    ("cp target/release/lib\(name).so \(name).so", "the host finds plugins by file name"),
                    ("\(vigil) plugins check ./\(name).so", "the ABI contract, in a real host")]
        case .swift:
            try Self.checkSwiftNames(type: type, package: tokens["@VIGIL_PACKAGE@"]!, source: source, target: target)
            files = [
                File(path: "Package.swift", text: Self.render(SwiftTemplate.package, tokens),
                     about: "the lib\(name).so product; VigilKit from \(source)"),
                File(path: "exports.map", text: Self.render(SwiftTemplate.exports, tokens),
                     about: "exports vigil_plugin_entry only"),
                File(path: "Sources/\(type)Plugin/\(type)Monitor.swift", text: Self.render(SwiftTemplate.monitor, tokens),
                     about: "the plugin"),
                File(path: "Tests/\(type)PluginTests/\(type)Tests.swift", text: Self.render(SwiftTemplate.tests, tokens),
                     about: "its tests, with VigilKitTesting"),
                File(path: "README.md", text: Self.render(SwiftTemplate.readme, tokens), about: "how to build, test, run"),
                File(path: ".gitignore", text: Self.render(SwiftTemplate.gitignore, tokens), about: ""),
            ]
            next = [("swift build", ".build/debug/lib\(name).so (the first build takes a while)"),
                    ("swift test", "the tests"),
                    ("\(vigil) plugins check .build/debug/lib\(name).so", "the ABI contract, in a real host")]
        }

        try Self.prepare(target, force: force)
        for file in files {
            let path = target + "/" + file.path
            let parent = (path as NSString).deletingLastPathComponent
            do {
                try fm.createDirectory(atPath: parent, withIntermediateDirectories: true)
                try file.text.write(toFile: path, atomically: true, encoding: .utf8)
            } catch {
                throw Failure("cannot write \(path): \(error.localizedDescription)")
            }
        }

        let language = ["swift": "Swift", "c": "C", "rust": "Rust"][lang.rawValue]!
        var out = "Created the \(language) monitor plugin '\(name)' in \(target):\n"
        let width = files.map(\.path.count).max() ?? 0
        for file in files where !file.about.isEmpty {
            out += "  " + Self.padded(file.path, width) + "  " + file.about + "\n"
        }
        out += "Next:\n  cd \(Self.shellQuoted(target))\n"
        // Comments line up, unless a command is long (a path to vigil).
        let commandWidth = next.map(\.0.count).filter { $0 <= 40 }.max() ?? 0
        for (command, why) in next {
            out += "  " + Self.padded(command, commandWidth) + "  # " + why + "\n"
        }
        print(out, terminator: "")
    }

    // MARK: helpers

    static func render(_ template: String, _ tokens: [String: String]) -> String {
        var text = template
        for (token, value) in tokens { text = text.replacingOccurrences(of: token, with: value) }
        return text
    }

    /// A file of the Vigil sources, as it is.
    static func read(_ source: String, _ relative: String) throws -> String {
        let path = source + "/" + relative
        guard let data = FileManager.default.contents(atPath: path) else {
            throw Failure("\(path) is missing: is \(source) a Vigil source tree? (name one with --vigil-source DIR)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Target names are unique across a SwiftPM package graph, and a package
    /// is known by its directory's name: refuses what SwiftPM would.
    static func checkSwiftNames(type: String, package: String, source: String, target: String) throws {
        let manifest = try read(source, "Package.swift")
        for taken in ["\(type)Plugin", "\(type)PluginTests"] where manifest.contains("\"\(taken)\"") {
            throw Failure("the Vigil package already has a target named \(taken), and target names must be unique across a Swift package graph: choose another NAME")
        }
        if URL(fileURLWithPath: target).lastPathComponent.lowercased() == package {
            throw Failure("\(target) has the same directory name as the Vigil sources (\(source)), which SwiftPM would take for the same package: choose another --dir")
        }
    }

    /// Creates `dir`, or checks that it may be written into.
    static func prepare(_ dir: String, force: Bool) throws {
        let fm = FileManager.default
        var isDirectory: ObjCBool = false
        if fm.fileExists(atPath: dir, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw Failure("\(dir) exists and is not a directory") }
            let entries = (try? fm.contentsOfDirectory(atPath: dir)) ?? []
            if !entries.isEmpty && !force {
                throw Failure("\(dir) is not empty (\(entries.count) entr\(entries.count == 1 ? "y" : "ies")); nothing was written. Choose another --dir, or pass --force to write into it, overwriting files of the same names")
            }
        } else {
            do {
                try fm.createDirectory(atPath: dir, withIntermediateDirectories: true)
            } catch {
                throw Failure("cannot create \(dir): \(error.localizedDescription)")
            }
        }
    }

    static func absolute(_ path: String, from cwd: String) -> String {
        let full = path.hasPrefix("/") ? path : cwd + "/" + path
        return URL(fileURLWithPath: full).standardizedFileURL.path
    }

    /// This vigil, for the generated Makefile and the commands printed.
    static func executablePath() -> String {
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return path }
        return absolute(CommandLine.arguments[0], from: FileManager.default.currentDirectoryPath)
    }

    /// `s`, with spaces up to `width` characters (never cut).
    static func padded(_ s: String, _ width: Int) -> String {
        s + String(repeating: " ", count: max(0, width - s.count))
    }

    static func shellQuoted(_ s: String) -> String {
        s.allSatisfy { $0.isLetter || $0.isNumber || "/._-+".contains($0) } ? s : "'" + s.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }
}
