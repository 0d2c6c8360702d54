import VigilChildProcess
import Foundation
@preconcurrency import CVigilPlugin
import Glibc
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The description a probe child sends, read by the parent as what it is:
/// a line from a process that ran untrusted code. Whatever the line, the
/// parent refuses the plugin with a reason or takes a description that
/// passed the checks an in-process load makes; it never crashes.
@Suite(.startsProcesses, .offThePool) struct ProbeDescriptionTests {
    let path = "/plugins/probed.so"

    /// The load that one `description` line reports.
    func load(_ json: String) -> ProbeReport.Load {
        var session = ProbeSession(path: path, loadTimeout: 1_000_000_000, creates: [])
        var report = ProbeReport()
        let line = ["description", json].map(ConformanceProtocol.escape).joined(separator: "\t")
        _ = session.handle(Substring(line), into: &report)
        return report.load
    }

    func reason(_ json: String) -> String? {
        guard case .refused(let reason, notAPlugin: false) = load(json) else { return nil }
        return reason
    }

    func loaded(_ name: String) throws -> PluginDescription {
        try PluginCatalog(directories: []).load(path: try TestEnv.cPlugin(name)).get().description
    }

    @Test func aGoodLineIsTheDescriptionOfTheFileProbed() throws {
        var heartbeat = try loaded("heartbeat")
        guard case .loaded(let d) = load(heartbeat.json()) else { throw TestFailure("refused") }
        // The path is the file this process asked for, whatever the child says.
        #expect(d.path == path)
        heartbeat.path = path
        #expect(d == heartbeat)
    }

    @Test func truncatedJSONIsARefusal() throws {
        let json = try loaded("heartbeat").json()
        for cut in [1, json.utf8.count / 3, json.utf8.count - 1] {
            let torn = String(decoding: Array(json.utf8)[..<cut], as: UTF8.self)
            #expect(reason(torn) == "malformed self-description: its JSON is not a plugin description: The given data was not valid JSON.",
                    "cut at \(cut)")
        }
        #expect(reason("") != nil)
        #expect(reason("null") != nil)
    }

    @Test func aHugeLineIsARefusal() throws {
        let huge = "{\"summary\":\"" + String(repeating: "x", count: PluginDescription.maxJSONBytes) + "\"}"
        #expect(reason(huge) == "malformed self-description: its JSON is \(huge.utf8.count) bytes long (4MiB at most)")
        // Past what the reader hands over whole: cut, and seen to be.
        let longer = String(repeating: "x", count: ChildProcess.maxLineBytes)
        #expect(reason(longer)?.hasPrefix("malformed self-description: the probe process sent a description line over ") == true)
    }

    @Test func wrongTypesAreARefusalThatSaysWhere() throws {
        let json = try loaded("heartbeat").json()
        let typed = json.replacingOccurrences(of: "\"type\":\"int\"", with: "\"type\":42")
        #expect(typed != json)
        #expect(reason(typed)?.hasPrefix("malformed self-description: its JSON is not a plugin description: options[0].type: ") == true,
                "\(reason(typed) ?? "accepted")")
        let polled = json.replacingOccurrences(of: "\"polled\":true", with: "\"polled\":\"yes\"")
        #expect(reason(polled)?.contains("polled: ") == true, "\(reason(polled) ?? "accepted")")
        #expect(reason("[\"description\"]") != nil)
    }

    @Test func aReservedKindIsTheRefusalAnInProcessLoadGives() throws {
        var d = try loaded("good_minimal")
        d.events[0].kind = "availability"
        guard case .failure(let inProcess) = PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("reserved_kind")) else {
            throw TestFailure("reserved_kind loaded")
        }
        #expect(reason(d.json()) == inProcess.reason)
        #expect(inProcess.reason == "malformed self-description: event kind 'availability' is the host's own (reserved: availability, rule, threshold)")
    }

    @Test func aJSONDefaultThatDoesNotParseIsRefusedAsInProcess() throws {
        var d = try loaded("heartbeat")
        d.options.append(OptionSpec(name: "layout", type: .json, defaultText: "[1, {", doc: ""))
        #expect(reason(d.json())?.hasPrefix("malformed self-description: default '[1, {' of json option 'layout' does not parse") == true,
                "\(reason(d.json()) ?? "accepted")")
    }

    @Test func aOneNanosecondIntervalIsHeldToOneMillisecondAsInProcess() throws {
        // tiny_interval asks for 1 ns: the loader accepts it and the host
        // polls it at most every millisecond. The same from a probe.
        let inProcess = try loaded("tiny_interval")
        #expect(inProcess.defaultInterval == 1)
        guard case .loaded(let d) = load(inProcess.json()) else { throw TestFailure("refused") }
        #expect(d.defaultInterval == 1 && d.effectiveInterval(nil) == inProcess.effectiveInterval(nil))
        #expect(d.effectiveInterval(nil) == 1_000_000)
        // A negative one is refused, as the loader refuses it.
        var negative = inProcess
        negative.defaultInterval = -1
        #expect(reason(negative.json()) == "malformed self-description: default interval is negative")
    }

    @Test func anABIThisHostDoesNotSpeakIsTheLoadersRefusal() throws {
        var d = try loaded("heartbeat")
        d.abiMajor = 2
        #expect(reason(d.json())?.hasPrefix("it was built for Vigil ABI 2.") == true, "\(reason(d.json()) ?? "accepted")")
        d.abiMajor = Int(VIGIL_ABI_MAJOR)
        d.abiMinor = Int(VIGIL_ABI_MINOR) + 1
        #expect(reason(d.json())?.hasPrefix("it needs Vigil ABI 1.\(VIGIL_ABI_MINOR + 1), newer than this host's") == true)
    }

    @Test func theReaderCutsALineOverItsLimitAndKeepsTheNext() throws {
        let ends = try Spawn.pipe(for: "test")
        let reader = LineReader(fd: ends.read, maxLineBytes: 100)
        reader.start()
        let text = "short\n" + String(repeating: "y", count: 200_000) + "\nafter\n"
        Thread.detachNewThread {
            var bytes = Array(text.utf8)[...]
            while !bytes.isEmpty {
                let n = bytes.withUnsafeBytes { write(ends.write, $0.baseAddress, $0.count) }
                guard n > 0 else { break }
                bytes = bytes.dropFirst(n)
            }
            close(ends.write)
        }
        var lines: [Substring] = []
        while true {
            let (more, closed) = reader.take()
            lines += more
            if closed { break }
            _ = reader.arrived.wait(timeout: .now() + .seconds(5))
        }
        #expect(lines == ["short", Substring(String(repeating: "y", count: 101)), "after"])
    }
}

/// Every built-in plugin's description, sent as JSON, reads back as the
/// description this process gets when it loads the plugin itself.
@Suite(.startsProcesses, .offThePool) struct BuiltInDescriptionJSONTests {
    @Test func everyBuiltInPluginRoundTrips() throws {
        let catalog = PluginCatalog(directories: [TestEnv.productsDir])
        let files = catalog.discover().filter { PluginCatalog.exportsEntry(path: $0) }
        #expect(files.count >= 17, "\(files)")
        for file in files {
            let d = try catalog.load(path: file).get().description
            let json = d.json()
            #expect(try PluginDescription(json: json) == d, "\(d.name)")
            #expect(json.utf8.count < PluginDescription.maxJSONBytes / 64, "\(d.name): \(json.utf8.count) bytes")
        }
    }
}
