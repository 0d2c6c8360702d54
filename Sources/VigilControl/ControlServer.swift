import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import VigilABI
import VigilIsolation
import VigilRuntime
import VigilSinks

/// The control API's HTTP/1.1 server on a unix socket (`vigil run
/// --control unix:PATH`), with SwiftNIO's HTTP codec. One event-loop thread,
/// asleep in epoll until a request comes: no wake-ups at idle.
///
/// The socket file is claimed as a listen sink's is (a lock beside it, a
/// stale socket replaced, one listening refused), bound 0600 and then opened
/// to its group (0660), optionally another group than the host's.
public struct ControlAddress: Sendable, Equatable, CustomStringConvertible {
    public var path: String

    /// `unix:PATH`.
    public init(parsing text: String) throws {
        guard text.hasPrefix("unix:"), text.count > 5 else {
            throw ControlError("a control address is unix:PATH, not '\(text)'")
        }
        path = String(text.dropFirst(5))
    }

    public init(path: String) { self.path = path }

    /// `$VIGIL_STATE_DIR/vigil.sock`; under systemd, the unit's
    /// `RuntimeDirectory=` (`$RUNTIME_DIRECTORY/vigil.sock`: /run/vigil for
    /// the packaged unit, which runs as the user vigil); as root
    /// `/run/vigil/vigil.sock`; else `$XDG_RUNTIME_DIR/vigil/vigil.sock`;
    /// else none.
    public static func standard(environment: [String: String] = ProcessInfo.processInfo.environment,
                                isRoot: Bool = geteuid() == 0) -> ControlAddress? {
        if let dir = environment["VIGIL_STATE_DIR"], !dir.isEmpty { return ControlAddress(path: dir + "/vigil.sock") }
        // systemd gives a colon-separated list when the unit names several.
        if let dirs = environment["RUNTIME_DIRECTORY"], let dir = dirs.split(separator: ":").first, !dir.isEmpty {
            return ControlAddress(path: dir + "/vigil.sock")
        }
        if isRoot { return ControlAddress(path: "/run/vigil/vigil.sock") }
        if let dir = environment["XDG_RUNTIME_DIR"], !dir.isEmpty { return ControlAddress(path: dir + "/vigil/vigil.sock") }
        return nil
    }

    /// Where `vigil ctl` asks by default: this user's standard socket where
    /// it exists, else the packaged service's `/run/vigil/vigil.sock` where
    /// that exists (the service's group may use it), else the standard one
    /// (to be refused by name).
    public static func forClient(environment: [String: String] = ProcessInfo.processInfo.environment, isRoot: Bool = geteuid() == 0,
                                 exists: (String) -> Bool = { FileManager.default.fileExists(atPath: $0) }) -> ControlAddress? {
        let own = standard(environment: environment, isRoot: isRoot)
        if let own, exists(own.path) { return own }
        let service = ControlAddress(path: "/run/vigil/vigil.sock")
        return exists(service.path) ? service : own
    }

    public var description: String { "unix:\(path)" }
}

public struct ControlError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

package final class ControlServer: Service, @unchecked Sendable {  // immutable after init
    /// The largest request body read; past it, 413.
    static let maxBody = 1 << 20
    /// Connections open at once; one more is closed at once.
    static let maxConnections = 64
    /// A connection with no traffic this long is closed.
    static let idleTimeout = TimeAmount.seconds(30)

    /// The unix socket served; nil for a TCP listener.
    let address: ControlAddress?
    /// Where it listens, as the log says it.
    let shown: String
    let api: ControlAPI
    let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private let channel: Channel
    private let pathLock: SocketPathLock?

    /// Binds now, so that a socket that cannot be had is known before the
    /// run starts.
    init(address: ControlAddress, group groupName: String?, api: ControlAPI, logger: Logger) throws {
        self.address = address
        self.shown = address.description
        self.api = api
        self.logger = logger
        let pathLock = try SocketPathLock.claim(address.path)
        self.pathLock = pathLock
        let fd = try Sockets.listen(.unix(path: address.path), backlog: 16)
        var gid: gid_t = getegid()
        if let groupName {
            guard let entry = getgrnam(groupName) else {
                close(fd)
                unlink(address.path)
                throw ControlError("control socket \(address): no group '\(groupName)'")
            }
            gid = entry.pointee.gr_gid
        }
        guard chown(address.path, geteuid(), gid) == 0 || gid == getegid(), chmod(address.path, 0o660) == 0 else {
            let why = String(cString: strerror(errno))
            close(fd)
            unlink(address.path)
            throw ControlError("control socket \(address): cannot give it to its group: \(why)")
        }
        group = MultiThreadedEventLoopGroup.singleton  // the process's one event-loop group, never shut down
        do {
            channel = try Self.bootstrap(group, api: api, token: nil)
                .withBoundSocket(fd)
                .wait()
        } catch {
            close(fd)
            unlink(address.path)
            throw ControlError("control socket \(address): \(error)")
        }
    }

    /// The control API on TCP (`--control-tcp`): every request must carry
    /// the listener's bearer token. Binds now; port 0 takes a free port,
    /// which the log says.
    init(tcp listener: ControlTCPListener, api: ControlAPI, logger: Logger) throws {
        address = nil
        pathLock = nil
        self.api = api
        self.logger = logger
        group = MultiThreadedEventLoopGroup.singleton  // the process's one event-loop group, never shut down
        do {
            let socketAddress = try SocketAddress(ipAddress: listener.address.host, port: listener.address.port)
            channel = try Self.bootstrap(group, api: api, token: listener.token)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .serverChannelOption(.backlog, value: 16)
                .bind(to: socketAddress)
                .wait()
        } catch {
            throw ControlError("control API on \(listener.address): \(error)")
        }
        let port = channel.localAddress?.port ?? listener.address.port
        shown = "\(ControlTCPAddress(host: listener.address.host, port: port)) (bearer token from \(listener.tokenFile))"
    }

    /// What each accepted connection gets: at most `maxConnections` open at
    /// once (one more is closed at once), idle ones closed, HTTP/1.1, the API.
    private static func bootstrap(_ group: MultiThreadedEventLoopGroup, api: ControlAPI, token: ControlToken?) -> ServerBootstrap {
        HTTPServing.bootstrap(group, maxConnections: maxConnections, idleTimeout: idleTimeout) {
            ControlHTTPHandler(api: api, token: token)
        }
    }

    package func run() async throws {
        logger.info("control API on \(shown)")
        try? await gracefulShutdown()
        try? await channel.close()
        if let address { unlink(address.path) }
        pathLock?.release()
    }
}

/// One connection: a request's head and body, then the API's answer.
private final class ControlHTTPHandler: ChannelInboundHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    package typealias InboundIn = HTTPServerRequestPart
    package typealias OutboundOut = HTTPServerResponsePart

    private let api: ControlAPI
    /// The bearer token every request must carry (TCP); nil: none (the unix
    /// socket, which its mode and group guard).
    private let token: ControlToken?
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    /// Why the current request is refused before it reaches the API; its body is not kept.
    private var unauthorized: String?

    init(api: ControlAPI, token: ControlToken?) {
        self.api = api
        self.token = token
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = []
            tooLarge = false
            unauthorized = nil
            if let token {
                let given = h.headers["Authorization"]
                if given.isEmpty {
                    unauthorized = "this control API needs a bearer token: Authorization: Bearer TOKEN (vigil ctl --token-file FILE)"
                } else if given.count > 1 || !token.accepts(header: given[0]) {
                    unauthorized = "the bearer token was not accepted"
                }
            }
        case .body(var buffer):
            if unauthorized != nil {
                // Not read into memory: the request is refused whatever it says.
            } else if body.count + buffer.readableBytes > ControlServer.maxBody {
                tooLarge = true
                body = []
            } else if !tooLarge {
                body += buffer.readBytes(length: buffer.readableBytes) ?? []
            }
        case .end:
            guard let head else { return }
            self.head = nil
            let request = ControlRequest(method: head.method.rawValue, uri: head.uri, body: body)
            body = []
            let promise = context.eventLoop.makePromise(of: ControlResponse.self)
            if let why = unauthorized {
                promise.succeed(.error(401, why))
            } else if tooLarge {
                promise.succeed(.error(413, "a request body is at most \(ControlServer.maxBody) bytes"))
            } else {
                let api = api
                promise.completeWithTask { await api.handle(request) }
            }
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            promise.futureResult.whenSuccess { response in
                let (handler, context) = bound.value
                handler.respond(response, to: head, context: context)
            }
        }
    }

    private func respond(_ response: ControlResponse, to head: HTTPRequestHead, context: ChannelHandlerContext) {
        var out = HTTPResponseHead(version: head.version, status: HTTPResponseStatus(statusCode: response.status))
        out.headers.add(name: "Content-Type", value: response.contentType)
        out.headers.add(name: "Content-Length", value: "\(response.body.count)")
        // A refused client gets no second try on this connection.
        let keepAlive = head.isKeepAlive && response.status != 401
        if response.status == 401 { out.headers.add(name: "WWW-Authenticate", value: "Bearer realm=\"vigil\"") }
        if !keepAlive { out.headers.add(name: "Connection", value: "close") }
        // A client that does not read its answers (pipelining requests) gets
        // no more of them: the connection closes rather than queue them.
        guard context.channel.isWritable else {
            context.close(promise: nil)
            return
        }
        context.write(wrapOutboundOut(.head(out)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: response.body)))), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { bound.value.close(promise: nil) }
        }
    }
}

/// The control API of a run, as `vigil run` asks for it: the unix socket
/// (`--control`, and the group it is opened to) and TCP (`--control-tcp`).
public struct ControlOptions: ControlPlane {
    /// The socket; nil: none.
    public var address: ControlAddress?
    public var group: String?
    /// Whether a socket that cannot be had ends the run (it was asked for by
    /// name) or is noted in the log (the standard place).
    public var required = false
    /// TCP as well, with its token; nil: none.
    public var tcp: ControlTCPListener?

    public init(address: ControlAddress?, group: String? = nil, required: Bool = false, tcp: ControlTCPListener? = nil) {
        self.address = address
        self.group = group
        self.required = required
        self.tcp = tcp
    }

    public func services(for runtime: VigilRuntime, logger: Logger) throws -> [any Service] {
        let api = ControlAPI(runtime: runtime)
        // TCP first: an address that cannot be had ends the run before the
        // unix socket is claimed, so nothing is left behind.
        let tcpServer = try tcp.map { try ControlServer(tcp: $0, api: api, logger: logger) }
        var services: [any Service] = []
        if let address {
            do {
                services.append(try ControlServer(address: address, group: group, api: api, logger: logger))
            } catch {
                if required { throw error }
                // A warning: `vigil ctl` will reach whatever holds the standard
                // socket, another vigil perhaps, and the operator must know.
                logger.warning("no control API: \(error); give --control unix:PATH for one of this run's own")
            }
        }
        if let tcpServer { services.append(tcpServer) }
        return services
    }
}
