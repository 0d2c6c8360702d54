import Foundation
import SystemPackage

/// What the file and socket writers share about the paths they are given.
package enum Paths {
    /// Whether a directory had to be made.
    @discardableResult
    package static func makeParentDirectories(of path: String) throws -> Bool {
        var parent = FilePath(path)
        parent.removeLastComponent()
        guard !parent.isEmpty else { return false }
        var st = stat()
        if stat(parent.string, &st) == 0 { return false }
        try FileManager.default.createDirectory(atPath: parent.string, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o750])
        return true
    }
}
