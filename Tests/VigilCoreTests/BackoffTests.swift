import Testing
import VigilCore

@Suite struct BackoffTests {
    @Test func doublesFromMinToMaxAndStays() {
        var b = Backoff(min: 100, max: 1000, jitter: 0)
        #expect((0..<7).map { _ in b.next() } == [100, 200, 400, 800, 1000, 1000, 1000])
        b.reset()
        #expect(b.next() == 100)
    }

    @Test func jitterTakesAtMostItsShareOff() {
        let b = Backoff(min: 1000, max: 1000, jitter: 0.2)
        #expect(b.wait(attempt: 0, random: 0) == 1000)
        #expect(b.wait(attempt: 0, random: 0.999_999) > 800)
        #expect(b.wait(attempt: 0, random: 5) == 800)  // out of range: clamped
        for _ in 0..<1000 { #expect((800...1000).contains(b.wait(attempt: 3))) }
    }

    @Test func anyManifestValueSaturatesAndNeverTraps() {
        var b = Backoff(min: Int64.max / 2 + 1, max: Int64.max, jitter: 0.5)
        for _ in 0..<100 { #expect(b.next() > 0) }
        #expect(b.step(1_000_000) == Int64.max)
        // A max below min, or a zero or negative min, is held to sense.
        let odd = Backoff(min: 0, max: -5)
        #expect(odd.min == 1 && odd.max == 1 && odd.step(70) == 1)
        #expect(Backoff(min: 10, max: 100, jitter: -3).jitter == 0 && Backoff(min: 10, max: 100, jitter: 9).jitter == 1)
    }
}
