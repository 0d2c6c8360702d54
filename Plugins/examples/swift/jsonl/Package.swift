// swift-tools-version:6.1
// jsonl: an example Vigil output plugin in Swift, a package of its own.
import PackageDescription

let package = Package(
    name: "jsonl",
    platforms: [.macOS(.v15)],
    products: [
        // libjsonl.so: the host finds a plugin as NAME.so or libNAME.so.
        .library(name: "jsonl", type: .dynamic, targets: ["JsonlPlugin"]),
    ],
    dependencies: [
        // VigilKit, the SDK, and VigilKitTesting, a test host: from the Vigil
        // sources this example lives in. Named, so that the products below do
        // not depend on the name of the checkout's directory.
        .package(name: "Vigil", path: "../../../.."),
    ],
    targets: [
        .target(
            name: "JsonlPlugin",
            dependencies: [.product(name: "VigilKit", package: "Vigil")],
            // Export vigil_plugin_entry and nothing else (see exports.map).
            linkerSettings: [.unsafeFlags(["-Xlinker", "--version-script=\(Context.packageDirectory)/exports.map"])]),
        .testTarget(
            name: "JsonlPluginTests",
            dependencies: ["JsonlPlugin", .product(name: "VigilKitTesting", package: "Vigil")]),
    ]
)
