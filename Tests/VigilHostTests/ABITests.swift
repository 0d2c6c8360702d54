import Foundation
@preconcurrency import CVigilPlugin
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Loading real `.so` files built by cc against the header alone, and the
/// refusal of deliberately bad ones, each with the file and the reason.
@Suite struct ABITests {
    func refusal(_ name: String) throws -> PluginRefusal {
        let path = try TestEnv.cPlugin(name)
        switch PluginCatalog(directories: []).load(path: path) {
        case .success(let plugin): throw TestFailure("\(name) loaded as \(plugin.description.name); expected a refusal")
        case .failure(let refusal):
            #expect(refusal.path == path)
            #expect(refusal.description.hasPrefix("plugin \(path) refused: "))
            return refusal
        }
    }

    @Test func heartbeatDescribesItself() throws {
        let result = PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("heartbeat"))
        let plugin = try result.get()
        let d = plugin.description
        #expect(d.name == "heartbeat")
        #expect(d.version == "1.0.0")
        #expect(d.abiMajor == 1 && d.abiMinor == Int(VIGIL_ABI_MINOR))
        #expect(d.polled)
        #expect(d.defaultInterval == 1_000_000_000)
        #expect(d.options.map(\.name) == ["threads", "push_interval", "message"])
        #expect(d.options[0].type == .int && d.options[0].defaultText == "0")
        #expect(d.options[1].type == .duration && d.options[1].defaultText == "100ms")
        #expect(d.events.map(\.kind) == ["beat", "push"])
        #expect(d.events[0].fields.map(\.name) == ["count", "message"])
    }

    @Test func catalogFindsPluginsByNameAndLoadsEachFileOnce() throws {
        let catalog = PluginCatalog(directories: ["/nonexistent", try TestEnv.cPlugins()])
        #expect(catalog.locate("heartbeat") == (try TestEnv.cPlugin("heartbeat")))
        #expect(catalog.locate("cpu") == nil)
        let a = try catalog.load(reference: "heartbeat").get()
        let b = try catalog.load(reference: try TestEnv.cPlugin("heartbeat")).get()
        #expect(a === b)
        // The Swift plugins are found next to the vigil binary.
        let standard = PluginCatalog(directories: PluginCatalog.standardDirectories(extra: []))
        #expect(try standard.load(reference: "cpu").get().description.name == "cpu")
    }

    @Test func unknownPluginNameSaysWhereItLooked() throws {
        let catalog = PluginCatalog(directories: [try TestEnv.cPlugins()])
        guard case .failure(let refusal) = catalog.load(reference: "nosuch") else { throw TestFailure("loaded") }
        #expect(refusal.reason.contains("no plugin named 'nosuch'"))
        #expect(refusal.reason.contains(try TestEnv.cPlugins()))
    }

    @Test func aDeclaredReservedKindIsRefused() throws {
        let r = try refusal("reserved_kind")
        #expect(r.reason.contains("event kind 'availability' is the host's own"), "\(r.reason)")
    }

    @Test func aJSONDefaultThatDoesNotParseIsRefusedNamingTheOption() throws {
        let r = try refusal("bad_json_default")
        #expect(r.reason.contains("default '[unclosed, {' of json option 'targets' does not parse"), "\(r.reason)")
    }

    @Test func otherMajorIsRefusedNamingBothVersions() throws {
        let r = try refusal("abi_major2")
        #expect(r.reason.contains("built for Vigil ABI 2.0"))
        #expect(r.reason.contains("this host speaks ABI 1.\(VIGIL_ABI_MINOR)"))
    }

    @Test func newerMinorIsRefusedNamingBothVersions() throws {
        let r = try refusal("abi_minor_newer")
        #expect(r.reason.contains("needs Vigil ABI 1.99"))
        #expect(r.reason.contains("newer than this host's ABI 1.\(VIGIL_ABI_MINOR)"))
    }

    @Test func missingEntrySymbolIsRefused() throws {
        let r = try refusal("no_entry")
        #expect(r.reason.contains("does not export 'vigil_plugin_entry'"))
    }

    @Test func textFileNamedSoIsRefused() throws {
        let r = try refusal("text")
        #expect(r.reason.contains("not a loadable shared object"))
    }

    @Test func directoryAndMissingFileAreRefused() throws {
        let catalog = PluginCatalog(directories: [])
        guard case .failure(let dir) = catalog.load(path: try TestEnv.cPlugins()) else { throw TestFailure("loaded a directory") }
        #expect(dir.reason.hasPrefix("not a regular file ("))
        guard case .failure(let missing) = catalog.load(path: "/nonexistent/x.so") else { throw TestFailure("loaded") }
        #expect(missing.reason.contains("No such file or directory"))
    }

    @Test func tooSmallDescriptorIsRefused() throws {
        let r = try refusal("descriptor_too_small")
        #expect(r.reason.contains("descriptor size is 8 bytes"))
        #expect(r.reason.contains("needs at least 136"))
    }

    @Test func malformedSelfDescriptionIsRefused() throws {
        let r = try refusal("bad_description")
        #expect(r.reason.contains("malformed self-description"))
        #expect(r.reason.contains("unknown type 99"))
    }

    @Test func entryPointRefusalCarriesThePluginsMessage() throws {
        let r = try refusal("entry_refuses")
        #expect(r.reason.contains("this plugin needs Vigil ABI 3"))
    }

    @Test func failingCreateStopsOnlyThatInstanceWithItsMessage() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("create_fails"))
        h.launch()
        let failed = h.waitFor(1) { $0.kind == "instance_failed" }
        #expect(failed.count == 1)
        #expect(failed.first?.monitor == "vigil")
        #expect(failed.first?[field: "call"] == .string("create"))
        #expect(failed.first?[field: "message"] == .string("create refused: the sensor bus is not configured"))
        #expect(failed.first?[field: "status"] == .string("invalid configuration"))
        #expect(h.instance.state == .failed)
        await h.stop()
    }

    @Test func anErrorMessageWithoutNULIsReadWithinItsBuffer() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("unterminated_error"))
        h.launch()
        let failed = h.waitFor(1) { $0.kind == "instance_failed" }
        #expect(failed.first?[field: "message"] == .string(String(repeating: "x", count: 1024)))
        await h.stop()
    }

    @Test func failingStartIsReportedWithItsMessage() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("start_fails"))
        h.launch()
        let failed = h.waitFor(1) { $0.kind == "instance_failed" }
        #expect(failed.first?[field: "call"] == .string("start"))
        #expect(failed.first?[field: "message"] == .string("start refused: device busy"))
        await h.stop()
    }

    @Test func temporaryPollErrorsAreCountedAndPollingGoesOn() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("poll_errors"))
        h.launch()  // poll 1 fails
        for _ in 0..<5 { h.poll() }  // polls 2..6: 2, 4, 6 emit
        let samples = h.waitFor(3) { $0.kind == "sample" }
        #expect(samples.map { $0[field: "value"] } == [.double(2), .double(4), .double(6)])
        #expect(h.instance.pollErrors.load(ordering: .relaxed) == 3)
        #expect(h.instance.state == .running)
        await h.stop()
    }

    @Test func heartbeatPushesFromItsOwnThreadsAndStopsCleanly() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("heartbeat"), options: "{ threads: 3, push_interval: 5ms, message: hi }")
        h.launch()
        let beats = h.waitFor(1) { $0.kind == "beat" }
        #expect(beats.first?[field: "count"] == .int(1))
        #expect(beats.first?[field: "message"] == .string("hi"))
        let pushes = h.waitFor(30) { $0.kind == "push" }
        #expect(Set(pushes.compactMap { if case .int(let t)? = $0[field: "thread"] { t } else { nil } }).count == 3)
        await h.stop()
        // After stop returned, nothing more arrives and nothing was refused.
        let count = h.events.count
        usleep(50_000)
        #expect(h.events.count == count)
        #expect(h.instance.refusals.total == 0)
    }

    @Test func twoInstancesOfOnePluginRunSideBySide() async throws {
        let a = try Harness(plugin: try TestEnv.cPlugin("heartbeat"), options: "{ message: a }")
        let b = try Harness(plugin: try TestEnv.cPlugin("heartbeat"), options: "{ message: b }")
        a.launch(); b.launch()
        for _ in 0..<3 { a.poll() }
        let fromA = a.waitFor(4) { $0.kind == "beat" }
        let fromB = b.waitFor(1) { $0.kind == "beat" }
        #expect(fromA.map { $0[field: "count"] } == [.int(1), .int(2), .int(3), .int(4)])
        #expect(fromA.allSatisfy { $0[field: "message"] == .string("a") })
        #expect(fromB.first?[field: "message"] == .string("b"))
        await a.stop(); await b.stop()
    }

    @Test func hostileEventIsCopiedExactlyAndEncodesToValidJSON() async throws {
        let h = try Harness(plugin: try TestEnv.cPlugin("hostile"))
        h.launch()
        guard let event = h.waitFor(1).first else { throw TestFailure("no event") }
        await h.stop()
        guard case .string(let text)? = event[field: "text"] else { throw TestFailure("no text field") }
        // Invalid UTF-8 became U+FFFD; the embedded NUL survived; valid characters are intact.
        #expect(text.contains("\u{FFFD}"))
        #expect(text.contains("\u{0}"))
        #expect(text.contains("é") && text.contains("😀"))
        #expect(event[field: "min"] == .int(Int64.min))
        #expect(event[field: "max"] == .int(Int64.max))
        if case .double(let nan)? = event[field: "nan"] { #expect(nan.isNaN) } else { Issue.record("nan missing") }
        #expect(event.fields.contains { $0.name == "we\"ird\nname" })
        let line = JSONLineEncoder(host: "h").line(event)
        let parsed = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        let fields = parsed?["fields"] as? [String: Any]
        #expect(fields?["nan"] is NSNull)
        #expect(fields?["inf"] is NSNull)
        #expect((fields?["text"] as? String) == text)
        let (_, decoded) = try JSONLineDecoder().decode(line)
        #expect(decoded[field: "text"] == .string(text))
        #expect(decoded[field: "max"] == .int(Int64.max))
    }
}
