// swift-tools-version:6.1
// The boottime Vigil plugin: a monitor in Swift, and the Swift monitor scaffold
// (`vigil new-plugin NAME --lang swift` starts a plugin from a copy of this
// directory).
import PackageDescription

let package = Package(
    name: "boottime",
    platforms: [.macOS(.v15)],
    products: [
        // libboottime.so: the host finds a plugin as NAME.so or libNAME.so.
        .library(name: "boottime", type: .dynamic, targets: ["BoottimePlugin"]),
    ],
    dependencies: [
        // Vigil's SDK: VigilKit (the plugin side of the ABI) and
        // VigilKitTesting (a test host), by path (a Vigil checkout, or the
        // SDK installed in PREFIX/share/vigil/sdk) or by URL and version (a
        // published release); `vigil new-plugin` writes the one it came
        // from, or the URL with --vigil-url. `traits: []` leaves out the
        // trait Host: none of the host's own dependencies is fetched or
        // built (the installed SDK has no traits, and so no `traits:`).
        .package(url: "https://github.com/vigil-monitor/vigil", from: "0.3.0", traits: []),
    ],
    targets: [
        .target(
            name: "BoottimePlugin",
            dependencies: [.product(name: "VigilKit", package: "vigil")],
            // Export vigil_plugin_entry and nothing else (see exports.map).
            linkerSettings: [.unsafeFlags(["-Xlinker", "--version-script=\(Context.packageDirectory)/exports.map"])]),
        .testTarget(
            name: "BoottimePluginTests",
            dependencies: ["BoottimePlugin", .product(name: "VigilKitTesting", package: "vigil")]),
    ]
)

