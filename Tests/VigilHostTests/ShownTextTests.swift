import VigilChildProcess
import Foundation
import Logging
import Testing
import VigilABI
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Text from a plugin, shown on one line: the log handler and every message
/// that quotes a plugin escape control characters the same way.
@Suite struct ShownTextTests {
    static let hostile = "a\nb\r\t\u{1B}[31m\u{7F}\u{00}\u{85}\u{9B}"
    static let shown = #"a\nb\r\t\x1b[31m\x7f\x00\u0085\u009b"#

    @Test func controlCharactersAreEscapedAndTheRestIsKept() {
        #expect(shownText(Self.hostile) == Self.shown)
        // Other characters, including ones whose UTF-8 starts like a C1 control's, pass.
        #expect(shownText("é £ ü \\ 温度") == "é £ ü \\ 温度")
        #expect(shownText("") == "")
    }

    @Test func theLogHandlerWritesTheSameSpelling() throws {
        let pipe = try Spawn.pipe(for: "test")
        defer { close(pipe.read) }
        let logger = Logger(label: "t") { _ in VigilLogHandler(label: "t", fileDescriptor: pipe.write, showLabel: false) }
        logger.warning("\(Self.hostile)", metadata: ["kind": "\(Self.hostile)"])
        close(pipe.write)
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = read(pipe.read, &buffer, buffer.count)
        let line = String(decoding: buffer[0..<max(n, 0)], as: UTF8.self)
        #expect(line.hasSuffix(" warning \(Self.shown) kind=\(Self.shown)\n"), "\(line)")
    }
}
