import Foundation

/// Where `vigil new-plugin` takes its scaffolds from: the example plugins
/// themselves (`Plugins/examples/{c,rust,swift}/NAME`), which the test suite
/// builds and tests as they stand, and the files they must share with the
/// host: the C header and the Rust bindings.
///
/// Found, in this order: a source tree named with `--vigil-source`; the
/// installed tree this vigil belongs to (`PREFIX/bin/vigil`, with
/// `PREFIX/share/vigil/examples` and `PREFIX/include/vigil/vigil_plugin.h`,
/// as `make install` lays them out); the source tree this vigil was built in
/// (`ROOT/.build/…/vigil`). Never a path compiled into the binary.
///
/// A Swift plugin depends on Vigil's SDK from the same place, by path: the
/// source tree itself, or the SDK installed beside the examples
/// (`PREFIX/share/vigil/sdk`).
struct Scaffolds {
    /// The directory holding `c/`, `rust/` and `swift/`.
    let examples: String
    /// `vigil_plugin.h`, copied into C plugins.
    let header: String
    /// Where they were found, for messages.
    let origin: String
    /// The package a Swift plugin depends on by path: the source tree, or
    /// the installed SDK (which an installation may lack; new-plugin says so).
    let sdk: String
    /// Whether they are a source tree's, not an installation's.
    let isSourceTree: Bool

    /// The Rust bindings, shared by the Rust examples.
    var rustBindings: String { examples + "/rust/abi.rs" }

    struct NotFound: Error, CustomStringConvertible {
        let description: String
    }

    /// The scaffolds of a Vigil source tree (a checkout with Package.swift),
    /// or of an installation prefix (with share/vigil/examples).
    static func sourceTree(_ root: String) throws -> Scaffolds {
        let fm = FileManager.default
        if !fm.fileExists(atPath: root + "/Package.swift"), fm.fileExists(atPath: root + "/share/vigil/examples") {
            return try installation(root)
        }
        guard fm.fileExists(atPath: root + "/Package.swift") else {
            throw NotFound(description: "\(root) is not a Vigil source tree (it has no Package.swift) nor an installation prefix (it has no share/vigil/examples); name one with --vigil-source DIR")
        }
        let found = Scaffolds(examples: root + "/Plugins/examples", header: root + "/Sources/CVigilPlugin/include/vigil_plugin.h",
                              origin: "the Vigil sources in \(root)", sdk: root, isSourceTree: true)
        try found.checkComplete()
        return found
    }

    /// The examples and header `make install` put under `prefix`.
    static func installation(_ prefix: String) throws -> Scaffolds {
        let installed = Scaffolds(examples: prefix + "/share/vigil/examples", header: prefix + "/include/vigil/vigil_plugin.h",
                                  origin: "the installation in \(prefix)", sdk: prefix + "/share/vigil/sdk", isSourceTree: false)
        try installed.checkComplete()
        return installed
    }

    /// The installed tree or the source tree of the executable at `executable`.
    static func beside(executable: String) throws -> Scaffolds {
        let fm = FileManager.default
        let bin = URL(fileURLWithPath: executable).resolvingSymlinksInPath().deletingLastPathComponent()
        let prefix = bin.deletingLastPathComponent().path
        if fm.fileExists(atPath: prefix + "/share/vigil/examples") { return try installation(prefix) }
        // A build in a source tree: ROOT/.build/debug/vigil, or
        // ROOT/.build/x86_64-unknown-linux-gnu/release/vigil, or a
        // --scratch-path below ROOT.
        var dir = bin
        for _ in 0..<6 {
            dir = dir.deletingLastPathComponent()
            if fm.fileExists(atPath: dir.path + "/Package.swift"), fm.fileExists(atPath: dir.path + "/Plugins/examples") {
                return try sourceTree(dir.path)
            }
            if dir.path == "/" { break }
        }
        throw NotFound(description: """
            cannot find the plugin scaffolds: this vigil (\(executable)) is neither installed with them \
            (\(prefix)/share/vigil/examples is missing) nor built in a Vigil source tree; name a source tree or an \
            installation prefix with --vigil-source DIR
            """)
    }

    private func checkComplete() throws {
        let fm = FileManager.default
        for (path, what) in [(examples, "the example plugins"), (header, "the plugin header")] where !fm.fileExists(atPath: path) {
            throw NotFound(description: "\(path) is missing (\(what), in \(origin))")
        }
    }
}

/// One scaffold: an example plugin's directory, copied with its name replaced.
struct Scaffold {
    enum Language: String, CaseIterable { case c, rust, swift }
    enum Kind: String, CaseIterable { case monitor, output }

    let language: Language
    let kind: Kind
    /// The example's plugin name, which the copy replaces with the new one.
    let name: String

    /// The example each language and kind starts from.
    static func of(_ language: Language, _ kind: Kind) -> Scaffold {
        switch (language, kind) {
        case (.c, .monitor), (.rust, .monitor), (.swift, .monitor): Scaffold(language: language, kind: kind, name: "boottime")
        case (.c, .output): Scaffold(language: .c, kind: .output, name: "graphite")
        case (.rust, .output): Scaffold(language: .rust, kind: .output, name: "influx")
        case (.swift, .output): Scaffold(language: .swift, kind: .output, name: "jsonl")
        }
    }

    /// `Plugins/examples/LANG/NAME`, relative to the examples directory.
    var directory: String { "\(language.rawValue)/\(name)" }

    /// Swift names targets and types after the plugin (`BoottimePlugin`);
    /// C and Rust name nothing in UpperCamelCase after it, and their prose
    /// may use the capitalised word for something else (carbon's Graphite).
    var replacesTypeName: Bool { language == .swift }

    /// A file of the copy: its path in the new plugin's directory and its text.
    struct File {
        var path: String
        var text: String
    }

    /// Every file of the example, with `name` for the example's name (and
    /// `type` for its UpperCamelCase form in Swift). Links are followed: in
    /// the source tree the C header and the Rust bindings are links to the
    /// real ones. What the example's `.gitignore` lists (build outputs) and
    /// `Package.resolved` are left out.
    func files(in scaffolds: Scaffolds, name newName: String, type newType: String) throws -> [File] {
        let fm = FileManager.default
        // Resolved: the enumerator does not descend into a link, and an
        // installation may keep an example's directory elsewhere.
        let root = URL(fileURLWithPath: scaffolds.examples + "/" + directory).resolvingSymlinksInPath().path
        guard fm.fileExists(atPath: root), let walker = fm.enumerator(atPath: root) else {
            throw Scaffolds.NotFound(description: "\(root) is missing (the \(language.rawValue) \(kind.rawValue) scaffold, in \(scaffolds.origin))")
        }
        let ignored = Self.ignoredPatterns(root + "/.gitignore")
        var out: [File] = []
        while let relative = walker.nextObject() as? String {
            let path = root + "/" + relative
            let last = (relative as NSString).lastPathComponent
            if Self.isIgnored(relative, patterns: ignored) || last == "Package.resolved" {
                walker.skipDescendants()
                continue
            }
            var isDirectory: ObjCBool = false
            guard fm.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            guard let data = fm.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
                throw Scaffolds.NotFound(description: "cannot read \(path) as UTF-8 text")
            }
            out.append(File(path: rename(relative, to: newName, type: newType), text: rename(text, to: newName, type: newType)))
        }
        guard !out.isEmpty else {
            throw Scaffolds.NotFound(description: "\(root) holds no files (the \(language.rawValue) \(kind.rawValue) scaffold, in \(scaffolds.origin))")
        }
        return out.sorted { $0.path < $1.path }
    }

    /// `text` with the example's name replaced where it is a word of its own:
    /// not inside a longer word (`boottime_create` and `libboottime.so` are
    /// replaced, `boottimes` is not); its UpperCamelCase form likewise, but
    /// may be followed by another capitalised word (`BoottimePlugin`).
    func rename(_ text: String, to newName: String, type newType: String) -> String {
        var result = Self.replaceWord(name, with: newName, in: text, followedByUpper: false)
        if replacesTypeName {
            result = Self.replaceWord(NewPlugin.typeName(name), with: newType, in: result, followedByUpper: true)
        }
        return result
    }

    static func replaceWord(_ word: String, with replacement: String, in text: String, followedByUpper: Bool) -> String {
        let chars = Array(text.utf8), needle = Array(word.utf8)
        guard !needle.isEmpty, chars.count >= needle.count else { return text }
        func isAlnum(_ c: UInt8) -> Bool { (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) }
        func isUpper(_ c: UInt8) -> Bool { c >= 0x41 && c <= 0x5A }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count)
        var i = 0
        while i < chars.count {
            if i + needle.count <= chars.count, chars[i..<(i + needle.count)].elementsEqual(needle) {
                // Before: not a letter or digit, or `lib` (a library's file name).
                let before = i == 0 || !isAlnum(chars[i - 1])
                    || (i >= 3 && chars[(i - 3)..<i].elementsEqual(Array("lib".utf8)) && (i == 3 || !isAlnum(chars[i - 4])))
                let end = i + needle.count
                let after = end == chars.count || !isAlnum(chars[end]) || (followedByUpper && isUpper(chars[end]))
                if before && after {
                    out.append(contentsOf: Array(replacement.utf8))
                    i = end
                    continue
                }
            }
            out.append(chars[i])
            i += 1
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The simple patterns of a `.gitignore`: `/NAME`, `NAME`, `NAME/`, with
    /// `*` and `?` (fnmatch), no negation.
    static func ignoredPatterns(_ path: String) -> [String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") && !$0.hasPrefix("!") }
    }

    static func isIgnored(_ relative: String, patterns: [String]) -> Bool {
        let last = (relative as NSString).lastPathComponent
        for raw in patterns {
            var pattern = raw.hasSuffix("/") ? String(raw.dropLast()) : raw
            let anchored = pattern.hasPrefix("/")
            if anchored { pattern.removeFirst() }
            let subject = anchored || pattern.contains("/") ? relative : last
            if fnmatch(pattern, subject, 0) == 0 { return true }
        }
        return false
    }
}
