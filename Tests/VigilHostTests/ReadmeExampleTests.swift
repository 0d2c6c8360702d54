import Foundation
import Testing

/// The README's manifest example runs as written: taken from the README
/// itself (the first yaml block under "## A manifest"), run by the real
/// binary for a second as any user, in a directory of its own, with the
/// C plugins the README's build command puts beside vigil.
@Suite(.startsProcesses, .offThePool) struct ReadmeExampleTests {
    static func readme() throws -> String {
        try String(contentsOfFile: TestEnv.repoRoot + "/README.md", encoding: .utf8)
    }

    /// The first ```yaml block after `heading`.
    static func yamlBlock(after heading: String, in text: String) throws -> String {
        guard let section = text.range(of: "\n" + heading + "\n") else { throw TestFailure("README has no '\(heading)'") }
        let rest = text[section.upperBound...]
        guard let open = rest.range(of: "```yaml\n"), let close = rest[open.upperBound...].range(of: "\n```") else {
            throw TestFailure("no yaml block under '\(heading)'")
        }
        return String(rest[open.upperBound..<close.lowerBound]) + "\n"
    }

    /// scripts/test-fresh-run runs the README's run command on a fresh copy;
    /// here only that the build command builds the C plugins beside vigil.
    @Test func theBuildCommandBuildsTheCPluginsTheExampleNames() throws {
        let text = try Self.readme()
        #expect(text.contains("\n    scripts/build\n    .build/debug/vigil run manifests/default.yaml\n"))
        let script = try String(contentsOfFile: TestEnv.repoRoot + "/scripts/build", encoding: .utf8)
        #expect(script.hasSuffix("\nscripts/build-c-plugins .build/debug\n"))
        let manifest = try Self.yamlBlock(after: "## A manifest", in: text)
        #expect(manifest.contains("plugin: heartbeat"))
    }

    /// The README's test command is what CI runs, and it sees to its own
    /// needs first (scripts/test-deps), so a fresh clone's first run stops
    /// with the apt-get line it lacks rather than failing inside the suite.
    @Test func theTestCommandIsWhatCIRunsAndSeesToItsNeedsFirst() throws {
        let text = try Self.readme()
        #expect(text.contains("\n    scripts/test\n"), "README's test command")
        let ci = try String(contentsOfFile: TestEnv.repoRoot + "/.ci/run", encoding: .utf8)
        #expect(ci.contains("\nscripts/test 2>&1"), ".ci/run calls the README's test command")
        let script = try String(contentsOfFile: TestEnv.repoRoot + "/scripts/test", encoding: .utf8)
        let deps = try #require(script.range(of: "\nscripts/test-deps\n"))
        let swiftTest = try #require(script.range(of: "\nexec swift test"))
        #expect(deps.lowerBound < swiftTest.lowerBound)
        // With nothing to install, the check says nothing and passes (this
        // machine ran it to get here).
        let check = try TestEnv.run(TestEnv.repoRoot + "/scripts/test-deps", ["--no-install"], timeout: 60)
        #expect(check.status == 0 && check.stderr.isEmpty, "\(check.stderr)")
    }

    @Test func theManifestExampleRunsAsWrittenForASecond() throws {
        let manifest = try Self.yamlBlock(after: "## A manifest", in: try Self.readme())
        let dir = try TestEnv.tempDir("readme")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write(manifest, to: dir + "/vigil.yaml")
        // In its own directory, where its relative paths land; LOG_DIR and
        // VIGIL_STATE_DIR empty, so the manifest's own defaults are used.
        let quoted = { (s: String) in "'" + s.replacingOccurrences(of: "'", with: "'\\''") + "'" }
        let command = "cd \(quoted(dir)) && exec \(quoted(TestEnv.vigil)) run vigil.yaml --for 1s --control none --plugin-dir \(quoted(try TestEnv.cPlugins()))"
        let result = try TestEnv.run("/bin/sh", ["-c", command], environment: ["LOG_DIR": "", "VIGIL_STATE_DIR": ""], timeout: 60)
        #expect(result.status == 0, "\(result.stderr)")
        let errors = result.stderr.split(separator: "\n").filter { $0.contains(" error ") || $0.contains(" warning ") }
        #expect(errors.isEmpty, "\(result.stderr)")

        // The journal got cpu's and beat's events, and not beat/push (its match).
        let journal = try String(contentsOfFile: dir + "/.vigil/events.jsonl", encoding: .utf8)
        let events = journal.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
        let kinds = Set(events.map { "\($0["monitor"] as? String ?? "")/\($0["kind"] as? String ?? "")" })
        #expect(kinds.contains("cpu/sample"), "\(kinds)")
        #expect(kinds.contains("beat/beat"), "\(kinds)")
        #expect(!kinds.contains("beat/push"), "\(kinds)")
        // Every sink delivered what it was given: the live socket too.
        #expect(result.stderr.contains("sink live (socket): "), "\(result.stderr)")
        #expect(!result.stderr.contains(" lost:"), "\(result.stderr)")
        #expect(access(dir + "/.vigil/events.sock", F_OK) != 0, "the listen socket is removed at exit")
    }
}
