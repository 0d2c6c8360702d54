import Testing
@testable import VigilHistory

@Suite struct HistoryFileTests {
    static let t0: Int64 = 1_764_460_800_000

    static func filled() -> HistoryStore {
        let store = HistoryStore()
        var rng = SplitMix(state: 9)
        for i in 0..<400 as Range<Int64> {
            for device in ["eth0", "lo"] {
                var fields = [HistoryField("rx", .int(i * 1000 + Int64.random(in: 0...99, using: &rng)), counter: true),
                              HistoryField("up", .int(1)), HistoryField("load", .double(Double(i % 7) / 3))]
                if i > 150 { fields.append(HistoryField("late", .double(Double(i)))) }  // joins mid-block
                store.append(StreamKey(monitor: "net", kind: "if", identity: [.init("device", device)]),
                             time: (t0 + i * 1000) * 1_000_000, fields: fields)
            }
        }
        return store
    }

    /// What every series answers, every point and per minute.
    static func answers(_ store: HistoryStore) -> [String] {
        store.series().series.flatMap { info -> [String] in
            ["\(info.key.stream.identity[0].value)/\(info.key.field) \(info.first ?? 0)…\(info.last ?? 0)",
             "\(store.query(info.key, from: 0, to: .max, rate: false)?.buckets ?? [])",
             "\(store.query(info.key, from: 0, to: .max, step: 60_000)?.buckets ?? [])"]
        }
    }

    @Test func whatIsWrittenIsReadBackAsItWas() throws {
        let store = Self.filled()
        let bytes = store.fileBytes()
        let back = try HistoryStore.load(bytes, limits: HistoryLimits())
        // The blocks being filled were sealed: the same points, the same answers.
        #expect(Self.answers(back) == Self.answers(store))
        #expect(back.figures.series == store.figures.series && back.figures.points == store.figures.points)
        // And it goes on from there.
        back.append(StreamKey(monitor: "net", kind: "if", identity: [.init("device", "lo")]), time: (Self.t0 + 400_000) * 1_000_000,
                    fields: [HistoryField("rx", .int(400_000), counter: true)])
        let rx = back.series { $0.field == "rx" && $0.stream.identity[0].value == "lo" }.series[0]
        #expect(back.query(rx.key, from: 0, to: .max, rate: false)?.buckets.last?.last == 400_000)
        #expect(try HistoryStore.load(back.fileBytes(), limits: HistoryLimits()).figures.points == store.figures.points + 1)
    }

    @Test func aFileThatIsNotOneWhoseIsSaid() throws {
        let good = Self.filled().fileBytes()
        func refusal(_ bytes: [UInt8]) -> String {
            do throws(HistoryFileError) {
                _ = try HistoryStore.load(bytes, limits: HistoryLimits())
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(refusal([]) == "not a history file (no VIGILHST header)")
        #expect(refusal(Array("{\"json\": true}".utf8) + [UInt8](repeating: 0, count: 40)).hasPrefix("not a history file"))
        var version = good
        version[8] = 9
        #expect(refusal(version) == "a history file of version 9; this vigil reads version 1")
        #expect(refusal(Array(good.dropLast(10))).contains("cut short or grown"))
        var flipped = good
        flipped[good.count / 2] ^= 0x40
        #expect(refusal(flipped) == "its checksum does not match: the file was altered or damaged")
    }

    /// A file made to pass the checksum but lying in its counts is refused,
    /// never trusted: every mutation of a payload, checksum redone, either
    /// loads into a store whose queries answer or is refused with a reason.
    @Test func mutatedPayloadsWithAValidChecksumNeverTrapNorHang() {
        let good = Self.filled().fileBytes()
        var rng = SplitMix(state: 10)
        var refused = 0
        for round in 0..<3000 {
            var bytes = good
            for _ in 0..<(1 + round % 4) {
                let at = Int.random(in: HistoryFile.headerSize..<bytes.count, using: &rng)
                bytes[at] = round % 3 == 0 ? UInt8.random(in: 0...255, using: &rng) : bytes[at] ^ (1 << UInt8.random(in: 0...7, using: &rng))
            }
            // The checksum made right again, so that the counts are what is tried.
            let sum = HistoryFile.checksum(bytes[HistoryFile.headerSize...])
            for i in 0..<8 { bytes[20 + i] = UInt8(truncatingIfNeeded: sum >> (8 * UInt64(i))) }
            do throws(HistoryFileError) {
                let store = try HistoryStore.load(bytes, limits: HistoryLimits())
                for info in store.series(limit: 50).series {
                    _ = store.query(info.key, from: .min, to: .max)
                    _ = store.query(info.key, from: .min, to: .max, step: 60_000)
                }
            } catch {
                refused += 1
            }
        }
        #expect(refused > 100, "most mutations of counts are refused (\(refused) of 3000)")
    }

    @Test func whatIsReadBackIsHeldToTheLimitsOfTheStoreThatReadsIt() throws {
        let bytes = Self.filled().fileBytes()
        var limits = HistoryLimits()
        limits.maxSeries = 4
        limits.retention = 120_000
        let small = try HistoryStore.load(bytes, limits: limits)
        #expect(small.figures.series == 4 && small.losses.seriesRefused == 4)
        let points = small.series().series.compactMap { small.query($0.key, from: 0, to: .max, rate: false)?.buckets.count }
        #expect(points.allSatisfy { $0 <= 240 }, "blocks past a 2 min retention went: \(points)")
    }
}
