import Foundation
import Testing
import VigilABI
import VigilCore
import VigilHistory
@testable import VigilControl

/// Who may ask the control API over TCP (ConsoleAccess), what a stream
/// sends (EventStream), and the console's own readings, in process.
@Suite struct ConsoleAccessTests {
    static let token = try! ControlToken("the-token-0123456789abcdef", from: "test")

    static func logIn(_ access: ConsoleAccess, _ body: String, type: [String] = ["application/json"], origin: [String] = [],
                      site: [String] = [], peer: String = "p", now: Int64 = 0) -> Result<String?, ConsoleAccess.Refusal> {
        access.logIn(body: Array(body.utf8), contentType: type, origin: origin, fetchSite: site, host: ["127.0.0.1:7070"], peer: peer, now: now)
    }

    /// The session's id in a Set-Cookie value.
    static func id(_ cookie: String) -> String {
        String(cookie.dropFirst("vigil_session=".count).prefix { $0 != ";" })
    }

    @Test func aSessionIsARandomIdNeverTheTokenEndedByALogOutOrIdleHours() throws {
        let access = ConsoleAccess(token: Self.token)
        guard case .success(let cookie?) = Self.logIn(access, #"{"token":"the-token-0123456789abcdef"}"#) else {
            Issue.record("the token refused")
            return
        }
        let id = Self.id(cookie)
        #expect(id.count == 64 && !cookie.contains("the-token") && !cookie.contains(ConsoleAccess.hex(Array("the-token-0123456789abcdef".utf8))))
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Path=/"))
        #expect(access.admit(authorization: [], cookie: ["a=1; vigil_session=\(id); b=2"], peer: "p1", now: 1) == .allowed(.cookie))
        // A planted cookie of the same name beside it does not lock the session out.
        #expect(access.admit(authorization: [], cookie: ["vigil_session=00; vigil_session=\(id)"], peer: "p1", now: 2) == .allowed(.cookie))
        // Another id, the token as a cookie, an empty one: refused, and not counted against the address.
        for cookie in ["vigil_session=\(String(id.dropLast()))\(id.last == "0" ? "1" : "0")", "vigil_session=the-token-0123456789abcdef", "vigil_session=",
                       "xvigil_session=\(id)"] {
            guard case .refused(401, _) = access.admit(authorization: [], cookie: [cookie], peer: "p2", now: 3) else {
                Issue.record("\(cookie) let in")
                continue
            }
        }
        #expect(access.limiter.wrong.load(ordering: .relaxed) == 0)
        // Idle 12 hours: ended. A use keeps it open.
        #expect(access.admit(authorization: [], cookie: ["vigil_session=\(id)"], peer: "p1", now: ConsoleSessions.idle - 1) == .allowed(.cookie))
        #expect(access.admit(authorization: [], cookie: ["vigil_session=\(id)"], peer: "p1", now: 2 * ConsoleSessions.idle - 2) == .allowed(.cookie))
        #expect(access.admit(authorization: [], cookie: ["vigil_session=\(id)"], peer: "p1", now: 3 * ConsoleSessions.idle) != .allowed(.cookie))
        // A log-out ends it for whoever holds it.
        guard case .success(let second?) = Self.logIn(access, #"{"token":"the-token-0123456789abcdef"}"#, now: 5) else { return }
        access.logOut(cookie: ["vigil_session=\(Self.id(second))"])
        #expect(access.admit(authorization: [], cookie: ["vigil_session=\(Self.id(second))"], peer: "p1", now: 6) != .allowed(.cookie))
        // The bearer header, and the unix socket.
        #expect(access.admit(authorization: ["Bearer the-token-0123456789abcdef"], cookie: [], peer: "p1", now: 0) == .allowed(.bearer))
        #expect(ConsoleAccess(token: nil).admit(authorization: [], cookie: [], peer: "local") == .allowed(.unneeded))
        // At most `most` sessions: the least recently used goes.
        let few = ConsoleAccess(token: Self.token, sessions: ConsoleSessions(most: 4))
        let ids = (0..<6).compactMap { i -> String? in
            guard case .success(let c?) = Self.logIn(few, #"{"token":"the-token-0123456789abcdef"}"#, now: Int64(i)) else { return nil }
            return Self.id(c)
        }
        #expect(ids.count == 6 && few.sessions.count == 4)
        #expect(few.admit(authorization: [], cookie: ["vigil_session=\(ids[0])"], peer: "p", now: 10) != .allowed(.cookie))
        #expect(few.admit(authorization: [], cookie: ["vigil_session=\(ids[5])"], peer: "p", now: 10) == .allowed(.cookie))
    }

    @Test func aLogInAnotherSitesPageCouldSendIsRefusedUnheard() {
        let access = ConsoleAccess(token: Self.token, limiter: TokenTries(burst: 2, perSecond: 1))
        let wrong = #"{"token":"wrong-0123456789abcdef"}"#
        // A simple fetch or a form: text/plain, or form-encoded; another origin; another site.
        for (type, origin, site) in [(["text/plain"], [String](), [String]()), (["application/x-www-form-urlencoded"], [], []),
                                     ([], [], []), (["application/json"], ["http://127.0.0.1:9999"], []),
                                     (["application/json"], [], ["cross-site"]), (["application/json"], [], ["same-site"])] {
            guard case .failure(let refusal) = Self.logIn(access, wrong, type: type, origin: origin, site: site),
                  refusal.status == 415 || refusal.status == 403 else {
                Issue.record("\(type) \(origin) \(site) heard")
                continue
            }
        }
        #expect(access.limiter.wrong.load(ordering: .relaxed) == 0, "none of them spent the address's tries")
        guard case .success = Self.logIn(access, #"{"token":"the-token-0123456789abcdef"}"#, type: ["application/json; charset=utf-8"],
                                         origin: ["http://127.0.0.1:7070"], site: ["same-origin"]) else {
            Issue.record("the page's own log-in refused")
            return
        }
    }

    @Test func changesTheCookieMakesNeedTheCSRFValueAndThisOrigin() {
        let access = ConsoleAccess(token: Self.token)
        #expect(access.csrf.count == 64 && access.csrf != ConsoleAccess(token: Self.token).csrf)
        let check = { (method: String, how: ConsoleAccess.Credential, csrf: [String], origin: [String]) in
            access.forgeryCheck(method: method, credential: how, csrfHeader: csrf, origin: origin, host: ["127.0.0.1:7070"])
        }
        #expect(check("GET", .cookie, [], []) == nil)
        #expect(check("POST", .bearer, [], ["http://evil.example"]) == nil)
        #expect(check("POST", .cookie, [access.csrf], []) == nil)
        #expect(check("POST", .cookie, [access.csrf], ["http://127.0.0.1:7070"]) == nil)
        #expect(check("POST", .cookie, [], []) != nil)
        #expect(check("DELETE", .cookie, [String(access.csrf.dropLast())], []) != nil)
        #expect(check("POST", .cookie, [access.csrf, access.csrf], []) != nil)
        #expect(check("POST", .cookie, [access.csrf], ["http://127.0.0.1:7071"]) != nil)
        #expect(check("POST", .cookie, [access.csrf], ["null"]) != nil)
    }

    @Test func wrongTokensAreLimitedPerAddressAndTheTableIsBounded() {
        let tries = TokenTries(burst: 3, perSecond: 1, maxAddresses: 8)
        for _ in 0..<3 {
            #expect(tries.mayTry("a", now: 0))
            tries.failed("a", now: 0)
        }
        #expect(!tries.mayTry("a", now: 0))
        #expect(tries.mayTry("b", now: 0), "another address is not held back")
        #expect(!tries.mayTry("a", now: 999))
        #expect(tries.mayTry("a", now: 1000), "one try a second comes back")
        // A spray of addresses: the table stays at its most.
        for i in 0..<10_000 { tries.failed("10.0.\(i / 256).\(i % 256)", now: Int64(i)) }
        #expect(tries.addresses <= 8)
        #expect(tries.wrong.load(ordering: .relaxed) == 10_003)
        #expect(tries.limited.load(ordering: .relaxed) == 2)
    }

    @Test func aLogInGivesASessionOnlyForTheTokenAndLimitsGuesses() {
        let access = ConsoleAccess(token: Self.token, limiter: TokenTries(burst: 2, perSecond: 1))
        guard case .success(.some) = Self.logIn(access, #"{"token":" the-token-0123456789abcdef\n"}"#) else {
            Issue.record("the token refused")
            return
        }
        for body in [#"{"token":"wrong"}"#, #"{"token":"the-token-0123456789abcdeF"}"#] {
            guard case .failure(let refusal) = Self.logIn(access, body), refusal.status == 401 else {
                Issue.record("\(body) not refused with 401")
                continue
            }
        }
        guard case .failure(let limited) = Self.logIn(access, #"{"token":"the-token-0123456789abcdef"}"#), limited.status == 429 else {
            Issue.record("past its tries, the address was heard")
            return
        }
        guard case .failure(let bad) = Self.logIn(access, "token=x", peer: "q"), bad.status == 400 else {
            Issue.record("a body that is not JSON not refused with 400")
            return
        }
        // The unix socket: nothing to log in to, a session needs no cookie.
        guard case .success(nil) = Self.logIn(ConsoleAccess(token: nil), "") else {
            Issue.record("the unix socket asked for a token")
            return
        }
    }

    static func event(_ seq: UInt64, monitor: String, severity: Severity = .info, value: Double) -> Event {
        var event = Event(time: Int64(seq) * 1_000_000_000, monitor: monitor, plugin: monitor, kind: "sample", severity: severity,
                          fields: [Field("v", .double(value))])
        event.seq = seq
        return event
    }

    @Test func aStreamSendsWhatIsNewFilteredAndOnlyOnce() throws {
        let store = HistoryStore()
        let ring = EventRing<Event>(capacity: 100, host: "h")
        let key = StreamKey(monitor: "cpu", kind: "sample")
        func add(_ seq: UInt64, monitor: String, severity: Severity = .info, value: Double) {
            let event = Self.event(seq, monitor: monitor, severity: severity, value: value)
            ring.append([.init(seq: seq, time: event.time, monitor: monitor, kind: "sample", severity: severity.rawValue, size: 100,
                               payload: event)])
            if monitor == "cpu" { store.append(key, time: event.time, fields: [HistoryField("v", .double(value))]) }
        }
        add(1, monitor: "cpu", value: 1)
        let api = HistoryAPI(sinks: [("history", store, ring)])
        let id = try #require(store.series().series.first?.id)
        let stream = try EventStream(query: ["events": "1", "series": id, "severity": "notice"], lastEventID: nil, sinks: api)
        #expect(try #require(stream.next(current: api)).isEmpty, "what was there before the stream is not sent")
        add(2, monitor: "cpu", value: 2)
        add(3, monitor: "mem", severity: .warning, value: 3)
        let text = String(decoding: try #require(stream.next(current: api)), as: UTF8.self)
        #expect(text.contains("id: 3\nevent: event\ndata: {") && !text.contains("id: 2\n"), "\(text)")
        #expect(text.contains("event: points\ndata: {\"series\":\"\(id)\",\"counter\":false,\"points\":[[2000,2.0]]}\n\n"), "\(text)")
        #expect(text.hasSuffix("\n\n"))
        #expect(try #require(stream.next(current: api)).isEmpty, "nothing sent twice")
        // Resumed after a sequence number (EventSource's Last-Event-ID).
        let resumed = try EventStream(query: ["events": "1"], lastEventID: "1", sinks: api)
        let again = String(decoding: try #require(resumed.next(current: api)), as: UTF8.self)
        #expect(again.contains("id: 2\n") && again.contains("id: 3\n"), "\(again)")
        // A reader that fell behind the ring is told what it let go, never skipped silently.
        let behind = try EventStream(query: ["events": "1"], lastEventID: nil, sinks: api)
        for seq in UInt64(4)...150 { add(seq, monitor: "mem", value: Double(seq)) }
        let caught = String(decoding: try #require(behind.next(current: api)), as: UTF8.self)
        #expect(caught.hasPrefix("event: gap\ndata: {\"after\":3,\"resumed_at\":51}\n\n"), "\(caught.prefix(200))")
        #expect(caught.components(separatedBy: "event: event\n").count - 1 == 100)
        // Resumed after a number past the newest (a vigil that started again
        // numbers from 1; a client that says 2^64-1): told so, then served
        // from the newest on, never left silent.
        for (i, asked) in ["99999999", "18446744073709551615"].enumerated() {
            let newest = UInt64(150 + i)
            let ahead = try EventStream(query: ["events": "1"], lastEventID: asked, sinks: api)
            let told = String(decoding: try #require(ahead.next(current: api)), as: UTF8.self)
            #expect(told == "event: resume\ndata: {\"after\":\(asked),\"newest\":\(newest)}\n\n", "\(told)")
            add(newest + 1, monitor: "mem", value: 1)
            let then = String(decoding: try #require(ahead.next(current: api)), as: UTF8.self)
            #expect(then.hasPrefix("id: \(newest + 1)\nevent: event\n") && !then.contains("event: gap"), "\(then)")
            #expect(try #require(ahead.next(current: api)).isEmpty)
        }
        // Its history sink replaced by a reload: the stream ends.
        let replaced = HistoryAPI(sinks: [("history", HistoryStore(), ring)])
        #expect(behind.next(current: replaced) == nil)
        #expect(behind.next(current: HistoryAPI(sinks: [])) == nil)
        // Refused: a bad severity, an unknown series, too many, a garbage Last-Event-ID.
        #expect(throws: HistoryAPI.Refused.self) { try EventStream(query: ["severity": "loud"], lastEventID: nil, sinks: api) }
        #expect(throws: HistoryAPI.Refused.self) { try EventStream(query: ["series": "9.9"], lastEventID: nil, sinks: api) }
        #expect(throws: HistoryAPI.Refused.self) {
            try EventStream(query: ["series": (0...64).map { _ in id }.joined(separator: ",")], lastEventID: nil, sinks: api)
        }
        #expect(throws: HistoryAPI.Refused.self) { try EventStream(query: [:], lastEventID: "-1", sinks: api) }
        #expect(throws: HistoryAPI.Refused.self) { try EventStream(query: [:], lastEventID: nil, sinks: HistoryAPI(sinks: [])) }
    }

    @Test func aMonitorsSectionIsItsKeyAndWhatIsIndentedUnderIt() {
        let lines = """
        monitors:
          cpu:
            plugin: cpu

            # per cpu
            options: { per_cpu: true }
          load: { plugin: load }
        sinks: {}
        """.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(ControlAPI.section(lines, at: 2) == "  cpu:\n    plugin: cpu\n\n    # per cpu\n    options: { per_cpu: true }\n")
        #expect(ControlAPI.section(lines, at: 7) == "  load: { plugin: load }\n")
        #expect(ControlAPI.section(lines, at: 0) == "" && ControlAPI.section(lines, at: 99) == "")
    }
}
