/// A device's properties in the udev database (`/run/udev/data/b<major>:<minor>`
/// for a block device): its `E:KEY=value` lines, the rest (`S:` links, `I:`,
/// `G:` tags…) left out. udev writes the file when it has processed the
/// device, so a device may be in /proc before it is here, and on a machine
/// without udev (a container, a VM without systemd) there is none.
public struct UdevProperties: Sendable, Equatable {
    public var values: [String: String]

    public init(values: [String: String] = [:]) { self.values = values }

    public subscript(key: String) -> String? { values[key] }

    /// Parses a udev database file; lines that are not `E:KEY=value` are ignored.
    public static func parse(_ text: String) -> UdevProperties {
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard line.hasPrefix("E:"), let eq = line.firstIndex(of: "=") else { continue }
            let key = line[line.index(line.startIndex, offsetBy: 2)..<eq]
            guard !key.isEmpty else { continue }
            values[String(key)] = String(line[line.index(after: eq)...])
        }
        return UdevProperties(values: values)
    }
}
