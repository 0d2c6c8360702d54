import Foundation
import Testing
import VigilKit
import VigilKitTesting
@testable import JsonlPlugin

/// The plugin run by VigilKitTesting's test host, in this process, through
/// the same C descriptor `vigil` gets: batches laid out by the host's
/// encoder, answers read by its decoder, a listener on loopback played here.
@Suite struct JsonlOutputTests {
    static func event(seq: UInt64, _ fields: [EventField] = [EventField("n", .int(1))]) -> OutputEvent {
        OutputEvent(monitor: "m", plugin: "p", seq: seq, time: 1_700_000_000_123_456_789, kind: "sample", fields: fields)
    }

    @Test func describesItselfAsAnOutput() throws {
        let d = try PluginTestHost(JsonlOutput.self).description
        #expect(d.name == "jsonl")
        #expect(d.kind == .output)
        #expect(d.events.isEmpty && !d.polled)
        #expect(d.options.map(\.name) == ["address", "timeout", "retry_after"])
        #expect(d.options.map(\.defaultText) == ["127.0.0.1:5170", "5s", "1s"])
        #expect(d.options.map(\.exampleText) == ["localhost:5170", "2s", "500ms"])
        #expect(d.options.allSatisfy { !$0.doc.isEmpty })
        #expect(d.problems() == [])
    }

    // MARK: - the line

    @Test func oneEventIsOneLineOfJSON() {
        let event = OutputEvent(host: "web-1", monitor: "root fs", plugin: "storage", seq: 1042,
                                time: 1_763_761_829_123_456_789, severity: .warning, kind: "sample",
                                fields: [EventField("used", .int(-42)), EventField("ratio", .double(0.25)),
                                         EventField("whole", .double(3)), EventField("nan", .double(.nan)),
                                         EventField("ok", .bool(true)),
                                         EventField("path", .string("a \"b\"\\c\nd\u{1}é"))])
        var out: [UInt8] = []
        JSONLine.append(event, to: &out)
        #expect(String(decoding: out, as: UTF8.self) == #"""
            {"time":"2025-11-21T21:50:29.123456Z","host":"web-1","monitor":"root fs","plugin":"storage","kind":"sample","severity":"warning","seq":1042,"fields":{"used":-42,"ratio":0.25,"whole":3.0,"nan":null,"ok":true,"path":"a \"b\"\\c\nd\u0001é"}}

            """#)
        // Foundation's reader agrees, field by field.
        let object = try? JSONSerialization.jsonObject(with: Data(out)) as? [String: Any]
        let fields = object?["fields"] as? [String: Any]
        #expect(fields?["path"] as? String == "a \"b\"\\c\nd\u{1}é")
        #expect(fields?["used"] as? Int == -42)
    }

    @Test func timestampsAreUTCToTheMicrosecond() {
        #expect(JSONLine.timestamp(0) == "1970-01-01T00:00:00.000000Z")
        #expect(JSONLine.timestamp(951_782_400_000_000_999) == "2000-02-29T00:00:00.000000Z")
        #expect(JSONLine.timestamp(4_107_542_399_999_999_999) == "2100-02-28T23:59:59.999999Z")
        #expect(JSONLine.timestamp(-1) == "1969-12-31T23:59:59.999999Z")
    }

    // MARK: - options

    @Test(arguments: [
        ("localhost", "options.address: 'localhost' is not HOST:PORT"),
        (":5170", "options.address: ':5170' has no host"),
        ("::1:5170", "options.address: '::1:5170': write an IPv6 address in brackets, [::1]:5170"),
        ("h:0", "options.address: 'h:0': the port must be 1 to 65535"),
    ])
    func aBadAddressIsRefusedAtItsOption(address: String, message: String) throws {
        let error = #expect(throws: PluginTestError.self) {
            try PluginTestHost(JsonlOutput.self).output(options: "{ address: \"\(address)\" }")
        }
        #expect(error?.status == "invalid configuration")
        #expect(error?.description.contains(message) == true, "\(String(describing: error))")
    }

    // MARK: - delivery

    @Test func everyEventArrivesAsALine() throws {
        let listener = try Listener()
        let out = try PluginTestHost(JsonlOutput.self).output(options: "{ address: \"127.0.0.1:\(listener.port)\" }",
                                                              hostName: "h")
        try out.start()
        let answer = try out.write([Self.event(seq: 1), Self.event(seq: 2, [EventField("s", .string("x"))])])
        #expect(answer.verdicts == [.ok, .ok], "\(answer)")
        try out.stop()
        out.destroy()
        #expect(listener.lines() == [
            #"{"time":"2023-11-14T22:13:20.123456Z","host":"h","monitor":"m","plugin":"p","kind":"sample","severity":"info","seq":1,"fields":{"n":1}}"#,
            #"{"time":"2023-11-14T22:13:20.123456Z","host":"h","monitor":"m","plugin":"p","kind":"sample","severity":"info","seq":2,"fields":{"s":"x"}}"#,
        ])
        #expect(out.logs.map(\.message) == ["connected to 127.0.0.1:\(listener.port)"])
    }

    /// Nobody listens: RETRY with the wait asked for and the reason, said
    /// once in the log; then the listener comes up and the retry delivers.
    @Test func retryWhileTheListenerIsAwayThenDelivery() throws {
        // Bound, not listening: connections are refused, and the port
        // cannot be taken by another test meanwhile.
        let listener = try Listener(listening: false)
        let port = listener.port
        let out = try PluginTestHost(JsonlOutput.self)
            .output(options: "{ address: \"127.0.0.1:\(port)\", retry_after: 250ms }")
        try out.start()
        for attempt in 1...2 {
            let answer = try out.write([Self.event(seq: 1), Self.event(seq: 2)], attempt: attempt)
            #expect(answer.verdicts == [.retry, .retry])
            #expect(answer.retryAfter == .milliseconds(250))
            #expect(answer.message.hasPrefix("cannot connect to 127.0.0.1:\(port): "), "\(answer.message)")
        }
        try listener.listenNow()
        #expect(try out.write([Self.event(seq: 1), Self.event(seq: 2)], attempt: 3).verdicts == [.ok, .ok])
        out.destroy()
        #expect(listener.lines().count == 2)
        #expect(out.logs.filter { $0.message.hasPrefix("cannot connect") }.count == 1)
    }

    /// The listener closes the connection between batches: the next batch
    /// notices before writing into it, connects again, and loses nothing.
    @Test func aListenerGoneBetweenBatchesIsNoticed() throws {
        let listener = try Listener(connections: 2)
        let out = try PluginTestHost(JsonlOutput.self).output(options: "{ address: \"127.0.0.1:\(listener.port)\" }")
        try out.start()
        #expect(try out.write([Self.event(seq: 1)]).verdicts == [.ok])
        listener.closeFirstAfterOneLine()
        #expect(try out.write([Self.event(seq: 2)]).verdicts == [.ok])
        out.destroy()
        #expect(listener.lines().map { $0.contains(#""seq":1,"#) || $0.contains(#""seq":2,"#) } == [true, true])
    }
}

/// A listener on 127.0.0.1 that keeps the lines of up to `connections`
/// connections, one after the other.
final class Listener: @unchecked Sendable {  // `text` is behind `lock`; the rest is set in init
    let port: Int
    private let fd: Int32
    private let lock = NSLock()
    private var text = ""
    private let done = DispatchSemaphore(value: 0)
    private let firstHasLine = DispatchSemaphore(value: 0)
    private var closeFirst = false

    private let connections: Int

    /// Bound to a port of its own; accepting at once, or only after
    /// `listenNow()` (until then a connection is refused, and no other
    /// socket can take the port).
    init(connections: Int = 1, listening: Bool = true) throws {
        self.connections = connections
        let s = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var on: Int32 = 1
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(s, $0, &length) }
        }
        fd = s
        self.port = Int(UInt16(bigEndian: address.sin_port))
        if listening { try listenNow() }
    }

    /// Starts accepting connections.
    func listenNow() throws {
        guard listen(fd, 4) == 0 else { throw POSIXError(.EADDRINUSE) }
        let listening = fd
        let connections = self.connections
        Thread { [self] in
            defer { done.signal(); close(listening) }
            for index in 0..<connections {
                let client = accept(listening, nil, nil)
                guard client >= 0 else { return }
                var buffer = [UInt8](repeating: 0, count: 65_536)
                while true {
                    let n = read(client, &buffer, buffer.count)
                    if n <= 0 { break }
                    lock.withLock { text += String(decoding: buffer[0..<n], as: UTF8.self) }
                    if index == 0 && connections > 1 && lock.withLock({ text.hasSuffix("\n") }) {
                        firstHasLine.signal()
                        while !lock.withLock({ closeFirst }) { usleep(1_000) }
                        break
                    }
                }
                close(client)
            }
        }.start()
    }


    /// Waits for the first connection's first line, then closes it.
    func closeFirstAfterOneLine() {
        firstHasLine.wait()
        lock.withLock { closeFirst = true }
        usleep(50_000)  // the FIN reaches the sender
    }

    /// The lines received, once every connection has closed.
    func lines() -> [String] {
        _ = done.wait(timeout: .now() + 10)
        return lock.withLock { text }.split(separator: "\n").map(String.init)
    }
}
