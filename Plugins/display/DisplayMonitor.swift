import Glibc
import LinuxProbes
import VigilKit

/// Screen brightness and display connections, from the kernel's backlight
/// class (`<sysfs>/class/backlight/*/`) and the DRM connectors
/// (`<sysfs>/class/drm/cardN-CONNECTOR/`): XestiMonitors'
/// ScreenBrightnessMonitor and ScreenConnectionMonitor, on Linux.
///
/// Polled, by choice:
///
/// - DRM connectors do not call sysfs_notify on their attributes: a hotplug
///   is announced by a uevent on the card (`HOTPLUG=1`, netlink), so
///   poll(2) with POLLPRI/POLLERR on `status` would never wake. Reading
///   `status` returns the state the kernel has cached from its last probe;
///   it does not probe the connector, so polling it is cheap.
/// - A backlight's `actual_brightness` is notified (sysfs_notify) only by
///   drivers that report firmware or hotkey changes; a brightness written
///   by user space (a desktop's slider, `brightnessctl`) is not notified at
///   all. Polling a handful of small files sees both.
///
/// Each device directory is listed once per poll; an attribute that is listed
/// but cannot be read (gone between the listing and the read, EIO, EAGAIN,
/// ENODEV…) or does not parse makes the monitor skip that device for this poll
/// and keep its last reported state, logged at debug. Nothing of that is
/// fatal. A connector that is no longer listed (a dock's DisplayPort MST
/// connectors go away when it is unplugged) is reported once with status
/// `removed`; a backlight that is no longer listed is forgotten, so that it
/// is reported afresh if it comes back.
final class DisplayMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "display", version: "1.0.0",
        summary: "Screen brightness (backlights) and display connections (DRM connectors: plugged, enabled, preferred mode), from sysfs (polled)",
        defaultInterval: .seconds(5),
        events: [
            EventDecl("backlight", doc: """
                One backlight device (class/backlight): a snapshot on start, then when its brightness moved by at \
                least 0.01 (1 % of its range) or its type or power changed. The raw values come with the event; a \
                change of them below 0.01 of the range does not make one.
                """, fields: [
                FieldDecl("name", .string, doc: "the device's directory name in class/backlight (intel_backlight, amdgpu_bl0, acpi_video0)"),
                FieldDecl("type", .string, doc: "the kernel's `type`: raw (the GPU's register), platform (a platform driver) or firmware (ACPI)"),
                FieldDecl("brightness", .double, unit: "ratio", minChange: 0.01,
                          doc: "actual_brightness / max_brightness (brightness / max_brightness where the driver has no actual_brightness), 0…1"),
                FieldDecl("raw_brightness", .int, minChange: .infinity,
                          doc: "the `brightness` attribute: the level last requested, 0…max_brightness"),
                FieldDecl("actual_brightness", .int, minChange: .infinity,
                          doc: "the `actual_brightness` attribute: the level the hardware reports; absent where the driver has none"),
                FieldDecl("max_brightness", .int, minChange: .infinity, doc: "the `max_brightness` attribute: the level of full brightness"),
                FieldDecl("powered", .bool,
                          doc: "`bl_power` is 0 (FB_BLANK_UNBLANK: the backlight is on); false for any blanking level; absent where the driver has no bl_power"),
            ], key: ["name"]),
            EventDecl("connector", doc: """
                One display connector of a DRM card (class/drm/cardN-NAME): a snapshot on start, then when a field \
                changed: plugged or unplugged, enabled or disabled, another preferred mode, DPMS state. A connector \
                that went away (a dock's MST connectors) is reported once with status `removed`.
                """, fields: [
                FieldDecl("connector", .string, doc: "the connector's directory name in class/drm (card0-eDP-1, card1-HDMI-A-1)"),
                FieldDecl("type", .string, doc: "the connector type from its name: eDP, HDMI-A, DP, DVI-D, VGA, Virtual, Writeback…"),
                FieldDecl("connected", .bool, doc: "status is connected (a display is attached)"),
                FieldDecl("status", .string, doc: "the `status` attribute: connected, disconnected or unknown; removed when the connector went away"),
                FieldDecl("enabled", .bool, doc: "the `enabled` attribute is enabled (the connector drives a CRTC: the display is in use)"),
                FieldDecl("preferred_mode", .string,
                          doc: "the first line of `modes`, the display's preferred mode (2560x1440); absent when no mode is known"),
                FieldDecl("mode_count", .int, unit: "modes",
                          doc: "lines in `modes` (one per mode; a size repeats at other refresh rates); 0 when disconnected"),
                FieldDecl("dpms", .string, doc: "the `dpms` attribute, lower case: on, standby, suspend or off"),
            ], key: ["connector"]),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."))
    }

    static let backlightDir = "class/backlight"
    static let drmDir = "class/drm"

    private let context: MonitorContext
    private let root: FSRoot
    /// Devices reported since start: gone ones are reported (connectors) or
    /// forgotten (backlights) once.
    private var knownBacklights: [String] = []
    private var knownConnectors: [String] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        self.context = context
        self.root = FSRoot(options.sysfs)
    }

    func start() throws(MonitorError) {
        knownBacklights = []
        knownConnectors = []
        guard !backlightNames().isEmpty || !connectorNames().isEmpty else { throw nothing }
    }

    func stop() {
        knownBacklights = []
        knownConnectors = []
    }

    private var nothing: MonitorError {
        .unavailable("no backlight in \(root.path(Self.backlightDir)) and no display connector in \(root.path(Self.drmDir))")
    }

    func poll() throws(MonitorError) {
        let backlights = backlightNames()
        for gone in emitEach("backlight", backlights, known: &knownBacklights, read: backlight) {
            context.log(.info, "backlight \(gone) went away")
            context.forget("backlight", key: [.string(gone)])
        }

        let connectors = connectorNames()
        for gone in emitEach("connector", connectors, known: &knownConnectors, read: connector) {
            context.emit("connector", fields: [("connector", .string(gone)), ("type", .string(Self.connectorType(gone))),
                                               ("connected", .bool(false)), ("status", .string("removed"))])
            context.forget("connector", key: [.string(gone)])
        }

        if backlights.isEmpty && connectors.isEmpty { throw nothing }
    }

    /// Emits a `kind` event for each of `names` (a device that does not read
    /// is skipped this poll, said at debug) and adds it to `known`; returns
    /// the known devices no longer listed, taken out of `known`.
    private func emitEach(_ kind: String, _ names: [String], known: inout [String],
                          read: (String) throws(ProbeError) -> [(String, Value)]) -> [String] {
        for name in names {
            do {
                context.emit(kind, fields: try read(name))
                if !known.contains(name) { known.append(name) }
            } catch {
                context.log(.debug, "skipping \(kind) \(name) this poll: \(error)")
            }
        }
        let gone = known.filter { !names.contains($0) }
        known.removeAll { !names.contains($0) }
        return gone
    }

    // MARK: backlights

    private func backlight(_ name: String) throws(ProbeError) -> [(String, Value)] {
        let dir = DeviceDir(root: root, dir: Self.backlightDir + "/" + name)
        guard let max = try dir.int("max_brightness") else { throw dir.missing("max_brightness") }
        guard let raw = try dir.int("brightness") else { throw dir.missing("brightness") }
        guard max > 0 else { throw dir.malformed("max_brightness", "must be positive, found \(max)") }
        let type = try dir.text("type")
        let actual = try dir.int("actual_brightness")
        let power = try dir.int("bl_power")

        var fields: [(String, Value)] = [("name", .string(name))]
        if let type { fields.append(("type", .string(type))) }
        let level = Double(actual ?? raw) / Double(max)
        fields.append(("brightness", .double(Swift.min(Swift.max(level, 0), 1))))
        fields.append(("raw_brightness", .int(raw)))
        if let actual { fields.append(("actual_brightness", .int(actual))) }
        fields.append(("max_brightness", .int(max)))
        if let power { fields.append(("powered", .bool(power == 0))) }
        return fields
    }

    // MARK: connectors

    private func connector(_ name: String) throws(ProbeError) -> [(String, Value)] {
        let dir = DeviceDir(root: root, dir: Self.drmDir + "/" + name)
        guard let status = try dir.text("status") else { throw dir.missing("status") }
        var fields: [(String, Value)] = [("connector", .string(name)), ("type", .string(Self.connectorType(name))),
                                         ("connected", .bool(status == "connected")), ("status", .string(status))]
        if let enabled = try dir.text("enabled") { fields.append(("enabled", .bool(enabled == "enabled"))) }
        if let modes = try dir.text("modes") {
            let lines = modes.split(separator: "\n").map { DisplayMonitor.trim(String($0)) }.filter { !$0.isEmpty }
            if let preferred = lines.first { fields.append(("preferred_mode", .string(preferred))) }
            fields.append(("mode_count", .int(Int64(lines.count))))
        }
        if let dpms = try dir.text("dpms") { fields.append(("dpms", .string(dpms.lowercased()))) }
        return fields
    }

    /// "card0-HDMI-A-1" → "HDMI-A"; "card1-eDP-1" → "eDP": the name without
    /// the card and without the connector's index.
    static func connectorType(_ name: String) -> String {
        guard let dash = name.firstIndex(of: "-") else { return name }
        var rest = Substring(name[name.index(after: dash)...])
        if let last = rest.lastIndex(of: "-"), rest[rest.index(after: last)...].allSatisfy(\.isNumber),
           rest.index(after: last) != rest.endIndex {
            rest = rest[..<last]
        }
        return String(rest)
    }

    /// "card0-eDP-1" is a connector; "card0", "renderD128", "version" are not.
    static func isConnectorName(_ name: String) -> Bool {
        guard name.hasPrefix("card") else { return false }
        let rest = name.dropFirst(4)
        guard let dash = rest.firstIndex(of: "-") else { return false }
        let card = rest[..<dash]
        return !card.isEmpty && card.allSatisfy(\.isASCII) && card.allSatisfy(\.isNumber)
            && rest.index(after: dash) != rest.endIndex
    }

    // MARK: listings

    /// The entries of `<sysfs>/class/backlight`, sorted; none when it does not exist.
    private func backlightNames() -> [String] {
        Self.list(root.path(Self.backlightDir)).filter { !$0.hasPrefix(".") }
    }

    /// The connectors in `<sysfs>/class/drm` (those with a `status`), sorted.
    private func connectorNames() -> [String] {
        Self.list(root.path(Self.drmDir)).filter {
            Self.isConnectorName($0) && root.exists(Self.drmDir + "/" + $0 + "/status")
        }
    }

    /// The names in a directory (following a symlink to it), sorted; empty when it cannot be opened.
    static func list(_ path: String) -> [String] { FSRoot.listDirectory(path) ?? [] }

    static func trim(_ text: String) -> String { FSRoot.trimmed(text) }
}

typealias DeviceDir = AttributeDirectory

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(DisplayMonitor.self, a, r) }
