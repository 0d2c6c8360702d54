import Glibc
import LinuxProbes
import VigilKit

/// Motion and environment sensors from the kernel's Industrial I/O subsystem
/// (`<sysfs>/bus/iio/devices/iio:deviceN/`): XestiMonitors' Accelerometer,
/// Gyroscope, Magnetometer, Altimeter, Proximity and OrientationMonitor, and
/// GatheredKit's sensors, on Linux.
///
/// Each device directory has a `name` (accel_3d, gyro_3d, magn_3d, als, prox,
/// bmp280…) and one file per channel. A channel is read from `in_<type>_input`
/// when the driver offers it (already in the ABI's unit), otherwise as
/// (`in_<type>_raw` + offset) × scale, with the offset and scale taken from
/// the per-axis attribute (`in_accel_x_scale`) or else the shared one
/// (`in_accel_scale`); a missing offset is 0, a missing scale 1. The units are
/// those of the kernel's IIO ABI: acceleration in m/s², angular velocity in
/// rad/s, magnetic field in gauss, pressure in kPa, illuminance in lux and
/// temperature in milli °C (reported here in °C).
///
/// Polled: every device is listed and read once per interval (default 1 s;
/// motion sensors sample far faster, and a manifest may ask for 100ms).
/// IIO's buffered mode, where a trigger fills `/dev/iio:deviceN` with
/// timestamped samples, needs the scan elements enabled, a trigger chosen and
/// the character device opened (as root, usually): not done here.
///
/// A device whose attribute is listed but cannot be read (EIO, EAGAIN from a
/// sleeping sensor, ENODEV from a device going away between the listing and
/// the read) or does not parse is skipped for that poll, logged at debug;
/// nothing of that is fatal. Without any IIO device that has a channel this
/// monitor knows (a VM, a CI runner, a server), it is unavailable.
final class SensorsMonitor: PolledMonitor {
    /// `relation`: "along" an axis (a force, a field), or "about" it (a rotation).
    static func axes(_ kind: String, unit: String, doc: String, what: String, relation: String = "along") -> EventDecl {
        EventDecl(kind, doc: doc, fields: [
            FieldDecl("device", .string, doc: "the IIO device's directory name (iio:device0)"),
            FieldDecl("name", .string, doc: "the device's `name` attribute (the driver's name for it: accel_3d, bmi160…)"),
            FieldDecl("x", .double, unit: unit, doc: "\(what) \(relation) the device's x axis"),
            FieldDecl("y", .double, unit: unit, doc: "\(what) \(relation) the device's y axis"),
            FieldDecl("z", .double, unit: unit, doc: "\(what) \(relation) the device's z axis"),
        ], policy: .samples, key: ["device"])
    }

    static let spec = PluginSpec(
        name: "sensors", version: "1.0.0",
        summary: "Motion and environment sensors from Linux IIO (accelerometer, gyroscope, magnetometer, orientation, proximity, pressure and relative altitude, light, temperature), from sysfs (polled)",
        defaultInterval: .seconds(1),
        events: [
            axes("accelerometer", unit: "m/s²", doc: """
                An accelerometer's reading, every poll (motion is sampled, not reported on change): (raw + offset) × \
                scale per axis. At rest it is the reaction to gravity: about +9.81 m/s² on the axis pointing up.
                """, what: "acceleration"),
            axes("gyroscope", unit: "rad/s", doc: "A gyroscope's reading (in_anglvel_*), every poll.",
                 what: "angular velocity", relation: "about"),
            axes("magnetometer", unit: "gauss", doc: "A magnetometer's reading (in_magn_*), every poll.",
                 what: "magnetic field"),
            EventDecl("orientation", doc: """
                The device's orientation derived from gravity: the accelerometer axis with the largest magnitude, \
                when it is at least 1.5 times the next one (within about 33° of the axis); otherwise the last \
                orientation stands. A snapshot on start, then on change only.
                """, fields: [
                FieldDecl("device", .string, doc: "the accelerometer's IIO device (iio:device0)"),
                FieldDecl("name", .string, doc: "the accelerometer's `name` attribute"),
                FieldDecl("orientation", .string, doc: """
                    portrait (+y up), upside_down (−y up), left (+x up: turned counterclockwise, its right edge up), \
                    right (−x up), face_up (+z up: the screen to the sky), face_down (−z up)
                    """),
            ], key: ["device"]),
            EventDecl("proximity", doc: """
                A proximity sensor: a snapshot on start, then when `near` changes. Near once raw ≥ the near level; \
                far again only once raw < near level − hysteresis, so a value hovering at the level does not flap.
                """, fields: [
                FieldDecl("device", .string, doc: "the IIO device (iio:device2)"),
                FieldDecl("name", .string, doc: "the device's `name` attribute"),
                FieldDecl("near", .bool, doc: "an object is near the sensor (with hysteresis, see the kind)"),
                FieldDecl("raw", .int, minChange: .infinity,
                          doc: "in_proximity_raw: the sensor's reading, larger when nearer; its change alone makes no event"),
                FieldDecl("near_level", .int, minChange: .infinity,
                          doc: "the level in use: options.proximity_near, else the device's in_proximity_nearlevel, else 1"),
            ], key: ["device"]),
            EventDecl("pressure", doc: """
                A barometer's pressure (in_pressure_input, or raw and scale): a snapshot on start, then on a change of \
                at least 1 Pa (about 8 cm of altitude).
                """, fields: [
                FieldDecl("device", .string, doc: "the IIO device (iio:device3)"),
                FieldDecl("name", .string, doc: "the device's `name` attribute (bmp280, press…)"),
                FieldDecl("pressure", .double, unit: "kPa", minChange: 0.001, doc: "the pressure, in kilopascals"),
            ], key: ["device"]),
            EventDecl("relative_altitude", doc: """
                The altitude relative to where the monitor started, from a barometer and the international barometric \
                formula h = 44330 × (1 − (p / p0)^(1 / 5.255)), p0 the first pressure read after start: a snapshot \
                (0 m) on start, then on a change of at least 0.1 m. Weather moves it too (1 hPa is about 8 m).
                """, fields: [
                FieldDecl("device", .string, doc: "the barometer's IIO device"),
                FieldDecl("name", .string, doc: "the barometer's `name` attribute"),
                FieldDecl("altitude", .double, unit: "m", minChange: 0.1, doc: "metres above (negative: below) the start"),
                FieldDecl("pressure", .double, unit: "kPa", minChange: .infinity, doc: "the pressure now"),
                FieldDecl("reference_pressure", .double, unit: "kPa", minChange: .infinity,
                          doc: "p0, the first pressure read after start"),
            ], key: ["device"]),
            EventDecl("light", doc: """
                An ambient light sensor (in_illuminance_input, or raw and scale): a snapshot on start, then on a \
                change of at least 5 lux.
                """, fields: [
                FieldDecl("device", .string, doc: "the IIO device (iio:device1)"),
                FieldDecl("name", .string, doc: "the device's `name` attribute (als, tsl2591…)"),
                FieldDecl("illuminance", .double, unit: "lux", minChange: 5, doc: "the illuminance, in lux"),
            ], key: ["device"]),
            EventDecl("temperature", doc: """
                A temperature channel of an IIO device (in_temp_input, or raw, offset and scale; the ABI's milli °C \
                converted): a snapshot on start, then on a change of at least 0.1 °C.
                """, fields: [
                FieldDecl("device", .string, doc: "the IIO device"),
                FieldDecl("name", .string, doc: "the device's `name` attribute (bmp280…)"),
                FieldDecl("temperature", .double, unit: "°C", minChange: 0.1, doc: "the temperature, in degrees Celsius"),
            ], key: ["device"]),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var proximityNear: Int? = nil
        var proximityHysteresis = 0
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."),
            .optional("proximity_near", \.proximityNear,
                      doc: "Raw proximity reading from which an object counts as near; default: the device's in_proximity_nearlevel, else 1."),
            .option("proximity_hysteresis", \.proximityHysteresis,
                    doc: "How far below the near level the raw reading must fall before an object counts as far again."))
    }

    static let devicesDir = "bus/iio/devices"

    private let context: MonitorContext
    private let root: FSRoot
    private let proximityNear: Int64?
    private let proximityHysteresis: Int64
    /// Per device, since start: the last orientation, the proximity state,
    /// the reference pressure. Pairs, not dictionaries (see MonitorContext.State).
    private var orientations: [(device: String, orientation: String)] = []
    private var nearStates: [(device: String, near: Bool)] = []
    private var references: [(device: String, pressure: Double)] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        if let near = options.proximityNear, near < 0 {
            throw .invalidOption("proximity_near", "must not be negative, not \(near)")
        }
        guard options.proximityHysteresis >= 0 else {
            throw .invalidOption("proximity_hysteresis", "must not be negative, not \(options.proximityHysteresis)")
        }
        self.context = context
        self.root = FSRoot(options.sysfs)
        self.proximityNear = options.proximityNear.map { Int64($0) }
        self.proximityHysteresis = Int64(options.proximityHysteresis)
    }

    func start() throws(MonitorError) {
        reset()
        guard !deviceNames().isEmpty else { throw nothing }
    }

    func stop() { reset() }

    private func reset() {
        orientations = []
        nearStates = []
        references = []
    }

    private var nothing: MonitorError {
        .unavailable("no IIO sensor in \(root.path(Self.devicesDir)) (no accelerometer, gyroscope, magnetometer, proximity, pressure, light or temperature channel)")
    }

    func poll() throws(MonitorError) {
        let devices = deviceNames()
        guard !devices.isEmpty else { throw nothing }
        for device in devices {
            do {
                try read(device)
            } catch {
                context.log(.debug, "skipping IIO device \(device) this poll: \(error)")
            }
        }
    }

    /// Reads every known channel of one device first, then emits: a failing
    /// channel skips the whole device this poll.
    private func read(_ device: String) throws(ProbeError) {
        let dir = IIODir(root: root, dir: Self.devicesDir + "/" + device)
        let name = try dir.text("name") ?? ""
        let accel = try dir.axes("accel")
        let gyro = try dir.axes("anglvel")
        let magn = try dir.axes("magn")
        let proximity = try dir.int("in_proximity_raw")
        var nearLevel: Int64 = 1
        if let level = proximityNear { nearLevel = level } else if let level = try dir.int("in_proximity_nearlevel") { nearLevel = level }
        let pressure = try dir.scalar("pressure")
        let light = try dir.scalar("illuminance")
        let temperature = try dir.scalar("temp")

        let id: [(String, Value)] = [("device", .string(device)), ("name", .string(name))]
        func xyz(_ v: (x: Double, y: Double, z: Double)) -> [(String, Value)] {
            id + [("x", .double(v.x)), ("y", .double(v.y)), ("z", .double(v.z))]
        }
        if let accel {
            context.emit("accelerometer", fields: xyz(accel))
            if let orientation = orientation(device, accel) {
                context.emit("orientation", fields: id + [("orientation", .string(orientation))])
            }
        }
        if let gyro { context.emit("gyroscope", fields: xyz(gyro)) }
        if let magn { context.emit("magnetometer", fields: xyz(magn)) }
        if let proximity {
            let near = self.near(device, raw: proximity, level: nearLevel)
            context.emit("proximity", fields: id + [("near", .bool(near)), ("raw", .int(proximity)),
                                                    ("near_level", .int(nearLevel))])
        }
        if let pressure {
            context.emit("pressure", fields: id + [("pressure", .double(pressure))])
            let p0 = reference(device, pressure)
            context.emit("relative_altitude", fields: id + [("altitude", .double(Self.altitude(pressure, p0))),
                                                            ("pressure", .double(pressure)),
                                                            ("reference_pressure", .double(p0))])
        }
        if let light { context.emit("light", fields: id + [("illuminance", .double(light))]) }
        if let temperature { context.emit("temperature", fields: id + [("temperature", .double(temperature / 1000))]) }
    }

    // MARK: derived values

    /// The international barometric formula: metres above the level where the
    /// pressure is `p0`.
    static func altitude(_ p: Double, _ p0: Double) -> Double {
        44330 * (1 - pow(p / p0, 1 / 5.255))
    }

    /// The orientation whose axis dominates gravity by a factor of 1.5, else
    /// the last one (nil before the first decidable reading).
    static func orientation(_ a: (x: Double, y: Double, z: Double)) -> String? {
        let candidates: [(Double, String, String)] = [(a.y, "portrait", "upside_down"), (a.x, "left", "right"),
                                                      (a.z, "face_up", "face_down")]
        let sorted = candidates.sorted { abs($0.0) > abs($1.0) }
        let top = sorted[0], second = sorted[1]
        guard abs(top.0) > 0, abs(top.0) >= 1.5 * abs(second.0) else { return nil }
        return top.0 > 0 ? top.1 : top.2
    }

    private func orientation(_ device: String, _ a: (x: Double, y: Double, z: Double)) -> String? {
        let i = orientations.firstIndex { $0.device == device }
        guard let now = Self.orientation(a) else { return i.map { orientations[$0].orientation } }
        if let i { orientations[i].orientation = now } else { orientations.append((device, now)) }
        return now
    }

    private func near(_ device: String, raw: Int64, level: Int64) -> Bool {
        guard let i = nearStates.firstIndex(where: { $0.device == device }) else {
            nearStates.append((device, raw >= level))
            return raw >= level
        }
        let near = nearStates[i].near ? raw >= level - proximityHysteresis : raw >= level
        nearStates[i].near = near
        return near
    }

    private func reference(_ device: String, _ pressure: Double) -> Double {
        if let r = references.first(where: { $0.device == device }) { return r.pressure }
        references.append((device, pressure))
        return pressure
    }

    // MARK: listing

    static let channels = ["in_accel_x_raw", "in_accel_x_input", "in_anglvel_x_raw", "in_anglvel_x_input",
                           "in_magn_x_raw", "in_magn_x_input", "in_proximity_raw", "in_pressure_input",
                           "in_pressure_raw", "in_illuminance_input", "in_illuminance_raw", "in_temp_input",
                           "in_temp_raw"]

    /// The `iio:deviceN` entries with at least one channel this monitor reads, sorted.
    private func deviceNames() -> [String] {
        (root.list(Self.devicesDir) ?? []).filter { device in
            device.hasPrefix("iio:device")
                && Self.channels.contains { root.exists(Self.devicesDir + "/" + device + "/" + $0) }
        }
    }
}

typealias IIODir = AttributeDirectory

extension AttributeDirectory {
    /// One channel: `in_<channel>_input` as is, else (`_raw` + offset) × scale,
    /// the offset and scale from `in_<channel>_…` or else `in_<type>_…`.
    func channel(_ channel: String, type: String) throws(ProbeError) -> Double? {
        if let input = try double("in_\(channel)_input") { return input }
        guard let raw = try double("in_\(channel)_raw") else { return nil }
        let offset = try first("in_\(channel)_offset", "in_\(type)_offset") ?? 0
        let scale = try first("in_\(channel)_scale", "in_\(type)_scale") ?? 1
        return (raw + offset) * scale
    }

    /// The first of two attributes that is there.
    func first(_ name: String, _ fallback: String) throws(ProbeError) -> Double? {
        if let value = try double(name) { return value }
        return try double(fallback)
    }

    /// A scalar channel (pressure, illuminance, temp).
    func scalar(_ type: String) throws(ProbeError) -> Double? { try channel(type, type: type) }

    /// The x, y and z channels of a type; nil without an x channel, an error
    /// when x is there but y or z is not.
    func axes(_ type: String) throws(ProbeError) -> (x: Double, y: Double, z: Double)? {
        guard let x = try channel("\(type)_x", type: type) else { return nil }
        guard let y = try channel("\(type)_y", type: type) else { throw missing("in_\(type)_y_raw") }
        guard let z = try channel("\(type)_z", type: type) else { throw missing("in_\(type)_z_raw") }
        return (x, y, z)
    }

}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(SensorsMonitor.self, a, r) }
