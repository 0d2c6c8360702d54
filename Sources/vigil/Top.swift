import ArgumentParser
import Foundation
import Synchronization
import VigilABI

/// `vigil top`: a live view of a running host, from its control API's
/// `GET /v1/status` once a second. What is drawn is `TopScreen`'s (pure,
/// tested without a terminal); this file is the terminal: the alternate
/// screen, raw mode for keys without echo, SIGWINCH, and putting the
/// terminal back however top ends (q, Ctrl-C, SIGTERM, SIGHUP, end of input).
struct Top: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "A live view of a running vigil: events/s per monitor, sink queues, writes and losses.",
        discussion: """
        Asks the host's control API (GET /v1/status) every second and shows, per monitor, its state, events \
        per second (the change of its event count over the second), events, polls and errors (poll errors and \
        crashes) with the last error; per sink, its queue depth and capacity, writes per second, written, dropped \
        and what was lost by reason; above them the host's uptime and events per second in all. \
        When the host cannot be reached, top says 'unreachable' and why, keeps the last answer on screen, and \
        asks again every second.

        Keys: q (or Ctrl-C) quits and gives the terminal back as it was. Needs a terminal; for one look \
        from a script, `vigil ctl status`.
        """)

    @OptionGroup var connection: Ctl.Endpoint

    func run() async throws {
        let endpoint = try connection.endpoint()
        guard isatty(0) == 1, isatty(1) == 1 else {
            FileHandle.standardError.write(Data("vigil top: needs a terminal on stdin and stdout; for one look from a script: vigil ctl status\n".utf8))
            throw ExitCode(2)
        }
        let terminal = try TopTerminal()
        let (events, sink) = AsyncStream.makeStream(of: TopEvent.self, bufferingPolicy: .bufferingNewest(256))

        // Signals first, raw mode second: a signal from the first moment of
        // raw mode already puts the terminal back.
        var sources: [DispatchSourceProtocol] = []
        for sig in [SIGINT, SIGTERM, SIGHUP, SIGWINCH] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { sink.yield(sig == SIGWINCH ? .resize : .signal(sig)) }
            source.resume()
            sources.append(source)
        }
        let input = DispatchSource.makeReadSource(fileDescriptor: 0, queue: .global())
        input.setEventHandler {
            var buffer = [UInt8](repeating: 0, count: 64)
            let n = read(0, &buffer, buffer.count)
            if n > 0 {
                for byte in buffer[0..<n] { sink.yield(.key(byte)) }
            } else if n == 0 || (errno != EINTR && errno != EAGAIN) {
                sink.yield(.inputClosed)
            }
        }
        terminal.enter()
        input.resume()
        sources.append(input)

        let poller = Task {
            while !Task.isCancelled {
                let started = monotonicNanoseconds()
                do {
                    let reply = try await endpoint.request(.GET, "/v1/status", timeout: .seconds(2))
                    if reply.status == 200 {
                        sink.yield(.status(try TopStatus.decode(reply.body)))
                    } else {
                        let object = (try? JSONSerialization.jsonObject(with: Data(reply.body))) as? [String: Any]
                        sink.yield(.failed("HTTP \(reply.status): \(object?["error"] as? String ?? String(reply.text.prefix(200)))"))
                    }
                } catch {
                    sink.yield(.failed("\(error)"))
                }
                let elapsed = monotonicNanoseconds().subtractingReportingOverflow(started).partialValue
                try? await Task.sleep(nanoseconds: UInt64(max(50_000_000, 1_000_000_000 - elapsed)))
            }
        }

        var model = TopModel()
        var exitCode: Int32 = 0
        terminal.draw(model, address: endpoint.description)
        loop: for await event in events {
            switch event {
            case .status(let status):
                model.update(status, at: monotonicNanoseconds())
            case .failed(let why):
                model.failed(why, at: monotonicNanoseconds())
            case .resize:
                break
            case .key(UInt8(ascii: "q")), .key(UInt8(ascii: "Q")), .inputClosed:
                break loop
            case .key(0x03):  // Ctrl-C, which raw mode delivers as a byte
                exitCode = 130
                break loop
            case .key:
                continue
            case .signal(let sig):
                exitCode = 128 + sig
                break loop
            }
            terminal.draw(model, address: endpoint.description)
        }
        poller.cancel()
        for source in sources { source.cancel() }
        terminal.restore()
        if exitCode != 0 { throw ExitCode(exitCode) }
    }
}

enum TopEvent: Sendable {
    case status(TopStatus)
    case failed(String)
    case key(UInt8)
    case resize
    case signal(Int32)
    case inputClosed
}

/// The terminal top draws on: its settings saved at the start and put back
/// once, raw input (no echo, no line editing, Ctrl-C as a byte), the
/// alternate screen with the cursor hidden.
final class TopTerminal: @unchecked Sendable {  // `saved` is set once in init; `restored` is behind its lock
    private var saved = termios()
    private let restored = Mutex(false)

    init() throws {
        guard tcgetattr(0, &saved) == 0 else {
            throw ValidationError("vigil top: cannot read the terminal's settings: \(String(cString: strerror(errno)))")
        }
    }

    func enter() {
        var raw = saved
        raw.c_lflag &= ~tcflag_t(ECHO | ICANON | ISIG | IEXTEN)
        raw.c_iflag &= ~tcflag_t(IXON | ICRNL)
        withUnsafeMutableBytes(of: &raw.c_cc) { cc in
            cc[Int(VMIN)] = 1
            cc[Int(VTIME)] = 0
        }
        _ = tcsetattr(0, TCSAFLUSH, &raw)
        write("\u{1b}[?1049h\u{1b}[?25l\u{1b}[H\u{1b}[2J")
    }

    /// Puts the terminal back as it was; once, whoever asks first.
    func restore() {
        guard restored.withLock({ done -> Bool in
            defer { done = true }
            return !done
        }) else { return }
        write("\u{1b}[?25h\u{1b}[?1049l")
        _ = tcsetattr(0, TCSAFLUSH, &saved)
    }

    /// Columns and rows; 80×24 where the terminal does not say.
    func size() -> (columns: Int, rows: Int) {
        var ws = winsize()
        guard ioctl(1, UInt(TIOCGWINSZ), &ws) == 0, ws.ws_col > 0, ws.ws_row > 0 else { return (80, 24) }
        return (Int(ws.ws_col), Int(ws.ws_row))
    }

    /// The whole screen in one write: each line over the old one, the rest cleared.
    func draw(_ model: TopModel, address: String) {
        let (columns, rows) = size()
        let lines = TopScreen.render(model, address: address, columns: columns, rows: rows, now: monotonicNanoseconds())
        write("\u{1b}[H" + lines.joined(separator: "\u{1b}[K\r\n") + "\u{1b}[K\u{1b}[J")
    }

    private func write(_ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.write(1, $0.baseAddress! + offset, $0.count - offset) }
            if n > 0 { offset += n } else if n < 0 && errno == EINTR { continue } else { return }
        }
    }
}
