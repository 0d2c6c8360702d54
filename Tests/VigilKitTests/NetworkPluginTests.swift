import Glibc
import Testing
import VigilCore
import VigilKitTesting

/// The `network` plugin, built as libnetwork.so, against the laptop machine
/// (Tests/Fixtures/machines/laptop: sys/class/net and proc/net/route), which has lo, enp0s31f6 (ethernet, up, default route via
/// 10.0.0.1, metric 100), wlp2s0 (wifi, up, default route via 192.168.2.1,
/// metric 600) and wwan0 (type 519 with device/: wwan, down, no carrier).
/// Addresses come from getifaddrs, so they are never reported with fixture
/// trees. Reachability is probed only on 127.0.0.1, on sockets the test opens.
@Suite(.serialized) struct NetworkPluginTests {

    func host() throws -> PluginTestHost { try PluginTestHost(path: productsDir + "/libnetwork.so") }

    func options(_ proc: String = machines + "/laptop/proc", _ sys: String = machines + "/laptop/sys",
                 extra: String = "") -> String {
        "{ procfs: \(proc), sysfs: \(sys)\(extra) }"
    }

    func link(_ instance: TestInstance, _ name: String) -> [TestEvent] {
        instance.events(kind: "link").filter { $0.string("interface") == name }
    }

    @Test func describesItself() throws {
        let d = try host().description
        #expect(d.name == "network" && d.polled)
        #expect(d.options.map { "\($0.name):\($0.type):\($0.defaultText ?? "-")" }
                == ["sysfs:string:/sys", "procfs:string:/proc", "interfaces:json:[\"*\"]", "include_loopback:bool:false",
                    "reachability:json:[]", "probe_timeout:duration:2s"])
        #expect(d.events.map(\.kind) == ["link", "addresses", "route", "reachability"])
        #expect(d.events[0].fields.map(\.name) == ["interface", "operstate", "carrier", "kind", "mac"])
        #expect(d.events[3].fields.map(\.name) == ["target", "reachable", "via", "latency_ms"])
        #expect(d.events.allSatisfy { !$0.doc.isEmpty && $0.fields.allSatisfy { !$0.doc.isEmpty } })
    }

    @Test func snapshot() throws {
        let instance = try host().instance(options: options(), interval: .seconds(10))
        try instance.start()
        #expect(instance.events(kind: "link").map { $0.string("interface") } == ["enp0s31f6", "wlp2s0", "wwan0"])
        let eth = try #require(link(instance, "enp0s31f6").first)
        #expect(eth.string("operstate") == "up" && eth.bool("carrier") == true)
        #expect(eth.string("kind") == "ethernet" && eth.string("mac") == "54:e1:ad:12:34:56")
        #expect(link(instance, "wlp2s0").first?.string("kind") == "wifi")
        let wwan = try #require(link(instance, "wwan0").first)
        #expect(wwan.string("kind") == "wwan" && wwan.string("operstate") == "down" && wwan.bool("carrier") == false)
        #expect(wwan.string("mac") == "")
        #expect(instance.events(kind: "addresses").isEmpty)  // fixture trees: no getifaddrs
        let route = try #require(instance.events(kind: "route").first)
        #expect(route.bool("present") == true && route.string("gateway") == "10.0.0.1")
        #expect(route.string("interface") == "enp0s31f6" && route.string("kind") == "ethernet")
        let count = instance.events.count
        try instance.advance(by: .seconds(30))
        #expect(instance.events.count == count)  // nothing changed
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func interfaceFiltering() throws {
        let filtered = try host().instance(options: options(extra: ", interfaces: ['wl*', 'ww*']"))
        try filtered.start()
        #expect(filtered.events(kind: "link").map { $0.string("interface") } == ["wlp2s0", "wwan0"])
        try filtered.stop()

        let loopback = try host().instance(options: options(extra: ", include_loopback: true"))
        try loopback.start()
        #expect(loopback.events(kind: "link").map { $0.string("interface") } == ["enp0s31f6", "lo", "wlp2s0", "wwan0"])
        #expect(link(loopback, "lo").first?.string("kind") == "loopback")
        try loopback.stop()
        #expect(filtered.violations.isEmpty && loopback.violations.isEmpty)
    }

    @Test func linkDownUpAndCarrier() throws {
        let tree = try NetworkTempTree()
        let eth = tree.sys + "/class/net/enp0s31f6"
        let instance = try host().instance(options: options(tree.proc, tree.sys), interval: .seconds(10))
        try instance.start()
        #expect(link(instance, "enp0s31f6").count == 1)

        // The cable pulled: carrier 0, operstate down.
        try tree.write(eth + "/carrier", "0")
        try tree.write(eth + "/operstate", "down")
        try instance.advance(by: .seconds(10))
        #expect(link(instance, "enp0s31f6").map { $0.string("operstate") } == ["up", "down"])
        #expect(link(instance, "enp0s31f6").last?.bool("carrier") == false)

        // Carrier back first (operstate still down), then up.
        try tree.write(eth + "/carrier", "1")
        try instance.advance(by: .seconds(10))
        #expect(link(instance, "enp0s31f6").map { $0.bool("carrier") } == [true, false, true])
        try tree.write(eth + "/operstate", "up")
        try instance.advance(by: .seconds(10))
        #expect(link(instance, "enp0s31f6").map { $0.string("operstate") } == ["up", "down", "down", "up"])

        // Carrier unreadable (EINVAL on a down interface; a directory here): no carrier.
        try tree.remove(eth + "/carrier")
        #expect(mkdir(eth + "/carrier", 0o755) == 0)
        try instance.advance(by: .seconds(10))
        #expect(link(instance, "enp0s31f6").last?.bool("carrier") == false)

        // The other links did not change.
        #expect(link(instance, "wlp2s0").count == 1 && link(instance, "wwan0").count == 1)

        // The modem unplugged: reported once as gone, then nothing.
        try tree.remove(tree.sys + "/class/net/wwan0")
        try instance.advance(by: .seconds(20))
        #expect(link(instance, "wwan0").map { $0.string("operstate") } == ["down", "gone"])
        #expect(link(instance, "wwan0").last?.string("kind") == nil)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func defaultRouteChanges() throws {
        let tree = try NetworkTempTree()
        let instance = try host().instance(options: options(tree.proc, tree.sys), interval: .seconds(10))
        try instance.start()
        #expect(instance.events(kind: "route").map { $0.string("gateway") } == ["10.0.0.1"])

        // The wired default route gone: the Wi-Fi one (metric 600) takes over.
        try tree.routes([
            "wlp2s0\t00000000\t0102A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0",
            "wlp2s0\t0002A8C0\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0",
        ])
        try instance.advance(by: .seconds(10))
        let wifi = try #require(instance.events(kind: "route").last)
        #expect(instance.events(kind: "route").count == 2)
        #expect(wifi.string("gateway") == "192.168.2.1" && wifi.string("interface") == "wlp2s0" && wifi.string("kind") == "wifi")

        // No default route at all.
        try tree.routes(["wlp2s0\t0002A8C0\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0"])
        try instance.advance(by: .seconds(10))
        let none = try #require(instance.events(kind: "route").last)
        #expect(instance.events(kind: "route").count == 3)
        #expect(none.bool("present") == false && none.string("gateway") == "")
        try instance.advance(by: .seconds(10))
        #expect(instance.events(kind: "route").count == 3)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func reachabilityOnLoopback() throws {
        // A listening socket on 127.0.0.1, and a port bound but not listening (refused).
        let listening = try LoopbackSocket(listen: true)
        let closed = try LoopbackSocket(listen: false)
        let open = "127.0.0.1:\(listening.port)", refused = "127.0.0.1:\(closed.port)"
        let instance = try host().instance(
            options: options(extra: ", reachability: ['\(open)', '\(refused)'], probe_timeout: 1s"), interval: .seconds(10))
        try instance.start()
        let events = instance.events(kind: "reachability")
        #expect(events.map { $0.string("target") } == [open, refused])
        let up = try #require(events.first)
        #expect(up.bool("reachable") == true && up.string("via") == "loopback")
        #expect((up.double("latency_ms") ?? -1) >= 0)
        let down = try #require(events.last)
        #expect(down.bool("reachable") == false && down.string("via") == "loopback" && down.double("latency_ms") == nil)
        try instance.stop()
        #expect(instance.violations.isEmpty)
    }

    @Test func unavailableWithoutNetworkClass() throws {
        let instance = try host().instance(options: options(machines + "/laptop/proc", machines + "/no-such-machine/sys"))
        do {
            try instance.start()
            Issue.record("start succeeded without class/net")
        } catch {
            #expect(error.status == "unavailable")
            #expect(error.description.contains("no network class in \(machines)/no-such-machine/sys/class/net"))
        }
        #expect(instance.events.isEmpty)
    }

    @Test func refusesBadOptions() throws {
        for (given, message) in [(options(extra: ", reachability: ['no-port']"), "options.reachability[0]: "),
                                 (options(extra: ", reachability: ['127.0.0.1:80', 'h:0']"), "options.reachability[1]: "),
                                 (options(extra: ", probe_timeout: 0s"), "options.probe_timeout: must be positive"),
                                 (options("''"), "options.procfs: must not be empty")] {
            do {
                _ = try host().instance(options: given)
                Issue.record("\(given) accepted")
            } catch let error as PluginTestError {
                #expect(error.status == "invalid configuration")
                #expect(error.description.contains(message))
            }
        }
    }
}

/// A TCP socket bound to 127.0.0.1 on a port the kernel picks; listening or not. Closed at the end.
private final class LoopbackSocket {
    let fd: Int32
    let port: UInt16

    struct Failure: Error {}

    init(listen: Bool) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure() }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        address.sin_port = 0
        var size = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p in
                bind(fd, p, size) == 0 && getsockname(fd, p, &size) == 0
            }
        }
        guard ok, !listen || Glibc.listen(fd, 8) == 0 else { close(fd); throw Failure() }
        self.fd = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(fd) }
}

/// Copies of the `laptop` fixtures in a fresh temporary directory, removed at the end.
private final class NetworkTempTree: TempTree {
    /// The laptop fixtures, procfs and sysfs side by side.
    override init() throws {
        try super.init()
        try Self.copy(machines + "/laptop/proc", to: proc)
        try Self.copy(machines + "/laptop/sys", to: sys)
    }

    /// Rewrites net/route with its header and these lines.
    func routes(_ lines: [String]) throws {
        let header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        try Self.write(proc + "/net/route", bytes: Array((header + lines.map { $0 + "\n" }.joined()).utf8))
    }
}
