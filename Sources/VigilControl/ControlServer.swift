import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization
import VigilABI
import VigilConsole
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
        let fd = try Sockets.listen(.unix(path: address.path), backlog: HTTPServing.backlog)
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
                .serverChannelOption(.backlog, value: HTTPServing.backlog)
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
        let access = ConsoleAccess(token: token, limiter: api.figures.tokenTries)
        return HTTPServing.bootstrap(group, maxConnections: maxConnections, idleTimeout: idleTimeout) {
            ControlHTTPHandler(api: api, access: access)
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

/// One connection: a request's head and body, then the API's answer; or
/// the console's files; or, for `GET /v1/stream`, Server-Sent Events until
/// the client goes (or is too slow, and is dropped).
private final class ControlHTTPHandler: ChannelInboundHandler, @unchecked Sendable {  // NIO calls a handler on its channel's event loop only
    package typealias InboundIn = HTTPServerRequestPart
    package typealias OutboundOut = HTTPServerResponsePart

    private let api: ControlAPI
    /// Who may ask: the token over TCP, nothing on the unix socket.
    private let access: ConsoleAccess
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false
    /// Why the current request is refused before it reaches the API; its body is not kept.
    private var refused: (status: Int, message: String)?
    /// How the current request was let in (nil: it was not; only `GET /v1/session` goes on so).
    private var credential: ConsoleAccess.Credential? = .unneeded
    /// Whether this connection serves a stream (and nothing else from now on).
    private var streaming = false
    /// The stream's ticks with nothing to send since it last sent.
    private var quietTicks = 0

    init(api: ControlAPI, access: ConsoleAccess) {
        self.api = api
        self.access = access
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if streaming {
            streaming = false
            api.figures.streamEnded()
        }
        context.fireChannelInactive()
    }

    /// Paths anyone may ask for: the console's files (no data in them),
    /// the log-in, and whether one is logged in (the page's first question).
    private static func isPublic(_ head: HTTPRequestHead, path: String) -> Bool {
        (head.method == .GET && ConsoleAssets.asset(at: path) != nil) || (head.method == .POST && path == "/v1/session")
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            guard !streaming else { return }  // a stream's client has nothing more to ask
            head = h
            body = []
            tooLarge = false
            refused = nil
            credential = .unneeded
            let path = String(h.uri.prefix { $0 != "?" })
            defer {
                // A body declared past the limit, of a request not refused
                // already: refused on its word, before any of it is read.
                if self.head != nil, let declared = h.headers["Content-Length"].first.flatMap({ Int($0) }), declared > ControlServer.maxBody {
                    self.head = nil
                    tooLarge = true
                    respond(.error(413, "a request body is at most \(ControlServer.maxBody) bytes"), to: h, context: context)
                }
            }
            guard !Self.isPublic(h, path: path) else { return }
            switch access.admit(authorization: h.headers["Authorization"], cookie: h.headers["Cookie"], peer: peer(context)) {
            case .refused where h.method == .GET && path == "/v1/session":
                credential = nil  // answered: not in
            case .refused(let status, let why):
                refused = (status, why)
                // Answered now, the connection closed: no byte of its body is
                // waited for (a client that declares 100 MB and sends none
                // would hold the answer until the request deadline).
                self.head = nil
                respond(.error(status, why), to: h, context: context)
            case .allowed(let how):
                credential = how
                if let why = access.forgeryCheck(method: h.method.rawValue, credential: how, csrfHeader: h.headers[ConsoleAccess.csrfHeader],
                                                 origin: h.headers["Origin"], host: h.headers["Host"]) {
                    refused = (403, why)
                }
            }
        case .body(var buffer):
            if refused != nil || streaming {
                // Not read into memory: the request is refused whatever it says.
            } else if body.count + buffer.readableBytes > ControlServer.maxBody {
                // Answered at once, the connection closed: the rest is not read.
                if !tooLarge, let head {
                    self.head = nil
                    respond(.error(413, "a request body is at most \(ControlServer.maxBody) bytes"), to: head, context: context)
                }
                tooLarge = true
                body = []
            } else if !tooLarge {
                body += buffer.readBytes(length: buffer.readableBytes) ?? []
            }
        case .end:
            guard let head, !streaming else { return }
            self.head = nil
            let request = ControlRequest(method: head.method.rawValue, uri: head.uri, body: body)
            body = []
            if let refused {
                respond(.error(refused.status, refused.message), to: head, context: context)
            } else if tooLarge {
                respond(.error(413, "a request body is at most \(ControlServer.maxBody) bytes"), to: head, context: context)
            } else if head.method == .GET, let asset = ConsoleAssets.asset(at: request.path) {
                serve(asset, to: head, context: context)
            } else if request.path == "/v1/session" {
                respond(session(request, head: head, context: context), to: head, context: context)
            } else if request.path == "/v1/stream" && head.method == .GET {
                startStream(request, head: head, context: context)
            } else {
                let promise = context.eventLoop.makePromise(of: ControlResponse.self)
                let api = api
                promise.completeWithTask { await api.handle(request) }
                let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                promise.futureResult.whenSuccess { response in
                    let (handler, context) = bound.value
                    handler.respond(response, to: head, context: context)
                }
            }
        }
    }

    private func peer(_ context: ChannelHandlerContext) -> String {
        context.channel.remoteAddress?.ipAddress ?? "local"
    }

    // MARK: - the console's session

    /// `GET /v1/session`: who is in, and the CSRF value for changes;
    /// `POST`: a log-in with the token, kept in a cookie; `DELETE`: a log-out.
    private func session(_ request: ControlRequest, head: HTTPRequestHead, context: ChannelHandlerContext) -> ControlResponse {
        switch request.method {
        case "GET":
            // Not being in is an answer, not an error: the page asks this first.
            guard let credential else { return .json(200, ["auth": "required"]) }
            return .json(200, ["csrf": access.csrf, "auth": credential.rawValue])
        case "POST":
            switch access.logIn(body: request.body, contentType: head.headers["Content-Type"], origin: head.headers["Origin"],
                                fetchSite: head.headers["Sec-Fetch-Site"], host: head.headers["Host"], peer: peer(context)) {
            case .success(let cookie?):
                var response = ControlResponse.json(200, ["csrf": access.csrf, "auth": "cookie"])
                response.headers.append(("Set-Cookie", cookie))
                return response
            case .success(nil):
                return .json(200, ["csrf": access.csrf, "auth": "none"])
            case .failure(let refusal):
                return .error(refusal.status, refusal.message)
            }
        case "DELETE":
            access.logOut(cookie: head.headers["Cookie"])
            var response = ControlResponse.json(200, ["status": "logged out"])
            response.headers.append(("Set-Cookie", ConsoleAccess.clearCookie))
            return response
        default:
            var response = ControlResponse.error(405, "\(request.method) /v1/session: GET, POST (log in) or DELETE (log out)")
            response.headers.append(("Allow", "GET, POST, DELETE"))
            return response
        }
    }

    // MARK: - the console's files

    private func serve(_ asset: ConsoleAssets.Asset, to head: HTTPRequestHead, context: ChannelHandlerContext) {
        var response = ControlResponse(status: 200, contentType: asset.contentType, body: asset.bytes)
        response.headers = [("ETag", asset.etag), ("Cache-Control", "no-cache"), ("Vary", "Accept-Encoding"),
                            ("Content-Security-Policy", ConsoleAssets.contentSecurityPolicy)]
        if head.headers["If-None-Match"].contains(where: { $0.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == asset.etag } }) {
            response.status = 304
            response.body = []
        } else if let gzipped = asset.gzipped,
                  head.headers["Accept-Encoding"].contains(where: { $0.lowercased().contains("gzip") }) {
            response.body = gzipped
            response.headers.append(("Content-Encoding", "gzip"))
        }
        respond(response, to: head, context: context)
    }

    // MARK: - /v1/stream

    private func startStream(_ request: ControlRequest, head: HTTPRequestHead, context: ChannelHandlerContext) {
        let events: EventStream
        do throws(HistoryAPI.Refused) {
            events = try EventStream(query: request.query, lastEventID: head.headers["Last-Event-ID"].first, sinks: api.historyAPI)
        } catch {
            respond(error.response, to: head, context: context)
            return
        }
        guard api.figures.streamStarted() else {
            respond(.error(503, "at most \(ControlFigures.maxStreams) streams at once; try again later"), to: head, context: context)
            return
        }
        streaming = true
        // The request is whole: no deadline for the next, and a bounded
        // send buffer, past which the client is dropped.
        context.triggerUserOutboundEvent(HTTPServing.ResponseStreams(), promise: nil)
        _ = context.channel.setOption(.writeBufferWaterMark, value: .init(low: ControlFigures.streamBuffer / 4, high: ControlFigures.streamBuffer))
        var out = HTTPResponseHead(version: head.version, status: .ok)
        out.headers.add(name: "Content-Type", value: "text/event-stream")
        out.headers.add(name: "Cache-Control", value: "no-store")
        out.headers.add(name: "X-Content-Type-Options", value: "nosniff")
        context.write(wrapOutboundOut(.head(out)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: "retry: 2000\n: vigil\n\n")))), promise: nil)
        let bound = NIOLoopBound((self, context, events), eventLoop: context.eventLoop)
        let task = context.eventLoop.scheduleRepeatedTask(initialDelay: ControlFigures.streamTick, delay: ControlFigures.streamTick) { task in
            let (handler, context, events) = bound.value
            guard handler.streaming else {
                task.cancel()
                return
            }
            guard var bytes = events.next(current: handler.api.historyAPI) else {
                // Its history sink was replaced or removed by a reload: the client asks again.
                task.cancel()
                let end = "event: reset\ndata: {\"reason\":\"the history sink was replaced or removed by a reload\"}\n\n"
                context.writeAndFlush(handler.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: end)))))
                    .whenComplete { _ in bound.value.1.close(promise: nil) }  // on the channel's loop, as the write's future is
                return
            }
            if bytes.isEmpty {
                handler.quietTicks += 1
                // A comment now and then keeps the connection (and proxies) from timing it out.
                guard Int64(handler.quietTicks) * ControlFigures.streamTick.nanoseconds >= 15_000_000_000 else { return }
                bytes = Array(": ping\n\n".utf8)
            }
            handler.quietTicks = 0
            guard context.channel.isWritable else {
                handler.api.figures.streamsDropped.add(1, ordering: .relaxed)
                task.cancel()
                context.close(promise: nil)
                return
            }
            context.writeAndFlush(handler.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: bytes)))), promise: nil)
        }
        context.channel.closeFuture.whenComplete { _ in task.cancel() }
    }

    // MARK: - answers

    private func respond(_ response: ControlResponse, to head: HTTPRequestHead, context: ChannelHandlerContext) {
        var out = HTTPResponseHead(version: head.version, status: HTTPResponseStatus(statusCode: response.status))
        out.headers.add(name: "Content-Type", value: response.contentType)
        out.headers.add(name: "Content-Length", value: "\(response.body.count)")
        out.headers.add(name: "X-Content-Type-Options", value: "nosniff")
        for (name, value) in response.headers { out.headers.add(name: name, value: value) }
        if !response.headers.contains(where: { $0.0 == "Cache-Control" }) { out.headers.add(name: "Cache-Control", value: "no-store") }
        // A refused client gets no second try on this connection.
        let keepAlive = head.isKeepAlive && response.status != 401 && response.status != 429 && response.status != 413
        if response.status == 401 && access.token != nil { out.headers.add(name: "WWW-Authenticate", value: "Bearer realm=\"vigil\"") }
        if response.status == 429 { out.headers.add(name: "Retry-After", value: "5") }
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

/// The control API's own figures, for its `/metrics`: the streams of
/// `/v1/stream` (at most `maxStreams` at once, each with a send buffer of
/// `streamBuffer` bytes, past which its client is dropped) and the tokens
/// refused.
package final class ControlFigures: Sendable {
    package static let maxStreams = 32
    package static let streamBuffer = 256 << 10
    /// How often a stream looks for what is new.
    package static let streamTick = TimeAmount.milliseconds(500)

    package let streams = Atomic<Int>(0)
    package let streamsRefused = Atomic<UInt64>(0)
    package let streamsDropped = Atomic<UInt64>(0)
    /// Wrong tokens, per address (the TCP listener's).
    package let tokenTries = TokenTries()

    package init() {}

    /// One more stream, if there is room.
    func streamStarted() -> Bool {
        var current = streams.load(ordering: .relaxed)
        while current < Self.maxStreams {
            let (exchanged, found) = streams.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = found
        }
        streamsRefused.add(1, ordering: .relaxed)
        return false
    }

    func streamEnded() { streams.subtract(1, ordering: .relaxed) }

    /// The figures in Prometheus' text format.
    func exposition() -> [UInt8] {
        var text = "# HELP vigil_control_streams Clients of the control API's /v1/stream connected now.\n"
        text += "# TYPE vigil_control_streams gauge\nvigil_control_streams \(streams.load(ordering: .relaxed))\n"
        text += "# HELP vigil_control_streams_refused_total Clients of /v1/stream refused: \(Self.maxStreams) were connected.\n"
        text += "# TYPE vigil_control_streams_refused_total counter\nvigil_control_streams_refused_total \(streamsRefused.load(ordering: .relaxed))\n"
        text += "# HELP vigil_control_streams_dropped_total Clients of /v1/stream dropped for reading too slowly.\n"
        text += "# TYPE vigil_control_streams_dropped_total counter\nvigil_control_streams_dropped_total \(streamsDropped.load(ordering: .relaxed))\n"
        text += "# HELP vigil_control_tokens_refused_total Requests over TCP refused for their token: wrong, or not looked at (too many wrong from the address).\n"
        text += "# TYPE vigil_control_tokens_refused_total counter\n"
        text += "vigil_control_tokens_refused_total{reason=\"wrong\"} \(tokenTries.wrong.load(ordering: .relaxed))\n"
        text += "vigil_control_tokens_refused_total{reason=\"rate_limited\"} \(tokenTries.limited.load(ordering: .relaxed))\n"
        return Array(text.utf8)
    }
}
