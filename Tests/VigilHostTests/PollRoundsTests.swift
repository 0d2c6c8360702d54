import Dispatch
import Foundation
import Synchronization
import Testing
import VigilABI
@testable import VigilRuntime

/// The rounds in process, with members that record their polls: one poll
/// at a time per round, a hung member rescued past, members that leave or
/// go are not polled, and an interval's timers go with its last member.
@Suite struct PollRoundsTests {
    /// Records when it was polled and how many polls of its rounds ran at
    /// once; `hangAt` makes poll number N block until `release`.
    final class Tally: Sendable {
        let running = Atomic<Int>(0)
        let mostAtOnce = Atomic<Int>(0)
    }

    final class Recorder: RoundMember, Sendable {
        let polls = Mutex<[Int64]>([])
        let tally: Tally
        let hangAt: Int
        let release = DispatchSemaphore(value: 0)
        let ticket = Mutex<UInt64?>(nil)
        /// A poll in progress: skipped, as MonitorInstance skips a call in flight.
        let busy = Atomic<Bool>(false)

        init(_ tally: Tally, hangAt: Int = 0) {
            self.tally = tally
            self.hangAt = hangAt
        }

        func pollInRound(ticket: UInt64) {
            guard self.ticket.withLock({ $0 }) == ticket,
                  !busy.exchange(true, ordering: .acquiring) else { return }
            defer { busy.store(false, ordering: .releasing) }
            let now = tally.running.add(1, ordering: .relaxed).newValue
            var most = tally.mostAtOnce.load(ordering: .relaxed)
            while now > most {
                let (exchanged, original) = tally.mostAtOnce.compareExchange(expected: most, desired: now, ordering: .relaxed)
                if exchanged { break }
                most = original
            }
            let count = polls.withLock { $0.append(monotonicNanoseconds()); return $0.count }
            if count == hangAt { release.wait() }
            tally.running.subtract(1, ordering: .relaxed)
        }

        var count: Int { polls.withLock { $0.count } }
        var largestGap: Int64 {
            polls.withLock { times in zip(times, times.dropFirst()).map { $1 - $0 }.max() ?? 0 }
        }
    }

    static func waitUntil(_ seconds: Double, _ condition: () -> Bool) {
        let end = monotonicNanoseconds() + Int64(seconds * 1e9)
        while !condition() && monotonicNanoseconds() < end { usleep(5_000) }
    }

    @Test func membersOfAnIntervalArePolledOneAfterAnotherAtEachTick() {
        let rounds = PollRounds()
        let tally = Tally()
        let members = (0..<8).map { _ in Recorder(tally) }
        let interval: Int64 = 50_000_000
        for member in members { member.ticket.withLock { $0 = rounds.join(member, interval: interval) } }
        Self.waitUntil(10) { members.allSatisfy { $0.count >= 6 } }
        #expect(members.allSatisfy { $0.count >= 6 }, "\(members.map { $0.count })")
        #expect(tally.mostAtOnce.load(ordering: .relaxed) == 1, "polls of one round never run at once")
        for member in members { rounds.leave(ticket: member.ticket.withLock { $0 }!, interval: interval) }
        #expect(rounds.memberCount(interval: interval) == 0)
    }

    @Test func aHungMemberIsPassedByTheRescueAndTheOthersKeepTheirRhythm() {
        let rounds = PollRounds()
        let tally = Tally()
        let interval: Int64 = 100_000_000
        // The hung member joins first, so it is ahead of the others in every round.
        let hung = Recorder(tally, hangAt: 2)
        let others = (0..<3).map { _ in Recorder(tally) }
        for member in [hung] + others { member.ticket.withLock { $0 = rounds.join(member, interval: interval) } }
        Self.waitUntil(10) { others.allSatisfy { $0.count >= 15 } }
        #expect(hung.count == 2, "a member whose poll is still running is skipped")
        #expect(others.allSatisfy { $0.count >= 15 }, "\(others.map { $0.count })")
        // A rescue comes rescueDelay (25 ms) after the tick: the others keep
        // the interval as their usual gap, and none waits for the hung poll
        // (which never ends): a late tick on a loaded machine may stretch one
        // gap (all three saw 209 ms once beside CI's other suites), never to
        // five intervals.
        for member in others {
            let gaps = member.polls.withLock { times in zip(times, times.dropFirst()).map { $1 - $0 }.sorted() }
            let median = gaps.isEmpty ? 0 : gaps[gaps.count / 2]
            #expect(median > interval / 2 && median < interval * 3 / 2, "median gap \(median) ns at \(interval) ns: \(gaps)")
            #expect(member.largestGap < 5 * interval, "largest gap \(member.largestGap) ns at \(interval) ns")
        }
        hung.release.signal()
        for member in [hung] + others { rounds.leave(ticket: member.ticket.withLock { $0 }!, interval: interval) }
    }

    @Test func aMemberThatLeftOrWentIsNotPolled() {
        let rounds = PollRounds()
        let tally = Tally()
        let interval: Int64 = 30_000_000
        let staying = Recorder(tally)
        let leaving = Recorder(tally)
        var going: Recorder? = Recorder(tally)
        staying.ticket.withLock { $0 = rounds.join(staying, interval: interval) }
        let leavingTicket = rounds.join(leaving, interval: interval)
        // Its own ticket check would refuse; the rounds must not even ask.
        leaving.ticket.withLock { $0 = leavingTicket }
        _ = rounds.join(going!, interval: interval)
        #expect(rounds.memberCount(interval: interval) == 3)
        rounds.leave(ticket: leavingTicket, interval: interval)
        going = nil
        #expect(rounds.memberCount(interval: interval) == 1, "a member that went is not counted")
        let before = leaving.count
        Self.waitUntil(10) { staying.count >= 5 }
        #expect(staying.count >= 5)
        #expect(leaving.count == before)
        rounds.leave(ticket: staying.ticket.withLock { $0 }!, interval: interval)
        #expect(rounds.memberCount(interval: interval) == 0)
        let after = staying.count
        usleep(100_000)
        #expect(staying.count <= after + 1, "at most a round already begun when the last member left")
    }

    @Test func itsThreadsCarryTheirNamesForTopAndPerf() throws {
        let rounds = PollRounds()
        let member = Recorder(Tally())
        let interval: Int64 = 1_000_000_000
        member.ticket.withLock { $0 = rounds.join(member, interval: interval) }
        defer { rounds.leave(ticket: member.ticket.withLock { $0 }!, interval: interval) }
        var names: [String] = []
        Self.waitUntil(5) {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            names = tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
                .map { $0.trimmingCharacters(in: .newlines) }
            return names.contains("vigil-polls") && names.contains("vigil-pollwatch")
        }
        #expect(names.contains("vigil-polls") && names.contains("vigil-pollwatch"), "\(Set(names))")
    }
}
