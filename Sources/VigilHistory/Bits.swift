/// Bits written most significant first into 64-bit words: the storage of
/// the history's compressed columns. Appends only; `words` is what is kept.
package struct BitWriter: Sendable, Equatable {
    package private(set) var words: [UInt64] = []
    /// Bits written.
    package private(set) var count = 0

    package init() {}

    /// Bits read back from a file (`HistoryFile`); nil unless `count` fits `words`.
    package init?(words: [UInt64], count: Int) {
        guard count >= 0, count <= words.count * 64, words.count <= count / 64 + 1 else { return nil }
        self.words = words
        self.count = count
    }

    /// Writes the low `width` bits of `value` (0 to 64 of them).
    @inline(__always)
    package mutating func write(_ value: UInt64, width: Int) {
        guard width > 0 else { return }
        let value = width == 64 ? value : value & ((1 << UInt64(width)) &- 1)
        let used = count & 63
        if used == 0 { words.append(0) }
        let free = 64 - used
        if width <= free {
            words[words.count - 1] |= value << UInt64(free - width)
        } else {
            let rest = width - free
            words[words.count - 1] |= value >> UInt64(rest)
            words.append(value << UInt64(64 - rest))
        }
        count += width
    }

    @inline(__always)
    package mutating func write(bit: Bool) { write(bit ? 1 : 0, width: 1) }

    /// The bytes the bits take, rounded up to whole words (what is held).
    package var bytes: Int { words.count * 8 }

    /// The same bits in storage of exactly their size (for a sealed block:
    /// an array that grew by doubling holds up to twice what it needs).
    package func compacted() -> BitWriter {
        var copy = BitWriter()
        copy.words = Array(unsafeUninitializedCapacity: words.count) { buffer, initialized in
            for (i, word) in words.enumerated() { buffer[i] = word }
            initialized = words.count
        }
        copy.count = count
        return copy
    }
}

/// Reads what a `BitWriter` wrote, in order. Reading past the end gives
/// zero bits and sets `overran` (a column never does; a corrupt one may).
package struct BitReader: Sendable {
    private let words: [UInt64]
    private let count: Int
    package private(set) var position = 0
    package private(set) var overran = false

    package init(_ writer: BitWriter) {
        words = writer.words
        count = writer.count
    }

    package var remaining: Int { count - position }

    /// The next `width` bits (0 to 64) as the low bits of the result.
    @inline(__always)
    package mutating func read(width: Int) -> UInt64 {
        guard width > 0 else { return 0 }
        guard width <= remaining else {
            overran = true
            position = count
            return 0
        }
        let index = position >> 6, used = position & 63
        let free = 64 - used
        var value: UInt64
        if width <= free {
            value = words[index] >> UInt64(free - width)
        } else {
            let rest = width - free
            value = (words[index] << UInt64(rest)) | (words[index + 1] >> UInt64(64 - rest))
        }
        position += width
        return width == 64 ? value : value & ((1 << UInt64(width)) &- 1)
    }

    @inline(__always)
    package mutating func readBit() -> Bool { read(width: 1) == 1 }
}
