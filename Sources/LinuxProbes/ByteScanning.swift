// Internal, allocation-free helpers for scanning the UTF-8 bytes of small
// kernel text files. Everything works on ranges of an UnsafeBufferPointer that
// is only valid inside a `withUTF8` call.

extension UInt8 {
    @inline(__always) var isFieldSeparator: Bool {
        self == 0x20 || self == 0x09 || self == 0x0D  // space, tab, CR
    }
    @inline(__always) var isDigit: Bool { self &- 0x30 < 10 }
}

/// Iterates over the lines of a buffer, yielding 1-based line numbers.
struct LineIterator {
    /// Calls `body` with `text`'s bytes and a cursor at each line's first
    /// field, line after line (a `return` in `body` goes on to the next).
    static func forEachLine(of text: String, _ body: (UnsafeBufferPointer<UInt8>, inout FieldCursor) -> Void) {
        var text = text
        text.withUTF8 { bytes in
            var lines = LineIterator(bytes)
            while var (_, fields) = lines.next() { body(bytes, &fields) }
        }
    }

    let bytes: UnsafeBufferPointer<UInt8>
    private var position = 0
    private var number = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    mutating func next() -> (number: Int, fields: FieldCursor)? {
        guard position < bytes.count else { return nil }
        let start = position
        var end = start
        while end < bytes.count, bytes[end] != 0x0A { end += 1 }
        position = end + 1
        number += 1
        return (number, FieldCursor(bytes, start..<end))
    }
}

/// Splits one line into whitespace-separated fields.
struct FieldCursor {
    let bytes: UnsafeBufferPointer<UInt8>
    private(set) var position: Int
    let end: Int

    init(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
        self.bytes = bytes
        self.position = range.lowerBound
        self.end = range.upperBound
    }

    /// True when only separators remain.
    var isAtEnd: Bool {
        var i = position
        while i < end, bytes[i].isFieldSeparator { i += 1 }
        return i >= end
    }

    /// The next field, or nil at end of line.
    mutating func next() -> Range<Int>? {
        while position < end, bytes[position].isFieldSeparator { position += 1 }
        guard position < end else { return nil }
        let start = position
        while position < end, !bytes[position].isFieldSeparator { position += 1 }
        return start..<position
    }

    /// Counts the remaining fields without consuming them.
    func remainingCount() -> Int {
        var copy = self
        var n = 0
        while copy.next() != nil { n += 1 }
        return n
    }

    /// The text up to (not including) the first `byte`, consuming it; nil if absent.
    mutating func upTo(_ byte: UInt8) -> Range<Int>? {
        var i = position
        while i < end, bytes[i] != byte { i += 1 }
        guard i < end else { return nil }
        defer { position = i + 1 }
        return position..<i
    }
}

extension UnsafeBufferPointer<UInt8> {
    /// Whether the bytes in `range` equal the ASCII `literal`.
    @inline(__always)
    func matches(_ range: Range<Int>, _ literal: StaticString) -> Bool {
        guard range.count == literal.utf8CodeUnitCount else { return false }
        let lit = literal.utf8Start
        var j = 0
        for i in range {
            if self[i] != lit[j] { return false }
            j += 1
        }
        return true
    }

    /// Whether the bytes in `range` start with the ASCII `prefix`.
    @inline(__always)
    func hasPrefix(_ range: Range<Int>, _ prefix: StaticString) -> Bool {
        let n = prefix.utf8CodeUnitCount
        guard range.count >= n else { return false }
        return matches(range.lowerBound..<(range.lowerBound + n), prefix)
    }

    /// The bytes in `range` as a String (short strings are stored inline).
    func string(_ range: Range<Int>) -> String {
        String(decoding: UnsafeBufferPointer(rebasing: self[range]), as: UTF8.self)
    }

    /// A short quotable excerpt for error messages.
    func excerpt(_ range: Range<Int>) -> String {
        let limit = 32
        if range.count <= limit { return string(range) }
        return string(range.lowerBound..<(range.lowerBound + limit)) + "…"
    }

    /// Parses a non-negative decimal integer; nil on empty input, any
    /// non-digit byte or overflow.
    func parseUInt64(_ range: Range<Int>) -> UInt64? {
        guard !range.isEmpty else { return nil }
        var value: UInt64 = 0
        for i in range {
            let d = self[i] &- 0x30
            guard d < 10 else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (s, o2) = m.addingReportingOverflow(UInt64(d))
            guard !o1, !o2 else { return nil }
            value = s
        }
        return value
    }

    /// Parses a non-negative decimal integer that fits in `Int`.
    func parseInt(_ range: Range<Int>) -> Int? {
        guard let v = parseUInt64(range), v <= UInt64(Int.max) else { return nil }
        return Int(v)
    }

    /// Parses a plain decimal such as `1.44` or `12`. Short inputs (the kernel
    /// always writes these) take an exact integer fast path; anything else
    /// falls back to the standard library parser.
    func parseDecimal(_ range: Range<Int>) -> Double? {
        guard !range.isEmpty else { return nil }
        var mantissa: UInt64 = 0
        var digits = 0
        var fractionDigits = 0
        var seenDot = false
        for i in range {
            let b = self[i]
            if b == UInt8(ascii: ".") && !seenDot {
                seenDot = true
            } else if b.isDigit {
                mantissa = mantissa &* 10 &+ UInt64(b &- 0x30)
                digits += 1
                if seenDot { fractionDigits += 1 }
            } else {
                return fallbackDecimal(range)
            }
        }
        guard digits > 0 else { return nil }
        // Both operands are exact (< 2^53 and <= 10^15), so the single IEEE
        // division yields the correctly rounded value, same as Double("…").
        guard digits <= 15 else { return fallbackDecimal(range) }
        return Double(mantissa) / powersOfTen[fractionDigits]
    }

    private func fallbackDecimal(_ range: Range<Int>) -> Double? {
        for i in range {
            let b = self[i]
            guard b.isDigit || b == UInt8(ascii: ".") || b == UInt8(ascii: "e")
                || b == UInt8(ascii: "E") || b == UInt8(ascii: "+") || b == UInt8(ascii: "-")
            else { return nil }
        }
        return Double(string(range))
    }
}

private let powersOfTen: [Double] = [
    1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
]

extension String {
    /// Runs `body` over this string's contiguous UTF-8 bytes (copying only
    /// if the string is not already native UTF-8) and unwraps a typed result.
    @inline(__always)
    func withUTF8Bytes<T>(
        _ body: (UnsafeBufferPointer<UInt8>) -> Result<T, ProbeError>
    ) throws(ProbeError) -> T {
        var copy = self
        return try copy.withUTF8(body).get()
    }
}
