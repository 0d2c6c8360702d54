import Testing
import VigilJSON

/// The one JSON reader, as its two callers rely on it: numbers with their
/// text, the nesting limit, errors at the byte where the text goes wrong,
/// and unpaired surrogates refused or replaced.
@Suite struct JSONReaderTests {
    func read(_ text: String, maxDepth: Int = 512, replacing: Bool = false) throws(JSONReadError) -> JSONNode {
        try JSONReader.read(Array(text.utf8), maxDepth: maxDepth, replacingUnpairedSurrogates: replacing)
    }

    func failure(_ text: String, maxDepth: Int = 512) -> JSONReadError? {
        do {
            _ = try read(text, maxDepth: maxDepth)
            return nil
        } catch {
            return error
        }
    }

    func string(_ text: String, replacing: Bool) throws -> String? {
        if case .string(let s) = try read(text, replacing: replacing) { s } else { nil }
    }

    @Test("numbers keep their text, whether they are integral, and their nearest double", arguments: [
        // text, integral, double, int64
        ("0", true, 0, 0),
        ("-0", true, -0.0, 0),
        ("42", true, 42, 42),
        ("1.0", false, 1, nil),
        ("1.50", false, 1.5, nil),
        ("1e3", false, 1000, nil),
        ("-2E-1", false, -0.2, nil),
        ("9007199254740993", true, 9_007_199_254_740_992, 9_007_199_254_740_993),  // 2^53 + 1: no double holds it
        ("-9223372036854775808", true, -9.223372036854775808e18, Int64.min),
        ("9223372036854775808", true, 9.223372036854775808e18, nil),  // past Int64.max
    ] as [(String, Bool, Double, Int64?)])
    func numbers(_ text: String, _ integral: Bool, _ double: Double, _ int64: Int64?) throws {
        guard case .number(let n) = try read(" \(text) ") else {
            Issue.record("\(text) is not read as a number")
            return
        }
        #expect(n.text == text)
        #expect(n.isIntegral == integral)
        #expect(n.double.bitPattern == double.bitPattern)
        #expect(n.int64 == int64)
    }

    @Test func objectsKeepTheirKeysInOrder() throws {
        guard case .object(let entries) = try read(#"{"b":[true,null],"a":"x"}"#) else {
            Issue.record("not an object")
            return
        }
        #expect(entries.map(\.key) == ["b", "a"])
        guard case .array(let items) = entries[0].value, items.count == 2, case .bool(true) = items[0], case .null = items[1],
              case .string("x") = entries[1].value else {
            Issue.record("\(entries)")
            return
        }
    }

    @Test func limitsNesting() throws {
        _ = try read("[[[1]]]", maxDepth: 3)
        _ = try read(#"{"a":{"a":{"a":1}}}"#, maxDepth: 3)
        let arrays = failure("[[[[1]]]]", maxDepth: 3)
        #expect(arrays?.code == .tooDeep)
        #expect(arrays?.offset == 3)
        #expect(arrays?.expected == "arrays and objects nested at most 3 deep")
        let objects = failure(#"{"a":{"a":{"a":{}}}}"#, maxDepth: 3)
        #expect(objects?.code == .tooDeep)
        #expect(objects?.offset == 15)
        // Far deeper than the stack could take were each level read.
        let hostile = String(repeating: "[", count: 100_000)
        #expect(failure(hostile)?.offset == 512)
    }

    @Test("errors say where, what kind and what was expected", arguments: [
        // text, offset, code, expected, found
        ("", 0, .unexpectedEnd, "a value", "end of input"),
        ("[1,]", 3, .valueExpected, "a value", "']'"),
        ("[1 2]", 3, .arraySeparatorExpected, "',' or ']'", "'2'"),
        ("[1", 2, .unterminatedArray, "',' or ']'", "end of input"),
        (#"{"a":1"#, 6, .unterminatedObject, "',' or '}'", "end of input"),
        (#"{"a" 1}"#, 5, .colonExpected, "':'", "'1'"),
        ("{1:2}", 1, .keyExpected, "a string key", "'1'"),
        (#"{"a":1,"b":2,"a":3}"#, 13, .duplicateKey, "a key not used before in this object", #""a""#),
        ("01", 1, .badNumber, "'.', 'e' or the end of the number (no leading zeros)", "'1'"),
        ("-1e400", 0, .numberOutOfRange, "a number within the range of a double", "-1e400"),
        ("nul", 0, .badLiteral, "'null'", "'n'"),
        ("\"a\u{1}\"", 2, .controlCharacter, "a character (control characters must be escaped)", "control character U+0001"),
        (#""\q""#, 2, .badEscape, #"one of " \ / b f n r t u after '\'"#, "'q'"),
        (#""\u12""#, 5, .badUnicodeEscape, #"four hex digits after '\u'"#, "'\"'"),
        (#""abc"#, 4, .unterminatedString, "'\"' to end the string", "end of input"),
        ("1 2", 2, .trailingCharacters, "end of input", "'2'"),
    ] as [(String, Int, JSONReadError.Code, String, String)])
    func errors(_ text: String, _ offset: Int, _ code: JSONReadError.Code, _ expected: String, _ found: String) {
        let e = failure(text)
        #expect(e?.offset == offset, "\(text)")
        #expect(e?.code == code, "\(text)")
        #expect(e?.expected == expected, "\(text)")
        #expect(e?.found == found, "\(text)")
    }

    @Test("a key used twice is found among many keys too, where the keys are hashed")
    func duplicateKeyInALargeObject() throws {
        let keys = (0..<1000).map { "\"k\($0)\":\($0)" }
        guard case .object(let entries) = try read("{" + keys.joined(separator: ",") + "}") else {
            Issue.record("not an object")
            return
        }
        #expect(entries.count == 1000)
        #expect(entries.last?.key == "k999")
        let text = "{" + keys.joined(separator: ",") + #","k17":0}"#
        let e = failure(text)
        #expect(e?.code == .duplicateKey)
        #expect(e?.offset == text.utf8.count - 8)
        #expect(e?.found == #""k17""#)
    }

    @Test("unpaired surrogates: refused, or read as U+FFFD")
    func unpairedSurrogates() throws {
        #expect(try string(#""\ud83d\ude00""#, replacing: false) == "😀")
        #expect(try string(#""\ud83d\ude00""#, replacing: true) == "😀")
        let cases = [
            (#""\ud800\u0041""#, 7, "\u{FFFD}A"),
            (#""\udc00x""#, 1, "\u{FFFD}x"),
            (#""x\ud800""#, 8, "x\u{FFFD}"),
            (#""\ud800\ud83d\ude00""#, 7, "\u{FFFD}😀"),
        ]
        for (text, offset, replaced) in cases {
            let e = failure(text)
            #expect(e?.code == .unpairedSurrogate, "\(text)")
            #expect(e?.offset == offset, "\(text)")
            #expect(try string(text, replacing: true) == replaced, "\(text)")
        }
    }

    @Test func quotes() {
        var out = ""
        JSONNode.quote("a\"b\\c\n\r\t\u{1}\u{7F}é", to: &out)
        #expect(out == #""a\"b\\c\n\r\t\u0001"# + "\u{7F}é\"")
    }
}
