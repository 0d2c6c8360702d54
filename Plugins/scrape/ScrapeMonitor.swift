import Glibc
import NIOCore
import NIOPosix
import VigilForeign
import VigilHTTPClient
import VigilKit

/// Scrapes one Prometheus or OpenMetrics endpoint (an exporter, an
/// application's /metrics) every interval, as Prometheus scrapes a target:
/// the same Accept header, the answer read as the Content-Type says (text
/// 0.0.4 or OpenMetrics 1.0), taken whole or not at all, within `timeout`,
/// `max_bytes` and `max_series`. Each series is one `sample` event that
/// names itself, so the `prometheus` sink serves it as the exporter did,
/// counters as counters and histograms whole; `scrape` says how each went,
/// as Prometheus' `up` and `scrape_*` series do.
///
/// The scrape runs on the instance's own thread and event loop (both ended
/// at stop): a poll asks for one and returns at once, and a poll that comes
/// while one is running is answered by it, so a slow exporter delays only
/// its own next scrape.
final class ScrapeMonitor: PolledMonitor, @unchecked Sendable {  // immutable but for what the worker alone touches
    static let spec = PluginSpec(
        name: "scrape", version: "1.1.0",
        summary: "Scrapes a Prometheus or OpenMetrics endpoint and passes its series on as they are",
        defaultInterval: .seconds(15),
        events: [
            EventDecl("sample", doc: "One per series of each scrape that succeeded (those `match` keeps).", fields: [
                FieldDecl("prometheus_name", .string, doc: "the sample's name as the endpoint gives it", identity: true),
                FieldDecl("prometheus_labels", .string, doc: "its labels in the exposition's syntax (name=\"value\",…), ordered by name",
                          identity: true),
                FieldDecl("value", .double),
                FieldDecl("type", .string, doc: "its family's type: counter, gauge, histogram, summary, untyped, or OpenMetrics' own"),
                FieldDecl("help", .string, doc: "its family's help, on the first sample of each name in a scrape; cut with … past 64 KiB"),
            ], policy: .samples),
            EventDecl("scrape", doc: "One per scrape: how it went.", fields: [
                FieldDecl("up", .bool, doc: "the scrape succeeded (Prometheus' up)"),
                FieldDecl("duration", .double, unit: "seconds", doc: "from the request to the whole answer"),
                FieldDecl("samples", .int, doc: "samples in the answer"),
                FieldDecl("kept", .int, doc: "of them, those `match` kept and passed on"),
                FieldDecl("too_large", .int, doc: "of them, those `match` kept but left out: a name or labels over 64 KiB, more than an event's string holds"),
                FieldDecl("bytes", .int, unit: "bytes", doc: "of the answer's body"),
                FieldDecl("error", .string, doc: "why it failed: the connection, the status, the size, or the line and column of a parse error"),
            ], policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var url = ""
        var timeout: Duration = .seconds(10)
        var headers: JSONValue = .object([])
        var maxBytes: ByteCount = .mib(16)
        var maxSeries = 100_000
        var match: [String] = []
        static let schema = OptionSchema<Options>(
            .required("url", \.url, example: "http://127.0.0.1:9100/metrics", doc: "The endpoint: http://HOST[:PORT][/PATH] (https is not read yet)."),
            .option("timeout", \.timeout, doc: "A scrape not answered whole within this fails (at most the interval)."),
            .option("headers", \.headers, doc: "Headers added to the request (Authorization: Bearer …)."),
            .option("max_bytes", \.maxBytes, doc: "An answer longer than this fails the scrape (the connection is dropped at once)."),
            .option("max_series", \.maxSeries, doc: "An answer with more samples than this fails the scrape."),
            .option("match", \.match, doc: "Only the samples whose family name matches one of these globs (node_cpu_*); none: all."))
    }

    /// Prometheus' own Accept header: OpenMetrics first, the text format after.
    static let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

    struct Endpoint: Equatable {
        var host: String
        var port: Int
        var path: String
    }

    private let context: MonitorContext
    private let options: Options
    private let endpoint: Endpoint
    private let headers: [(String, String)]
    /// The polls, handed to the worker.
    private let requests: PollRequests
    /// The instance's event loop while it runs: made at start, shut down at stop.
    private var group: MultiThreadedEventLoopGroup?

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        switch Self.endpoint(options.url) {
        case .success(let endpoint): self.endpoint = endpoint
        case .failure(let why): throw .invalidOption("url", why.text)
        }
        guard options.timeout > .zero else { throw .invalidOption("timeout", "must be more than 0") }
        if context.interval > .zero, options.timeout > context.interval {
            throw .invalidOption("timeout", "is longer than the interval (\(context.interval)): a scrape would still run when the next is due")
        }
        guard options.maxBytes.bytes > 0 else { throw .invalidOption("max_bytes", "must be more than 0") }
        guard options.maxSeries > 0 else { throw .invalidOption("max_series", "must be more than 0") }
        guard case .object(let entries) = options.headers else { throw .invalidOption("headers", "must map names to strings") }
        var headers: [(String, String)] = []
        for (name, value) in entries {
            guard !name.isEmpty, name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ":") }) else {
                throw .invalidOption("headers", "'\(name)' is not a header name")
            }
            guard case .string(let text) = value, !text.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                throw .invalidOption("headers.\(name)", "must be a string of one line")
            }
            headers.append((name, text))
        }
        self.context = context
        self.options = options
        self.headers = headers
        requests = try PollRequests()
    }

    struct Refusal: Error { var text: String }

    /// `http://HOST[:PORT][/PATH]`, HOST a name, an IPv4 address or `[IPv6]`.
    static func endpoint(_ url: String) -> Result<Endpoint, Refusal> {
        guard url.hasPrefix("http://") else {
            return .failure(Refusal(text: url.hasPrefix("https://") ? "https is not read yet: scrape over http (a local exporter, or a TLS proxy on loopback)"
                                    : "'\(url)' is not an http:// URL"))
        }
        let rest = url.dropFirst(7)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let authority = rest[..<slash]
        let path = slash == rest.endIndex ? "/metrics" : String(rest[slash...])
        guard !path.utf8.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return .failure(Refusal(text: "the path of '\(url)' has a space or a control character")) }
        var host = Substring(authority), port = 80
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return .failure(Refusal(text: "'\(url)': the IPv6 address is not closed with ]")) }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":"), let p = Int(after.dropFirst()), (1...65535).contains(p) else {
                    return .failure(Refusal(text: "'\(url)': the port is not a number from 1 to 65535"))
                }
                port = p
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            guard let p = Int(authority[authority.index(after: colon)...]), (1...65535).contains(p) else {
                return .failure(Refusal(text: "'\(url)': the port is not a number from 1 to 65535"))
            }
            port = p
        }
        guard !host.isEmpty, !host.contains("@") else { return .failure(Refusal(text: "'\(url)' names no host (credentials go in headers)")) }
        return .success(Endpoint(host: String(host), port: port, path: path))
    }

    func start() throws(MonitorError) {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.group = group
        let client = HTTPClient(host: endpoint.host, port: endpoint.port, userAgent: "vigil-scrape/1.0", group: group)
        context.spawn("scrape") { [self] token in run(token, client: client) }
    }

    /// The worker is joined by the SDK after this returns; a scrape in
    /// flight gives up at once (`giveUp`), and the worker shuts the event
    /// loop down as it ends (see `run`).
    func stop() { requests.clear() }

    /// Asks the worker for a scrape and returns at once.
    func poll() throws(MonitorError) { requests.ask() }

    private func run(_ token: Worker.Token, client: HTTPClient) {
        defer {
            client.close()
            try? group?.syncShutdownGracefully()
        }
        while !token.isCancelled {
            if requests.take() != nil {
                scrape(client, token: token)
                continue
            }
            if !requests.wait(token) { return }
        }
    }

    private func scrape(_ client: HTTPClient, token: Worker.Token) {
        let began = Worker.monotonicNow()
        var headers = [("Accept", Self.accept), ("Accept-Encoding", "identity"),
                       ("X-Prometheus-Scrape-Timeout-Seconds", "\(Double(options.timeout.nanoseconds) / 1e9)")]
        headers += self.headers
        let limit = Int(clamping: options.maxBytes.bytes)
        let response: HTTPClient.Response
        do {
            response = try client.request(.GET, endpoint.path, headers: headers, timeout: .nanoseconds(options.timeout.nanoseconds),
                                          maxBody: limit, overflow: .fail, giveUp: { token.isCancelled })
        } catch {
            // Cut short because the instance stops: no scrape to report.
            if token.isCancelled { return }
            return failed("\(error)", began: began, bytes: 0)
        }
        guard token.isCancelled == false else { return }
        guard response.status == 200 else {
            return failed("HTTP status \(response.status)", began: began, bytes: response.body.count)
        }
        // Asked for identity; a target that compresses all the same is told
        // by what it sent, not by the parser's first NUL byte.
        let encoding = response.headers.first(name: "Content-Encoding") ?? ""
        if !encoding.isEmpty && encoding.lowercased() != "identity" {
            return failed("the answer is Content-Encoding: \(encoding.prefix(40)), though the request asked for identity",
                          began: began, bytes: response.body.count)
        }
        if response.body.count >= 2 && response.body[response.body.startIndex] == 0x1f
            && response.body[response.body.startIndex + 1] == 0x8b {
            return failed("the answer is gzip data (it starts 1f 8b) without a Content-Encoding, though the request asked for identity",
                          began: began, bytes: response.body.count)
        }
        let contentType = response.headers.first(name: "Content-Type") ?? ""
        let format = PrometheusExposition.format(contentType: contentType)
        let parsed: PrometheusExposition
        do {
            parsed = try PrometheusExposition.parse(response.body, format: format, maxSeries: options.maxSeries)
        } catch {
            return failed("line \(error.line), column \(error.column): \(error.message)", began: began, bytes: response.body.count)
        }
        let duration = Worker.monotonicNow() - began
        var kept = 0, tooLarge = 0
        // The help goes with a name's first sample of the scrape only, as
        // the exposition gives it once per family: copied into each of
        // 10,000 series a long HELP would be hundreds of megabytes a scrape.
        var helped: Set<String> = []
        for family in parsed.families where options.match.isEmpty || options.match.contains(where: { fnmatch($0, family.name, 0) == 0 }) {
            for sample in family.samples {
                let labels = PrometheusExposition.labelText(sample.labels)
                // An identity cut would be another series: one past what an
                // event's string holds is left out, and counted.
                guard sample.name.utf8.count <= Self.largestText, labels.utf8.count <= Self.largestText else {
                    tooLarge += 1
                    continue
                }
                kept += 1
                var fields: [(String, Value)] = [
                    ("prometheus_name", .string(sample.name)), ("prometheus_labels", .string(labels)),
                    ("value", .double(sample.value)), ("type", .string(family.type.rawValue)),
                ]
                if helped.insert(sample.name).inserted { fields.append(("help", .text(family.help ?? ""))) }
                context.emit("sample", fields: fields)
            }
        }
        if tooLarge > 0 {
            say("\(tooLarge) samples of \(options.url) have a name or labels over \(Self.largestText) bytes: left out")
        }
        context.emit("scrape", ["up": .bool(true), "duration": .double(Double(duration) / 1e9),
                                "samples": .int(Int64(parsed.sampleCount)), "kept": .int(Int64(kept)),
                                "too_large": .int(Int64(tooLarge)), "bytes": .int(Int64(response.body.count))])
    }

    /// The longest name or label text a sample event can carry.
    static let largestText = Int(VIGIL_MAX_STRING_BYTES)

    /// The last warning logged, so that the same one is logged once.
    private var lastWarning = ""

    private func say(_ warning: String) {
        if warning != lastWarning { context.log(.warning, warning) }
        lastWarning = warning
    }

    private func failed(_ why: String, began: Int64, bytes: Int) {
        say("scrape of \(options.url) failed: \(why)")
        context.emit("scrape", ["up": .bool(false), "duration": .double(Double(Worker.monotonicNow() - began) / 1e9),
                                "samples": .int(0), "kept": .int(0), "too_large": .int(0), "bytes": .int(Int64(bytes)), "error": .string(why)])
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(ScrapeMonitor.self, a, r) }
