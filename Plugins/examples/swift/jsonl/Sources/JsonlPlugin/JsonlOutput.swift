// jsonl: an example Vigil output plugin in Swift. Copy this package to start
// your own.
//
// What it does: a sink of `type: plugin` with `plugin: jsonl` gives it
// batches of events; it sends each event as one JSON object on one line
// (JSON Lines, see JSONLine.swift) over TCP to `address`, as Fluent Bit's
// `tcp` input (`format json`), Vector's `socket` source (`mode: tcp`,
// `decoding.codec: json`) and Logstash's `tcp` input with the `json_lines`
// codec take it. It answers for every event:
//
//   - OK once the kernel took the event's line (TCP acknowledges nothing to
//     the program that sends);
//   - RETRY, with `retry_after`, while the listener is away: it cannot be
//     reached, or it went away mid-batch, in which case the events whose
//     lines were sent whole are OK and the rest are retried, so none is lost
//     and none but the one cut in half is sent twice.
//
// Every event has a JSON line, so it never rejects one.
//
// VigilKit turns the class into the C plugin the host loads: the
// self-description comes from `spec` and `Options`, each sink of the
// manifest is one object, and the host's calls arrive as `init` (create),
// `write`, `close` (destroy), never two at once for one object.

import VigilKit

final class JsonlOutput: Output {
    static let spec = OutputSpec(
        name: "jsonl",  // manifests say `plugin: jsonl`
        version: "1.0.0",
        summary: "Sends events as JSON Lines over TCP (Fluent Bit's tcp input, Vector's socket source, Logstash's json_lines).")

    /// The options, declared once: the property initial values are the
    /// defaults `vigil plugins describe` shows, the examples what `vigil
    /// plugins check` uses when given none.
    struct Options: DeclaredOptions {
        var address = "127.0.0.1:5170"
        var timeout: Duration = .seconds(5)
        var retryAfter: Duration = .seconds(1)
        static let schema = OptionSchema<Options>(
            .option("address", \.address, example: "localhost:5170",
                    doc: "The JSON Lines listener, HOST:PORT (a name, an IPv4 address, or [IPv6]:PORT)."),
            .option("timeout", \.timeout, example: "2s",
                    doc: "How long connecting, and sending one batch, may take before the batch is retried; 1ms to 1h."),
            .option("retry_after", \.retryAfter, example: "500ms",
                    doc: "The least wait the host is asked for before writing again while the listener is away; 0s to 1h."))
    }

    private let context: OutputContext
    private let host: String
    private let port: UInt16
    private let options: Options
    /// nil until the first batch, and after the listener went away.
    private var connection: TCPConnection?
    /// Said once per outage, not at every retry.
    private var away = false

    /// create: checks the options and connects to nothing. A listener that
    /// is not up yet is no configuration error; `write` finds it.
    init(options: Options, context: OutputContext) throws(PluginError) {
        let (host, port) = try Self.split(options.address)
        self.host = host
        self.port = port
        guard options.timeout >= .milliseconds(1) && options.timeout <= .seconds(3600) else {
            throw .invalidOption("timeout", "must be 1ms to 1h")
        }
        guard options.retryAfter >= .zero && options.retryAfter <= .seconds(3600) else {
            throw .invalidOption("retry_after", "must be 0s to 1h")
        }
        self.options = options
        self.context = context
    }

    /// HOST:PORT, the host possibly in brackets (IPv6).
    static func split(_ address: String) throws(PluginError) -> (String, UInt16) {
        guard let colon = address.lastIndex(of: ":") else {
            throw .invalidOption("address", "'\(address)' is not HOST:PORT")
        }
        var host = String(address[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") {
            host = String(host.dropFirst().dropLast())
        } else if host.contains(":") {
            throw .invalidOption("address", "'\(address)': write an IPv6 address in brackets, [::1]:5170")
        }
        guard !host.isEmpty else { throw .invalidOption("address", "'\(address)' has no host") }
        guard let port = UInt16(address[address.index(after: colon)...]), port > 0 else {
            throw .invalidOption("address", "'\(address)': the port must be 1 to 65535")
        }
        return (host, port)
    }

    /// write: one line per event, sent in one go; an answer per event.
    func write(_ batch: EventBatch) -> WriteResult {
        var bytes: [UInt8] = []
        var ends: [Int] = []
        ends.reserveCapacity(batch.count)
        for event in batch {
            JSONLine.append(event, to: &bytes)
            ends.append(bytes.count)
        }
        if let connection, connection.peerClosed {
            gone("\(options.address) closed the connection")
        }
        if connection == nil {
            do throws(ConnectionError) {
                connection = try TCPConnection.connect(host: host, port: port, timeout: options.timeout)
                context.log(.info, "connected to \(options.address)")
                away = false
            } catch {
                let reason = "cannot connect to \(options.address): \(error)"
                if !away {
                    context.log(.warning, reason + "; retrying")
                    away = true
                }
                return .retry(after: options.retryAfter, reason: reason)
            }
        }
        let (sent, error) = connection!.send(bytes)
        guard let error else { return .ok }
        let reason = "sending to \(options.address): \(error)"
        gone(reason)
        // Lines sent whole are delivered; the rest are written again.
        return .perEvent(ends.map { $0 <= sent ? .ok : .retry }, retryAfter: options.retryAfter, reason: reason)
    }

    /// The connection is lost: drop it (the next batch connects again).
    private func gone(_ why: String) {
        connection?.close()
        connection = nil
        if !away {
            context.log(.warning, why + "; reconnecting")
            away = true
        }
    }

    /// destroy: closes the connection; what the kernel still holds is sent
    /// after the close.
    func close() {
        connection?.close()
        connection = nil
    }
}

/// The one exported symbol: this library's plugin is `JsonlOutput`.
@_cdecl("vigil_plugin_entry")
public func entry(_ args: VigilEntryArgs, _ result: VigilEntryResult) -> vigil_status {
    VigilKit.export(JsonlOutput.self, args, result)
}
