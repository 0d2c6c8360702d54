import Foundation
import Testing
@testable import VigilCore

// Inputs an outsider could write to trap, hang, exhaust or fool the host:
// each is refused at its FILE:LINE:COLUMN, and nothing is loaded past it.

func loadBytes(_ bytes: [UInt8]) -> (Manifest?, [Diagnostic]) {
    ManifestLoader(file: "test.yaml").load(bytes: bytes)
}

let aSink = "sinks: {out: {type: null}}\n"

// MARK: - Bytes that are not text

@Suite("Manifest limits: bytes that are not text")
struct ManifestBytesTests {
    @Test("a NUL byte is an error at its line and column; nothing after it is lost or loaded")
    func nulByte() {
        let bytes = Array("monitors:\n  cpu: {plugin: cpu}\n".utf8) + [0] + Array("sinks:\n  out: {type: log}\n".utf8)
        let (m, d) = loadBytes(bytes)
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 3, 1, "not a YAML text file: a NUL byte at byte offset 31",
                         hint: .equals("a manifest is UTF-8 text; check how it was written or copied"))
    }

    @Test("a NUL in a String is caught too, mid-line")
    func nulInString() {
        let (m, d) = load("monitors:\n  cpu: {plugin: c\u{0}pu}\n" + aSink)
        #expect(m == nil)
        expectDiagnostic(d, at: 2, 18, "a NUL byte at byte offset 27")
    }

    @Test("invalid UTF-8 is reported byte by byte at its place; columns count characters")
    func invalidUTF8() {
        // "é" is two bytes and one column; 0xFF and a lone continuation byte are invalid; so is a truncated sequence at the end.
        let bytes = Array("# é\nmonitors:\n  cpu: {plugin: ".utf8) + [0xFF] + Array("cpu}\n".utf8) + [0x80] + Array("\n".utf8) + [0xE2, 0x82]
        let (m, d) = loadBytes(bytes)
        #expect(m == nil)
        expectCount(d, 3)
        expectDiagnostic(d, at: 3, 17, "invalid UTF-8 (byte 0xFF) at byte offset 31")
        expectDiagnostic(d, at: 4, 1, "invalid UTF-8 (byte 0x80) at byte offset 37")
        expectDiagnostic(d, at: 5, 1, "invalid UTF-8 (byte 0xE2) at byte offset 39")
    }

    @Test("overlong encodings and surrogates are not UTF-8", arguments: [[0xC0, 0xAF], [0xE0, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80]] as [[UInt8]])
    func notUTF8(sequence: [UInt8]) {
        let (m, d) = loadBytes(Array("host: ".utf8) + sequence + Array("\n".utf8))
        #expect(m == nil)
        #expect(d.first?.location == loc(1, 7))
        #expect(d.allSatisfy { $0.message.contains("invalid UTF-8") && $0.location.line == 1 }, "\(d)")
    }

    @Test("control characters: C0 but tab and line ends, DEL, C1, non-characters")
    func controls() {
        let (m, d) = load("host: \u{7F}\nlog_level: \u{85}\nx: \u{FFFE}\n" + aSink)
        #expect(m == nil)
        expectCount(d, 3)
        expectDiagnostic(d, at: 1, 7, "control characters are not allowed (U+7F)")
        expectDiagnostic(d, at: 2, 12, "control characters are not allowed (U+85)")
        expectDiagnostic(d, at: 3, 4, "U+FFFE is not a character")
    }

    @Test("a binary file gets 20 problems and one line for the rest, not one per byte")
    func binary() {
        let (m, d) = loadBytes([UInt8](repeating: 0, count: 5000))
        #expect(m == nil)
        expectCount(d, 21)
        #expect(d.last?.message == "not a YAML text file: 4980 more bytes that are not text after this one")
    }

    @Test("a leading BOM is fine and takes no column")
    func bom() {
        let (m, d) = loadBytes([0xEF, 0xBB, 0xBF] + Array("monitors:\n  cpu: {plugin: cpu, colour: red}\n\(aSink)".utf8))
        #expect(m != nil)
        expectDiagnostic(d, at: 2, 22, "unknown key 'colour'")
    }

    @Test("a file past the size limit is refused before it is parsed")
    func tooLarge() {
        let (m, d) = loadBytes([UInt8](repeating: UInt8(ascii: "#"), count: ManifestLimits.maxFileBytes + 1))
        #expect(m == nil)
        expectDiagnostic(d, at: 1, 1, "the manifest is larger than the limit of 4MiB")
    }

    @Test("a NUL written as an escape in a value is refused at the value")
    func escapedNul() {
        let (_, d) = load("host: \"web\\0evil\"\nmonitors: {}\n" + aSink)
        expectDiagnostic(d, at: 1, 7, "a value holds a NUL character")
    }
}

// MARK: - YAML features a manifest does not take

@Suite("Manifest limits: aliases, nesting, tags, documents")
struct ManifestYAMLLimitsTests {
    /// Nine levels of nine aliases: 9^9 (387 420 489) strings if expanded.
    static let billionLaughs: String = {
        var text = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        var previous = "a"
        for name in ["b", "c", "d", "e", "f", "g", "h", "i"] {
            text += "\(name): &\(name) [" + Array(repeating: "*\(previous)", count: 9).joined(separator: ", ") + "]\n"
            previous = name
        }
        return text + "monitors:\n  cpu: {plugin: cpu, options: {x: *i}}\n" + aSink
    }()

    @Test("a billion laughs is refused at the alias that passes the limit, at once")
    func billionLaughs() {
        let clock = ContinuousClock()
        var result: (Manifest?, [Diagnostic]) = (nil, [])
        let elapsed = clock.measure { result = load(Self.billionLaughs) }
        #expect(elapsed < .milliseconds(500), "\(elapsed)")
        let (m, d) = result
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 5, 8, "alias '*d' would make the manifest more than 10000 nodes of repeated values (15670 with this one)",
                         hint: .equals("anchors and aliases are for sharing a few settings; write the values out, or share smaller ones"))
    }

    @Test("a key that is an alias of a huge tree is refused too (it was hashed whole to find duplicates)")
    func aliasAsKey() {
        var text = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        for (name, previous) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
            text += "\(name): &\(name) [" + Array(repeating: "*\(previous)", count: 10).joined(separator: ", ") + "]\n"
        }
        text += "? *e\n: 1\n"
        let (m, d) = load(text)
        #expect(m == nil)
        #expect(d.count == 1 && d[0].message.contains("would make the manifest more than 10000 nodes"), "\(d)")
    }

    @Test("aliases within the limit work, and values they repeat are checked like written ones")
    func smallAliases() throws {
        let (m, d) = load("""
            x-interval: &every 5s
            monitors:
              cpu: &mon {plugin: cpu, interval: *every}
              load: {plugin: load, interval: *every}
            sinks: {out: {type: null}}
            """)
        #expect(m != nil)
        expectDiagnostic(d, at: 1, 1, "unknown key 'x-interval' in the manifest")
        #expect(monitor(m, "load")?.interval == 5_000_000_000)
    }

    @Test("an alias to an anchor not defined before it, or to itself")
    func undefinedAlias() {
        let (_, d) = load("monitors:\n  cpu: {plugin: *nope}\n  load: &me [*me]\n" + aSink)
        expectDiagnostic(d, at: 2, 17, "alias '*nope' refers to no anchor before it")
        expectDiagnostic(d, at: 3, 14, "alias '*me' refers to no anchor before it")
    }

    @Test("nesting past 64 levels is refused at the level that passes it, in flow and through aliases")
    func deepNesting() {
        let flow = "monitors: {cpu: {plugin: cpu, options: {x: " + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}}}\n"
        let (m, d) = load(flow)
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 1, 45, "lists and mappings nest more than 64 levels deep here")

        let deep = "a: &a " + String(repeating: "[", count: 60) + String(repeating: "]", count: 60) + "\nb: [[[[[[*a]]]]]]\n"
        let (m2, d2) = load(deep)
        #expect(m2 == nil)
        expectDiagnostic(d2, at: 2, 10, "alias '*a' nests values more than 64 levels deep")
    }

    @Test("tags are refused at their place", arguments: [
        ("host: !!str web\n", 1, 7, "tag '!!str'"),
        ("host: !custom web\n", 1, 7, "tag '!custom'"),
        ("host: !!binary aGVsbG8=\n", 1, 7, "tag '!!binary'"),
        ("monitors: !!map {}\n", 1, 11, "tag '!!map'"),
        ("plugin_dirs: !!seq [a]\n", 1, 14, "tag '!!seq'"),
        ("host: ! web\n", 1, 7, "tag '!'"),
        ("%TAG !e! tag:example.com,2000:\n---\nhost: !e!x web\n", 3, 7, "tag 'tag:example.com,2000:x'"),
    ])
    func tags(text: String, line: Int, column: Int, message: String) {
        let (_, d) = load(text + "monitors: {}\n" + aSink)
        expectDiagnostic(d, at: line, column, "\(message): a manifest takes no YAML tags",
                         hint: .equals("remove the tag; quote a value to make it a string"))
    }

    @Test("a second document is refused where it starts")
    func twoDocuments() {
        let (m, d) = load("monitors: {}\n\(aSink)---\nmonitors: {cpu: {plugin: cpu}}\n")
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 3, 1, "a manifest is one YAML document, and a second one starts here")
    }

    @Test("a key that is a list or mapping is refused; its value is skipped")
    func complexKey() {
        let (m, d) = load("monitors:\n  ? [a, b]\n  : {plugin: cpu}\n  cpu: {plugin: cpu}\n" + aSink)
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, 5, "a key must be a plain name, not a list")
        #expect(m?.monitors.map(\.name) == ["cpu"])
    }
}

// MARK: - Numbers

@Suite("Manifest limits: numbers")
struct ManifestNumberLimitsTests {
    @Test("durations past 365d are refused with the limit; ones past Int64 too, not trapped on", arguments: [
        "reconnect_min: 60000d", "reconnect_max: 366d", "reconnect_min: 99999999999999999999d", "reconnect_max: 8760h1ns",
    ])
    func longDurations(setting: String) {
        let line = "  out: {type: socket, connect: \"tcp://127.0.0.1:9\", \(setting)}"
        let (_, d) = load("monitors: {}\nsinks:\n\(line)\n")
        let value = String(setting.split(separator: " ")[1])
        let column = line.range(of: value)!.lowerBound.utf16Offset(in: line) + 1
        expectDiagnostic(d, at: 3, column, "is \(value), longer than the limit of 365d", hint: .none)
    }

    @Test("every duration of the manifest has the bound")
    func everyDuration() {
        let (_, d) = load("""
            monitors:
              cpu:
                plugin: cpu
                interval: 400d
                timeout: 400d
                restart_window: 400d
                restart_backoff: { min: 400d, max: 400d }
                thresholds:
                  usage: { warning: { above: 1 }, for: 400d, stale_after: 400d }
            rules:
              r: { condition: cpu.usage > 1, for: 400d, exec: [x], exec_timeout: 400d, exec_min_gap: 400d }
            sinks:
              f: { type: file, path: /tmp/x, fsync_interval: 400d }
              s: { type: socket, connect: "tcp://h:1", reconnect_min: 400d, reconnect_max: 400d }
            """)
        let long = d.filter { $0.message.hasSuffix("is 400d, longer than the limit of 365d") }
        #expect(long.count == 13, "\(ManifestErrors(d))")
        #expect(Set(long.map(\.location.line)) == [4, 5, 6, 7, 9, 11, 13, 14])
    }

    @Test("365d itself is accepted")
    func atTheLimit() {
        let (m, d) = load("monitors: {cpu: {plugin: cpu, interval: 365d, timeout: 8760h}}\n" + aSink)
        expectCount(d, 0)
        #expect(monitor(m, "cpu")?.interval == ManifestLimits.maxDuration)
    }

    @Test("sizes past their limits: 1PiB for rotation, 1GiB for a client buffer held in memory")
    func sizes() {
        let (_, d) = load("""
            monitors: {}
            sinks:
              f: { type: file, path: /tmp/x, rotate: { size: 2PiB, keep: 99999999999999999999 } }
              g: { type: file, path: /tmp/y, rotate: { size: 99999999999999999999999TiB } }
              s: { type: socket, listen: "unix:/tmp/s", client_buffer: 2GiB }
            """)
        expectDiagnostic(d, at: 3, 50, "'rotate.size' is 2PiB, larger than the limit of 1PiB")
        expectDiagnostic(d, at: 3, 62, "'rotate.keep' must be between 1 and 1000, not 99999999999999999999")
        expectDiagnostic(d, at: 4, 50, "'rotate.size' is 99999999999999999999999TiB, larger than the limit of 1PiB")
        expectDiagnostic(d, at: 5, 60, "'client_buffer' is 2GiB, larger than the limit of 1GiB (it is held in memory for each client)")
    }

    @Test("counts past Int64 are out of range, not 'not a number'")
    func counts() {
        let (_, d) = load("""
            monitors:
              cpu: { plugin: cpu, thresholds: { usage: { warning: { above: 1 }, hits: 99999999999999999999 } } }
            sinks:
              out: { type: log, queue_size: 18446744073709551616 }
            """)
        expectDiagnostic(d, at: 2, 75, "'hits' must be between 1 and 1000000, not 99999999999999999999")
        expectDiagnostic(d, at: 4, 33, "'queue_size' must be between 1 and 16777216 events, not 18446744073709551616")
    }
}

@Suite("Units: exact and bounded")
struct UnitsExactTests {
    @Test("parsing never overflows or traps", arguments: [
        "99999999999999999999d", "9223372036854775808ns", "106752d", "1" + String(repeating: "0", count: 400) + "s",
        "9223372036854775807ns1ns", "0." + String(repeating: "9", count: 400) + "d",
    ])
    func hugeDurations(text: String) {
        let ns = Units.parseDuration(text)
        #expect(ns == nil || text.hasPrefix("0."))
    }

    @Test("values are exact where a Double was not", arguments: [
        ("9223372036854775807ns", Int64.max),
        ("106751d", 9_223_286_400_000_000_000),
        ("0.000000001s", 1),
        ("0.0000000005s", 1),     // half a nanosecond rounds up
        ("0.0000000004s", 0),
        ("1.", 1_000_000_000),
    ] as [(String, Int64)])
    func exact(text: String, ns: Int64) {
        let input = text == "1." ? "1.s" : text
        #expect(Units.parseDuration(input) == ns)
    }

    @Test("sizes are exact and bounded by Int64")
    func sizes() {
        #expect(Units.parseSize("9007199254740993") == 9_007_199_254_740_993)
        #expect(Units.parseSize("8EiB") == nil)
        #expect(Units.parseSize("8192PiB") == nil)
        #expect(Units.parseSize("1PiB") == 1 << 50)
        #expect(Units.parseSize("0.5KiB") == 512)
        #expect(Units.parseSize("99999999999999999999") == nil)
    }
}

// MARK: - Checks that need the plugins' self-descriptions

@Suite("Manifest limits: thresholds and rules on dynamic fields")
struct DynamicFieldTests {
    /// Shaped like the ffi plugin: one kind with dynamic fields, named by the json option `fields`.
    static let ffi = PluginDescription(
        name: "ffi", version: "1", summary: "", abiMajor: 1, abiMinor: 2,
        options: [OptionSpec(name: "symbol", type: .string, defaultText: nil, doc: ""),
                  OptionSpec(name: "fields", type: .json, defaultText: "[]", doc: "")],
        events: [EventSpec(kind: "result", doc: "", fields: [FieldSpec(name: "elapsed_us", type: .double)], dynamicFields: true)],
        defaultInterval: 10_000_000_000, polled: true, path: "")
    /// Dynamic fields without an option that names them.
    static let opaque = PluginDescription(
        name: "opaque", version: "1", summary: "", abiMajor: 1, abiMinor: 2, options: [],
        events: [EventSpec(kind: "reading", doc: "", fields: [], dynamicFields: true)],
        defaultInterval: 10_000_000_000, polled: true, path: "")

    func resolve(_ text: String) -> [Diagnostic] {
        let (m, d) = load(text)
        #expect(d.isEmpty, "\(ManifestErrors(d))")
        guard let m else { return [] }
        var infos: [String: ConditionResolver.MonitorInfo] = [:]
        for monitor in m.monitors {
            let plugin = monitor.plugin == "ffi" ? Self.ffi : Self.opaque
            infos[monitor.name] = .init(description: plugin, interval: 10_000_000_000,
                                        dynamicFields: ConditionResolver.dynamicFields(of: monitor, plugin: plugin))
        }
        return ConditionResolver.resolve(m, monitors: infos).diagnostics
    }

    @Test("fields named by the 'fields' option are checked, with a did-you-mean; declared ones still work")
    func namedByOption() {
        let d = resolve("""
            monitors:
              load:
                plugin: ffi
                options: { symbol: getloadavg, fields: [count, load1, load5, load15] }
                thresholds:
                  load1: { warning: { above: 4 } }
                  result.lod5: { warning: { above: 4 } }
                  elapsed_us: { warning: { above: 1000 } }
                  load2: { warning: { above: 4 } }
            rules:
              busy: { condition: load.load51 > 3 }
            sinks: {out: {type: null}}
            """)
        expectCount(d, 3)
        expectDiagnostic(d, at: 7, 7, "'result' events of monitor 'load' (plugin ffi) have no field 'lod5': its option 'fields' names count, load1, load5, load15",
                         hint: .equals("did you mean 'load5'?"))
        expectDiagnostic(d, at: 9, 7, "have no field 'load2'", hint: .equals("did you mean 'load1'?"))
        expectDiagnostic(d, at: 11, 22, "have no field 'load51'")
    }

    @Test("without 'fields' the default (none) applies; a plugin without such an option gets a warning that it cannot be checked")
    func unknowable() {
        let d = resolve("""
            monitors:
              page: { plugin: ffi, options: { symbol: getpagesize }, thresholds: { bytes: { warning: { above: 1 } } } }
              thing: { plugin: opaque, thresholds: { temp: { warning: { above: 1 } } } }
            sinks: {out: {type: null}}
            """)
        expectCount(d, 2)
        expectDiagnostic(d, at: 2, 72, "its option 'fields' names none", hint: .equals("its fields: elapsed_us"))
        expectDiagnostic(d, at: 3, 42, "field 'temp' of monitor 'thing' cannot be checked: plugin opaque names the fields of its 'reading' events from its options",
                         level: .warning)
    }
}

@Suite("Manifest limits: socket paths")
struct SocketPathLimitTests {
    @Test("a unix path fits sun_path: 107 bytes and its NUL")
    func unixPathLength() throws {
        let fits = "/" + String(repeating: "s", count: 106)
        #expect(try SocketAddress.parse("unix:" + fits) == .unix(path: fits))
        #expect(throws: SocketAddress.ParseError.pathTooLong(108)) { try SocketAddress.parse("unix:" + fits + "x") }
        let (_, d) = load("monitors: {}\nsinks:\n  s: {type: socket, listen: \"unix:\(fits)é\"}\n")
        expectDiagnostic(d, at: 3, 29, "the unix socket path is 109 bytes; the kernel takes at most 107 (sun_path)")
    }
}
