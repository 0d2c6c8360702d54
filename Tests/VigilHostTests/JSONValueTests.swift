import Testing
import VigilKit

/// VigilKit's JSON parser, which plugins use to read options of type json.
@Suite struct JSONValueTests {
    func parse(_ text: String) throws -> JSONValue { try JSONValue.parse(text) }

    func error(_ text: String) -> JSONError? {
        do {
            _ = try JSONValue.parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test func parsesScalars() throws {
        #expect(try parse("null") == .null)
        #expect(try parse("true") == .bool(true))
        #expect(try parse("false") == .bool(false))
        #expect(try parse("0") == .number(0))
        #expect(try parse("-0") == .number(-0.0))
        #expect(try parse("42") == .number(42))
        #expect(try parse("-3.25") == .number(-3.25))
        #expect(try parse("1e3") == .number(1000))
        #expect(try parse("2.5E-1") == .number(0.25))
        #expect(try parse("1E+2") == .number(100))
        #expect(try parse("\"hi\"") == .string("hi"))
        #expect(try parse(" \t\r\n 7 \n") == .number(7))
    }

    @Test func parsesArraysAndObjectsKeepingKeyOrder() throws {
        let value = try parse(#"{"b": [1, {"x": null}], "a": true, "c": {}, "d": []}"#)
        #expect(value.object?.map(\.key) == ["b", "a", "c", "d"])
        #expect(value["b"] == .array([.number(1), .object([(key: "x", value: .null)])]))
        #expect(value["b"]?[1]?["x"] == .null)
        #expect(value["a"]?.bool == true)
        #expect(value["c"] == .object([]))
        #expect(value["d"] == .array([]))
        #expect(value["missing"] == nil)
        #expect(value["b"]?[2] == nil)
        #expect(value[0] == nil)
    }

    @Test func decodesEscapes() throws {
        #expect(try parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{C}\n\r\t"))
        #expect(try parse(#""\u00e9\u20AC""#) == .string("é€"))
        #expect(try parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try parse(#""\u0000""#) == .string("\u{0}"))
        #expect(try parse("\"héllo 😀\"") == .string("héllo 😀"))
    }

    @Test func accessors() throws {
        let value = try parse(#"[1, 2.5, "s", true, null, -9007199254740992, 1e19]"#)
        #expect(value.array?.count == 7)
        #expect(value[0]?.int64 == 1)
        #expect(value[1]?.int64 == nil)
        #expect(value[1]?.number == 2.5)
        #expect(value[2]?.string == "s")
        #expect(value[2]?.number == nil)
        #expect(value[3]?.bool == true)
        #expect(value[4]?.isNull == true)
        #expect(value[5]?.int64 == -9_007_199_254_740_992)
        #expect(value[6]?.int64 == nil)
        #expect(value.kindName == "a list")
        #expect(value[2]?.kindName == "a string")
        #expect(JSONValue.object([]).kindName == "an object")
    }

    @Test func writesCompactJSON() throws {
        let text = #"{"a":[1,-2.5,"x\"y\n",true,null],"b":{"c":1e+300}}"#
        let value = try parse(text)
        #expect(value.jsonText == text)
        #expect(try parse(value.jsonText) == value)
        #expect(JSONValue.string("\u{1}").jsonText == #""\u0001""#)
    }

    @Test func objectsCompareInOrder() {
        let ab = JSONValue.object([(key: "a", value: .null), (key: "b", value: .null)])
        let ba = JSONValue.object([(key: "b", value: .null), (key: "a", value: .null)])
        #expect(ab == ab)
        #expect(ab != ba)
        #expect(JSONValue.number(1) != .string("1"))
    }

    @Test(arguments: [
        // text, offset, expected, found
        ("", 0, "a value", "end of input"),
        ("  ", 2, "a value", "end of input"),
        ("[1,]", 3, "a value", "']'"),
        ("[1 2]", 3, "',' or ']'", "'2'"),
        ("[1", 2, "',' or ']'", "end of input"),
        (#"{"a":1,}"#, 7, "a string key", "'}'"),
        (#"{"a" 1}"#, 5, "':'", "'1'"),
        ("{a:1}", 1, "a string key", "'a'"),
        (#"{"a":1 "b":2}"#, 7, "',' or '}'", "'\"'"),
        (#"{"a":1,"a":2}"#, 7, "a key not used before in this object", "\"a\""),
        ("01", 1, "'.', 'e' or the end of the number (no leading zeros)", "'1'"),
        ("+1", 0, "a value", "'+'"),
        ("-", 1, "a digit", "end of input"),
        ("1.", 2, "a digit after '.'", "end of input"),
        (".5", 0, "a value", "'.'"),
        ("1e", 2, "a digit in the exponent", "end of input"),
        ("1e400", 0, "a number within the range of a double", "1e400"),
        ("NaN", 0, "a value", "'N'"),
        ("tru", 0, "'true'", "'t'"),
        ("nul", 0, "'null'", "'n'"),
        ("true false", 5, "end of input", "'f'"),
        ("'a'", 0, "a value", "'''"),
        ("\"abc", 4, "'\"' to end the string", "end of input"),
        ("\"a\tb\"", 2, "a character (control characters must be escaped)", "control character U+0009"),
        (#""\x""#, 2, #"one of " \ / b f n r t u after '\'"#, "'x'"),
        (#""\u12G4""#, 5, #"four hex digits after '\u'"#, "'G'"),
        (#""\udc00""#, 1, "a high surrogate before a low one", #"\uDC00"#),
        (#""\ud800x""#, 7, #"'\u' and a low surrogate after \uD800"#, "'x'"),
        (#""\ud800\u0041""#, 7, #"a low surrogate (\uDC00 to \uDFFF)"#, #"\u0041"#),
        ("[1] // c", 4, "end of input", "'/'"),
        ("é", 0, "a value", "'é'"),
    ] as [(String, Int, String, String)])
    func rejectsWithOffsetAndWhatWasExpected(_ text: String, _ offset: Int, _ expected: String, _ found: String) {
        let e = error(text)
        #expect(e == JSONError(offset: offset, expected: expected, found: found), "\(text)")
    }

    @Test func describesAnError() {
        #expect(error("[1,]")?.description == "at offset 3: expected a value, found ']'")
    }

    @Test func limitsNesting() throws {
        let deep = String(repeating: "[", count: JSONValue.maxDepth) + String(repeating: "]", count: JSONValue.maxDepth)
        #expect(try parse(deep).array?.count == 1)
        let tooDeep = "[" + deep + "]"
        let e = error(tooDeep)
        #expect(e?.offset == JSONValue.maxDepth)
        #expect(e?.expected == "arrays and objects nested at most 512 deep")
    }
}
