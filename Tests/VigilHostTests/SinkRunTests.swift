import Foundation
import Testing
import VigilCore
@testable import VigilHost

/// Regressions found by running the real `vigil` binary as an outsider would:
/// hostile plugins, dying peers, vanishing files, full disks, kill -9, two
/// hosts on one socket. Every count is exact: what was delivered plus what
/// the host counted as lost is what was emitted.
@Suite(.serialized) struct SinkRunTests {
    /// The per-sink part of `--summary`.
    struct SinkSummary: Decodable {
        var name: String
        var written: Int
        var lost: [String: Int]
        var lostTotal: Int { lost.values.reduce(0, +) }
    }

    struct Summary: Decodable {
        var events: Int
        var sinks: [SinkSummary]
        subscript(sink name: String) -> SinkSummary? { sinks.first { $0.name == name } }
    }

    static func summary(_ path: String) throws -> Summary {
        let decoder = JSONDecoder()
        decoder.keyDecodingStrategy = .convertFromSnakeCase
        return try decoder.decode(Summary.self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }

    static func lines(_ path: String) throws -> [String] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .dropLast().map(String.init)
    }

    /// Polls `condition` every 10 ms for up to `seconds`.
    @discardableResult
    static func waitUntil(_ seconds: Double, _ condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !condition() {
            if Date() >= deadline { return false }
            usleep(10_000)
        }
        return true
    }

    @Test func aPluginCannotForgeHostLinesNorCrashTheEncoderWithItsTime() throws {
        let dir = try TestEnv.tempDir()
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(try TestEnv.cPlugins())]
        monitors:
          forger: { plugin: log_forger, interval: 1h }
        sinks:
          console: { type: log, format: text, stream: stdout }
          journal: { type: file, path: \(dir)/events.jsonl }
        """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["run", manifest, "--for", "700ms"], timeout: 30)
        #expect(result.status == 0, "\(result.stderr)")
        let all = (result.stderr + result.stdout).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        // Every line starts with the host's own time stamp: none with the forged one.
        let year = String(Calendar(identifier: .gregorian).component(.year, from: Date()))
        #expect(all.allSatisfy { $0.hasPrefix(year + "-") }, "\(all.filter { !$0.hasPrefix(year + "-") })")
        #expect(!all.contains { $0.hasPrefix("2026-01-01T00:00:00.000Z") })
        // No raw control characters reach a terminal.
        #expect(!(result.stderr + result.stdout).unicodeScalars.contains { $0.value < 0x20 && $0 != "\n" || $0.value == 0x7F })
        // The plugin's line is attributed before its text, which is escaped.
        let warning = all.first { $0.contains("innocent") }
        #expect(warning?.contains(#" warning [vigil] monitor=forger plugin=log_forger: innocent\n2026-01-01"#) == true, "\(warning ?? "")")
        #expect(warning?.hasSuffix(#"FORGED log\r\x1b[31mred\x1b[0m\x07"#) == true)
        // 1 MiB of text is cut to 8 KiB, and the cut is shown.
        let big = all.first { $0.contains("AAAA") }
        #expect(big?.hasSuffix("A… [cut \((1 << 20) - 8192) bytes]") == true)
        #expect((big?.utf8.count ?? 0) < 8192 + 200)
        // The event's kind and field name, escaped in the text sink.
        #expect(result.stdout.contains(#"forger/sample\n2026-01-01T00:00:00.000Z critical [vigil] FORGED kind f\n"#))
        // The times INT64_MIN and INT64_MAX, written as valid RFC 3339.
        let events = try Self.lines(dir + "/events.jsonl").map { try JSONLineDecoder().decode($0).event }
        let times = events.filter { $0.monitor == "forger" }.map(\.time)
        #expect(times == [.min, .max])
        let text = try String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8)
        #expect(text.contains(#""time":"1677-09-21T00:12:43.145224192Z""#))
        #expect(text.contains(#""time":"2262-04-11T23:47:16.854775807Z""#))
    }
}
