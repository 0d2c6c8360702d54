import Foundation
import Synchronization
import VigilABI

/// Who a request to the control API comes from, and whether it may do what
/// it asks (issue 31). The unix socket's mode and group guard it, so a
/// request there needs nothing. Over TCP a request needs the token as
/// `Authorization: Bearer TOKEN` (`vigil ctl`, scripts), or the cookie of a
/// console session: `POST /v1/session` with the token opens one, a random
/// id kept by the listener and given to the browser in an HttpOnly,
/// SameSite=Strict cookie (never the token: browsers keep cookies per host,
/// not per port, so another program's page on the same host could read
/// it); `DELETE /v1/session` or 12 idle hours end it. A request the cookie
/// authenticates that changes something must also carry `X-Vigil-CSRF` with
/// the listener's CSRF value, which only a page of this origin can have read
/// (`GET /v1/session`), and an `Origin`, when it says one, of this host.
package struct ConsoleAccess: Sendable {
    /// How a request was let in.
    package enum Credential: String, Sendable {
        /// The unix socket: no token there.
        case unneeded = "none"
        case bearer
        case cookie
    }

    package static let cookieName = "vigil_session"
    package static let csrfHeader = "X-Vigil-CSRF"

    /// The token every TCP request must carry; nil on the unix socket.
    package let token: ControlToken?
    /// This listener's CSRF value: random, for as long as it runs.
    package let csrf: String
    /// Failed tries of the token, per address.
    package let limiter: TokenTries
    /// The console's open sessions.
    package let sessions: ConsoleSessions

    package init(token: ControlToken?, limiter: TokenTries = TokenTries(), sessions: ConsoleSessions = ConsoleSessions()) {
        self.token = token
        self.limiter = limiter
        self.sessions = sessions
        csrf = Self.randomHex(bytes: 32)
    }

    /// `bytes` random bytes as hex.
    static func randomHex(bytes: Int) -> String {
        var random = SystemRandomNumberGenerator()
        return hex((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &random) })
    }

    /// The answer to a request's credentials: let in (how), or refused (status and why).
    package enum Verdict: Sendable, Equatable {
        case allowed(Credential)
        case refused(Int, String)
    }

    /// Whether a request with these headers, from `peer`, is let in. A
    /// session id is looked up, not guessed at (256 random bits): a stale
    /// or planted cookie is refused without counting against the address.
    package func admit(authorization: [String], cookie: [String], peer: String, now: Int64 = monotonicMilliseconds()) -> Verdict {
        guard let token else { return .allowed(.unneeded) }
        if authorization.isEmpty {
            let ids = Self.cookies(Self.cookieName, in: cookie)
            guard !ids.isEmpty else {
                return .refused(401, "this control API needs a bearer token: Authorization: Bearer TOKEN (vigil ctl --token-file FILE), or the console's log-in")
            }
            // Every cookie of the name: a page elsewhere on this host may have planted one more.
            if ids.contains(where: { sessions.valid($0, now: now) }) { return .allowed(.cookie) }
            return .refused(401, "the console's session has ended (logged out, expired, or the host restarted): log in again")
        }
        // Past its tries an address is not even heard: its guesses cost nothing and tell nothing.
        guard limiter.mayTry(peer, now: now) else {
            return .refused(429, "too many wrong tokens from \(peer); wait a few seconds")
        }
        if authorization.count == 1, token.accepts(header: authorization[0]) { return .allowed(.bearer) }
        limiter.failed(peer, now: now)
        return .refused(401, "the bearer token was not accepted")
    }

    /// A log-in (`POST /v1/session` with `{"token": "…"}`, as JSON, from
    /// this origin): the cookie of a new session (nil where no token is
    /// needed: the unix socket), or why not. A request another site's page
    /// could have made (another `Origin` or `Sec-Fetch-Site`, a body that
    /// is not JSON, which a form or a simple fetch sends) is refused before
    /// its token is looked at, so that no page can spend an address's tries.
    package func logIn(body: [UInt8], contentType: [String], origin: [String], fetchSite: [String], host: [String], peer: String,
                       now: Int64 = monotonicMilliseconds()) -> Result<String?, Refusal> {
        guard let token else { return .success(nil) }
        if let why = Self.foreign(origin: origin, fetchSite: fetchSite, host: host) { return .failure(Refusal(403, why)) }
        guard contentType.count == 1, contentType[0].lowercased().split(separator: ";").first?.trimmingCharacters(in: .whitespaces) == "application/json" else {
            return .failure(Refusal(415, "a log-in is a JSON object, sent as Content-Type: application/json: {\"token\": \"…\"}"))
        }
        guard limiter.mayTry(peer, now: now) else { return .failure(Refusal(429, "too many wrong tokens from \(peer); wait a few seconds")) }
        struct Body: Decodable { var token: String }
        guard let given = try? JSONDecoder().decode(Body.self, from: Data(body)) else {
            return .failure(Refusal(400, "a log-in is a JSON object: {\"token\": \"…\"}"))
        }
        let bytes = Array(given.token.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        guard token.matches(bytes) else {
            limiter.failed(peer, now: now)
            return .failure(Refusal(401, "the token was not accepted"))
        }
        return .success(Self.setCookie(value: sessions.open(now: now)))
    }

    /// A log-out: the sessions the cookies name end here, whoever still holds them.
    package func logOut(cookie: [String]) {
        for id in Self.cookies(Self.cookieName, in: cookie) { sessions.close(id) }
    }

    package struct Refusal: Error, Sendable {
        package let status: Int
        package let message: String
        init(_ status: Int, _ message: String) {
            self.status = status
            self.message = message
        }
    }

    /// The cookie of a session: for the whole origin, never to a script,
    /// never on a request another site starts.
    static func setCookie(value: String) -> String {
        "\(cookieName)=\(value); Path=/; HttpOnly; SameSite=Strict"
    }

    /// The cookie of a log-out: the same, emptied and expired.
    package static let clearCookie = "\(cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"

    /// Why a request's `Origin` or `Sec-Fetch-Site` says another site's
    /// page made it; nil when neither does (or neither is given).
    static func foreign(origin: [String], fetchSite: [String], host: [String]) -> String? {
        if let given = origin.first {
            guard let host = host.first, given == "http://\(host)" || given == "https://\(host)" else {
                return "the request's Origin (\(given)) is not this host"
            }
        }
        if let site = fetchSite.first, site != "same-origin", site != "none" {
            return "the request came from another site's page (Sec-Fetch-Site: \(site))"
        }
        return nil
    }

    /// Whether a request the cookie let in may change something: its
    /// `X-Vigil-CSRF` is this listener's, and its `Origin`, when it gives
    /// one, is the host it asked (`Host`).
    package func forgeryCheck(method: String, credential: Credential, csrfHeader: [String], origin: [String], host: [String]) -> String? {
        guard credential == .cookie, !["GET", "HEAD", "OPTIONS"].contains(method) else { return nil }
        guard csrfHeader.count == 1, ConsoleAccess.equal(Array(csrfHeader[0].utf8), Array(csrf.utf8)) else {
            return "a change made with the console's cookie needs the header \(Self.csrfHeader) (GET /v1/session gives it)"
        }
        return Self.foreign(origin: origin, fetchSite: [], host: host)
    }

    /// Every value of cookie `name` in `Cookie` headers, as sent.
    static func cookies(_ name: String, in headers: [String]) -> [String] {
        var found: [String] = []
        for header in headers {
            for pair in header.split(separator: ";") {
                let trimmed = pair.drop { $0 == " " }
                guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == name else { continue }
                found.append(String(trimmed[trimmed.index(after: equals)...]))
                if found.count >= 16 { return found }
            }
        }
        return found
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 15)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Constant time in the content of `a`.
    static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference: UInt8 = a.count == b.count ? 0 : 1
        for i in 0..<b.count { difference |= b[i] ^ (i < a.count ? a[i] : 0) }
        return difference == 0
    }
}

/// Wrong tokens, counted per address in a token bucket: `burst` tries at
/// once, then `perSecond`; past them the address is answered 429 without
/// its token being looked at. At most `maxAddresses` are remembered (the
/// fullest buckets, which have nothing to remember, are forgotten first;
/// when none is full, the longest quiet), so a spray of addresses cannot
/// grow it.
package final class TokenTries: Sendable {
    package let burst: Double
    package let perSecond: Double
    package let maxAddresses: Int
    private let state = Mutex<[String: (tokens: Double, at: Int64)]>([:])
    /// Tries refused by the limit, and tokens refused as wrong.
    package let limited = Atomic<UInt64>(0)
    package let wrong = Atomic<UInt64>(0)

    package init(burst: Double = 20, perSecond: Double = 2, maxAddresses: Int = 1024) {
        self.burst = burst
        self.perSecond = perSecond
        self.maxAddresses = maxAddresses
    }

    private func level(_ entry: (tokens: Double, at: Int64)?, now: Int64) -> Double {
        guard let entry else { return burst }
        return min(burst, entry.tokens + Double(max(0, now - entry.at)) / 1000 * perSecond)
    }

    /// Whether `peer` may try a token now.
    package func mayTry(_ peer: String, now: Int64) -> Bool {
        let ok = state.withLock { level($0[peer], now: now) >= 1 }
        if !ok { limited.add(1, ordering: .relaxed) }
        return ok
    }

    /// `peer` gave a wrong token.
    package func failed(_ peer: String, now: Int64) {
        wrong.add(1, ordering: .relaxed)
        state.withLock { table in
            let tokens = level(table[peer], now: now) - 1
            if table[peer] == nil && table.count >= maxAddresses {
                let full = table.filter { level($0.value, now: now) >= burst }.map(\.key)
                if full.isEmpty {
                    if let quiet = table.min(by: { $0.value.at < $1.value.at })?.key { table[quiet] = nil }
                } else {
                    for key in full { table[key] = nil }
                }
            }
            table[peer] = (max(0, tokens), now)
        }
    }

    /// Addresses remembered now.
    package var addresses: Int { state.withLock { $0.count } }
}

/// Milliseconds of the monotonic clock.
package func monotonicMilliseconds() -> Int64 { monotonicNanoseconds() / 1_000_000 }

/// The console's sessions: random ids, each ended by a log-out or after
/// `idle` without a request; at most `most` at once (the least recently
/// used goes first).
package final class ConsoleSessions: Sendable {
    package static let idle: Int64 = 12 * 3_600_000
    package let most: Int
    private let state = Mutex<[String: Int64]>([:])

    package init(most: Int = 256) { self.most = most }

    /// A new session, at `now` (monotonic ms): its id.
    func open(now: Int64) -> String {
        let id = ConsoleAccess.randomHex(bytes: 32)
        state.withLock { table in
            table = table.filter { now - $0.value < Self.idle }
            if table.count >= most, let oldest = table.min(by: { $0.value < $1.value })?.key { table[oldest] = nil }
            table[id] = now
        }
        return id
    }

    /// Whether `id` is a session now; a use keeps it open.
    func valid(_ id: String, now: Int64) -> Bool {
        guard id.utf8.count == 64 else { return false }
        return state.withLock { table in
            guard let last = table[id] else { return false }
            guard now - last < Self.idle else {
                table[id] = nil
                return false
            }
            table[id] = now
            return true
        }
    }

    func close(_ id: String) { state.withLock { _ = $0.removeValue(forKey: id) } }

    package var count: Int { state.withLock { $0.count } }
}
