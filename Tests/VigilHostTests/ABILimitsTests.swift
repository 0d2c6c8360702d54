import Foundation
import Testing
@preconcurrency import CVigilPlugin
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The limits live in the header (`VIGIL_MAX_*`); the host takes them from
/// there, and the plugin guide states the same numbers.
@Suite struct ABILimitsTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `#define VIGIL_MAX_NAME VALUE` of the header, as text.
    static func headerLimits() throws -> [String: Int] {
        let header = try String(contentsOf: root.appending(path: "Sources/CVigilPlugin/include/vigil_plugin.h"), encoding: .utf8)
        var limits: [String: Int] = [:]
        for line in header.split(separator: "\n") where line.hasPrefix("#define VIGIL_MAX_") {
            let words = line.split(separator: " ")
            if words.count == 3, let value = Int(words[2]) { limits[String(words[1])] = value }
        }
        return limits
    }

    @Test func theHostEnforcesTheHeadersLimits() throws {
        let header = try Self.headerLimits()
        #expect(header.count == 5, "\(header)")
        #expect(header["VIGIL_MAX_EVENT_FIELDS"] == EventLimits.fields)
        #expect(header["VIGIL_MAX_NAME_BYTES"] == EventLimits.nameBytes)
        #expect(header["VIGIL_MAX_STRING_BYTES"] == EventLimits.stringBytes)
        #expect(header["VIGIL_MAX_LOG_BYTES"] == HostLimits.logMessageBytes)
        #expect(header["VIGIL_MAX_REASON_BYTES"] == HostLimits.reasonBytes)
    }

    @Test func thePluginGuideStatesTheSameNumbers() throws {
        let guide = try String(contentsOf: Self.root.appending(path: "docs/plugins.md"), encoding: .utf8)
        let header = try Self.headerLimits()
        for name in ["VIGIL_MAX_EVENT_FIELDS", "VIGIL_MAX_NAME_BYTES"] {
            #expect(guide.contains("`\(name)` (\(header[name]!))"), "docs/plugins.md does not give \(name) as \(header[name]!)")
        }
        for (name, after) in [("VIGIL_MAX_STRING_BYTES", " ("), ("VIGIL_MAX_LOG_BYTES", ", ")] {
            let kib = "`\(name)`\(after)\(header[name]! / 1024) KiB"
            #expect(guide.contains(kib), "docs/plugins.md does not give \(name) as \(kib)")
        }
    }
}
