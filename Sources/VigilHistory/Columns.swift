/// Compressed columns of the history, after Facebook's Gorilla (Pelkonen
/// et al., VLDB 2015) as Prometheus' chunks use it: integers (times in
/// milliseconds, counters, integer gauges, booleans) as the difference of
/// their differences, doubles as the XOR of each with the one before. A
/// series polled at a steady interval, or a value that does not change,
/// costs about a bit a point.
///
/// Arithmetic wraps: any Int64 after any other encodes and decodes to
/// itself (the 64-bit escape holds any difference), so values from
/// outside can neither trap the encoder nor be stored as something else.

/// Int64s as their differences (a gauge: a level that seldom moves costs a
/// bit) or the differences of their differences (times and counters: a
/// steady rate costs a bit): `0` for none, then `10`+7, `110`+9,
/// `1110`+12, `11110`+20, `111110`+32 bits, or `111111`+64.
package struct IntColumn: Sendable, Equatable {
    package private(set) var bits = BitWriter()
    package private(set) var count = 0
    /// Differences of differences (true) or differences.
    package let secondOrder: Bool
    private var last: Int64 = 0
    private var lastDelta: Int64 = 0

    package init(secondOrder: Bool = true) {
        self.secondOrder = secondOrder
    }

    /// A sealed column read back from a file: nil unless `count` values can
    /// be in `bits` (the first takes 64, each other one at least 1), so that
    /// no reading of it runs longer than its bits.
    package init?(restoring bits: BitWriter, count: Int, secondOrder: Bool) {
        guard count >= 0, count == 0 ? bits.count == 0 : bits.count >= 63 + count else { return nil }
        self.bits = bits
        self.count = count
        self.secondOrder = secondOrder
    }

    /// (prefix, its width, the value's width) by size, smallest first.
    private static let buckets: [(prefix: UInt64, prefixWidth: Int, width: Int)] = [
        (0b10, 2, 7), (0b110, 3, 9), (0b1110, 4, 12), (0b11110, 5, 20), (0b111110, 6, 32),
    ]
    /// All ones, one longer than the last bucket's prefix: 64 bits follow.
    private static let escapeWidth = buckets.count + 1

    package mutating func append(_ value: Int64) {
        defer { count += 1 }
        guard count > 0 else {
            bits.write(UInt64(bitPattern: value), width: 64)
            last = value
            return
        }
        let delta = value &- last
        let dod = secondOrder ? delta &- lastDelta : delta
        last = value
        lastDelta = delta
        if dod == 0 {
            bits.write(bit: false)
            return
        }
        for bucket in Self.buckets where dod >= -(1 << Int64(bucket.width - 1)) && dod < 1 << Int64(bucket.width - 1) {
            bits.write(bucket.prefix, width: bucket.prefixWidth)
            bits.write(UInt64(bitPattern: dod), width: bucket.width)
            return
        }
        bits.write((1 << UInt64(Self.escapeWidth)) - 1, width: Self.escapeWidth)
        bits.write(UInt64(bitPattern: dod), width: 64)
    }

    /// The values in order.
    package var values: [Int64] { collect(Reader(self), count: count) }

    package func sealed() -> IntColumn {
        var copy = self
        copy.bits = bits.compacted()
        return copy
    }

    package struct Reader: IteratorProtocol, Sendable {
        private var bits: BitReader
        private let count: Int
        private let secondOrder: Bool
        private var index = 0
        private var last: Int64 = 0
        private var lastDelta: Int64 = 0

        package init(_ column: IntColumn) {
            bits = BitReader(column.bits)
            count = column.count
            secondOrder = column.secondOrder
        }

        package mutating func next() -> Int64? {
            guard index < count else { return nil }
            defer { index += 1 }
            if index == 0 {
                last = Int64(bitPattern: bits.read(width: 64))
                return last
            }
            var dod: Int64 = 0
            if bits.readBit() {
                var width = 64
                for bucket in IntColumn.buckets {
                    if !bits.readBit() {
                        width = bucket.width
                        break
                    }
                }
                dod = signExtend(bits.read(width: width), width: width)
            }
            lastDelta = secondOrder ? lastDelta &+ dod : dod
            last = last &+ lastDelta
            return last
        }
    }
}

/// Doubles as the XOR of each with the one before: `0` when the same,
/// `10` + the meaningful bits when they fit the last window, else `11` +
/// 5 bits of leading zeros + 6 bits of length + the bits.
package struct DoubleColumn: Sendable, Equatable {
    package private(set) var bits = BitWriter()
    package private(set) var count = 0
    private var last: UInt64 = 0
    private var leading = 0
    private var trailing = 0
    /// Whether `leading`/`trailing` hold a window yet.
    private var windowSet = false

    package init() {}

    /// A sealed column read back from a file (as `IntColumn`'s).
    package init?(restoring bits: BitWriter, count: Int) {
        guard count >= 0, count == 0 ? bits.count == 0 : bits.count >= 63 + count else { return nil }
        self.bits = bits
        self.count = count
    }

    package mutating func append(_ value: Double) {
        let pattern = value.bitPattern
        defer {
            count += 1
            last = pattern
        }
        guard count > 0 else {
            bits.write(pattern, width: 64)
            return
        }
        let xor = pattern ^ last
        if xor == 0 {
            bits.write(bit: false)
            return
        }
        let lead = min(xor.leadingZeroBitCount, 31), trail = xor.trailingZeroBitCount
        if windowSet, lead >= leading, trail >= trailing {
            bits.write(0b10, width: 2)
            bits.write(xor >> UInt64(trailing), width: 64 - leading - trailing)
            return
        }
        leading = lead
        trailing = trail
        windowSet = true
        let width = 64 - lead - trail
        bits.write(0b11, width: 2)
        bits.write(UInt64(lead), width: 5)
        bits.write(UInt64(width - 1), width: 6)
        bits.write(xor >> UInt64(trail), width: width)
    }

    package var values: [Double] { collect(Reader(self), count: count) }

    package func sealed() -> DoubleColumn {
        var copy = self
        copy.bits = bits.compacted()
        return copy
    }

    package struct Reader: IteratorProtocol, Sendable {
        private var bits: BitReader
        private let count: Int
        private var index = 0
        private var last: UInt64 = 0
        private var leading = 0
        private var trailing = 0

        package init(_ column: DoubleColumn) {
            bits = BitReader(column.bits)
            count = column.count
        }

        package mutating func next() -> Double? {
            guard index < count else { return nil }
            defer { index += 1 }
            if index == 0 {
                last = bits.read(width: 64)
                return Double(bitPattern: last)
            }
            if bits.readBit() {
                if bits.readBit() {
                    leading = Int(bits.read(width: 5))
                    let width = Int(bits.read(width: 6)) + 1
                    trailing = max(0, 64 - leading - width)
                }
                let width = max(0, 64 - leading - trailing)
                last ^= bits.read(width: width) << UInt64(trailing)
            }
            return Double(bitPattern: last)
        }
    }
}

/// Every value a column's reader gives, in order.
func collect<R: IteratorProtocol>(_ reader: R, count: Int) -> [R.Element] {
    var reader = reader
    var out: [R.Element] = []
    out.reserveCapacity(count)
    while let value = reader.next() { out.append(value) }
    return out
}

/// The low `width` bits of `raw` as a two's-complement number.
@inline(__always)
func signExtend(_ raw: UInt64, width: Int) -> Int64 {
    guard width < 64 else { return Int64(bitPattern: raw) }
    let shift = UInt64(64 - width)
    return Int64(bitPattern: raw << shift) >> Int64(shift)
}
