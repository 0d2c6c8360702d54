import Foundation
import Testing
@testable import VigilForeign

/// statsd's line protocol as Etsy's statsd and DogStatsD clients send it,
/// what is refused, and the quantile sketch's stated error.
@Suite struct StatsdFormatTests {
    struct Seen: Equatable {
        var name: String
        var kind: Statsd.Kind
        var value: Double
        var delta: Bool
        var member: String
        var rate: Double
        var tags: [String]
    }

    static func parse(_ text: String) -> ([Seen], Statsd.Counts) {
        var seen: [Seen] = []
        let counts = Array(text.utf8).withUnsafeBytes { bytes in
            Statsd.parse(bytes) { m in
                seen.append(Seen(name: String(decoding: m.name, as: UTF8.self), kind: m.kind, value: m.value, delta: m.delta,
                                 member: m.kind == .set ? String(decoding: m.member, as: UTF8.self) : "", rate: m.sampleRate,
                                 tags: m.tags.map { String(decoding: $0.key, as: UTF8.self) + "=" + String(decoding: $0.value, as: UTF8.self) }))
            }
        }
        return (seen, counts)
    }

    @Test func everyTypeAndItsExtras() {
        let (seen, counts) = Self.parse("""
            page.views:1|c
            api.calls:3|c|@0.1|#env:prod,region:eu,canary
            temp:21.5|g
            temp:-1.5|g
            temp:+2|g
            latency:12.25|ms|@0.5
            size:1024|h|#env:dev
            dist:7|d
            users:alice|s
            packed:1:2:3|ms
            stamped:5|c|T1656581400|c:abc123

            """)
        #expect(counts == { var c = Statsd.Counts(); c.metrics = 13; return c }())
        #expect(seen[0] == Seen(name: "page.views", kind: .counter, value: 1, delta: false, member: "", rate: 1, tags: []))
        #expect(seen[1] == Seen(name: "api.calls", kind: .counter, value: 3, delta: false, member: "", rate: 0.1,
                                tags: ["env=prod", "region=eu", "canary="]))
        #expect(seen[2].kind == .gauge && !seen[2].delta && seen[3].delta && seen[3].value == -1.5 && seen[4].delta && seen[4].value == 2)
        #expect(seen[5].kind == .timer && seen[5].value == 12.25 && seen[5].rate == 0.5)
        #expect(seen[6].kind == .histogram && seen[6].tags == ["env=dev"] && seen[7].kind == .distribution)
        #expect(seen[8] == Seen(name: "users", kind: .set, value: .nan, delta: false, member: "alice", rate: 1, tags: []) || seen[8].member == "alice")
        #expect(seen[9...11].map(\.value) == [1, 2, 3])
        #expect(seen[12].name == "stamped" && seen[12].value == 5)
    }

    @Test(arguments: [
        "no_bar:1", "novalue:|c", ":1|c", "x:1|q", "x:1|", "x:abc|c", "x:1|c|@0", "x:1|c|@1.5", "x:1|c|@x", "x:nan|g", "x:inf|g",
        "x:1e999|g", "x:1|c|zzz", "bad name:1|c", "x:1::2|c", "x:0x10|c",
    ])
    func badLinesAreCounted(_ line: String) {
        let (seen, counts) = Self.parse(line + "\ngood:1|c\n")
        #expect(seen.map(\.name) == ["good"], "\(line)")
        #expect(counts.badLines == 1 && counts.metrics == 1, "\(line): \(counts)")
    }

    @Test func eventsAndServiceChecksAreUnsupportedNotBad() {
        let (_, counts) = Self.parse("_e{5,4}:title|text\n_sc|check|0\nok:1|c")
        #expect(counts.unsupported == 2 && counts.badLines == 0 && counts.metrics == 1)
    }

    @Test func numbersAreReadExactly() {
        for text in ["0", "1", "-0.5", "3.14159", "123456789012345678", "0.000001", "1e-7", "2.5E+3", "99999999999999999999999"] {
            let (seen, _) = Self.parse("n:\(text)|g")
            #expect(seen.first?.value == Double(text), "\(text)")
        }
    }

    @Test func garbageNeverTraps() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("ab:|@#,.cgmshd0123456789+-e\n\r _{}".utf8)
        for _ in 0..<5000 {
            let bytes = (0..<Int.random(in: 0..<120, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            bytes.withUnsafeBytes { _ = Statsd.parse($0) { _ in } }
        }
        let long = [UInt8](repeating: UInt8(ascii: "a"), count: 100_000) + Array(":1|c".utf8)
        long.withUnsafeBytes { #expect(Statsd.parse($0) { _ in }.badLines == 1) }
    }

    /// Every quantile within the stated 1 % of the exact one, on uniform,
    /// log-normal-like and signed data; min and max exact; buckets bounded.
    @Test func quantilesAreWithinTheStatedError() {
        var generator = SystemRandomNumberGenerator()
        for shape in 0..<3 {
            var sketch = QuantileSketch(relativeAccuracy: 0.01)
            var values: [Double] = []
            for _ in 0..<100_000 {
                let u = Double.random(in: 0..<1, using: &generator)
                let v = shape == 0 ? u * 1000 : shape == 1 ? exp(u * 20 - 5) : (u - 0.3) * 50
                values.append(v)
                sketch.add(v)
            }
            values.sort()
            #expect(sketch.count == 100_000 && sketch.min == values.first && sketch.max == values.last)
            for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999] {
                let exact = values[Int((q * Double(values.count - 1)).rounded(.down))]
                let got = sketch.quantile(q) ?? .nan
                #expect(abs(got - exact) <= 0.01 * abs(exact) + 1e-9, "shape \(shape) q \(q): \(got), exact \(exact)")
            }
        }
        // Near the largest double the bucket's value stays finite and within the error.
        var top = QuantileSketch(relativeAccuracy: 0.01)
        top.add(1e308)
        top.add(1.5e308)
        #expect(abs((top.quantile(0.001) ?? 0) - 1e308) <= 0.01e308, "\(top.quantile(0.001) ?? .nan)")
        var wide = QuantileSketch(relativeAccuracy: 0.01, maxBuckets: 100)
        for e in -300...300 { wide.add(pow(10, Double(e) / 10)) }
        #expect(wide.count == 601 && wide.quantile(0.99) != nil)
        // Values over far more buckets than it keeps (a hostile client's
        // timer): collapsed an eighth at a time, the lowest merged, so the
        // upper quantiles keep their accuracy.
        var spread = QuantileSketch()
        var all: [Double] = []
        for k in 0..<100_000 {
            let v = pow(10, Double(k % 30_000) / 1000)  // 30 decades: 3,450 buckets of 1 %
            all.append(v)
            spread.add(v)
        }
        all.sort()
        for q in [0.9, 0.99] {
            let exact = all[Int((q * Double(all.count - 1)).rounded(.down))]
            let got = spread.quantile(q) ?? .nan
            #expect(abs(got - exact) <= 0.01 * exact, "q \(q): \(got), exact \(exact)")
        }
    }
}
