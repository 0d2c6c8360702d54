import CompressNIO
import Foundation
import NIOCore

/// The console's files as the control API serves them (issue 31): the page,
/// its script and style (`assets/`), and Debian's dygraphs with its
/// licence, packed into the binary at build time (ConsoleAssetsPlugin), so
/// that an installed vigil needs nothing else and nothing from a network.
/// Each is gzipped once, when first asked for, and has an ETag.
public enum ConsoleAssets {
    public struct Asset: Sendable {
        public let contentType: String
        public let bytes: [UInt8]
        /// The gzip of `bytes`; nil when it is not smaller.
        public let gzipped: [UInt8]?
        /// A strong validator (`ETag`), of the bytes.
        public let etag: String
    }

    /// The asset at a URL path (`/` is the page), nil for any other.
    public static func asset(at path: String) -> Asset? { served[path == "/" ? "/index.html" : path] }

    /// Every URL path served, for the control API's routing and its tests.
    public static var paths: [String] { ["/"] + served.keys.sorted() }

    /// What the page needs and the build did not find, with the package
    /// that brings it (empty: all there).
    public static var missingLibraries: [String] {
        missing.map { "\($0.path) (Debian's libjs-dygraphs; install it and build vigil again)" }
    }

    /// The console's Content-Security-Policy: only its own scripts, styles
    /// inline only as the charts set them, requests only to itself, never in a frame.
    public static let contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        + "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

    private static let served: [String: Asset] = {
        var files: [String: [UInt8]] = [:]
        for entry in packed {
            files[entry.name] = Data(base64Encoded: entry.base64).map { Array($0) } ?? []
        }
        var out: [String: Asset] = [:]
        for (name, bytes) in files where name != "vigil-LICENSE.txt" && name != "dygraphs-copyright.txt" {
            out["/" + name] = make(bytes, type: contentType(of: name))
        }
        if out["/dygraph.min.js"] == nil {
            // The page finds no Dygraph and says why, rather than a failed request.
            let why = missingLibraries.joined(separator: "; ")
            var script = "window.vigilChartsMissing = "
            script += String(decoding: (try? JSONEncoder().encode(why)) ?? Data("\"\"".utf8), as: UTF8.self) + ";\n"
            out["/dygraph.min.js"] = make(Array(script.utf8), type: contentType(of: "x.js"))
            out["/dygraph.min.css"] = make([], type: contentType(of: "x.css"))
        }
        var licences = Array("The Vigil console: Vigil's licence, then that of dygraphs, the charting library it embeds.\n\n".utf8)
        licences += files["vigil-LICENSE.txt"] ?? []
        licences += Array("\n\n-------- dygraphs (Debian's libjs-dygraphs) --------\n\n".utf8)
        licences += files["dygraphs-copyright.txt"] ?? Array("not embedded: this vigil was built without libjs-dygraphs\n".utf8)
        out["/licenses.txt"] = make(licences, type: contentType(of: "x.txt"))
        return out
    }()

    private static func make(_ bytes: [UInt8], type: String) -> Asset {
        var gzipped: [UInt8]?
        if bytes.count > 512 {
            var buffer = ByteBuffer(bytes: bytes)
            if let compressed = try? buffer.compress(with: .gzip()), compressed.readableBytes < bytes.count {
                gzipped = Array(compressed.readableBytesView)
            }
        }
        // FNV-1a 64 of the bytes: changes with any byte, as a build changes them.
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0100_0000_01B3 }
        return Asset(contentType: type, bytes: bytes, gzipped: gzipped, etag: "\"\(String(hash, radix: 16))\"")
    }

    private static func contentType(of name: String) -> String {
        switch name.split(separator: ".").last {
        case "html": "text/html; charset=utf-8"
        case "js": "text/javascript; charset=utf-8"
        case "css": "text/css; charset=utf-8"
        default: "text/plain; charset=utf-8"
        }
    }
}
