import ArgumentParser
import Foundation
import VigilABI
import VigilCore
import VigilIsolation

struct Tail: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print the events a socket sink streams, readably.",
        discussion: "Connects to the address a `socket` sink listens on (unix:/PATH or tcp://HOST:PORT) and prints each event as it arrives, coloured by severity on a terminal. Stops at end of stream or on Ctrl-C.")

    @Argument(help: "The address a socket sink listens on, e.g. unix:/run/vigil/events.sock.") var address: String
    @Flag(help: "Print the JSON lines as received.") var raw = false
    @Option(help: "Colour output: auto, always or never.") var color: String = "auto"
    @Option(help: "Stop after COUNT events.") var count: Int?

    func run() async throws {
        let target: SocketAddress
        do { target = try SocketAddress.parse(address) } catch { throw ValidationError("\(address): \(error)") }
        let fd: Int32
        do { fd = try Sockets.connect(target) } catch {
            FileHandle.standardError.write(Data("vigil tail: \(error)\n".utf8))
            throw ExitCode(1)
        }
        defer { close(fd) }
        let useColor = color == "always" || (color == "auto" && isatty(1) == 1 && ProcessInfo.processInfo.environment["NO_COLOR"] == nil)
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        var seen = 0
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            pending.append(contentsOf: buffer[0..<n])
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = Array(pending[..<newline])
                pending.removeSubrange(...newline)
                let text = (raw ? String(decoding: line, as: UTF8.self) : Self.render(line, color: useColor)) + "\n"
                FileHandle.standardOutput.write(Data(text.utf8))
                seen += 1
                if let count, seen >= count { return }
            }
        }
    }

    static func render(_ line: [UInt8], color: Bool) -> String {
        guard let (_, event) = try? JSONLineDecoder().decode(line) else {
            return String(decoding: line, as: UTF8.self)
        }
        var stamp: [UInt8] = []
        JSONLineEncoder.appendTimestamp(event.time, to: &stamp)
        let time = String(decoding: stamp[11..<23], as: UTF8.self)
        var fields = ""
        for field in event.fields {
            fields += " \(field.name)="
            switch field.value {
            case .double(let d): fields += d.isNaN ? "null" : "\(d)"
            case .int(let i): fields += "\(i)"
            case .bool(let b): fields += b ? "true" : "false"
            case .string(let s): fields += s.isEmpty || s.contains(where: { $0 == " " || $0 == "\"" || $0.isNewline }) ? "\(s.debugDescription)" : s
            }
        }
        let level = event.severity.name.padding(toLength: 8, withPad: " ", startingAt: 0)
        let subject = "\(event.monitor)/\(event.kind)"
        guard color else { return "\(time) \(level) \(subject)\(fields)" }
        let code = switch event.severity {
        case .debug: "2"
        case .info: "32"
        case .notice: "36"
        case .warning: "33"
        case .error: "31"
        case .critical: "1;31"
        }
        return "\u{1B}[2m\(time)\u{1B}[0m \u{1B}[\(code)m\(level)\u{1B}[0m \u{1B}[1m\(subject)\u{1B}[0m\(fields)"
    }
}
