// swift-tools-version:6.1
import PackageDescription

/// A built-in plugin: one dynamic library per directory under Plugins/,
/// written against VigilKit exactly as a third party would write one. The
/// library is lib<name>.so, or lib<product>.so where that would shadow a
/// system library the plugin links (the host also finds libvigil-<name>.so).
func plugin(_ name: String, target: String, product: String? = nil, dependencies extra: [Target.Dependency] = [],
            exclude: [String] = []) -> (Product, Target) {
    (.library(name: product ?? name, type: .dynamic, targets: [target]),
     .target(name: target, dependencies: ["CVigilPlugin", "VigilKit", "LinuxProbes"] + extra, path: "Plugins/\(name)", exclude: exclude,
             linkerSettings: [.unsafeFlags(["-Xlinker", "--version-script=\(Context.packageDirectory)/Plugins/exports.map"])]))
}

/// A product of a package only the host uses: taken under the trait Host
/// (see `traits` below), so that a plugin's package that depends on the SDK
/// with `traits: []` neither fetches nor builds it.
let hostOnly: TargetDependencyCondition? = .when(traits: ["Host"])

/// libffi, for the ffi plugin's calls: taken under the trait FFI (see
/// `traits` below), so that a machine without libffi's headers still builds.
let withLibffi: TargetDependencyCondition? = .when(traits: ["FFI"])

let plugins = [
    plugin("cpu", target: "CPUPlugin"),
    plugin("memory", target: "MemoryPlugin"),
    plugin("load", target: "LoadPlugin"),
    plugin("files", target: "FilesPlugin"),
    plugin("power", target: "PowerPlugin"),
    plugin("thermal", target: "ThermalPlugin"),
    plugin("storage", target: "StoragePlugin"),
    plugin("display", target: "DisplayPlugin"),
    plugin("wifi", target: "WifiPlugin"),
    plugin("process", target: "ProcessPlugin"),
    plugin("sensors", target: "SensorsPlugin"),
    plugin("devices", target: "DevicesPlugin"),
    plugin("network", target: "NetworkPlugin"),
    plugin("clock", target: "ClockPlugin"),
    plugin("radio", target: "RadioPlugin"),
    plugin("system", target: "SystemPlugin"),
    plugin("netstat", target: "NetstatPlugin"),
    plugin("sockstat", target: "SockstatPlugin"),
    plugin("kernel", target: "KernelPlugin"),
    plugin("time", target: "TimePlugin", dependencies: ["CVigilTimex"], exclude: ["CVigilTimex"]),
    plugin("cgroups", target: "CgroupsPlugin"),
    plugin("hwmon", target: "HwmonPlugin"),
    plugin("netdev", target: "NetdevPlugin"),
    plugin("arp", target: "ARPPlugin"),
    plugin("softnet", target: "SoftnetPlugin"),
    plugin("udp_queues", target: "UDPQueuesPlugin"),
    plugin("conntrack", target: "ConntrackPlugin"),
    plugin("diskstats", target: "DiskstatsPlugin"),
    plugin("vmstat", target: "VMStatPlugin"),
    plugin("pressure", target: "PressurePlugin"),
    // Other ecosystems' checks and plugins, run as children (VigilChildProcess).
    plugin("nagios", target: "NagiosPlugin", dependencies: ["VigilChildProcess", "VigilForeign"]),
    plugin("munin", target: "MuninPlugin", dependencies: ["VigilChildProcess", "VigilForeign"]),
    plugin("textfile", target: "TextfilePlugin", dependencies: ["VigilForeign"]),
    plugin("statsd", target: "StatsdPlugin", dependencies: ["VigilForeign"]),
    // HTTP through the host's one client, on an event loop of the instance's own.
    plugin("scrape", target: "ScrapePlugin", dependencies: [
        "VigilForeign", .target(name: "VigilHTTPClient", condition: hostOnly),
        .product(name: "NIOCore", package: "swift-nio", condition: hostOnly),
        .product(name: "NIOPosix", package: "swift-nio", condition: hostOnly),
    ]),
    // libffi.so would shadow the system's libffi in the products directory.
    plugin("ffi", target: "FFIPlugin", product: "vigil-ffi", dependencies: [.target(name: "CFFI", condition: withLibffi)], exclude: ["README.md"]),
]

let package = Package(
    name: "Vigil",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "vigil", targets: ["vigil"]),
        .library(name: "VigilKit", targets: ["VigilKit"]),
        .library(name: "VigilKitTesting", targets: ["VigilKitTesting"]),
        .library(name: "LinuxProbes", targets: ["LinuxProbes"]),
    ] + plugins.map(\.0),
    // The SDK costs its users nothing: every product of a package only the
    // host uses is taken under the trait Host, on by default, so a plain
    // `swift build`, `make` or `swift test` here builds everything. A
    // plugin's package depends on Vigil with `traits: []`: SwiftPM then
    // neither fetches those seven packages nor builds them (a dependency
    // every use of which is behind a disabled trait is pruned; SE-0450).
    // One trait per condition: SwiftPM 6.2 reads several as all-of.
    //
    // libffi is the one library the build needs beyond what the Swift
    // toolchain itself needs on Linux (zlib's headers are on swift.org's list
    // of its prerequisites; libffi's are not). It is taken under the trait
    // FFI, also on by default. Without it the ffi plugin is still built, as a
    // stub whose create refuses every instance, saying why
    // (Plugins/ffi/WithoutLibffi.swift); scripts/build, the README's build
    // command, turns FFI off where libffi's headers are missing and says so
    // in one line. A stub rather than no product: a product cannot depend on
    // a trait, and `swift build` cannot be told to leave one out; and with
    // the stub every build has the same plugins, and a manifest naming ffi
    // gets the reason instead of "no plugin named ffi". Make, the packages
    // and the tests build with the default traits, so they need libffi-dev
    // and never ship the stub.
    traits: [
        .trait(name: "Host", description: "The vigil host: swift-nio, swift-protobuf, compress-nio, swift-log, swift-service-lifecycle, swift-system, swift-argument-parser."),
        .trait(name: "FFI", description: "The ffi plugin's calls through libffi (libffi's headers: Debian's libffi-dev). Off, the plugin refuses to start."),
        .default(enabledTraits: ["Host", "FFI"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // The control API's HTTP/1.1, server and client (`vigil ctl`), and the
        // prometheus sink's server and the otlp sink's client.
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.3"),
        // OTLP's protobuf messages (generated code in Sources/VigilOTLP).
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        // gzip of OTLP request bodies (zlib).
        .package(url: "https://github.com/adam-fowler/compress-nio", from: "1.5.0"),
    ],
    targets: [
        // The plugin contract: one C header, nothing else.
        .target(name: "CVigilPlugin"),
        // The one JSON reader, strict, for the SDK's options of type json and
        // the host's JSON Lines. It depends on nothing: every Swift plugin carries it.
        .target(name: "VigilJSON"),
        // Pure Swift, no I/O: events, manifest model and validation, routing, encoding.
        .target(name: "VigilCore", dependencies: ["VigilJSON", .product(name: "Yams", package: "Yams")]),
        // The history's storage: compressed columns (Gorilla's delta-of-delta
        // and XOR) in blocks per stream. Pure Swift, no I/O, no dependency.
        .target(name: "VigilHistory"),
        // The ABI boundary, once: the host table, the event decoder, the
        // loader and negotiation, call helpers, the epochs. The runtime, the
        // checker, the test kit and the probe all go through it.
        .target(name: "VigilABI", dependencies: ["CVigilPlugin", "VigilChildProcess", "VigilCore"]),
        // Signal handling of `vigil run` from before main (an ELF constructor).
        .target(name: "CVigilEarly"),
        // Linux calls Swift's Glibc does not declare (memfd, eventfd, pipe2,
        // accept4, pidfd, PR_SET_PDEATHSIG) and atomics on shared memory.
        .target(name: "CVigilSys"),
        // OTLP's messages, generated once from the official protos (scripts/gen-otlp).
        .target(name: "VigilOTLP", dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf", condition: hostOnly)],
                exclude: ["README.md"]),
        // Prometheus' remote write messages, generated once from prompb (scripts/gen-prompb).
        .target(name: "VigilPrompb", dependencies: [.product(name: "SwiftProtobuf", package: "swift-protobuf", condition: hostOnly)],
                exclude: ["README.md"]),
        // The one child-process spawner (posix_spawn, a descriptor map, a
        // process group), and a child run to its end under a deadline with
        // its output captured: the host's children and the plugins that run
        // other programs (nagios, munin) start theirs through it.
        .target(name: "VigilChildProcess", dependencies: ["CVigilSys"]),
        // The formats of other ecosystems' plugins (Nagios check output,
        // munin, Prometheus text, statsd), read without I/O: the plugins
        // that run them and their tests share one reader of each.
        .target(name: "VigilForeign"),
        // Processes and plugins kept apart: runners (process, wire, ring, fork server, cgroups, limits), the
        // transports a plugin is called through, the probe, the one log gate
        // and restart budget.
        .target(name: "VigilIsolation", dependencies: [
            "CVigilPlugin", "CVigilSys", "VigilChildProcess", "VigilCore", "VigilABI",
            .product(name: "Logging", package: "swift-log", condition: hostOnly),
            .product(name: "SystemPackage", package: "swift-system", condition: hostOnly),
        ]),
        // Every sink: the sink protocol, queue and runner, the disk buffer,
        // one file per sink type under Sinks/ (listed by SinkRegistryPlugin).
        // The only target that imports NIO's HTTP, protobuf and compression.
        // The one HTTP/1.1 client (SwiftNIO's codec): the otlp sink posts
        // with it, the scrape plugin gets with it.
        .target(name: "VigilHTTPClient", dependencies: [
            .product(name: "NIOCore", package: "swift-nio", condition: hostOnly),
            .product(name: "NIOPosix", package: "swift-nio", condition: hostOnly),
            .product(name: "NIOHTTP1", package: "swift-nio", condition: hostOnly),
        ]),
        .target(name: "VigilSinks", dependencies: [
            "CVigilPlugin", "VigilCore", "VigilABI", "VigilIsolation", "VigilOTLP", "VigilPrompb", "VigilForeign", "VigilHistory",
            .target(name: "VigilHTTPClient", condition: hostOnly),
            .product(name: "Logging", package: "swift-log", condition: hostOnly),
            .product(name: "SystemPackage", package: "swift-system", condition: hostOnly),
            .product(name: "NIOCore", package: "swift-nio", condition: hostOnly),
            .product(name: "NIOPosix", package: "swift-nio", condition: hostOnly),
            .product(name: "NIOHTTP1", package: "swift-nio", condition: hostOnly),
            .product(name: "SwiftProtobuf", package: "swift-protobuf", condition: hostOnly),
            .product(name: "CompressNIO", package: "compress-nio", condition: hostOnly),
        ], plugins: ["SinkRegistryPlugin"]),
        // Lists every sink type under Sources/VigilSinks/Sinks into
        // SinkTypes.standard at build time: a new sink type is one new file.
        .plugin(name: "SinkRegistryPlugin", capability: .buildTool(), dependencies: ["vigil-sink-list"],
                path: "Sources/SinkRegistryPlugin"),
        .executableTarget(name: "vigil-sink-list", path: "Sources/vigil-sink-list"),
        // The history's figures for scripts/bench (issue 31): the store alone, an hour of points in seconds.
        .executableTarget(name: "vigil-history-bench", dependencies: ["VigilHistory"], path: "Sources/vigil-history-bench"),
        // What runs: monitor instances, the event bus, conditions and
        // actions, supervision, start, reload and stop, the run's report.
        // Swift's run-time exclusivity checking is on; the queues keep their
        // state behind a lock, so the event path makes no checks per event.
        .target(name: "VigilRuntime", dependencies: [
            "CVigilPlugin", "CVigilEarly", "CVigilSys", "VigilChildProcess", "VigilCore", "VigilABI", "VigilIsolation", "VigilSinks", "VigilHistory",
            .product(name: "Logging", package: "swift-log", condition: hostOnly),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: hostOnly),
            .product(name: "UnixSignals", package: "swift-service-lifecycle", condition: hostOnly),
            .product(name: "SystemPackage", package: "swift-system", condition: hostOnly),
        ]),
        // The console's page, script and style (assets/) and Debian's
        // dygraphs, packed into the binary at build time (ConsoleAssetsPlugin).
        .target(name: "VigilConsole", dependencies: [
            .product(name: "NIOCore", package: "swift-nio", condition: hostOnly),
            .product(name: "CompressNIO", package: "compress-nio", condition: hostOnly),
        ], exclude: ["assets"], plugins: ["ConsoleAssetsPlugin"]),
        .plugin(name: "ConsoleAssetsPlugin", capability: .buildTool(), dependencies: ["vigil-console-pack"],
                path: "Sources/ConsoleAssetsPlugin"),
        .executableTarget(name: "vigil-console-pack", path: "Sources/vigil-console-pack"),
        // The control API: its server (unix socket and TCP), its model, the
        // host's own /metrics, the console's routes.
        .target(name: "VigilControl", dependencies: [
            "VigilCore", "VigilABI", "VigilIsolation", "VigilSinks", "VigilRuntime", "VigilHistory", "VigilConsole",
            .product(name: "Logging", package: "swift-log", condition: hostOnly),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle", condition: hostOnly),
            .product(name: "NIOCore", package: "swift-nio", condition: hostOnly),
            .product(name: "NIOPosix", package: "swift-nio", condition: hostOnly),
            .product(name: "NIOHTTP1", package: "swift-nio", condition: hostOnly),
        ]),
        // `vigil plugins check`: a plugin's contract checked call by call in a
        // child process (the checker, its host side and its report).
        .target(name: "VigilConformance", dependencies: ["CVigilPlugin", "VigilCore", "VigilABI", "VigilIsolation"]),
        // The Swift SDK for plugin authors.
        .target(name: "VigilKit", dependencies: ["CVigilPlugin", "VigilJSON"]),
        // A test host for plugin authors: runs a monitor type or a built .so
        // with options, an injected clock, and collected events.
        .target(name: "VigilKitTesting", dependencies: ["VigilKit", "VigilABI", "VigilCore", "CVigilPlugin"]),
        // Readers of /proc and /sys through a configurable root, and what a
        // monitor of them needs of VigilKit besides (MonitorSupport.swift).
        .target(name: "CLinuxProbes"),
        .target(name: "LinuxProbes", dependencies: ["CLinuxProbes", "VigilKit"]),
        // libffi, for the ffi plugin (under the trait FFI).
        // adjtimex(2), which Swift's Glibc module does not declare, for the time plugin.
        .target(name: "CVigilTimex", path: "Plugins/time/CVigilTimex"),
        .systemLibrary(name: "CFFI", path: "Sources/CFFI", pkgConfig: "libffi", providers: [.apt(["libffi-dev"])]),
        .executableTarget(name: "vigil", dependencies: [
            "VigilCore", "VigilABI", "VigilIsolation", "VigilSinks", "VigilRuntime", "VigilControl", "VigilConformance", "CVigilSys",
            .product(name: "ArgumentParser", package: "swift-argument-parser", condition: hostOnly),
            .product(name: "Logging", package: "swift-log", condition: hostOnly),
            .product(name: "NIOHTTP1", package: "swift-nio", condition: hostOnly),
        ]),
        // The manifest tests read sinks with the host's sink types (SinkTypes.standard).
        .testTarget(name: "VigilCoreTests", dependencies: ["VigilCore", "VigilSinks"]),
        .testTarget(name: "VigilJSONTests", dependencies: ["VigilJSON"]),
        .testTarget(name: "VigilHistoryTests", dependencies: ["VigilHistory"]),
        .testTarget(name: "VigilKitTests", dependencies: ["VigilKit", "VigilKitTesting", "VigilCore", "VigilABI"]),
        .testTarget(name: "VigilHostTests", dependencies: ["vigil", "VigilChildProcess", "VigilIsolation", "VigilSinks", "VigilRuntime", "VigilControl", "VigilConformance", "VigilABI", "VigilCore", "LinuxProbes", "CVigilPlugin", "VigilKit", "VigilKitTesting", "VigilForeign", "VigilPrompb"]),
    ] + plugins.map(\.1)
)
