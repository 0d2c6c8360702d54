import Glibc
import LinuxProbes
import VigilKit

/// Wi-Fi link state per wireless interface, from `<procfs>/net/wireless`
/// (link quality, signal and noise levels, discarded packets, missed
/// beacons: the wireless-extensions statistics cfg80211 still provides) and
/// `<sysfs>/class/net/<iface>/` (`operstate`, `address`, and `wireless/` or
/// `phy80211/`, which mark a Wi-Fi interface even while it is not associated).
///
/// Polled: both files are cheap to read. SSID, BSSID and frequency come
/// from nl80211 (generic netlink; see Nl80211.swift): at each poll where an
/// interface is connected, a NETLINK_GENERIC socket resolves the nl80211
/// family, dumps the interfaces (NL80211_CMD_GET_INTERFACE) and each
/// connected station's cached scan results (NL80211_CMD_GET_SCAN, the BSS
/// marked associated), all within one deadline. That socket is used only
/// when `sysfs` and `procfs` are the real `/sys` and `/proc` (a fixture tree
/// describes another machine); `nl80211_stream` replays a recorded stream of
/// the kernel's replies instead (for tests). Without nl80211 (no cfg80211
/// loaded: CTRL_CMD_GETFAMILY answers ENOENT) the fields are left out and the
/// rest is reported as before; the reason is logged at debug level.
///
/// `<procfs>/net/wireless` looks like this (cfg80211 lists an interface only
/// while it is associated):
///
///     Inter-| sta-|   Quality        |   Discarded packets               | Missed | WE
///      face | tus | link level noise |  nwid  crypt   frag  retry   misc | beacon | 22
///     wlp2s0: 0000   58.  -52.  -256        0      0      0      3     17        0
///
/// Link, level and noise are followed by `.` when the driver updated them
/// since the last read, by a space otherwise. cfg80211 scales link quality
/// to 0…70 (the `quality_max` option, for drivers with another scale such as
/// 100 or 94). Level and noise are dBm; a driver that does not flag them as
/// dBm shows the raw unsigned byte (217 for −39 dBm), so a positive value is
/// read as value − 256. −256 (a raw 0) and 0 mean "not measured": noise is
/// −256 on most cfg80211 drivers, and the field is then left out.
///
/// An interface whose files cannot be read this poll (gone between the
/// listing and the read) is skipped and keeps its last reported state; one no
/// longer listed anywhere is reported once with `connected: false`.
final class WifiMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "wifi", version: "1.0.0",
        summary: "Wi-Fi link quality, signal and noise, operational state, association, SSID, BSSID and frequency per wireless interface, from procfs, sysfs and nl80211 (polled)",
        defaultInterval: .seconds(5),
        events: [
            EventDecl("link", doc: """
                One wireless interface (a directory of class/net with wireless/ or phy80211/, or a line of \
                net/wireless): a snapshot on start, then when a field changed (quality by at least 0.05, signal by \
                at least 3 dBm, the counters by at least 100, the rest on any change). Quality, signal, noise and the \
                counters are present only while associated (while net/wireless has the interface's line). An \
                interface that went away has only interface and connected (false). SSID, BSSID and frequency come \
                from nl80211, only with the real /sys and /proc (or nl80211_stream), only while connected, and \
                are absent where nl80211 is not there (no cfg80211) or does not know them; SSID and BSSID also \
                only with identifiers (the default).
                """, fields: [
                FieldDecl("interface", .string, doc: "the interface name (wlp2s0, wlan0)"),
                FieldDecl("address", .string, doc: "the interface's MAC address, from class/net/<interface>/address"),
                FieldDecl("operstate", .string,
                          doc: "the kernel's operstate: up, dormant (authenticating), down, lowerlayerdown, notpresent, testing or unknown"),
                FieldDecl("connected", .bool,
                          doc: "associated: net/wireless lists the interface and operstate is up (or unreadable); operstate up alone where net/wireless does not exist"),
                FieldDecl("quality", .double, unit: "ratio", minChange: 0.05,
                          doc: "link quality over quality_max (70 for cfg80211 drivers), 0…1"),
                FieldDecl("signal_dbm", .int, unit: "dBm", minChange: 3,
                          doc: "received signal level; a positive raw value is read as value − 256; absent when not measured"),
                FieldDecl("noise_dbm", .int, unit: "dBm", minChange: 3,
                          doc: "noise level, same conversion; absent when not measured (−256, as most cfg80211 drivers show)"),
                FieldDecl("discarded", .int, unit: "packets", minChange: 100,
                          doc: "packets discarded since the driver loaded: nwid + crypt + frag + retry + misc", counter: true),
                FieldDecl("missed_beacons", .int, unit: "beacons", minChange: 100,
                          doc: "beacons missed since the driver loaded", counter: true),
                FieldDecl("ssid", .string,
                          doc: "the network's name (NL80211_ATTR_SSID, or the SSID element of the associated BSS): UTF-8 as is, control characters, backslashes and bytes that are not UTF-8 escaped as \\xNN and \\\\; absent when unknown or with identifiers false"),
                FieldDecl("bssid", .string,
                          doc: "the access point's MAC address, aa:bb:cc:dd:ee:ff (the BSS the scan results mark associated); absent when unknown or with identifiers false"),
                FieldDecl("frequency", .int, unit: "MHz",
                          doc: "the channel's centre frequency (NL80211_ATTR_WIPHY_FREQ, or the associated BSS's): 2412…2484 is 2.4 GHz, 5160…5885 is 5 GHz, 5955…7115 is 6 GHz"),
            ], key: ["interface"]),
        ])

    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var sysfs = "/sys"
        var qualityMax = 70
        var identifiers = true
        var nl80211Stream: String? = nil
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests)."),
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests)."),
            .option("quality_max", \.qualityMax,
                    doc: "The link quality that counts as 1: 70 for cfg80211 drivers (iw's scale), 100 or 94 for some older ones."),
            .option("identifiers", \.identifiers,
                    doc: "Report the SSID and BSSID. They identify the network, and a BSSID locates the machine through public databases of access points: set false where events leave the machine and that matters; frequency is still reported."),
            .optional("nl80211_stream", \.nl80211Stream,
                      doc: "Replay nl80211 replies from this file (an absolute path; netlink messages as the kernel sends them, one session per poll) instead of a generic netlink socket, whatever the roots; for tests."))
    }

    static let wirelessFile = "net/wireless"
    /// One nl80211 session (family, interfaces, scan results) must be answered within this.
    static let nl80211Timeout: Duration = .seconds(1)

    /// Where SSID, BSSID and frequency come from.
    enum Source: Equatable {
        case none
        case socket
        case stream(String)
    }
    static let netDir = "class/net"

    private let context: MonitorContext
    private let procfs: FSRoot
    private let sysfs: FSRoot
    private let qualityMax: Double
    private let identifiers: Bool
    private let source: Source
    /// Interfaces reported since start: those that disappear are reported gone once.
    private var known: [String] = []
    /// The last links nl80211 gave, reused when a session fails.
    private var lastLinks: [(name: String, link: Nl80211.Link)] = []
    /// The last reason nl80211 gave nothing, logged once.
    private var lastNote: String?

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.procfs.isEmpty else { throw .invalidOption("procfs", "must not be empty") }
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        guard options.qualityMax > 0 && options.qualityMax <= 255 else {
            throw .invalidOption("quality_max", "must be from 1 to 255, got \(options.qualityMax)")
        }
        self.context = context
        self.procfs = FSRoot(options.procfs)
        self.sysfs = FSRoot(options.sysfs)
        self.qualityMax = Double(options.qualityMax)
        self.identifiers = options.identifiers
        if let path = options.nl80211Stream {
            guard path.hasPrefix("/") else { throw .invalidOption("nl80211_stream", "must be an absolute path, got \"\(path)\"") }
            source = .stream(path)
        } else {
            source = sysfs.root == "/sys" && procfs.root == "/proc" ? .socket : .none
        }
    }

    func start() throws(MonitorError) {
        known = []
        lastLinks = []
        lastNote = nil
        let (names, _) = interfaces()
        guard !names.isEmpty else { throw noInterface }
    }

    func stop() {
        known = []
        lastLinks = []
    }

    private var noInterface: MonitorError {
        .unavailable("no wireless interface in \(sysfs.path(Self.netDir)) or \(procfs.path(Self.wirelessFile))")
    }

    func poll() throws(MonitorError) {
        let (names, stats) = interfaces()
        var rows: [(name: String, fields: [(String, Value)], connected: Bool)] = []
        for name in names {
            if !known.contains(name) { known.append(name) }
            let dir = Self.netDir + "/" + name
            var fields: [(String, Value)] = [("interface", .string(name))]
            var operstate: String?
            switch attribute(dir + "/address") {
            case .text(let mac): fields.append(("address", .string(mac)))
            case .absent: break
            case .failed(let error):
                context.log(.debug, "skipping \(name) this poll: \(error)")
                continue
            }
            switch attribute(dir + "/operstate") {
            case .text(let state):
                operstate = state
                fields.append(("operstate", .string(state)))
            case .absent: break
            case .failed(let error):
                context.log(.debug, "skipping \(name) this poll: \(error)")
                continue
            }
            let line = stats?.first { $0.interface == name }
            // Without net/wireless (a kernel without wireless extensions), operstate alone tells.
            let connected = stats == nil ? operstate == "up" : line != nil && (operstate == nil || operstate == "up")
            fields.append(("connected", .bool(connected)))
            if let line, connected {
                fields.append(("quality", .double(min(max(line.link / qualityMax, 0), 1))))
                if let signal = Self.dBm(line.level) { fields.append(("signal_dbm", .int(signal))) }
                if let noise = Self.dBm(line.noise) { fields.append(("noise_dbm", .int(noise))) }
                fields.append(("discarded", .int(line.discarded)))
                fields.append(("missed_beacons", .int(line.missedBeacons)))
            }
            rows.append((name, fields, connected))
        }
        let links = nl80211Links(for: rows.filter(\.connected).map(\.name))
        for row in rows {
            var fields = row.fields
            if row.connected, let link = links.first(where: { $0.name == row.name })?.link {
                if identifiers, let ssid = link.ssid { fields.append(("ssid", .string(Nl80211.ssidText(ssid)))) }
                if identifiers, let bssid = link.bssid.flatMap(Nl80211.macText) { fields.append(("bssid", .string(bssid))) }
                if let frequency = link.frequency { fields.append(("frequency", .int(frequency))) }
            }
            context.emit("link", fields: fields)
        }
        // An interface skipped this poll keeps its last reported state.
        let listed = names
        for gone in known where !listed.contains(gone) {
            context.emit("link", fields: [("interface", .string(gone)), ("connected", .bool(false))])
            context.forget("link", key: [.string(gone)])
        }
        known.removeAll { !listed.contains($0) }
        lastLinks.removeAll { !listed.contains($0.name) }
        if listed.isEmpty { throw noInterface }
    }

    // MARK: nl80211

    /// SSID, BSSID and frequency of the connected interfaces `names`, from
    /// nl80211; empty when nl80211 is not used (fixture roots), not there
    /// (no cfg80211), or nothing is connected. When a session fails (a
    /// timeout, a reply that does not parse), the last links read are used
    /// again, so that a passing failure does not make the fields flap.
    private func nl80211Links(for names: [String]) -> [(name: String, link: Nl80211.Link)] {
        guard source != .none, !names.isEmpty else { return [] }
        var outcome: Nl80211.Outcome
        do {
            switch source {
            case .none: return []
            case .socket:
                var socket = try GenericNetlinkSocket(timeout: Self.nl80211Timeout)
                defer { socket.close() }
                outcome = try Nl80211.read(&socket, names: names, identifiers: identifiers)
            case .stream(let path):
                let bytes: [UInt8]
                do { bytes = try FSRoot("/").readBytes(path) } catch {
                    note("nl80211 stream \(path) unreadable (\(error)): no SSID, BSSID or frequency")
                    return []
                }
                var stream = RecordedNetlinkStream(bytes: bytes)
                outcome = try Nl80211.read(&stream, names: names, identifiers: identifiers)
            }
        } catch {
            note("nl80211 failed this poll, reporting its last values: \(error)")
            return lastLinks.filter { names.contains($0.name) }
        }
        switch outcome {
        case .missing:
            note("no nl80211 family in this kernel (cfg80211 not loaded): no SSID, BSSID or frequency")
            lastLinks = []
            return []
        case .links(let links):
            note(nil)
            for (name, link) in links {
                lastLinks.removeAll { $0.name == name }
                lastLinks.append((name, link))
            }
            return links
        }
    }

    /// Logs (at debug) why nl80211 gave nothing, once per reason until it works again.
    private func note(_ reason: String?) {
        defer { lastNote = reason }
        guard let reason, reason != lastNote else { return }
        context.log(.debug, reason)
    }

    /// A level from net/wireless in dBm: a positive value is an unsigned byte
    /// (value − 256); −256 and 0 are "not measured".
    static func dBm(_ value: Int64) -> Int64? {
        let v = value > 0 ? value - 256 : value
        return v == 0 || v <= -256 ? nil : v
    }

    // MARK: net/wireless

    struct Line: Equatable {
        var interface: String
        var link: Double
        var level: Int64
        var noise: Int64
        var discarded: Int64
        var missedBeacons: Int64
    }

    /// The Wi-Fi interfaces, sorted: those in class/net with wireless/ or
    /// phy80211/, and those net/wireless lists; with the lines of net/wireless
    /// (nil when it cannot be read).
    private func interfaces() -> ([String], [Line]?) {
        var stats: [Line]?
        do {
            stats = try Self.parse(procfs.readText(Self.wirelessFile), path: procfs.path(Self.wirelessFile)) { message in
                context.log(.debug, message)
            }
        } catch {
            if !error.isUnavailable { context.log(.debug, "net/wireless unreadable this poll: \(error)") }
        }
        var names: [String] = []
        for name in Self.list(sysfs.path(Self.netDir)) where !name.hasPrefix(".") {
            let dir = Self.netDir + "/" + name
            if sysfs.exists(dir + "/wireless") || sysfs.exists(dir + "/phy80211") { names.append(name) }
        }
        for line in stats ?? [] where !names.contains(line.interface) { names.append(line.interface) }
        return (names.sorted(), stats)
    }

    /// Parses net/wireless: two header lines, then `iface: status link level
    /// noise nwid crypt frag retry misc beacon …`. A line that does not parse
    /// is skipped (and reported through `skip`).
    static func parse(_ text: String, path: String, skip: (String) -> Void = { _ in }) -> [Line] {
        var lines: [Line] = []
        for (i, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            guard let colon = raw.firstIndex(of: ":") else { continue }  // headers ("Inter-| sta-|…", " face | tus |…")
            let name = trim(String(raw[..<colon]))
            guard !name.isEmpty, !name.contains("|"), !name.contains(" ") else { continue }
            let values = raw[raw.index(after: colon)...].split(separator: " ", omittingEmptySubsequences: true)
            func number(_ k: Int) -> Double? {
                guard k < values.count else { return nil }
                var s = Substring(values[k])
                if s.hasSuffix(".") || s.hasSuffix("*") { s = s.dropLast() }  // updated-since-last-read marks
                return Double(s)
            }
            guard values.count >= 10, let link = number(1), let level = number(2), let noise = number(3) else {
                skip("\(path):\(i + 1): expected an interface with at least 10 values, skipped")
                continue
            }
            var discarded: Int64 = 0
            var counters = true
            for k in 4...8 {
                if let n = Int64(values[k]) { discarded = Saturating.sum(discarded, n) } else { counters = false }
            }
            guard counters, let missed = Int64(values[9]) else {
                skip("\(path):\(i + 1): expected counters after the levels, skipped")
                continue
            }
            lines.append(Line(interface: name, link: link, level: Int64(level), noise: Int64(noise),
                              discarded: discarded, missedBeacons: missed))
        }
        return lines
    }

    // MARK: files

    /// The names in a directory (following a symlink to it), sorted; empty when it cannot be opened.
    static func list(_ path: String) -> [String] { FSRoot.listDirectory(path) ?? [] }

    /// One sysfs attribute, trimmed; absent when the file does not exist.
    private func attribute(_ relative: String) -> Attribute { sysfs.attribute(relative) }

    static func trim(_ text: String) -> String { FSRoot.trimmed(text) }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(WifiMonitor.self, a, r) }
