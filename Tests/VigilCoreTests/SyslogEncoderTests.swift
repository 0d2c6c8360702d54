import Testing
@testable import VigilCore

/// RFC 5424 messages from events: the header's grammar, structured data
/// escaped, and a size limit kept without cutting inside an escape or a
/// UTF-8 sequence.
@Suite struct SyslogEncoderTests {
    let time: Int64 = 1_795_000_000_123_456_789  // 2026-11-18T11:06:40.123456789Z

    func encode(_ event: Event, facility: SyslogEncoder.Facility = .daemon, app: String = "vigil", host: String = "box",
                max: Int = 8192) -> (String, Bool) {
        let encoder = SyslogEncoder(facility: facility, appName: app, host: host, procID: 42, maxSize: max)
        var out: [UInt8] = []
        let cut = encoder.append(event, to: &out)
        return (String(decoding: out, as: UTF8.self), cut)
    }

    @Test func aMessageIsTheRFCsLine() {
        let event = Event(time: time, monitor: "cpu", plugin: "cpu", kind: "sample", severity: .warning, seq: 7,
                          fields: [Field("usage", .double(0.25)), Field("cores", .int(8)), Field("hot", .bool(true))])
        let (text, cut) = encode(event, facility: .local3)
        // local3 (19) × 8 + warning (4) = 156.
        // MSGID and the first element name the monitor (what a receiver filters on).
        #expect(text == #"<156>1 2026-11-18T11:06:40.123456Z box vigil 42 cpu [event@32473 monitor="cpu" kind="sample" seq="7"][vigil@32473 usage="0.25" cores="8" hot="true"] cpu/sample seq=7 usage=0.25 cores=8 hot=true"#)
        #expect(!cut)
    }

    @Test("severities map to the RFC's", arguments: [
        (Severity.debug, 7), (.info, 6), (.notice, 5), (.warning, 4), (.error, 3), (.critical, 2),
    ])
    func severities(severity: Severity, code: Int) {
        let (text, _) = encode(Event(time: 0, monitor: "m", plugin: "p", kind: "k", severity: severity), facility: .kern)
        #expect(text.hasPrefix("<\(code)>1 1970-01-01T00:00:00.000000Z "))
    }

    @Test func structuredDataIsEscapedAndNamesHeldToTheGrammar() {
        let event = Event(time: 0, monitor: "m", plugin: "p", kind: "k", fields: [
            Field("text", .string(#"a "b" ] c\d"#)), Field("we=ird name]\"", .string("x")),
            Field(String(repeating: "n", count: 40), .int(1)), Field("line", .string("one\ntwo")),
        ])
        let (text, _) = encode(event)
        #expect(text.contains(#"text="a \"b\" \] c\\d""#))
        #expect(text.contains(#" we_ird_name__="x""#))
        #expect(text.contains(" " + String(repeating: "n", count: 32) + "=\"1\""))
        // A line break stays inside the element (escaping is not asked for it) but not in MSG.
        #expect(text.hasSuffix("line=one two"))
    }

    @Test func headerPartsArePrintableAndBounded() {
        let (text, _) = encode(Event(time: 0, monitor: "a name with spaces é, and longer than 32", plugin: "p", kind: "k"),
                               app: String(repeating: "a", count: 60), host: "my host")
        let parts = text.split(separator: " ", maxSplits: 6).map(String.init)
        #expect(parts[2] == "my_host")
        #expect(parts[3] == String(repeating: "a", count: 48))
        #expect(parts[5] == "a_name_with_spaces___,_and_longe")  // the space and é's two bytes: one `_` each; 32 at most
        #expect(parts[5].utf8.allSatisfy { $0 >= 33 && $0 <= 126 })
        // The element names the monitor in full.
        #expect(text.contains(#"[event@32473 monitor="a name with spaces é, and longer than 32" kind="k" seq="0"]"#))
        let (empty, _) = encode(Event(time: 0, monitor: "", plugin: "p", kind: ""), host: "")
        #expect(empty.contains(#" - vigil 42 - [event@32473 monitor="" kind="" seq="0"] / seq=0"#), "\(empty)")
    }

    @Test func aLongMessageIsCutToTheLimitAndSaysSo() {
        let long = String(repeating: "é", count: 2000)
        let event = Event(time: time, monitor: "m", plugin: "p", kind: "k", fields: [Field("a", .int(1)), Field("text", .string(long))])
        let (text, cut) = encode(event, max: 600)
        #expect(cut)
        #expect(text.utf8.count <= 600)
        // The parameter that did not fit is left out whole; the element is closed.
        #expect(text.contains(#"[vigil@32473 a="1"]"#) && !text.contains("text=\""))
        // MSG was cut on a character boundary: the text decodes as it was written.
        #expect(!text.contains("\u{FFFD}") && text.hasSuffix("é"))
        let (short, notCut) = encode(Event(time: time, monitor: "m", plugin: "p", kind: "k", fields: [Field("a", .int(1))]), max: 600)
        #expect(!notCut && short.hasSuffix("m/k seq=0 a=1"))
    }

    @Test func theLimitNeverGoesBelowTheRFCsLeast() {
        let event = Event(time: time, monitor: "m", plugin: "p", kind: "k", fields: [Field("text", .string(String(repeating: "x", count: 1000)))])
        let (text, cut) = encode(event, max: 10)
        #expect(cut && text.utf8.count == SyslogEncoder.minimumSize)
    }

    @Test func facilitiesByName() {
        #expect(SyslogEncoder.Facility.named("local7")?.rawValue == 23)
        #expect(SyslogEncoder.Facility.named("DAEMON") == .daemon)
        #expect(SyslogEncoder.Facility.named("local8") == nil)
    }
}
