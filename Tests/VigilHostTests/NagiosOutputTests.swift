import Testing
@testable import VigilForeign

/// The reader of check output, on the guidelines' examples and on what the
/// hosts that run checks got wrong (each case names the report it stands for).
@Suite struct NagiosOutputTests {
    typealias P = NagiosPerfdatum

    @Test func theFirstLineAndItsPerfdata() {
        let out = NagiosOutput.parse(Array("DISK OK - free space: / 3326 MB (56%); | /=2643MB;5948;5958;0;5968\n".utf8))
        #expect(out.text == "DISK OK - free space: / 3326 MB (56%);")
        #expect(out.longOutput == "")
        #expect(out.errors == [])
        #expect(out.perfdata == [P(label: "/", value: 2643, uom: "MB", warn: range("5948"), crit: range("5958"), min: 0, max: 5968)])
        #expect(out.perfdata[0].base.value == 2643 * 1_048_576 && out.perfdata[0].base.unit == "bytes")
    }

    /// The Nagios 3 multi-line form: perfdata on the first line, long output,
    /// and perfdata again after the long output's `|`, on every line after
    /// it (Telegraf #5591 dropped those).
    @Test func multiLineOutputWithPerfdataAfterTheLongOutput() {
        let text = """
            DISK OK - free space: / 3326 MB (56%); | /=2643MB;5948;5958;0;5968
            / 15272 MB (77%);
            /boot 68 MB (69%);
            /home 69357 MB (27%);
            /var/log 819 MB (84%); | /boot=68MB;88;93;0;98
            /home=69357MB;253404;253409;0;253414
            /var/log=818MB;970;975;0;980

            """
        let out = NagiosOutput.parse(Array(text.utf8))
        #expect(out.text == "DISK OK - free space: / 3326 MB (56%);")
        #expect(out.longOutput == "/ 15272 MB (77%);\n/boot 68 MB (69%);\n/home 69357 MB (27%);\n/var/log 819 MB (84%);")
        #expect(out.perfdata.map(\.label) == ["/", "/boot", "/home", "/var/log"])
        #expect(out.perfdata.map(\.value) == [2643, 68, 69357, 818])
        #expect(out.errors == [])
    }

    /// Quoted labels with spaces and with '' for a quote (shinken #858,
    /// graphios #54/#71, librenms #16255 split them on spaces).
    @Test func quotedLabels() {
        let out = NagiosOutput.parse(Array("OK | 'C:\\ Label: Serial'=10GB;20;30;0;40 'it''s'=1 plain=2s\n".utf8))
        #expect(out.perfdata.map(\.label) == ["C:\\ Label: Serial", "it's", "plain"])
        #expect(out.perfdata[0].uom == "GB" && out.perfdata[0].max == 40)
        #expect(out.perfdata[2].base.value == 2 && out.perfdata[2].base.unit == "seconds")
        #expect(out.errors == [])
    }

    /// Every UOM of the guidelines, and the base unit each is taken to.
    @Test(arguments: [
        ("s", 1.0, "seconds"), ("ms", 1e-3, "seconds"), ("us", 1e-6, "seconds"), ("ns", 1e-9, "seconds"),
        ("%", 1, "percent"), ("B", 1, "bytes"), ("KB", 1024, "bytes"), ("MB", 1_048_576, "bytes"),
        ("TB", 1_099_511_627_776, "bytes"), ("c", 1, "counter"), ("", 1, ""), ("W", 1, "W"),
    ])
    func unitsOfMeasure(uom: String, scale: Double, unit: String) {
        let out = NagiosOutput.parse(Array("OK|x=3\(uom);;;;\n".utf8))
        #expect(out.errors == [])
        #expect(out.perfdata.first?.uom == uom)
        #expect(out.perfdata.first?.base.unit == unit)
        #expect(out.perfdata.first?.base.value == 3 * scale)
    }

    /// Ranges `[@][start:][end]` with `~` (Telegraf #4087 took none of them),
    /// each with the values it alerts on (01.range_expressions).
    @Test(arguments: [
        ("10", [-1, 11], [0, 5, 10]),
        ("10:", [9.9], [10, 1e9]),
        ("~:10", [10.5], [-1e9, 10]),
        ("10:20", [9, 21], [10, 15, 20]),
        ("@10:20", [10, 15, 20], [9, 21]),
        ("-5:-1", [0, -6], [-5, -3, -1]),
        ("0.5:1.5e1", [0.4, 16], [0.5, 15]),
    ])
    func ranges(text: String, alerts: [Double], passes: [Double]) throws {
        let r = try #require(NagiosRange.parse(text[...]))
        for v in alerts { #expect(r.alerts(v), "\(text) should alert on \(v)") }
        for v in passes { #expect(!r.alerts(v), "\(text) should not alert on \(v)") }
        let out = NagiosOutput.parse(Array("OK | a=1;\(text);\(text)".utf8))
        #expect(out.perfdata.first?.warn == r && out.perfdata.first?.crit == r)
    }

    @Test(arguments: ["", "@", "20:10", "a", "10:b", "~", "1:2:3", "10%"])
    func badRanges(text: String) {
        #expect(NagiosRange.parse(text[...]) == nil || text.isEmpty)
    }

    /// What the hosts' users reported, and what a hostile check prints: each
    /// bad datum is one counted error, the good ones beside it are kept.
    @Test(arguments: [
        // sensu-go #2021, pnp4nagios #73: trailing newlines and CRs are no data.
        ("OK | a=1\n\n\n", ["a"], 0),
        ("OK | a=1\r\n", ["a"], 0),
        // monitoring-plugins #396: tabs between data.
        ("OK | a=1\tb=2", ["a", "b"], 0),
        // A value that is no number, an empty value, no '=', an empty label.
        ("OK | a=abc b=2", ["b"], 1),
        ("OK | a= b=2", ["b"], 1),
        ("OK | novalue b=2", ["b"], 1),
        ("OK | =5 b=2", ["b"], 1),
        // An unclosed quote ends the line's data.
        ("OK | b=2 'open=1 c=3", ["b"], 1),
        // A quoted label without '='.
        ("OK | 'x' b=2", ["b"], 1),
        // Too many fields; a bad range; a bad min.
        ("OK | a=1;2;3;4;5;6 b=2", ["b"], 1),
        ("OK | a=1;x;3 b=2", ["b"], 1),
        ("OK | a=1;;;zero b=2", ["b"], 1),
        // inf, nan, hex: not numbers here.
        ("OK | a=inf b=nan c=0x10 d=4", ["d"], 3),
        // A unit that is no unit.
        ("OK | a=1M2 b=2", ["b"], 1),
        // U: the check could not tell; kept, without a value.
        ("OK | a=U;1;2 b=2", ["a", "b"], 0),
        // check_nextcloud #3: a comma for the point.
        ("OK | a=1,5 b=2", ["a", "b"], 0),
        // Scientific notation (should not be used, but is read).
        ("OK | a=1.5e3ms", ["a"], 0),
    ] as [(String, [String], Int)])
    func badAndOddPerfdata(text: String, labels: [String], errors: Int) {
        let out = NagiosOutput.parse(Array(text.utf8))
        #expect(out.text == "OK")
        #expect(out.perfdata.map(\.label) == labels, "\(text)")
        #expect(out.errors.count == errors, "\(text): \(out.errors)")
    }

    @Test func commaDecimalAndScientificValues() {
        let out = NagiosOutput.parse(Array("OK | a=1,5 b=1.5e3ms".utf8))
        #expect(out.perfdata.map(\.value) == [1.5, 1500])
        #expect(out.perfdata[1].base.value == 1.5)
    }

    /// Output cut at the capture limit: the incomplete last line is left out
    /// rather than read as a datum it is only the start of.
    @Test func aCutOutputLosesOnlyItsLastLine() {
        let out = NagiosOutput.parse(Array("OK | a=1\nlong\n| b=2\nc=12345".utf8), cut: true)
        #expect(out.perfdata.map(\.label) == ["a", "b"])
        #expect(out.longOutput == "long")
        // One line longer than the limit: its text as far as it came, no
        // datum (the last would be cut), never "printed nothing".
        let long = "CRITICAL: " + String(repeating: "x", count: 65_000)
        let one = NagiosOutput.parse(Array((long + " | a=1 b=123").utf8), cut: true)
        #expect(one.text == long && one.perfdata.isEmpty && one.errors.isEmpty, "\(one.text.prefix(40))")
    }

    @Test func emptyAndBinaryOutputs() {
        #expect(NagiosOutput.parse([UInt8]()) == NagiosOutput())
        let junk = NagiosOutput.parse([0xff, 0xfe, 0x7c, 0x00, 0x3d, 0x31, 0x0a])
        #expect(junk.perfdata.count + junk.errors.count == 1)
        // Nothing but bars and equals signs.
        let bars = NagiosOutput.parse(Array("||||\n|||=\n=|=".utf8))
        #expect(bars.text == "")
        _ = bars.errors
    }

    @Test func theStatesAndTheirTypes() {
        #expect(NagiosState(exitStatus: 0) == .ok && NagiosState(exitStatus: 3) == .unknown)
        #expect(NagiosState(exitStatus: 4) == .unknown && NagiosState(exitStatus: 255) == .unknown)
        var m = NagiosStateMachine(maxAttempts: 3)
        var s = m.record(.ok)
        #expect(!s.changed && m.type == .hard && m.attempt == 1)
        s = m.record(.critical)
        #expect(s.changed && s.retry && m.type == .soft && m.attempt == 1)
        s = m.record(.warning)
        #expect(s.changed && s.retry && m.type == .soft && m.attempt == 2)
        s = m.record(.critical)
        #expect(s.changed && !s.retry && m.type == .hard && m.attempt == 3)
        s = m.record(.critical)
        #expect(!s.changed && m.type == .hard && m.attempt == 3)
        s = m.record(.warning)
        #expect(s.changed && m.type == .hard && m.attempt == 3)
        s = m.record(.ok)
        #expect(s.changed && m.type == .hard && m.attempt == 1)
        // A SOFT recovery, then OK settles without a change.
        _ = m.record(.unknown)
        s = m.record(.ok)
        #expect(s.changed && m.type == .soft)
        s = m.record(.ok)
        #expect(!s.changed && m.type == .hard)
        // One attempt: every problem is HARD at once.
        var one = NagiosStateMachine(maxAttempts: 1)
        s = one.record(.warning)
        #expect(s.changed && !s.retry && one.type == .hard)
    }

    private func range(_ text: String) -> NagiosRange? { NagiosRange.parse(text[...]) }
}
