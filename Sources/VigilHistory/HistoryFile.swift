/// The history as a file (`path:` of a history sink): written at stop,
/// read at start. Little-endian: "VIGILHST", a version, the payload's
/// length and its FNV-1a 64 checksum, then the payload (its streams, each
/// with its fields and sealed blocks). A file that is not one, of another
/// version, cut short, altered or inconsistent is refused whole with the
/// reason (`HistoryFileError`), never half read.
package enum HistoryFile {
    static let magic = Array("VIGILHST".utf8)
    static let version: UInt32 = 1
    static let headerSize = 8 + 4 + 8 + 8

    /// FNV-1a, 64 bits: a check against a file cut or altered by accident,
    /// not against one made to fool it (that is refused by the checks of
    /// every length and count as it is read).
    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        return hash
    }
}

package struct HistoryFileError: Error, CustomStringConvertible, Equatable {
    package let description: String
    init(_ description: String) { self.description = description }
}

/// Bytes out, little-endian.
struct ByteWriter {
    var bytes: [UInt8] = []

    mutating func u8(_ v: UInt8) { bytes.append(v) }
    mutating func u32(_ v: UInt32) { little(v) }
    mutating func u64(_ v: UInt64) { little(v) }
    /// Least significant byte first.
    private mutating func little<T: FixedWidthInteger>(_ v: T) {
        for i in 0..<(T.bitWidth / 8) { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * i))) }
    }
    mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
    mutating func string(_ s: String) {
        let utf8 = Array(s.utf8)
        u32(UInt32(utf8.count))
        bytes += utf8
    }
    mutating func words(_ w: [UInt64]) {
        u32(UInt32(w.count))
        for word in w { u64(word) }
    }
    mutating func bits(_ b: BitWriter) {
        u64(UInt64(b.count))
        words(b.words)
    }

    mutating func block(_ block: HistoryBlock) {
        u32(UInt32(block.count))
        i64(block.first)
        i64(block.last)
        bits(block.times.bits)
        u32(UInt32(block.columns.count))
        for column in block.columns {
            let parts = column.parts
            u8(column.kind == .int ? 0 : column.kind == .counter ? 1 : 2)
            if column.kind == .double {
                u32(UInt32(parts.doubles.count))
                bits(parts.doubles.bits)
            } else {
                u32(UInt32(parts.ints.count))
                bits(parts.ints.bits)
            }
            if let presence = parts.presence {
                u8(1)
                words(presence)
            } else {
                u8(0)
            }
        }
    }
}

/// Bytes in, every length checked against what is left.
struct ByteReader {
    let bytes: [UInt8]
    var at: Int

    init(_ bytes: [UInt8], at: Int = 0) {
        self.bytes = bytes
        self.at = at
    }

    var left: Int { bytes.count - at }

    mutating func need(_ n: Int, _ what: String) throws(HistoryFileError) {
        guard n >= 0, n <= left else { throw HistoryFileError("cut short in \(what) (at byte \(at))") }
    }

    mutating func u8(_ what: String) throws(HistoryFileError) -> UInt8 {
        try need(1, what)
        defer { at += 1 }
        return bytes[at]
    }

    mutating func u32(_ what: String) throws(HistoryFileError) -> UInt32 { try little(what) }
    mutating func u64(_ what: String) throws(HistoryFileError) -> UInt64 { try little(what) }

    /// An unsigned integer, least significant byte first.
    private mutating func little<T: FixedWidthInteger & UnsignedInteger>(_ what: String) throws(HistoryFileError) -> T {
        let size = T.bitWidth / 8
        try need(size, what)
        var v: T = 0
        for i in 0..<size { v |= T(bytes[at + i]) << (8 * i) }
        at += size
        return v
    }

    mutating func i64(_ what: String) throws(HistoryFileError) -> Int64 { Int64(bitPattern: try u64(what)) }

    /// A count of items of at least `size` bytes each: no more than the bytes left could hold.
    mutating func count(_ what: String, itemSize size: Int) throws(HistoryFileError) -> Int {
        let n = Int(try u32(what))
        guard n <= left / max(1, size) else { throw HistoryFileError("\(what): \(n) is more than the file holds") }
        return n
    }

    mutating func string(_ what: String) throws(HistoryFileError) -> String {
        let n = try count(what, itemSize: 1)
        defer { at += n }
        return String(decoding: bytes[at..<at + n], as: UTF8.self)
    }

    mutating func words(_ what: String) throws(HistoryFileError) -> [UInt64] {
        let n = try count(what, itemSize: 8)
        var out: [UInt64] = []
        out.reserveCapacity(n)
        for _ in 0..<n { out.append(try u64(what)) }
        return out
    }

    mutating func bits(_ what: String) throws(HistoryFileError) -> BitWriter {
        let count = try u64(what)
        let words = try words(what)
        guard count <= UInt64(Int.max), let bits = BitWriter(words: words, count: Int(count)) else {
            throw HistoryFileError("\(what): \(count) bits do not fit \(words.count) words")
        }
        return bits
    }

    mutating func block(_ what: String) throws(HistoryFileError) -> HistoryBlock {
        let points = Int(try u32(what))
        let first = try i64(what), last = try i64(what)
        guard let times = IntColumn(restoring: try bits(what), count: points, secondOrder: true) else {
            throw HistoryFileError("\(what): \(points) times do not fit their bits")
        }
        let columnCount = try count(what, itemSize: 18)
        var columns: [FieldColumn] = []
        for _ in 0..<columnCount {
            let tag = try u8(what)
            guard tag <= 2 else { throw HistoryFileError("\(what): a column of kind \(tag)") }
            let kind: HistoryBlock.Kind = tag == 0 ? .int : tag == 1 ? .counter : .double
            let values = Int(try u32(what))
            let bits = try bits(what)
            var ints = IntColumn(secondOrder: kind == .counter), doubles = DoubleColumn()
            if kind == .double {
                guard let column = DoubleColumn(restoring: bits, count: values) else {
                    throw HistoryFileError("\(what): \(values) values do not fit their bits")
                }
                doubles = column
            } else {
                guard let column = IntColumn(restoring: bits, count: values, secondOrder: kind == .counter) else {
                    throw HistoryFileError("\(what): \(values) values do not fit their bits")
                }
                ints = column
            }
            let presence: [UInt64]? = try u8(what) == 1 ? try words(what) : nil
            columns.append(FieldColumn(kind: kind, ints: ints, doubles: doubles, presence: presence))
        }
        guard let block = HistoryBlock(restoring: times, columns: columns, first: first, last: last) else {
            throw HistoryFileError("\(what): its columns do not agree with its \(points) points")
        }
        return block
    }
}
