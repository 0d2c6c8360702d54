import Foundation
import Testing

/// `vigil run` with every catalogue plugin over the laptop machine
/// (Tests/Fixtures/machines/laptop) and a file sink, compared event by event
/// with Tests/Fixtures/golden/laptop.jsonl.
///
/// What the fixture does not decide is taken out before comparing: the time,
/// host and sequence number of every event (and so their order), the
/// checkout's path (written `$MACHINE`), and the few fields this machine
/// decides, listed in `volatile` (filesystem sizes come from statvfs on the
/// checkout's disk; the clock's date and time asleep are today's).
///
/// To regenerate the golden file after a deliberate change, run
///
///     VIGIL_UPDATE_GOLDEN=1 swift test --filter GoldenRunTests
///
/// and review the diff of laptop.jsonl like code.
@Suite(.startsProcesses, .offThePool) struct GoldenRunTests {
    static let machine = TestEnv.fixture("machines/laptop")
    static let golden = TestEnv.fixture("golden/laptop.jsonl")

    /// Fields set by the machine running the test rather than by the fixture, per plugin.
    static let volatile: [String: Set<String>] = [
        "vigil": ["pid", "version"],
        "storage": ["total", "free", "available", "used_ratio", "inodes_total", "inodes_free"],
        "files": ["mtime"],
        "clock": ["date", "suspended"],
    ]

    @Test func laptopMatchesTheGoldenFile() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let out = dir + "/events.jsonl"
        let result = try TestEnv.run(TestEnv.vigil, ["run", TestEnv.fixture("golden/laptop.yaml"), "--for", "2s"],
                                     environment: ["VIGIL_MACHINE": Self.machine, "VIGIL_OUT": out], timeout: 60)
        #expect(result.status == 0, "vigil run failed: \(result.stderr)")
        #expect(!result.stderr.contains(" error "), "\(result.stderr)")

        let actual = try Self.normalized(String(contentsOfFile: out, encoding: .utf8))
        if ProcessInfo.processInfo.environment["VIGIL_UPDATE_GOLDEN"] == "1" {
            try (actual.joined(separator: "\n") + "\n").write(toFile: Self.golden, atomically: true, encoding: .utf8)
            return
        }
        let expected = try String(contentsOfFile: Self.golden, encoding: .utf8).split(separator: "\n").map(String.init)
        let missing = expected.filter { !actual.contains($0) }
        let unexpected = actual.filter { !expected.contains($0) }
        #expect(missing.isEmpty && unexpected.isEmpty,
                "events differ from golden/laptop.jsonl\nmissing:\n\(missing.joined(separator: "\n"))\nunexpected:\n\(unexpected.joined(separator: "\n"))")
        #expect(actual == expected, "the same events, but not as many of each")
    }

    /// Each event as canonical JSON (sorted keys) without what the fixture does not decide, sorted.
    static func normalized(_ jsonLines: String) throws -> [String] {
        try jsonLines.split(separator: "\n").map { line -> String in
            guard var event = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  var fields = event["fields"] as? [String: Any] else {
                throw GoldenError(description: "not an event: \(line)")
            }
            for key in ["time", "host", "seq"] { event[key] = nil }
            let plugin = event["plugin"] as? String ?? ""
            for (name, value) in fields {
                if volatile[plugin]?.contains(name) == true {
                    fields[name] = "<volatile>"
                } else if let text = value as? String, text.contains(machine) {
                    fields[name] = text.replacingOccurrences(of: machine, with: "$MACHINE")
                }
            }
            event["fields"] = fields
            let data = try JSONSerialization.data(withJSONObject: event, options: [.sortedKeys, .withoutEscapingSlashes])
            return String(decoding: data, as: UTF8.self)
        }.sorted()
    }

    struct GoldenError: Error, CustomStringConvertible {
        var description: String
    }
}
