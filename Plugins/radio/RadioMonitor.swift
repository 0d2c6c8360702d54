import Glibc
import LinuxProbes
import Synchronization
import VigilKit

/// Radios switched off: Wi-Fi, Bluetooth, WWAN and the others soft-blocked
/// (by software: `rfkill block`, a desktop's switch) or hard-blocked (a
/// hardware switch, the firmware), and airplane mode: every radio blocked.
/// The iOS Bluetooth and cellular radio state sources, on Linux, from the
/// kernel's rfkill subsystem.
///
/// Two sources:
///
/// - **push**: `<devfs>/rfkill`, opened non-blocking. Right after the open
///   the kernel queues one RFKILL_OP_ADD event per existing device, read in
///   `start` for the snapshot; then a worker reads ADD, DEL and CHANGE events
///   as they come. Events carry only the index and the type; the name is
///   read from `<sysfs>/class/rfkill/rfkill<index>/name`.
/// - **poll**: when `<devfs>/rfkill` cannot be opened (absent in containers,
///   EACCES, not a character device; the reason is logged once at debug),
///   `<sysfs>/class/rfkill/*` is read every interval and diffed.
///
/// Polled, so that the host's interval drives the fallback; with the device
/// open a poll does nothing. A read of the device that fails (EIO, ENODEV)
/// falls back to polling, logged as a warning; an end of file (a FIFO
/// standing in for the device, whose writer went away) reopens it.
///
/// In the polled tree, a device whose attributes cannot be read (gone between
/// the listing and the read, EIO, EAGAIN, a dangling link) is skipped for
/// that poll and keeps its last reported state, logged at debug. A device no
/// longer listed, or a DEL event, is reported once with `present` false.
final class RadioMonitor: PolledMonitor, @unchecked Sendable {  // mutable state is behind `state`
    static let spec = PluginSpec(
        name: "radio", version: "1.0.0",
        summary: "Radios soft- and hard-blocked (Wi-Fi, Bluetooth, WWAN…) and airplane mode, from rfkill (/dev/rfkill pushed, or sysfs polled)",
        defaultInterval: .seconds(5),
        events: [
            EventDecl("radio", doc: """
                One rfkill device: a snapshot on start, then when it was blocked or unblocked, and once with \
                present false when it went away (a USB adapter unplugged, a driver unloaded).
                """, fields: [
                FieldDecl("index", .int, doc: "the kernel's rfkill index: rfkill<index> in class/rfkill"),
                FieldDecl("name", .string,
                          doc: "the device's `name` (phy0, hci0, tpacpi_bluetooth_sw…); absent when sysfs has none for the index"),
                FieldDecl("type", .string, doc: "wlan, bluetooth, uwb, wimax, wwan, gps, fm, nfc, or unknown"),
                FieldDecl("soft_blocked", .bool, doc: "blocked by software (rfkill block, a desktop's switch, a hotkey driver)"),
                FieldDecl("hard_blocked", .bool, doc: "blocked by hardware (a switch, the firmware); software cannot unblock it"),
                FieldDecl("blocked", .bool, doc: "soft or hard blocked: the radio is off"),
                FieldDecl("present", .bool, doc: "the device exists; false once, when it went away"),
            ], key: ["index"]),
            EventDecl("airplane_mode", doc: """
                Every radio blocked: a snapshot on start, then when the counts changed. Counts every rfkill device \
                present, whatever the `types` option says.
                """, fields: [
                FieldDecl("active", .bool, doc: "there is at least one radio and every one is blocked"),
                FieldDecl("radios", .int, unit: "radios", doc: "rfkill devices present"),
                FieldDecl("blocked", .int, unit: "radios", doc: "of those, soft or hard blocked"),
            ]),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var devfs = "/dev"
        var types: [String] = []
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem: class/rfkill is read under it (a fixture tree in tests)."),
            .option("devfs", \.devfs, doc: "Root of the device filesystem: events are read from its rfkill (a FIFO in tests)."),
            .option("types", \.types,
                    doc: "Report only radios of these types (wlan, bluetooth, uwb, wimax, wwan, gps, fm, nfc, unknown); empty: all. airplane_mode counts all."))
    }

    static let classDir = "class/rfkill"

    /// One device as last read.
    struct Radio: Equatable {
        var index: Int64
        /// The directory name in class/rfkill: how a polled tree tells that it went away.
        var entry: String
        var name: String?
        var type: String
        var soft: Bool
        var hard: Bool

        var blocked: Bool { soft || hard }

        func fields(present: Bool) -> [(String, Value)] {
            var f: [(String, Value)] = [("index", .int(index))]
            if let name { f.append(("name", .string(name))) }
            f += [("type", .string(type)), ("soft_blocked", .bool(soft)), ("hard_blocked", .bool(hard)),
                  ("blocked", .bool(blocked)), ("present", .bool(present))]
            return f
        }
    }

    struct State {
        /// Every device known, by index.
        var radios: [Radio] = []
        /// The device could not be opened, or failed: sysfs is polled.
        var polling = true
    }

    private let context: MonitorContext
    private let options: Options
    private let sysfs: FSRoot
    private let devicePath: String
    private let state = Mutex(State())

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        guard !options.devfs.isEmpty else { throw .invalidOption("devfs", "must not be empty") }
        for (i, type) in options.types.enumerated() where !RadioType.names.contains(type) {
            throw .invalidOption("types[\(i)]", "unknown radio type '\(type)'; one of \(RadioType.names.dropFirst().joined(separator: ", ")), unknown")
        }
        self.options = options
        self.context = context
        self.sysfs = FSRoot(options.sysfs)
        self.devicePath = FSRoot(options.devfs).path("rfkill")
    }

    func start() throws(MonitorError) {
        state.withLock { $0 = State() }
        switch RfkillDevice.open(devicePath) {
        case .success(let fd):
            state.withLock { $0.polling = false }
            // The kernel queued an ADD per device during the open: the snapshot.
            var stream = RfkillStream()
            if case .failed(let why) = drain(fd, &stream) {
                close(fd)
                context.log(.warning, "reading \(devicePath): \(why); polling \(sysfs.path(Self.classDir)) every interval instead")
                try startPolling(why: "reading \(devicePath) failed: \(why)")
                return
            }
            reportAirplaneMode()
            let worker = context.spawn("rfkill") { [self, stream] token in watch(fd, stream: stream, token: token) }
            if worker == nil {
                close(fd)
                throw .temporary("cannot start the worker thread")
            }
        case .failure(let failure):
            context.log(.debug, "\(failure): polling \(sysfs.path(Self.classDir)) every interval instead")
            try startPolling(why: failure.description)
        }
    }

    /// Polling from the first poll, which the host makes right after start.
    private func startPolling(why: String) throws(MonitorError) {
        state.withLock { $0 = State() }
        guard !entries().isEmpty else {
            throw .unavailable("no rfkill device in \(sysfs.path(Self.classDir)), and \(why)")
        }
    }

    func poll() throws(MonitorError) {
        guard state.withLock({ $0.polling }) else { return }
        let listed = entries()
        var read: [Radio] = []
        for entry in listed {
            do {
                read.append(try radio(entry))
            } catch {
                context.log(.debug, "skipping rfkill device \(entry) this poll: \(error)")
            }
        }
        read.sort { $0.index < $1.index }
        let gone = state.withLock { state -> [Radio] in
            let gone = state.radios.filter { !listed.contains($0.entry) }
            state.radios.removeAll { !listed.contains($0.entry) }
            for radio in read {
                if let i = state.radios.firstIndex(where: { $0.index == radio.index }) { state.radios[i] = radio }
                else { state.radios.append(radio) }
            }
            state.radios.sort { $0.index < $1.index }
            return gone
        }
        for radio in gone { report(removed: radio) }
        for radio in read { report(radio) }
        reportAirplaneMode()
        if listed.isEmpty { throw .unavailable("no rfkill device in \(sysfs.path(Self.classDir)) any more") }
    }

    // MARK: the polled tree

    /// The entries of `<sysfs>/class/rfkill`, sorted; none when it does not exist.
    private func entries() -> [String] {
        (sysfs.list(Self.classDir) ?? []).filter { !$0.hasPrefix(".") }
    }

    /// One device directory (a link into /sys/devices, followed).
    private func radio(_ entry: String) throws(ProbeError) -> Radio {
        let dir = AttributeDirectory(root: sysfs, dir: Self.classDir + "/" + entry)
        guard !dir.files.isEmpty else { throw .unreadable(path: sysfs.path(dir.dir), errno: ENOENT) }  // gone, or a dangling link
        guard let index = try dir.int("index") ?? Int64(entry.dropFirst("rfkill".count)) else { throw dir.missing("index") }
        guard let type = try dir.text("type") else { throw dir.missing("type") }
        guard let soft = try dir.int("soft") else { throw dir.missing("soft") }
        guard let hard = try dir.int("hard") else { throw dir.missing("hard") }
        return Radio(index: index, entry: entry, name: try dir.text("name"), type: RadioType.name(sysfs: type),
                     soft: soft != 0, hard: hard != 0)
    }

    /// The `name` of the device with this index, read when its ADD arrives.
    private func name(index: UInt32) -> String? {
        switch sysfs.attribute(Self.classDir + "/rfkill\(index)/name") {
        case .text(let name) where !name.isEmpty: return name
        case .text, .absent: return nil
        case .failed(let error):
            context.log(.debug, "no name for rfkill\(index): \(error)")
            return nil
        }
    }

    // MARK: the device

    /// Reads events until the device is drained, fails or ends; reports each.
    private func drain(_ fd: Int32, _ stream: inout RfkillStream) -> RfkillDevice.ReadResult {
        while true {
            switch RfkillDevice.read(fd, count: stream.wanted) {
            case .bytes(let bytes):
                switch stream.append(bytes) {
                case .event(let event)?: apply(event)
                case .unknown(let op)?: context.log(.debug, "skipping an rfkill event with op \(op)")
                case nil: continue
                }
            case let other: return other
            }
        }
    }

    /// The worker: waits for events until the instance stops. Owns `fd`.
    private func watch(_ first: Int32, stream: RfkillStream, token: Worker.Token) {
        var fd = first
        var stream = stream
        defer { if fd >= 0 { close(fd) } }
        while !token.isCancelled {
            switch token.waitFor(fd: fd, events: Int16(POLLIN), timeout: nil) {
            case .cancelled: return
            case .timedOut: continue
            case .ready:
                let result = drain(fd, &stream)
                reportAirplaneMode()
                switch result {
                case .drained, .bytes: continue
                case .ended:
                    // A FIFO's writer went away: wait for the next one.
                    context.log(.debug, "\(devicePath) ended (its writer went away): reopening it")
                    close(fd)
                    fd = -1
                    switch RfkillDevice.open(devicePath) {
                    case .success(let reopened):
                        fd = reopened
                        stream = RfkillStream()
                    case .failure(let failure):
                        return fallBack("\(devicePath) ended and \(failure)")
                    }
                case .failed(let why):
                    return fallBack("reading \(devicePath): \(why)")
                }
            }
        }
    }

    /// The device failed: the next polls read sysfs and report what changed.
    private func fallBack(_ why: String) {
        context.log(.warning, "\(why); polling \(sysfs.path(Self.classDir)) every interval instead")
        state.withLock { $0.polling = true }
    }

    private func apply(_ event: RfkillEvent) {
        let index = Int64(event.index)
        switch event.op {
        case .add, .change:
            let known = state.withLock { state in state.radios.first { $0.index == index }?.name }
            let radio = Radio(index: index, entry: "rfkill\(event.index)", name: known ?? name(index: event.index),
                              type: RadioType.name(code: event.type), soft: event.soft, hard: event.hard)
            state.withLock { state in
                if let i = state.radios.firstIndex(where: { $0.index == index }) { state.radios[i] = radio }
                else { state.radios.append(radio) }
            }
            report(radio)
        case .del:
            let radio = state.withLock { state -> Radio in
                guard let known = state.radios.firstIndex(where: { $0.index == index }) else {
                    return Radio(index: index, entry: "rfkill\(event.index)", name: nil, type: RadioType.name(code: event.type),
                                 soft: event.soft, hard: event.hard)
                }
                return state.radios.remove(at: known)
            }
            report(removed: radio)
        case .changeAll:
            let changed = state.withLock { state -> [Radio] in
                for i in state.radios.indices where event.type == 0 || RadioType.code(state.radios[i].type) == event.type {
                    state.radios[i].soft = event.soft
                }
                return state.radios
            }
            for radio in changed { report(radio) }
        }
    }

    // MARK: events

    private func wanted(_ radio: Radio) -> Bool { options.types.isEmpty || options.types.contains(radio.type) }

    private func report(_ radio: Radio) {
        guard wanted(radio) else { return }
        context.emit("radio", fields: radio.fields(present: true))
    }

    private func report(removed radio: Radio) {
        context.log(.info, "rfkill device \(radio.entry) (\(radio.name ?? radio.type)) went away")
        guard wanted(radio) else { return }
        context.emit("radio", fields: radio.fields(present: false))
        context.forget("radio", key: [.int(radio.index)])
    }

    private func reportAirplaneMode() {
        let (radios, blocked) = state.withLock { ($0.radios.count, $0.radios.count { $0.blocked }) }
        context.emit("airplane_mode", ["active": .bool(radios > 0 && blocked == radios),
                                       "radios": .int(Int64(radios)), "blocked": .int(Int64(blocked))])
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(RadioMonitor.self, a, r) }
