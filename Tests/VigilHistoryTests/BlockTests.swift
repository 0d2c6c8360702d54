import Testing
@testable import VigilHistory

@Suite struct HistoryBlockTests {
    @Test func fieldsShareTheirTimesAndAbsentValuesAreLeftOut() {
        var block = HistoryBlock(kinds: [.int, .double, .int])
        block.append(time: 1000, [.int(1), .double(0.5), .int(7)])
        block.append(time: 2000, [.int(2), nil, .int(7)])
        block.append(time: 3001, [.int(3), .double(1.5)])  // the last field missing from the event
        block.append(time: 4000, [.double(4), .int(2), .double(7.5)])  // the other kind: converted, or absent
        #expect(block.count == 4 && block.first == 1000 && block.last == 4000)
        #expect(block.points(field: 0).map(\.time) == [1000, 2000, 3001, 4000])
        #expect(block.points(field: 0).map(\.value) == [.int(1), .int(2), .int(3), .int(4)])
        #expect(block.points(field: 1).map(\.time) == [1000, 3001, 4000])
        #expect(block.points(field: 1).map(\.value) == [.double(0.5), .double(1.5), .double(2)])
        #expect(block.points(field: 2).map(\.time) == [1000, 2000], "7.5 is no integer: absent, not rounded")
        #expect(block.points(field: 3).isEmpty)
        let sealed = block.sealed()
        for field in 0..<3 { #expect(sealed.points(field: field).map(\.time) == block.points(field: field).map(\.time)) }
    }

    @Test func absencesPastSixtyFourPointsAreKeptApart() {
        var block = HistoryBlock(kinds: [.double])
        for point in 0..<300 { block.append(time: Int64(point) * 1000, [point % 3 == 0 ? nil : .double(Double(point))]) }
        let points = block.points(field: 0)
        #expect(points.count == 200)
        #expect(points.allSatisfy { $0.time / 1000 % 3 != 0 && $0.value == .double(Double($0.time / 1000)) })
    }

    /// The figure for the whole hour (≤ 1.6 bytes a point) is the
    /// bench's, on the history sink; this holds the columns to it on a mix
    /// like a host's: a stream's ten fields share their times.
    @Test func aHostLikeMixFitsInUnderOnePointSixBytesAPoint() {
        var rng = SplitMix(state: 6)
        var block = HistoryBlock(kinds: [.counter, .counter, .counter, .counter, .double, .double, .int, .int, .double, .int])
        var counters: [Int64] = [0, 0, 0, 0]
        var gauge = 40.0
        var time: Int64 = 1_764_460_800_000
        for _ in 0..<3600 {
            for i in counters.indices { counters[i] += Int64.random(in: 0...(i == 0 ? 100_000 : 10), using: &rng) }
            if Int.random(in: 0..<4, using: &rng) == 0 { gauge = (gauge + Double(Int.random(in: -50...50, using: &rng)) / 100) }
            let values: [HistoryValue?] = [
                .int(counters[0]), .int(counters[1]), .int(counters[2]), .int(counters[3]),  // bytes, packets, errors, drops
                .double((gauge * 100).rounded() / 100), .double(1500),                   // a percentage, an mtu
                .int(1), .int(10_000),                                                    // carrier up, speed
                .double(0), .int(Int64.random(in: 0...1, using: &rng) == 0 ? 3 : 3),      // idle rate, a state
            ]
            block.append(time: time + Int64.random(in: 0...3, using: &rng), values)
            time += 1000
        }
        let perPoint = Double(block.sealed().bytes) / Double(3600 * 10)
        #expect(perPoint < 1.6, "\(perPoint) bytes a point")
    }
}
