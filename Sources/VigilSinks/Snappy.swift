import Foundation

/// Snappy block compression, as Prometheus' remote write asks for
/// (`Content-Encoding: snappy`), through the system's libsnappy (Debian's
/// libsnappy1v5; its C interface, snappy-c.h), loaded when first used, so
/// that building vigil needs no snappy headers and a host without the
/// library still runs every other sink: a `remote_write` sink there is
/// refused at start, saying which package brings it.
package enum Snappy {
    private typealias Compress = @convention(c) (UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?) -> Int32
    private typealias MaxLength = @convention(c) (Int) -> Int
    private typealias UncompressedLength = @convention(c) (UnsafePointer<CChar>?, Int, UnsafeMutablePointer<Int>?) -> Int32
    private typealias Uncompress = @convention(c) (UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?) -> Int32

    private struct Library: @unchecked Sendable {  // function pointers of a library never unloaded
        let compress: Compress
        let maxLength: MaxLength
        let uncompressedLength: UncompressedLength
        let uncompress: Uncompress
    }

    /// The sonames tried, newest first.
    static let sonames = ["libsnappy.so.1", "libsnappy.so"]

    private static let library: Result<Library, SnappyError> = {
        var handle: UnsafeMutableRawPointer?
        for name in sonames {
            handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)
            if handle != nil { break }
        }
        guard let handle else {
            return .failure(SnappyError("no snappy library (\(sonames.joined(separator: ", "))): install Debian's libsnappy1v5"))
        }
        func symbol<T>(_ name: String, as type: T.Type) -> T? {
            dlsym(handle, name).map { unsafeBitCast($0, to: type) }
        }
        guard let compress = symbol("snappy_compress", as: Compress.self),
              let maxLength = symbol("snappy_max_compressed_length", as: MaxLength.self),
              let uncompressedLength = symbol("snappy_uncompressed_length", as: UncompressedLength.self),
              let uncompress = symbol("snappy_uncompress", as: Uncompress.self) else {
            return .failure(SnappyError("the snappy library found has no C interface (snappy-c.h)"))
        }
        return .success(Library(compress: compress, maxLength: maxLength, uncompressedLength: uncompressedLength, uncompress: uncompress))
    }()

    /// Why snappy cannot be had here, nil when it can.
    package static var unavailable: String? {
        if case .failure(let error) = library { return error.description }
        return nil
    }

    /// `bytes` compressed as one snappy block.
    package static func compress(_ bytes: [UInt8]) throws(SnappyError) -> [UInt8] {
        let lib = try library.get()
        var length = lib.maxLength(bytes.count)
        var out = [UInt8](repeating: 0, count: length)
        let status = bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                input.withMemoryRebound(to: CChar.self) { i in
                    output.withMemoryRebound(to: CChar.self) { o in lib.compress(i.baseAddress, i.count, o.baseAddress, &length) }
                }
            }
        }
        guard status == 0 else { throw SnappyError("snappy_compress failed (status \(status))") }
        out.removeSubrange(length...)
        return out
    }

    /// A snappy block decompressed, refused when it says it is larger than `limit`.
    package static func uncompress(_ bytes: [UInt8], limit: Int = 64 << 20) throws(SnappyError) -> [UInt8] {
        let lib = try library.get()
        var length = 0
        let known = bytes.withUnsafeBufferPointer { input in
            input.withMemoryRebound(to: CChar.self) { lib.uncompressedLength($0.baseAddress, $0.count, &length) }
        }
        guard known == 0 else { throw SnappyError("not a snappy block") }
        guard length <= limit else { throw SnappyError("a snappy block of \(length) bytes, more than \(limit)") }
        var out = [UInt8](repeating: 0, count: length)
        let status = bytes.withUnsafeBufferPointer { input in
            out.withUnsafeMutableBufferPointer { output in
                input.withMemoryRebound(to: CChar.self) { i in
                    output.withMemoryRebound(to: CChar.self) { o in lib.uncompress(i.baseAddress, i.count, o.baseAddress, &length) }
                }
            }
        }
        guard status == 0 else { throw SnappyError("not a valid snappy block (status \(status))") }
        return out
    }
}

package struct SnappyError: Error, CustomStringConvertible, Sendable {
    package let description: String
    init(_ description: String) { self.description = description }
}
