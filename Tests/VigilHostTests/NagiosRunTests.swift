import Foundation
import Glibc
import Testing
import VigilForeign

/// The `nagios` plugin through the real `vigil`, with Debian's own checks
/// (monitoring-plugins-basic and -standard) against servers this test starts
/// on loopback (Tests/Fixtures/nagios/peers.py), each compared with the same
/// command run by hand at the same moment; and hostile checks written here,
/// after which /proc is walked for anything they left.
@Suite(.serialized, .startsProcesses, .offThePool)
struct NagiosRunTests {
    static let checks = "/usr/lib/nagios/plugins"

    /// Runs `manifest` (monitors only; a file sink is added) for `duration`,
    /// and returns vigil's output and its events.
    func run(_ monitors: String, in dir: String, for duration: String = "4s",
             during: (() throws -> Void)? = nil) throws -> (TestEnv.Output, [[String: Any]]) {
        try TestEnv.write("monitors:\n" + monitors + "\nsinks:\n  out: { type: file, path: \(dir)/events.jsonl }\n",
                          to: dir + "/m.yaml")
        let process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/m.yaml", "--for", duration, "--control", "none"])
        try during?()
        let output = process.wait(timeout: 120)
        return (output, Self.events(dir + "/events.jsonl"))
    }

    static func events(_ path: String) -> [[String: Any]] {
        let lines = ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n")
        return lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    static func of(_ events: [[String: Any]], monitor: String, kind: String) -> [[String: Any]] {
        events.filter { $0["monitor"] as? String == monitor && $0["kind"] as? String == kind }
            .compactMap { $0["fields"] as? [String: Any] }
    }

    /// A script the test writes, mode 0755, in `dir` (0755 too: checks are
    /// refused from a directory others can write).
    static func script(_ name: String, in dir: String, _ body: String) throws -> String {
        let path = dir + "/" + name
        try TestEnv.write("#!/bin/sh\n" + body + "\n", to: path)
        chmod(path, 0o755)
        return path
    }

    static func dir() throws -> String {
        let dir = try TestEnv.tempDir()
        chmod(dir, 0o755)
        return dir
    }

    // MARK: Debian's checks, side by side

    /// One check of the comparison: how it is run, and how much of what it
    /// prints may differ between two runs a moment apart.
    struct Case {
        var name: String
        var argv: [String]
        /// Numbers in the text and perfdata values may differ (times, counts);
        /// the state, the words and the labels, units and thresholds may not.
        var volatile = false
    }

    /// The servers of peers.py, started for one test and killed after it.
    final class Peers {
        let process: RunningProcess
        let ports: [String: Int]

        init(dir: String) throws {
            let file = dir + "/ports.json"
            process = try TestEnv.start("/usr/bin/python3", [TestEnv.fixture("nagios/peers.py"), file])
            let deadline = Date().addingTimeInterval(20)
            while !FileManager.default.fileExists(atPath: file) && Date() < deadline && process.isRunning { usleep(20_000) }
            let data = try Data(contentsOf: URL(fileURLWithPath: file))
            ports = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Int])
        }

        subscript(name: String) -> String { String(ports[name] ?? 0) }

        deinit {
            process.signal(SIGKILL)
            _ = process.wait(timeout: 10)
        }
    }

    static func cases(peers: Peers, dir: String) throws -> [Case] {
        let c = checks
        let now = Int(Date().timeIntervalSince1970)
        try TestEnv.write("\(now) 1000 2000\n\(now) 150 250 300 400\n\(now - 300) 100 200 300 400\n", to: dir + "/mrtg.log")
        try TestEnv.write("a file to age\n", to: dir + "/aged")
        let host = "127.0.0.1"
        return [
            Case(name: "dummy_ok", argv: ["check_dummy", "0", "all is fine"]),
            Case(name: "dummy_warning", argv: ["check_dummy", "1", "a warning"]),
            Case(name: "dummy_critical", argv: ["check_dummy", "2", "it broke"]),
            Case(name: "dummy_unknown", argv: ["check_dummy", "3", "no idea"]),
            Case(name: "dummy_reserved", argv: ["check_dummy", "7"]),
            Case(name: "load", argv: ["check_load", "-w", "50,40,30", "-c", "100,80,60"], volatile: true),
            Case(name: "load_scaled", argv: ["check_load", "-r", "-w", "50,40,30", "-c", "100,80,60"], volatile: true),
            Case(name: "disk", argv: ["\(c)/check_disk", "-w", "10%", "-c", "5%", "-p", "/"], volatile: true),
            Case(name: "disk_inodes", argv: ["check_disk", "-W", "10%", "-K", "5%", "-p", "/"], volatile: true),
            Case(name: "swap", argv: ["check_swap", "-w", "20%", "-c", "10%"], volatile: true),
            Case(name: "users", argv: ["check_users", "-w", "500", "-c", "1000"], volatile: true),
            Case(name: "procs", argv: ["check_procs", "-w", "100000", "-c", "200000"], volatile: true),
            Case(name: "procs_peers", argv: ["check_procs", "-a", "nagios/peers.py", "-w", "1:1", "-c", "1:5"]),
            Case(name: "tcp", argv: ["check_tcp", "-H", host, "-p", peers["http"]], volatile: true),
            Case(name: "tcp_refused", argv: ["check_tcp", "-H", host, "-p", peers["closed"]]),
            Case(name: "http", argv: ["check_http", "-H", host, "-p", peers["http"], "-u", "/ok"], volatile: true),
            Case(name: "http_string", argv: ["check_http", "-H", host, "-p", peers["http"], "-u", "/ok", "-s", "not there"], volatile: true),
            Case(name: "http_404", argv: ["check_http", "-H", host, "-p", peers["http"], "-u", "/nothing"], volatile: true),
            Case(name: "ssh", argv: ["check_ssh", "-H", host, "-p", peers["ssh"]], volatile: true),
            Case(name: "smtp", argv: ["check_smtp", "-H", host, "-p", peers["smtp"]], volatile: true),
            Case(name: "ftp", argv: ["check_ftp", "-H", host, "-p", peers["ftp"]], volatile: true),
            Case(name: "pop", argv: ["check_pop", "-H", host, "-p", peers["pop"]], volatile: true),
            Case(name: "imap", argv: ["check_imap", "-H", host, "-p", peers["imap"]], volatile: true),
            Case(name: "nntp", argv: ["check_nntp", "-H", host, "-p", peers["nntp"]], volatile: true),
            Case(name: "udp", argv: ["check_udp", "-H", host, "-p", peers["udp"], "-s", "ping", "-e", "pong"], volatile: true),
            Case(name: "time", argv: ["check_time", "-H", host, "-p", peers["time"], "-w", "10", "-c", "20"], volatile: true),
            Case(name: "file_age", argv: ["check_file_age", "-w", "3600", "-c", "7200", "-f", dir + "/aged"], volatile: true),
            Case(name: "file_age_missing", argv: ["check_file_age", "-f", dir + "/not-there"]),
            Case(name: "cluster", argv: ["check_cluster", "-s", "-d", "0,0,1", "-w", "1", "-c", "2"]),
            Case(name: "negate", argv: ["negate", "-s", "\(c)/check_dummy", "2", "turned around"]),
            Case(name: "mrtg", argv: ["check_mrtg", "-F", dir + "/mrtg.log", "-e", "10", "-a", "AVG", "-v", "1",
                                      "-w", "100", "-c", "200", "-l", "Traffic", "-u", "B/s"]),
        ]
    }

    /// What a check printed and exited with when run by hand.
    struct ByHand {
        var state: NagiosState
        var text: String
        /// The raw perfdata tokens, split by this test's own reading (spaces
        /// outside quotes), not by the plugin's parser.
        var tokens: [String]
    }

    static func byHand(_ argv: [String]) throws -> ByHand {
        let program = argv[0].hasPrefix("/") ? argv[0] : checks + "/" + argv[0]
        let result = try TestEnv.run(program, Array(argv.dropFirst()), environment: ["LC_ALL": "C"], timeout: 30)
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var perf: [String] = []
        let first = lines.first ?? ""
        let text = first.split(separator: "|", maxSplits: 1, omittingEmptySubsequences: false)
        if text.count > 1 { perf.append(String(text[1])) }
        var after = false
        for line in lines.dropFirst() {
            if after { perf.append(line); continue }
            if let bar = line.firstIndex(of: "|") { perf.append(String(line[line.index(after: bar)...])); after = true }
        }
        var tokens: [String] = []
        for part in perf {
            var token = "", quoted = false
            for ch in part {
                if ch == "'" { quoted.toggle() }
                if (ch == " " || ch == "\t") && !quoted {
                    if !token.isEmpty { tokens.append(token); token = "" }
                } else {
                    token.append(ch)
                }
            }
            if !token.isEmpty { tokens.append(token) }
        }
        return ByHand(state: NagiosState(exitStatus: Int(result.status)),
                      text: String(text[0]).trimmingCharacters(in: .whitespaces), tokens: tokens)
    }

    /// Digits runs as one `#`, for the text of a volatile check.
    static func masked(_ text: String) -> String {
        var out = "", inNumber = false
        for ch in text {
            if ch.isNumber || (inNumber && (ch == "." || ch == ",")) {
                if !inNumber { out.append("#") }
                inNumber = true
            } else {
                out.append(ch)
                inNumber = false
            }
        }
        return out
    }

    static func number(_ text: Substring) -> Double? {
        let digits = text.prefix { "+-0123456789.eE".contains($0) }
        return Double(digits)
    }

    @Test func debiansChecksGiveWhatTheyGiveByHand() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let peers = try Peers(dir: dir)
        let cases = try Self.cases(peers: peers, dir: dir)
        #expect(cases.count >= 25)
        var monitors = ""
        for c in cases {
            let argv = c.argv.map { "\"\($0.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\"" }
            monitors += "  \(c.name):\n    plugin: nagios\n    interval: 1m\n"
            monitors += "    options: { command: [\(argv.joined(separator: ", "))], spread: 0s, timeout: 20s, concurrency: 4 }\n"
        }
        // By hand at the same moment: while vigil runs its first round.
        var hands: [String: ByHand] = [:]
        let (output, events) = try run(monitors, in: dir, for: "5s") {
            usleep(300_000)
            for c in cases { hands[c.name] = try Self.byHand(c.argv) }
        }
        #expect(output.status == 0, "\(output.stderr)")

        for c in cases {
            let checks = Self.of(events, monitor: c.name, kind: "check")
            guard let check = checks.first, let hand = hands[c.name] else {
                Issue.record("\(c.name): no check event (\(output.stderr.suffix(2000)))")
                continue
            }
            #expect(check["state"] as? String == hand.state.description, "\(c.name): \(check) by hand: \(hand)")
            let text = check["output"] as? String ?? ""
            if c.volatile {
                #expect(Self.masked(text) == Self.masked(hand.text), "\(c.name)")
            } else {
                #expect(text == hand.text, "\(c.name)")
            }
            #expect(check["perfdata_errors"] as? Int == 0, "\(c.name): \(check)")

            // The perfdata events of the first run, against the tokens by hand.
            let perf = Self.of(events, monitor: c.name, kind: "perfdata").prefix(hand.tokens.count)
            #expect(perf.count == hand.tokens.count, "\(c.name): \(perf) by hand: \(hand.tokens)")
            for (datum, token) in zip(perf, hand.tokens) {
                let eq = token.lastIndex(of: "=")!
                var label = String(token[..<eq])
                if label.hasPrefix("'") && label.hasSuffix("'") { label = String(label.dropFirst().dropLast()) }
                #expect(datum["label"] as? String == label, "\(c.name): \(datum) by hand: \(token)")
                let parts = token[token.index(after: eq)...].split(separator: ";", omittingEmptySubsequences: false)
                let value = try #require(Self.number(parts[0]), "\(c.name): \(token)")
                let uom = String(parts[0].drop { "+-0123456789.eE".contains($0) })
                #expect(datum["uom"] as? String == uom, "\(c.name): \(datum) by hand: \(token)")
                let got = datum["value"] as? Double ?? .nan
                if c.volatile {
                    // Two runs a moment apart (seconds, under CI's load: file_age 0 s by
                    // vigil, 2 s by hand): times within 5 s, counts and sizes within a tenth.
                    let slack = uom.hasSuffix("s") && uom != "B/s" ? 5.0 : max(2, abs(value) * 0.1)
                    #expect(abs(got - value) <= slack, "\(c.name): \(datum) by hand: \(token)")
                } else {
                    #expect(got == value, "\(c.name): \(datum) by hand: \(token)")
                }
                if parts.count > 1, !parts[1].isEmpty { #expect(datum["warn"] as? String == String(parts[1]), "\(c.name)") }
                if parts.count > 2, !parts[2].isEmpty { #expect(datum["crit"] as? String == String(parts[2]), "\(c.name)") }
                if parts.count > 3, !parts[3].isEmpty { #expect(datum["min"] as? Double == Self.number(parts[3]), "\(c.name)") }
                if parts.count > 4, !parts[4].isEmpty, !c.volatile || c.name != "disk" {
                    #expect(datum["max"] as? Double == Self.number(parts[4]), "\(c.name): \(datum) by hand: \(token)")
                }
            }
            // The check's cost is told.
            // (Its peak memory is the check's own, not vigil's that it was
            // started from, nor a reading taken between its exec and its
            // loader; absent when it ended before it could be read, as most
            // of these, which end within a few milliseconds, do.)
            #expect((check["duration"] as? Double ?? -1) >= 0, "\(c.name)")
            if let peak = check["peak_memory"] as? Int { #expect(peak >= 256 << 10 && peak < 32 << 20, "\(c.name): \(peak)") }
        }
        let measured = cases.filter { c in Self.of(events, monitor: c.name, kind: "check").first?["peak_memory"] != nil }
        #expect(!measured.isEmpty, "peak memory read for none")
        // A state other than OK on the first result is a change from the assumed OK.
        #expect(Self.of(events, monitor: "dummy_critical", kind: "state_change").first?["state"] as? String == "CRITICAL")
        #expect(Self.of(events, monitor: "dummy_ok", kind: "state_change").isEmpty)
    }

    // MARK: states

    /// A problem is SOFT for max_check_attempts - 1 results, checked again
    /// each retry interval, then HARD; the changes are occurrences with the
    /// state's severity; the recovery is HARD.
    @Test func softThenHardThenRecovered() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let flag = dir + "/broken"
        try TestEnv.write("", to: flag)
        let check = try Self.script("check_flag", in: dir, """
            if [ -e \(flag) ]; then echo "CRITICAL - broken | errors=3;1;2;0"; exit 2; fi
            echo "OK - mended | errors=0;1;2;0"; exit 0
            """)
        let monitors = """
              flag:
                plugin: nagios
                interval: 1s
                options: { command: [\(check)], spread: 0s, max_check_attempts: 3, retry_interval: 300ms }
            """
        let (output, events) = try run(monitors, in: dir, for: "3s") {
            usleep(1_800_000)
            unlink(flag)
        }
        #expect(output.status == 0, "\(output.stderr)")
        let checks = Self.of(events, monitor: "flag", kind: "check")
        let seen = checks.map { "\($0["state"]!) \($0["state_type"]!) \($0["attempt"]!)" }
        #expect(Array(seen.prefix(4)) == ["CRITICAL SOFT 1", "CRITICAL SOFT 2", "CRITICAL HARD 3", "CRITICAL HARD 3"] || seen.count < 4,
                "\(seen)")
        #expect(seen.contains("OK HARD 1"), "\(seen)")
        let changes = Self.of(events, monitor: "flag", kind: "state_change").map { "\($0["previous_state"]!)>\($0["state"]!) \($0["state_type"]!)" }
        #expect(changes == ["OK>CRITICAL SOFT", "CRITICAL>CRITICAL HARD", "CRITICAL>OK HARD"], "\(changes)")
        let severities = events.filter { $0["monitor"] as? String == "flag" && $0["kind"] as? String == "state_change" }
            .map { $0["severity"] as? String ?? "" }
        #expect(severities == ["critical", "critical", "info"], "\(severities)")
        // The perfdata is judged by its ranges, and named in the check event.
        let perf = Self.of(events, monitor: "flag", kind: "perfdata")
        #expect(perf.first?["level"] as? String == "critical" && perf.last?["level"] as? String == "ok")
        #expect(checks.first?["errors"] as? Double == 3)
    }

    // MARK: hostile checks

    /// The pids whose environment holds `mark`: a check and all it started,
    /// wherever they went (the mark is given to the check in `env`).
    static func processes(marked mark: String) -> [pid_t] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        let needle = Array("VIGIL_TEST_MARK=\(mark)".utf8)
        return names.compactMap { name -> pid_t? in
            guard let pid = pid_t(name), pid != getpid(),
                  let environ = FileManager.default.contents(atPath: "/proc/\(name)/environ") else { return nil }
            let bytes = [UInt8](environ)
            for entry in bytes.split(separator: 0) where Array(entry) == needle { return pid }
            return nil
        }
    }

    static func expectNoneLeft(_ mark: String, within seconds: Double = 3) {
        let deadline = Date().addingTimeInterval(seconds)
        while !processes(marked: mark).isEmpty && Date() < deadline { usleep(50_000) }
        #expect(processes(marked: mark).isEmpty, "left running: \(processes(marked: mark))")
    }

    @Test func hostileChecksEndAsUnknownOrCountedErrorsAndLeaveNothing() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let mark = UUID().uuidString
        let sleeper = try Self.script("check_sleeper", in: dir, "echo 'about to sleep'; sleep 30; echo 'OK - woke'")
        // Ignores SIGTERM, and forks a grandchild that ignores it too and holds stdout open.
        let stubborn = try Self.script("check_stubborn", in: dir, """
            trap '' TERM
            ( trap '' TERM; sleep 60; echo late ) &
            echo 'OK - but I will not go'
            while :; do sleep 1; done
            """)
        // Exits at once, leaving a grandchild that holds stdout open.
        let leaver = try Self.script("check_leaver", in: dir, """
            ( sleep 60 ) &
            echo 'OK - done, something left behind | t=1s'
            exit 0
            """)
        // 10 MB on stdout.
        let chatty = try Self.script("check_chatty", in: dir, """
            echo 'OK - a lot to say | first=1'
            head -c 10000000 /dev/zero | tr '\\0' 'x'
            echo
            exit 0
            """)
        // Every kind of bad perfdata in the bug list, beside good data.
        let junk = try Self.script("check_junk", in: dir, #"""
            printf 'OK - junk | good=1;2;3;0;10 a=abc =5 novalue b=1;2;3;4;5;6 c=1;x;3 d=inf e=0x10 f=1M2\r\n'
            printf "long line\n| g=2 'open=1\n"
            printf "h=1;~:;@0:5 i=nan\n\n\n"
            exit 0
            """#)
        let exit9 = try Self.script("check_exit9", in: dir, "echo 'what is nine'; exit 9")
        let segv = try Self.script("check_segv", in: dir, "echo 'dying'; kill -SEGV $$")
        let silent = try Self.script("check_silent", in: dir, "exit 0")
        var monitors = ""
        for (name, path) in [("sleeper", sleeper), ("stubborn", stubborn), ("leaver", leaver), ("chatty", chatty),
                             ("junk", junk), ("exit9", exit9), ("segv", segv), ("silent", silent)] {
            monitors += """
                  \(name):
                    plugin: nagios
                    interval: 1m
                    options: { command: [\(path)], spread: 0s, timeout: 1s, kill_grace: 300ms, env: { VIGIL_TEST_MARK: "\(mark)" } }

                """
        }
        let began = Date()
        let (output, events) = try run(monitors, in: dir, for: "4s")
        #expect(output.status == 0, "\(output.stderr)")
        #expect(Date().timeIntervalSince(began) < 20)
        func first(_ monitor: String) -> [String: Any] { Self.of(events, monitor: monitor, kind: "check").first ?? [:] }

        for name in ["sleeper", "stubborn"] {
            let check = first(name)
            #expect(check["state"] as? String == "UNKNOWN" && check["timed_out"] as? Bool == true, "\(name): \(check)")
            #expect((check["output"] as? String ?? "").contains("timed out after 1s"), "\(name): \(check)")
            #expect((check["duration"] as? Double ?? 0) < 3, "\(name): \(check)")
        }
        #expect((first("stubborn")["long_output"] as? String ?? "").contains("I will not go"))
        let leaver1 = first("leaver")
        #expect(leaver1["state"] as? String == "OK" && leaver1["t"] as? Double == 1, "\(leaver1)")
        #expect((leaver1["duration"] as? Double ?? 9) < 1, "the grandchild holding stdout delayed the result: \(leaver1)")
        let chatty1 = first("chatty")
        #expect(chatty1["output_cut"] as? Bool == true && chatty1["first"] as? Double == 1, "\(chatty1)")
        #expect(chatty1["perfdata_errors"] as? Int == 1, "the cut is one counted error: \(chatty1)")
        #expect((chatty1["long_output"] as? String ?? "").utf8.count <= 65_536)
        let junk1 = first("junk")
        #expect(junk1["state"] as? String == "OK" && junk1["good"] as? Double == 1 && junk1["g"] as? Double == 2, "\(junk1)")
        #expect(junk1["perfdata_errors"] as? Int == 10, "\(junk1)")
        #expect(Self.of(events, monitor: "junk", kind: "perfdata").map { $0["label"] as? String } == ["good", "g", "h"])
        let nine = first("exit9")
        #expect(nine["state"] as? String == "UNKNOWN" && nine["exit_status"] as? Int == 9 && nine["output"] as? String == "what is nine")
        let signalled = first("segv")
        #expect(signalled["state"] as? String == "UNKNOWN" && (signalled["output"] as? String ?? "").contains("signal 11"), "\(signalled)")
        let quiet = first("silent")
        #expect(quiet["state"] as? String == "OK" && (quiet["output"] as? String ?? "").contains("printed nothing"), "\(quiet)")
        Self.expectNoneLeft(mark)
    }

    /// vigil stopped while a check runs: the check is ended with it, and no
    /// result of the cut run is reported.
    /// Output past what one event may hold (1,024 fields, names of 256
    /// bytes, strings of 64 KiB) still gives its check event: the data past
    /// it in their perfdata events only, the text cut with an ellipsis.
    @Test func aCheckPastTheEventLimitsStillGivesItsCheckEvent() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let many = try Self.script("check_many", in: dir, """
            printf 'OK - many |'; i=0; while [ $i -lt 1500 ]; do printf ' l%d=%d' $i $i; i=$((i+1)); done; echo
            """)
        let long = try Self.script("check_long_label", in: dir, """
            echo "OK - long | $(head -c 300 /dev/zero | tr '\\0' x)=1 good=2"
            """)
        // 30,000 bytes that are not UTF-8 in the long output: three bytes each, repaired.
        let binary = try Self.script("check_binary", in: dir, """
            echo 'CRITICAL - binary'; head -c 30000 /dev/zero | tr '\\0' '\\377'; echo; exit 2
            """)
        let (output, events) = try run("""
              many: { plugin: nagios, interval: 1h, options: { command: [\(many)], spread: 0s } }
              long: { plugin: nagios, interval: 1h, options: { command: [\(long)], spread: 0s } }
              binary: { plugin: nagios, interval: 1h, options: { command: [\(binary)], spread: 0s } }
            """, in: dir, for: "3s")
        #expect(output.status == 0, "\(output.stderr)")
        let checks = Self.of(events, monitor: "many", kind: "check")
        #expect(checks.count == 1 && checks[0]["state"] as? String == "OK" && checks[0].count == 1024, "\(checks.first?.count ?? 0)")
        #expect(Self.of(events, monitor: "many", kind: "perfdata").count == 1500)
        let longCheck = Self.of(events, monitor: "long", kind: "check").first ?? [:]
        #expect(longCheck["good"] as? Double == 2 && longCheck.count > 2, "\(longCheck)")
        let binaryCheck = Self.of(events, monitor: "binary", kind: "check").first ?? [:]
        let text = binaryCheck["long_output"] as? String ?? ""
        #expect(binaryCheck["state"] as? String == "CRITICAL" && text.hasSuffix("…") && text.utf8.count <= 65_536, "\(text.utf8.count)")
        #expect(output.stderr.contains("1 perfdata values of \(long) are not fields of its check event"), "\(output.stderr)")
    }

    @Test func aRunningCheckEndsWithTheHost() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let mark = UUID().uuidString
        let slow = try Self.script("check_slow", in: dir, "trap '' TERM; sleep 50; echo 'OK - slow'")
        let monitors = """
              slow:
                plugin: nagios
                options: { command: [\(slow)], spread: 0s, timeout: 1m, kill_grace: 200ms, env: { VIGIL_TEST_MARK: "\(mark)" } }
            """
        let began = Date()
        let (output, events) = try run(monitors, in: dir, for: "1s")
        #expect(output.status == 0, "\(output.stderr)")
        #expect(Date().timeIntervalSince(began) < 10)
        #expect(Self.of(events, monitor: "slow", kind: "check").isEmpty)
        Self.expectNoneLeft(mark)
    }

    // MARK: the host's share

    /// No more checks at once than `concurrency`, each waiting its turn;
    /// and none waits when there are slots enough.
    @Test func checksRunNoMoreAtOnceThanTheBound() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = dir + "/log"
        let check = try Self.script("check_busy", in: dir, """
            echo "start $(date +%s.%N)" >> \(log)
            sleep 0.4
            echo "end $(date +%s.%N)" >> \(log)
            echo 'OK - busy'
            """)
        var monitors = ""
        for i in 0..<6 {
            monitors += "  busy\(i):\n    plugin: nagios\n    interval: 1m\n    options: { command: [\(check)], spread: 0s, concurrency: 2 }\n"
        }
        let (output, events) = try run(monitors, in: dir, for: "3s")
        #expect(output.status == 0, "\(output.stderr)")
        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        var marks = lines.map { line -> (Double, Int) in
            let parts = line.split(separator: " ")
            return (Double(parts[1]) ?? 0, parts[0] == "start" ? 1 : -1)
        }
        marks.sort { $0.0 < $1.0 || ($0.0 == $1.0 && $0.1 < $1.1) }
        var running = 0, most = 0
        for (_, step) in marks { running += step; most = max(most, running) }
        #expect(marks.count == 12)
        #expect(most == 2, "at most \(most) at once")
        let waited = (0..<6).compactMap { Self.of(events, monitor: "busy\($0)", kind: "check").first?["waited"] as? Double }
        #expect(waited.count == 6 && waited.filter { $0 > 0.3 }.count >= 3, "\(waited)")
    }

    /// A freed slot goes to the next waiting check at once: 300 quick
    /// checks at 1 s through 8 slots each run every interval, where a line
    /// in which each waiter looked for its turn every 20 ms ran about 34 a
    /// second (most of them never in 4 s).
    @Test func aFreedSlotGoesToTheNextCheckAtOnce() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var monitors = ""
        for i in 0..<300 {
            monitors += "  quick\(i):\n    plugin: nagios\n    interval: 1s\n    options: { command: [/bin/true], spread: 0s, concurrency: 8 }\n"
        }
        let (output, events) = try run(monitors, in: dir, for: "4s")
        #expect(output.status == 0, "\(output.stderr.suffix(2000))")
        let counts = (0..<300).map { Self.of(events, monitor: "quick\($0)", kind: "check").count }
        #expect(counts.allSatisfy { $0 >= 2 }, "\(counts.filter { $0 < 2 }.count) of 300 ran fewer than 2 checks in 4 s")
    }

    /// Checks of one interval start spread over it by their names, not at once.
    @Test func firstRunsAreSpreadOverTheInterval() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var monitors = ""
        for i in 0..<8 {
            monitors += "  spread\(i):\n    plugin: nagios\n    interval: 3s\n    options: { command: [check_dummy, \"0\", \"fine\"] }\n"
        }
        let (output, events) = try run(monitors, in: dir, for: "3500ms")
        #expect(output.status == 0, "\(output.stderr)")
        let times = events.filter { ($0["monitor"] as? String ?? "").hasPrefix("spread") && $0["kind"] as? String == "check" }
            .compactMap { $0["time"] as? String }.sorted()
        #expect(times.count >= 6, "\(times)")
        // Their shares of the interval differ: the first and the last are over a second apart.
        func seconds(_ t: String) -> Double {
            let clock = t.split(separator: "T")[1].dropLast()
            let parts = clock.split(separator: ":").compactMap { Double($0) }
            return parts[0] * 3600 + parts[1] * 60 + parts[2]
        }
        if let a = times.first, let b = times.last { #expect(seconds(b) - seconds(a) > 1, "\(times)") }
    }

    // MARK: refusals

    /// A check others can write, or in a directory others can write, is
    /// refused as a plugin would be, saying why; a check that is not there
    /// is unavailable. Neither stops the other monitors.
    @Test func untrustedAndMissingChecksAreRefused() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let writable = try Self.script("check_writable", in: dir, "echo OK; exit 0")
        chmod(writable, 0o777)
        let open = dir + "/open"
        mkdir(open, 0o755)
        chmod(open, 0o777)
        let inOpen = try Self.script("check_in_open", in: open, "echo OK; exit 0")
        let monitors = """
              writable:
                plugin: nagios
                options: { command: [\(writable)], spread: 0s }
              in_open:
                plugin: nagios
                options: { command: [\(inOpen)], spread: 0s }
              missing:
                plugin: nagios
                options: { command: [check_that_is_not_there], spread: 0s }
              fine:
                plugin: nagios
                options: { command: [check_dummy, "0", "fine"], spread: 0s }
            """
        let (output, events) = try run(monitors, in: dir, for: "2s")
        let all = output.stderr + events.map { "\($0)" }.joined(separator: "\n")
        #expect(all.contains("check \(writable) refused: writable by group or others"), "\(all)")
        #expect(all.contains("its directory \(open) is writable by group or others"), "\(all)")
        #expect(all.contains("check check_that_is_not_there is not there"), "\(all)")
        #expect(Self.of(events, monitor: "writable", kind: "check").isEmpty)
        #expect(Self.of(events, monitor: "fine", kind: "check").first?["state"] as? String == "OK")
    }

    /// What validate says of options that cannot work, where they are.
    @Test func validateSaysWhereAnOptionIsWrong() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
            monitors:
              a:
                plugin: nagios
                options: { command: [] }
              b:
                plugin: nagios
                options: { command: [relative/check_x] }
              c:
                plugin: nagios
                options: { command: [check_dummy], max_check_attempts: 0, env: { "1BAD": x } }
            """, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml"])
        #expect(result.status != 0)
        let text = result.stdout + result.stderr
        #expect(text.contains("m.yaml:4:"), "\(text)")
        #expect(text.contains("give the check to run"), "\(text)")
        #expect(text.contains("is a relative path"), "\(text)")
        #expect(text.contains("max_check_attempts") && text.contains("between 1 and 1000"), "\(text)")
    }
}
