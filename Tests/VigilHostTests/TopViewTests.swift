import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl
@testable import vigil

/// What `vigil top` draws, without a terminal: rates from two answers, and
/// screens that fit any size and carry no control character, whatever the
/// host's answer holds.
@Suite struct TopViewTests {
    static func status(pid: Int32 = 7, events: UInt64, beat: UInt64, written: UInt64, name: String = "beat",
                       lastError: String? = nil, lost: [String: UInt64] = [:]) -> TopStatus {
        TopStatus(pid: pid, version: "0.1.0", uptimeS: 3725, events: events,
                  monitors: [.init(name: name, state: "running", plugin: "heartbeat", events: beat, polls: 4, pollErrors: 1,
                                   crashes: 2, available: true, unavailableReason: nil, lastError: lastError)],
                  sinks: [.init(name: "out", type: "null", queueDepth: 3, queueCapacity: 65536, written: written,
                                dropped: 5, lost: lost)])
    }

    @Test func ratesAreTheChangeOfEachCountOverTheTimeBetweenTwoAnswers() {
        var model = TopModel()
        model.update(Self.status(events: 100, beat: 40, written: 90), at: 1_000_000_000)
        #expect(model.eventsPerSecond == nil)
        #expect(model.eventsPerSecond(monitor: "beat") == nil)
        model.update(Self.status(events: 150, beat: 60, written: 190), at: 1_500_000_000)
        #expect(model.eventsPerSecond == 100)
        #expect(model.eventsPerSecond(monitor: "beat") == 40)
        #expect(model.writtenPerSecond(sink: "out") == 200)
        #expect(model.eventsPerSecond(monitor: "nope") == nil)

        let lines = TopScreen.render(model, address: "unix:/s", columns: 200, rows: 30, now: 2_000_000_000)
        #expect(lines[0] == "vigil 0.1.0 (pid 7)   up 1h02m   150 events   100.0 events/s   1 monitor   1 sink")
        let beat = lines.first { $0.hasPrefix("beat ") }?.split(separator: " ").map(String.init) ?? []
        #expect(beat == ["beat", "running", "40.0", "60", "4", "3", "heartbeat"])
        let out = lines.first { $0.hasPrefix("out ") }?.split(separator: " ").map(String.init) ?? []
        #expect(out == ["out", "null", "3/65536", "200.0", "190", "5"])
        #expect(lines.last == "q: quit    unix:/s    every 1 s")
    }

    /// A monitor polled every second, asked every second: the events of one
    /// second fall into one interval or the next, by turns. Averaged over
    /// the last ten seconds the rate stays near 1 instead of 0, 2, 0, 2.
    @Test func ratesAreSteadyForAMonitorThatBeatsOnceASecond() {
        var model = TopModel()
        var shown: [Double] = []
        for second in 0..<30 {
            let beats = UInt64(second / 2 * 2)  // 0, 0, 2, 2, 4, 4, …: two at a time
            model.update(Self.status(events: beats, beat: beats, written: beats), at: Int64(second) * 1_000_000_000)
            if second >= 10, let rate = model.eventsPerSecond(monitor: "beat") { shown.append(rate) }
        }
        #expect(shown.count == 20)
        #expect(shown.allSatisfy { abs($0 - 1) <= 0.1 }, "\(shown)")
        #expect(model.eventsPerSecond == model.eventsPerSecond(monitor: "beat"))
    }

    @Test func aRestartedHostOrACountThatWentDownHasNoRate() {
        var model = TopModel()
        model.update(Self.status(events: 500, beat: 40, written: 90), at: 1_000_000_000)
        model.update(Self.status(pid: 8, events: 600, beat: 50, written: 100), at: 2_000_000_000)
        #expect(model.eventsPerSecond == nil, "another pid: another run")
        model.update(Self.status(pid: 8, events: 10, beat: 1, written: 0), at: 3_000_000_000)
        #expect(model.eventsPerSecond == nil)
        #expect(model.eventsPerSecond(monitor: "beat") == nil)
        #expect(model.writtenPerSecond(sink: "out") == nil)
        // Two answers at one instant: no division by zero.
        model.update(Self.status(pid: 8, events: 20, beat: 1, written: 0), at: 3_000_000_000)
        #expect(model.eventsPerSecond == nil)
        let lines = TopScreen.render(model, address: "unix:/s", columns: 100, rows: 30, now: 3_000_000_000)
        #expect(lines[0].contains("  - events/s"))
    }

    @Test func anUnreachableHostIsSaidWithWhyAndTheLastAnswerStays() {
        var model = TopModel()
        var lines = TopScreen.render(model, address: "unix:/s", columns: 80, rows: 10, now: 0)
        #expect(lines[0] == "vigil top: asking unix:/s…")
        model.failed("cannot reach the control socket unix:/s: refused", at: 1_000_000_000)
        model.failed("cannot reach the control socket unix:/s: refused again", at: 2_000_000_000)
        lines = TopScreen.render(model, address: "unix:/s", columns: 200, rows: 10, now: 4_000_000_000)
        #expect(lines[0] == "unreachable for 3 s, retrying every 1 s:")
        #expect(lines[1] == "  cannot reach the control socket unix:/s: refused again")
        #expect(lines.count == 10)

        model.update(Self.status(events: 1, beat: 1, written: 1), at: 5_000_000_000)
        #expect(model.connection == .live)
        model.failed("no reply", at: 6_000_000_000)
        lines = TopScreen.render(model, address: "unix:/s", columns: 200, rows: 20, now: 8_000_000_000)
        #expect(lines[0] == "unreachable for 2 s, retrying every 1 s:")
        #expect(lines[1] == "  no reply")
        #expect(lines[2] == "the last answer, 3 s old:")
        #expect(lines.contains { $0.hasPrefix("beat ") })
        // No rates from an old answer.
        #expect(lines.contains { $0.contains("  - events/s") })
    }

    /// Names and error texts from outside cannot drive the terminal, and
    /// no size of terminal makes a line wider or the screen taller than it is.
    @Test(arguments: [(0, 0), (1, 1), (2, 2), (5, 3), (20, 6), (80, 24), (100_000, 100_000), (-5, -5)])
    func hostileTextAndAnySizeFitTheScreen(columns: Int, rows: Int) {
        var model = TopModel()
        let evil = "x\u{1b}[2J\u{1b}]0;pwned\u{07}\n\r\u{9b}31m\u{7f}\u{202e}\u{200b}" + String(repeating: "é漢😀e\u{301}", count: 300)
        var status = Self.status(events: .max, beat: .max, written: .max, name: evil, lastError: evil,
                                 lost: [evil: .max, "queue_full": 3])
        status.version = evil
        status.uptimeS = 1e300
        for i in 0..<50 {
            status.monitors.append(.init(name: "m\(i)", state: evil, plugin: evil, events: UInt64(i), polls: .max,
                                         pollErrors: .max, crashes: .max, available: false, unavailableReason: evil,
                                         lastError: nil))
        }
        model.update(status, at: 1)
        model.update(status, at: 2)
        model.failed(evil, at: 3)
        for state in 0..<2 {
            if state == 1 { model.update(status, at: 4) }
            let lines = TopScreen.render(model, address: evil, columns: columns, rows: rows, now: 5)
            #expect(lines.count <= max(1, rows))
            for line in lines {
                #expect(TopScreen.width(line) <= max(1, min(columns, 4096)), "\(line)")
                #expect(!line.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }, "\(line)")
                #expect(!line.unicodeScalars.contains { $0.properties.generalCategory == .format }, "\(line)")
            }
            if (24...40).contains(rows), columns >= 80 {
                #expect(lines.contains { $0.hasPrefix("… ") && $0.contains(" more lines") })
                #expect(lines.last?.hasPrefix("q: quit") == true)
            }
        }
    }

    @Test func theErrorsCountPollErrorsAndCrashesWithoutOverflow() {
        var status = Self.status(events: 1, beat: 1, written: 1)
        status.monitors[0].pollErrors = .max
        status.monitors[0].crashes = .max
        var model = TopModel()
        model.update(status, at: 1)
        let lines = TopScreen.render(model, address: "a", columns: 300, rows: 20, now: 1)
        #expect(lines.contains { $0.contains(" \(UInt64.max) ") })
    }

    @Test func anAnswerTopCannotReadSaysWhatIsWrongAndWhere() throws {
        let good = #"{"pid":1,"version":"v","uptime_s":1.5,"events":3,"monitors":[{"name":"a","state":"running","plugin":"p","events":2,"polls":0,"poll_errors":0,"crashes":0,"available":true}],"sinks":[]}"#
        #expect(try TopStatus.decode(Array(good.utf8)).monitors[0].name == "a")
        #expect(throws: ControlError.self) { try TopStatus.decode(Array("not json".utf8)) }
        do {
            _ = try TopStatus.decode(Array(good.replacingOccurrences(of: #""events":2"#, with: #""events":-2"#).utf8))
            Issue.record("a negative count was read")
        } catch let error as ControlError {
            #expect(error.description.hasPrefix("the host's status cannot be read"), "\(error)")
        }
        do {
            _ = try TopStatus.decode(Array(good.replacingOccurrences(of: #""pid":1,"#, with: "").utf8))
            Issue.record("a status without a pid was read")
        } catch let error as ControlError {
            #expect(error.description == "the host's status has no 'pid'")
        }
        #expect(throws: ControlError.self) {
            try TopStatus.decode(Array(good.replacingOccurrences(of: #""events":3"#, with: #""events":1e400"#).utf8))
        }
    }
}
