import LinuxProbes
import VigilKit

/// Every reading of the kernel's hardware monitors, every poll: the hwmon
/// chips (`<sysfs>/class/hwmon/hwmon*`: temperatures, voltages, fans, PWM
/// outputs, currents, power, energy, humidity, intrusion), the thermal zones
/// (`class/thermal/thermal_zone*`) and the cooling devices
/// (`class/thermal/cooling_device*`), as node_exporter's hwmon and
/// thermal_zone collectors read them, values in base units.
///
/// Chips are named as node_exporter names them (see `HwmonChip.chip`), so a
/// sensor is the pair (chip, sensor), `sensor` being the attribute prefix
/// (`temp1`, `in0`, `fan2`); its label file is the `label` field and, for the
/// sensors that have one, a `label` event. Attributes the hwmon ABI defines
/// but this plugin does not declare (a driver's private ones, pwm auto
/// points) are not reported.
///
/// Nothing is kept between polls: a chip, zone or device that appears or
/// goes is simply there or not at the next poll. A file that cannot be read
/// (EIO, EAGAIN, ENODATA from a sleeping or broken driver) or does not hold a
/// number leaves its field out for that poll; a zone whose `temp` fails is
/// left out (node_exporter 1.5 fails its whole thermal_zone collector then).
/// Values are the kernel's own, scaled: nothing is smoothed or clamped (an
/// NVMe drive's `temp2_max` of 65261.85 °C is reported as such). The energy
/// counter is the driver's raw total: when it wraps or the driver resets it,
/// the next value is simply smaller (Prometheus' rate() sees a reset).
final class HwmonMonitor: PolledMonitor {
    /// How an attribute file becomes a field: `raw / divisor` as a double,
    /// `raw != 0` as a bool, or the raw integer.
    enum Conversion { case scaled(Double), bool, int }

    /// One hwmon attribute (`property` of `<type><n>_<property>`) as a field.
    struct Attribute {
        var property: String
        var field: String
        var conversion: Conversion
        var unit: String
        var doc: String
        /// A kernel total (energy), not a level.
        var counter = false
    }

    /// One sensor kind: the hwmon types it takes, its attributes.
    struct SensorKind {
        var kind: String
        var types: [String]
        var doc: String
        var attributes: [Attribute]
    }

    static func levels(_ names: [String], _ divisor: Double, _ unit: String, _ what: String) -> [Attribute] {
        names.map { Attribute(property: $0, field: $0, conversion: .scaled(divisor), unit: unit, doc: "\(what) (`…_\($0)`)") }
    }

    static func flags(_ names: [String]) -> [Attribute] {
        names.map { name in
            let doc = switch name {
            case "fault": "the sensor reports a fault (`…_fault`)"
            case "beep": "the chip beeps on this sensor's alarms (`…_beep`)"
            case "enable": "the sensor is enabled (`…_enable`)"
            default: "the chip raised this alarm (`…_\(name)`)"
            }
            return Attribute(property: name, field: name, conversion: .bool, unit: "", doc: doc)
        }
    }

    static let sensorKinds: [SensorKind] = [
        SensorKind(kind: "temperature", types: ["temp"], doc: "A temperature sensor (`tempN_*`).", attributes:
            [Attribute(property: "input", field: "temperature", conversion: .scaled(1000), unit: "celsius",
                       doc: "the temperature (`tempN_input`, or the bare `tempN` a thermal zone's device has)")]
            + levels(["min", "max", "crit", "lcrit", "emergency", "max_hyst", "min_hyst", "crit_hyst", "lcrit_hyst",
                      "emergency_hyst", "lowest", "highest", "offset", "rated_min", "rated_max"], 1000, "celsius", "limit, hysteresis or record")
            + [Attribute(property: "type", field: "type", conversion: .int, unit: "",
                         doc: "the sensor's type (`tempN_type`): 1 CPU diode, 2 transistor, 3 thermal diode, 4 thermistor, 5 AMD AMDSI, 6 Intel PECI")]
            + flags(["alarm", "min_alarm", "max_alarm", "crit_alarm", "lcrit_alarm", "emergency_alarm", "fault", "beep", "enable"])),
        SensorKind(kind: "voltage", types: ["in", "cpu"], doc: "A voltage input (`inN_*`), or a CPU's VID (`cpuN_vid`).", attributes:
            [Attribute(property: "input", field: "voltage", conversion: .scaled(1000), unit: "volts", doc: "the voltage (`inN_input`)")]
            + levels(["min", "max", "lcrit", "crit", "average", "lowest", "highest", "rated_min", "rated_max"], 1000, "volts", "limit, average or record")
            + [Attribute(property: "vid", field: "vid", conversion: .scaled(1000), unit: "volts", doc: "the CPU core voltage the CPU asks for (`cpuN_vid`)")]
            + flags(["alarm", "min_alarm", "max_alarm", "lcrit_alarm", "crit_alarm", "fault", "beep", "enable"])),
        SensorKind(kind: "fan", types: ["fan"], doc: "A fan (`fanN_*`); a stopped fan reads 0.", attributes:
            [Attribute(property: "input", field: "speed", conversion: .scaled(1), unit: "rpm", doc: "the speed (`fanN_input`)")]
            + levels(["min", "max", "target"], 1, "rpm", "limit or target speed")
            + [Attribute(property: "div", field: "div", conversion: .int, unit: "", doc: "the clock divisor (`fanN_div`)"),
               Attribute(property: "pulses", field: "pulses", conversion: .int, unit: "", doc: "tachometer pulses per revolution (`fanN_pulses`)")]
            + flags(["alarm", "min_alarm", "max_alarm", "fault", "beep", "enable"])),
        SensorKind(kind: "pwm", types: ["pwm"], doc: "A PWM fan output (`pwmN*`).", attributes: [
            Attribute(property: "", field: "duty_cycle", conversion: .int, unit: "", doc: "the duty cycle, 0 (off) to 255 (full) (`pwmN`)"),
            Attribute(property: "enable", field: "enable", conversion: .int, unit: "", doc: "the control mode: 0 full speed, 1 manual, 2 and up automatic (`pwmN_enable`)"),
            Attribute(property: "mode", field: "mode", conversion: .int, unit: "", doc: "0 DC, 1 PWM (`pwmN_mode`)"),
            Attribute(property: "freq", field: "frequency", conversion: .int, unit: "Hz", doc: "the base PWM frequency (`pwmN_freq`)"),
            Attribute(property: "auto_channels_temp", field: "auto_channels_temp", conversion: .int, unit: "",
                      doc: "the temperature channels automatic mode follows, a bit mask (`pwmN_auto_channels_temp`)"),
            Attribute(property: "floor", field: "floor", conversion: .int, unit: "", doc: "the lowest duty cycle in automatic mode (`pwmN_floor`)"),
            Attribute(property: "start", field: "start", conversion: .int, unit: "", doc: "the duty cycle that starts a stopped fan (`pwmN_start`)"),
            Attribute(property: "stop_time", field: "stop_time", conversion: .scaled(1000), unit: "seconds",
                      doc: "how long the output stays at floor before the fan is stopped (`pwmN_stop_time`)"),
            Attribute(property: "target_temp", field: "target_temp", conversion: .scaled(1000), unit: "celsius",
                      doc: "the temperature automatic mode aims at (`pwmN_target_temp`)"),
        ] + (1...7).flatMap { n in [
            Attribute(property: "auto_point\(n)_pwm", field: "auto_point\(n)_pwm", conversion: .int, unit: "",
                      doc: "the duty cycle of the fan curve's point \(n) (`pwmN_auto_point\(n)_pwm`)"),
            Attribute(property: "auto_point\(n)_temp", field: "auto_point\(n)_temp", conversion: .scaled(1000), unit: "celsius",
                      doc: "the temperature of the fan curve's point \(n) (`pwmN_auto_point\(n)_temp`)"),
        ] }),
        SensorKind(kind: "current", types: ["curr"], doc: "A current sensor (`currN_*`).", attributes:
            [Attribute(property: "input", field: "current", conversion: .scaled(1000), unit: "amperes", doc: "the current (`currN_input`)")]
            + levels(["min", "max", "lcrit", "crit", "average", "lowest", "highest", "rated_min", "rated_max"], 1000, "amperes", "limit, average or record")
            + flags(["alarm", "min_alarm", "max_alarm", "lcrit_alarm", "crit_alarm", "fault", "beep", "enable"])),
        SensorKind(kind: "power", types: ["power"], doc: "A power meter (`powerN_*`).", attributes:
            [Attribute(property: "input", field: "power", conversion: .scaled(1_000_000), unit: "watts", doc: "the power (`powerN_input`)")]
            + levels(["average", "average_highest", "average_lowest", "average_max", "average_min", "input_highest", "input_lowest",
                      "cap", "cap_hyst", "cap_max", "cap_min", "max", "crit", "rated_min", "rated_max"], 1_000_000, "watts", "average, limit or record")
            + levels(["average_interval", "average_interval_min", "average_interval_max"], 1000, "seconds", "averaging interval")
            + [Attribute(property: "accuracy", field: "accuracy", conversion: .scaled(1), unit: "percent", doc: "the meter's accuracy (`powerN_accuracy`)")]
            + flags(["alarm", "cap_alarm", "max_alarm", "crit_alarm", "enable"])),
        SensorKind(kind: "energy", types: ["energy"], doc: "An energy meter (`energyN_input`).", attributes: [
            Attribute(property: "input", field: "energy", conversion: .scaled(1_000_000), unit: "joules",
                      doc: "the energy used since the driver started counting (`energyN_input`); a counter, reported raw (a wrap or reset shows as a smaller value)",
                      counter: true),
        ]),
        SensorKind(kind: "humidity", types: ["humidity"], doc: "A humidity sensor (`humidityN_*`).", attributes:
            [Attribute(property: "input", field: "humidity", conversion: .scaled(1000), unit: "percent", doc: "the relative humidity (`humidityN_input`)")]
            + levels(["min", "max", "min_hyst", "max_hyst"], 1000, "percent", "limit")
            + flags(["alarm", "fault", "enable"])),
        SensorKind(kind: "intrusion", types: ["intrusion"], doc: "A chassis intrusion detector (`intrusionN_*`).",
                   attributes: flags(["alarm", "beep"])),
    ]

    static func sensorDecl(_ k: SensorKind) -> EventDecl {
        EventDecl(k.kind, doc: k.doc + " Every poll; only the attributes the driver has.", fields: [
            FieldDecl("chip", .string, doc: "the chip as node_exporter names it, from its device (platform_coretemp_0, pci0000:00_0000:00:03_0), else its name, else hwmonN"),
            FieldDecl("sensor", .string, doc: "the attribute prefix: \(k.types.map { "\($0)N" }.joined(separator: ", ")) (\(k.types[0])1)"),
            FieldDecl("label", .string, doc: "the sensor's label file (Core 0, Composite), where the driver has one"),
        ] + k.attributes.map { a in
            let type: FieldType = switch a.conversion { case .scaled: .double; case .bool: .bool; case .int: .int }
            return FieldDecl(a.field, type, unit: a.unit, doc: a.doc, counter: a.counter)
        }, policy: .samples, key: ["chip", "sensor"])
    }

    static let spec = PluginSpec(
        name: "hwmon", version: "1.0.0",
        summary: "Hardware sensors every poll: hwmon temperatures, voltages, fans, PWM, currents, power, energy and humidity, thermal zones and cooling devices, from sysfs",
        defaultInterval: .seconds(10),
        events: sensorKinds.map(sensorDecl) + [
            EventDecl("chip", doc: "A chip that has a `name` file, every poll: its stable name and its driver's name.", fields: [
                FieldDecl("chip", .string, doc: "the chip as the sensor kinds name it"),
                FieldDecl("name", .string, doc: "the `name` file, cleaned as node_exporter cleans it (coretemp, nvme, bat0)"),
                FieldDecl("directory", .string, doc: "the directory in class/hwmon (hwmon2; changes across boots)"),
            ], policy: .samples, key: ["chip"]),
            EventDecl("label", doc: "A sensor that has a label file, every poll.", fields: [
                FieldDecl("chip", .string, doc: "the chip"),
                FieldDecl("sensor", .string, doc: "the sensor (temp1)"),
                FieldDecl("label", .string, doc: "the label file's text, trimmed (Package id 0, Core 0)"),
            ], policy: .samples, key: ["chip", "sensor"]),
            EventDecl("settings", doc: "A chip's chip-wide attributes, every poll, where it has any.", fields: [
                FieldDecl("chip", .string, doc: "the chip"),
                FieldDecl("beep_enable", .bool, doc: "the chip's beeps are enabled (`beep_enable`)"),
                FieldDecl("vrm", .double, doc: "the voltage regulator module version the VID is decoded with (`vrm`)"),
                FieldDecl("update_interval", .double, unit: "seconds", doc: "how often the chip updates its readings (`update_interval`)"),
            ], policy: .samples, key: ["chip"]),
            EventDecl("zone", doc: "A thermal zone, every poll, disabled ones included (as node_exporter reports them); left out of a poll when its temp cannot be read.", fields: [
                FieldDecl("zone", .string, doc: "the zone's number (0 for thermal_zone0)"),
                FieldDecl("type", .string, doc: "the zone's type (acpitz, x86_pkg_temp)"),
                FieldDecl("temperature", .double, unit: "celsius", doc: "the zone's temperature (`temp`)"),
                FieldDecl("enabled", .bool, doc: "the zone's `mode` is enabled (absent where the kernel has no mode file)"),
                FieldDecl("policy", .string, doc: "the zone's governor (step_wise), where the kernel has one"),
            ], policy: .samples, key: ["zone"]),
            EventDecl("cooling_device", doc: "A thermal cooling device (a fan, a processor's throttling), every poll.", fields: [
                FieldDecl("device", .string, doc: "the device's number (0 for cooling_device0)"),
                FieldDecl("type", .string, doc: "the device's type (Processor, Fan, intel_powerclamp)"),
                FieldDecl("state", .int, doc: "the cooling state now (`cur_state`): 0 is no cooling; some drivers report −1 when unknown"),
                FieldDecl("max_state", .int, doc: "the highest cooling state (`max_state`)"),
            ], policy: .samples, key: ["device"]),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var hwmon = true
        var thermalZones = true
        var coolingDevices = true
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."),
            .option("hwmon", \.hwmon, doc: "Report the hwmon chips (class/hwmon)."),
            .option("thermal_zones", \.thermalZones, doc: "Report the thermal zones (class/thermal/thermal_zone*)."),
            .option("cooling_devices", \.coolingDevices, doc: "Report the cooling devices (class/thermal/cooling_device*)."))
    }

    private let context: MonitorContext
    private let root: FSRoot
    private let options: Options

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        guard options.hwmon || options.thermalZones || options.coolingDevices else {
            throw .invalidOption("hwmon", "hwmon, thermal_zones and cooling_devices are all false: nothing to report")
        }
        self.context = context
        self.root = FSRoot(options.sysfs, keepingFilesOpen: true)
        self.options = options
    }

    func start() throws(MonitorError) {
        guard hasSource() else { throw noSource }
    }

    func poll() throws(MonitorError) {
        var emitted = 0
        if options.hwmon { emitted += pollChips() }
        if options.thermalZones { emitted += pollZones() }
        if options.coolingDevices { emitted += pollCoolingDevices() }
        if emitted == 0 && !hasSource() { throw noSource }
    }

    private var noSource: MonitorError {
        var wanted: [String] = []
        if options.hwmon { wanted.append("hwmon chip in \(root.path("class/hwmon"))") }
        if options.thermalZones { wanted.append("thermal zone") }
        if options.coolingDevices { wanted.append("cooling device") }
        return .unavailable("no " + wanted.joined(separator: ", no ") + " in \(root.path("class/thermal"))")
    }

    private func hasSource() -> Bool {
        if options.hwmon, !(root.list("class/hwmon") ?? []).filter({ !$0.hasPrefix(".") }).isEmpty { return true }
        let thermal = root.list("class/thermal") ?? []
        if options.thermalZones, thermal.contains(where: { Self.number($0, "thermal_zone") != nil }) { return true }
        if options.coolingDevices, thermal.contains(where: { Self.number($0, "cooling_device") != nil }) { return true }
        return false
    }

    // MARK: hwmon

    private func pollChips() -> Int {
        var emitted = 0
        for chip in root.hwmonChips() ?? [] {
            if let name = chip.name {
                context.emit("chip", fields: [("chip", .string(chip.chip)), ("name", .string(name)), ("directory", .string(chip.directory))])
                emitted += 1
            }
            var settings: [(String, Value)] = []
            for sensor in chip.sensors {
                if let label = sensor.attributes["label"], !label.isEmpty {
                    context.emit("label", fields: [("chip", .string(chip.chip)), ("sensor", .string(sensor.id)), ("label", .string(label))])
                    emitted += 1
                }
                switch sensor.type {
                case "beep_enable":
                    if let v = sensor.attributes[""].flatMap(Self.number) { settings.append(("beep_enable", .bool(v != 0))) }
                    continue
                case "vrm":
                    if let v = sensor.attributes[""].flatMap(Self.number) { settings.append(("vrm", .double(v))) }
                    continue
                case "update_interval":
                    if let v = sensor.attributes[""].flatMap(Self.number) { settings.append(("update_interval", .double(v / 1000))) }
                    continue
                default: break
                }
                guard let kind = Self.sensorKinds.first(where: { $0.types.contains(sensor.type) }) else { continue }
                var fields: [(String, Value)] = [("chip", .string(chip.chip)), ("sensor", .string(sensor.id))]
                if let label = sensor.attributes["label"], !label.isEmpty { fields.append(("label", .string(label))) }
                var values = 0
                for attribute in kind.attributes {
                    var text = sensor.attributes[attribute.property]
                    // A bare `temp0` (a thermal zone's device) is the sensor's input.
                    if attribute.property == "input", text == nil, kind.kind != "pwm", kind.kind != "fan" { text = sensor.attributes[""] }
                    guard let text, let raw = Self.number(text) else { continue }
                    switch attribute.conversion {
                    case .scaled(let divisor): fields.append((attribute.field, .double(raw / divisor)))
                    case .bool: fields.append((attribute.field, .bool(raw != 0)))
                    case .int:
                        guard let i = Int64(exactly: raw.rounded(.towardZero)) else { continue }
                        fields.append((attribute.field, .int(i)))
                    }
                    values += 1
                }
                guard values > 0 else { continue }  // nothing readable this poll
                context.emit(kind.kind, fields: fields)
                emitted += 1
            }
            if !settings.isEmpty {
                context.emit("settings", fields: [("chip", .string(chip.chip))] + settings)
                emitted += 1
            }
        }
        return emitted
    }

    /// A sysfs number as node_exporter parses it (a float); nil for text or a non-finite value.
    static func number(_ text: String) -> Double? {
        guard let value = Double(text), value.isFinite else { return nil }
        return value
    }

    // MARK: thermal zones and cooling devices

    /// `N` of `<prefix>N`, as a string of digits; nil for another name.
    static func number(_ name: String, _ prefix: String) -> String? {
        guard name.hasPrefix(prefix) else { return nil }
        let digits = name.dropFirst(prefix.count)
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return String(digits)
    }

    private func text(_ relative: String) -> String? {
        if case .text(let t) = root.attribute(relative) { return t }
        return nil
    }

    private func integer(_ relative: String) -> Int64? { text(relative).flatMap { Int64($0) } }

    private func pollZones() -> Int {
        var emitted = 0
        for name in root.list("class/thermal") ?? [] {
            guard let zone = Self.number(name, "thermal_zone") else { continue }
            let dir = "class/thermal/" + name
            guard let milli = integer(dir + "/temp") else {
                context.log(.debug, "\(name) left out this poll: \(root.path(dir + "/temp")) cannot be read as a temperature")
                continue
            }
            var fields: [(String, Value)] = [("zone", .string(zone)), ("type", .string(text(dir + "/type") ?? ""))]
            fields.append(("temperature", .double(Double(milli) / 1000)))
            if let mode = text(dir + "/mode") { fields.append(("enabled", .bool(mode == "enabled"))) }
            if let policy = text(dir + "/policy") { fields.append(("policy", .string(policy))) }
            context.emit("zone", fields: fields)
            emitted += 1
        }
        return emitted
    }

    private func pollCoolingDevices() -> Int {
        var emitted = 0
        for name in root.list("class/thermal") ?? [] {
            guard let device = Self.number(name, "cooling_device") else { continue }
            let dir = "class/thermal/" + name
            var fields: [(String, Value)] = [("device", .string(device)), ("type", .string(text(dir + "/type") ?? ""))]
            if let state = integer(dir + "/cur_state") { fields.append(("state", .int(state))) }
            if let max = integer(dir + "/max_state") { fields.append(("max_state", .int(max))) }
            guard fields.count > 2 else { continue }
            context.emit("cooling_device", fields: fields)
            emitted += 1
        }
        return emitted
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(HwmonMonitor.self, a, r) }
