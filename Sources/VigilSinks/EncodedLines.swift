/// JSON Lines of a batch of events, one after another: line i is
/// `bytes[start(i)..<ends[i]]`, empty for an event whose line was not made
/// (the sink makes it).
public struct EncodedLines: Sendable {
    package init() {}

    package var bytes: [UInt8] = []
    package var ends: [Int] = []

    @inline(__always)
    func line(_ i: Int) -> ArraySlice<UInt8> { bytes[(i == 0 ? 0 : ends[i - 1])..<ends[i]] }

    package mutating func removeFirst(_ n: Int) {
        guard n > 0 else { return }
        let cut = ends[n - 1]
        bytes.removeFirst(cut)
        ends.removeFirst(n)
        for i in ends.indices { ends[i] -= cut }
    }

    package mutating func removeAll(keepingCapacity: Bool) {
        bytes.removeAll(keepingCapacity: keepingCapacity)
        ends.removeAll(keepingCapacity: keepingCapacity)
    }
}
