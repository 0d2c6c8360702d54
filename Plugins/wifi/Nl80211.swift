import Glibc

/// Generic netlink (linux/genetlink.h): after the nlmsghdr, a family
/// message starts with
///
///     struct genlmsghdr { __u8 cmd; __u8 version; __u16 reserved; };
///
/// then attributes. Families other than the controller have ids the kernel
/// assigns at registration, found by name with CTRL_CMD_GETFAMILY.
enum GenericNetlink {
    static let headerSize = 4
    /// GENL_ID_CTRL: the controller, the one family with a fixed id.
    static let controller: UInt16 = 0x10
    static let getFamily: UInt8 = 3  // CTRL_CMD_GETFAMILY (answered with CTRL_CMD_NEWFAMILY, 1)
    static let familyIDAttribute: UInt16 = 1  // CTRL_ATTR_FAMILY_ID, u16
    static let familyNameAttribute: UInt16 = 2  // CTRL_ATTR_FAMILY_NAME, NUL-terminated string

    /// A request to a family: nlmsghdr, genlmsghdr, attributes.
    static func request(family: UInt16, command: UInt8, version: UInt8 = 1, flags: UInt16 = 0, seq: UInt32,
                        attributes: [UInt8] = []) -> [UInt8] {
        Netlink.message(type: family, flags: Netlink.request | flags, seq: seq,
                        payload: [command, version, 0, 0] + attributes)
    }

    /// The command and attributes of one family message.
    static func parse(_ message: Netlink.Message) throws(Netlink.Failure) -> (command: UInt8, attributes: [Netlink.Attribute]) {
        guard message.payload.count >= headerSize else {
            throw .truncated(what: "a generic netlink header", at: Netlink.messageHeaderSize, needed: headerSize,
                             left: message.payload.count)
        }
        return (message.payload[0], try Netlink.attributes(Array(message.payload[headerSize...])))
    }

    static func familyRequest(_ name: String, seq: UInt32) -> [UInt8] {
        request(family: controller, command: getFamily, seq: seq,
                attributes: Netlink.attribute(familyNameAttribute, string: name))
    }

    /// The family id in the controller's answer to CTRL_CMD_GETFAMILY.
    static func familyID(_ reply: Netlink.Reply, name: String) throws(Netlink.Failure) -> UInt16 {
        for message in reply.messages where message.type == controller {
            let (_, attributes) = try parse(message)
            let named = attributes.first { $0.type == familyNameAttribute }?.text
            if named == nil || named == name, let id = attributes.first(where: { $0.type == familyIDAttribute })?.u16 {
                return id
            }
        }
        throw .malformed("CTRL_CMD_GETFAMILY \(name): no CTRL_ATTR_FAMILY_ID in the reply")
    }
}

/// The part of nl80211 (linux/nl80211.h) the wifi monitor reads: the
/// interfaces (NL80211_CMD_GET_INTERFACE dump: index, name, type, SSID,
/// frequency) and, per station interface, the BSS it is associated with
/// (NL80211_CMD_GET_SCAN dump of the cached scan results, the entry whose
/// NL80211_BSS_STATUS is associated: BSSID, frequency, signal). Neither
/// dump triggers a scan or needs privileges.
enum Nl80211 {
    static let familyName = "nl80211"

    // enum nl80211_commands
    static let getInterface: UInt8 = 5  // answered with NL80211_CMD_NEW_INTERFACE, 7
    static let getScan: UInt8 = 32  // answered with NL80211_CMD_NEW_SCAN_RESULTS, 34

    // enum nl80211_attrs
    static let ifindexAttribute: UInt16 = 3  // u32
    static let ifnameAttribute: UInt16 = 4  // string
    static let iftypeAttribute: UInt16 = 5  // u32, enum nl80211_iftype
    static let wiphyFrequencyAttribute: UInt16 = 38  // u32, MHz
    static let bssAttribute: UInt16 = 47  // nested, enum nl80211_bss
    static let ssidAttribute: UInt16 = 52  // binary, up to 32 bytes

    // enum nl80211_bss
    static let bssBSSID: UInt16 = 1  // 6 bytes
    static let bssFrequency: UInt16 = 2  // u32, MHz
    static let bssInformationElements: UInt16 = 6  // binary
    static let bssSignalMBm: UInt16 = 7  // s32, mBm (dBm × 100)
    static let bssStatus: UInt16 = 9  // u32, enum nl80211_bss_status
    static let bssBeaconIEs: UInt16 = 11  // binary

    // enum nl80211_iftype
    static let station: UInt32 = 2
    static let p2pClient: UInt32 = 8

    // enum nl80211_bss_status
    static let associated: UInt32 = 1
    static let ibssJoined: UInt32 = 2

    struct Interface: Equatable {
        var ifindex: UInt32
        var name: String
        var type: UInt32?
        var ssid: [UInt8]?
        var frequency: UInt32?

        /// A client of an access point: the kind of interface whose BSS is looked up.
        var isStation: Bool { type == Nl80211.station || type == Nl80211.p2pClient }
    }

    struct BSS: Equatable {
        var bssid: [UInt8]
        var frequency: UInt32?
        var signalMBm: Int32?
        var status: UInt32?
        /// The SSID element (id 0) of the BSS's information elements.
        var ssid: [UInt8]?
    }

    /// What the wifi monitor reports of one interface.
    struct Link: Equatable {
        var ssid: [UInt8]?
        var bssid: [UInt8]?
        var frequency: Int64?
    }

    static func interfaceDumpRequest(family: UInt16, seq: UInt32) -> [UInt8] {
        GenericNetlink.request(family: family, command: getInterface, flags: Netlink.dump, seq: seq)
    }

    static func scanDumpRequest(family: UInt16, ifindex: UInt32, seq: UInt32) -> [UInt8] {
        GenericNetlink.request(family: family, command: getScan, flags: Netlink.dump, seq: seq,
                               attributes: Netlink.attribute(ifindexAttribute, u32: ifindex))
    }

    /// The interfaces of a GET_INTERFACE dump; entries without an index or a name are skipped.
    static func interfaces(_ reply: Netlink.Reply, family: UInt16) throws(Netlink.Failure) -> [Interface] {
        var result: [Interface] = []
        for message in reply.messages where message.type == family {
            let (_, attributes) = try GenericNetlink.parse(message)
            var ifindex: UInt32?
            var name: String?
            var interface = Interface(ifindex: 0, name: "")
            for a in attributes {
                switch a.type {
                case ifindexAttribute: ifindex = a.u32
                case ifnameAttribute: name = a.text
                case iftypeAttribute: interface.type = a.u32
                case ssidAttribute: interface.ssid = a.value.isEmpty ? nil : a.value
                case wiphyFrequencyAttribute: interface.frequency = a.u32
                default: break
                }
            }
            guard let ifindex, let name, !name.isEmpty else { continue }
            interface.ifindex = ifindex
            interface.name = name
            result.append(interface)
        }
        return result
    }

    /// The BSSes of a GET_SCAN dump; entries without a 6-byte BSSID are skipped.
    static func bsses(_ reply: Netlink.Reply, family: UInt16) throws(Netlink.Failure) -> [BSS] {
        var result: [BSS] = []
        for message in reply.messages where message.type == family {
            let (_, attributes) = try GenericNetlink.parse(message)
            guard let nest = attributes.first(where: { $0.type == bssAttribute }) else { continue }
            var bss = BSS(bssid: [])
            var elements: [UInt8]?
            var beaconElements: [UInt8]?
            for a in try nest.children() {
                switch a.type {
                case bssBSSID: bss.bssid = a.value
                case bssFrequency: bss.frequency = a.u32
                case bssSignalMBm: bss.signalMBm = a.i32
                case bssStatus: bss.status = a.u32
                case bssInformationElements: elements = a.value
                case bssBeaconIEs: beaconElements = a.value
                default: break
                }
            }
            guard bss.bssid.count == 6 else { continue }
            bss.ssid = ssidElement(elements ?? []) ?? ssidElement(beaconElements ?? [])
            result.append(bss)
        }
        return result
    }

    /// The SSID element (id 0) of 802.11 information elements (id, length,
    /// data…); nil when absent, empty (a hidden network) or cut short.
    static func ssidElement(_ elements: [UInt8]) -> [UInt8]? {
        var i = 0
        while i + 2 <= elements.count {
            let id = elements[i], length = Int(elements[i + 1])
            guard i + 2 + length <= elements.count else { return nil }
            if id == 0 { return length == 0 ? nil : Array(elements[(i + 2)..<(i + 2 + length)]) }
            i += 2 + length
        }
        return nil
    }

    /// The BSS the interface is associated with (or the IBSS it joined).
    static func current(_ bsses: [BSS]) -> BSS? {
        bsses.first { $0.status == associated } ?? bsses.first { $0.status == ibssJoined }
    }

    /// What is reported of an interface: the SSID from the interface (or
    /// its BSS's elements), the BSSID of its BSS, the frequency of the
    /// interface's channel (or of its BSS).
    static func link(_ interface: Interface, _ bss: BSS?) -> Link {
        Link(ssid: interface.ssid ?? bss?.ssid, bssid: bss?.bssid,
             frequency: (interface.frequency ?? bss?.frequency).map { Int64($0) })
    }

    enum Outcome: Equatable {
        /// The kernel has no nl80211 family (no cfg80211 loaded).
        case missing
        /// The interfaces asked for that nl80211 knows, in its order.
        case links([(name: String, link: Link)])

        static func == (a: Outcome, b: Outcome) -> Bool {
            switch (a, b) {
            case (.missing, .missing): true
            case (.links(let x), .links(let y)): x.map(\.name) == y.map(\.name) && x.map(\.link) == y.map(\.link)
            default: false
            }
        }
    }

    /// One session: resolves the family, dumps the interfaces, and for each
    /// station interface in `names` dumps its scan results when a BSSID is
    /// wanted or the interface has no frequency. Sequence numbers are 1, 2,
    /// 3… in that order. A dump that changed while it was read
    /// (NLM_F_DUMP_INTR) fails the session: its contents may be mixed.
    static func read(_ transport: inout some NetlinkTransport, names: [String], identifiers: Bool) throws(Netlink.Failure) -> Outcome {
        var seq: UInt32 = 1
        let family: UInt16
        do {
            let reply = try transport.exchange(GenericNetlink.familyRequest(familyName, seq: seq), seq: seq,
                                               name: "CTRL_CMD_GETFAMILY \(familyName)")
            family = try GenericNetlink.familyID(reply, name: familyName)
        } catch {
            if case .kernel(let code, _) = error, code == ENOENT { return .missing }
            throw error
        }
        seq += 1
        let dump = try consistent(transport.exchange(interfaceDumpRequest(family: family, seq: seq), seq: seq,
                                                     name: "NL80211_CMD_GET_INTERFACE"))
        var links: [(name: String, link: Link)] = []
        for interface in try interfaces(dump, family: family) where names.contains(interface.name) {
            var bss: BSS?
            if interface.isStation && (identifiers || interface.frequency == nil) {
                seq += 1
                let scan = try transport.exchange(scanDumpRequest(family: family, ifindex: interface.ifindex, seq: seq),
                                                  seq: seq, name: "NL80211_CMD_GET_SCAN \(interface.name)")
                bss = current(try bsses(consistent(scan), family: family))
            }
            links.append((interface.name, link(interface, bss)))
        }
        return .links(links)
    }

    static func consistent(_ reply: Netlink.Reply) throws(Netlink.Failure) -> Netlink.Reply {
        guard !reply.interrupted else { throw .malformed("\(reply.request): the dump changed while it was read (NLM_F_DUMP_INTR)") }
        return reply
    }

    // MARK: text

    /// An SSID as text: valid UTF-8 as it is, with control characters and
    /// the backslash escaped (`\x0a`, `\\`); other bytes as `\xNN`, so that
    /// any SSID (32 arbitrary bytes) reads safely and unambiguously.
    static func ssidText(_ bytes: [UInt8]) -> String {
        var out = ""
        func escape(_ b: UInt8) {
            let hex = Array("0123456789abcdef")
            out += "\\x"
            out.append(hex[Int(b >> 4)])
            out.append(hex[Int(b & 0xf)])
        }
        if let text = String(validating: bytes, as: UTF8.self) {
            for scalar in text.unicodeScalars {
                if scalar == "\\" { out += "\\\\" }
                else if scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value) { for b in String(scalar).utf8 { escape(b) } }
                else { out.unicodeScalars.append(scalar) }
            }
        } else {
            for b in bytes {
                if b == UInt8(ascii: "\\") { out += "\\\\" }
                else if b >= 0x20 && b < 0x7f { out.unicodeScalars.append(Unicode.Scalar(b)) }
                else { escape(b) }
            }
        }
        return out
    }

    /// A MAC address as aa:bb:cc:dd:ee:ff; nil unless 6 bytes.
    static func macText(_ bytes: [UInt8]) -> String? {
        guard bytes.count == 6 else { return nil }
        let hex = Array("0123456789abcdef")
        return bytes.map { String([hex[Int($0 >> 4)], hex[Int($0 & 0xf)]]) }.joined(separator: ":")
    }
}
