/// The os-release(5) format: `KEY=value` lines, a value shell-quoted or not.
///
/// - Blank lines and lines whose first non-blank character is `#` are skipped.
/// - A key is `[A-Za-z_][A-Za-z0-9_]*`; a line without `=` after a valid key
///   is garbage and skipped (reported in `rejected`, with its line number).
/// - A value is a run of segments, as the shell reads an assignment: `"…"`
///   (a backslash escapes `"`, `\`, `$` and `` ` `` only; before anything
///   else it is kept), `'…'` (literal), or bare text (a backslash escapes the
///   next character). Blanks outside quotes are kept inside the value and
///   trimmed at its start and end, as systemd's reader does; the file should not have
///   them.
/// - An unterminated quote (a truncated file) makes the line garbage.
/// - Variables (`$X`) are not expanded: the format forbids them.
/// - A key given twice keeps its last value.
struct OSRelease {
    private(set) var entries: [(key: String, value: String)] = []
    /// Lines that are neither blank, a comment nor an assignment (1-based).
    private(set) var rejected: [(line: Int, reason: String)] = []

    subscript(key: String) -> String? {
        entries.last { $0.key == key }?.value
    }

    init(parsing text: String) {
        var number = 0
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            var line = Substring(rawLine)
            if line.last == "\r" { line = line.dropLast() }
            while let c = line.first, c == " " || c == "\t" { line = line.dropFirst() }
            if line.isEmpty || line.first == "#" { continue }
            switch Self.assignment(line) {
            case .success(let entry): entries.append(entry)
            case .failure(let why): rejected.append((number, why.reason))
            }
        }
    }

    struct Rejection: Error { var reason: String }

    private static func assignment(_ line: Substring) -> Result<(key: String, value: String), Rejection> {
        guard let equals = line.firstIndex(of: "=") else { return .failure(Rejection(reason: "no '='")) }
        let key = line[..<equals]
        guard let first = key.unicodeScalars.first, first == "_" || (first.isASCII && first.properties.isAlphabetic),
              key.unicodeScalars.allSatisfy({ $0 == "_" || ($0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0))) })
        else { return .failure(Rejection(reason: "'\(key.prefix(32))' is not a variable name")) }

        var value = ""
        var trailingBlanks = 0  // bare blanks at the end of `value`, trimmed at the end
        var started = false  // bare blanks before the value are not part of it
        var rest = line[line.index(after: equals)...].makeIterator()
        while let c = rest.next() {
            if !started && (c == " " || c == "\t") { continue }
            started = true
            switch c {
            case "\"":
                trailingBlanks = 0
                var closed = false
                while let d = rest.next() {
                    if d == "\"" { closed = true; break }
                    if d == "\\" {
                        guard let e = rest.next() else { break }
                        if e == "\"" || e == "\\" || e == "$" || e == "`" { value.append(e) } else if e != "\n" {
                            value.append("\\")
                            value.append(e)
                        }
                    } else {
                        value.append(d)
                    }
                }
                guard closed else { return .failure(Rejection(reason: "unterminated double quote")) }
            case "'":
                trailingBlanks = 0
                var closed = false
                while let d = rest.next() {
                    if d == "'" { closed = true; break }
                    value.append(d)
                }
                guard closed else { return .failure(Rejection(reason: "unterminated single quote")) }
            case "\\":
                trailingBlanks = 0
                if let e = rest.next() { value.append(e) }
            case " ", "\t":
                value.append(c)
                trailingBlanks += 1
            default:
                trailingBlanks = 0
                value.append(c)
            }
        }
        value.removeLast(trailingBlanks)
        return .success((String(key), value))
    }
}
