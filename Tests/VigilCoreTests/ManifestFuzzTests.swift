import Foundation
import Testing
@testable import VigilCore

/// Mutated copies of every manifest in `manifests/` and `manifests/examples/`,
/// through the loader in-process: no crash, no hang, every diagnostic at a
/// FILE:LINE:COLUMN inside the file, and bytes that are never text are
/// always an error. A fixed seed, so a failure names a case that reproduces.
/// (Tests/VigilHostTests/ManifestFuzzBinaryTests.swift sends a sample
/// through the real `vigil validate`.)
@Suite("Manifest fuzz")
struct ManifestFuzzTests {
    static let repoRoot: String = {
        var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) { return dir.path }
            dir.deleteLastPathComponent()
        }
        fatalError("Package.swift not found above \(#filePath)")
    }()

    static let corpus: [(name: String, bytes: [UInt8])] = {
        var files: [(String, [UInt8])] = []
        for dir in ["manifests", "manifests/examples"] {
            let path = repoRoot + "/" + dir
            let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
            for name in names.sorted() where name.hasSuffix(".yaml") {
                if let data = FileManager.default.contents(atPath: path + "/" + name) { files.append(("\(dir)/\(name)", Array(data))) }
            }
        }
        return files
    }()

    static let casesPerFile = 60

    @Test("the corpus is there: every manifest in manifests/ and manifests/examples/")
    func corpusIsThere() {
        #expect(Self.corpus.count >= 5, "\(Self.corpus.map(\.name))")
        for (name, bytes) in Self.corpus {
            let (m, d) = ManifestLoader(file: name).load(bytes: bytes)
            #expect(m != nil && !d.contains { $0.level == .error }, "\(name): \(ManifestErrors(d))")
        }
    }

    @Test("mutated manifests: no crash, no hang, every diagnostic inside the file")
    func mutations() {
        let clock = ContinuousClock()
        let start = clock.now
        var cases = 0
        var rng = SplitMix64(seed: 0x5EED_11)
        for (name, original) in Self.corpus {
            for n in 0..<Self.casesPerFile {
                var mutator = ManifestMutator(bytes: original, rng: rng)
                let applied = mutator.mutate(count: 1 + Int(mutator.rng.next() % 3))
                rng = mutator.rng
                let bytes = mutator.bytes
                let label = "\(name) case \(n) [\(applied.map(\.rawValue).joined(separator: ", "))]"
                let caseStart = clock.now
                let (m, d) = ManifestLoader(file: name).load(bytes: bytes)
                let elapsed = clock.now - caseStart
                cases += 1
                #expect(elapsed < .seconds(2), "\(label): took \(elapsed)")
                Self.checkLocations(d, in: bytes, file: name, label: label)
                if bytes.contains(where: ManifestMutator.neverText) {
                    #expect(m == nil && d.contains { $0.level == .error }, "\(label): bytes that are not text were accepted")
                }
            }
        }
        #expect(cases == Self.corpus.count * Self.casesPerFile)
        #expect(clock.now - start < .seconds(20), "the fuzz run took \(clock.now - start)")
    }

    @Test("each kind of mutation alone, on each manifest", arguments: ManifestMutator.Kind.allCases)
    func eachKind(kind: ManifestMutator.Kind) {
        var rng = SplitMix64(seed: UInt64(ManifestMutator.Kind.allCases.firstIndex(of: kind)!) &+ 7)
        for (name, original) in Self.corpus {
            for n in 0..<4 {
                var mutator = ManifestMutator(bytes: original, rng: rng)
                mutator.apply(kind)
                rng = mutator.rng
                let (m, d) = ManifestLoader(file: name).load(bytes: mutator.bytes)
                Self.checkLocations(d, in: mutator.bytes, file: name, label: "\(name) \(kind) #\(n)")
                switch kind {
                case .nul, .invalidUTF8, .controlCharacter, .aliasBomb, .deepNesting:
                    #expect(m == nil || d.contains { $0.level == .error }, "\(name) \(kind) #\(n): accepted\n\(ManifestErrors(d))")
                default: break
                }
            }
        }
    }

    /// The fragments of `manifests/examples/conf.d/` under the main file that
    /// includes them, in memory: each fragment mutated in turn, loaded with
    /// the main file and the others. No crash, no hang; every diagnostic in a
    /// file the manifest read, inside that file.
    @Test("mutated include fragments: no crash, no hang, every diagnostic inside the file it names")
    func mutatedFragments() throws {
        let dir = Self.repoRoot + "/manifests/examples"
        let main = dir + "/includes.yaml"
        var files: [String: [UInt8]] = [main: Array(try #require(FileManager.default.contents(atPath: main)))]
        let fragments = try FileManager.default.contentsOfDirectory(atPath: dir + "/conf.d").filter { $0.hasSuffix(".yaml") }.sorted()
        #expect(fragments.count >= 2)
        for name in fragments {
            files[dir + "/conf.d/" + name] = Array(try #require(FileManager.default.contents(atPath: dir + "/conf.d/" + name)))
        }
        let (clean, cleanDiagnostics) = ManifestLoader(file: main).load(from: InMemoryManifestSource(bytes: files))
        #expect(!cleanDiagnostics.contains { $0.level == .error }, "\(ManifestErrors(cleanDiagnostics))")
        #expect(clean?.files.count == fragments.count + 1)
        var rng = SplitMix64(seed: 0xF4A6)
        let clock = ContinuousClock()
        for name in fragments {
            let path = dir + "/conf.d/" + name
            for n in 0..<Self.casesPerFile {
                var mutator = ManifestMutator(bytes: files[path]!, rng: rng)
                let applied = mutator.mutate(count: 1 + Int(mutator.rng.next() % 3))
                rng = mutator.rng
                var mutated = files
                mutated[path] = mutator.bytes
                let label = "conf.d/\(name) case \(n) [\(applied.map(\.rawValue).joined(separator: ", "))]"
                let start = clock.now
                let (m, d) = ManifestLoader(file: main).load(from: InMemoryManifestSource(bytes: mutated))
                #expect(clock.now - start < .seconds(2), "\(label): took \(clock.now - start)")
                for file in Set(d.map(\.location.file)) {
                    #expect(mutated[file] != nil, "\(label): a diagnostic names \(file)")
                    Self.checkLocations(d.filter { $0.location.file == file }, in: mutated[file] ?? [], file: file, label: label)
                }
                if mutator.bytes.contains(where: ManifestMutator.neverText) {
                    #expect(d.contains { $0.level == .error && $0.location.file == path }, "\(label): bytes that are not text were accepted")
                }
                #expect(m?.files.contains(path) == true, "\(label)")
            }
        }
    }

    /// Line ≥ 1 and ≤ the line count + 1, column ≥ 1 and not past the end of its line + 1; the file's name.
    /// (Columns count characters; a line's byte count bounds them.)
    static func checkLocations(_ diagnostics: [Diagnostic], in bytes: [UInt8], file: String, label: String,
                               sourceLocation: Testing.SourceLocation = #_sourceLocation) {
        let lines = lineLengths(bytes)
        for d in diagnostics {
            let l = d.location
            #expect(l.file == file, "\(label): \(d)", sourceLocation: sourceLocation)
            #expect(l.line >= 1 && l.line <= lines.count + 1, "\(label): line \(l.line) of \(lines.count): \(d)", sourceLocation: sourceLocation)
            #expect(l.column >= 1, "\(label): \(d)", sourceLocation: sourceLocation)
            if l.line <= lines.count {
                #expect(l.column <= lines[l.line - 1] + 2, "\(label): column \(l.column) of a line of \(lines[l.line - 1]): \(d)",
                        sourceLocation: sourceLocation)
            }
        }
    }

    /// The length in bytes of each line (at least its length in characters,
    /// however bytes that are not UTF-8 are counted); lines end at LF, CR LF,
    /// CR, U+2028 and U+2029, as libyaml reads them.
    static func lineLengths(_ bytes: [UInt8]) -> [Int] {
        var lengths: [Int] = []
        var current = 0
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b == 0x0A || b == 0x0D {
                lengths.append(current)
                current = 0
                i += (b == 0x0D && i + 1 < bytes.count && bytes[i + 1] == 0x0A) ? 2 : 1
                continue
            }
            if b == 0xE2, i + 2 < bytes.count, bytes[i + 1] == 0x80, bytes[i + 2] == 0xA8 || bytes[i + 2] == 0xA9 {
                lengths.append(current)
                current = 0
                i += 3
                continue
            }
            current += 1
            i += 1
        }
        lengths.append(current)
        return lengths
    }
}

/// A small, fast, seedable generator (SplitMix64), so cases reproduce.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// Mutations of a manifest's bytes, of the kinds an outsider would try.
struct ManifestMutator {
    enum Kind: String, CaseIterable, Sendable {
        case flipByte, deleteBytes, duplicateLine, deleteLine, nul, invalidUTF8, controlCharacter, hugeNumber,
             deepNesting, aliasAnchor, aliasBomb, tag, truncate
    }

    var bytes: [UInt8]
    var rng: SplitMix64

    init(bytes: [UInt8], rng: SplitMix64) {
        self.bytes = bytes
        self.rng = rng
    }

    /// Bytes that are an error wherever they are (a comment included).
    static func neverText(_ b: UInt8) -> Bool {
        b == 0 || (b < 0x20 && b != 0x09 && b != 0x0A && b != 0x0D) || b == 0x7F || b == 0xC0 || b == 0xC1 || b >= 0xF5
    }

    mutating func mutate(count: Int) -> [Kind] {
        (0..<count).map { _ in
            let kind = Kind.allCases[Int(rng.next() % UInt64(Kind.allCases.count))]
            apply(kind)
            return kind
        }
    }

    private mutating func position() -> Int { bytes.isEmpty ? 0 : Int(rng.next() % UInt64(bytes.count + 1)) }

    /// The start of each line.
    private var lineStarts: [Int] {
        [0] + bytes.indices.filter { bytes[$0] == 0x0A && $0 + 1 < bytes.count }.map { $0 + 1 }
    }

    private mutating func randomLine() -> Range<Int> {
        let starts = lineStarts
        let start = starts[Int(rng.next() % UInt64(starts.count))]
        let end = bytes[start...].firstIndex(of: 0x0A).map { $0 + 1 } ?? bytes.count
        return start..<end
    }

    /// Where a value starts: just after a ": " or "- " outside a comment, or anywhere when there is none.
    private mutating func valuePosition() -> Int {
        var candidates: [Int] = []
        var inComment = false
        for i in bytes.indices {
            if bytes[i] == 0x0A { inComment = false } else if bytes[i] == 0x23 { inComment = true }
            if !inComment, i > 0, bytes[i - 1] == 0x3A || bytes[i - 1] == 0x2D, bytes[i] == 0x20 { candidates.append(i) }
        }
        guard !candidates.isEmpty else { return position() }
        return candidates[Int(rng.next() % UInt64(candidates.count))] + 1
    }

    mutating func apply(_ kind: Kind) {
        switch kind {
        case .flipByte:
            guard !bytes.isEmpty else { return }
            let i = Int(rng.next() % UInt64(bytes.count))
            bytes[i] ^= UInt8(1) << UInt8(rng.next() % 8)
        case .deleteBytes:
            let at = position()
            let n = min(Int(rng.next() % 16) + 1, bytes.count - at)
            bytes.removeSubrange(at..<at + n)
        case .duplicateLine:
            let line = randomLine()
            bytes.insert(contentsOf: Array(bytes[line]), at: line.upperBound)
        case .deleteLine:
            bytes.removeSubrange(randomLine())
        case .nul:
            bytes.insert(0, at: position())
        case .invalidUTF8:
            let sequences: [[UInt8]] = [[0xFF], [0xC0, 0x80], [0x80], [0xE2, 0x82], [0xED, 0xA0, 0x80], [0xF8, 0x88, 0x80, 0x80, 0x80]]
            bytes.insert(contentsOf: sequences[Int(rng.next() % UInt64(sequences.count))], at: position())
        case .controlCharacter:
            let controls: [UInt8] = [0x01, 0x07, 0x08, 0x0B, 0x0C, 0x1B, 0x7F]
            bytes.insert(controls[Int(rng.next() % UInt64(controls.count))], at: position())
        case .hugeNumber:
            let numbers = ["99999999999999999999999", "9223372036854775808", "-9223372036854775809", "1e400", "99999999999999999999d",
                           "106752d", "8EiB", "9999999PiB", "0x7FFFFFFFFFFFFFFFF", "0.0000000000000000000001s", ".inf", "18446744073709551616",
                           "99999999999999999999999%", "0.0000000001%"]
            let text = numbers[Int(rng.next() % UInt64(numbers.count))]
            let at = valuePosition()
            let end = bytes[at...].firstIndex { $0 == 0x0A || $0 == 0x2C || $0 == 0x7D || $0 == 0x5D || $0 == 0x20 } ?? bytes.count
            bytes.replaceSubrange(at..<end, with: Array(text.utf8))
        case .deepNesting:
            let depth = [70, 1_000, 20_000][Int(rng.next() % 3)]
            let open = rng.next() % 2 == 0 ? "[" : "{a: "
            let close = open == "[" ? "]" : "}"
            bytes.insert(contentsOf: Array((String(repeating: open, count: depth) + String(repeating: close, count: depth)).utf8), at: valuePosition())
        case .aliasAnchor:
            let name = "x\(rng.next() % 3)"
            let at = valuePosition()
            bytes.insert(contentsOf: Array("&\(name) ".utf8), at: at)
            bytes.insert(contentsOf: Array("*\(name)".utf8), at: valuePosition())
        case .aliasBomb:
            var text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
            var previous = "a"
            for name in ["b", "c", "d", "e", "f", "g", "h", "i"] {
                text += "\(name): &\(name) [" + Array(repeating: "*\(previous)", count: 9).joined(separator: ", ") + "]\n"
                previous = name
            }
            bytes.insert(contentsOf: Array(text.utf8), at: 0)
            bytes.insert(contentsOf: Array(" *i".utf8), at: max(0, valuePosition() - 1))
        case .tag:
            let tags = ["!!str ", "!custom ", "!!binary ", "!!map ", "! ", "!<tag:yaml.org,2002:int> ", "!!python/object:os.system "]
            bytes.insert(contentsOf: Array(tags[Int(rng.next() % UInt64(tags.count))].utf8), at: valuePosition())
        case .truncate:
            bytes.removeSubrange(position()...)
        }
    }
}
