import Glibc
import LinuxProbes
import VigilKit

/// Temperatures and thermal states from the kernel's thermal zones
/// (`<sysfs>/class/thermal/thermal_zone*/`) and hwmon temperature sensors
/// (`<sysfs>/class/hwmon/hwmon*/temp*_input`), per sensor and machine-wide.
///
/// States, from the sensor's own trip points or limits:
///
/// | state | thermal zone (`trip_point_N_type`) | hwmon sensor |
/// |---|---|---|
/// | `nominal` | below every `active`, `passive`, `hot` and `critical` trip | below `tempN_max` |
/// | `fair` | at or above an `active` trip (fans run) | — (hwmon has no such limit) |
/// | `serious` | at or above a `passive` (throttling) or `hot` trip | at or above `tempN_max` |
/// | `critical` | at or above a `critical` trip | at or above `tempN_crit` or `tempN_emergency` |
///
/// Trip points and limits at or below 0 °C are unset and ignored. A state is
/// left only when the temperature falls below the trip minus its
/// `trip_point_N_hyst` (for hwmon, below `tempN_max_hyst` / `tempN_crit_hyst`,
/// which are absolute), as the kernel does.
///
/// Skipped, and logged at debug: a zone whose `mode` is `disabled` (the
/// kernel neither polls it nor acts on its trips); a zone or sensor whose
/// temperature cannot be read this poll (EIO, ENODATA, EAGAIN, vanished) or
/// does not parse; hwmon devices that mirror a thermal zone (those whose
/// `device` is a `thermal_zoneN`, such as `acpitz`), which are already
/// reported as the zone.
final class ThermalMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "thermal", version: "1.0.0",
        summary: "Temperatures and thermal states (nominal, fair, serious, critical) of thermal zones and hwmon sensors",
        defaultInterval: .seconds(10),
        events: [
            // The machine-wide kind first: `thermal.state` in a rule or threshold means it.
            EventDecl("summary", doc: "The whole machine: the worst state of every sensor read, and the highest temperature; a snapshot on start, then on change.", fields: [
                FieldDecl("state", .string, doc: "the worst state: nominal, fair, serious or critical"),
                FieldDecl("temperature", .double, unit: "celsius", doc: "the highest temperature read (changes below min_change not reported)"),
            ]),
            EventDecl("zone", doc: "One thermal zone or hwmon temperature sensor: a snapshot on start, then when its state, type or label changed or its temperature moved by at least min_change.", fields: [
                FieldDecl("zone", .string, doc: "thermal_zoneN, or hwmonN/tempK for a hwmon sensor"),
                FieldDecl("source", .string, doc: "thermal_zone or hwmon"),
                FieldDecl("type", .string, doc: "the zone's type (acpitz, x86_pkg_temp) or the hwmon chip's name (coretemp, nvme)"),
                FieldDecl("label", .string, doc: "tempK_label for a hwmon sensor (else tempK); the type for a thermal zone"),
                FieldDecl("temperature", .double, unit: "celsius", doc: "changes smaller than the min_change option are not reported"),
                FieldDecl("state", .string, doc: "nominal, fair, serious or critical, from the trip points or limits"),
            ], key: ["zone"]),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var hwmon = true
        var minChange = 0.5
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."),
            .option("hwmon", \.hwmon, doc: "Also report hwmon temperature sensors (class/hwmon), not only thermal zones."),
            .option("min_change", \.minChange, doc: "The least temperature change, in degrees Celsius, that is reported."))
    }

    enum State: Int, Comparable {
        case nominal, fair, serious, critical
        var name: String {
            switch self {
            case .nominal: "nominal"
            case .fair: "fair"
            case .serious: "serious"
            case .critical: "critical"
            }
        }
        var severity: Severity {
            switch self {
            case .nominal, .fair: .info
            case .serious: .warning
            case .critical: .critical
            }
        }
        static func < (a: State, b: State) -> Bool { a.rawValue < b.rawValue }
    }

    /// A trip point or limit, in millidegrees: reached at `at`, left below `clear`.
    struct Trip {
        var state: State
        var at: Int64
        var clear: Int64
    }

    /// A sensor found under the root, to be read.
    struct Sensor {
        var zone: String
        var source: String
        var type: String
        var label: String
        /// The temperature file, relative to the root.
        var input: String
        var trips: [Trip]
    }

    /// What was last reported of one sensor.
    struct Reported {
        var zone: String
        var temperature: Double
        var state: State
    }

    private let context: MonitorContext
    private let root: FSRoot
    private let readHwmon: Bool
    private let minChange: Double
    private var reported: [Reported] = []
    private var summaryTemperature: Double?
    /// Zones last seen, unreadable now, and logged as disabled (so each is logged once).
    private var seen: [String] = []
    private var unreadable: [String] = []
    private var loggedDisabled: [String] = []
    private var declaredUnavailable = false

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        guard options.minChange.isFinite, options.minChange >= 0 else {
            throw .invalidOption("min_change", "must be a number of degrees, 0 or more, not \(options.minChange)")
        }
        self.context = context
        self.root = FSRoot(options.sysfs)
        self.readHwmon = options.hwmon
        self.minChange = options.minChange
    }

    func start() throws(MonitorError) {
        reported = []
        summaryTemperature = nil
        seen = []
        unreadable = []
        loggedDisabled = []
        let (sensors, disabled) = discover()
        if sensors.isEmpty { try unavailable(disabled: disabled) }
        if declaredUnavailable {
            declaredUnavailable = false
            context.setAvailability(true)
        }
    }

    func poll() throws(MonitorError) {
        let (sensors, disabled) = discover()
        if sensors.isEmpty { try unavailable(disabled: disabled) }
        if declaredUnavailable {
            declaredUnavailable = false
            context.setAvailability(true)
        }

        // Sensors gone since the last poll: their next appearance is a snapshot.
        for zone in seen where !sensors.contains(where: { $0.zone == zone }) {
            context.forget("zone", key: [.string(zone)])
            reported.removeAll { $0.zone == zone }
            unreadable.removeAll { $0 == zone }
            context.log(.debug, "\(zone) is gone")
        }
        seen = sensors.map(\.zone)

        var worst: State?
        var hottest: Double?
        for sensor in sensors {
            guard let milli = readTemperature(sensor) else { continue }
            let previous = reported.first { $0.zone == sensor.zone }
            let state = Self.state(milli, sensor.trips, previous: previous?.state ?? .nominal)
            var temperature = Double(milli) / 1000
            if let previous, previous.state == state, abs(temperature - previous.temperature) < minChange {
                temperature = previous.temperature  // too small a change: the last reported value stands
            }
            if let i = reported.firstIndex(where: { $0.zone == sensor.zone }) {
                reported[i] = Reported(zone: sensor.zone, temperature: temperature, state: state)
            } else {
                reported.append(Reported(zone: sensor.zone, temperature: temperature, state: state))
            }
            context.emit("zone", severity: state.severity, fields: [
                ("zone", .string(sensor.zone)), ("source", .string(sensor.source)), ("type", .string(sensor.type)),
                ("label", .string(sensor.label)), ("temperature", .double(temperature)), ("state", .string(state.name)),
            ])
            worst = max(worst ?? state, state)
            hottest = max(hottest ?? Double(milli) / 1000, Double(milli) / 1000)
        }
        guard let worst, var hottest else {
            throw .temporary("no temperature could be read this poll (\(sensors.count) sensors, all unreadable)")
        }
        if let last = summaryTemperature, abs(hottest - last) < minChange { hottest = last }
        summaryTemperature = hottest
        context.emit("summary", severity: worst.severity, fields: [("state", .string(worst.name)), ("temperature", .double(hottest))])
    }

    // MARK: reading

    private func unavailable(disabled: Int) throws(MonitorError) -> Never {
        var reason = "no thermal zone in \(root.path("class/thermal"))"
        if disabled > 0 { reason = "every thermal zone in \(root.path("class/thermal")) is disabled (\(disabled))" }
        reason += readHwmon ? " and no temperature sensor in \(root.path("class/hwmon"))"
                            : " (hwmon sensors are not read: hwmon is false)"
        declaredUnavailable = true
        context.setAvailability(false, reason: reason)
        throw .unavailable(reason)
    }

    /// The temperature in millidegrees, or nil (logged when it starts failing).
    private func readTemperature(_ sensor: Sensor) -> Int64? {
        let problem: String
        do {
            let text = try root.readText(sensor.input)
            if let milli = Int64(Self.trimmed(text)) {
                if let i = unreadable.firstIndex(of: sensor.zone) {
                    unreadable.remove(at: i)
                    context.log(.debug, "\(sensor.zone): \(root.path(sensor.input)) is readable again")
                }
                return milli
            }
            problem = "\(root.path(sensor.input)): not a temperature: \(Self.trimmed(text).prefix(40))"
        } catch {
            problem = error.description
        }
        if !unreadable.contains(sensor.zone) {
            unreadable.append(sensor.zone)
            context.log(.debug, "\(sensor.zone) skipped: \(problem)")
        }
        return nil
    }

    /// The state of a temperature against trips, with hysteresis from `previous`.
    static func state(_ milli: Int64, _ trips: [Trip], previous: State) -> State {
        var state = State.nominal
        for trip in trips where trip.state > state {
            if milli >= trip.at || (previous >= trip.state && milli >= trip.clear) { state = trip.state }
        }
        return state
    }

    /// Every readable-looking sensor now, and how many thermal zones are disabled.
    private func discover() -> (sensors: [Sensor], disabled: Int) {
        var sensors: [Sensor] = []
        var disabled = 0
        for (_, name) in Self.numbered(Self.list(root.path("class/thermal")), prefix: "thermal_zone") {
            let dir = "class/thermal/\(name)"
            guard root.exists(dir + "/temp") else { continue }  // vanished, or not a zone
            if let mode = try? root.readText(dir + "/mode"), Self.trimmed(mode) == "disabled" {
                disabled += 1
                if !loggedDisabled.contains(name) {
                    loggedDisabled.append(name)
                    context.log(.debug, "\(name) is disabled (mode), not reported")
                }
                continue
            }
            let type = (try? root.readText(dir + "/type")).map(Self.trimmed) ?? name
            sensors.append(Sensor(zone: name, source: "thermal_zone", type: type, label: type, input: dir + "/temp",
                                  trips: zoneTrips(dir)))
        }
        guard readHwmon else { return (sensors, disabled) }
        for (_, name) in Self.numbered(Self.list(root.path("class/hwmon")), prefix: "hwmon") {
            let dir = "class/hwmon/\(name)"
            if mirrorsThermalZone(dir) { continue }
            let chip = (try? root.readText(dir + "/name")).map(Self.trimmed) ?? name
            let inputs = (Self.list(root.path(dir)) ?? []).compactMap { file -> (Int, String)? in
                guard file.hasPrefix("temp"), file.hasSuffix("_input"),
                      let n = Int(file.dropFirst(4).dropLast(6)) else { return nil }
                return (n, "temp\(n)")
            }.sorted { $0.0 < $1.0 }
            for (_, temp) in inputs {
                let label = (try? root.readText("\(dir)/\(temp)_label")).map(Self.trimmed).flatMap { $0.isEmpty ? nil : $0 } ?? temp
                sensors.append(Sensor(zone: "\(name)/\(temp)", source: "hwmon", type: chip, label: label,
                                      input: "\(dir)/\(temp)_input", trips: hwmonTrips(dir, temp)))
            }
        }
        return (sensors, disabled)
    }

    private func zoneTrips(_ dir: String) -> [Trip] {
        var trips: [Trip] = []
        for n in 0..<256 {
            guard let type = try? root.readText("\(dir)/trip_point_\(n)_type") else { break }
            let state: State
            switch Self.trimmed(type) {
            case "critical": state = .critical
            case "hot", "passive": state = .serious
            case "active": state = .fair
            default: continue
            }
            guard let at = milli("\(dir)/trip_point_\(n)_temp"), at > 0 else { continue }
            let hyst = max(0, milli("\(dir)/trip_point_\(n)_hyst") ?? 0)
            trips.append(Trip(state: state, at: at, clear: at - hyst))
        }
        return trips
    }

    private func hwmonTrips(_ dir: String, _ temp: String) -> [Trip] {
        var trips: [Trip] = []
        for (limit, state) in [("max", State.serious), ("crit", .critical), ("emergency", .critical)] {
            guard let at = milli("\(dir)/\(temp)_\(limit)"), at > 0 else { continue }
            let hyst = milli("\(dir)/\(temp)_\(limit)_hyst").map { min($0, at) } ?? at
            trips.append(Trip(state: state, at: at, clear: hyst))
        }
        return trips
    }

    /// An hwmon device the thermal core made for a zone: its parent is `thermal_zoneN`.
    private func mirrorsThermalZone(_ dir: String) -> Bool {
        // Only what lies below the root counts (the root's own path may contain anything).
        let base: String = realpath(root.path(""), nil).map { p in defer { free(p) }; return String(cString: p) } ?? root.path("")
        for path in [root.path(dir + "/device"), root.path(dir)] {
            guard let resolved = realpath(path, nil) else { continue }
            defer { free(resolved) }
            var full = String(cString: resolved)
            if full.hasPrefix(base + "/") { full.removeFirst(base.count) }
            let components = full.split(separator: "/")
            if path.hasSuffix("/device") {
                if components.last?.hasPrefix("thermal_zone") == true { return true }
            } else if components.contains(where: { $0.hasPrefix("thermal_zone") }) {
                return true
            }
        }
        return false
    }

    private func milli(_ relative: String) -> Int64? {
        (try? root.readText(relative)).flatMap { Int64(Self.trimmed($0)) }
    }

    static func trimmed(_ text: String) -> String { FSRoot.trimmed(text) }

    /// Names `prefix` followed by a number, sorted by the number.
    static func numbered(_ names: [String]?, prefix: String) -> [(Int, String)] {
        (names ?? []).compactMap { name -> (Int, String)? in
            guard name.hasPrefix(prefix), let n = Int(name.dropFirst(prefix.count)), n >= 0 else { return nil }
            return (n, name)
        }.sorted { $0.0 < $1.0 }
    }

    /// The entries of a directory, or nil when it cannot be opened.
    static func list(_ path: String) -> [String]? { FSRoot.listDirectory(path) }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(ThermalMonitor.self, a, r) }
