import Foundation
import Testing
import VigilCore

/// Thresholds, a rule and its action in the real `vigil run`: the power
/// plugin polls a copy of the laptop machine's sysfs, the test drains the
/// battery by writing the fixture file, and the threshold and rule events
/// arrive in a file sink while the rule's program writes its marker file.
@Suite(.serialized, .startsProcesses, .offThePool) struct RulesIntegrationTests {
    /// Copies the laptop machine's sys tree (symlinks kept) to `dir/sys`.
    func laptopSys(in dir: String) throws -> String {
        let copy = try TestEnv.run("/bin/cp", ["-a", TestEnv.fixture("machines/laptop/sys"), dir + "/sys"], timeout: 30)
        #expect(copy.status == 0, "\(copy.stderr)")
        return dir + "/sys"
    }

    func waitFor(_ what: String, seconds: Double = 15, _ done: () -> Bool) {
        let deadline = Date().addingTimeInterval(seconds)
        while !done() && Date() < deadline { usleep(20_000) }
        #expect(done(), "timed out waiting for \(what)")
    }

    func events(_ path: String) -> [Event] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONLineDecoder().decode(String($0)).event }
    }

    @Test func aDrainingBatteryRaisesAThresholdAndARuleThatRunsItsProgram() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let sys = try laptopSys(in: dir)
        let capacity = sys + "/class/power_supply/BAT0/capacity"
        // The action: a program (no shell is involved in running it) that
        // keeps its stdin and two of its environment variables.
        let action = dir + "/notify"
        try TestEnv.write("""
            #!/bin/sh
            cat > "$1.json"
            printf '%s %s %s\\n' "$VIGIL_RULE" "$VIGIL_ACTIVE" "$VIGIL_FIELD_POWER_LEVEL" > "$1.env"
            mv "$1.json" "$1"
            """, to: action)
        chmod(action, 0o755)
        let marker = dir + "/marker"
        let journal = dir + "/journal.jsonl"
        let manifest = dir + "/rules.yaml"
        try TestEnv.write("""
            monitors:
              power:
                plugin: power
                interval: 100ms
                options: { sysfs: "\(sys)" }
                thresholds:
                  level:
                    warning:  { below: 20, clear_above: 25 }
                    critical: { below: 10, clear_above: 15 }
                    per: [name]
            rules:
              low-battery:
                all:
                  - power.level < 20
                  - power.state == "discharging"
                  - none: [ power.supply.online == true ]
                severity: critical
                for: 300ms      # the level is sent once (on change): the host's timer activates the rule
                exec: ["\(action)", "\(marker)"]
            sinks:
              journal:
                type: file
                path: "\(journal)"
                match: ["*/threshold", "*/rule"]
            """, to: manifest)
        let validate = try TestEnv.run(TestEnv.vigil, ["validate", manifest], timeout: 60)
        #expect(validate.status == 0, "\(validate.stderr)")

        let summary = dir + "/summary.json"
        let vigil = try TestEnv.start(TestEnv.vigil, ["run", manifest, "--summary", summary])
        // At 87 %, discharging, on battery: nominal, the rule false; nothing is written yet.
        usleep(500_000)
        #expect(events(journal).isEmpty)

        try TestEnv.write("8\n", to: capacity)
        waitFor("the marker file") { access(marker, F_OK) == 0 }
        waitFor("the threshold and rule events") { events(journal).count >= 2 }
        // Plugged in: the rule clears; the level climbs back past clear_above.
        try TestEnv.write("1\n", to: sys + "/class/power_supply/AC/online")
        try TestEnv.write("Charging\n", to: sys + "/class/power_supply/BAT0/status")
        try TestEnv.write("30\n", to: capacity)
        waitFor("the rule and threshold to clear") { events(journal).count >= 4 }
        vigil.signal(SIGTERM)
        let result = vigil.wait(timeout: 15)
        #expect(result.status == 0, "\(result.stderr)")

        let written = events(journal)
        #expect(written.map { "\($0.monitor)/\($0.kind)" } == ["power/threshold", "low-battery/rule", "low-battery/rule", "power/threshold"])
        let critical = written[0]
        #expect(critical.severity == .critical && critical.plugin == "power")
        #expect(critical[field: "state"] == .string("critical") && critical[field: "previous"] == .string("nominal"))
        #expect(critical[field: "value"] == .double(8) && critical[field: "limit"] == .double(10))
        #expect(critical[field: "name"] == .string("BAT0"))
        let on = written[1]
        #expect(on.severity == .critical && on[field: "active"] == .bool(true))
        #expect(on[field: "power.level"] == .double(8) && on[field: "power.state"] == .string("discharging"))
        #expect(written[2][field: "active"] == .bool(false))
        #expect(written[3][field: "state"] == .string("nominal") && written[3][field: "limit"] == .double(25))

        // The program got the rule event as JSON on stdin and its fields in the environment.
        let stdin = try String(contentsOfFile: marker, encoding: .utf8)
        let sent = try JSONLineDecoder().decode(stdin.trimmingCharacters(in: .newlines)).event
        #expect(sent.monitor == "low-battery" && sent.kind == "rule" && sent[field: "active"] == .bool(true))
        #expect(try String(contentsOfFile: marker + ".env", encoding: .utf8) == "low-battery true 8.0\n")

        // The run's summary counts the action.
        let json = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: summary))) as? [String: Any]
        let actions = json?["actions"] as? [[String: Any]]
        #expect(actions?.count == 1 && actions?.first?["rule"] as? String == "low-battery")
        #expect(actions?.first?["started"] as? Int == 1 && actions?.first?["succeeded"] as? Int == 1)
    }

    @Test func validateReportsRuleAndThresholdMistakesAtTheirPlace() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let manifest = dir + "/bad.yaml"
        try TestEnv.write("""
            monitors:
              power:
                plugin: power
                thresholds:
                  levle: { critical: { below: 10 } }
            rules:
              hot: { condition: "thermal.state == 'critical'" }
              flat: { condition: "power.level < low" }
            sinks: {}
            """, to: manifest)
        let result = try TestEnv.run(TestEnv.vigil, ["validate", manifest], timeout: 60)
        #expect(result.status == 1)
        #expect(result.stderr.contains("\(manifest):5:7: error: monitor 'power' (plugin power) has no field 'levle'"), "\(result.stderr)")
        #expect(result.stderr.contains("did you mean 'level'?"), "\(result.stderr)")
        #expect(result.stderr.contains("\(manifest):7:22: error: 'thermal.state' names no monitor of this manifest"), "\(result.stderr)")
        #expect(result.stderr.contains("\(manifest):8:37: error: in condition 'power.level < low': 'low' is not a number"), "\(result.stderr)")
    }
}
