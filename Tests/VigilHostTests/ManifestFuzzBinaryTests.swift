import Foundation
import Testing

/// `vigil validate` as an outsider runs it: hostile manifests are refused
/// fast, at FILE:LINE:COLUMN, and "valid" is never said wrongly. A sample of
/// mutated manifests goes through the real binary (the full fuzz runs
/// in-process: Tests/VigilCoreTests/ManifestFuzzTests.swift).
@Suite("vigil validate: hostile manifests", .startsProcesses, .offThePool)
struct ManifestFuzzBinaryTests {
    struct Located {
        var line: Int
        var column: Int
        var level: String
        var message: String
    }

    /// The `FILE:LINE:COLUMN: level: message` lines of validate's stderr.
    static func diagnostics(_ stderr: String, file: String) -> [Located] {
        stderr.split(separator: "\n").compactMap { line in
            guard line.hasPrefix(file + ":") else { return nil }
            let rest = line.dropFirst(file.count + 1)
            let parts = rest.split(separator: ":", maxSplits: 3)
            guard parts.count == 4, let l = Int(parts[0]), let c = Int(parts[1]) else { return nil }
            let level = parts[2].trimmingCharacters(in: .whitespaces)
            guard level == "error" || level == "warning" else { return nil }
            return Located(line: l, column: c, level: level, message: parts[3].trimmingCharacters(in: .whitespaces))
        }
    }

    /// Runs validate on `bytes`; checks it exits 0 or 1 within 10 s, says "valid"
    /// exactly when there is no error, and puts every diagnostic inside the file.
    @discardableResult
    static func validate(_ bytes: [UInt8], name: String, in dir: String, label: String,
                         sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> (status: Int32, found: [Located], stderr: String) {
        let path = dir + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        let started = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["validate", path], timeout: 10)
        let elapsed = Date().timeIntervalSince(started)
        #expect(result.status == 0 || result.status == 1, "\(label): exit \(result.status) after \(elapsed)s\n\(result.stderr)",
                sourceLocation: sourceLocation)
        let found = diagnostics(result.stderr, file: path)
        let errors = found.filter { $0.level == "error" }
        #expect((result.status == 0) == errors.isEmpty, "\(label): exit \(result.status) with \(errors.count) errors\n\(result.stderr)",
                sourceLocation: sourceLocation)
        #expect(result.stdout.contains(": valid:") == (result.status == 0), "\(label): \(result.stdout)", sourceLocation: sourceLocation)
        if result.status == 1 {
            #expect(!errors.isEmpty, "\(label): refused without a located error\n\(result.stderr)", sourceLocation: sourceLocation)
        }
        let lineCount = bytes.reduce(1) { $0 + ($1 == 0x0A ? 1 : 0) } + bytes.reduce(0) { $0 + ($1 == 0x0D ? 1 : 0) }
        for d in found {
            #expect(d.line >= 1 && d.line <= lineCount + 1 && d.column >= 1, "\(label): \(d)", sourceLocation: sourceLocation)
        }
        return (result.status, found, result.stderr)
    }

    @Test func theRefusalsOfIssue11AreLocatedErrors() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }

        // A NUL byte: was "valid, 0 sinks" (the text was cut at the NUL).
        let nul = Array("monitors:\n  cpu: {plugin: cpu}\n".utf8) + [0] + Array("sinks:\n  out: {type: log}\n".utf8)
        let r1 = try Self.validate(nul, name: "nul.yaml", in: dir, label: "NUL")
        #expect(r1.status == 1)
        #expect(r1.stderr.contains("nul.yaml:3:1: error: not a YAML text file: a NUL byte at byte offset 31"), "\(r1.stderr)")

        // reconnect_min: 60000d: was valid, then trapped the host at its first failed connect.
        let reconnect = "monitors:\n  cpu: {plugin: cpu}\nsinks:\n  out: {type: socket, connect: \"tcp://127.0.0.1:9\", reconnect_min: 60000d}\n"
        let r2 = try Self.validate(Array(reconnect.utf8), name: "reconnect.yaml", in: dir, label: "reconnect")
        #expect(r2.stderr.contains("reconnect.yaml:4:68: error: 'reconnect_min' is 60000d, longer than the limit of 365d"), "\(r2.stderr)")

        // A billion laughs: was past 12 GiB.
        var bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        var previous = "a"
        for name in ["b", "c", "d", "e", "f", "g", "h", "i"] {
            bomb += "\(name): &\(name) [" + Array(repeating: "*\(previous)", count: 9).joined(separator: ", ") + "]\n"
            previous = name
        }
        bomb += "monitors:\n  cpu: {plugin: cpu, options: {x: *i}}\nsinks: {out: {type: log}}\n"
        let started = Date()
        let r3 = try Self.validate(Array(bomb.utf8), name: "bomb.yaml", in: dir, label: "bomb")
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(r3.stderr.contains("bomb.yaml:5:8: error: alias '*d' would make the manifest more than 10000 nodes"), "\(r3.stderr)")

        // Tags.
        let tagged = "host: !!binary aGVsbG8=\nmonitors:\n  cpu: {plugin: cpu}\nsinks: {out: {type: log}}\n"
        let r4 = try Self.validate(Array(tagged.utf8), name: "tag.yaml", in: dir, label: "tag")
        #expect(r4.stderr.contains("tag.yaml:1:7: error: tag '!!binary': a manifest takes no YAML tags"), "\(r4.stderr)")
    }

    @Test func validateChecksSinksAgainstTheFileSystemAndThePlugins() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let long = "/tmp/" + String(repeating: "s", count: 110)
        let text = """
            monitors:
              loadavg:
                plugin: ffi
                options: { library: libc.so.6, symbol: getloadavg, args: [ {out: "double[3]"}, {int32: 3} ], returns: int32, fields: [count, load1, load5, load15] }
                thresholds:
                  load1: { warning: { above: 4 } }
                  load2: { warning: { above: 4 } }
              cpu: { plugin: cpu }
            rules:
              busy: { condition: loadavg.load15 > 3 }
            sinks:
              dir: { type: file, path: \(dir) }
              under-file: { type: file, path: /etc/passwd/events.jsonl }
              fine: { type: file, path: \(dir)/new/dir/events.jsonl }
              sock: { type: socket, listen: "unix:\(long)" }
              routes: { type: log, match: [cpu/sample, cpu/sampel, "*/threshold", busy/rule, vigil/started, vigil/nope, "*/availability", "c*/threshold"] }
            """
        let r = try Self.validate(Array(text.utf8), name: "checks.yaml", in: dir, label: "checks")
        #expect(r.status == 1)
        func has(_ line: Int, _ column: Int, _ level: String, _ message: String) {
            #expect(r.found.contains { $0.line == line && $0.column == column && $0.level == level && $0.message.hasPrefix(message) },
                    "\(line):\(column): \(level): \(message)\n\(r.stderr)")
        }
        has(7, 7, "error", "'result' events of monitor 'loadavg' (plugin ffi) have no field 'load2': its option 'fields' names count, load1, load5, load15")
        has(12, 28, "error", "file sink 'dir': '\(dir)' is a directory")
        has(13, 35, "error", "file sink 'under-file': '/etc/passwd/events.jsonl' cannot be created: '/etc/passwd' is a file, not a directory")
        has(15, 33, "error", "'listen' is not a socket address")
        has(16, 44, "warning", "pattern 'cpu/sampel' in 'match' of sink 'routes' can never match: monitor 'cpu' has no event kind 'sampel'")
        has(16, 97, "warning", "pattern 'vigil/nope' in 'match' of sink 'routes' can never match")
        has(16, 127, "warning", "pattern 'c*/threshold' in 'match' of sink 'routes' can never match")
        #expect(r.found.count == 7, "\(r.stderr)")
        #expect(r.stderr.contains("the unix socket path is 115 bytes; the kernel takes at most 107 (sun_path)"), "\(r.stderr)")
    }

    /// Byte-level and YAML-level mutations of the shipped manifests, a few of
    /// each kind, through the real binary.
    @Test func mutatedManifestsThroughTheRealBinary() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sources = ["manifests/default.yaml", "manifests/examples/ffi.yaml", "manifests/examples/journal.yaml",
                       "manifests/examples/isolation.yaml"]
        var state: UInt64 = 0xB1_4A_11
        func next() -> UInt64 {  // SplitMix64: fixed seed, cases reproduce
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let inserts: [[UInt8]] = [[0], [0xFF], [0xC0, 0x80], [0x01], [0x7F], Array("!!str ".utf8), Array("&x ".utf8), Array("*x".utf8),
                                  Array(String(repeating: "[", count: 5_000).utf8), Array("99999999999999999999d".utf8)]
        let started = Date()
        var cases = 0
        for source in sources {
            let original = Array(try Data(contentsOf: URL(fileURLWithPath: TestEnv.repoRoot + "/" + source)))
            for n in 0..<12 {
                var bytes = original
                switch next() % 4 {
                case 0: bytes.insert(contentsOf: inserts[Int(next() % UInt64(inserts.count))], at: Int(next() % UInt64(bytes.count + 1)))
                case 1: bytes[Int(next() % UInt64(bytes.count))] ^= UInt8(1) << UInt8(next() % 8)
                case 2: bytes.removeSubrange(Int(next() % UInt64(bytes.count))...)
                default:
                    let at = Int(next() % UInt64(bytes.count))
                    bytes.removeSubrange(at..<min(bytes.count, at + Int(next() % 40) + 1))
                }
                try Self.validate(bytes, name: "case\(cases).yaml", in: dir, label: "\(source) #\(n)")
                cases += 1
            }
        }
        #expect(cases == 48)
        #expect(Date().timeIntervalSince(started) < 60)
    }
}
