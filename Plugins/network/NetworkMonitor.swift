import Glibc
import LinuxProbes
import Synchronization
import VigilKit

/// Network interfaces, their addresses, the default route, and the
/// reachability of TCP targets (XestiMonitors' NetworkReachabilityMonitor on
/// Linux).
///
/// Sources:
/// - `<sysfs>/class/net/<iface>/`: `operstate`, `carrier`, `address`, `type`,
///   and `wireless/` or `phy80211/` (Wi-Fi), `device/` with a `wwan` name or
///   a raw-IP type (519) (WWAN). Loopback (`type` 772 or `lo`) is skipped
///   unless `include_loopback`.
/// - `<procfs>/net/route`: the IPv4 default route (destination and mask
///   00000000, flag RTF_UP; the lowest metric wins).
/// - Addresses come from `getifaddrs`, which only knows the real system: they
///   are reported only when `procfs` is the real `/proc` (a fixture tree has
///   no file with the IPv4 addresses), and never for fixture trees.
///
/// Polled every interval. When `sysfs` is the real `/sys`, a worker also
/// listens on an rtnetlink socket (groups link, IPv4/IPv6 addresses, IPv4
/// routes) and, on any message, re-reads links, routes and addresses at once,
/// so changes are pushed without waiting for the next poll. The messages
/// themselves are not parsed: re-reading is simpler and robust to lost
/// messages. Reachability targets are probed in the poll only.
final class NetworkMonitor: PolledMonitor, @unchecked Sendable {  // mutable state is behind `state`
    static let spec = PluginSpec(
        name: "network", version: "1.0.0",
        summary: "Network links (operstate, carrier, kind, MAC), addresses, the default route, and TCP reachability of targets, from sysfs, procfs and rtnetlink",
        defaultInterval: .seconds(10),
        events: [
            EventDecl("link", doc: """
                One network interface of class/net (matching `interfaces`; loopback only with include_loopback): a \
                snapshot on start, then on any change. An interface that went away is reported once with operstate \
                "gone" and nothing else.
                """, fields: [
                FieldDecl("interface", .string, doc: "the interface name (enp0s31f6, wlp2s0, wwan0)"),
                FieldDecl("operstate", .string,
                          doc: "the kernel's operstate: up, down, dormant, lowerlayerdown, notpresent, testing, unknown; gone when the interface went away"),
                FieldDecl("carrier", .bool, doc: "the physical link is up (class/net/<interface>/carrier is 1; false while it cannot be read, as when the interface is down)"),
                FieldDecl("kind", .string, doc: "ethernet, wifi, wwan, loopback or other, from wireless/, device/, the name and type"),
                FieldDecl("mac", .string, doc: "the hardware address, from class/net/<interface>/address"),
            ], key: ["interface"]),
            EventDecl("addresses", doc: """
                The IP addresses of one interface (matching `interfaces`): a snapshot on start, then on change. \
                From getifaddrs, so only when procfs is the real /proc: never with fixture trees.
                """, fields: [
                FieldDecl("interface", .string, doc: "the interface name"),
                FieldDecl("addresses", .string, doc: "its IPv4 and IPv6 addresses, sorted and comma-joined; empty when it has none"),
            ], key: ["interface"]),
            EventDecl("route", doc: """
                The IPv4 default route, from net/route: a snapshot on start, then when it changes (present turns \
                false when there is none).
                """, fields: [
                FieldDecl("present", .bool, doc: "there is a default route"),
                FieldDecl("gateway", .string, doc: "the gateway's address (0.0.0.0 for a point-to-point default route); empty without one"),
                FieldDecl("interface", .string, doc: "the interface the default route goes through; empty without one"),
                FieldDecl("kind", .string, doc: "that interface's kind (ethernet, wifi, wwan, other); empty without one"),
            ]),
            EventDecl("reachability", doc: """
                One target of the `reachability` option, probed each interval with a TCP connect (non-blocking, \
                at most probe_timeout): a snapshot on start, then when reachable or via changes, or latency by at \
                least 50 ms.
                """, fields: [
                FieldDecl("target", .string, doc: "the target as given (host:port)"),
                FieldDecl("reachable", .bool, doc: "a TCP connection to the target was accepted within probe_timeout"),
                FieldDecl("via", .string,
                          doc: "the kind of interface the connection used (from the local address, or the routing table when it failed): ethernet, wifi, wwan, loopback or other"),
                FieldDecl("latency_ms", .double, unit: "ms", minChange: 50,
                          doc: "the time the connection took; absent when unreachable"),
            ], key: ["target"]),
        ])

    struct Options: DeclaredOptions {
        var sysfs = "/sys"
        var procfs = "/proc"
        var interfaces: [String] = ["*"]
        var includeLoopback = false
        var reachability: [String] = []
        var probeTimeout: Duration = .seconds(2)
        static let schema = OptionSchema<Options>(
            .option("sysfs", \.sysfs, doc: "Root of the sys filesystem (a fixture tree in tests; rtnetlink is used only with the real /sys)."),
            .option("procfs", \.procfs, doc: "Root of the proc filesystem (a fixture tree in tests; addresses are reported only with the real /proc)."),
            .option("interfaces", \.interfaces, doc: "Globs of the interface names to report (fnmatch: `en*`, `wl*`)."),
            .option("include_loopback", \.includeLoopback, doc: "Also report loopback interfaces (lo)."),
            .option("reachability", \.reachability, doc: "TCP targets to probe each interval, as host:port (`example.org:443`, `[::1]:22`)."),
            .option("probe_timeout", \.probeTimeout, doc: "How long a reachability probe waits for the connection."))
    }

    struct Target: Sendable {
        var text: String
        var host: String
        var port: UInt16
    }

    static let netDir = "class/net"

    private let context: MonitorContext
    private let sysfs: FSRoot
    private let procfs: FSRoot
    private let patterns: [String]
    private let includeLoopback: Bool
    private let targets: [Target]
    private let probeTimeout: Duration
    private let realSystem: Bool
    private let realProc: Bool
    private let state = Mutex(State())
    private var netlink: Int32 = -1

    struct State {
        /// Interfaces reported since start: those that disappear are reported gone once.
        var known: [String] = []
    }

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.sysfs.isEmpty else { throw .invalidOption("sysfs", "must not be empty") }
        guard !options.procfs.isEmpty else { throw .invalidOption("procfs", "must not be empty") }
        for (i, pattern) in options.interfaces.enumerated() where pattern.isEmpty {
            throw .invalidOption("interfaces[\(i)]", "must not be empty")
        }
        var targets: [Target] = []
        for (i, text) in options.reachability.enumerated() {
            guard let target = Self.parseTarget(text) else {
                throw .invalidOption("reachability[\(i)]", "\"\(text)\" is not host:port with a port from 1 to 65535")
            }
            targets.append(target)
        }
        guard options.probeTimeout > .zero else { throw .invalidOption("probe_timeout", "must be positive") }
        self.context = context
        self.sysfs = FSRoot(options.sysfs)
        self.procfs = FSRoot(options.procfs)
        self.patterns = options.interfaces
        self.includeLoopback = options.includeLoopback
        self.targets = targets
        self.probeTimeout = options.probeTimeout
        self.realSystem = sysfs.root == "/sys"
        self.realProc = procfs.root == "/proc"
    }

    /// `host:port`, `[v6]:port`; the port numeric, 1…65535.
    static func parseTarget(_ text: String) -> Target? {
        var host: Substring
        var port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            port = rest.dropFirst()
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
            if host.contains(":") { return nil }  // a bare IPv6 address needs brackets
        }
        guard !host.isEmpty, let n = UInt16(port), n > 0 else { return nil }
        return Target(text: text, host: String(host), port: n)
    }

    func start() throws(MonitorError) {
        state.withLock { $0 = State() }
        guard let dir = opendir(sysfs.path(Self.netDir)) else {
            throw .unavailable("no network class in \(sysfs.path(Self.netDir)): \(String(cString: strerror(errno)))")
        }
        closedir(dir)
        guard realSystem else { return }
        if netlink >= 0 { close(netlink); netlink = -1 }  // a restart: the old worker was joined
        let fd = Self.openNetlink()
        guard fd >= 0 else {
            context.log(.warning, "rtnetlink unavailable (\(String(cString: strerror(errno)))): changes are seen at each poll only")
            return
        }
        netlink = fd
        context.spawn("rtnetlink") { [self] token in
            var buffer = [UInt8](repeating: 0, count: 32 << 10)
            while !token.isCancelled {
                switch token.waitFor(fd: fd, events: Int16(POLLIN), timeout: nil) {
                case .cancelled: return
                case .timedOut: continue
                case .ready(let revents):
                    if revents & Int16(POLLNVAL) != 0 { return }
                    // Drain everything queued (ENOBUFS after an overflow is fine: we re-read anyway).
                    while recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT)) > 0 || errno == ENOBUFS || errno == EINTR {}
                    refresh()
                }
            }
        }
    }

    func stop() {
        // The SDK joins the netlink worker after this returns; the socket is closed on the next start or in deinit.
    }

    deinit { if netlink >= 0 { close(netlink) } }

    func poll() throws(MonitorError) {
        guard refresh() else {
            throw .unavailable("no network class in \(sysfs.path(Self.netDir))")
        }
        for target in targets { probe(target) }
    }

    // MARK: links, addresses, route

    /// Re-reads links, addresses and the default route and emits what changed.
    /// False when class/net cannot be listed.
    @discardableResult
    private func refresh() -> Bool {
        state.withLock { state -> Bool in
            guard let all = Self.list(sysfs.path(Self.netDir)) else { return false }
            var listed: [String] = []
            for name in all where !name.hasPrefix(".") && matches(name) {
                let dir = Self.netDir + "/" + name
                let kind = kind(of: name)
                if kind == "loopback" && !includeLoopback { continue }
                guard case .text(let operstate) = attribute(dir + "/operstate") else {
                    // Gone between the listing and the read, or unreadable: skipped this time.
                    if sysfs.exists(dir) { listed.append(name) }
                    continue
                }
                var mac = ""
                switch attribute(dir + "/address") {
                case .text(let text): mac = text
                case .absent: break
                case .failed(let error):
                    context.log(.debug, "skipping \(name) this time: \(error)")
                    listed.append(name)
                    continue
                }
                // carrier reads EINVAL while the interface is down: no carrier.
                var carrier = false
                if case .text(let text) = attribute(dir + "/carrier") { carrier = text == "1" }
                listed.append(name)
                if !state.known.contains(name) { state.known.append(name) }
                context.emit("link", fields: [("interface", .string(name)), ("operstate", .string(operstate)),
                                              ("carrier", .bool(carrier)), ("kind", .string(kind)), ("mac", .string(mac))])
            }
            for gone in state.known where !listed.contains(gone) {
                context.emit("link", fields: [("interface", .string(gone)), ("operstate", .string("gone"))])
                context.forget("link", key: [.string(gone)])
                context.forget("addresses", key: [.string(gone)])
            }
            state.known.removeAll { !listed.contains($0) }

            if realProc {
                let addresses = Self.addresses()
                for name in state.known {
                    context.emit("addresses", fields: [("interface", .string(name)),
                                                       ("addresses", .string((addresses[name] ?? []).sorted().joined(separator: ",")))])
                }
            }

            if let route = defaultRoute() {
                context.emit("route", fields: [("present", .bool(true)), ("gateway", .string(route.gateway)),
                                               ("interface", .string(route.interface)), ("kind", .string(kind(of: route.interface)))])
            } else {
                context.emit("route", fields: [("present", .bool(false)), ("gateway", .string("")),
                                               ("interface", .string("")), ("kind", .string(""))])
            }
            return true
        }
    }

    private func matches(_ name: String) -> Bool {
        patterns.contains { fnmatch($0, name, 0) == 0 }
    }

    /// ethernet, wifi, wwan, loopback or other.
    func kind(of name: String) -> String {
        let dir = Self.netDir + "/" + name
        var type: Int?
        if case .text(let text) = attribute(dir + "/type") { type = Int(text) }
        if type == 772 || (type == nil && name == "lo") { return "loopback" }
        if sysfs.exists(dir + "/wireless") || sysfs.exists(dir + "/phy80211") { return "wifi" }
        if name.hasPrefix("wwan") || name.hasPrefix("ww") && sysfs.exists(dir + "/device") { return "wwan" }
        if sysfs.exists(dir + "/device"), type == 519 || type == 65534 { return "wwan" }  // raw IP / no header: a modem
        if type == nil || type == 1 { return "ethernet" }
        return "other"
    }

    struct Route: Equatable {
        var interface: String
        var gateway: String
        var destination: UInt32
        var mask: UInt32
        var metric: Int
    }

    /// The routes of net/route that are up; nil when it cannot be read.
    func routes() -> [Route]? {
        guard let text = try? procfs.readText("net/route") else { return nil }
        return Self.parseRoutes(text)
    }

    static func parseRoutes(_ text: String) -> [Route] {
        var routes: [Route] = []
        for line in text.split(separator: "\n").dropFirst() {
            let f = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            guard f.count >= 8, let dest = UInt32(f[1], radix: 16), let gw = UInt32(f[2], radix: 16),
                  let flags = UInt32(f[3], radix: 16), let metric = Int(f[6]), let mask = UInt32(f[7], radix: 16),
                  flags & 1 != 0 else { continue }
            routes.append(Route(interface: String(f[0]), gateway: dotted(gw), destination: dest, mask: mask, metric: metric))
        }
        return routes
    }

    /// net/route's addresses are in network order read as a little-endian number.
    static func dotted(_ v: UInt32) -> String {
        "\(v & 0xff).\((v >> 8) & 0xff).\((v >> 16) & 0xff).\(v >> 24)"
    }

    private func defaultRoute() -> Route? {
        (routes() ?? []).filter { $0.destination == 0 && $0.mask == 0 }.min { $0.metric < $1.metric }
    }

    /// Interface → its addresses (numeric), from getifaddrs.
    static func addresses() -> [String: [String]] {
        var result: [String: [String]] = [:]
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0 else { return result }
        defer { freeifaddrs(list) }
        var p = list
        while let entry = p {
            defer { p = entry.pointee.ifa_next }
            guard let addr = entry.pointee.ifa_addr, let text = numeric(addr) else { continue }
            result[String(cString: entry.pointee.ifa_name), default: []].append(text)
        }
        return result
    }

    static func numeric(_ addr: UnsafePointer<sockaddr>) -> String? {
        let family = Int32(addr.pointee.sa_family)
        guard family == AF_INET || family == AF_INET6 else { return nil }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        let length = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
        guard getnameinfo(addr, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else { return nil }
        return host.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
    }

    // MARK: reachability

    private func probe(_ target: Target) {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var info: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(target.host, String(target.port), &hints, &info)
        guard status == 0, let first = info else {
            context.log(.debug, "\(target.text): cannot resolve: \(String(cString: gai_strerror(status)))")
            context.emit("reachability", fields: [("target", .string(target.text)), ("reachable", .bool(false)),
                                                  ("via", .string("other"))])
            return
        }
        defer { freeaddrinfo(info) }
        var via = "other"
        var p: UnsafeMutablePointer<addrinfo>? = first
        while let entry = p {
            p = entry.pointee.ai_next
            guard let addr = entry.pointee.ai_addr else { continue }
            via = guessVia(addr)
            let started = Worker.monotonicNow()
            if let local = connect(addr, entry.pointee.ai_addrlen, family: entry.pointee.ai_family) {
                let latency = Double(Worker.monotonicNow() - started) / 1_000_000
                via = viaFromLocal(local) ?? via
                context.emit("reachability", fields: [("target", .string(target.text)), ("reachable", .bool(true)),
                                                      ("via", .string(via)), ("latency_ms", .double(latency))])
                return
            }
        }
        context.emit("reachability", fields: [("target", .string(target.text)), ("reachable", .bool(false)),
                                              ("via", .string(via))])
    }

    /// A non-blocking connect bounded by probe_timeout; the local address on success.
    private func connect(_ addr: UnsafePointer<sockaddr>, _ length: socklen_t, family: Int32) -> [UInt8]? {
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if Glibc.connect(fd, addr, length) != 0 {
            guard errno == EINPROGRESS else { return nil }
            var fds = [pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)]
            let deadline = Worker.monotonicNow() + probeTimeout.nanoseconds
            while true {
                let left = deadline - Worker.monotonicNow()
                if left <= 0 { return nil }
                let n = Glibc.poll(&fds, 1, Int32(clamping: (left + 999_999) / 1_000_000))
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return nil }
                break
            }
            var error: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0, error == 0 else { return nil }
        }
        var storage = sockaddr_storage()
        var size = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let ok = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) == 0 }
        }
        guard ok else { return [] }
        return withUnsafeBytes(of: &storage) { Array($0.prefix(Int(size))) }
    }

    /// The kind of the interface holding the local address of a connection.
    private func viaFromLocal(_ local: [UInt8]) -> String? {
        guard !local.isEmpty else { return nil }
        let text = local.withUnsafeBytes { raw -> String? in
            var storage = sockaddr_storage()
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: raw.prefix($0.count))) }
            return withUnsafePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Self.numeric($0) } }
        }
        guard let text else { return nil }
        if Self.isLoopback(text) { return "loopback" }
        for (name, addresses) in Self.addresses() where addresses.contains(text) { return kindOnSystem(name) }
        return nil
    }

    /// Before (or without) a connection: loopback for loopback targets, else the
    /// kind of the interface of the most specific IPv4 route to it.
    private func guessVia(_ addr: UnsafePointer<sockaddr>) -> String {
        guard let text = Self.numeric(addr) else { return "other" }
        if Self.isLoopback(text) { return "loopback" }
        guard addr.pointee.sa_family == sa_family_t(AF_INET) else { return "other" }
        let ip = addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr.s_addr }  // network order, as net/route
        let best = (routes() ?? []).filter { ip & $0.mask == $0.destination & $0.mask }
            .max { ($0.mask.nonzeroBitCount, -$0.metric) < ($1.mask.nonzeroBitCount, -$1.metric) }
        guard let best else { return "other" }
        return kindOnSystem(best.interface)
    }

    private func kindOnSystem(_ name: String) -> String {
        let k = kind(of: name)
        return k
    }

    static func isLoopback(_ text: String) -> Bool {
        text.hasPrefix("127.") || text == "::1" || text.hasPrefix("::ffff:127.")
    }

    // MARK: rtnetlink

    /// A NETLINK_ROUTE socket joined to the link, address and IPv4 route groups; -1 on failure.
    static func openNetlink() -> Int32 {
        let fd = socket(AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0 /* NETLINK_ROUTE */)
        guard fd >= 0 else { return -1 }
        // struct sockaddr_nl { sa_family_t nl_family; unsigned short nl_pad; __u32 nl_pid; __u32 nl_groups; }
        let groups: UInt32 = 0x1 /* RTMGRP_LINK */ | 0x10 /* RTMGRP_IPV4_IFADDR */ | 0x40 /* RTMGRP_IPV4_ROUTE */
            | 0x100 /* RTMGRP_IPV6_IFADDR */
        var address: (UInt16, UInt16, UInt32, UInt32) = (UInt16(AF_NETLINK), 0, 0, groups)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, 12) }
        }
        guard bound == 0 else {
            let saved = errno
            close(fd)
            errno = saved
            return -1
        }
        return fd
    }

    // MARK: files

    /// The names in a directory, sorted; nil when it cannot be opened.
    static func list(_ path: String) -> [String]? { FSRoot.listDirectory(path) }

    /// One sysfs attribute, trimmed; absent when the file does not exist.
    private func attribute(_ relative: String) -> Attribute { sysfs.attribute(relative) }

    static func trim(_ text: String) -> String { FSRoot.trimmed(text) }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(NetworkMonitor.self, a, r) }
