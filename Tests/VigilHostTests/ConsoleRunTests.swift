import Foundation
import Testing
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilControl

/// The console's side of the control API (issue 31) through the real
/// binary on TCP: its files served to anyone, the log-in into an HttpOnly,
/// SameSite=Strict cookie and the CSRF check of changes it makes, tokens
/// guessed in bulk, and `/v1/stream` with its bounds (streams at once, a
/// client that never reads). The browser's view of it all is
/// ConsoleBrowserTests.
@Suite(.serialized, .startsProcesses, .offThePool) struct ConsoleRunTests {
    static let token = ControlTCPRunTests.right

    /// `method target` with `headers` and `body`, on a connection of its own: status, head and body.
    static func ask(_ host: ControlTCPRunTests.Host, _ method: String, _ target: String, headers: [String] = [],
                    body: String = "") throws -> (status: Int, head: String, body: String) {
        var request = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(host.port)\r\nConnection: close\r\n"
        for header in headers { request += header + "\r\n" }
        request += "Content-Length: \(body.utf8.count)\r\n\r\n" + body
        return TestEnv.parts(ofReply: try host.raw(request))
    }

    static func header(_ name: String, in head: String) -> String? {
        for line in head.split(separator: "\r\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == name.lowercased() { return parts[1].trimmingCharacters(in: .whitespaces) }
        }
        return nil
    }

    @Test func theConsolesFilesAreServedToAnyoneAndNothingElseIs() throws {
        let host = try ControlTCPRunTests.Host()
        defer { _ = host.stop() }
        let page = try Self.ask(host, "GET", "/")
        #expect(page.status == 200)
        #expect(page.body.contains("<script src=\"/console.js\""), "\(page.body.prefix(400))")
        #expect(Self.header("Content-Type", in: page.head) == "text/html; charset=utf-8")
        let policy = try #require(Self.header("Content-Security-Policy", in: page.head))
        #expect(policy.contains("script-src 'self'") && policy.contains("frame-ancestors 'none'"))
        #expect(!page.body.contains("beat"), "the page holds no data")
        // Debian's dygraphs, byte for byte, and gzipped when asked.
        let library = "/usr/share/javascript/dygraphs/dygraph.min.js"
        let plain = try Self.ask(host, "GET", "/dygraph.min.js")
        #expect(plain.status == 200)
        if let debian = FileManager.default.contents(atPath: library) {
            #expect(plain.body == String(decoding: debian, as: UTF8.self))
        } else {
            Issue.record("\(library) is missing: scripts/test-deps installs libjs-dygraphs")
        }
        let zipped = try Self.ask(host, "GET", "/dygraph.min.js", headers: ["Accept-Encoding: gzip, br"])
        #expect(Self.header("Content-Encoding", in: zipped.head) == "gzip")
        let length = Int(Self.header("Content-Length", in: zipped.head) ?? "") ?? 0
        #expect(length > 0 && length < plain.body.utf8.count / 2, "\(length)")
        // Asked again with its ETag: 304 and no body.
        let etag = try #require(Self.header("ETag", in: plain.head))
        let again = try Self.ask(host, "GET", "/dygraph.min.js", headers: ["If-None-Match: \(etag)"])
        #expect(again.status == 304 && again.body.isEmpty)
        // The licences: Vigil's and dygraphs'.
        let licences = try Self.ask(host, "GET", "/licenses.txt")
        #expect(licences.body.contains("Apache License") && licences.body.contains("dygraphs is MIT-licenced"))
        // Everything else needs the token, files included when not asked with GET.
        #expect(try Self.ask(host, "GET", "/v1/status").status == 401)
        #expect(try Self.ask(host, "POST", "/console.js").status == 401)
        #expect(try Self.ask(host, "GET", "/v1/stream").status == 401)
        #expect(try Self.ask(host, "GET", "/index.htm").status == 401)
    }

    @Test func aLogInOpensASessionInAnHttpOnlyStrictCookieAndItsChangesNeedTheCSRFValue() throws {
        let host = try ControlTCPRunTests.Host(monitors: "beat: { plugin: heartbeat, interval: 1h, isolation: none }")
        defer { _ = host.stop() }
        let json = ["Content-Type: application/json"]
        // A wrong token, a body that is not JSON, an empty body: refused, no cookie.
        let wrong = try Self.ask(host, "POST", "/v1/session", headers: json, body: #"{"token":"not-it-0123456789abcdef"}"#)
        #expect(wrong.status == 401 && Self.header("Set-Cookie", in: wrong.head) == nil)
        #expect(try Self.ask(host, "POST", "/v1/session", headers: json, body: "token=x").status == 400)
        #expect(try Self.ask(host, "POST", "/v1/session", headers: json).status == 400)
        // What another site's page could send: not JSON, or from elsewhere: refused unheard.
        let body = "{\"token\":\"\(Self.token)\"}"
        #expect(try Self.ask(host, "POST", "/v1/session", headers: ["Content-Type: text/plain"], body: body).status == 415)
        #expect(try Self.ask(host, "POST", "/v1/session", headers: json + ["Origin: http://127.0.0.1:9"], body: body).status == 403)
        #expect(try Self.ask(host, "POST", "/v1/session", headers: json + ["Sec-Fetch-Site: cross-site"], body: body).status == 403)
        // Not logged in is an answer, not an error.
        let out = try Self.ask(host, "GET", "/v1/session")
        #expect(out.status == 200 && out.body.contains(#""auth":"required""#) && !out.body.contains("csrf"), "\(out)")
        // The right one: a session's id (never the token) in an HttpOnly, SameSite=Strict cookie, and the CSRF value.
        let right = try Self.ask(host, "POST", "/v1/session", headers: json, body: body)
        #expect(right.status == 200)
        let setCookie = try #require(Self.header("Set-Cookie", in: right.head))
        let id = String(setCookie.dropFirst("vigil_session=".count).prefix { $0 != ";" })
        #expect(setCookie.hasPrefix("vigil_session=") && id.count == 64 && setCookie.contains("HttpOnly")
                && setCookie.contains("SameSite=Strict") && setCookie.contains("Path=/"), "\(setCookie)")
        #expect(!setCookie.contains(Self.token) && !setCookie.contains(Self.token.utf8.map { String(format: "%02x", $0) }.joined()))
        let session = try #require(try JSONSerialization.jsonObject(with: Data(right.body.utf8)) as? [String: String])
        let csrf = try #require(session["csrf"])
        #expect(csrf.count == 64 && session["auth"] == "cookie")
        // The cookie reads, beside a planted one of the same name.
        let cookie = "Cookie: vigil_session=00; theme=dark; vigil_session=\(id)"
        #expect(try Self.ask(host, "GET", "/v1/status", headers: [cookie]).body.contains("\"beat\""))
        let asked = try Self.ask(host, "GET", "/v1/session", headers: [cookie])
        #expect(asked.status == 200 && asked.body.contains(csrf))
        // A change with the cookie alone (what a forged form would send): refused, nothing done.
        let forged = try Self.ask(host, "POST", "/v1/monitors/beat/stop", headers: [cookie])
        #expect(forged.status == 403 && forged.body.contains("X-Vigil-CSRF"), "\(forged.body)")
        #expect(try Self.ask(host, "POST", "/v1/monitors/beat/stop", headers: [cookie, "X-Vigil-CSRF: \(csrf.dropLast())\(csrf.last == "0" ? "1" : "0")"]).status == 403)
        // With the CSRF value but from another origin: refused.
        let foreign = try Self.ask(host, "POST", "/v1/monitors/beat/poll", headers: [cookie, "X-Vigil-CSRF: \(csrf)", "Origin: http://evil.example"])
        #expect(foreign.status == 403 && foreign.body.contains("Origin"))
        #expect(try Self.ask(host, "GET", "/v1/status", headers: [cookie]).body.contains(#""state":"running""#))
        // With both, from this origin: done.
        let done = try Self.ask(host, "POST", "/v1/monitors/beat/poll",
                                headers: [cookie, "X-Vigil-CSRF: \(csrf)", "Origin: http://127.0.0.1:\(host.port)"])
        #expect(done.status == 202, "\(done.body)")
        // The bearer token needs no CSRF value: no browser sends it on its own.
        #expect(try Self.ask(host, "POST", "/v1/monitors/beat/poll", headers: ["Authorization: Bearer \(Self.token)"]).status == 202)
        // The token itself as a cookie is no session.
        #expect(try Self.ask(host, "GET", "/v1/status", headers: ["Cookie: vigil_session=\(Self.token)"]).status == 401)
        // The log-out clears the cookie and ends the session for whoever kept a copy.
        let loggedOut = try Self.ask(host, "DELETE", "/v1/session", headers: [cookie, "X-Vigil-CSRF: \(csrf)"])
        #expect(loggedOut.status == 200 && (Self.header("Set-Cookie", in: loggedOut.head) ?? "").contains("Max-Age=0"))
        #expect(try Self.ask(host, "GET", "/v1/status", headers: [cookie]).status == 401)
        // 405 says what the path takes.
        let put = try Self.ask(host, "PUT", "/v1/status", headers: ["Authorization: Bearer \(Self.token)"])
        #expect(put.status == 405 && Self.header("Allow", in: put.head) == "GET")
    }

    @Test func aTokenGuessedTenThousandTimesIsHeardTwentyTimesAndTheHostServesOn() throws {
        let host = try ControlTCPRunTests.Host(monitors: "beat: { plugin: heartbeat, interval: 100ms, isolation: none }")
        defer { _ = host.stop() }
        let started = Date()
        var statuses: [Int: Int] = [:]
        for i in 0..<10_000 {
            // Each guess on a connection of its own, as a guesser would.
            let guess = String(format: "guess-%016d", i)
            let request = "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(guess)\r\nConnection: close\r\n\r\n"
            let reply = TestEnv.parts(ofReply: try host.raw(request))
            statuses[reply.status, default: 0] += 1
        }
        let seconds = Date().timeIntervalSince(started)
        // 20 at once, then 2 a second: the rest are answered 429 unheard.
        let heard = statuses[401] ?? 0
        #expect(heard >= 20 && Double(heard) <= 20 + 2 * seconds + 2, "\(statuses) in \(seconds) s")
        #expect(statuses[401, default: 0] + statuses[429, default: 0] == 10_000, "\(statuses)")
        // The host ran on: its monitor polled all along, and the right token is heard again once the address has a try.
        Thread.sleep(forTimeInterval: 1)
        let status = try Self.ask(host, "GET", "/v1/status", headers: ["Authorization: Bearer \(Self.token)"])
        #expect(status.status == 200, "\(status)")
        let metrics = try TestEnv.unixHTTP(socket: host.dir + "/vigil.sock", "GET", "/metrics").body
        #expect(metrics.contains("vigil_control_tokens_refused_total{reason=\"wrong\"} \(heard)"), "\(metrics)")
        #expect(metrics.contains("vigil_control_tokens_refused_total{reason=\"rate_limited\"} \(statuses[429] ?? 0)"))
        let output = host.stop()
        #expect(output.status == 0, "\(output.stderr)")
    }

    /// A client of `/v1/stream`: connected and asked; reads what comes until `until` says enough or `seconds` pass.
    final class StreamClient {
        let fd: Int32
        var text = ""

        init(port: Int, target: String, headers: [String] = [cookieHeader], receiveBuffer: Int32? = nil,
             connectTimeout: Double = 5) throws {
            fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
            // Linux's connect gives up after the send timeout: a full accept queue cannot hold the test.
            var timeout = timeval(tv_sec: Int(connectTimeout), tv_usec: Int((connectTimeout - Double(Int(connectTimeout))) * 1e6))
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else {
                close(fd)
                throw TestFailure("connect: errno \(errno)")
            }
            let request = "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAccept: text/event-stream\r\n"
                + headers.map { $0 + "\r\n" }.joined() + "\r\n"
            _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        }

        /// Streams here ask with the bearer token; the console's cookie is the browser test's.
        static let cookieHeader = "Authorization: Bearer \(ConsoleRunTests.token)"

        /// Reads until `until(text)` or `seconds`; whether `until` said yes.
        @discardableResult
        func read(for seconds: Double, until: (String) -> Bool = { _ in false }) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            var buffer = [UInt8](repeating: 0, count: 65536)
            while Date() < deadline {
                if until(text) { return true }
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&pfd, 1, 100) > 0 else { continue }
                let n = Glibc.read(fd, &buffer, buffer.count)
                if n <= 0 { return until(text) }
                text += String(decoding: buffer[0..<n], as: UTF8.self)
            }
            return until(text)
        }

        /// Whether the host closed the connection (read gives 0 or an error) within `seconds`, reading what comes.
        func closed(within seconds: Double) -> Bool {
            let deadline = Date().addingTimeInterval(seconds)
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while Date() < deadline {
                var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&pfd, 1, 100) > 0 else { continue }
                if Glibc.read(fd, &buffer, buffer.count) <= 0 { return true }
            }
            return false
        }

        deinit { close(fd) }
    }

    @Test func theStreamSendsNewEventsAndPointsAsTheyCome() throws {
        let host = try ControlTCPRunTests.Host(monitors: "beat: { plugin: heartbeat, interval: 1h, isolation: none }",
                                               sinks: "history: { type: history }")
        defer { _ = host.stop() }
        // The start's poll, once the history sink has written it (under the suite's load, not at once).
        var series = ""
        var ids: [String] = []
        _ = SinkRunTests.waitUntil(10) {
            series = (try? TestEnv.unixHTTP(socket: host.dir + "/vigil.sock", "GET", "/v1/series?monitor=beat").body) ?? ""
            let list = (try? JSONSerialization.jsonObject(with: Data(series.utf8))) as? [String: Any]
            ids = ((list?["series"] as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String }
            return !ids.isEmpty
        }
        #expect(!ids.isEmpty, "\(series)")
        let stream = try StreamClient(port: host.port, target: "/v1/stream?events=1&monitor=beat&series=\(ids.joined(separator: ","))")
        #expect(stream.read(for: 5) { $0.contains(": vigil\n\n") }, "\(stream.text)")
        #expect(stream.text.hasPrefix("HTTP/1.1 200 OK\r\n") && stream.text.contains("Content-Type: text/event-stream"))
        // A poll: its events and its points arrive within 2 s, and only they
        // (the start's poll came before the stream).
        let status = { try TestEnv.unixHTTP(socket: host.dir + "/vigil.sock", "GET", "/v1/status").body }
        let eventsOf = { (text: String) -> Int in
            let all = (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])?["monitors"] as? [[String: Any]]
            return (all?.first { $0["name"] as? String == "beat" }?["events"] as? Int) ?? -1
        }
        let before = eventsOf(try status())
        let asked = Date()
        #expect(try TestEnv.unixHTTP(socket: host.dir + "/vigil.sock", "POST", "/v1/monitors/beat/poll").status == 202)
        #expect(stream.read(for: 5) { $0.contains("event: event\ndata: {") && $0.contains("event: points\ndata: {\"series\":") },
                "\(stream.text)")
        #expect(Date().timeIntervalSince(asked) < 2, "\(Date().timeIntervalSince(asked)) s")
        #expect(stream.text.contains("\"monitor\":\"beat\""))
        stream.read(for: 1.2)
        let made = eventsOf(try status()) - before
        #expect(made > 0 && stream.text.components(separatedBy: "event: event\n").count - 1 == made, "\(made): \(stream.text)")
        // Bad asks are answered, not streamed.
        let tooMany = (0..<65).map { "\($0).0" }.joined(separator: ",")
        #expect(try Self.ask(host, "GET", "/v1/stream?series=\(tooMany)", headers: [StreamClient.cookieHeader]).status == 400)
        #expect(try Self.ask(host, "GET", "/v1/stream?series=999.9", headers: [StreamClient.cookieHeader]).status == 404)
        #expect(try Self.ask(host, "GET", "/v1/stream?severity=loud", headers: [StreamClient.cookieHeader]).status == 400)
    }

    @Test func aStreamWhoseHistorySinkAReloadReplacedIsToldSoAndEnded() throws {
        let host = try ControlTCPRunTests.Host(monitors: "beat: { plugin: heartbeat, interval: 1h, isolation: none }",
                                               sinks: "history: { type: history }")
        defer { _ = host.stop() }
        let stream = try StreamClient(port: host.port, target: "/v1/stream?events=1")
        #expect(stream.read(for: 5) { $0.contains(": vigil\n\n") }, "\(stream.text)")
        // The history sink changed (its retention): the reload replaces it,
        // and the stream, whose ring was that sink's, says so and ends.
        let manifest = host.dir + "/vigil.yaml"
        let text = try String(contentsOfFile: manifest, encoding: .utf8)
        try TestEnv.write(text.replacingOccurrences(of: "history: { type: history }", with: "history: { type: history, retention: 30m }"),
                          to: manifest)
        let reload = try TestEnv.unixHTTP(socket: host.dir + "/vigil.sock", "POST", "/v1/reload")
        #expect(reload.status == 200, "\(reload.body)")
        #expect(stream.read(for: 5) { $0.contains("event: reset\ndata: {\"reason\":\"the history sink was replaced or removed by a reload\"}") },
                "\(stream.text)")
        #expect(stream.closed(within: 5))
        // A new stream reads the new sink.
        let again = try StreamClient(port: host.port, target: "/v1/stream?events=1")
        #expect(again.read(for: 5) { $0.contains(": vigil\n\n") }, "\(again.text)")
    }

    @Test func streamsAreBoundedAClientThatNeverReadsIsDroppedAndTheHostGoesOn() throws {
        // 5,000 events a second of 16 fields: more than a stalled client can be kept for.
        let host = try ControlTCPRunTests.Host(
            monitors: "flood: { plugin: flood, isolation: none, options: { count: 0, rate: 5000, fields: 16 } }",
            sinks: "history: { type: history }\nout: { type: null }", for: "300s")
        defer { _ = host.stop() }
        // A client that never reads, with a small window.
        let stalled = try StreamClient(port: host.port, target: "/v1/stream?events=1", receiveBuffer: 4096)
        // 32 streams at once; the 33rd and later are refused with 503.
        var streams: [StreamClient] = []
        for _ in 0..<31 { streams.append(try StreamClient(port: host.port, target: "/v1/stream?events=1&monitor=none")) }
        for stream in streams { #expect(stream.read(for: 5) { $0.contains(": vigil\n\n") }, "\(stream.text)") }
        let refused = try Self.ask(host, "GET", "/v1/stream", headers: [StreamClient.cookieHeader])
        #expect(refused.status == 503 && refused.body.contains("at most 32 streams"), "\(refused)")
        // The stalled client is dropped once its unread data passes the
        // buffer (seen by the host's figure: it never reads to see it), and
        // the stream's end is there once it does read.
        let metrics = { try TestEnv.unixHTTP(socket: host.dir + "/vigil.sock", "GET", "/metrics").body }
        #expect(SinkRunTests.waitUntil(20) { (try? metrics())?.contains("vigil_control_streams_dropped_total 1\n") ?? false },
                "a client that never reads is still served: \((try? metrics()) ?? "")")
        #expect(stalled.closed(within: 20))
        // 1,000 connections at once: each served, refused or closed; the host answers on after.
        var opened: [StreamClient] = []
        for _ in 0..<1000 {
            if let client = try? StreamClient(port: host.port, target: "/v1/stream?events=1", connectTimeout: 0.2) { opened.append(client) }
        }
        #expect(opened.count > 100, "\(opened.count) of 1,000 connected")
        opened.removeAll()
        streams.removeAll()
        // Every stream's slot is given back.
        #expect(SinkRunTests.waitUntil(10) { (try? metrics())?.contains("vigil_control_streams 0\n") ?? false }, "\((try? metrics()) ?? "")")
        let figures = try metrics()
        // (Those of the 1,000 that had a stream and did not read it may have been dropped too.)
        let dropped = figures.split(separator: "\n").first { $0.hasPrefix("vigil_control_streams_dropped_total ") }
            .flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
        #expect(dropped >= 1, "\(figures)")
        #expect(!figures.contains("vigil_control_streams_refused_total 0\n"))
        // And a new stream is served.
        let later = try StreamClient(port: host.port, target: "/v1/stream?events=1")
        #expect(later.read(for: 5) { $0.contains("event: event") }, "\(later.text.prefix(500))")
        let status = try Self.ask(host, "GET", "/v1/health", headers: ["Authorization: Bearer \(Self.token)"])
        #expect(status.status == 200 || status.status == 503)
    }

    @Test func aQueryForABillionPointsAndAMatchOfEverythingAreBounded() throws {
        let host = try ControlTCPRunTests.Host(monitors: "flood: { plugin: flood, isolation: none, options: { count: 0, rate: 2000, fields: 4, entities: 1500 } }",
                                               sinks: "history: { type: history }", for: "300s")
        defer { _ = host.stop() }
        let bearer = ["Authorization: Bearer \(Self.token)"]
        #expect(SinkRunTests.waitUntil(20) {
            ((try? Self.ask(host, "GET", "/v1/series?limit=1000", headers: bearer).body) ?? "").contains("\"more\":true")
        })
        // Everything matched: 1,000 by default, 10,000 at most, and `more` says so.
        let all = try Self.ask(host, "GET", "/v1/series?monitor=*&kind=*&field=*", headers: bearer)
        let list = try #require(try JSONSerialization.jsonObject(with: Data(all.body.utf8)) as? [String: Any])
        #expect((list["series"] as? [Any])?.count == 1000 && list["more"] as? Bool == true)
        #expect(try Self.ask(host, "GET", "/v1/series?limit=10001", headers: bearer).status == 400)
        // A billion points asked for (every ms of 11 days): at most 11,000 come back.
        let id = try #require(((list["series"] as? [[String: Any]])?.first?["id"]) as? String)
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        let started = Date()
        let huge = try Self.ask(host, "GET", "/v1/query?series=\(id)&from=\(now - 1_000_000_000)&to=\(now)&step=1", headers: bearer)
        #expect(Date().timeIntervalSince(started) < 2)
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(huge.body.utf8)) as? [String: Any])
        #expect((answer["points"] as? [Any])?.count ?? .max <= 11_000, "\(huge.body.prefix(300))")
        #expect((answer["step_ms"] as? Int ?? 0) >= 1, "\(huge.body.prefix(300))")
        // Times past what an Int64 holds are refused, not wrapped.
        #expect(try Self.ask(host, "GET", "/v1/query?series=\(id)&from=-99999999999999999999d", headers: bearer).status == 400)
        #expect(try Self.ask(host, "GET", "/v1/query?series=\(id)&from=\(Int64.min)&to=\(Int64.max)&step=\(Int64.max)", headers: bearer).status == 200)
    }

    @Test func conditionsTheManifestAndSparklinesSayWhatRuns() throws {
        let host = try ControlRunTests.Host("""
              beat:
                plugin: heartbeat
                interval: 200ms
                isolation: none
                thresholds:
                  count: { warning: { above: 1000000 } }
            """, sink: "history: { type: history }\nrules:\n  beating: { condition: \"beat.count >= 1\", severity: notice }")
        defer { _ = host.stop() }
        let get = { (target: String) throws -> [String: Any] in
            let reply = try TestEnv.unixHTTP(socket: host.socket, "GET", target)
            return try #require(try JSONSerialization.jsonObject(with: Data(reply.body.utf8)) as? [String: Any], "\(target): \(reply)")
        }
        // The rule fired (when is said), the threshold is nominal with its value.
        var conditions: [String: Any] = [:]
        #expect(SinkRunTests.waitUntil(10) {
            conditions = (try? get("/v1/conditions")) ?? [:]
            let threshold = (conditions["thresholds"] as? [[String: Any]])?.first
            return threshold?["value"] != nil
        }, "\(conditions)")
        let rule = try #require((conditions["rules"] as? [[String: Any]])?.first)
        #expect(rule["name"] as? String == "beating" && rule["condition"] as? String == "beat.count >= 1")
        #expect(rule["active"] as? Bool == true && rule["severity"] as? String == "notice")
        #expect((rule["last_fired"] as? String)?.hasSuffix("Z") == true && rule["last_fired"] as? String == rule["last_change"] as? String)
        let threshold = try #require((conditions["thresholds"] as? [[String: Any]])?.first)
        #expect(threshold["monitor"] as? String == "beat" && threshold["field"] as? String == "count" && threshold["state"] as? String == "nominal")
        #expect((threshold["warning"] as? [String: Any])?["direction"] as? String == "above")
        // The manifest as read, and the monitor's own lines of it.
        var manifest = try get("/v1/manifest")
        let files = try #require(manifest["files"] as? [[String: String]])
        #expect(files.first?["path"] == host.dir + "/vigil.yaml")
        #expect(files.first?["text"] == (try String(contentsOfFile: host.dir + "/vigil.yaml", encoding: .utf8)))
        let section = try #require((manifest["monitors"] as? [String: [String: Any]])?["beat"])
        #expect(section["text"] as? String == """
              beat:
                plugin: heartbeat
                interval: 200ms
                isolation: none
                thresholds:
                  count: { warning: { above: 1000000 } }

            """, "\(section)")
        #expect(section["line"] as? Int == 3)
        #expect(manifest["last_reload"] == nil)
        // After a reload, the last reload: when, why, what.
        #expect(try TestEnv.unixHTTP(socket: host.socket, "POST", "/v1/reload").status == 200)
        manifest = try get("/v1/manifest")
        let reload = try #require(manifest["last_reload"] as? [String: Any])
        #expect(reload["reason"] as? String == "asked over the control API")
        #expect((reload["result"] as? [String: Any])?["applied"] as? Bool == true)
        #expect(((reload["result"] as? [String: Any])?["monitors"] as? [String: [String]])?["unchanged"] == ["beat"])
        // The rule kept its state across the reload: it did not fire again.
        let after = try #require((try get("/v1/conditions")["rules"] as? [[String: Any]])?.first)
        #expect(after["last_fired"] as? String == rule["last_fired"] as? String)
        // Sparklines: the beat's count, per step.
        var lines: [String: Any] = [:]
        #expect(SinkRunTests.waitUntil(10) {
            lines = (try? get("/v1/sparklines?from=-1m&step=1s")) ?? [:]
            return (((lines["monitors"] as? [String: [String: Any]])?["beat"])?["points"] as? [Any])?.count ?? 0 >= 2
        }, "\(lines)")
        let beat = try #require((lines["monitors"] as? [String: [String: Any]])?["beat"])
        #expect(beat["field"] as? String == "count" && lines["step_ms"] as? Int == 1000)
        // The status has the host's own figures.
        let process = try #require(try get("/v1/status")["process"] as? [String: Any])
        #expect((process["rss_bytes"] as? Int ?? 0) > 1 << 20 && (process["threads"] as? Int ?? 0) > 2 && process["cpu_s"] as? Double != nil)
    }
}

