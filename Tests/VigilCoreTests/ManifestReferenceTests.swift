import Foundation
import Testing
@testable import VigilCore
@testable import VigilSinks

/// docs/manifest.md is the manifest's reference, and cannot drift from the
/// loader: every key the loader accepts in a section is a row of that
/// section's table, and every row's key, written in that section of a
/// manifest, is read without an "unknown key" error.
@Suite struct ManifestReferenceTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func page(_ path: String) throws -> String {
        try String(contentsOf: root.appending(path: path), encoding: .utf8)
    }

    /// One section of a manifest: its heading in docs/manifest.md, the
    /// list of keys the loader checks its mappings against, and a manifest
    /// with a given key in one of its mappings.
    struct Section: Sendable, CustomTestStringConvertible {
        var heading: String
        var accepted: [String]
        var probe: @Sendable (String) -> String
        var testDescription: String { heading }
    }

    static let sections: [Section] = [
        Section(heading: "## Top level", accepted: ManifestLoader.topKeys) { "\($0): ~\n" },
        Section(heading: "## `monitors:`", accepted: ManifestLoader.monitorKeys) { "monitors: { m: { \($0): ~ } }\n" },
        Section(heading: "### `restart_backoff:`", accepted: ManifestLoader.backoffKeys) {
            "monitors: { m: { plugin: heartbeat, restart_backoff: { \($0): ~ } } }\n"
        },
        Section(heading: "### `limits:`", accepted: ManifestLoader.resourceLimitKeys) {
            "monitors: { m: { plugin: heartbeat, limits: { \($0): ~ } } }\n"
        },
        Section(heading: "### `thresholds:`", accepted: ManifestLoader.thresholdKeys) {
            "monitors: { m: { plugin: heartbeat, thresholds: { usage: { \($0): ~ } } } }\n"
        },
        Section(heading: "### `warning:` and `critical:`", accepted: ManifestLoader.limitKeys) {
            "monitors: { m: { plugin: heartbeat, thresholds: { usage: { warning: { \($0): ~ } } } } }\n"
        },
        Section(heading: "## `sinks:`", accepted: ManifestLoader.sinkCommonKeys) { "sinks: { s: { type: null, \($0): ~ } }\n" },
        Section(heading: "### `buffer:`", accepted: ManifestLoader.bufferKeys) {
            "sinks: { s: { type: socket, connect: \"tcp://127.0.0.1:9\", buffer: { \($0): ~ } } }\n"
        },
        Section(heading: "## `rules:`", accepted: ManifestLoader.ruleKeys) { "rules: { r: { \($0): ~ } }\n" },
    ]

    /// The lines under `heading`, up to the next heading of any level.
    static func body(of heading: String, in text: String) throws -> [Substring] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        let start = try #require(lines.firstIndex { $0 == heading }, "docs/manifest.md has no '\(heading)'")
        let rest = lines[(start + 1)...]
        return Array(rest.prefix { !$0.hasPrefix("#") })
    }

    /// The keys of the table rows under `heading`: the first cell's code.
    static func documentedKeys(under heading: String, in text: String) throws -> [String] {
        try body(of: heading, in: text).compactMap { line in
            guard line.hasPrefix("| `") else { return nil }
            let key = line.dropFirst(3).prefix { $0 != "`" }
            return String(key)
        }
    }

    static func unknownKeyErrors(_ key: String, in manifest: String) -> [Diagnostic] {
        let (_, diagnostics) = ManifestLoader(file: "reference.yaml").load(manifest)
        return diagnostics.filter { $0.level == .error && $0.message.hasPrefix("unknown key '\(key)'") }
    }

    @Test(arguments: sections)
    func everyKeyTheLoaderAcceptsIsDocumented(_ section: Section) throws {
        let documented = try Self.documentedKeys(under: section.heading, in: Self.page("docs/manifest.md"))
        #expect(!documented.isEmpty, "no key table under '\(section.heading)'")
        for key in section.accepted {
            #expect(documented.contains(key), "'\(key)' is accepted under \(section.heading) but has no row there in docs/manifest.md")
        }
        #expect(Set(documented).count == documented.count, "a key has two rows under \(section.heading): \(documented)")
    }

    @Test(arguments: sections)
    func everyDocumentedKeyIsAccepted(_ section: Section) throws {
        // The probe puts a key where the loader checks it: a key it does
        // not know is reported there.
        #expect(Self.unknownKeyErrors("no_such_key", in: section.probe("no_such_key")).count == 1,
                "the probe of \(section.heading) does not reach the loader's check: \(section.probe("no_such_key"))")
        for key in try Self.documentedKeys(under: section.heading, in: Self.page("docs/manifest.md")) {
            let errors = Self.unknownKeyErrors(key, in: section.probe(key))
            #expect(errors.isEmpty, "docs/manifest.md documents '\(key)' under \(section.heading), which the loader refuses: \(errors)")
        }
    }

    /// Each sink type has its row, pointing to its own section of
    /// docs/sinks.md, where its keys are (SinkRegistryTests checks them).
    @Test func everySinkTypePointsToItsSectionOfTheSinksPage() throws {
        let rows = try Self.body(of: "### Sink types", in: Self.page("docs/manifest.md"))
        let sinks = try Self.page("docs/sinks.md")
        for type in SinkTypes.standard.names {
            let row = rows.first { $0.hasPrefix("| `\(type)` |") }
            #expect(row?.contains("(sinks.md#\(type))") == true, "docs/manifest.md's table of sink types has no row for '\(type)' pointing to sinks.md#\(type)")
            #expect(sinks.contains("\n## `\(type)`\n"), "docs/sinks.md has no section '## `\(type)`'")
        }
    }

    /// The links of docs/manifest.md to a section, of its own or of another
    /// page in docs/, land on a heading.
    @Test func theReferencesLinksLandOnHeadings() throws {
        let text = try Self.page("docs/manifest.md")
        var checked = 0
        for part in text.components(separatedBy: "](").dropFirst() {
            // `target` is what the link's parentheses hold: `sinks.md#log`, `#limits`.
            let target = part.prefix { $0 != ")" }
            guard let hash = target.firstIndex(of: "#"), !target.contains("/") else { continue }
            let name = target[..<hash], anchor = String(target[target.index(after: hash)...])
            let file = name.isEmpty ? "docs/manifest.md" : "docs/\(name)"
            let headings = try Self.page(file).split(separator: "\n").filter { $0.hasPrefix("#") }.map(Self.anchor(of:))
            #expect(headings.contains(anchor), "docs/manifest.md links to \(file)#\(anchor), which has no such heading")
            checked += 1
        }
        #expect(checked > 10)
    }

    /// A heading's anchor as GitHub makes it: lower case, spaces as '-',
    /// punctuation but '-' and '_' dropped.
    static func anchor(of heading: Substring) -> String {
        let title = heading.drop { $0 == "#" }.drop { $0 == " " }
        return String(title.lowercased().compactMap { c -> Character? in
            if c == " " { return "-" }
            return c.isLetter || c.isNumber || c == "-" || c == "_" ? c : nil
        })
    }
}
