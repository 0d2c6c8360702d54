import Testing
@testable import VigilCore

let cpuPlugin = PluginDescription(
    name: "cpu", version: "1.0.0", summary: "CPU usage", abiMajor: 1, abiMinor: 0,
    options: [
        OptionSpec(name: "per_cpu", type: .bool, defaultText: "false", doc: "one event per CPU"),
        OptionSpec(name: "count", type: .int, defaultText: "10", doc: "how many"),
        OptionSpec(name: "ratio", type: .double, defaultText: "0.5", doc: ""),
        OptionSpec(name: "timeout", type: .duration, defaultText: "5s", doc: "how long to wait"),
        OptionSpec(name: "buffer", type: .size, defaultText: "64KiB", doc: ""),
        OptionSpec(name: "label", type: .string, defaultText: nil, doc: ""),
        OptionSpec(name: "layout", type: .json, defaultText: "[]", doc: ""),
        OptionSpec(name: "device", type: .string, defaultText: nil, doc: "the device to read", required: true),
    ],
    events: [EventSpec(kind: "sample", doc: "one reading", fields: [FieldSpec(name: "usage", type: .double, unit: "ratio")])],
    defaultInterval: 1_000_000_000, polled: true, path: "/usr/lib/vigil/cpu.so")

/// The monitor `cpu` of a manifest, so that its options carry real locations.
func cpuMonitor(_ yaml: String, sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> MonitorConfig {
    let (m, d) = load(yaml + "\nsinks: {out: {type: null}}\n")  // after the monitor: its locations stay put
    #expect(d.isEmpty, "\(ManifestErrors(d))", sourceLocation: sourceLocation)
    return try #require(m?.monitors.first { $0.name == "cpu" }, sourceLocation: sourceLocation)
}

func value(_ bound: [BoundOption], _ name: String) -> OptionValue? { bound.first { $0.name == name }?.value }

@Suite("OptionBinder")
struct OptionBinderTests {
    @Test("every kind of option error, at the value's line and column")
    func errors() throws {
        let monitor = try cpuMonitor("""
            monitors:
              cpu:
                plugin: cpu
                options:
                  per_cpus: true
                  count: 1.5
                  timeout: fast
                  per_cpu: "yes please"
                  layout: [ {out: "double[3]"}, {int32: 3} ]
                  buffer: lots
                  ratio: [1]
            """)
        let (bound, d) = OptionBinder.bind(monitor, to: cpuPlugin)
        expectCount(d, 7)
        expectDiagnostic(d, at: 5, 7, "unknown option 'per_cpus' for plugin 'cpu' in monitor 'cpu'",
                         hint: .equals("did you mean 'per_cpu'?"))
        expectDiagnostic(d, at: 8, 16, "option 'per_cpu' of plugin 'cpu' must be a bool: 'yes please' is not true or false",
                         hint: .equals("per_cpu: one event per CPU"))
        expectDiagnostic(d, at: 6, 14, "option 'count' of plugin 'cpu' must be an int: '1.5' is not a whole number",
                         hint: .equals("count: how many"))
        expectDiagnostic(d, at: 7, 16,
                         "option 'timeout' of plugin 'cpu' must be a duration: 'fast' is not a duration such as 250ms, 5s or 1m",
                         hint: .equals("timeout: how long to wait"))
        expectDiagnostic(d, at: 10, 15, "option 'buffer' of plugin 'cpu' must be a size: 'lots' is not a size such as 4096, 64KiB or 1GB",
                         hint: .none)
        expectDiagnostic(d, at: 11, 14, "option 'ratio' of plugin 'cpu' must be a double: found a list")
        // The required option is reported where the options are.
        expectDiagnostic(d, at: 5, 7, "monitor 'cpu' needs option 'device' (string) for plugin 'cpu'", hint: .equals("the device to read"))
        // What did bind is still bound, in declaration order.
        #expect(bound.map(\.name) == ["label", "layout"])
        #expect(value(bound, "label") == OptionValue.none)
        #expect(value(bound, "layout") == .json(#"[{"out":"double[3]"},{"int32":3}]"#))
    }

    @Test("defaults are filled in from defaultText, in declaration order")
    func defaults() throws {
        let monitor = try cpuMonitor("""
            monitors:
              cpu:
                plugin: cpu
                options:
                  device: /dev/cpu0
                  per_cpu: yes
                  layout: [ {out: "double[3]"}, {int32: 3} ]
            """)
        let (bound, d) = OptionBinder.bind(monitor, to: cpuPlugin)
        expectCount(d, 0)
        #expect(bound == [
            BoundOption(name: "per_cpu", value: .bool(true)),
            BoundOption(name: "count", value: .int(10)),
            BoundOption(name: "ratio", value: .double(0.5)),
            BoundOption(name: "timeout", value: .duration(5_000_000_000)),
            BoundOption(name: "buffer", value: .size(65_536)),
            BoundOption(name: "label", value: .none),
            BoundOption(name: "layout", value: .json(#"[{"out":"double[3]"},{"int32":3}]"#)),
            BoundOption(name: "device", value: .string("/dev/cpu0")),
        ])
    }

    @Test("a json option's default is YAML text: '[]' is an empty list, not the string \"[]\"")
    func jsonDefault() throws {
        let monitor = try cpuMonitor("monitors:\n  cpu:\n    plugin: cpu\n    options: {device: sda}\n")
        let (bound, d) = OptionBinder.bind(monitor, to: cpuPlugin)
        expectCount(d, 0)
        #expect(value(bound, "layout") == .json("[]"))
        var plugin = cpuPlugin
        plugin.options = [OptionSpec(name: "map", type: .json, defaultText: "{a: [1, x], b: ~}", doc: ""),
                          OptionSpec(name: "word", type: .json, defaultText: "hello", doc: "")]
        let (bound2, d2) = OptionBinder.bind(try cpuMonitor("monitors:\n  cpu: {plugin: cpu}\n"), to: plugin)
        expectCount(d2, 0)
        #expect(value(bound2, "map") == .json(#"{"a":[1,"x"],"b":null}"#))
        #expect(value(bound2, "word") == .json(#""hello""#))
    }

    @Test("a missing required option with no 'options:' at all is reported at the monitor's name")
    func requiredWithoutOptions() throws {
        let monitor = try cpuMonitor("""
            monitors:
              cpu:
                plugin: cpu
            """)
        let (bound, d) = OptionBinder.bind(monitor, to: cpuPlugin)
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, 3, "monitor 'cpu' needs option 'device' (string) for plugin 'cpu'")
        #expect(bound.count == cpuPlugin.options.count - 1)
        #expect(!bound.contains { $0.name == "device" })
    }

    @Test("unknown option hints: the option list, or that there are none")
    func unknownHints() throws {
        let monitor = try cpuMonitor("""
            monitors:
              cpu:
                plugin: cpu
                options: {device: x, colour: red}
            """)
        let (_, d) = OptionBinder.bind(monitor, to: cpuPlugin)
        expectCount(d, 1)
        expectDiagnostic(d, at: 4, 26, "unknown option 'colour' for plugin 'cpu' in monitor 'cpu'",
                         hint: .equals("options of 'cpu': per_cpu, count, ratio, timeout, buffer, label, layout, device"))
        var bare = cpuPlugin
        bare.options = []
        bare.name = "bare"
        let (bound, d2) = OptionBinder.bind(monitor, to: bare)
        #expect(bound.isEmpty)
        expectCount(d2, 2)
        expectDiagnostic(d2, at: 4, 15, "unknown option 'device' for plugin 'bare'", hint: .equals("plugin 'bare' takes no options"))
        expectDiagnostic(d2, at: 4, 26, "unknown option 'colour' for plugin 'bare'", hint: .equals("plugin 'bare' takes no options"))
    }

    @Test("convert each type", arguments: [
        ("yes", ValueType.bool, OptionValue.bool(true)),
        ("Off", .bool, .bool(false)),
        ("0x1F", .int, .int(31)),
        ("-1_000", .int, .int(-1000)),
        ("1e3", .double, .double(1000)),
        ("7", .double, .double(7)),
        (".inf", .double, .double(.infinity)),
        ("hello world", .string, .string("hello world")),
        ("12", .string, .string("12")),
        ("1h30m", .duration, .duration(5_400_000_000_000)),
        ("1.5KiB", .size, .size(1536)),
        ("4096", .size, .size(4096)),
        ("true", .json, .json("true")),
        ("3", .json, .json("3")),
        ("x", .json, .json(#""x""#)),
    ])
    func convert(text: String, type: ValueType, expected: OptionValue) throws {
        let result = OptionBinder.convert(.scalar(ConfigScalar(text, at: loc(1, 1))), to: type)
        #expect(try result.get() == expected)
    }

    @Test("conversion failures say why", arguments: [
        ("2", ValueType.bool, "'2' is not true or false"),
        ("1.5", .int, "'1.5' is not a whole number"),
        ("ten", .double, "'ten' is not a number"),
        ("nan", .double, "'nan' is not a number"),
        ("5", .duration, "'5' is not a duration such as 250ms, 5s or 1m"),
        ("big", .size, "'big' is not a size such as 4096, 64KiB or 1GB"),
    ])
    func conversionFailures(text: String, type: ValueType, why: String) {
        switch OptionBinder.convert(.scalar(ConfigScalar(text, at: loc(1, 1))), to: type) {
        case .success(let v): Issue.record("converted to \(v)")
        case .failure(let error): #expect(error.description == why)
        }
    }

    @Test("quoted scalars are strings, never numbers or booleans")
    func quoted() throws {
        let q = ConfigNode.scalar(ConfigScalar("true", quoted: true, at: loc(1, 1)))
        #expect(throws: OptionBinder.ConversionError.self) { try OptionBinder.convert(q, to: .bool).get() }
        #expect(try OptionBinder.convert(q, to: .string).get() == .string("true"))
        #expect(try OptionBinder.convert(q, to: .json).get() == .json(#""true""#))
    }

    @Test("option values print as written in manifests")
    func descriptions() {
        #expect(OptionValue.none.description == "(none)")
        #expect(OptionValue.bool(true).description == "true")
        #expect(OptionValue.int(-3).description == "-3")
        #expect(OptionValue.double(0.5).description == "0.5")
        #expect(OptionValue.string("x y").description == "x y")
        #expect(OptionValue.duration(90_000_000_000).description == "90s")
        #expect(OptionValue.size(65_536).description == "64KiB")
        #expect(OptionValue.json("[1]").description == "[1]")
    }
}

@Suite("PluginDescription.problems")
struct PluginProblemsTests {
    @Test("a well-formed description has no problems")
    func wellFormed() {
        #expect(cpuPlugin.problems() == [])
        var dashed = cpuPlugin
        dashed.name = "my-plugin_2"
        #expect(dashed.problems() == [])
        // The host's own kinds are well-formed, and reserved: a plugin may not declare them.
        let host = PluginDescription(name: "vigil", version: "", summary: "", abiMajor: 1, abiMinor: 0, options: [],
                                     events: PluginDescription.hostKinds, defaultInterval: 0, polled: false, path: "")
        #expect(host.problems() == ["event kind 'availability' is the host's own (reserved: availability, rule, threshold)"])
    }

    @Test("bad names, duplicates, defaults that do not type-check, fields of non-field types")
    func problems() {
        let bad = PluginDescription(
            name: "Bad Name", version: "1", summary: "", abiMajor: 1, abiMinor: 0,
            options: [
                OptionSpec(name: "per-cpu", type: .bool, defaultText: "false", doc: ""),
                OptionSpec(name: "count", type: .int, defaultText: "many", doc: ""),
                OptionSpec(name: "count", type: .int, defaultText: nil, doc: ""),
                OptionSpec(name: "timeout", type: .duration, defaultText: "5", doc: ""),
                OptionSpec(name: "flag", type: .bool, defaultText: "maybe", doc: ""),
            ],
            events: [
                EventSpec(kind: "Sample", doc: "", fields: []),
                EventSpec(kind: "sample", doc: "", fields: [
                    FieldSpec(name: "took", type: .duration),
                    FieldSpec(name: "", type: .int),
                    FieldSpec(name: "x", type: .int),
                    FieldSpec(name: "x", type: .double),
                    FieldSpec(name: "blob", type: .json),
                ]),
                EventSpec(kind: "sample", doc: "", fields: []),
                EventSpec(kind: "my-kind", doc: "", fields: []),
            ],
            defaultInterval: -1, polled: true, path: "/x.so")
        #expect(bad.problems() == [
            "plugin name 'Bad Name' is not [a-z][a-z0-9_-]*",
            "option name 'per-cpu' is not [a-z][a-z0-9_]*",
            "default 'many' of option 'count' is not an int: 'many' is not a whole number",
            "option 'count' is declared twice",
            "default '5' of option 'timeout' is not a duration: '5' is not a duration such as 250ms, 5s or 1m",
            "default 'maybe' of option 'flag' is not a bool: 'maybe' is not true or false",
            "event kind 'Sample' is not [a-z][a-z0-9_]*",
            "field 'took' of kind 'sample' has type duration; fields are bool, int, double or string",
            "a field of kind 'sample' has no name",
            "field 'x' of kind 'sample' is declared twice",
            "field 'blob' of kind 'sample' has type json; fields are bool, int, double or string",
            "event kind 'sample' is declared twice",
            "event kind 'my-kind' is not [a-z][a-z0-9_]*",
            "default interval is negative",
        ])
    }

    @Test("names that are not identifiers", arguments: ["", "9lives", "_x", "Cpu", "cpu.x", "cpu x", "é"])
    func identifiers(name: String) {
        #expect(!PluginDescription.isIdentifier(name))
        #expect(!PluginDescription.isIdentifier(name, allowDash: true))
    }

    @Test("field types and type names")
    func valueTypes() {
        #expect(ValueType.allCases.filter(\.isFieldType) == [.bool, .int, .double, .string])
        #expect(ValueType.allCases.map(\.description) == ["bool", "int", "double", "string", "duration", "size", "json"])
        #expect(ValueType.bool.rawValue == 1 && ValueType.json.rawValue == 7)
        #expect(ValueType.allCases.map(\.withArticle)
            == ["a bool", "an int", "a double", "a string", "a duration", "a size", "a JSON value"])
    }
}
