import Testing
@testable import VigilHistory

@Suite struct EventRingTests {
    typealias Ring = EventRing<String>

    static func entry(_ seq: UInt64, monitor: String = "m", severity: UInt8 = 1, bytes: Int = 10) -> Ring.Entry {
        Ring.Entry(seq: seq, time: Int64(seq), monitor: monitor, kind: "k", severity: severity, size: bytes, payload: "\(seq)")
    }

    @Test func theNewestAreKeptOldestFirstWithinCountAndBytes() {
        let ring = Ring(capacity: 100, maxBytes: 1000)
        ring.append((1...250).map { Self.entry($0) })
        #expect(ring.recent(limit: 1000).map(\.seq) == Array(151...250))
        #expect(ring.figures.count == 100 && ring.figures.evicted == 150)
        // Larger lines: the bytes bound takes over.
        ring.append((251...260).map { Self.entry($0, bytes: 300) })
        #expect(ring.recent(limit: 1000).map(\.seq) == [258, 259, 260])
        #expect(ring.figures.bytes <= 1000)
        // One line larger than the bound is kept alone (the newest stays).
        ring.append([Self.entry(261, bytes: 5000)])
        #expect(ring.recent(limit: 10).map(\.seq) == [261])
    }

    @Test func aFilterASinceAndALimit() {
        let ring = Ring(capacity: 1000)
        ring.append((1...100).map { Self.entry($0, monitor: $0 % 2 == 0 ? "even" : "odd", severity: UInt8($0 % 6)) })
        #expect(ring.recent(limit: 5) { $0.monitor == "even" }.map(\.seq) == [92, 94, 96, 98, 100])
        #expect(ring.recent(limit: 100, since: 95).map(\.seq) == [96, 97, 98, 99, 100])
        #expect(ring.recent(limit: 100) { $0.severity >= 5 }.map(\.seq) == Array(stride(from: 5, through: 95, by: 6)))
    }
}
