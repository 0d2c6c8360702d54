import Glibc

/// One hardware-monitoring chip under `<sysfs>/class/hwmon/hwmonN`, read the
/// way node_exporter's hwmon collector reads it, so that the names it derives
/// are the ones dashboards already use.
///
/// Sensor attributes are the files `<type><number>[_<property>]` of the
/// chip's directory and, as older drivers keep them there, of its `device`
/// directory (which wins when both have one). Only the sensor types of the
/// kernel's hwmon ABI that node_exporter reads are kept (`HwmonChip.sensorTypes`).
public struct HwmonChip: Sendable, Equatable {
    /// The directory's name in class/hwmon (`hwmon3`): unstable across boots.
    public var directory: String
    /// The stable name node_exporter derives (`chip` label): from the device
    /// the chip belongs to, `<parent directory>_<device directory>` cleaned
    /// (`platform_coretemp_0`, `pci0000:00_0000:00:03_0`,
    /// `thermal_thermal_zone0`); without a `device` link, the cleaned `name`
    /// file (`coretemp`); else the cleaned directory name (`hwmon3`).
    public var chip: String
    /// The cleaned `name` file (`chip_name` label: `coretemp`, `nvme`,
    /// `bat0`); nil when the chip has none or it cleans to nothing.
    public var name: String?
    /// The sensors, ordered by type then number.
    public var sensors: [HwmonSensor]

    /// The sensor types read (the prefixes of the attribute files).
    public static let sensorTypes: Set<String> = [
        "vrm", "beep_enable", "update_interval", "in", "cpu", "fan", "pwm", "temp", "curr", "power", "energy",
        "humidity", "intrusion",
    ]

    public init(directory: String, chip: String, name: String?, sensors: [HwmonSensor]) {
        self.directory = directory
        self.chip = chip
        self.name = name
        self.sensors = sensors
    }
}

/// One sensor of a chip: every attribute file `<type><number>_<property>`
/// that could be read, by property (`""` for the bare file, as `pwm1`),
/// with only its newlines trimmed (a number with spaces around it does not
/// parse, as in node_exporter).
public struct HwmonSensor: Sendable, Equatable {
    public var type: String
    public var number: Int
    /// Property → the file's text, trimmed (`"input": "55000"`, `"label": "Core 0"`).
    public var attributes: [String: String]

    /// `temp1`, `in0`, `fan2`; `vrm0` for a chip-wide attribute without a number (`vrm`).
    public var id: String { type + String(number) }

    public init(type: String, number: Int, attributes: [String: String]) {
        self.type = type
        self.number = number
        self.attributes = attributes
    }
}

extension HwmonChip {
    /// Splits an attribute file name into type, number and property as
    /// node_exporter's `^([^0-9]+)([0-9]*)?(_(.+))?$` does: `temp1_crit_alarm`
    /// → (temp, 1, crit_alarm); `pwm1` → (pwm, 1, ""); `vrm` → (vrm, 0, "").
    /// nil for a name that does not have that shape.
    public static func split(_ file: String) -> (type: String, number: Int, property: String)? {
        let bytes = Array(file.utf8)
        func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
        var i = 0
        while i < bytes.count, !isDigit(bytes[i]) { i += 1 }
        guard i > 0 else { return nil }
        let type = String(decoding: bytes[..<i], as: UTF8.self)
        let digitsStart = i
        while i < bytes.count, isDigit(bytes[i]) { i += 1 }
        let digits = String(decoding: bytes[digitsStart..<i], as: UTF8.self)
        var property = ""
        if i < bytes.count {
            // Only `_<something>` may follow the number (`temp1x` is no attribute).
            guard bytes[i] == UInt8(ascii: "_"), i + 1 < bytes.count else { return nil }
            property = String(decoding: bytes[(i + 1)...], as: UTF8.self)
        }
        if digits.isEmpty { return (type, 0, property) }
        guard let number = Int(digits) else { return nil }  // too many digits
        return (type, number, property)
    }

    /// node_exporter's `cleanMetricName`: lower case, every character other
    /// than a–z, 0–9, `:` and `_` made `_`, and `_` trimmed from both ends.
    public static func clean(_ text: String) -> String {
        var out = String.UnicodeScalarView()
        for scalar in text.lowercased().unicodeScalars {
            switch scalar {
            case "a"..."z", "0"..."9", ":", "_": out.append(scalar)
            default: out.append("_")
            }
        }
        var s = Substring(String(out))
        while s.first == "_" { s = s.dropFirst() }
        while s.last == "_" { s = s.dropLast() }
        return String(s)
    }

    /// Reads the chip `class/hwmon/<directory>` under `root`; nil when it is
    /// not a directory (a dangling link, a file) or no name can be derived.
    public static func read(root: FSRoot, directory: String) -> HwmonChip? {
        let dir = "class/hwmon/" + directory
        guard FSRoot.isDirectory(root.path(dir)) else { return nil }
        guard let chip = chipName(root: root, dir: dir) else { return nil }
        var name: String?
        if case .text(let text) = root.attribute(dir + "/name") {
            let cleaned = clean(text)
            if !cleaned.isEmpty { name = cleaned }
        }
        var byID: [String: HwmonSensor] = [:]
        var order: [String] = []
        var dirs = [dir]
        if FSRoot.isDirectory(root.path(dir + "/device")) { dirs.append(dir + "/device") }
        for d in dirs {
            for file in FSRoot.listDirectory(root.path(d)) ?? [] {
                guard let (type, number, property) = split(file), sensorTypes.contains(type) else { continue }
                // Unreadable (EIO, EAGAIN from a sleeping driver, a directory such as `power/`): skipped.
                guard let text = try? root.readText(d + "/" + file) else { continue }
                var value = Substring(text)  // only newlines trimmed, as node_exporter does (a label keeps its spaces)
                while value.last == "\n" { value = value.dropLast() }
                while value.first == "\n" { value = value.dropFirst() }
                let id = type + String(number)
                if byID[id] == nil {
                    byID[id] = HwmonSensor(type: type, number: number, attributes: [:])
                    order.append(id)
                }
                byID[id]!.attributes[property] = String(value)
            }
        }
        let sensors = order.compactMap { byID[$0] }.sorted {
            $0.type != $1.type ? $0.type < $1.type : $0.number < $1.number
        }
        return HwmonChip(directory: directory, chip: chip, name: name, sensors: sensors)
    }

    /// The stable chip name (see `chip`).
    static func chipName(root: FSRoot, dir: String) -> String? {
        if let device = realPath(root.path(dir + "/device")) {
            let parts = device.split(separator: "/", omittingEmptySubsequences: true)
            let devName = parts.last.map { clean(String($0)) } ?? ""
            let devType = parts.count >= 2 ? clean(String(parts[parts.count - 2])) : ""
            if !devType.isEmpty, !devName.isEmpty { return devType + "_" + devName }
            if !devName.isEmpty { return devName }
        }
        if case .text(let text) = root.attribute(dir + "/name") {
            let cleaned = clean(text)
            if !cleaned.isEmpty { return cleaned }
        }
        guard let real = realPath(root.path(dir)), let last = real.split(separator: "/").last else { return nil }
        let cleaned = clean(String(last))
        return cleaned.isEmpty ? nil : cleaned
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}

extension FSRoot {
    /// Every chip under `class/hwmon` (this root is the sysfs root), by
    /// directory name; nil when `class/hwmon` cannot be listed.
    public func hwmonChips() -> [HwmonChip]? {
        guard let names = list("class/hwmon") else { return nil }
        return names.filter { !$0.hasPrefix(".") }.compactMap { HwmonChip.read(root: self, directory: $0) }
    }
}
