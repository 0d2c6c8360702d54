import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import VigilCore
import VigilIsolation

/// A small HTTP/1.1 client for one origin with SwiftNIO's codec: POSTs a
/// body and waits for the answer, on one kept-alive connection that is made
/// again when the server closed it. Called from one sink thread at a time
/// (it blocks that thread, never an event loop).
package final class HTTPPoster: @unchecked Sendable {  // called from one sink thread at a time, which it blocks
    package struct Response {
        var status: Int
        var headers: HTTPHeaders
        var body: [UInt8]
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// The most of an answer kept (an OTLP response is small; an error page may not be).
    static let maxBody = 1 << 20

    let host: String
    let port: Int
    private let group: MultiThreadedEventLoopGroup
    private var channel: Channel?
    private var collector: ResponseCollector?

    init(host: String, port: Int) {
        self.host = host
        self.port = port
        group = MultiThreadedEventLoopGroup.singleton  // the process's one event-loop group, never shut down
    }

    /// One POST; throws on a connection error or past `timeout` (the
    /// connection is then dropped, so a late answer cannot be taken for the
    /// next request's).
    func post(_ path: String, body: ByteBuffer, headers: [(String, String)], timeout: TimeAmount,
              giveUp: () -> Bool = { false }) throws -> Response {
        let (channel, collector) = try connection(timeout: timeout)
        let promise = channel.eventLoop.makePromise(of: Response.self)
        // On the loop, before the request's writes (which queue behind it).
        channel.eventLoop.execute { collector.expect(promise) }
        var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: path)
        head.headers.add(name: "Host", value: port == 80 ? host : "\(host):\(port)")
        head.headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        head.headers.add(name: "User-Agent", value: "vigil/\(vigilVersion)")
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        let deadline = channel.eventLoop.scheduleTask(in: timeout) {
            promise.fail(Failure(description: "no answer from \(self.host):\(self.port) within \(timeout.nanoseconds / 1_000_000) ms"))
        }
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil)
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

    private func connection(timeout: TimeAmount) throws -> (Channel, ResponseCollector) {
        if let channel, channel.isActive, let collector { return (channel, collector) }
        drop()
        let collector = ResponseCollector()
        do {
            let channel = try ClientBootstrap(group: group)
                .connectTimeout(timeout)
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(collector)
                    }
                }
                .connect(host: host, port: port)
                .wait()
            self.channel = channel
            self.collector = collector
            return (channel, collector)
        } catch {
            throw Failure(description: "cannot connect to \(host):\(port): \(error)")
        }
    }

    func drop() {
        if let channel { channel.close(promise: nil) }
        channel = nil
        collector = nil
    }

    func close() {
        drop()
    }
}

/// One request's outcome, handed from the event loop to the sink thread that waits for it.
private final class Answer: Sendable {
    private let outcome = Mutex<Result<HTTPPoster.Response, any Error>?>(nil)
    let arrived = DispatchSemaphore(value: 0)

    func arrive(_ result: Result<HTTPPoster.Response, any Error>) {
        outcome.withLock { $0 = result }
        arrived.signal()
    }

    var result: Result<HTTPPoster.Response, any Error>? { outcome.withLock { $0 } }
}

/// Gathers one answer at a time for `HTTPPoster`.
private final class ResponseCollector: ChannelInboundHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    package typealias InboundIn = HTTPClientResponsePart

    private var promise: EventLoopPromise<HTTPPoster.Response>?
    private var response = HTTPPoster.Response(status: 0, headers: [:], body: [])

    func expect(_ promise: EventLoopPromise<HTTPPoster.Response>) {
        self.promise = promise
        response = HTTPPoster.Response(status: 0, headers: [:], body: [])
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            response.status = Int(head.status.code)
            response.headers = head.headers
        case .body(var buffer):
            let room = HTTPPoster.maxBody - response.body.count
            if room > 0 { response.body += buffer.readBytes(length: min(room, buffer.readableBytes)) ?? [] }
        case .end:
            promise?.succeed(response)
            promise = nil
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise?.fail(HTTPPoster.Failure(description: "the server closed the connection before answering"))
        promise = nil
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise?.fail(HTTPPoster.Failure(description: "\(error)"))
        promise = nil
        context.close(promise: nil)
    }
}
