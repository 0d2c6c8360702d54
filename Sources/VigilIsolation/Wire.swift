import Foundation

/// Little-endian fields written into a byte buffer: the runner channel's
/// messages and ring records. The runner and the host are the same binary on
/// the same machine, but the reader never trusts that: see `WireReader`.
package struct WireWriter {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 64) { bytes.reserveCapacity(capacity) }

    mutating func u8(_ v: UInt8) { bytes.append(v) }

    mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }

    mutating func i32(_ v: Int32) { u32(UInt32(bitPattern: v)) }

    mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }

    mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }

    mutating func f64(_ v: Double) { u64(v.bitPattern) }

    /// A length (u32) and the UTF-8 bytes.
    mutating func string(_ s: String) {
        var s = s
        s.withUTF8 { utf8 in
            u32(UInt32(clamping: utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }
}

/// Reads what a `WireWriter` wrote, from memory another process may have
/// filled: every read is bounds-checked, lengths are capped by what is left,
/// and a short or inconsistent buffer ends in `nil` (`failed`), never a trap.
package struct WireReader {
    private let base: UnsafeRawBufferPointer
    private var offset = 0
    /// Set once a read ran past the end or a length was impossible.
    private(set) var failed = false

    init(_ buffer: UnsafeRawBufferPointer) { base = buffer }

    var remaining: Int { base.count - offset }
    var atEnd: Bool { offset == base.count }

    private mutating func take(_ n: Int) -> UnsafeRawBufferPointer? {
        guard !failed, n >= 0, n <= remaining else {
            failed = true
            return nil
        }
        defer { offset += n }
        return UnsafeRawBufferPointer(rebasing: base[offset..<(offset + n)])
    }

    mutating func u8() -> UInt8? { take(1).map { $0[0] } }

    mutating func u32() -> UInt32? { take(4).map { UInt32(littleEndian: $0.loadUnaligned(as: UInt32.self)) } }

    /// The next u32, not taken.
    func peekU32() -> UInt32? {
        guard !failed, remaining >= 4 else { return nil }
        return UInt32(littleEndian: UnsafeRawBufferPointer(rebasing: base[offset..<(offset + 4)]).loadUnaligned(as: UInt32.self))
    }

    mutating func i32() -> Int32? { u32().map { Int32(bitPattern: $0) } }

    mutating func u64() -> UInt64? { take(8).map { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) } }

    mutating func i64() -> Int64? { u64().map { Int64(bitPattern: $0) } }

    mutating func f64() -> Double? { u64().map { Double(bitPattern: $0) } }

    /// The bytes of a length-prefixed string, in place (valid while the buffer is).
    mutating func bytes() -> UnsafeRawBufferPointer? {
        guard let n = u32() else { return nil }
        return take(Int(n))
    }

    /// A length-prefixed string; invalid UTF-8 is repaired, as the decoder does.
    mutating func string() -> String? {
        bytes().map { String(decoding: $0, as: UTF8.self) }
    }
}
