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

    @Test func theCookieCarriesTheTokenAsHexAndNothingElseLetsIn() {
        let access = ConsoleAccess(token: Self.token)
        let hex = ConsoleAccess.hex(Array("the-token-0123456789abcdef".utf8))
        #expect(access.admit(authorization: [], cookie: ["a=1; vigil_token=\(hex); b=2"], peer: "p1", now: 0) == .allowed(.cookie))
        #expect(access.admit(authorization: [], cookie: ["vigil_token=\(hex.uppercased())"], peer: "p1", now: 0) == .allowed(.cookie))
        #expect(access.admit(authorization: ["Bearer the-token-0123456789abcdef"], cookie: [], peer: "p1", now: 0) == .allowed(.bearer))
        // Not the token, not hex, odd, empty, the cookie's name with another: refused.
        for cookie in ["vigil_token=\(hex)00", "vigil_token=zz", "vigil_token=abc", "vigil_token=", "xvigil_token=\(hex)"] {
            guard case .refused(401, _) = access.admit(authorization: [], cookie: [cookie], peer: "p2", now: 0) else {
                Issue.record("\(cookie) let in")
                continue
            }
        }
        // A header and a cookie: the header decides (a wrong header with the right cookie is refused).
        guard case .refused(401, _) = access.admit(authorization: ["Bearer nope-0123456789abcdef"], cookie: ["vigil_token=\(hex)"],
                                                  peer: "p3", now: 0) else {
            Issue.record("a wrong header let in by its cookie")
            return
        }
        // The unix socket: no token, anyone in.
        #expect(ConsoleAccess(token: nil).admit(authorization: [], cookie: [], peer: "local") == .allowed(.unneeded))
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

    @Test func aLogInGivesTheCookieOnlyForTheToken() {
        let access = ConsoleAccess(token: Self.token, limiter: TokenTries(burst: 2, perSecond: 1))
        guard case .success(let cookie?) = access.logIn(body: Array(#"{"token":" the-token-0123456789abcdef\n"}"#.utf8), peer: "p", now: 0) else {
            Issue.record("the token refused")
            return
        }
        #expect(cookie.hasPrefix("vigil_token=\(ConsoleAccess.hex(Array("the-token-0123456789abcdef".utf8)));"))
        #expect(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"))
        for body in [#"{"token":"wrong"}"#, #"{"token":"the-token-0123456789abcdeF"}"#] {
            guard case .failure(let refusal) = access.logIn(body: Array(body.utf8), peer: "p", now: 0), refusal.status == 401 else {
                Issue.record("\(body) not refused with 401")
                continue
            }
        }
        guard case .failure(let limited) = access.logIn(body: Array(#"{"token":"the-token-0123456789abcdef"}"#.utf8), peer: "p", now: 0),
              limited.status == 429 else {
            Issue.record("past its tries, the address was heard")
            return
        }
        guard case .failure(let bad) = access.logIn(body: Array("token=x".utf8), peer: "q", now: 0), bad.status == 400 else {
            Issue.record("a body that is not JSON not refused with 400")
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
        #expect(stream.next().isEmpty, "what was there before the stream is not sent")
        add(2, monitor: "cpu", value: 2)
        add(3, monitor: "mem", severity: .warning, value: 3)
        let text = String(decoding: stream.next(), as: UTF8.self)
        #expect(text.contains("id: 3\nevent: event\ndata: {") && !text.contains("id: 2\n"), "\(text)")
        #expect(text.contains("event: points\ndata: {\"series\":\"\(id)\",\"counter\":false,\"points\":[[2000,2.0]]}\n\n"), "\(text)")
        #expect(text.hasSuffix("\n\n"))
        #expect(stream.next().isEmpty, "nothing sent twice")
        // Resumed after a sequence number (EventSource's Last-Event-ID).
        let resumed = try EventStream(query: ["events": "1"], lastEventID: "1", sinks: api)
        let again = String(decoding: resumed.next(), as: UTF8.self)
        #expect(again.contains("id: 2\n") && again.contains("id: 3\n"), "\(again)")
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
