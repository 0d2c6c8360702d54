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

    /// The power_supply attributes the `attributes` kind reports: the file,
    /// its conversion, its unit. Written out, docs whole: built with
    /// interpolation in a closure it was half of the plugin's entry point.
    struct AttributeField {
        let file: String
        let conversion: Conversion
        let unit: String
        let doc: String
        init(_ file: String, _ conversion: Conversion, unit: String, doc: String) {
            self.file = file
            self.conversion = conversion
            self.unit = unit
            self.doc = doc
        }
    }

    static let attributeFields: [AttributeField] = [
        AttributeField("type", .text, unit: "", doc: "`type`: Battery, UPS, Mains, USB, Wireless"),
        AttributeField("status", .text, unit: "", doc: "`status`: Charging, Discharging, Full, Not charging, Unknown"),
        AttributeField("capacity_level", .text, unit: "", doc: "`capacity_level`: Critical, Low, Normal, High, Full, Unknown"),
        AttributeField("charge_type", .text, unit: "", doc: "`charge_type`: Trickle, Fast, Standard, Adaptive, Custom…"),
        AttributeField("health", .text, unit: "", doc: "`health`: Good, Overheat, Dead, Over voltage, Cold…"),
        AttributeField("technology", .text, unit: "", doc: "`technology`: Li-ion, Li-poly, NiMH…"),
        AttributeField("manufacturer", .text, unit: "", doc: "`manufacturer`: the battery's maker"),
        AttributeField("model_name", .text, unit: "", doc: "`model_name`: the battery's model"),
        AttributeField("serial_number", .text, unit: "", doc: "`serial_number`: the battery's serial number"),
        AttributeField("usb_type", .text, unit: "", doc: "`usb_type`: the USB types, the active one in brackets ([C] PD PD_PPS)"),
        AttributeField("scope", .text, unit: "", doc: "`scope`: System or Device (a peripheral's)"),
        AttributeField("present", .int, unit: "", doc: "`present`: 1 when the battery is there"),
        AttributeField("online", .int, unit: "", doc: "`online`: 1 when the source supplies power (2, 3: a USB or charger mode)"),
        AttributeField("authentic", .int, unit: "", doc: "`authentic`: 1 when the battery is genuine"),
        AttributeField("calibrate", .int, unit: "", doc: "`calibrate`: 1 while the fuel gauge calibrates"),
        AttributeField("capacity", .int, unit: "percent", doc: "`capacity`: the charge level"),
        AttributeField("capacity_alert_min", .int, unit: "percent", doc: "`capacity_alert_min`: the low-level alert"),
        AttributeField("capacity_alert_max", .int, unit: "percent", doc: "`capacity_alert_max`: the high-level alert"),
        AttributeField("cycle_count", .int, unit: "", doc: "`cycle_count`: charge cycles so far"),
        AttributeField("time_to_empty_now", .int, unit: "seconds", doc: "`time_to_empty_now`: the driver's estimate"),
        AttributeField("time_to_full_now", .int, unit: "seconds", doc: "`time_to_full_now`: the driver's estimate"),
        AttributeField("charge_control_limit", .int, unit: "", doc: "`charge_control_limit`: the charge current limit level"),
        AttributeField("charge_control_limit_max", .int, unit: "", doc: "`charge_control_limit_max`: the highest limit level"),
        AttributeField("power_now", .scaled(1_000_000), unit: "watts", doc: "`power_now` (micro-units in sysfs): the power drawn or supplied now"),
        AttributeField("energy_now", .scaled(1_000_000), unit: "Wh", doc: "`energy_now` (micro-units in sysfs): the energy stored now"),
        AttributeField("energy_full", .scaled(1_000_000), unit: "Wh", doc: "`energy_full` (micro-units in sysfs): the energy stored when full"),
        AttributeField("energy_full_design", .scaled(1_000_000), unit: "Wh", doc: "`energy_full_design` (micro-units in sysfs): the energy stored when full, by design"),
        AttributeField("energy_empty", .scaled(1_000_000), unit: "Wh", doc: "`energy_empty` (micro-units in sysfs): the energy left when empty"),
        AttributeField("energy_empty_design", .scaled(1_000_000), unit: "Wh", doc: "`energy_empty_design` (micro-units in sysfs): the energy left when empty, by design"),
        AttributeField("charge_now", .scaled(1_000_000), unit: "Ah", doc: "`charge_now` (micro-units in sysfs): the charge stored now"),
        AttributeField("charge_full", .scaled(1_000_000), unit: "Ah", doc: "`charge_full` (micro-units in sysfs): the charge when full"),
        AttributeField("charge_full_design", .scaled(1_000_000), unit: "Ah", doc: "`charge_full_design` (micro-units in sysfs): the charge when full, by design"),
        AttributeField("charge_empty", .scaled(1_000_000), unit: "Ah", doc: "`charge_empty` (micro-units in sysfs): the charge when empty"),
        AttributeField("charge_empty_design", .scaled(1_000_000), unit: "Ah", doc: "`charge_empty_design` (micro-units in sysfs): the charge when empty, by design"),
        AttributeField("charge_counter", .scaled(1_000_000), unit: "Ah", doc: "`charge_counter` (micro-units in sysfs): the charge counter"),
        AttributeField("current_now", .scaled(1_000_000), unit: "amperes", doc: "`current_now` (micro-units in sysfs): the current now (some drivers sign it: negative while discharging)"),
        AttributeField("current_max", .scaled(1_000_000), unit: "amperes", doc: "`current_max` (micro-units in sysfs): the highest current"),
        AttributeField("current_boot", .scaled(1_000_000), unit: "amperes", doc: "`current_boot` (micro-units in sysfs): the current at boot"),
        AttributeField("charge_term_current", .scaled(1_000_000), unit: "amperes", doc: "`charge_term_current` (micro-units in sysfs): the current at which charging ends"),
        AttributeField("precharge_current", .scaled(1_000_000), unit: "amperes", doc: "`precharge_current` (micro-units in sysfs): the pre-charge current"),
        AttributeField("constant_charge_current", .scaled(1_000_000), unit: "amperes", doc: "`constant_charge_current` (micro-units in sysfs): the constant-current charging current"),
        AttributeField("constant_charge_current_max", .scaled(1_000_000), unit: "amperes", doc: "`constant_charge_current_max` (micro-units in sysfs): its highest value"),
        AttributeField("input_current_limit", .scaled(1_000_000), unit: "amperes", doc: "`input_current_limit` (micro-units in sysfs): the input current limit"),
        AttributeField("voltage_now", .scaled(1_000_000), unit: "volts", doc: "`voltage_now` (micro-units in sysfs): the voltage now"),
        AttributeField("voltage_min", .scaled(1_000_000), unit: "volts", doc: "`voltage_min` (micro-units in sysfs): the lowest voltage"),
        AttributeField("voltage_max", .scaled(1_000_000), unit: "volts", doc: "`voltage_max` (micro-units in sysfs): the highest voltage"),
        AttributeField("voltage_min_design", .scaled(1_000_000), unit: "volts", doc: "`voltage_min_design` (micro-units in sysfs): the lowest voltage, by design"),
        AttributeField("voltage_max_design", .scaled(1_000_000), unit: "volts", doc: "`voltage_max_design` (micro-units in sysfs): the highest voltage, by design"),
        AttributeField("voltage_boot", .scaled(1_000_000), unit: "volts", doc: "`voltage_boot` (micro-units in sysfs): the voltage at boot"),
        AttributeField("voltage_ocv", .scaled(1_000_000), unit: "volts", doc: "`voltage_ocv` (micro-units in sysfs): the open-circuit voltage"),
        AttributeField("constant_charge_voltage", .scaled(1_000_000), unit: "volts", doc: "`constant_charge_voltage` (micro-units in sysfs): the constant-voltage charging voltage"),
        AttributeField("constant_charge_voltage_max", .scaled(1_000_000), unit: "volts", doc: "`constant_charge_voltage_max` (micro-units in sysfs): its highest value"),
        AttributeField("temp", .scaled(10), unit: "celsius", doc: "`temp` (tenths of a degree in sysfs): the battery's temperature"),
        AttributeField("temp_min", .scaled(10), unit: "celsius", doc: "`temp_min` (tenths of a degree in sysfs): the lowest allowed"),
        AttributeField("temp_max", .scaled(10), unit: "celsius", doc: "`temp_max` (tenths of a degree in sysfs): the highest allowed"),
        AttributeField("temp_alert_min", .scaled(10), unit: "celsius", doc: "`temp_alert_min` (tenths of a degree in sysfs): the low alert"),
        AttributeField("temp_alert_max", .scaled(10), unit: "celsius", doc: "`temp_alert_max` (tenths of a degree in sysfs): the high alert"),
        AttributeField("temp_ambient", .scaled(10), unit: "celsius", doc: "`temp_ambient` (tenths of a degree in sysfs): the ambient temperature"),
        AttributeField("temp_ambient_min", .scaled(10), unit: "celsius", doc: "`temp_ambient_min` (tenths of a degree in sysfs): the ambient low limit"),
        AttributeField("temp_ambient_max", .scaled(10), unit: "celsius", doc: "`temp_ambient_max` (tenths of a degree in sysfs): the ambient high limit"),
    ]

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
        // (Int64.min has no magnitude in Int64: it saturates.)
        let power = try s.optionalInt("power_now").map(Saturating.magnitude), current = try s.optionalInt("current_now").map(Saturating.magnitude)
        func seconds(_ amount: Int64, _ rate: Int64?) -> Value? {
            guard let rate, rate > 0, amount >= 0 else { return nil }
            return .int(rounding: 3600 * Double(amount) / Double(rate))
        }
        if state == "discharging" {
            let t = energyNow.flatMap { seconds($0, power) } ?? chargeNow.flatMap { seconds($0, current) }
            if let t { fields.append(("time_to_empty", t)) }
        } else if state == "charging" {
            var t: Value?
            if let now = energyNow, let full = energyFull { t = seconds(Saturating.difference(full, now), power) }
            if t == nil, let now = chargeNow, let full = chargeFull { t = seconds(Saturating.difference(full, now), current) }
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
