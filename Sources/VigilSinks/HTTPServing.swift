import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The HTTP servers' common ground (the control API, the `prometheus`
/// sink): each accepted connection is counted against `maxConnections` (one
/// more is closed at once, so a client holding connections open cannot take
/// the host's descriptors), closed after `idleTimeout` without traffic, and
/// given SwiftNIO's HTTP/1.1 codec and then `handler()`, which must close
/// the connection on `IdleStateHandler.IdleStateEvent`.
package enum HTTPServing {
    /// A connection must send a whole request within this long of opening,
    /// or of its previous request: a client trickling bytes (slowloris)
    /// cannot hold a slot, which the idle timeout alone would allow.
    package static let requestDeadline = TimeAmount.seconds(10)

    /// Sent outbound by a handler whose answer goes on (a stream of
    /// Server-Sent Events): no deadline for a next request from then on.
    package struct ResponseStreams: Sendable {
        package init() {}
    }

    package static func bootstrap<Handler: ChannelHandler & Sendable>(
        _ group: MultiThreadedEventLoopGroup, maxConnections: Int, idleTimeout: TimeAmount,
        requestDeadline: TimeAmount = HTTPServing.requestDeadline,
        handler: @escaping @Sendable () -> Handler
    ) -> ServerBootstrap {
        let open = OpenConnections(most: maxConnections)
        return ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                guard open.take() else { return channel.close() }
                channel.closeFuture.whenComplete { _ in open.give() }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(allTimeout: idleTimeout))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(RequestDeadlineHandler(deadline: requestDeadline))
                    try channel.pipeline.syncOperations.addHandler(handler())
                }
            }
    }
}

/// The connections a server holds, against its most. Counted on the event
/// loops of the connections, which are several.
private final class OpenConnections: Sendable {
    private let count = Mutex(0)
    private let most: Int

    init(most: Int) { self.most = most }

    /// Counts one more connection; false (not counted) when `most` are open.
    func take() -> Bool {
        count.withLock { count in
            guard count < most else { return false }
            count += 1
            return true
        }
    }

    /// One closed.
    func give() { count.withLock { $0 -= 1 } }
}

/// Closes a connection that has not completed a request within `deadline`
/// of opening or of its previous answer (see `HTTPServing.requestDeadline`).
/// While a complete request is being answered there is no deadline: an
/// answer that takes long (a reload that waits for a monitor to stop) is
/// the handler's to bound, not cut off for the client to read as "no
/// answer".
package final class RequestDeadlineHandler: ChannelDuplexHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    package typealias InboundIn = HTTPServerRequestPart
    package typealias InboundOut = HTTPServerRequestPart
    package typealias OutboundIn = HTTPServerResponsePart
    package typealias OutboundOut = HTTPServerResponsePart

    private let deadline: TimeAmount
    private var timer: Scheduled<Void>?
    /// The answer streams: no deadline any more.
    private var streams = false

    init(deadline: TimeAmount) { self.deadline = deadline }

    package func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        if event is HTTPServing.ResponseStreams {
            streams = true
            timer?.cancel()
            timer = nil
            promise?.succeed()
        } else {
            context.triggerUserOutboundEvent(event, promise: promise)
        }
    }

    private func arm(_ context: ChannelHandlerContext) {
        guard !streams else { return }
        timer?.cancel()
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: deadline) { bound.value.close(promise: nil) }
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { arm(context) }
    }

    package func channelActive(context: ChannelHandlerContext) {
        arm(context)
        context.fireChannelActive()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .end = unwrapInboundIn(data) {
            timer?.cancel()
            timer = nil
        }
        context.fireChannelRead(data)
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let ends = if case .end = unwrapOutboundIn(data) { true } else { false }
        context.write(data, promise: promise)
        if ends { arm(context) }
    }

    package func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        context.fireChannelInactive()
    }
}
