import Testing
@testable import VigilCore

/// What a plugin's self-description may not say, whatever it says.
@Suite struct PluginDescriptionLimitsTests {
    func described(defaultInterval: Int64, events: [EventSpec] = [], options: [OptionSpec] = []) -> PluginDescription {
        PluginDescription(name: "p", version: "1", summary: "", abiMajor: 1, abiMinor: 2, options: options,
                          events: events, defaultInterval: defaultInterval, polled: true, path: "/p.so")
    }

    @Test func aDefaultIntervalIsHeldToTheManifestsBounds() {
        #expect(described(defaultInterval: 1).effectiveInterval(nil) == 1_000_000)
        #expect(described(defaultInterval: .max).effectiveInterval(nil) == 365 * 86_400 * 1_000_000_000)
        #expect(described(defaultInterval: 0).effectiveInterval(nil) == 10_000_000_000)
        #expect(described(defaultInterval: 2_000_000_000).effectiveInterval(nil) == 2_000_000_000)
        // The manifest's own interval is checked by the manifest loader.
        #expect(described(defaultInterval: 1).effectiveInterval(5_000_000) == 5_000_000)
    }

    @Test(arguments: ["availability", "threshold", "rule"])
    func reservedKindsAreProblems(_ kind: String) {
        let d = described(defaultInterval: 0, events: [EventSpec(kind: kind, doc: "", fields: [])])
        #expect(d.problems().contains { $0.contains("event kind '\(kind)' is the host's own") })
    }

    @Test func aJSONDefaultMustParse() {
        let bad = described(defaultInterval: 0, options: [OptionSpec(name: "x", type: .json, defaultText: "[1, {", doc: "")])
        #expect(bad.problems().contains { $0.contains("json option 'x' does not parse") }, "\(bad.problems())")
        let good = described(defaultInterval: 0, options: [OptionSpec(name: "x", type: .json, defaultText: "{a: [1, 2]}", doc: "")])
        #expect(good.problems().isEmpty)
    }
}
