/// The contents of `/proc/vmstat`: one `name value` pair a line.
public struct VMStat: Sendable, Equatable {
    /// Every entry, in file order.
    public var entries: [(name: String, value: UInt64)]
    /// The 1-based numbers of lines that did not parse (skipped).
    public var malformed: [Int]

    public init(entries: [(name: String, value: UInt64)], malformed: [Int] = []) {
        self.entries = entries
        self.malformed = malformed
    }

    public subscript(name: String) -> UInt64? {
        for entry in entries where entry.name == name { return entry.value }
        return nil
    }

    public static func == (a: VMStat, b: VMStat) -> Bool {
        a.entries.map(\.name) == b.entries.map(\.name) && a.entries.map(\.value) == b.entries.map(\.value)
            && a.malformed == b.malformed
    }

    /// Parses the text of `/proc/vmstat`. A line that is not a name and one
    /// unsigned number (a garbled line, a number beyond 2^64) is skipped and
    /// listed in `malformed`; the file as a whole never fails to parse.
    public static func parse(_ text: String) -> VMStat {
        var copy = text
        return copy.withUTF8 { parse($0) }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> VMStat {
        var result = VMStat(entries: [])
        result.entries.reserveCapacity(200)
        var lines = LineIterator(bytes)
        while let (number, fieldsStart) = lines.next() {
            var fields = fieldsStart
            if fields.isAtEnd { continue }
            guard let name = fields.next(), let valueRange = fields.next(), fields.isAtEnd,
                  let value = bytes.parseUInt64(valueRange) else {
                result.malformed.append(number)
                continue
            }
            result.entries.append((bytes.string(name), value))
        }
        return result
    }
}
