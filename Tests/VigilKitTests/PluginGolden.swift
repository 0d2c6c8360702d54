import Foundation
import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// Golden runs of one plugin on one fixture tree: the plugin's .so is run
/// through PluginTestHost with the tree's roots as options, polled as often
/// as the test says (the test may change the tree between polls: a counter
/// that wraps, an interface that goes), and every event it emits, in order,
/// one per line (`poll N: kind[severity] field=value …`), is compared with
/// `Tests/Fixtures/golden/plugins/<plugin>/<case>.txt`.
///
/// After a deliberate change, regenerate and review the diff like code:
///
///     VIGIL_UPDATE_GOLDEN=1 swift test --filter <Suite>
struct PluginGolden {
    let plugin: String
    /// The golden file's name without `.txt` (the tree's, or the tree's and a variant's).
    let name: String

    var path: String { repoRoot + "/Tests/Fixtures/golden/plugins/\(plugin)/\(name).txt" }

    /// Runs the plugin with `options` (YAML flow, as a manifest writes
    /// them), polls it `polls` times (the first poll is its start),
    /// calling `between(n)` before poll n > 1, and compares the events with
    /// the golden file. The instance must end with no ABI violation.
    func check(options: String, polls: Int = 2, interval: Duration = .seconds(1),
               between: (Int) throws -> Void = { _ in }, sourceLocation: Testing.SourceLocation = #_sourceLocation) throws {
        let host = try PluginTestHost(path: productsDir + "/lib\(plugin).so")
        let instance = try host.instance(options: options, interval: interval)
        var lines: [String] = []
        var seen = 0
        func record(_ poll: Int) {
            let events = instance.events
            for event in events[seen...] { lines.append("poll \(poll): " + Self.line(event)) }
            seen = events.count
        }
        try instance.start()
        record(1)
        if polls > 1 {
            for n in 2...polls {
                try between(n)
                try instance.advance(by: interval)
                record(n)
            }
        }
        try instance.stop()
        #expect(instance.violations.isEmpty, "\(instance.violations)", sourceLocation: sourceLocation)
        let text = lines.joined(separator: "\n") + "\n"
        if getenv("VIGIL_UPDATE_GOLDEN") != nil {
            _ = Self.mkdirs(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
            guard let file = fopen(path, "w") else { throw PluginTestError("cannot write \(path)") }
            fputs(text, file)
            fclose(file)
            return
        }
        guard let golden = Self.read(path) else {
            Issue.record("no golden file \(path): run with VIGIL_UPDATE_GOLDEN=1 and review it", sourceLocation: sourceLocation)
            return
        }
        if golden != text {
            let want = golden.split(separator: "\n", omittingEmptySubsequences: false)
            let got = text.split(separator: "\n", omittingEmptySubsequences: false)
            let first = (0..<min(want.count, got.count)).first { want[$0] != got[$0] } ?? min(want.count, got.count)
            let expected = first < want.count ? String(want[first]) : "(end)"
            let actual = first < got.count ? String(got[first]) : "(end)"
            Issue.record("\(plugin) on \(name) differs from \(path) at line \(first + 1):\n  golden: \(expected)\n  now:    \(actual)",
                         sourceLocation: sourceLocation)
        }
    }

    /// `kind[severity] name=value …`, doubles with 6 significant digits so
    /// that a golden file does not hang on the last bit of a division.
    static func line(_ event: TestEvent) -> String {
        var out = "\(event.kind)[\(event.severity)]"
        for field in event.fields {
            out += " \(field.name)="
            switch field.value {
            case .int(let i): out += String(i)
            case .double(let d): out += d.isFinite ? String(format: "%.6g", d) : "\(d)"
            case .bool(let b): out += b ? "true" : "false"
            case .string(let s): out += "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                    .replacingOccurrences(of: "\n", with: "\\n") + "\""
            }
        }
        return out
    }

    static func read(_ path: String) -> String? {
        guard let file = fopen(path, "r") else { return nil }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&buffer, 1, buffer.count, file)
            if n <= 0 { break }
            bytes += buffer[..<n]
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func mkdirs(_ path: Substring) -> Bool {
        var built = ""
        for part in path.split(separator: "/") {
            built += "/" + part
            if mkdir(built, 0o755) != 0, errno != EEXIST { return false }
        }
        return true
    }
}

/// The golden runs of the plugins that predate them, as the pattern's first users.
@Suite struct PluginGoldenTests {
    @Test(arguments: ["server", "container"])
    func loadOnAMachine(_ machine: String) throws {
        try PluginGolden(plugin: "load", name: machine).check(options: "{ procfs: \(machines)/\(machine)/proc }")
    }
}
