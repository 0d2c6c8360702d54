/// Checks that a manifest's bytes are text a YAML reader can take whole:
/// UTF-8, no NUL and no control characters other than tab and line ends.
/// Each problem is reported at its line and column, with its byte offset, so
/// that nothing is ever cut short at a NUL or decoded into something else.
///
/// Lines and columns are counted as libyaml counts them (columns in
/// characters; CR LF, CR, LF, U+2028 and U+2029 end a line; a leading BOM
/// takes no column), so these locations agree with the parser's.
public enum ManifestText {
    public static func check(_ bytes: UnsafeBufferPointer<UInt8>, file: String) -> [Diagnostic] {
        var diagnostics: [Diagnostic] = []
        var problems = 0
        var position = TextPosition()
        var i = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        func report(_ message: String, at offset: Int) {
            problems += 1
            if problems <= ManifestLimits.maxTextProblems {
                diagnostics.append(Diagnostic(at: SourceLocation(file: file, line: position.line, column: position.column),
                                              "not a YAML text file: \(message) at byte offset \(offset)",
                                              hint: problems == 1 ? "a manifest is UTF-8 text; check how it was written or copied" : nil))
            }
        }
        while i < bytes.count {
            let (scalar, length) = decode(bytes, at: i)
            guard let scalar else {
                report("invalid UTF-8 (byte 0x\(hex(bytes[i])))", at: i)
                position.column += 1
                i += length
                continue
            }
            let v = scalar.value
            if v == 0 {
                report("a NUL byte", at: i)
            } else if (v < 0x20 && v != 0x09 && v != 0x0A && v != 0x0D) || (0x7F...0x9F).contains(v) {
                report("control characters are not allowed (U+\(hex(v)))", at: i)
            } else if v == 0xFFFE || v == 0xFFFF {
                report("U+\(hex(v)) is not a character", at: i)
            }
            let crlf = v == 0x0D && i + 1 < bytes.count && bytes[i + 1] == 0x0A
            position.advance(over: scalar)
            i += crlf ? 2 : length
        }
        if problems > ManifestLimits.maxTextProblems {
            let last = diagnostics[diagnostics.count - 1]
            diagnostics.append(Diagnostic(at: last.location, "not a YAML text file: \(problems - ManifestLimits.maxTextProblems) more bytes that are not text after this one"))
        }
        return diagnostics
    }

    /// The line and column of `offset` (a byte offset) in `bytes`.
    public static func location(ofByte offset: Int, in bytes: UnsafeBufferPointer<UInt8>, file: String) -> SourceLocation {
        var position = TextPosition()
        var i = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0
        while i < min(offset, bytes.count) {
            let (scalar, length) = decode(bytes, at: i)
            let crlf = scalar?.value == 0x0D && i + 1 < bytes.count && bytes[i + 1] == 0x0A
            if let scalar { position.advance(over: scalar) } else { position.column += 1 }
            i += crlf ? 2 : length
        }
        return SourceLocation(file: file, line: position.line, column: position.column)
    }

    /// The scalar at `i` and its length in bytes; nil and the length of the
    /// invalid sequence (at least 1) when the bytes there are not UTF-8.
    static func decode(_ b: UnsafeBufferPointer<UInt8>, at i: Int) -> (Unicode.Scalar?, Int) {
        let first = b[i]
        if first < 0x80 { return (Unicode.Scalar(first), 1) }
        let length: Int, low: UInt8, high: UInt8
        switch first {
        case 0xC2...0xDF: length = 2; low = 0x80; high = 0xBF
        case 0xE0: length = 3; low = 0xA0; high = 0xBF
        case 0xED: length = 3; low = 0x80; high = 0x9F  // no surrogates
        case 0xE1...0xEF: length = 3; low = 0x80; high = 0xBF
        case 0xF0: length = 4; low = 0x90; high = 0xBF
        case 0xF1...0xF3: length = 4; low = 0x80; high = 0xBF
        case 0xF4: length = 4; low = 0x80; high = 0x8F  // up to U+10FFFF
        default: return (nil, 1)
        }
        var value = UInt32(first) & (0xFF >> (length + 1))
        for k in 1..<length {
            guard i + k < b.count else { return (nil, k) }
            let c = b[i + k]
            guard k == 1 ? (low...high).contains(c) : (0x80...0xBF).contains(c) else { return (nil, k) }
            value = value << 6 | UInt32(c & 0x3F)
        }
        return (Unicode.Scalar(value), length)
    }

    /// `0A`, `7F`, `FFFE`: a byte or code point as messages show it (after `0x` or `U+`).
    static func hex(_ v: some BinaryInteger) -> String {
        let digits = String(v, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, (v > 0xFF ? 4 : 2) - digits.count)) + digits
    }
}

/// A line and column, advanced one character at a time as libyaml does.
struct TextPosition {
    var line = 1
    var column = 1

    mutating func advance(over scalar: Unicode.Scalar) {
        switch scalar.value {
        case 0x0A, 0x0D, 0x2028, 0x2029: line += 1; column = 1
        default: column += 1
        }
    }
}
