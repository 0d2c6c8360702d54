import Dispatch
import VigilCore
import VigilIsolation

/// When a monitor polls: in the rounds of its interval (`PollRounds`), or
/// on a timer of its own once a poll was too slow for them (and from then
/// on). Used on the monitor's queue only.
final class PollSchedule {
    private let interval: Int64
    private let rounds: PollRounds
    private let queue: DispatchQueue
    /// Its own poll timer, for a monitor too slow for the rounds.
    private var timer: DispatchSourceTimer?
    /// Its membership of the rounds, while it polls in them.
    private var ticket: UInt64?
    /// A poll took longer than the rounds allow: it polls on its own timer.
    private var alone = false

    init(interval: Int64, rounds: PollRounds, queue: DispatchQueue) {
        self.interval = interval
        self.rounds = rounds
        self.queue = queue
    }

    /// Whether a poll that took `took` is too slow for the rounds.
    func tooSlowForRounds(_ took: Int64) -> Bool { took > PollRounds.slowPoll(interval: interval) }

    /// Polls every interval from now on, with `poll` on the timer or
    /// `member` in the rounds; `firstTook` is how long the first poll took.
    func start(member: any RoundMember, firstTook: Int64, poll: @escaping @Sendable () -> Void) {
        stop()
        if alone || tooSlowForRounds(firstTook) {
            alone = true
            let timer = DispatchSource.makeTimerSource(queue: queue)
            let leeway = DispatchTimeInterval.nanoseconds(Int(min(interval / 50, 10_000_000)))
            timer.schedule(deadline: .now() + .nanoseconds(Int(interval)), repeating: .nanoseconds(Int(interval)), leeway: leeway)
            timer.setEventHandler(handler: poll)
            self.timer = timer
            timer.resume()
        } else {
            ticket = rounds.join(member, interval: interval)
        }
    }

    /// Whether `ticket` is the membership it holds now (a round's call
    /// from before a stop or a restart is not).
    func holds(_ ticket: UInt64) -> Bool { self.ticket == ticket }

    /// No more scheduled polls.
    func stop() {
        timer?.cancel()
        timer = nil
        if let ticket {
            self.ticket = nil
            rounds.leave(ticket: ticket, interval: interval)
        }
    }
}

/// A quarantined monitor's wait for its plugin file to change (path, inode,
/// size and time as `PluginFileIdentity` keys it), checked every 5 s on the
/// monitor's queue until cancelled.
final class QuarantineWatch {
    private let timer: DispatchSourceTimer

    /// Calls `changed` (on `queue`) at each check that finds the file
    /// changed since now.
    init(path: String, queue: DispatchQueue, changed: @escaping @Sendable () -> Void) {
        let before = PluginFileIdentity(path: path)
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .seconds(5), repeating: .seconds(5), leeway: .seconds(1))
        timer.setEventHandler {
            let now = PluginFileIdentity(path: path)
            if now != nil && now != before { changed() }
        }
        timer.resume()
    }

    func cancel() { timer.cancel() }

    deinit { timer.cancel() }
}
