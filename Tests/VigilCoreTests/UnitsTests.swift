import Testing
@testable import VigilCore

// MARK: - Durations

@Suite("Units: durations")
struct DurationTests {
    @Test("accepted durations parse to nanoseconds", arguments: [
        ("250ms", Int64(250_000_000)),
        ("5s", 5_000_000_000),
        ("1m", 60_000_000_000),
        ("1h30m", 5_400_000_000_000),
        ("1.5s", 1_500_000_000),
        ("1.5m", 90_000_000_000),
        ("100us", 100_000),
        ("100µs", 100_000),
        ("10ns", 10),
        ("2d", 172_800_000_000_000),
        ("1h1m1s1ms1us1ns", 3_661_001_001_001),
        ("0", 0),
        ("0s", 0),
        ("0.5us", 500),
        (".5s", 500_000_000),
        ("  5s  ", 5_000_000_000),   // spaces around are trimmed
        ("\t5s", 5_000_000_000),     // and tabs
    ])
    func parses(text: String, ns: Int64) {
        #expect(Units.parseDuration(text) == ns)
    }

    @Test("rejected durations", arguments: [
        "5",            // no unit
        "5 s",          // a space inside: only leading and trailing spaces are trimmed
        "5 seconds",
        "5sec",
        "-1s",          // negative
        "+1s",
        "abc",
        "",
        "   ",
        "s",
        "1..5s",
        "1e3s",         // no exponents
        "5s5",          // a trailing number without unit
        "00",           // only a bare "0" may omit the unit
        "5S",           // units are case-sensitive
        "200000d",      // does not fit in Int64 nanoseconds
    ])
    func rejects(text: String) {
        #expect(Units.parseDuration(text) == nil)
    }

    @Test("formatDuration picks the largest exact unit", arguments: [
        (Int64(0), "0s"),
        (250_000_000, "250ms"),
        (5_000_000_000, "5s"),
        (90_000_000_000, "90s"),
        (120_000_000_000, "2m"),
        (5_400_000_000_000, "90m"),
        (7_200_000_000_000, "2h"),
        (1_500_000_000, "1500ms"),
        (1_000, "1us"),
        (1_500, "1500ns"),
        (1, "1ns"),
    ])
    func formats(ns: Int64, text: String) {
        #expect(Units.formatDuration(ns) == text)
    }

    @Test("formatDuration output parses back to the same value")
    func formatRoundTrip() {
        let values: [Int64] = [0, 1, 999, 1_000, 1_001, 250_000_000, 1_500_000_000, 59_000_000_000,
                               61_000_000_000, 3_600_000_000_000, 86_400_000_000_000, 123_456_789_012]
        for ns in values {
            #expect(Units.parseDuration(Units.formatDuration(ns)) == ns, "\(ns) → \(Units.formatDuration(ns))")
        }
    }
}

// MARK: - Sizes

@Suite("Units: sizes")
struct SizeTests {
    @Test("accepted sizes parse to bytes", arguments: [
        ("4096", Int64(4096)),
        ("0", 0),
        ("64MiB", 67_108_864),
        ("64Mi", 67_108_864),
        ("1.5GB", 1_500_000_000),
        ("512 KiB", 524_288),     // a space between number and unit is allowed
        (" 512KiB ", 524_288),
        ("1k", 1_000),
        ("1K", 1_000),
        ("1kB", 1_000),
        ("2M", 2_000_000),
        ("1GiB", 1_073_741_824),
        ("1TiB", 1_099_511_627_776),
        ("1TB", 1_000_000_000_000),
        ("10B", 10),
        ("10b", 10),
        ("1.5KiB", 1_536),
    ])
    func parses(text: String, bytes: Int64) {
        #expect(Units.parseSize(text) == bytes)
    }

    @Test("rejected sizes", arguments: [
        "64MiBs", "", "MiB", "-1", "1.5.5MB", "64 mib", "64mb", "64 M iB", "ten", "1e6", "9000000TiB",
    ])
    func rejects(text: String) {
        #expect(Units.parseSize(text) == nil)
    }

    @Test("formatSize uses the largest binary unit that divides exactly", arguments: [
        (Int64(0), "0"),
        (1, "1"),
        (1_000, "1000"),
        (1_025, "1025"),
        (4_096, "4KiB"),
        (67_108_864, "64MiB"),
        (1_610_612_736, "1536MiB"),
        (1 << 30, "1GiB"),
        (Int64(1) << 40, "1TiB"),
        (1_500_000_000, "1500000000"),
    ])
    func formats(bytes: Int64, text: String) {
        #expect(Units.formatSize(bytes) == text)
    }

    @Test("formatSize output parses back")
    func roundTrip() {
        for bytes: Int64 in [0, 1, 1023, 1024, 4096, 5000, 67_108_864, 3 << 30, 7 << 40] {
            #expect(Units.parseSize(Units.formatSize(bytes)) == bytes)
        }
    }
}

// MARK: - Socket addresses

@Suite("SocketAddress")
struct SocketAddressTests {
    @Test("valid addresses", arguments: [
        ("unix:/run/vigil/events.sock", SocketAddress.unix(path: "/run/vigil/events.sock")),
        ("unix:///x", .unix(path: "/x")),                 // unix:// + absolute path
        ("unix:relative.sock", .unix(path: "relative.sock")),
        ("tcp://127.0.0.1:5170", .tcp(host: "127.0.0.1", port: 5170)),
        ("tcp://[::1]:80", .tcp(host: "::1", port: 80)),
        ("tcp://host:1", .tcp(host: "host", port: 1)),
        ("tcp://collector.example:65535", .tcp(host: "collector.example", port: 65535)),
        ("udp://127.0.0.1:8125", .udp(host: "127.0.0.1", port: 8125)),
        ("udp://[fe80::1]:53", .udp(host: "fe80::1", port: 53)),
    ])
    func parses(text: String, address: SocketAddress) throws {
        #expect(try SocketAddress.parse(text) == address)
    }

    @Test("invalid addresses", arguments: [
        ("unix:", SocketAddress.ParseError.missingPath),
        ("unix://", .missingPath),
        ("tcp://127.0.0.1", .missingPort),
        ("tcp://127.0.0.1:", .missingPort),
        ("tcp://[::1]", .missingPort),
        ("tcp://[::1]80", .missingPort),
        ("tcp://[::1", .missingHost),
        ("tcp://[]:80", .missingHost),
        ("tcp://:80", .missingHost),
        ("tcp://h:70000", .badPort("70000")),
        ("tcp://h:0", .badPort("0")),
        ("tcp://h:-1", .badPort("-1")),
        ("udp://h:http", .badPort("http")),
        ("ftp://x:1", .unknownScheme("ftp")),
        ("TCP://h:1", .unknownScheme("TCP")),
        ("127.0.0.1:80", .unknownScheme("127.0.0.1")),
        ("/run/vigil.sock", .unknownScheme("/run/vigil.sock")),
        ("", .unknownScheme("")),
    ])
    func rejects(text: String, error: SocketAddress.ParseError) {
        #expect(throws: error) { try SocketAddress.parse(text) }
    }

    @Test("error messages")
    func messages() {
        #expect(SocketAddress.ParseError.badPort("70000").description == "'70000' is not a port (1-65535)")
        #expect(SocketAddress.ParseError.missingPort.description == "address needs a port, as in tcp://127.0.0.1:5170")
        #expect(SocketAddress.ParseError.unknownScheme("ftp").description
            == "unknown scheme 'ftp'; use unix:/PATH, tcp://HOST:PORT or udp://HOST:PORT")
    }

    @Test("description brackets IPv6 hosts and parses back", arguments: [
        (SocketAddress.unix(path: "/run/x.sock"), "unix:/run/x.sock"),
        (.tcp(host: "::1", port: 80), "tcp://[::1]:80"),
        (.tcp(host: "example.org", port: 5170), "tcp://example.org:5170"),
        (.udp(host: "10.0.0.1", port: 8125), "udp://10.0.0.1:8125"),
        (.udp(host: "fe80::1", port: 53), "udp://[fe80::1]:53"),
    ])
    func description(address: SocketAddress, text: String) throws {
        #expect(address.description == text)
        #expect(try SocketAddress.parse(text) == address)
    }
}

// MARK: - Suggestions

@Suite("Suggest")
struct SuggestTests {
    @Test("closest finds plausible typos", arguments: [
        ("intervall", ["plugin", "interval", "enabled", "options"], "interval" as String?),
        ("per_cpus", ["per_cpu", "count"], "per_cpu"),
        ("warnng", Severity.names, "warning"),
        ("cpuu", ["cpu", "memory", "vigil"], "cpu"),
        ("intreval", ["interval"], "interval"),      // a transposition costs 1
        ("CPU", ["memory", "cpu"], "cpu"),           // case-only difference
        ("Interval", ["interval"], "interval"),
        ("drop_oldets", OverflowPolicy.allCases.map(\.rawValue), "drop_oldest"),
        ("xyz", ["cpu", "memory"], nil),
        ("discard", OverflowPolicy.allCases.map(\.rawValue), nil),
        ("lag", ["file", "log", "null", "socket"], "log"),
        ("cat", ["bat", "cot"], "bat"),              // a tie keeps the first candidate
        ("abcdef", ["abcxyz", "abcdeg"], "abcdeg"),  // the closer one wins
        ("ab", ["abcd"], nil),                       // distance 2 > max(1, 2/3)
    ])
    func closest(word: String, candidates: [String], expected: String?) {
        #expect(Suggest.closest(to: word, in: candidates) == expected)
    }

    @Test("hint wording")
    func hint() {
        #expect(Suggest.hint(for: "intervall", in: ["interval"]) == "did you mean 'interval'?")
        #expect(Suggest.hint(for: "zzzz", in: ["interval"]) == nil)
        #expect(Suggest.hint(for: "x", in: [String]()) == nil)
    }

    @Test("edit distance", arguments: [
        ("kitten", "sitting", 3),
        ("ab", "ba", 1),
        ("", "abc", 3),
        ("abc", "", 3),
        ("same", "same", 0),
        ("ca", "abc", 3),   // optimal string alignment, not full Damerau
        ("é", "e", 1),
    ])
    func distance(a: String, b: String, d: Int) {
        #expect(Suggest.distance(a, b) == d)
        #expect(Suggest.distance(b, a) == d)
    }
}

// MARK: - Diagnostics and severities

@Suite("Diagnostics")
struct DiagnosticFormattingTests {
    @Test("a diagnostic prints compiler-style, with its hint on the next line")
    func description() {
        let at = SourceLocation(file: "test.yaml", line: 7, column: 5)
        let d = Diagnostic(at: at, "unknown key 'intervall' in monitor 'cpu'", hint: "did you mean 'interval'?")
        #expect(d.description == "test.yaml:7:5: error: unknown key 'intervall' in monitor 'cpu'\n  hint: did you mean 'interval'?")
        let w = Diagnostic(.warning, at: at, "pattern 'x' matches no monitor of this manifest")
        #expect(w.description == "test.yaml:7:5: warning: pattern 'x' matches no monitor of this manifest")
        #expect(ManifestErrors([d, w]).description == d.description + "\n" + w.description)
        #expect(at.description == "test.yaml:7:5")
    }

    @Test("severity names, aliases and order")
    func severities() {
        #expect(Severity.names == ["debug", "info", "notice", "warning", "error", "critical"])
        #expect(Severity(name: "warn") == .warning)
        #expect(Severity(name: "crit") == .critical)
        #expect(Severity(name: "WARNING") == nil)
        #expect(Severity(name: "fatal") == nil)
        #expect(Severity.debug < .info && Severity.info < .notice && Severity.notice < .warning)
        #expect(Severity.warning < .error && Severity.error < .critical)
        for s in Severity.allCases { #expect(Severity(name: s.name) == s) }
        #expect(Severity.critical.rawValue == 5)
    }
}

// MARK: - Percentages

@Suite("Units: percentages")
struct PercentTests {
    @Test("read with their sign; a bare number, two points or no digit is not a percentage", arguments: [
        ("25%", 25), ("150%", 150), ("12.5%", 12.5), (" 25 % ", 25), (".5%", 0.5), ("5.%", 5),
        ("25", nil), ("%", nil), (".%", nil), ("1.2.3%", nil), ("-5%", nil), ("1e3%", nil), ("inf%", nil), ("25%%", nil),
    ] as [(String, Double?)])
    func parse(text: String, value: Double?) {
        #expect(Units.parsePercent(text) == value)
    }

    @Test func format() {
        #expect(Units.formatPercent(1) == "1%")
        #expect(Units.formatPercent(6400) == "6400%")
        #expect(Units.formatPercent(12.5) == "12.5%")
    }
}
