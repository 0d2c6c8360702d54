import Logging
import Synchronization
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The plugin log rate limit on its own, time passed in: no test sleeps.
struct PluginLogLimitTests {
    static let second: Int64 = 1_000_000_000

    @Test func aBurstThenTheRateThenANoteOfWhatWasDropped() {
        var limit = PluginLogLimit(now: 0)
        // The burst: 100 lines at once.
        for _ in 0..<100 { #expect(limit.admit(now: 0) == (true, nil, false)) }
        // The 101st is dropped and starts a count; the next ones add to it.
        #expect(limit.admit(now: 0) == (false, nil, true))
        for _ in 0..<9 { #expect(limit.admit(now: 0) == (false, nil, false)) }
        #expect(limit.noteDue == Self.second)
        // 50 ms later one token is back (20 a second): written, no note yet.
        #expect(limit.admit(now: Self.second / 20) == (true, nil, false))
        #expect(limit.takeNote(now: Self.second / 2) == nil)
        // A second after the first drop the note is due, with the next line.
        let verdict = limit.admit(now: Self.second)
        #expect(verdict.write)
        #expect(verdict.note == PluginLogLimit.Note(count: 10, nanoseconds: Self.second))
        #expect(limit.noteDue == nil)
    }

    @Test func aNoteIsDueFromATimerAndAtStop() {
        var limit = PluginLogLimit(now: 0)
        for _ in 0..<150 { _ = limit.admit(now: 0) }
        #expect(limit.takeNote(now: Self.second - 1) == nil)
        #expect(limit.takeNote(now: Self.second) == PluginLogLimit.Note(count: 50, nanoseconds: Self.second))
        #expect(limit.takeNote(now: 2 * Self.second) == nil)
        // At stop, what was dropped is said at once.
        for _ in 0..<100 { _ = limit.admit(now: 2 * Self.second) }
        #expect(limit.takeNote(now: 2 * Self.second + 1, force: true)?.count == 60)
        #expect(PluginLogLimit.text(of: PluginLogLimit.Note(count: 60, nanoseconds: 1_500_000_000), owner: "monitor m",
                                    config: limit.config)
                == "60 log lines of monitor m suppressed in the last 1.5 s (at most 100 at once, then 20 a second)")
    }

    @Test func aQuietSpellRefillsTheBurstAndNoMore() {
        var limit = PluginLogLimit(now: 0)
        for _ in 0..<100 { _ = limit.admit(now: 0) }
        #expect(!limit.admit(now: 0).write)
        // An hour of quiet gives back the burst, not an hour's worth.
        let later = 3600 * Self.second
        for _ in 0..<100 { #expect(limit.admit(now: later).write) }
        #expect(!limit.admit(now: later).write)
    }
}

/// The gate a monitor's and an output's lines pass alike.
@Suite struct PluginLogGateTests {
    @Test func linesOverTheRateAreCountedKeptForACrashReportAndSaidAtStop() {
        let memory = MemoryLog()
        let gate = PluginLogGate(owner: "sink out", plugin: "graphite", logger: Logger(label: "t") { _ in MemoryLogHandler(log: memory) })
        for i in 0..<150 { gate.log(level: 2, message: "line \(i)", cut: i == 149 ? 10 : 0) }
        #expect(gate.suppressed.load(ordering: .relaxed) == 50 && gate.cuts.load(ordering: .relaxed) == 1)
        #expect(gate.recentLines == ["line 145", "line 146", "line 147", "line 148", "line 149… [cut 10 bytes]"])
        #expect(gate.lastWords.hasPrefix("; its last log lines: line 145 | "))
        let written = memory.entries.filter { $0.message.hasPrefix("line ") }
        #expect(written.count == 100 && written.allSatisfy { $0.metadata["plugin"] == "graphite" })
        gate.flush()
        let notes = memory.entries.filter { $0.message.contains("suppressed") }
        #expect(notes.count == 1 && notes[0].level == .warning)
        #expect(notes.first?.message.hasPrefix("50 log lines of sink out suppressed in the last") == true)
        gate.flush()  // said once
        #expect(memory.entries.filter { $0.message.contains("suppressed") }.count == 1)
    }
}
