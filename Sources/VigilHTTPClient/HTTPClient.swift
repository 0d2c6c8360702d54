import Dispatch
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A small HTTP/1.1 client for one origin with SwiftNIO's codec: sends a
/// request and waits for the answer, on one kept-alive connection that is
/// made again when the server closed it. Called from one thread at a time
/// (it blocks that thread, never an event loop). The one HTTP client of
/// Vigil: the otlp sink posts with it, the scrape plugin gets with it.
package final class HTTPClient: @unchecked Sendable {  // called from one thread at a time, which it blocks
    package struct Response: Sendable {
        package var status: Int
        package var headers: HTTPHeaders
        package var body: [UInt8]
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        /// The connection ended before any byte of an answer came: on a
        /// kept-alive connection the server may have closed it as the
        /// request left, and the request is sent again on a new one, once.
        var closedBeforeAnswer = false
    }

    /// What to do with an answer whose body is longer than `maxBody`.
    package enum Overflow: Sendable {
        /// Keep the first `maxBody` bytes, read and drop the rest (an error page).
        case truncate
        /// Fail the request and drop the connection at once (a scrape past its bound).
        case fail
    }

    let host: String
    let port: Int
    let userAgent: String
    private let group: any EventLoopGroup
    private var channel: Channel?
    private var collector: ResponseCollector?

    /// On `group`: by default the process's one event-loop group, never
    /// shut down (the host's); a plugin passes a group of its own, which it
    /// shuts down when it stops.
    package init(host: String, port: Int, userAgent: String, group: (any EventLoopGroup)? = nil) {
        self.host = host
        self.port = port
        self.userAgent = userAgent
        self.group = group ?? MultiThreadedEventLoopGroup.singleton
    }

    /// One POST (see `request`).
    package func post(_ path: String, body: ByteBuffer, headers: [(String, String)], timeout: TimeAmount,
                      giveUp: () -> Bool = { false }) throws -> Response {
        try request(.POST, path, body: body, headers: headers, timeout: timeout, maxBody: 1 << 20, overflow: .truncate,
                    giveUp: giveUp)
    }

    /// One request; throws on a connection error, past `timeout` (the
    /// connection is then dropped, so a late answer cannot be taken for the
    /// next request's), or with `overflow: .fail` past `maxBody` bytes of body.
    package func request(_ method: HTTPMethod, _ path: String, body: ByteBuffer? = nil, headers: [(String, String)],
                         timeout: TimeAmount, maxBody: Int, overflow: Overflow,
                         giveUp: () -> Bool = { false }) throws -> Response {
        let reused = channel?.isActive == true
        do {
            return try send(method, path, body: body, headers: headers, timeout: timeout, maxBody: maxBody, overflow: overflow,
                            giveUp: giveUp)
        } catch let failure as Failure where reused && failure.closedBeforeAnswer && !giveUp() {
            // A kept-alive connection the server closed as the request left
            // (its idle timeout): sent again on a new connection, once.
            return try send(method, path, body: body, headers: headers, timeout: timeout, maxBody: maxBody, overflow: overflow,
                            giveUp: giveUp)
        }
    }

    private func send(_ method: HTTPMethod, _ path: String, body: ByteBuffer?, headers: [(String, String)],
                      timeout: TimeAmount, maxBody: Int, overflow: Overflow, giveUp: () -> Bool) throws -> Response {
        let (channel, collector) = try connection(timeout: timeout, giveUp: giveUp)
        let promise = channel.eventLoop.makePromise(of: Response.self)
        // On the loop, before the request's writes (which queue behind it).
        channel.eventLoop.execute { collector.expect(promise, maxBody: maxBody, overflow: overflow) }
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        head.headers.add(name: "Host", value: port == 80 ? host : "\(host):\(port)")
        if let body { head.headers.add(name: "Content-Length", value: "\(body.readableBytes)") }
        head.headers.add(name: "User-Agent", value: userAgent)
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        let deadline = channel.eventLoop.scheduleTask(in: timeout) {
            promise.fail(Failure(description: "no answer from \(self.host):\(self.port) within \(timeout.nanoseconds / 1_000_000) ms"))
        }
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        if let body { channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil) }
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        // Waited for in short steps, so a shutdown past its drain deadline
        // does not wait out a request's whole timeout.
        let answer = Answer()
        promise.futureResult.whenComplete { answer.arrive($0) }
        while answer.arrived.wait(timeout: .now() + .milliseconds(100)) == .timedOut {
            if giveUp() {
                promise.fail(Failure(description: "given up at shutdown"))
            }
        }
        do {
            guard let result = answer.result else { throw Failure(description: "no answer") }
            let response = try result.get()
            deadline.cancel()
            if response.headers["Connection"].contains(where: { $0.lowercased() == "close" }) { drop() }
            return response
        } catch {
            deadline.cancel()
            drop()
            throw error
        }
    }

    /// The kept-alive connection, or a new one: waited for in short steps,
    /// so that a shutdown past its drain deadline does not wait out a
    /// connection attempt that is never answered (a peer whose backlog is full).
    private func connection(timeout: TimeAmount, giveUp: () -> Bool) throws -> (Channel, ResponseCollector) {
        if let channel, channel.isActive, let collector { return (channel, collector) }
        drop()
        let collector = ResponseCollector()
        do {
            let connecting = ClientBootstrap(group: group)
                .connectTimeout(timeout)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(collector)
                    }
                }
                .connect(host: host, port: port)
            let done = DispatchSemaphore(value: 0)
            connecting.whenComplete { _ in done.signal() }
            while done.wait(timeout: .now() + .milliseconds(100)) == .timedOut {
                if giveUp() {
                    connecting.whenSuccess { $0.close(promise: nil) }
                    throw Failure(description: "given up at shutdown")
                }
            }
            let channel = try connecting.wait()
            self.channel = channel
            self.collector = collector
            return (channel, collector)
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(description: "cannot connect to \(host):\(port): \(Self.reason(error))")
        }
    }

    /// Why a connection failed, in a few words (`connection refused`),
    /// rather than NIO's description of every address it tried.
    static func reason(_ error: any Error) -> String {
        if let failed = error as? NIOConnectionError {
            if let first = failed.connectionErrors.first { return reason(first.error) }
            if let dns = failed.dnsAAAAError ?? failed.dnsAError { return "the name did not resolve: \(dns)" }
            return "no address to connect to"
        }
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)).lowercased() }
        if case ChannelError.connectTimeout(let after)? = error as? ChannelError {
            return "no connection within \(after.nanoseconds / 1_000_000) ms"
        }
        return "\(error)"
    }

    package func drop() {
        if let channel { channel.close(promise: nil) }
        channel = nil
        collector = nil
    }

    package func close() {
        drop()
    }
}

/// One request's outcome, handed from the event loop to the thread that waits for it.
private final class Answer: Sendable {
    private let outcome = Mutex<Result<HTTPClient.Response, any Error>?>(nil)
    let arrived = DispatchSemaphore(value: 0)

    func arrive(_ result: Result<HTTPClient.Response, any Error>) {
        outcome.withLock { $0 = result }
        arrived.signal()
    }

    var result: Result<HTTPClient.Response, any Error>? { outcome.withLock { $0 } }
}

/// Gathers one answer at a time for `HTTPClient`.
private final class ResponseCollector: ChannelInboundHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    package typealias InboundIn = HTTPClientResponsePart

    private var promise: EventLoopPromise<HTTPClient.Response>?
    private var response = HTTPClient.Response(status: 0, headers: [:], body: [])
    private var maxBody = 0
    private var overflow = HTTPClient.Overflow.truncate

    func expect(_ promise: EventLoopPromise<HTTPClient.Response>, maxBody: Int, overflow: HTTPClient.Overflow) {
        self.promise = promise
        self.maxBody = maxBody
        self.overflow = overflow
        response = HTTPClient.Response(status: 0, headers: [:], body: [])
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            response.status = Int(head.status.code)
            response.headers = head.headers
        case .body(var buffer):
            let room = maxBody - response.body.count
            if buffer.readableBytes > room, overflow == .fail {
                promise?.fail(HTTPClient.Failure(description: "the answer is longer than \(maxBody) bytes"))
                promise = nil
                context.close(promise: nil)
                return
            }
            if room > 0 { response.body += buffer.readBytes(length: min(room, buffer.readableBytes)) ?? [] }
        case .end:
            promise?.succeed(response)
            promise = nil
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise?.fail(closedEarly)
        promise = nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // The connection's end in the middle of an answer reaches the
        // parser first or the channel first, as it happens: said alike.
        let failure = (error as? HTTPParserError) == .invalidEOFState ? closedEarly : HTTPClient.Failure(description: "\(error)")
        promise?.fail(failure)
        promise = nil
        context.close(promise: nil)
    }

    private var closedEarly: HTTPClient.Failure {
        guard response.status != 0 else {
            return HTTPClient.Failure(description: "the server closed the connection before answering", closedBeforeAnswer: true)
        }
        return HTTPClient.Failure(description: "the server closed the connection in the middle of its answer (after \(response.body.count) bytes of its body)",
                                  closedBeforeAnswer: false)
    }
}
