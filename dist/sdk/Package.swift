// swift-tools-version:6.1
// Vigil's SDK for plugins in Swift, as `make install` lays it out in
// PREFIX/share/vigil/sdk (scripts/install-sdk): the library products a plugin
// uses and the targets they depend on, their sources copied from the tree
// the host was built from, and the one package they need, Yams, as that
// build resolved it, in Dependencies/. A plugin's package depends on it by
// path, which SwiftPM resolves without a network and without the host's own
// packages (`vigil new-plugin` writes that line).
//
// The targets and their dependencies are those of Vigil's Package.swift
// without the ones taken under the trait Host; a test (SDKManifestTests)
// keeps the two the same.
import PackageDescription

let package = Package(
    name: "Vigil",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "VigilKit", targets: ["VigilKit"]),
        .library(name: "VigilKitTesting", targets: ["VigilKitTesting"]),
        .library(name: "LinuxProbes", targets: ["LinuxProbes"]),
    ],
    dependencies: [
        .package(path: "Dependencies/Yams"),
    ],
    targets: [
        .target(name: "CVigilPlugin"),
        .target(name: "VigilJSON"),
        .target(name: "VigilCore", dependencies: ["VigilJSON", .product(name: "Yams", package: "Yams")]),
        .target(name: "CVigilSys"),
        .target(name: "VigilChildProcess", dependencies: ["CVigilSys"]),
        .target(name: "VigilABI", dependencies: ["CVigilPlugin", "VigilChildProcess", "VigilCore"]),
        .target(name: "VigilKit", dependencies: ["CVigilPlugin", "VigilJSON"]),
        .target(name: "VigilKitTesting", dependencies: ["VigilKit", "VigilABI", "VigilCore", "CVigilPlugin"]),
        .target(name: "CLinuxProbes"),
        .target(name: "LinuxProbes", dependencies: ["CLinuxProbes", "VigilKit"]),
    ]
)
