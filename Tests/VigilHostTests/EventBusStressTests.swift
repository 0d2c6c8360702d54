import Foundation
import Logging
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The bus under reloads: producers on several threads publish while another
/// thread reconfigures the sinks and routes hundreds of times. Not timed:
/// what is checked is where every event went. CI runs this suite again under
/// ThreadSanitizer (`swift test --sanitize=thread --filter EventBusStress`).
@Suite struct EventBusStressTests {
    /// A sink that keeps the sequence numbers it was given, and can be slow.
    final class Recorder: EventSink {
        let seqs = Mutex<[UInt64]>([])
        /// Each event's seq with its field `i` and its source, as the sink was given them.
        let values = Mutex<[UInt64: (Int64, String)]>([:])
        let sources = Mutex<Set<String>>([])
        let slow: Bool
        init(slow: Bool = false) { self.slow = slow }
        func write(_ batch: [Event], context: SinkContext) throws {
            seqs.withLock { s in s += batch.map(\.seq) }
            values.withLock { v in
                for e in batch { if case .int(let i)? = e[field: "i"], e.fields.count == 1 { v[e.seq] = (i, e.monitor) } }
            }
            sources.withLock { s in for e in batch { s.insert(e.monitor) } }
            if slow { usleep(200) }
        }
        func shutdown(context: SinkContext) {}
    }

    /// One transient sink: when it was put in force and taken out, counted
    /// in reloads begun and ended (see `Clock`).
    struct Life {
        let runner: SinkRunner
        let recorder: Recorder
        let patterns: [String]
        /// Reloads ended when it came in, reloads begun when it went (Int.max: still in).
        var from: Int
        var until = Int.max
    }

    /// What a producer saw around one publish: reloads ended before it
    /// began and reloads begun by the time it ended.
    struct Sent {
        let seq: UInt64
        let i: Int64
        let endedBefore: Int
        let begunAfter: Int
        let source: String
    }

    static var quietLogger: Logger {
        var logger = Logger(label: "stress")
        logger.logLevel = .critical
        return logger
    }

    static func runner(_ name: String, _ recorder: Recorder, match: [String], capacity: Int,
                       overflow: OverflowPolicy) -> SinkRunner {
        let config = SinkConfig(name: name, settings: NullSinkSettings(), match: match, queueCapacity: capacity, overflow: overflow,
                                location: SourceLocation(file: "stress", line: 1, column: 1))
        return SinkRunner(config: config, sink: recorder, logger: quietLogger)
    }

    static func compiler(_ slots: [SinkRunner?]) -> RouteCompiler {
        RouteCompiler(slots: slots.map { $0.map { RouteCompiler.SinkRule(match: $0.config.match, minSeverity: .debug) } })
    }

    @Test func everyEventIsDeliveredOnceToEachSinkRoutedToItForItsWholeLife() async throws {
        let producers = 4
        let perProducer = 12_000
        let reloads = 500
        // Slot 0 lives through the whole test: it blocks with a small queue
        // and a slow sink, so producers wait for room while reloads run.
        let keeper = Recorder(slow: true)
        let always = Self.runner("always", keeper, match: ["*"], capacity: 64, overflow: .block)
        var slots = [SinkRunner?](repeating: nil, count: SinkSet.capacity)
        slots[0] = always
        let bus = EventBus(sinks: [always], compiler: Self.compiler(slots))
        always.start()
        let routes = (0..<producers).map { bus.route(source: "p\($0)", kinds: ["sample"]) }

        let begun = Atomic<Int>(0), ended = Atomic<Int>(0)
        let sent = Mutex<[[Sent]]>(Array(repeating: [], count: producers))
        let threads = (0..<producers).map { p in
            Thread {
                var mine: [Sent] = []
                mine.reserveCapacity(perProducer)
                for i in 0..<perProducer {
                    let endedBefore = ended.load(ordering: .sequentiallyConsistent)
                    let seq = bus.publish(Event(time: Int64(i), monitor: "p\(p)", plugin: "stress", kind: "sample",
                                      fields: [Field("i", .int(Int64(i)))]),
                                route: routes[p], kindIndex: 0)
                    mine.append(Sent(seq: seq, i: Int64(i), endedBefore: endedBefore,
                                     begunAfter: begun.load(ordering: .sequentiallyConsistent), source: "p\(p)"))
                }
                sent.withLock { $0[p] = mine }
            }
        }
        for t in threads { t.start() }

        // The reloader: each round adds a sink, removes one, or changes one's
        // match (a new runner in the same slot), and makes and drops routes
        // of monitors that come and go.
        var lives: [Life] = []
        var live: [Int: Int] = [:]  // slot -> index in lives
        var generator = SystemRandomNumberGenerator()
        let patterns: [[String]] = [["*"], ["p0", "p1"], ["p2/*"], ["!p3"], ["p[13]/sample"], ["nothing"], ["*/sample", "!p0"]]
        let policies: [(Int, OverflowPolicy)] = [(1 << 20, .dropOldest), (1 << 20, .block), (1 << 20, .dropNewest)]
        var transient: [Route] = []
        for round in 0..<reloads {
            var next = slots
            let slot = 1 + Int.random(in: 0..<6, using: &generator)
            if live[slot] != nil, Bool.random(using: &generator) {
                next[slot] = nil  // removed
            } else {
                let (capacity, overflow) = policies.randomElement(using: &generator)!
                let recorder = Recorder()
                let match = patterns.randomElement(using: &generator)!
                next[slot] = Self.runner("s\(round)", recorder, match: match, capacity: capacity, overflow: overflow)
            }
            begun.wrappingAdd(1, ordering: .sequentiallyConsistent)
            bus.reconfigure(slots: next, compiler: Self.compiler(next))
            let endedNow = ended.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
            // The one that left (removed or replaced) drains what it has.
            if let index = live[slot], next[slot] !== slots[slot] {
                lives[index].until = endedNow  // reload `endedNow` (begun as `endedNow`) took it out
                lives[index].runner.beginStop(deadline: .max)
                live[slot] = nil
            }
            if let runner = next[slot], runner !== slots[slot] {
                runner.start()
                lives.append(Life(runner: runner, recorder: runner.sink as! Recorder, patterns: runner.config.match,
                                  from: endedNow))
                live[slot] = lives.count - 1
            }
            slots = next
            // Monitors come and go: their routes are compiled and released.
            transient.append(bus.route(source: "m\(round)", kinds: ["sample", "other"]))
            if transient.count > 5 { transient.removeFirst(Int.random(in: 1...transient.count, using: &generator)) }
            await Task.yield()
        }
        for t in threads { while !t.isFinished { try await Task.sleep(for: .milliseconds(5)) } }
        for life in lives where life.until == .max { life.runner.beginStop(deadline: .max) }
        always.beginStop(deadline: .max)
        for life in lives { #expect(await life.runner.join(until: monotonicNanoseconds() + 60_000_000_000)) }
        #expect(await always.join(until: monotonicNanoseconds() + 60_000_000_000))

        let all = sent.withLock { $0 }.flatMap { $0 }
        #expect(all.count == producers * perProducer)
        // Every event reached the sink that lived through it all, once, in order.
        let kept = keeper.seqs.withLock { $0 }
        #expect(kept.count == producers * perProducer)
        #expect(zip(kept, kept.dropFirst()).allSatisfy { $0 < $1 }, "seqs out of order in the sink that lived throughout")
        #expect(always.stats.lost.total == 0)
        #expect(bus.lastSequence == UInt64(producers * perProducer))

        #expect(Set(all.map(\.seq)) == Set(kept))
        // Field storage goes round between sinks and producers: every sink
        // got each event's own fields, whatever other sinks did with theirs.
        for (name, recorder) in [("always", keeper)] + lives.map({ ($0.runner.config.name, $0.recorder) }) {
            let values = recorder.values.withLock { $0 }
            let wrong = all.filter { sent in values[sent.seq].map { $0.0 != sent.i || $0.1 != sent.source } ?? false }
            #expect(wrong.isEmpty && values.count == recorder.seqs.withLock { $0.count },
                    "sink \(name): \(wrong.count) events with another event's fields")
        }

        // Each transient sink: nothing twice, in order, only what its match
        // takes, everything published wholly within its life, and nothing
        // lost (its queue is large, and it drained when it left).
        for life in lives {
            let name = "sink \(life.runner.config.name) (\(life.patterns), life \(life.from)..<\(life.until))"
            let got = life.recorder.seqs.withLock { $0 }
            #expect(zip(got, got.dropFirst()).allSatisfy { $0 < $1 }, "\(name): not in increasing seq order")
            let routes = RouteCompiler(sinks: [RouteCompiler.SinkRule(match: life.patterns, minSeverity: .debug)])
            let takes = Set((0..<producers).map { "p\($0)" }.filter {
                routes.routes(monitor: $0, kinds: ["sample"]).sinks(kindIndex: 0, severity: .info).contains(0)
            })
            let gotSet = Set(got)
            #expect(gotSet.count == got.count, "\(name): an event twice")
            let strays = all.filter { gotSet.contains($0.seq) && !takes.contains($0.source) }
            #expect(strays.isEmpty, "\(name): got \(strays.count) events its match does not take")
            let whole = all.filter { takes.contains($0.source) && $0.endedBefore >= life.from && $0.begunAfter < life.until }
            let missing = whole.filter { !gotSet.contains($0.seq) }
            #expect(missing.isEmpty, "\(name): \(missing.count) of \(whole.count) events published within its life not delivered")
            let stats = life.runner.stats
            #expect(UInt64(got.count) == stats.written && stats.accepted == stats.written && stats.lost.total == 0,
                    "\(name): accepted \(stats.accepted), written \(stats.written), lost \(stats.lost)")
        }
    }
}
