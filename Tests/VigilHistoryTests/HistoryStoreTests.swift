import Testing
@testable import VigilHistory

@Suite struct HistoryStoreTests {
    static let eth0 = StreamKey(monitor: "netdev", kind: "interface", identity: [.init("device", "eth0")])
    static let t0: Int64 = 1_764_460_800_000  // ms, on a minute
    static func ns(_ ms: Int64) -> Int64 { ms * 1_000_000 }

    @Test func everyPointComesBackAndCountersAsRates() throws {
        let store = HistoryStore()
        for i in 0..<300 as Range<Int64> {
            store.append(Self.eth0, time: Self.ns(Self.t0 + i * 1000 + i % 3), fields: [
                HistoryField("rx_bytes", .int(i * 2048), counter: true),
                HistoryField("mtu", .int(1500)),
                HistoryField("up", .double(i % 10 == 0 ? 0 : 1)),
            ])
        }
        let series = SeriesKey(stream: Self.eth0, field: "up")
        let all = try #require(store.query(series, from: Self.t0, to: Self.t0 + 300_000))
        #expect(all.step == 0 && !all.minutes && !all.counter)
        #expect(all.buckets.count == 300)
        #expect(all.buckets.map(\.last) == (0..<300).map { $0 % 10 == 0 ? 0 : 1 })
        #expect(all.buckets.map(\.time) == (0..<300 as Range<Int64>).map { Self.t0 + $0 * 1000 + $0 % 3 })

        let rx = try #require(store.query(SeriesKey(stream: Self.eth0, field: "rx_bytes"), from: Self.t0, to: Self.t0 + 300_000))
        #expect(rx.counter && rx.buckets.count == 299)
        // 2048 bytes in 1000 ms, or 999, or 1002.
        #expect(rx.buckets.allSatisfy { abs($0.last - 2048) < 5 }, "\(rx.buckets.prefix(3))")
        let raw = try #require(store.query(SeriesKey(stream: Self.eth0, field: "rx_bytes"), from: Self.t0, to: Self.t0 + 5000, rate: false))
        #expect(raw.buckets.map(\.last) == [0, 2048, 4096, 6144, 8192])

        let stepped = try #require(store.query(series, from: Self.t0, to: Self.t0 + 299_999, step: 10_000))
        #expect(stepped.buckets.count == 30)
        #expect(stepped.buckets.allSatisfy { $0.min == 0 && $0.max == 1 && $0.count == 10 && abs($0.mean - 0.9) < 1e-9 })
        #expect(store.query(SeriesKey(stream: Self.eth0, field: "nope"), from: 0, to: .max) == nil)
    }

    @Test func aCounterResetIsAnIncreaseNotANegativeRate() {
        let rates = HistoryStore.rates([(0, 100), (1000, 300), (2000, 50), (3000, 150)])
        #expect(rates.map(\.value) == [200, 50, 100])
    }

    @Test func aMinutesMeanOfValuesNearTheLargestDoubleIsNoInfinity() throws {
        var limits = HistoryLimits()
        limits.retention = 60_000
        let store = HistoryStore(limits: limits)
        for i in 0..<180 as Range<Int64> {
            store.append(Self.eth0, time: Self.ns(Self.t0 + i * 1000), fields: [HistoryField("huge", .double(i % 2 == 0 ? 1.7e308 : 1.6e308))])
        }
        let answer = try #require(store.query(SeriesKey(stream: Self.eth0, field: "huge"), from: Self.t0, to: Self.t0 + 180_000, step: 120_000))
        #expect(!answer.buckets.isEmpty)
        for bucket in answer.buckets {
            #expect(bucket.mean.isFinite && bucket.mean >= 1.6e308 && bucket.mean <= 1.7e308, "\(bucket)")
        }
    }

    @Test func theMinuteTierKeepsMinMaxMeanAndLastPastTheRetention() throws {
        var limits = HistoryLimits()
        limits.retention = 10 * 60_000
        let store = HistoryStore(limits: limits)
        // 30 minutes at 1 s: a sawtooth of 0…59 each minute, and a counter of 10/s.
        for i in 0..<1800 as Range<Int64> {
            store.append(Self.eth0, time: Self.ns(Self.t0 + i * 1000), fields: [
                HistoryField("level", .double(Double(i % 60))), HistoryField("packets", .int(i * 10), counter: true),
            ])
        }
        let level = SeriesKey(stream: Self.eth0, field: "level")
        // The first 20 minutes are past the retention of every point: the minute tier answers.
        let old = try #require(store.query(level, from: Self.t0, to: Self.t0 + 20 * 60_000 - 1))
        #expect(old.minutes && old.step == 60_000)
        #expect(old.buckets.count == 20)
        #expect(old.buckets.allSatisfy { $0.min == 0 && $0.max == 59 && $0.mean == 29.5 && $0.last == 59 })
        let packets = try #require(store.query(SeriesKey(stream: Self.eth0, field: "packets"), from: Self.t0, to: Self.t0 + 20 * 60_000 - 1))
        #expect(packets.buckets.count == 19 && packets.buckets.allSatisfy { $0.last == 10 }, "\(packets.buckets.prefix(2))")
        // Every point of the last ten minutes (less a block being filled) is kept.
        let recent = try #require(store.query(level, from: Self.t0 + 21 * 60_000, to: Self.t0 + 1800_000))
        #expect(!recent.minutes && recent.buckets.count == 540)
    }

    @Test func pastMaxMemoryTheOldestBlocksGoAndAreCounted() {
        var limits = HistoryLimits()
        limits.maxMemory = 1 << 20
        let store = HistoryStore(limits: limits)
        var rng = SplitMix(state: 7)
        for i in 0..<3600 as Range<Int64> {
            for d in 0..<20 {
                let key = StreamKey(monitor: "m", kind: "k", identity: [.init("i", "\(d)")])
                store.append(key, time: Self.ns(Self.t0 + i * 1000), fields: (0..<5).map {
                    HistoryField("f\($0)", .double(Double(bitPattern: rng.next())))  // noise: no compression
                })
            }
            #expect(store.bytes <= limits.maxMemory + 64 << 10, "at \(i): \(store.bytes)")
        }
        #expect(store.losses.memoryPoints > 0)
        // Every point of the oldest blocks went; the newest are kept, and the minutes of the whole hour.
        let series = store.series().series
        #expect(series.count == 100 && series.allSatisfy { ($0.first ?? 0) > Self.t0 + 60_000 && $0.last == Self.t0 + 3_599_000 })
        let f0 = SeriesKey(stream: StreamKey(monitor: "m", kind: "k", identity: [.init("i", "0")]), field: "f0")
        let whole = store.query(f0, from: 0, to: .max)
        #expect(whole?.minutes == true && whole?.buckets.first?.time == Self.t0)
        let recent = store.query(f0, from: Self.t0 + 3_590_000, to: .max)
        #expect(recent?.minutes == false && recent?.buckets.count == 10)
    }

    @Test func pastMaxSeriesNewFieldsAreRefusedAndCountedTheRestKept() {
        var limits = HistoryLimits()
        limits.maxSeries = 3
        let store = HistoryStore(limits: limits)
        store.append(Self.eth0, time: Self.ns(Self.t0), fields: ["a", "b", "c", "d", "e"].map { HistoryField($0, .int(1)) })
        store.append(Self.eth0, time: Self.ns(Self.t0 + 1000), fields: ["a", "e"].map { HistoryField($0, .int(2)) })
        #expect(store.seriesCount == 3)
        #expect(store.losses.seriesRefused == 3)
        #expect(store.series().series.map(\.key.field) == ["a", "b", "c"])
        #expect(store.query(SeriesKey(stream: Self.eth0, field: "a"), from: 0, to: .max)?.buckets.map(\.last) == [1, 2])
    }

    @Test func aFloodOfNewIdentitiesMakesNothingPastMaxSeries() {
        var limits = HistoryLimits()
        limits.maxSeries = 10
        let store = HistoryStore(limits: limits)
        for i in 0..<100_000 as Range<Int64> {
            store.append(StreamKey(monitor: "m", kind: "k", identity: [.init("id", "\(i)")]), time: Self.ns(Self.t0 + i),
                         fields: [HistoryField("a", .int(i)), HistoryField("b", .int(i))])
        }
        #expect(store.seriesCount == 10 && store.series().series.count == 10)
        #expect(store.losses.seriesRefused == 2 * 100_000 - 10)
        #expect(store.bytes < 64 << 10, "\(store.bytes) bytes for 10 series")
    }

    @Test func aFieldThatJoinsLaterAndTimeThatGoesBack() throws {
        let store = HistoryStore()
        store.append(Self.eth0, time: Self.ns(Self.t0), fields: [HistoryField("a", .int(1))])
        store.append(Self.eth0, time: Self.ns(Self.t0 + 1000), fields: [HistoryField("a", .int(2)), HistoryField("b", .double(0.5))])
        store.append(Self.eth0, time: Self.ns(Self.t0 + 500), fields: [HistoryField("a", .int(9))])
        store.append(Self.eth0, time: Self.ns(Self.t0 + 2000), fields: [HistoryField("b", .double(1.5))])
        #expect(store.query(SeriesKey(stream: Self.eth0, field: "a"), from: 0, to: .max)?.buckets.map(\.last) == [1, 2])
        #expect(store.query(SeriesKey(stream: Self.eth0, field: "b"), from: 0, to: .max)?.buckets.map(\.time) == [Self.t0 + 1000, Self.t0 + 2000])
        #expect(store.losses.outOfOrder == 1)
    }

    @Test func aQueryForABillionPointsIsAnsweredInAtMostElevenThousand() throws {
        let store = HistoryStore()
        for i in 0..<20_000 as Range<Int64> { store.append(Self.eth0, time: Self.ns(Self.t0 + i), fields: [HistoryField("a", .int(i))]) }
        let a = SeriesKey(stream: Self.eth0, field: "a")
        for step: Int64 in [0, 1] {
            let answer = try #require(store.query(a, from: .min, to: .max, step: step))
            #expect(answer.buckets.count == 10_000)
            #expect(answer.step == 2, "20,000 points of 1 ms in steps of 2 ms")
            #expect(answer.buckets.last?.last == 19_999)
        }
    }

    @Test func seriesAreListedInOrderWithinALimit() {
        let store = HistoryStore()
        for device in ["lo", "eth1", "eth0"] {
            store.append(StreamKey(monitor: "netdev", kind: "interface", identity: [.init("device", device)]),
                         time: Self.ns(Self.t0), fields: [HistoryField("rx", .int(0), counter: true), HistoryField("mtu", .int(1500))])
        }
        let listed = store.series(limit: 4) { $0.field == "rx" || $0.field == "mtu" }
        #expect(listed.more)
        #expect(listed.series.map { "\($0.key.stream.identity[0].value)/\($0.key.field)" } == ["eth0/rx", "eth0/mtu", "eth1/rx", "eth1/mtu"])
        #expect(listed.series[0].counter && !listed.series[1].counter)
    }
}
