import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// The control API's client (`vigil ctl`, and the tests): one request on
/// one connection to a host's control socket, with SwiftNIO's HTTP codec.
public enum ControlClient {
    public struct Reply: Sendable {
        public var status: Int
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// The largest reply read.
    static let maxReply = 16 << 20

    public static func request(_ method: HTTPMethod, _ path: String, body: [UInt8] = [], to address: ControlAddress,
                               timeout: TimeAmount = .seconds(30)) async throws -> Reply {
        let group = MultiThreadedEventLoopGroup.singleton
        let promise = group.next().makePromise(of: Reply.self)
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(ReplyCollector(promise: promise))
                    }
                }
                .connect(unixDomainSocketPath: address.path)
                .get()
        } catch {
            promise.fail(error)
            throw ControlError("cannot reach the control socket \(address): \(error)")
        }
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        head.headers.add(name: "Host", value: "vigil")
        head.headers.add(name: "Content-Length", value: "\(body.count)")
        head.headers.add(name: "Connection", value: "close")
        let deadline = channel.eventLoop.scheduleTask(in: timeout) {
            promise.fail(ControlError("no reply from \(address) within \(timeout.nanoseconds / 1_000_000_000) s"))
        }
        channel.write(HTTPClientRequestPart.head(head), promise: nil)
        if !body.isEmpty {
            channel.write(HTTPClientRequestPart.body(.byteBuffer(channel.allocator.buffer(bytes: body))), promise: nil)
        }
        channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
        defer {
            deadline.cancel()
            channel.close(promise: nil)
        }
        return try await promise.futureResult.get()
    }
}

private final class ReplyCollector: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart

    private let promise: EventLoopPromise<ControlClient.Reply>
    private var status = 0
    private var body: [UInt8] = []

    init(promise: EventLoopPromise<ControlClient.Reply>) { self.promise = promise }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            status = Int(head.status.code)
        case .body(var buffer):
            guard body.count + buffer.readableBytes <= ControlClient.maxReply else {
                promise.fail(ControlError("the reply is larger than \(ControlClient.maxReply) bytes"))
                context.close(promise: nil)
                return
            }
            body += buffer.readBytes(length: buffer.readableBytes) ?? []
        case .end:
            promise.succeed(ControlClient.Reply(status: status, body: body))
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(ControlError("the host closed the connection before replying"))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.close(promise: nil)
    }
}

/// Where a client (`vigil ctl`, `vigil top`) reaches a host's control API.
public struct ControlEndpoint: Sendable, CustomStringConvertible {
    public var address: ControlAddress

    public init(address: ControlAddress) { self.address = address }

    public func request(_ method: HTTPMethod, _ path: String, body: [UInt8] = [],
                        timeout: TimeAmount = .seconds(30)) async throws -> ControlClient.Reply {
        try await ControlClient.request(method, path, body: body, to: address, timeout: timeout)
    }

    public var description: String { address.description }
}
