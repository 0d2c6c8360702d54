import VigilControl
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
        try await request(method, path, body: body, to: ControlEndpoint(address: address), timeout: timeout)
    }

    /// One request to `endpoint`, with its bearer token where it has one.
    ///
    /// The request is written by the connection's event loop the moment it
    /// connects, and the deadline runs there too: a caller whose task is
    /// slow to be scheduled again (a cooperative pool busy with blocking
    /// work) cannot leave an open connection silent until the host's request
    /// deadline closes it unanswered, as the tests once saw after 10 s.
    public static func request(_ method: HTTPMethod, _ path: String, body: [UInt8] = [], to endpoint: ControlEndpoint,
                               timeout: TimeAmount = .seconds(30)) async throws -> Reply {
        let group = MultiThreadedEventLoopGroup.singleton
        let loop = group.next()
        let promise = loop.makePromise(of: Reply.self)
        let address = endpoint.description
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
        head.headers.add(name: "Host", value: "vigil")
        if let token = endpoint.token { head.headers.add(name: "Authorization", value: "Bearer \(token.text)") }
        head.headers.add(name: "Content-Length", value: "\(body.count)")
        head.headers.add(name: "Connection", value: "close")
        let exchange = Exchange(head: head, body: body, promise: promise)
        let deadline = loop.scheduleTask(in: timeout) {
            promise.fail(ControlError("no reply from \(address) within \(timeout.nanoseconds / 1_000_000_000) s"))
        }
        defer { deadline.cancel() }
        let channel: Channel
        do {
            let bootstrap = ClientBootstrap(group: loop)
                .connectTimeout(timeout)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        try channel.pipeline.syncOperations.addHandler(exchange)
                    }
                }
            switch endpoint.target {
            case .unix(let unix): channel = try await bootstrap.connect(unixDomainSocketPath: unix.path).get()
            case .tcp(let tcp): channel = try await bootstrap.connect(to: try SocketAddress(ipAddress: tcp.host, port: tcp.port)).get()
            }
        } catch {
            promise.fail(error)
            let why = Self.reason(error)
            if case .unix = endpoint.target { throw ControlError("cannot reach the control socket \(address): \(why)") }
            throw ControlError("cannot reach the control API at \(address): \(why)")
        }
        defer { channel.close(promise: nil) }
        return try await promise.futureResult.get()
    }
}

extension ControlClient {
    /// Why a connection failed, in the system's words: NIO's description
    /// names its own calls ("connect(descriptor:addr:size:)"), which tell
    /// an operator nothing.
    static func reason(_ error: any Error) -> String {
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)) }
        if let connect = error as? NIOConnectionError, let first = connect.connectionErrors.first {
            return reason(first.error)
        }
        if error is ChannelError, case ChannelError.connectTimeout(let after) = error as! ChannelError {
            return "no connection within \(after.nanoseconds / 1_000_000_000) s"
        }
        return "\(error)"
    }
}

/// One request and its reply on one connection: the request is written
/// when the connection becomes active, the reply collected into `promise`.
private final class Exchange: ChannelInboundHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private let head: HTTPRequestHead
    private let requestBody: [UInt8]
    private let promise: EventLoopPromise<ControlClient.Reply>
    private var status = 0
    private var body: [UInt8] = []
    private var opened: UInt64 = 0

    init(head: HTTPRequestHead, body: [UInt8], promise: EventLoopPromise<ControlClient.Reply>) {
        self.head = head
        self.requestBody = body
        self.promise = promise
    }

    func channelActive(context: ChannelHandlerContext) {
        opened = DispatchTime.now().uptimeNanoseconds
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if !requestBody.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: requestBody)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        context.fireChannelActive()
    }

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
        // Said with what came, for a cut that is hard to see again.
        let waited = (DispatchTime.now().uptimeNanoseconds - opened) / 1_000_000
        let got = status == 0 ? "no answer" : "status \(status) and \(body.count) bytes of its body"
        promise.fail(ControlError("the host closed the connection before replying (\(got), after \(waited) ms)"))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.close(promise: nil)
    }
}

/// Where a client (`vigil ctl`, `vigil top`) reaches a host's control API:
/// its unix socket, or its TCP listener with the bearer token.
public struct ControlEndpoint: Sendable, CustomStringConvertible {
    public enum Target: Sendable {
        case unix(ControlAddress)
        case tcp(ControlTCPAddress)
    }

    public var target: Target
    public var token: ControlToken?

    public init(address: ControlAddress) {
        target = .unix(address)
        token = nil
    }

    public init(tcp: ControlTCPAddress, token: ControlToken?) {
        target = .tcp(tcp)
        self.token = token
    }

    /// `unix:PATH` or `tcp://HOST:PORT`; a TCP address needs `token`.
    public init(parsing text: String, token: () throws -> ControlToken?) throws {
        if text.hasPrefix("tcp://") {
            let address = try ControlTCPAddress(parsing: text)
            guard let token = try token() else {
                throw ControlError("\(address) needs the host's bearer token: --token-file FILE (the host's --control-token-file), or VIGIL_CONTROL_TOKEN")
            }
            self.init(tcp: address, token: token)
        } else if text.hasPrefix("unix:") {
            self.init(address: try ControlAddress(parsing: text))
        } else {
            throw ControlError("a control address is unix:PATH or tcp://HOST:PORT, not '\(text)'")
        }
    }

    public func request(_ method: HTTPMethod, _ path: String, body: [UInt8] = [],
                        timeout: TimeAmount = .seconds(30)) async throws -> ControlClient.Reply {
        try await ControlClient.request(method, path, body: body, to: self, timeout: timeout)
    }

    public var description: String {
        switch target {
        case .unix(let address): address.description
        case .tcp(let address): address.description
        }
    }
}
