import Testing
@testable import VigilCore

/// How the `prometheus` sink names fields: the plugin, the kind unless it
/// is `sample` or the plugin's own name, the field, the unit in its base
/// form as the suffix, `_total` for counters only.
@Suite struct PrometheusNamingTests {
    func shape(_ plugin: String, _ kind: String, _ field: String, _ type: ValueType = .double, unit: String = "",
               counter: Bool = false, identity: Bool = false, bool: Bool = false) -> PrometheusNaming.Shape? {
        PrometheusNaming.shape(plugin: plugin, kind: kind, field: field,
                               spec: FieldSpec(name: field, type: type, unit: unit, identity: identity, counter: counter),
                               valueIsBool: bool)
    }

    @Test("names of the catalogue's fields", arguments: [
        ("memory", "sample", "available", "bytes", false, "vigil_memory_available_bytes", 1.0),
        ("memory", "sample", "used_ratio", "ratio", false, "vigil_memory_used_ratio", 1.0),
        ("memory", "sample", "pressure_some_avg10", "percent", false, "vigil_memory_pressure_some_avg10_ratio", 0.01),
        ("memory", "sample", "pressure_some_total", "microseconds", true, "vigil_memory_pressure_some_seconds_total", 1e-6),
        ("memory", "sample", "oom_kills", "processes", true, "vigil_memory_oom_kills_total", 1.0),
        ("thermal", "zone", "temperature", "celsius", false, "vigil_thermal_zone_temperature_celsius", 1.0),
        ("sensors", "temperature", "temperature", "°C", false, "vigil_sensors_temperature_celsius", 1.0),
        ("storage", "usage", "inodes_total", "inodes", false, "vigil_storage_usage_inodes", 1.0),
        ("storage", "low_space", "free_percent", "percent", false, "vigil_storage_low_space_free_ratio", 0.01),
        ("network", "reachability", "latency_ms", "ms", false, "vigil_network_reachability_latency_seconds", 0.001),
        ("wifi", "link", "signal_dbm", "dBm", false, "vigil_wifi_link_signal_dbm", 1.0),
        ("wifi", "link", "frequency", "MHz", false, "vigil_wifi_link_frequency_hertz", 1e6),
        ("radio", "radio", "index", "", false, "vigil_radio_index", 1.0),
        ("load", "sample", "load1", "", false, "vigil_load_load1", 1.0),
        ("sensors", "pressure", "pressure", "kPa", false, "vigil_sensors_pressure_pascals", 1000.0),
        ("ffi", "sample", "Weird Name!", "furlongs/fortnight", false, "vigil_ffi_weird_name__furlongs_per_fortnight", 1.0),
    ])
    func names(plugin: String, kind: String, field: String, unit: String, counter: Bool, expected: String, scale: Double) throws {
        let s = try #require(shape(plugin, kind, field, unit: unit, counter: counter))
        #expect(s.name == expected)
        #expect(s.kind == (counter ? .counter : .gauge))
        #expect(abs(s.scale - scale) <= scale * 1e-12)
        if counter {
            #expect(s.family + "_total" == s.name)
        } else {
            #expect(s.family == s.name)
            #expect(!s.name.hasSuffix("_total"))
        }
    }

    @Test func stringsAndIdentitiesAreNoMetric() {
        #expect(shape("network", "link", "interface", .string, identity: true) == nil)
        #expect(shape("cpu", "core", "cpu", .int, identity: true) == nil)
        #expect(shape("network", "link", "operstate", .string) == nil)
    }

    @Test func booleansAreUnitlessGauges() throws {
        let s = try #require(shape("network", "link", "carrier", .bool, bool: true))
        #expect(s.name == "vigil_network_link_carrier" && s.kind == .gauge && s.scale == 1)
        // A counter mark on a boolean is ignored.
        #expect(shape("x", "sample", "flag", .bool, counter: true, bool: true)?.kind == .gauge)
    }

    @Test func everyNameIsValidWhateverThePluginSays() {
        for (plugin, kind, field) in [("9lives", "Kind-1", "x"), ("ü", "ß", "\u{0}"), ("a b", "", "__"), ("", "", "")] {
            let s = PrometheusNaming.shape(plugin: plugin, kind: kind, field: field, spec: nil, valueIsBool: false)
            let name = s?.name ?? ""
            #expect(name.hasPrefix("vigil_"))
            #expect(name.utf8.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 95 }, "\(name)")
        }
    }

    @Test func labelNamesAreValidAndNeverTheSinksOwn() {
        #expect(PrometheusNaming.labelName("interface") == "interface")
        #expect(PrometheusNaming.labelName("monitor") == "field_monitor")
        #expect(PrometheusNaming.labelName("host") == "field_host")
        #expect(PrometheusNaming.labelName("__name__") == "_name__")
        #expect(PrometheusNaming.labelName("9p") == "_9p")
        #expect(PrometheusNaming.labelName("") == "field_")
    }

    @Test func helpSaysWhereTheValueComesFromAndAConvertedUnit() throws {
        let s = try #require(shape("memory", "sample", "pressure_some_avg10", unit: "percent"))
        #expect(s.help.contains("memory sample.pressure_some_avg10"))
        #expect(s.help.contains("declared in percent"))
    }
}
