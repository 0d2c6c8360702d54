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

    /// The listen backlog of the HTTP servers: connections the kernel
    /// completes before the event loop accepts them. A client that opens
    /// connections in a burst fills a short one within a millisecond, and
    /// every SYN past it (`vigil ctl`'s too) waits a second for its
    /// retransmission; the connection cap is `OpenConnections`' to keep.
    package static let backlog: Int32 = 256

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
                guard open.take(channel) else { return channel.close() }
                let id = ObjectIdentifier(channel)
                channel.closeFuture.whenComplete { _ in open.give(id) }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(allTimeout: idleTimeout))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(RequestDeadlineHandler(deadline: requestDeadline) { open.asked(id) })
                    try channel.pipeline.syncOperations.addHandler(handler())
                }
            }
    }
}

/// The connections a server holds, against its most. Counted on the event
/// loops of the connections, which are several.
///
/// At the most, a new connection takes the place of the oldest one that has
/// not asked anything yet, however young: a client that keeps connections
/// open and silent, or opens new ones faster than any grace would let go
/// of them, pushes out its own, never one that asks the moment it connects
/// (`vigil ctl`, Prometheus) unless all the others arrived after it and
/// before its first bytes. Without a silent one, the new one is closed.
private final class OpenConnections: Sendable {
    private struct State {
        var count = 0
        /// Connections that have not sent a request yet, with when they opened.
        var silent: [ObjectIdentifier: (channel: Channel, opened: NIODeadline)] = [:]
    }

    private let state = Mutex(State())
    private let most: Int

    init(most: Int) { self.most = most }

    /// Counts `channel`; false (not counted) when `most` are open and each
    /// has asked.
    func take(_ channel: Channel) -> Bool {
        let now = NIODeadline.now()
        let evicted: Channel? = state.withLock { state in
            var evicted: Channel?
            if state.count >= most {
                guard let oldest = state.silent.min(by: { $0.value.opened < $1.value.opened }) else { return nil }
                state.silent[oldest.key] = nil
                evicted = oldest.value.channel
            }
            state.count += 1
            state.silent[ObjectIdentifier(channel)] = (channel, now)
            return evicted ?? channel
        }
        guard let evicted else { return false }
        if evicted !== channel { evicted.close(promise: nil) }
        return true
    }

    /// The connection sent a request: it keeps its place.
    func asked(_ id: ObjectIdentifier) { state.withLock { _ = $0.silent.removeValue(forKey: id) } }

    /// One closed.
    func give(_ id: ObjectIdentifier) {
        state.withLock { state in
            state.count -= 1
            state.silent[id] = nil
        }
    }
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
    /// Told at the first request's head.
    private let asked: () -> Void
    private var timer: Scheduled<Void>?
    /// The answer streams: no deadline any more.
    private var streams = false

    init(deadline: TimeAmount, asked: @escaping () -> Void = {}) {
        self.deadline = deadline
        self.asked = asked
    }

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
        switch unwrapInboundIn(data) {
        case .head:
            asked()
        case .end:
            timer?.cancel()
            timer = nil
        case .body:
            break
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
