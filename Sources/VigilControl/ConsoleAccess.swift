import Foundation
import Synchronization
import VigilABI

/// Who a request to the control API comes from, and whether it may do what
/// it asks (issue 31). The unix socket's mode and group guard it, so a
/// request there needs nothing. Over TCP a request needs the token: as
/// `Authorization: Bearer TOKEN` (`vigil ctl`, scripts), or as the cookie the
/// console's log-in set (`POST /v1/session`: the token, hex-encoded, in an
/// HttpOnly, SameSite=Strict cookie the page's script never reads). A
/// request the cookie authenticates that changes something must also carry
/// `X-Vigil-CSRF` with the listener's CSRF value, which only a page of this
/// origin can have read (`GET /v1/session`), and an `Origin`, when it says
/// one, of this host.
package struct ConsoleAccess: Sendable {
    /// How a request was let in.
    package enum Credential: String, Sendable {
        /// The unix socket: no token there.
        case unneeded = "none"
        case bearer
        case cookie
    }

    package static let cookieName = "vigil_token"
    package static let csrfHeader = "X-Vigil-CSRF"

    /// The token every TCP request must carry; nil on the unix socket.
    package let token: ControlToken?
    /// This listener's CSRF value: random, for as long as it runs.
    package let csrf: String
    /// Failed tries of the token, per address.
    package let limiter: TokenTries

    package init(token: ControlToken?, limiter: TokenTries = TokenTries()) {
        self.token = token
        self.limiter = limiter
        var random = SystemRandomNumberGenerator()
        csrf = (0..<4).map { _ in String(random.next() as UInt64, radix: 16).leftPadded(to: 16) }.joined()
    }

    /// The answer to a request's credentials: let in (how), or refused (status and why).
    package enum Verdict: Sendable, Equatable {
        case allowed(Credential)
        case refused(Int, String)
    }

    /// Whether a request with these headers, from `peer`, is let in.
    package func admit(authorization: [String], cookie: [String], peer: String, now: Int64 = monotonicMilliseconds()) -> Verdict {
        guard let token else { return .allowed(.unneeded) }
        let fromCookie = Self.cookie(Self.cookieName, in: cookie)
        guard !authorization.isEmpty || fromCookie != nil else {
            return .refused(401, "this control API needs a bearer token: Authorization: Bearer TOKEN (vigil ctl --token-file FILE), or the console's log-in")
        }
        // Past its tries an address is not even heard: its guesses cost nothing and tell nothing.
        guard limiter.mayTry(peer, now: now) else {
            return .refused(429, "too many wrong tokens from \(peer); wait a few seconds")
        }
        if authorization.count == 1, token.accepts(header: authorization[0]) { return .allowed(.bearer) }
        if authorization.isEmpty, let fromCookie, let bytes = Self.unhex(fromCookie), token.matches(bytes) { return .allowed(.cookie) }
        limiter.failed(peer, now: now)
        return .refused(401, authorization.isEmpty ? "the console's session is not valid (the token changed?): log in again"
                                                   : "the bearer token was not accepted")
    }

    /// A log-in (`POST /v1/session` with `{"token": "…"}`): the cookie
    /// that keeps it (nil where no token is needed: the unix socket), or why not.
    package func logIn(body: [UInt8], peer: String, now: Int64 = monotonicMilliseconds()) -> Result<String?, Refusal> {
        guard let token else { return .success(nil) }
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
        return .success(Self.setCookie(value: Self.hex(bytes)))
    }

    package struct Refusal: Error, Sendable {
        package let status: Int
        package let message: String
        init(_ status: Int, _ message: String) {
            self.status = status
            self.message = message
        }
    }

    /// The cookie of a log-in: for the whole origin, never to a script,
    /// never on a request another site starts.
    static func setCookie(value: String) -> String {
        "\(cookieName)=\(value); Path=/; HttpOnly; SameSite=Strict"
    }

    /// The cookie of a log-out: the same, emptied and expired.
    package static let clearCookie = "\(cookieName)=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"

    /// Whether a request the cookie let in may change something: its
    /// `X-Vigil-CSRF` is this listener's, and its `Origin`, when it gives
    /// one, is the host it asked (`Host`).
    package func forgeryCheck(method: String, credential: Credential, csrfHeader: [String], origin: [String], host: [String]) -> String? {
        guard credential == .cookie, !["GET", "HEAD", "OPTIONS"].contains(method) else { return nil }
        guard csrfHeader.count == 1, ConsoleAccess.equal(Array(csrfHeader[0].utf8), Array(csrf.utf8)) else {
            return "a change made with the console's cookie needs the header \(Self.csrfHeader) (GET /v1/session gives it)"
        }
        if let given = origin.first {
            guard let host = host.first, given == "http://\(host)" || given == "https://\(host)" else {
                return "the request's Origin (\(given)) is not this host"
            }
        }
        return nil
    }

    /// The value of cookie `name` in `Cookie` headers.
    static func cookie(_ name: String, in headers: [String]) -> String? {
        for header in headers {
            for pair in header.split(separator: ";") {
                let trimmed = pair.drop { $0 == " " }
                guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals] == name else { continue }
                return String(trimmed[trimmed.index(after: equals)...])
            }
        }
        return nil
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

    static func unhex(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0, chars.count <= ControlToken.maxLength * 2 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: c - 0x30
            case 0x61...0x66: c - 0x61 + 10
            case 0x41...0x46: c - 0x41 + 10
            default: nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let high = nibble(chars[i]), let low = nibble(chars[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
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

private extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
