import Testing
@testable import VigilHistory

/// A seeded generator, so that a failure names a case that can be run again.
struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

@Suite struct BitsTests {
    @Test func whatIsWrittenIsReadBackAtEveryWidthAndOffset() {
        var rng = SplitMix(state: 1)
        var writer = BitWriter()
        var written: [(UInt64, Int)] = []
        for _ in 0..<20_000 {
            let width = Int.random(in: 0...64, using: &rng)
            let value = rng.next()
            writer.write(value, width: width)
            written.append((width == 64 ? value : value & ((1 << UInt64(width)) &- 1), width))
        }
        var reader = BitReader(writer)
        for (value, width) in written { #expect(reader.read(width: width) == value) }
        #expect(reader.remaining == 0 && !reader.overran)
        #expect(reader.read(width: 3) == 0 && reader.overran, "past the end: zeros, and said")
    }

    @Test func aCompactedWriterHoldsTheSameBitsInExactlyTheirWords() {
        var writer = BitWriter()
        for i in 0..<1000 { writer.write(UInt64(i), width: 13) }
        let compact = writer.compacted()
        #expect(compact == writer)
        #expect(compact.words.count == (1000 * 13 + 63) / 64)
        // At most malloc's rounding (glibc's chunks were seen to add 3 words
        // to 204), where the writer's doubling would have left up to twice the count.
        #expect(compact.words.capacity <= compact.words.count + 4, "\(compact.words.capacity) for \(compact.words.count)")
    }
}

@Suite struct IntColumnTests {
    static func roundTrip(_ values: [Int64]) -> IntColumn {
        var column = IntColumn()
        for value in values { column.append(value) }
        #expect(column.values == values)
        #expect(column.sealed().values == values)
        return column
    }

    @Test func anyInt64AfterAnyOtherComesBackAsItself() {
        let edges: [Int64] = [0, .max, .min, .max, -1, .min, 1, .max - 1, .min + 1, 0, 0, .min, .min, .max, .max]
        _ = Self.roundTrip(edges)
        var rng = SplitMix(state: 2)
        _ = Self.roundTrip((0..<10_000).map { _ in Int64(bitPattern: rng.next()) })
        // Every bucket's edges: differences of differences at ±2^(w-1).
        var values: [Int64] = [0]
        for width in [7, 9, 12, 20, 32, 64] {
            let big = width == 64 ? Int64.max : (1 << Int64(width - 1))
            for dod in [big - 1, big, -big, -big - 1, -(big - 1), big &+ 1] {
                let delta = (values.count > 1 ? values[values.count - 1] &- values[values.count - 2] : 0) &+ dod
                values.append(values.last! &+ delta)
            }
        }
        _ = Self.roundTrip(values)
    }

    @Test func differencesComeBackToo() {
        var column = IntColumn(secondOrder: false)
        let values: [Int64] = [5, 5, 5, 9, 9, .max, .min, 0, -3, -3, 1 << 40]
        for value in values { column.append(value) }
        #expect(column.values == values && column.sealed().values == values)
        var level = IntColumn(secondOrder: false)
        for _ in 0..<1000 { level.append(8 << 30) }
        #expect(level.bits.count == 64 + 999, "a level that does not move: a bit a point")
    }

    @Test func aSteadyCounterCostsABitAPoint() {
        let column = Self.roundTrip((0..<3600).map { Int64(1_000_000_000) + Int64($0) * 4096 })
        // 64 bits, the first difference (5 + 20 bits), then a bit each.
        #expect(column.bits.count == 64 + 25 + 3598)
    }

    @Test func pollTimesWithJitterCostAboutNineBits() {
        var rng = SplitMix(state: 3)
        var time: Int64 = 1_764_460_800_000
        var times: [Int64] = []
        for _ in 0..<3600 {
            times.append(time + Int64.random(in: 0...3, using: &rng))
            time += 1000
        }
        let column = Self.roundTrip(times)
        #expect(Double(column.bits.count) / 3600 < 9.5, "\(Double(column.bits.count) / 3600) bits a time")
    }
}

@Suite struct DoubleColumnTests {
    static func roundTrip(_ values: [Double]) -> DoubleColumn {
        var column = DoubleColumn()
        for value in values { column.append(value) }
        let back = column.values
        #expect(back.map(\.bitPattern) == values.map(\.bitPattern), "bit for bit, NaN payloads and -0 included")
        #expect(column.sealed().values.map(\.bitPattern) == values.map(\.bitPattern))
        return column
    }

    @Test func everyDoubleComesBackBitForBit() {
        let specials: [Double] = [0, -0.0, .nan, -.nan, Double(bitPattern: 0x7FF4_0000_0000_0001), .infinity, -.infinity,
                                  .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .greatestFiniteMagnitude,
                                  .leastNormalMagnitude, 1, 1, 1.5, 0, .nan, .nan, 3.25, -3.25]
        _ = Self.roundTrip(specials)
        var rng = SplitMix(state: 4)
        _ = Self.roundTrip((0..<10_000).map { _ in Double(bitPattern: rng.next()) })
        // Values whose XOR has more than 31 leading zeros (the field holds 31 at most).
        _ = Self.roundTrip((0..<1000).map { Double(bitPattern: 0x4000_0000_0000_0000 | UInt64($0 % 7)) })
    }

    @Test func anUnchangedValueCostsABit() {
        let column = Self.roundTrip(Array(repeating: 42.5, count: 3600))
        #expect(column.bits.count == 64 + 3599)
    }

    @Test func aGaugeOfTwoDecimalsCostsWhatGorillaSays() {
        // A percentage with two decimals wandering slowly: Gorilla's paper
        // finds most such values in the window of the one before.
        var rng = SplitMix(state: 5)
        var value = 40.0
        var values: [Double] = []
        for _ in 0..<3600 {
            if Int.random(in: 0..<4, using: &rng) == 0 { value = max(0, min(100, value + Double(Int.random(in: -50...50, using: &rng)) / 100)) }
            values.append((value * 100).rounded() / 100)
        }
        let column = Self.roundTrip(values)
        #expect(Double(column.bits.count) / 3600 < 20, "\(Double(column.bits.count) / 3600) bits a point")
    }
}
