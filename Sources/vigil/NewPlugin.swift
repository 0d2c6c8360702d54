import ArgumentParser
import Foundation
import VigilCore

/// `vigil new-plugin NAME --lang swift|c|rust [--kind monitor|output]`:
/// copies one of the example plugins — the scaffolds, which the test suite
/// builds and tests as they stand — with NAME for the example's name. The C
/// header and the Rust bindings are copied as they are, from the same place,
/// so they never drift from the ABI (see `Scaffolds` for where that is).
struct NewPlugin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "new-plugin",
        abstract: "Create a monitor or output plugin to start from, in Swift, C or Rust, with its tests.",
        discussion: """
        Copies an example plugin with NAME in place of its name. As copied, it builds, passes its own tests and \
        `vigil plugins check`.

          --kind monitor (the default): a polled monitor that reads the first number of PROCFS/uptime (options \
        `procfs`, default /proc, and `recent`) and emits `sample` events; a missing file is unavailable, a bad \
        value invalid configuration at its option. From Plugins/examples/LANG/boottime.
          --kind output: an output that a sink of `type: plugin` runs, sending events over TCP (C: carbon's \
        plaintext lines, Rust: line protocol, Swift: JSON Lines), answering RETRY while the peer is away. From \
        Plugins/examples/c/graphite, rust/influx, swift/jsonl.

          c      NAME.c; test_NAME.c, a test program that loads NAME.so;
                 a Makefile (make, make test, make check); vigil_plugin.h.
          rust   a Cargo package (cdylib, no dependencies, Rust 1.63):
                 src/lib.rs with its unit tests; src/abi.rs, the bindings.
          swift  a SwiftPM package: Sources/<Name>Plugin/ and
                 Tests/<Name>PluginTests/, with VigilKit and VigilKitTesting.

        A Swift plugin depends on Vigil's SDK by path, so that it builds where it was made: on the source tree the \
        examples came from, or on the SDK installed with them (PREFIX/share/vigil/sdk); on DIR with --vigil-path DIR; \
        by URL and version only with --vigil-url, which needs a release published there (\(vigilPackageURL) from \
        \(vigilVersion), unless URL is given). The output says which it wrote.

        The examples, the header and the bindings are taken from the installation this vigil belongs to \
        (PREFIX/share/vigil/examples, PREFIX/include/vigil), else from the source tree it was built in, unless \
        --vigil-source names a source tree.
        """)

    @Argument(help: "The plugin's name, [a-z][a-z0-9_]*: what manifests write as `plugin: NAME`.")
    var name: String

    @Option(help: "The language: swift, c or rust.")
    var lang: Scaffold.Language

    @Option(help: "What the plugin is: monitor (emits events) or output (takes events and sends them on).")
    var kind: Scaffold.Kind = .monitor

    @Option(help: ArgumentHelp("The directory to create (default: ./NAME).", valueName: "DIR"))
    var dir: String?

    @Flag(help: "Write into DIR even if it is not empty, overwriting files of the same names.")
    var force = false

    @Option(name: .customLong("vigil-source"),
            help: ArgumentHelp("A Vigil source tree (with Package.swift), or an installation prefix (with share/vigil/examples), to take the examples, the C header and the Rust bindings from.",
                               valueName: "DIR"))
    var vigilSource: String?

    @Option(name: .customLong("vigil-path"),
            help: ArgumentHelp("Swift: depend by path on the Vigil checkout or installed SDK in DIR, instead of on the one the examples came from.",
                               valueName: "DIR"))
    var vigilPath: String?

    @Option(name: .customLong("vigil-url"), defaultAsFlag: NewPlugin.vigilPackageURL, parsing: .next,
            help: ArgumentHelp("Swift: depend on a Vigil release by URL and version (from \(vigilVersion)), for when one is published at URL.",
                               valueName: "URL"))
    var vigilURL: String? = nil

    /// The URL of the Swift scaffolds' own dependency line (kept with
    /// --vigil-url), and the package identity SwiftPM gives it (the URL's
    /// last component).
    static let vigilPackageURL = "https://github.com/vigil-monitor/vigil"
    static let vigilPackageIdentity = "vigil"

    func validate() throws {
        guard Self.isPluginName(name) else {
            throw ValidationError("'\(name)' is not a plugin name: write [a-z][a-z0-9_]* (a lowercase letter, then lowercase letters, digits or _)")
        }
        if name.utf8.count > 64 {
            throw ValidationError("'\(name.prefix(16))…' is \(name.utf8.count) characters long: a plugin's name is a file name and a word of its code; keep it to 64")
        }
        if let why = Self.unusable(name, in: lang) {
            throw ValidationError("'\(name)' cannot name a \(lang.rawValue) plugin: \(why); choose another NAME")
        }
        for (option, given) in [("--vigil-path", vigilPath != nil), ("--vigil-url", vigilURL != nil)] where given && lang != .swift {
            throw ValidationError("\(option) is for Swift plugins, which depend on Vigil's SDK; C and Rust plugins need only the header or the bindings")
        }
        if vigilPath != nil && vigilURL != nil {
            throw ValidationError("--vigil-path and --vigil-url name two places for Vigil's SDK: give one")
        }
        if let url = vigilURL, !VigilDependency.isURL(url) {
            throw ValidationError("--vigil-url \(url) is not a git URL (SCHEME://HOST/PATH or USER@HOST:PATH); to take the default, \(Self.vigilPackageURL), write --vigil-url last or before another option")
        }
    }

    /// Why `name` cannot name a plugin in `lang`, if it cannot: Swift uses
    /// it as a product's name, Rust as the library's, and C only ever in longer
    /// identifiers (`NAME_create`, `NAME_output`), which must not be the
    /// header's or a macro of a header it includes.
    static func unusable(_ name: String, in lang: Scaffold.Language) -> String? {
        switch lang {
        case .c:
            if name == "va" {
                return "the copy would name functions NAME_start and NAME_end, which are macros of <stdarg.h> (va_start, va_end), included by vigil_plugin.h"
            }
            if name == "vigil" || name.hasPrefix("vigil_") {
                return "the copy's identifiers (NAME_descriptor, NAME_options, …) would be in the prefix vigil_plugin.h keeps for itself (vigil_plugin_descriptor is one of its types)"
            }
            return nil
        case .rust:
            // The name is the library's and strings'; the code's own items
            // are not named after it. Cargo builds and tests a cdylib named
            // fn, self, std or core (a test shows it).
            return nil
        case .swift:
            if vigilProducts.contains(name) {
                return "Vigil's package has a product of that name, and product names must be unique across a Swift package graph"
            }
            return nil
        }
    }

    /// The products of Vigil's package that are not plugins (those are
    /// refused by their target names; see `vigilTargets`).
    static let vigilProducts: Set<String> = ["vigil", "vigilkit", "vigilkittesting", "linuxprobes", "vigil_ffi"]

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
        } catch let missing as Scaffolds.NotFound {
            FileHandle.standardError.write(Data("vigil new-plugin: \(missing.description)\n".utf8))
            throw ExitCode.failure
        }
    }

    struct Failure: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    private func generate() throws {
        let fm = FileManager.default
        let cwd = fm.currentDirectoryPath
        let vigil = Self.executablePath()
        let scaffolds = try vigilSource.map { try Scaffolds.sourceTree(Self.absolute($0, from: cwd)) }
            ?? Scaffolds.beside(executable: vigil)
        let scaffold = Scaffold.of(lang, kind)
        let target = Self.absolute(dir ?? name, from: cwd)
        let type = Self.typeName(name)

        // Everything is read and checked before anything is written.
        var files = try scaffold.files(in: scaffolds, name: name, type: type)
        let next: [(String, String)]
        var dependency: String?
        switch lang {
        case .c:
            // The header as installed (the example holds a link to it).
            try Self.replace(&files, "vigil_plugin.h", with: try Self.read(scaffolds.header))
            // `make check` runs the vigil that generated the directory.
            try Self.edit(&files, "Makefile", line: "VIGIL ?= vigil", to: "VIGIL ?= \(Self.makeValue(Self.shellQuoted(vigil)))")
            next = [("make", "builds \(name).so"), ("make test", "runs test_\(name) on it"),
                    ("make check", "vigil plugins check ./\(name).so")]
        case .rust:
            try Self.replace(&files, "src/abi.rs", with: try Self.read(scaffolds.rustBindings))
            next = [("cargo build --release --offline", "target/release/lib\(name).so"),
                    ("cargo test --offline", "the unit tests"),
                    ("cp target/release/lib\(name).so \(name).so", "the host finds plugins by file name"),
                    ("\(Self.shellQuoted(vigil)) plugins check ./\(name).so", "the ABI contract, in a real host")]
        case .swift:
            let vigilSDK = try swiftDependency(scaffolds, cwd: cwd)
            try Self.checkSwiftNames(type: type, target: target, sdk: vigilSDK)
            try Self.checkSwiftTypes(files, example: try scaffold.files(in: scaffolds, name: scaffold.name, type: Self.typeName(scaffold.name)),
                                     name: name)
            try Self.edit(&files, "Package.swift", lineContaining: ".package(url: \"\(Self.vigilPackageURL)\"", to: vigilSDK.packageLine)
            if vigilSDK.identity != Self.vigilPackageIdentity, let i = files.firstIndex(where: { $0.path == "Package.swift" }) {
                files[i].text = files[i].text.replacingOccurrences(of: "package: \"\(Self.vigilPackageIdentity)\"",
                                                                   with: "package: \(Self.swiftLiteral(vigilSDK.identity))")
            }
            dependency = vigilSDK.summary
            next = [("swift build", ".build/debug/lib\(name).so (the first build takes a while)"),
                    ("swift test", "the tests"),
                    ("\(Self.shellQuoted(vigil)) plugins check .build/debug/lib\(name).so", "the ABI contract, in a real host")]
        }

        // With --force, what was there and the copy does not overwrite stays:
        // said, since an earlier copy's sources may still be built with it.
        let kept = Self.sourceFiles(under: target).filter { path in !files.contains { $0.path == path } }
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
        var out = "Created the \(language) \(kind.rawValue) plugin '\(name)' in \(target), from the \(scaffold.directory) example of \(scaffolds.origin):\n"
        for file in files where !file.path.hasPrefix(".") {
            out += "  " + file.path + "\n"
        }
        if !kept.isEmpty {
            out += "Kept as they were (--force removes nothing: remove what an earlier copy left, which may still be built with this one):\n"
            for path in kept.prefix(10) { out += "  " + path + "\n" }
            if kept.count > 10 { out += "  … and \(kept.count - 10) more\n" }
        }
        if let dependency { out += dependency + "\n" }
        out += "Next:\n  cd \(Self.shellQuoted(target))\n"
        // Comments line up, unless a command is long (a path to vigil).
        let commandWidth = next.map(\.0.count).filter { $0 <= 40 }.max() ?? 0
        for (command, why) in next {
            out += "  " + Self.padded(command, commandWidth) + "  # " + why + "\n"
        }
        print(out, terminator: "")
    }

    // MARK: helpers

    /// A file's text, as it is.
    static func read(_ path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw Failure("\(path) is missing") }
        return String(decoding: data, as: UTF8.self)
    }

    /// The copy's file at `path` gets `text` (the scaffold must have it).
    static func replace(_ files: inout [Scaffold.File], _ path: String, with text: String) throws {
        guard let i = files.firstIndex(where: { $0.path == path }) else { throw Failure("the scaffold has no \(path)") }
        files[i].text = text
    }

    /// In the copy's file at `path`, the line that is `line` becomes `replacement`.
    static func edit(_ files: inout [Scaffold.File], _ path: String, line: String, to replacement: String) throws {
        try edit(&files, path, matching: { $0 == line }, what: "a line '\(line)'", to: replacement)
    }

    /// In the copy's file at `path`, the line containing `fragment` becomes `replacement`.
    static func edit(_ files: inout [Scaffold.File], _ path: String, lineContaining fragment: String, to replacement: String) throws {
        try edit(&files, path, matching: { $0.contains(fragment) }, what: "a line with \(fragment)", to: replacement)
    }

    private static func edit(_ files: inout [Scaffold.File], _ path: String, matching: (Substring) -> Bool, what: String,
                             to replacement: String) throws {
        guard let i = files.firstIndex(where: { $0.path == path }) else { throw Failure("the scaffold has no \(path)") }
        var lines = files[i].text.split(separator: "\n", omittingEmptySubsequences: false)
        guard let at = lines.firstIndex(where: matching) else { throw Failure("the scaffold's \(path) has no \(what)") }
        lines[at] = Substring(replacement)
        files[i].text = lines.joined(separator: "\n")
    }

    /// Vigil's own targets whose names a plugin's `<Type>Plugin` could take:
    /// target names are unique across a SwiftPM package graph. A test checks
    /// the list against Package.swift.
    static let vigilTargets: Set<String> = [
        "CPUPlugin", "MemoryPlugin", "LoadPlugin", "FilesPlugin", "PowerPlugin", "ThermalPlugin", "StoragePlugin",
        "DisplayPlugin", "WifiPlugin", "ProcessPlugin", "SensorsPlugin", "DevicesPlugin", "NetworkPlugin", "ClockPlugin",
        "RadioPlugin", "SystemPlugin", "NetstatPlugin", "SockstatPlugin", "KernelPlugin", "TimePlugin", "CgroupsPlugin",
        "HwmonPlugin", "NetdevPlugin", "ARPPlugin", "SoftnetPlugin", "UDPQueuesPlugin", "ConntrackPlugin", "DiskstatsPlugin",
        "VMStatPlugin", "PressurePlugin", "FFIPlugin", "NagiosPlugin", "MuninPlugin", "TextfilePlugin", "ScrapePlugin", "StatsdPlugin",
    ]

    /// The identities of the packages Vigil depends on, directly or not
    /// (its Package.resolved), which a plugin's package resolves with it: a
    /// package directory of the same name is taken for one of them. A test
    /// checks the list against Package.resolved.
    static let vigilDependencyIdentities: Set<String> = [
        "compress-nio", "swift-argument-parser", "swift-async-algorithms", "swift-atomics", "swift-collections", "swift-log",
        "swift-nio", "swift-protobuf", "swift-service-lifecycle", "swift-system", "yams",
    ]

    /// Vigil's SDK for a Swift plugin: --vigil-url's release, --vigil-path's
    /// directory, else the source tree or installed SDK the scaffolds came
    /// from. An installation without its SDK is refused here, with what to
    /// pass, rather than at the plugin's first build.
    private func swiftDependency(_ scaffolds: Scaffolds, cwd: String) throws -> VigilDependency {
        if let url = vigilURL {
            return .url(url, from: vigilVersion, reason: "--vigil-url")
        }
        if let path = vigilPath.map({ Self.absolute($0, from: cwd) }) {
            try Self.checkVigilCheckout(path)
            return .path(path, reason: "--vigil-path")
        }
        guard FileManager.default.fileExists(atPath: scaffolds.sdk + "/Package.swift") else {
            throw Failure("\(scaffolds.sdk) is missing (Vigil's SDK, which make install puts beside the examples), so a Swift plugin would have nothing to build against; nothing was written. Pass --vigil-path DIR (a Vigil checkout or SDK) or --vigil-url [URL] (a published release)")
        }
        return .path(scaffolds.sdk, reason: scaffolds.isSourceTree ? "the sources the example came from" : "installed with the example")
    }

    /// Refuses what SwiftPM would: a target name Vigil's package has, and a
    /// package directory named like the Vigil package it depends on or like
    /// a package Vigil depends on.
    static func checkSwiftNames(type: String, target: String, sdk: VigilDependency) throws {
        for taken in ["\(type)Plugin", "\(type)PluginTests"] where vigilTargets.contains(where: { $0.lowercased() == taken.lowercased() }) {
            throw Failure("the Vigil package already has a target named \(taken), and target names must be unique across a Swift package graph: choose another NAME")
        }
        let identity = sdk.identity
        let own = URL(fileURLWithPath: target).lastPathComponent.lowercased()
        if own == identity {
            throw Failure("\(target) has the same directory name as the Vigil package it depends on (\(identity)), which SwiftPM would take for the same package: choose another --dir")
        }
        if vigilDependencyIdentities.contains(own) {
            throw Failure("\(target) has the same directory name as a package Vigil depends on (\(own)), which SwiftPM would take for the same package: choose another --dir (or NAME)")
        }
    }

    /// Refuses a copy that would declare a type under a name the example's
    /// code already uses for another (`polled`: `final class PolledMonitor:
    /// PolledMonitor`, which VigilKit's protocol of that name was meant to
    /// be). A type of VigilKit the example never names may be shadowed:
    /// the copy's own declaration wins in its module.
    static func checkSwiftTypes(_ files: [Scaffold.File], example: [Scaffold.File], name: String) throws {
        let declaration = try NSRegularExpression(
            pattern: #"^\s*(?:(?:public|internal|fileprivate|private|final)\s+)*(?:class|struct|enum|protocol|actor)\s+([A-Za-z_][A-Za-z0-9_]*)"#,
            options: .anchorsMatchLines)
        func declared(_ file: Scaffold.File) -> [String] {
            let text = file.text as NSString
            return declaration.matches(in: file.text, range: NSRange(location: 0, length: text.length))
                .map { text.substring(with: $0.range(at: 1)) }
        }
        let swift = { (file: Scaffold.File) in file.path.hasSuffix(".swift") }
        let exampleTypes = Set(example.filter(swift).flatMap(declared))
        let exampleWords = Set(example.filter(swift).flatMap { file in
            file.text.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_") }).map(String.init)
        })
        for file in files where swift(file) {
            for type in declared(file) where !exampleTypes.contains(type) && exampleWords.contains(type) {
                throw Failure("'\(name)' would make \(file.path) declare \(type), a name the example's code already gives to something else, which the copy would shadow: choose another NAME")
            }
        }
    }

    /// Refuses a `--vigil-path` that is neither a Vigil checkout nor an
    /// installed SDK, which SwiftPM would only report at the first build, as
    /// a missing package or product.
    static func checkVigilCheckout(_ path: String) throws {
        let fm = FileManager.default
        let what = "name the directory you cloned Vigil into, or an installed SDK (PREFIX/share/vigil/sdk)"
        guard fm.fileExists(atPath: path + "/Package.swift") else {
            throw Failure("--vigil-path \(path) is not a Vigil checkout (it has no Package.swift); \(what)")
        }
        guard fm.fileExists(atPath: path + "/Sources/VigilKit") else {
            throw Failure("--vigil-path \(path) is a Swift package but not Vigil (it has no Sources/VigilKit); \(what)")
        }
    }

    /// `s` as a Swift string literal, for Package.swift.
    static func swiftLiteral(_ s: String) -> String {
        let escaped = s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n").replacingOccurrences(of: "\r", with: "\\r")
        return "\"" + escaped + "\""
    }

    /// `s` as the value of a make variable: `$` and `#` are make's.
    static func makeValue(_ s: String) -> String {
        s.replacingOccurrences(of: "$", with: "$$").replacingOccurrences(of: "#", with: "\\#")
    }

    /// The files under `dir`, relative, sorted, without hidden ones and
    /// build outputs (.build, target).
    static func sourceFiles(under dir: String) -> [String] {
        let fm = FileManager.default
        guard let walker = fm.enumerator(atPath: dir) else { return [] }
        var out: [String] = []
        while let relative = walker.nextObject() as? String {
            let last = (relative as NSString).lastPathComponent
            if last.hasPrefix(".") || last == "target" {
                walker.skipDescendants()
                continue
            }
            var isDirectory: ObjCBool = false
            if fm.fileExists(atPath: dir + "/" + relative, isDirectory: &isDirectory), !isDirectory.boolValue { out.append(relative) }
        }
        return out.sorted()
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

extension Scaffold.Language: ExpressibleByArgument {}
extension Scaffold.Kind: ExpressibleByArgument {}
