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

    @Test func durationAndSizeOptionsAreHeldToTheManifestsBounds() {
        let scalar = { (text: String) in ConfigNode.scalar(ConfigScalar(text, at: SourceLocation(file: "m", line: 1, column: 1))) }
        #expect((try? OptionBinder.convert(scalar("365d"), to: .duration).get()) == .duration(ManifestLimits.maxDuration))
        guard case .failure(let long) = OptionBinder.convert(scalar("366d"), to: .duration) else { Issue.record("366d accepted"); return }
        #expect("\(long)".contains("longer than the limit of 365d"))
        guard case .failure = OptionBinder.convert(scalar("2PiB"), to: .size) else { Issue.record("2PiB accepted"); return }
        guard case .failure = OptionBinder.convert(scalar("99999999999999999999d"), to: .duration) else { Issue.record("overflow accepted"); return }
    }
}
