import Foundation
import Testing
@testable import VigilCore

/// The JSON a process that loaded a plugin sends of its description, and
/// what the reader refuses: it comes from a process running untrusted code.
@Suite struct PluginDescriptionJSONTests {
    var good: PluginDescription {
        var d = cpuPlugin
        d.events.append(EventSpec(kind: "custom", doc: "tab\there, newline\nthere, \\ and \"quotes\" and ünïcødé",
                                  fields: [FieldSpec(name: "n", type: .int, unit: "", doc: "")], dynamicFields: true))
        return d
    }

    func refusal(_ json: String) -> PluginDescription.JSONError? {
        do {
            _ = try PluginDescription(json: json)
            return nil
        } catch {
            return error
        }
    }

    /// `good`'s JSON with `edit` applied to its object.
    func edited(_ edit: (inout [String: Any]) -> Void) throws -> String {
        var object = try #require(try JSONSerialization.jsonObject(with: Data(good.json().utf8)) as? [String: Any])
        edit(&object)
        return String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
    }

    @Test func aDescriptionRoundTripsOnOneLine() throws {
        let text = good.json()
        #expect(!text.contains("\n") && !text.contains("\t"))
        #expect(try PluginDescription(json: text) == good)
    }

    @Test func theKeysAreSnakeCaseAndTypesAreNames() {
        let text = cpuPlugin.json()
        for key in ["\"abi_major\":1", "\"abi_minor\":0", "\"default_interval_ns\":1000000000", "\"polled\":true",
                    "\"path\":\"/usr/lib/vigil/cpu.so\"", "\"default_text\":\"64KiB\"", "\"type\":\"size\"",
                    "\"required\":true", "\"dynamic_fields\":false", "\"unit\":\"ratio\""] {
            #expect(text.contains(key), "\(key) in \(text)")
        }
        // No default: the key is left out.
        #expect(text.contains("{\"doc\":\"\",\"name\":\"label\",\"required\":false,\"type\":\"string\"}"), "\(text)")
    }

    @Test func truncatedJSONIsRefusedWithWhere() throws {
        let text = good.json()
        for cut in [0, 1, text.utf8.count / 2, text.utf8.count - 1] {
            let prefix = String(decoding: Array(text.utf8)[..<cut], as: UTF8.self)
            guard case .notADescription(let why)? = refusal(prefix) else {
                Issue.record("cut at \(cut) not refused as not a description"); continue
            }
            #expect(why.contains("not valid JSON"), "\(why)")
        }
        #expect("\(refusal("[1, 2]")!)".hasPrefix("its JSON is not a plugin description: "))
    }

    @Test func aHugeDescriptionIsRefusedBeforeItIsParsed() {
        let huge = "{\"name\":\"" + String(repeating: "a", count: PluginDescription.maxJSONBytes) + "\"}"
        #expect(refusal(huge) == .tooLarge(bytes: huge.utf8.count))
        #expect("\(refusal(huge)!)" == "its JSON is \(huge.utf8.count) bytes long (4MiB at most)")
    }

    @Test func wrongTypesAndMissingKeysNameTheirPlace() throws {
        let number = try edited { o in
            var events = o["events"] as! [[String: Any]]
            var fields = events[0]["fields"] as! [[String: Any]]
            fields[0]["type"] = 7
            events[0]["fields"] = fields
            o["events"] = events
        }
        #expect("\(refusal(number)!)".contains("events[0].fields[0].type: "), "\(refusal(number)!)")
        let unknown = try edited { o in
            var options = o["options"] as! [[String: Any]]
            options[0]["type"] = "colour"
            o["options"] = options
        }
        #expect("\(refusal(unknown)!)".contains("options[0].type: unknown type 'colour'"), "\(refusal(unknown)!)")
        let missing = try edited { o in o["polled"] = nil }
        #expect("\(refusal(missing)!)" == "its JSON is not a plugin description: polled: missing")
        let string = try edited { o in o["default_interval_ns"] = "1s" }
        #expect("\(refusal(string)!)".contains("default_interval_ns: "))
        let overflow = good.json().replacingOccurrences(of: "\"default_interval_ns\":1000000000",
                                                        with: "\"default_interval_ns\":99999999999999999999999")
        #expect(overflow != good.json())
        #expect(refusal(overflow) == .notADescription("The given data was not valid JSON."))
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(refusal(deep) != nil)
    }

    @Test func aDecodedDescriptionIsHeldToTheSameProblemsAsALoadedOne() throws {
        let reserved = try edited { o in
            var events = o["events"] as! [[String: Any]]
            events[0]["kind"] = "threshold"
            o["events"] = events
        }
        #expect(refusal(reserved) == .malformed(["event kind 'threshold' is the host's own (reserved: availability, rule, threshold)"]))
        let badDefault = try edited { o in
            var options = o["options"] as! [[String: Any]]
            options[6]["default_text"] = "[1, {"
            o["options"] = options
        }
        guard case .malformed(let problems)? = refusal(badDefault) else { Issue.record("accepted"); return }
        #expect(problems.count == 1 && problems[0].hasPrefix("default '[1, {' of json option 'layout' does not parse"), "\(problems)")
        let negative = try edited { o in o["default_interval_ns"] = -1 }
        #expect(refusal(negative) == .malformed(["default interval is negative"]))
        let longDoc = try edited { o in o["summary"] = String(repeating: "x", count: 65_537) }
        #expect(refusal(longDoc) == .malformed(["description is 65537 bytes long (64KiB at most)"]))
        let many = try edited { o in
            o["options"] = (0...4096).map { ["name": "o\($0)", "type": "int", "doc": "", "required": false] as [String: Any] }
        }
        #expect(refusal(many) == .malformed(["4097 options declared (4096 at most)"]))
    }

    @Test func aOneNanosecondIntervalGetsTheVerdictALoadedOneGets() throws {
        // In-process a 1 ns default is accepted and held to 1 ms
        // (PluginDescriptionLimitsTests); so it is when it arrives as JSON.
        let tiny = try PluginDescription(json: try edited { o in o["default_interval_ns"] = 1 })
        #expect(tiny.problems().isEmpty)
        #expect(tiny.effectiveInterval(nil) == 1_000_000)
    }
}
