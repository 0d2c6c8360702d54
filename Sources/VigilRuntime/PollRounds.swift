import Dispatch
import Foundation
import Synchronization
import VigilABI
import VigilCore

/// What a poll round asks of a monitor: poll now, under the monitor's own
/// queue, unless a call of it is in flight or its last poll was too recent.
protocol RoundMember: AnyObject, Sendable {
    /// Polls if `ticket` is still the member's membership; returns at once
    /// (without polling) when the member is busy.
    func pollInRound(ticket: UInt64)
}

/// The process's scheduled polls, run in rounds: at each tick of an
/// interval, one thread (the driver) polls every monitor of that interval in
/// turn, each under its monitor's queue so that a poll never overlaps the
/// monitor's other calls. Twenty monitors polled every second so cost the
/// host two thread wakes a second (the driver's and the watcher's), where a
/// timer each cost forty (libdispatch's timer thread, then a worker, for
/// each), and their threads never run all at once: a burst the cpu monitor
/// would read as `procs_running`.
///
/// A slow member must not hold up the others. The watcher wakes
/// `rescueDelay` after each tick: when the round's poll in progress began
/// more than `slowPoll` ago and members are still waiting (or a tick is
/// late), a new driver takes over the round and the schedule, and the old
/// one ends once its poll returns. A member whose poll took longer than
/// `slowPoll` leaves the rounds and polls on its own timer from then on
/// (`MonitorInstance`); a member whose call is still in flight is skipped,
/// so a hung plugin holds one thread, not one per round.
///
/// The driver and the watcher are threads of their own (not libdispatch's
/// pool, whose default queues run at most as many threads as there are
/// cores: a round blocked in a poll would wait for a free one).
package final class PollRounds: Sendable {
    /// The process's rounds.
    package static let shared = PollRounds()

    private struct Member {
        weak var instance: (any RoundMember)?
        let ticket: UInt64
    }

    /// One interval's members and its next tick (monotonic ns).
    private struct Group {
        var members: [Member] = []
        var nextTick: Int64
    }

    private struct State {
        var groups: [Int64: Group] = [:]
        /// The round being polled, for the watcher.
        var current: Round?
        /// The driver in charge; a driver whose number is not this one ends.
        var driver: UInt64 = 0
        var threadsStarted = false
        var closed = false
    }

    /// Never held while a member polls.
    private let state = Mutex(State())
    private let tickets = Atomic<UInt64>(0)
    /// Wakes the driver (a new interval may tick sooner) and the watcher.
    /// (Each sleeps at most until its next look, so a wake-up left over
    /// from an earlier change only makes it look once more.)
    private let driverWake = Wakeup()
    private let watcherWake = Wakeup()

    package init() {}

    deinit {
        state.withLock { $0.closed = true }
        driverWake.wake()
        watcherWake.wake()
    }

    /// How long a member's poll may take and stay in the rounds, for `interval`.
    static func slowPoll(interval: Int64) -> Int64 { rescueDelay(interval: interval) / 2 }
    /// How long after a tick the watcher looks at the round.
    static func rescueDelay(interval: Int64) -> Int64 { min(interval / 4, 250_000_000) }

    /// Adds `member` to the rounds of `interval` (from its next tick);
    /// returns its ticket, for `leave` and for the rounds to name it by.
    func join(_ member: any RoundMember, interval: Int64) -> UInt64 {
        precondition(interval > 0)
        let ticket = tickets.add(1, ordering: .relaxed).newValue
        let (start, newGroup): (Bool, Bool) = state.withLock { state in
            let isNew = state.groups[interval] == nil
            if isNew { state.groups[interval] = Group(nextTick: monotonicNanoseconds().addingSaturating(interval)) }
            state.groups[interval]!.members.append(Member(instance: member, ticket: ticket))
            let start = !state.threadsStarted
            state.threadsStarted = true
            return (start, isNew)
        }
        if start {
            startDriver(number: 0)
            startWatcher()
        } else if newGroup {
            // Its first tick may come before the one the driver waits for.
            driverWake.wake()
            watcherWake.wake()
        }
        return ticket
    }

    /// Takes the member with `ticket` out of the rounds of `interval`; the
    /// interval goes with its last member. A round already begun may still
    /// ask it, which its ticket check refuses.
    func leave(ticket: UInt64, interval: Int64) {
        state.withLock { state in
            guard var group = state.groups[interval] else { return }
            group.members.removeAll { $0.ticket == ticket || $0.instance == nil }
            state.groups[interval] = group.members.isEmpty ? nil : group
        }
    }

    /// The members of `interval`'s rounds now (tests).
    func memberCount(interval: Int64) -> Int {
        state.withLock { $0.groups[interval]?.members.count(where: { $0.instance != nil }) ?? 0 }
    }

    /// What a driver or the watcher does next.
    private enum Step {
        case end
        /// Wait on its semaphore until this monotonic time, or for ever.
        case wait(Int64?)
        case again
    }

    /// Runs `step` until it says `end`, waiting on `wake` in between
    /// without holding the rounds (so that they can go).
    private static func loop(_ wake: Wakeup, _ step: () -> Step?) {
        while true {
            switch step() ?? .end {
            case .end:
                return
            case .again:
                continue
            case .wait(let until?):
                wake.wait(until: until)
            case .wait(nil):
                wake.wait()
            }
        }
    }

    private func startDriver(number: UInt64, finishing round: Round? = nil) {
        // The default stack: in-process plugins poll on it, as they did on libdispatch's threads.
        startHostThread(named: "vigil-polls") { [weak self, driverWake] in
            round?.drain()
            Self.loop(driverWake) { self?.drive(number: number) }
        }
    }

    private func startWatcher() {
        startHostThread(named: "vigil-pollwatch", stackSize: 256 << 10) { [weak self, watcherWake] in
            Self.loop(watcherWake) { self?.watch() }
        }
    }

    /// One step of driver `number`: the time of the next tick, or the
    /// round of every group due, polled.
    private func drive(number: UInt64) -> Step {
        enum Next { case step(Step), poll(Round) }
        let next: Next = state.withLock { state in
            guard !state.closed, state.driver == number else { return .step(.end) }
            let now = monotonicNanoseconds()
            guard let tick = state.groups.values.map(\.nextTick).min() else { return .step(.wait(nil)) }
            guard tick <= now else { return .step(.wait(tick)) }
            var members: [(member: any RoundMember, ticket: UInt64)] = []
            var slow = Int64.max
            for (interval, var group) in state.groups where group.nextTick <= now {
                group.members.removeAll { $0.instance == nil }
                for member in group.members {
                    if let instance = member.instance { members.append((instance, member.ticket)) }
                }
                slow = min(slow, Self.slowPoll(interval: interval))
                // Ticks missed (a round that ran long, a suspended machine) are skipped, not caught up.
                let missed = (now - group.nextTick) / interval + 1
                group.nextTick = group.nextTick.addingSaturating(missed.multipliedSaturating(by: interval))
                state.groups[interval] = group
            }
            let round = Round(members: members, slow: slow)
            state.current = round
            return .poll(round)
        }
        guard case .poll(let round) = next else {
            if case .step(let step) = next { return step }
            return .end
        }
        round.drain()
        // A finished round keeps no monitor alive.
        state.withLock { state in
            if state.current === round { state.current = nil }
        }
        return .again
    }

    /// One look of the watcher, `rescueDelay` after a tick: a round held up
    /// by a slow poll is handed to a new driver.
    private func watch() -> Step {
        enum Look { case step(Step), rescue(UInt64, Round) }
        let look: Look = state.withLock { state in
            guard !state.closed else { return .step(.end) }
            let now = monotonicNanoseconds()
            guard let due = state.groups.map({ $0.value.nextTick.addingSaturating(Self.rescueDelay(interval: $0.key)) }).min() else {
                return .step(.wait(nil))
            }
            guard let round = state.current, round.isHeldUp(now: now, tickLate: due <= now) else {
                // After the next tick; a tick already late is looked at again a delay later.
                let delay = state.groups.keys.map { Self.rescueDelay(interval: $0) }.min() ?? 0
                return .step(.wait(max(due <= now ? now.addingSaturating(delay) : due, now + 1_000_000)))
            }
            state.driver &+= 1
            return .rescue(state.driver, round)
        }
        switch look {
        case .step(let step):
            return step
        case .rescue(let number, let round):
            startDriver(number: number, finishing: round)
            // The new driver claims its first member before the next look.
            return .wait(monotonicNanoseconds().addingSaturating(round.slow))
        }
    }
}

/// One tick's members, claimed one at a time by whichever threads drain it.
private final class Round: Sendable {  // identity: the driver's `current`
    let members: [(member: any RoundMember, ticket: UInt64)]
    /// How long a poll of it may take before the watcher calls it held up.
    let slow: Int64
    /// The next member to claim.
    private let next = Atomic<Int>(0)
    /// When the poll last claimed began (monotonic ns).
    private let claimedAt = Atomic<Int64>(0)
    /// Members whose poll has returned.
    private let polled = Atomic<Int>(0)

    init(members: [(member: any RoundMember, ticket: UInt64)], slow: Int64) {
        self.members = members
        self.slow = slow
    }

    /// Polls unclaimed members in turn until none is left.
    func drain() {
        while true {
            let index = next.add(1, ordering: .relaxed).oldValue
            guard index < members.count else { return }
            claimedAt.store(monotonicNanoseconds(), ordering: .relaxed)
            members[index].member.pollInRound(ticket: members[index].ticket)
            polled.add(1, ordering: .relaxed)
        }
    }

    /// A poll of it began more than `slow` ago and has not returned, while
    /// members wait behind it or the next tick is late.
    func isHeldUp(now: Int64, tickLate: Bool) -> Bool {
        guard polled.load(ordering: .relaxed) < members.count,
              now - claimedAt.load(ordering: .relaxed) > slow else { return false }
        return next.load(ordering: .relaxed) < members.count || tickLate
    }
}
