/// Where something is in a manifest: file, line and column (both from 1).
public struct SourceLocation: Sendable, Equatable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int
    public var column: Int

    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }

    public var description: String { "\(file):\(line):\(column)" }
}

/// One problem found in a manifest, printed compiler-style:
///
///     manifests/default.yaml:7:5: error: unknown key 'intervall' in monitor 'cpu'
///       hint: did you mean 'interval'?
public struct Diagnostic: Error, Sendable, Equatable, CustomStringConvertible {
    /// An error makes the manifest invalid; a warning is worth fixing; a note
    /// only says what was found (an `include:` pattern that matches nothing).
    public enum Level: String, Sendable { case error, warning, note }

    public var level: Level
    public var location: SourceLocation
    public var message: String
    public var hint: String?

    public init(_ level: Level = .error, at location: SourceLocation, _ message: String, hint: String? = nil) {
        self.level = level
        self.location = location
        self.message = message
        self.hint = hint
    }

    public var description: String {
        var s = "\(location): \(level.rawValue): \(message)"
        if let hint { s += "\n  hint: \(hint)" }
        return s
    }

    /// On one line, for a log that keeps one record a line (the journal; a
    /// newline there came out as a literal `\n`): the hint after a semicolon.
    public var line: String {
        "\(location): \(level.rawValue): \(message)\(hint.map { "; hint: \($0)" } ?? "")"
    }
}

/// All the problems of one manifest; thrown when any of them is an error.
public struct ManifestErrors: Error, Sendable, CustomStringConvertible {
    public var diagnostics: [Diagnostic]
    public init(_ diagnostics: [Diagnostic]) { self.diagnostics = diagnostics }
    public var description: String { diagnostics.map(\.description).joined(separator: "\n") }
}

/// "did you mean …?" for a misspelled name.
public enum Suggest {
    /// The candidate closest to `word` by edit distance, if it is close enough
    /// to be a plausible typo (at most a third of the word's length, at least 1;
    /// or a case-only difference).
    public static func closest(to word: String, in candidates: some Sequence<String>) -> String? {
        var best: (String, Int)?
        let limit = max(1, word.count / 3)
        for candidate in candidates {
            if candidate.lowercased() == word.lowercased() { return candidate }
            // The distance is at least the difference in length: skip without the
            // O(n·m) table, so a megabyte-long key costs nothing here.
            if abs(word.count - candidate.count) > limit { continue }
            let d = distance(word, candidate)
            if d <= limit, d < (best?.1 ?? .max) { best = (candidate, d) }
        }
        return best?.0
    }

    public static func hint(for word: String, in candidates: some Sequence<String>) -> String? {
        closest(to: word, in: candidates).map { "did you mean '\($0)'?" }
    }

    /// Damerau–Levenshtein (optimal string alignment) distance.
    static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var prev2 = [Int](repeating: 0, count: b.count + 1)
        var prev = Array(0...b.count)
        var cur = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            cur[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    cur[j] = min(cur[j], prev2[j - 2] + 1)
                }
            }
            (prev2, prev, cur) = (prev, cur, prev2)
        }
        return prev[b.count]
    }
}
