/// One kernel uevent, as the kernel sends it on NETLINK_KOBJECT_UEVENT:
///
///     add@/devices/pci0000:00/0000:00:14.0/usb1/1-3\0ACTION=add\0DEVPATH=/devices/…\0SUBSYSTEM=usb\0…
///
/// a header `ACTION@DEVPATH`, then NUL-separated `KEY=value` pairs.
struct Uevent: Equatable {
    var action: String
    var devpath: String
    var subsystem: String
    var devtype: String?
    /// Every `KEY=value` pair, in order (ACTION, DEVPATH and SUBSYSTEM included).
    var properties: [(key: String, value: String)]

    subscript(key: String) -> String? {
        for p in properties where p.key == key { return p.value }
        return nil
    }

    static func == (a: Uevent, b: Uevent) -> Bool {
        a.action == b.action && a.devpath == b.devpath && a.subsystem == b.subsystem && a.devtype == b.devtype
            && a.properties.map(\.key) == b.properties.map(\.key) && a.properties.map(\.value) == b.properties.map(\.value)
    }

    /// A USB device's `PRODUCT=vendor/product/bcdDevice` (hex, no leading
    /// zeros: `781/5567/100`) as the four-digit ids sysfs shows (`0781`, `5567`).
    var usbIDs: (vendor: String, product: String)? {
        guard let text = self["PRODUCT"] else { return nil }
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return nil }
        func pad(_ s: Substring) -> String? {
            guard !s.isEmpty, s.count <= 4, s.allSatisfy(\.isHexDigit) else { return nil }
            return String(repeating: "0", count: 4 - s.count) + s.lowercased()
        }
        guard let vendor = pad(parts[0]), let product = pad(parts[1]) else { return nil }
        return (vendor, product)
    }
}

enum UeventParser {
    /// Larger datagrams are refused (the kernel's own buffer is 2 KiB of
    /// environment plus the header).
    static let maxMessage = 16 << 10
    static let maxProperties = 128
    static let actions: Set<String> = ["add", "remove", "change", "move", "online", "offline", "bind", "unbind"]

    enum Failure: Error, Equatable, CustomStringConvertible {
        /// A libudev (udevd) message, not the kernel's: skipped, not an error.
        case libudev
        case empty
        case tooLong(Int)
        case badHeader
        case missing(String)
        case mismatch(String)
        case tooManyProperties

        var description: String {
            switch self {
            case .libudev: "a libudev message, not a kernel uevent"
            case .empty: "an empty message"
            case .tooLong(let n): "\(n) bytes, more than \(UeventParser.maxMessage)"
            case .badHeader: "no ACTION@DEVPATH header"
            case .missing(let key): "no \(key)="
            case .mismatch(let key): "\(key)= disagrees with the header"
            case .tooManyProperties: "more than \(UeventParser.maxProperties) properties"
            }
        }
    }

    /// Parses one datagram. Pure: no I/O, no state.
    static func parse(_ bytes: some Collection<UInt8>) -> Result<Uevent, Failure> {
        guard !bytes.isEmpty else { return .failure(.empty) }
        guard bytes.count <= maxMessage else { return .failure(.tooLong(bytes.count)) }
        if bytes.starts(with: Array("libudev".utf8)) { return .failure(.libudev) }
        // NUL-separated records; a trailing NUL (or several) ends the message.
        let records = bytes.split(separator: 0, omittingEmptySubsequences: true)
            .map { String(decoding: $0, as: UTF8.self) }
        guard let header = records.first, let at = header.firstIndex(of: "@") else { return .failure(.badHeader) }
        let headerAction = String(header[..<at])
        let headerPath = String(header[header.index(after: at)...])
        guard !headerAction.isEmpty, headerPath.hasPrefix("/"), !headerAction.contains("=") else {
            return .failure(.badHeader)
        }
        var properties: [(key: String, value: String)] = []
        for record in records.dropFirst() {
            guard let eq = record.firstIndex(of: "="), eq != record.startIndex else { continue }  // not KEY=value: skipped
            guard properties.count < maxProperties else { return .failure(.tooManyProperties) }
            properties.append((String(record[..<eq]), String(record[record.index(after: eq)...])))
        }
        func value(_ key: String) -> String? { properties.first { $0.key == key }?.value }
        guard let action = value("ACTION") else { return .failure(.missing("ACTION")) }
        guard let devpath = value("DEVPATH") else { return .failure(.missing("DEVPATH")) }
        guard action == headerAction else { return .failure(.mismatch("ACTION")) }
        guard devpath == headerPath else { return .failure(.mismatch("DEVPATH")) }
        // A few kernel events (a module's) have no SUBSYSTEM; they are reported with an empty one.
        return .success(Uevent(action: action, devpath: devpath, subsystem: value("SUBSYSTEM") ?? "",
                               devtype: value("DEVTYPE"), properties: properties))
    }
}
