/// Text from outside (a plugin's strings, a log line's message and metadata)
/// as it is shown on one line: every control character escaped, so that a
/// hostile string cannot break the line, forge another, or drive the
/// terminal. The one spelling of it, for the log handler and for every
/// message and report line that quotes a plugin:
///
/// - `\n`, `\r`, `\t`;
/// - the other C0 controls and DEL as `\xHH` (ESC is `\x1b`);
/// - the C1 controls (U+0080…U+009F) as `\u00HH`: some terminals take
///   U+009B as the start of an escape sequence.
///
/// A backslash is not escaped: the text is for reading, not for parsing back.
package func shownText(_ text: String) -> String {
    var utf8 = text
    return utf8.withUTF8 { bytes in
        // 0xC2 leads every C1 control (and other characters, which only cost the copy).
        guard bytes.contains(where: { $0 < 0x20 || $0 == 0x7F || $0 == 0xC2 }) else { return text }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count + 8)
        appendShownText(bytes, to: &out)
        return String(decoding: out, as: UTF8.self)
    }
}

/// `shownText` of `text`, appended to `out` as UTF-8.
package func appendShownText(_ text: String, to out: inout [UInt8]) {
    var text = text
    text.withUTF8 { appendShownText($0, to: &out) }
}

private let hexDigits: StaticString = "0123456789abcdef"

/// `shownText` of UTF-8 `bytes`, appended to `out`. Clean runs are copied whole.
package func appendShownText(_ bytes: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
    var runStart = 0
    var i = 0
    while i < bytes.count {
        let b = bytes[i]
        let isC1 = b == 0xC2 && i + 1 < bytes.count && bytes[i + 1] >= 0x80 && bytes[i + 1] <= 0x9F
        guard b < 0x20 || b == 0x7F || isC1 else {
            i += 1
            continue
        }
        if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i])) }
        out.append(UInt8(ascii: "\\"))
        switch b {
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0xC2:
            let c = bytes[i + 1]
            out.append(contentsOf: "u00".utf8)
            out.append(hexDigits.utf8Start[Int(c >> 4)])
            out.append(hexDigits.utf8Start[Int(c & 0xF)])
            i += 1
        default:
            out.append(UInt8(ascii: "x"))
            out.append(hexDigits.utf8Start[Int(b >> 4)])
            out.append(hexDigits.utf8Start[Int(b & 0xF)])
        }
        i += 1
        runStart = i
    }
    if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
}
