import Foundation

/// Where a Swift plugin made by `vigil new-plugin` gets Vigil's SDK: the
/// `.package(…)` line of its Package.swift, and the name its targets give
/// that package in `.product(name:package:)`.
///
/// By path, so that the plugin builds where it was made: the Vigil sources
/// the scaffolds came from, the SDK installed beside them
/// (`PREFIX/share/vigil/sdk`), or a directory named with `--vigil-path`. By
/// URL and version only when asked (`--vigil-url`), for a release published
/// there.
struct VigilDependency: Equatable {
    enum Location: Equatable {
        /// A directory holding Vigil's Package.swift: a source tree or an
        /// installed SDK.
        case path(String)
        /// A git URL, and the lowest version taken (`from:`).
        case url(String, from: String)
    }

    let location: Location
    /// Why this one, for new-plugin's summary: "--vigil-path", "installed
    /// with the example", ….
    let reason: String
    /// Whether the package declares the trait Host (Vigil's own manifest
    /// does; the installed SDK's has no traits, and SwiftPM refuses
    /// `traits: []` for a package that declares none).
    let hasHostTrait: Bool

    /// A directory holding Vigil's Package.swift; whether it has the trait
    /// Host is read from that manifest.
    static func path(_ path: String, reason: String) -> VigilDependency {
        let manifest = (try? String(contentsOfFile: path + "/Package.swift", encoding: .utf8)) ?? ""
        return VigilDependency(location: .path(path), reason: reason, hasHostTrait: manifest.contains(".trait(name: \"Host\""))
    }

    /// A release by URL, from `version` on: Vigil's own package, with the trait Host.
    static func url(_ url: String, from version: String, reason: String) -> VigilDependency {
        VigilDependency(location: .url(url, from: version), reason: reason, hasHostTrait: true)
    }

    /// The package's identity as SwiftPM derives it, which
    /// `.product(name:package:)` names: the last component of the path or
    /// URL, without `.git`, lowercased.
    var identity: String {
        switch location {
        case .path(let path):
            return URL(fileURLWithPath: path).lastPathComponent.lowercased()
        case .url(let url, _):
            var last = url.split(whereSeparator: { $0 == "/" || $0 == ":" }).last.map(String.init) ?? url
            if last.hasSuffix(".git") { last.removeLast(4) }
            return last.lowercased()
        }
    }

    /// The `.package(…)` line, indented as the scaffolds' manifests indent it.
    /// `traits: []` leaves the trait Host out: none of the host's own
    /// packages is fetched or built.
    var packageLine: String {
        let traits = hasHostTrait ? ", traits: []" : ""
        switch location {
        case .path(let path):
            return "        .package(path: \(NewPlugin.swiftLiteral(path))\(traits)),"
        case .url(let url, let version):
            return "        .package(url: \(NewPlugin.swiftLiteral(url)), from: \(NewPlugin.swiftLiteral(version))\(traits)),"
        }
    }

    /// What new-plugin prints about it: one line.
    var summary: String {
        switch location {
        case .path(let path):
            return "Depends on Vigil's SDK by path: \(path) (\(reason))."
        case .url(let url, let version):
            return "Depends on Vigil's SDK by URL and version: \(url) from \(version) (\(reason)); `swift build` fetches it, so a release must be published there."
        }
    }

    /// Whether `s` reads as a git URL SwiftPM can fetch: SCHEME://… or the
    /// scp form USER@HOST:PATH.
    static func isURL(_ s: String) -> Bool {
        if let scheme = s.range(of: "://") {
            return !s[..<scheme.lowerBound].isEmpty && !s[scheme.upperBound...].isEmpty
        }
        guard let at = s.firstIndex(of: "@"), let colon = s[at...].firstIndex(of: ":") else { return false }
        return s.startIndex < at && s.index(after: at) < colon && s.index(after: colon) < s.endIndex && !s[..<colon].contains("/")
    }
}
