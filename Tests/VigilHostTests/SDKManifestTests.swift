import Foundation
import Testing

/// The installed SDK's manifest, `dist/sdk/Package.swift` (what `make
/// install` puts in PREFIX/share/vigil/sdk), against Vigil's own, both as
/// SwiftPM reads them (`swift package dump-package`): the SDK's products
/// are Vigil's, its targets are Vigil's with the same dependencies but
/// those taken under the trait Host, and the packages it names by path are
/// packages Vigil depends on. So the SDK cannot drift from the tree it is
/// copied from.
@Suite(.startsProcesses, .offThePool) struct SDKManifestTests {
    /// A manifest's targets (name → dependencies) and library products
    /// (name → targets). A dependency reads `target`, or `product@package`
    /// (the package lowercased, as SwiftPM compares identities); one under a
    /// trait condition is left out when `withoutTraits`.
    struct Manifest {
        var targets: [String: Set<String>] = [:]
        var products: [String: [String]] = [:]
        var packages: [String] = []
    }

    static func dump(_ packagePath: String, withoutTraits: Bool) throws -> Manifest {
        let swift = try #require(NewPluginTests.onPath("swift"), "swift not on PATH")
        // A scratch path of its own: the tree's .build is locked by the
        // `swift test` running this.
        let dump = try NewPluginTests.succeed("swift package dump-package \(packagePath)", swift,
                                              ["package", "--package-path", packagePath, "--scratch-path",
                                               TestEnv.productsDir + "/sdk-manifest/scratch", "dump-package"], timeout: 300)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        var manifest = Manifest()
        for target in json["targets"] as? [[String: Any]] ?? [] {
            let name = try #require(target["name"] as? String)
            var dependencies = Set<String>()
            for dependency in target["dependencies"] as? [[String: Any]] ?? [] {
                if let byName = (dependency["byName"] ?? dependency["target"]) as? [Any], let target = byName.first as? String {
                    dependencies.insert(target)
                } else if let product = dependency["product"] as? [Any], let productName = product[0] as? String,
                          let package = product[1] as? String {
                    let condition = product.count > 3 ? product[3] as? [String: Any] : nil
                    if withoutTraits, let traits = condition?["traits"] as? [String], !traits.isEmpty { continue }
                    dependencies.insert("\(productName)@\(package.lowercased())")
                } else {
                    Issue.record("\(packagePath): \(name) has a dependency of a kind this test does not read: \(dependency)")
                }
            }
            manifest.targets[name] = dependencies
        }
        for product in json["products"] as? [[String: Any]] ?? [] {
            guard let type = product["type"] as? [String: Any], type["library"] != nil, let name = product["name"] as? String else { continue }
            manifest.products[name] = product["targets"] as? [String] ?? []
        }
        for package in json["dependencies"] as? [[String: Any]] ?? [] {
            let settings = (package["fileSystem"] ?? package["sourceControl"]) as? [[String: Any]]
            let location = settings?.first?["path"] as? String
                ?? ((settings?.first?["location"] as? [String: Any])?["remote"] as? [[String: Any]])?.first?["urlString"] as? String
            manifest.packages.append(location ?? "\(package)")
        }
        return manifest
    }

    @Test func theSDKIsVigilsPluginSideWithoutTheHostsPackages() throws {
        let vigil = try Self.dump(TestEnv.repoRoot, withoutTraits: true)
        let sdk = try Self.dump(TestEnv.repoRoot + "/dist/sdk", withoutTraits: false)

        #expect(Set(sdk.products.keys) == ["VigilKit", "VigilKitTesting", "LinuxProbes"], "\(sdk.products)")
        for (product, targets) in sdk.products {
            #expect(vigil.products[product] == targets, "the product \(product): Vigil's \(vigil.products[product] ?? []), the SDK's \(targets)")
        }
        for (target, dependencies) in sdk.targets {
            #expect(vigil.targets[target] == dependencies,
                    "the target \(target): Vigil's \(vigil.targets[target].map { $0.sorted() } ?? []), the SDK's \(dependencies.sorted())")
            for dependency in dependencies where !dependency.contains("@") {
                #expect(sdk.targets[dependency] != nil, "\(target) depends on \(dependency), which the SDK lacks")
            }
        }
        // Each package the SDK names by path, Dependencies/NAME, is one Vigil
        // depends on by URL, whose last component is NAME.
        #expect(!sdk.packages.isEmpty)
        for location in sdk.packages {
            let name = URL(fileURLWithPath: location).lastPathComponent
            #expect(location.hasSuffix("Dependencies/\(name)"), "\(location)")
            #expect(vigil.packages.contains { URL(string: $0)?.lastPathComponent == name }, "\(name): \(vigil.packages)")
        }
    }
}
