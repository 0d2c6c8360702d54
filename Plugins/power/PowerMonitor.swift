import Glibc
import LinuxProbes
import Synchronization
import VigilKit

/// Batteries, external power and the platform power profile, from
/// `<sysfs>/class/power_supply/*` and `<sysfs>/firmware/acpi/platform_profile`.
///
/// Polled, and woken by the kernel: power_supply devices send a uevent
/// (ACTION=change, SUBSYSTEM=power_supply) when a charger is plugged or
/// unplugged, a battery starts or stops charging, or its driver reports a new
/// level. On the real `/sys` a worker reads the kernel's uevents and re-reads
/// the supplies at once on each of them, so that "on battery now" does not
/// wait for the next poll; with `uevent_socket`, uevent-format datagrams sent
/// to that unix socket do the same (tests feed recorded events this way). The
/// poll still runs at every interval: not every driver sends a uevent when
/// its level moves.
///
/// Each supply directory is listed once per poll; an attribute file that is
/// listed but cannot be read (the battery was removed between the listing and
/// the read, or the driver answered EIO, EAGAIN, ENODEV…) makes the monitor
/// skip that supply for this poll and keep its last reported state. A supply
/// that is no longer listed is reported gone (`present: false` for a battery,
/// `online: false` for a power source) once.
final class PowerMonitor: PolledMonitor, @unchecked Sendable {  // poll state is read and written under `serial`
    static let spec = PluginSpec(
        name: "power", version: "1.0.0",
        summary: "Battery level, state and time estimates, external power, and the platform power profile, from sysfs (polled)",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("battery", doc: """
                One battery (power_supply type Battery or UPS; peripherals' batteries only with peripherals: true): \
                a snapshot on start, then when a field changed (level by at least 1 %, time estimates by at least \
                10 minutes, the rest on any change). A battery that is absent or went away has only name and present. \
                Severity warning while low and not charging.
                """, fields: [
                FieldDecl("name", .string, doc: "the supply's directory name in class/power_supply (BAT0)"),
                FieldDecl("present", .bool, doc: "the `present` attribute (true when the driver has none); false also when the battery went away"),
                FieldDecl("level", .double, unit: "percent", minChange: 1,
                          doc: "charge: `capacity`, else 100 × energy_now / energy_full, else 100 × charge_now / charge_full; 0…100"),
                FieldDecl("state", .string,
                          doc: "from `status`: charging, discharging, full, not charging or unknown"),
                FieldDecl("low", .bool, doc: "level at or below the low_level option"),
                FieldDecl("time_to_empty", .int, unit: "seconds", minChange: 600,
                          doc: "while discharging: 3600 × energy_now / power_now, or 3600 × charge_now / current_now; absent when not derivable"),
                FieldDecl("time_to_full", .int, unit: "seconds", minChange: 600,
                          doc: "while charging: 3600 × (energy_full − energy_now) / power_now, or the same with charge and current; absent when not derivable"),
            ], key: ["name"]),
            EventDecl("supply", doc: """
                One external power source (power_supply types other than Battery and UPS: Mains, USB, Wireless…) \
                with an `online` attribute: a snapshot on start, then when it changed.
                """, fields: [
                FieldDecl("name", .string, doc: "the supply's directory name in class/power_supply (AC, ADP1, ucsi-source-psy-USBC000:001)"),
                FieldDecl("type", .string, doc: "the kernel's `type`: Mains, USB, Wireless…"),
                FieldDecl("online", .bool, doc: "the `online` attribute is not 0 (power is connected); false also when the supply went away"),
            ], key: ["name"]),
            EventDecl("profile", doc: """
                The ACPI platform profile (firmware/acpi/platform_profile), where the firmware has one: a snapshot \
                on start, then when it changed.
                """, fields: [
                FieldDecl("profile", .string, doc: "as the kernel writes it: low-power, cool, quiet, balanced, balanced-performance, performance, custom…"),
                FieldDecl("low_power", .bool, doc: "true for low-power and quiet only; every other profile (cool included) is false"),
            ]),
            EventDecl("attributes", doc: """
                Only with the attributes option: every power supply (peripherals' batteries, and sources without \
                `online`, included), every poll, with each attribute of the kernel's power_supply ABI its driver has, \
                in base units. An attribute that cannot be read this poll (EIO, ENODATA, EINVAL from a driver in the \
                wrong state) or is not a number is left out; nothing is derived or clamped.
                """, fields: [FieldDecl("name", .string, doc: "the supply's directory name in class/power_supply (BAT0, AC)")]
                + attributeFields.map { a in
                    let type: FieldType = switch a.conversion { case .text: .string; case .int: .int; case .scaled: .double }
                    return FieldDecl(a.file, type, unit: a.unit, doc: a.doc)
                }, policy: .samples, key: ["name"]),
        ])

    enum Conversion { case text, int, scaled(Double) }

    /// The power_supply attributes the `attributes` kind reports: the file, its conversion, its unit.
    static let attributeFields: [(file: String, conversion: Conversion, unit: String, doc: String)] = {
        var fields: [(file: String, conversion: Conversion, unit: String, doc: String)] = []
        for (file, doc) in [("type", "Battery, UPS, Mains, USB, Wireless"), ("status", "Charging, Discharging, Full, Not charging, Unknown"),
                            ("capacity_level", "Critical, Low, Normal, High, Full, Unknown"), ("charge_type", "Trickle, Fast, Standard, Adaptive, Custom…"),
                            ("health", "Good, Overheat, Dead, Over voltage, Cold…"), ("technology", "Li-ion, Li-poly, NiMH…"),
                            ("manufacturer", "the battery's maker"), ("model_name", "the battery's model"), ("serial_number", "the battery's serial number"),
                            ("usb_type", "the USB types, the active one in brackets ([C] PD PD_PPS)"), ("scope", "System or Device (a peripheral's)")] {
            fields.append((file, .text, "", "`\(file)`: \(doc)"))
        }
        for (file, unit, doc) in [("present", "", "1 when the battery is there"), ("online", "", "1 when the source supplies power (2, 3: a USB or charger mode)"),
                                  ("authentic", "", "1 when the battery is genuine"), ("calibrate", "", "1 while the fuel gauge calibrates"),
                                  ("capacity", "percent", "the charge level"), ("capacity_alert_min", "percent", "the low-level alert"),
                                  ("capacity_alert_max", "percent", "the high-level alert"), ("cycle_count", "", "charge cycles so far"),
                                  ("time_to_empty_now", "seconds", "the driver's estimate"), ("time_to_full_now", "seconds", "the driver's estimate"),
                                  ("charge_control_limit", "", "the charge current limit level"), ("charge_control_limit_max", "", "the highest limit level")] {
            fields.append((file, .int, unit, "`\(file)`: \(doc)"))
        }
        let micro: [(String, String, String)] = [
            ("power_now", "watts", "the power drawn or supplied now"),
            ("energy_now", "Wh", "the energy stored now"), ("energy_full", "Wh", "the energy stored when full"),
            ("energy_full_design", "Wh", "the energy stored when full, by design"), ("energy_empty", "Wh", "the energy left when empty"),
            ("energy_empty_design", "Wh", "the energy left when empty, by design"),
            ("charge_now", "Ah", "the charge stored now"), ("charge_full", "Ah", "the charge when full"),
            ("charge_full_design", "Ah", "the charge when full, by design"), ("charge_empty", "Ah", "the charge when empty"),
            ("charge_empty_design", "Ah", "the charge when empty, by design"), ("charge_counter", "Ah", "the charge counter"),
            ("current_now", "amperes", "the current now (some drivers sign it: negative while discharging)"),
            ("current_max", "amperes", "the highest current"), ("current_boot", "amperes", "the current at boot"),
            ("charge_term_current", "amperes", "the current at which charging ends"), ("precharge_current", "amperes", "the pre-charge current"),
            ("constant_charge_current", "amperes", "the constant-current charging current"),
            ("constant_charge_current_max", "amperes", "its highest value"), ("input_current_limit", "amperes", "the input current limit"),
            ("voltage_now", "volts", "the voltage now"), ("voltage_min", "volts", "the lowest voltage"), ("voltage_max", "volts", "the highest voltage"),
            ("voltage_min_design", "volts", "the lowest voltage, by design"), ("voltage_max_design", "volts", "the highest voltage, by design"),
            ("voltage_boot", "volts", "the voltage at boot"), ("voltage_ocv", "volts", "the open-circuit voltage"),
            ("constant_charge_voltage", "volts", "the constant-voltage charging voltage"), ("constant_charge_voltage_max", "volts", "its highest value"),
        ]
        for (file, unit, doc) in micro { fields.append((file, .scaled(1_000_000), unit, "`\(file)` (micro-units in sysfs): \(doc)")) }
        for (file, doc) in [("temp", "the battery's temperature"), ("temp_min", "the lowest allowed"), ("temp_max", "the highest allowed"),
                            ("temp_alert_min", "the low alert"), ("temp_alert_max", "the high alert"), ("temp_ambient", "the ambient temperature"),
                            ("temp_ambient_min", "the ambient low limit"), ("temp_ambient_max", "the ambient high limit")] {
            fields.append((file, .scaled(10), "celsius", "`\(file)` (tenths of a degree in sysfs): \(doc)"))
        }
        return fields
    }()

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var lowLevel = 10
        var peripherals = false
        var ueventSocket: String?
        var attributes = false
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests; kernel uevents are read only with the real /sys)."),
            .option("low_level", \.lowLevel, doc: "A battery at or below this level (percent, 0 to 100) is low."),
            .option("peripherals", \.peripherals,
                    doc: "Also report batteries of peripherals (scope Device: mice, keyboards, headsets)."),
            .optional("uevent_socket", \.ueventSocket,
                      doc: "Be woken by uevent-format datagrams sent to a unix datagram socket bound at this path instead of the kernel's (for tests, or to feed events from elsewhere)."),
            .option("attributes", \.attributes,
                    doc: "Also emit the `attributes` kind: every supply's power_supply attributes, every poll (what node_exporter's powersupplyclass collector reports)."))
    }

    static let classDir = "class/power_supply"
    static let profileFile = "firmware/acpi/platform_profile"

    private let context: MonitorContext
    private let root: FSRoot
    private let lowLevel: Double
    private let peripherals: Bool
    private let attributes: Bool
    /// Supplies reported since start, and whether each is a battery: those
    /// that disappear from the listing are reported gone once.
    private var known: [(name: String, battery: Bool)] = []
    private var hadProfile = false
    /// Serializes polls: the host's, and those a uevent triggers on the worker.
    private let serial = Mutex(())
    private let ueventSocket: String?
    private let realSysfs: Bool
    private var uevents: UeventSocket?

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        guard (0...100).contains(options.lowLevel) else {
            throw .invalidOption("low_level", "must be a percentage from 0 to 100, got \(options.lowLevel)")
        }
        self.context = context
        self.root = FSRoot(options.sysfs, keepingFilesOpen: true)
        self.lowLevel = Double(options.lowLevel)
        self.peripherals = options.peripherals
        self.attributes = options.attributes
        if let path = options.ueventSocket {
            guard !path.isEmpty else { throw .invalidOption("uevent_socket", "must not be empty") }
            guard path.utf8.count < 108 else { throw .invalidOption("uevent_socket", "longer than a unix socket path may be (107 bytes)") }
        }
        self.ueventSocket = options.ueventSocket
        self.realSysfs = FSRoot(options.sysfs).root == "/sys"
    }

    func start() throws(MonitorError) {
        uevents = nil  // a restart: the previous worker was joined after stop
        serial.withLock { _ in
            known = []
            hadProfile = false
        }
        let names = supplyNames()
        guard names.contains(where: { reportable($0) }) || (attributes && !names.isEmpty) else { throw noSupply }
        if let path = ueventSocket {
            switch UeventSocket.unix(path) {
            case .success(let s): uevents = s
            case .failure(.notASocket): throw .invalidOption("uevent_socket", "\(path) exists and is not a socket")
            case .failure(let failure): throw .unavailable(failure.description)
            }
        } else if realSysfs {
            switch UeventSocket.kernel() {
            case .success(let s): uevents = s
            case .failure(let failure): context.log(.info, "\(failure): changes are seen at each poll only")
            }
        }
        guard let uevents else { return }
        context.spawn("uevent") { [self] token in
            while !token.isCancelled {
                switch token.waitFor(fd: uevents.fd, events: Int16(POLLIN), timeout: nil) {
                case .cancelled: return
                case .timedOut: continue
                case .ready(let revents):
                    var wake = false
                    uevents.drain { datagram in
                        switch datagram {
                        case .event(let event): wake = wake || event.subsystem == "power_supply"
                        case .overflowed: wake = true  // some were lost: re-read
                        case .skipped: break
                        }
                    }
                    if wake { try? poll() }  // an empty class is reported by the host's next poll
                    if revents & Int16(POLLNVAL) != 0 { return }
                }
            }
        }
    }

    func stop() {
        serial.withLock { _ in known = [] }
        if ueventSocket != nil { uevents?.unlinkPath() }
    }

    private var noSupply: MonitorError { .unavailable("no power supply in \(root.path(Self.classDir))") }

    func poll() throws(MonitorError) {
        try serial.withLock { _ throws(MonitorError) in try pollSupplies() }
    }

    private func pollSupplies() throws(MonitorError) {
        let names = supplyNames()
        var listed: [String] = []
        for name in names {
            switch read(name) {
            case .battery(let fields, let severity):
                listed.append(name)
                remember(name, battery: true)
                context.emit("battery", severity: severity, fields: fields)
            case .supply(let fields):
                listed.append(name)
                remember(name, battery: false)
                context.emit("supply", fields: fields)
            case .skipped(let why):
                listed.append(name)  // still there: keep its last state
                context.log(.debug, "skipping \(name) this poll: \(why)")
            case .ignored:
                break
            }
        }
        // Supplies gone from the listing since the last poll.
        for gone in known where !listed.contains(gone.name) {
            if gone.battery {
                context.emit("battery", fields: [("name", .string(gone.name)), ("present", .bool(false))])
                context.forget("battery", key: [.string(gone.name)])
            } else {
                context.emit("supply", fields: [("name", .string(gone.name)), ("online", .bool(false))])
                context.forget("supply", key: [.string(gone.name)])
            }
        }
        known.removeAll { !listed.contains($0.name) }
        var described = 0
        if attributes {
            for name in names where emitAttributes(name) { described += 1 }
        }
        pollProfile()
        if listed.isEmpty && described == 0 { throw noSupply }
    }

    private func remember(_ name: String, battery: Bool) {
        if !known.contains(where: { $0.name == name }) { known.append((name, battery)) }
    }

    // MARK: raw attributes

    /// Emits the `attributes` event of one supply; false when its directory cannot be listed.
    private func emitAttributes(_ name: String) -> Bool {
        let dir = AttributeDirectory(root: root, dir: Self.classDir + "/" + name)
        guard !dir.files.isEmpty else { return false }
        var fields: [(String, Value)] = [("name", .string(name))]
        for a in Self.attributeFields where dir.files.contains(a.file) {
            guard let text = try? dir.text(a.file) else { continue }  // unreadable this poll
            switch a.conversion {
            case .text: fields.append((a.file, .string(text)))
            case .int: if let v = Int64(text) { fields.append((a.file, .int(v))) }
            case .scaled(let divisor): if let v = Int64(text) { fields.append((a.file, .double(Double(v) / divisor))) }
            }
        }
        context.emit("attributes", fields: fields)
        return true
    }

    // MARK: the platform profile

    private func pollProfile() {
        switch attribute(Self.profileFile) {
        case .text(let text):
            hadProfile = true
            context.emit("profile", ["profile": .string(text), "low_power": .bool(Self.isLowPower(text))])
        case .absent:
            if hadProfile { context.forget("profile", key: []) }
            hadProfile = false
        case .failed(let error):
            context.log(.debug, "platform profile unreadable this poll: \(error)")
        }
    }

    /// The profiles that mean "save power": `low-power` and `quiet` (which
    /// firmwares implement by lowering the power limits). `cool` trades
    /// performance for temperature, not battery life, and is not counted.
    static func isLowPower(_ profile: String) -> Bool {
        profile == "low-power" || profile == "quiet"
    }

    // MARK: supplies

    enum Reading {
        case battery([(String, Value)], Severity)
        case supply([(String, Value)])
        /// Present but unreadable this poll.
        case skipped(String)
        /// Not something this monitor reports (a peripheral's battery, a supply without `online`).
        case ignored
    }

    /// Whether a supply would be reported (for availability): a battery, or a source with `online`.
    private func reportable(_ name: String) -> Bool {
        let dir = Self.classDir + "/" + name
        guard case .text(let type) = attribute(dir + "/type") else { return false }
        if Self.isBattery(type) {
            if peripherals { return true }
            if case .text(let scope) = attribute(dir + "/scope"), scope == "Device" { return false }
            return true
        }
        return root.exists(dir + "/online")
    }

    static func isBattery(_ type: String) -> Bool { type == "Battery" || type == "UPS" }

    private func read(_ name: String) -> Reading {
        let dir = Self.classDir + "/" + name
        let files = Self.list(root.path(dir))
        guard files.contains("type") else { return .ignored }
        let supply = Supply(root: root, dir: dir, files: files)
        do {
            guard let type = try supply.text("type") else { return .ignored }
            if !Self.isBattery(type) {
                guard let online = try supply.int("online") else { return .ignored }
                return .supply([("name", .string(name)), ("type", .string(type)), ("online", .bool(online != 0))])
            }
            if !peripherals, try supply.optionalText("scope") == "Device" { return .ignored }
            return try battery(name, supply)
        } catch {
            return .skipped(error.description)
        }
    }

    private func battery(_ name: String, _ s: Supply) throws(ProbeError) -> Reading {
        var fields: [(String, Value)] = [("name", .string(name))]
        let present = try s.int("present").map { $0 != 0 } ?? true
        fields.append(("present", .bool(present)))
        guard present else { return .battery(fields, .info) }

        // Level: capacity, else the energy or the charge ratio.
        let energyNow = try s.int("energy_now"), energyFull = try s.int("energy_full")
        let chargeNow = try s.int("charge_now"), chargeFull = try s.int("charge_full")
        var level: Double?
        if let capacity = try s.int("capacity") {
            level = Double(capacity)
        } else if let now = energyNow, let full = energyFull, full > 0 {
            level = 100 * Double(now) / Double(full)
        } else if let now = chargeNow, let full = chargeFull, full > 0 {
            level = 100 * Double(now) / Double(full)
        }
        level = level.map { min(max($0, 0), 100) }
        if let level { fields.append(("level", .double(level))) }

        let state = Self.state(try s.text("status"))
        fields.append(("state", .string(state)))
        let low = level.map { $0 <= lowLevel } ?? false
        if level != nil { fields.append(("low", .bool(low))) }

        // Time estimates: what is left (or missing) over the present rate.
        // Some drivers give power_now and current_now a sign; the magnitude counts.
        let power = try s.optionalInt("power_now").map(abs), current = try s.optionalInt("current_now").map(abs)
        func seconds(_ amount: Int64, _ rate: Int64?) -> Value? {
            guard let rate, rate > 0, amount >= 0 else { return nil }
            return .int(Int64((3600 * Double(amount) / Double(rate)).rounded()))
        }
        if state == "discharging" {
            let t = energyNow.flatMap { seconds($0, power) } ?? chargeNow.flatMap { seconds($0, current) }
            if let t { fields.append(("time_to_empty", t)) }
        } else if state == "charging" {
            var t: Value?
            if let now = energyNow, let full = energyFull { t = seconds(full - now, power) }
            if t == nil, let now = chargeNow, let full = chargeFull { t = seconds(full - now, current) }
            if let t { fields.append(("time_to_full", t)) }
        }
        let severity: Severity = low && state != "charging" && state != "full" ? .warning : .info
        return .battery(fields, severity)
    }

    /// The kernel's `status` texts, as this monitor names them.
    static func state(_ status: String?) -> String {
        switch status {
        case "Charging": "charging"
        case "Discharging": "discharging"
        case "Full": "full"
        case "Not charging": "not charging"
        default: "unknown"
        }
    }

    // MARK: files

    /// The entries of `<sysfs>/class/power_supply`, sorted; none when it does not exist.
    private func supplyNames() -> [String] {
        Self.list(root.path(Self.classDir)).filter { !$0.hasPrefix(".") }
    }

    /// The names in a directory (following a symlink to it), sorted; empty when it cannot be opened.
    static func list(_ path: String) -> [String] { FSRoot.listDirectory(path) ?? [] }

    /// One sysfs attribute, trimmed; absent when the file does not exist.
    private func attribute(_ relative: String) -> Attribute { root.attribute(relative) }

    static func trim(_ text: String) -> String { FSRoot.trimmed(text) }
}

/// One supply directory as listed at the start of a poll. An attribute not
/// listed is absent (nil); one listed but unreadable throws, so that the
/// supply is skipped this poll, except for the optional rate attributes
/// (power_now, current_now), which some drivers refuse (ENODATA, EINVAL) in
/// some states: those count as absent unless the file has gone.
struct Supply {
    let root: FSRoot
    let dir: String
    let files: [String]

    func text(_ name: String) throws(ProbeError) -> String? {
        guard files.contains(name) else { return nil }
        return PowerMonitor.trim(try root.readText(dir + "/" + name))
    }

    func int(_ name: String) throws(ProbeError) -> Int64? {
        guard let text = try text(name) else { return nil }
        guard let value = Int64(text) else {
            throw .malformed(path: root.path(dir + "/" + name), line: 0, reason: "expected an integer, found '\(text)'")
        }
        return value
    }

    func optionalText(_ name: String) throws(ProbeError) -> String? {
        do {
            return try text(name)
        } catch {
            if case .unreadable(_, let code) = error, code == ENOENT || code == ENODEV { throw error }
            return nil
        }
    }

    func optionalInt(_ name: String) throws(ProbeError) -> Int64? {
        do {
            return try int(name)
        } catch {
            if case .unreadable(_, let code) = error, code == ENOENT || code == ENODEV { throw error }
            return nil
        }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(PowerMonitor.self, a, r) }
