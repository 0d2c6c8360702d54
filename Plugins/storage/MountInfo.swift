/// One line of `/proc/<pid>/mountinfo` (proc(5)):
///
///     36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue
///     (1)(2) (3)   (4)   (5)         (6)      (7)    (8) (9)   (10)      (11)
///
/// mount ID, parent ID, major:minor, root of the mount within its filesystem,
/// mount point, per-mount options, zero or more optional fields (`shared:N`,
/// `master:N`, …) ended by a lone `-`, then filesystem type, source and
/// per-superblock options. Paths are escaped by the kernel: a space is
/// `\040`, a tab `\011`, a newline `\012`, a backslash `\134`.
struct MountEntry: Sendable, Equatable {
    var mountID: Int
    var parentID: Int
    /// `major:minor` of the filesystem's device (st_dev).
    var deviceNumber: String
    /// The directory of the filesystem mounted here (not `/` for a bind mount of a subdirectory).
    var root: String
    /// Where it is mounted, decoded.
    var mountPoint: String
    var mountOptions: String
    var optionalFields: [String]
    /// `ext4`, `tmpfs`, `fuse.sshfs`…
    var fsType: String
    /// The source: a device (`/dev/sda1`), a server path, or a name (`tmpfs`, `overlay`).
    var source: String
    var superOptions: String

    /// The entries of a whole mountinfo file, in file order, and the 1-based
    /// numbers of the lines that did not parse (skipped).
    static func parse(_ text: String) -> (entries: [MountEntry], malformed: [Int]) {
        var entries: [MountEntry] = []
        var malformed: [Int] = []
        var number = 0
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            number += 1
            if line.allSatisfy({ $0 == " " || $0 == "\t" || $0 == "\r" }) { continue }
            if let entry = MountEntry(line: line) { entries.append(entry) } else { malformed.append(number) }
        }
        return (entries, malformed)
    }

    /// Parses one line; nil when it is not a mountinfo line.
    init?(line: Substring) {
        // The kernel separates fields with single spaces and escapes the
        // spaces inside them, so a plain split is exact.
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let separator = fields.firstIndex(of: "-"), separator >= 6, fields.count - separator >= 3,
              let mountID = Int(fields[0]), let parentID = Int(fields[1]),
              fields[2].contains(":") else { return nil }
        self.mountID = mountID
        self.parentID = parentID
        deviceNumber = String(fields[2])
        root = Self.unescape(fields[3])
        mountPoint = Self.unescape(fields[4])
        mountOptions = String(fields[5])
        optionalFields = fields[6..<separator].map(String.init)
        fsType = Self.unescape(fields[separator + 1])
        source = Self.unescape(fields[separator + 2])
        superOptions = separator + 3 < fields.count ? String(fields[separator + 3]) : ""
        guard mountPoint.hasPrefix("/") else { return nil }
    }

    /// Decodes the kernel's octal escapes (`\040` → space); any other
    /// backslash is kept as it is. Bytes that are not UTF-8 become U+FFFD.
    static func unescape(_ field: Substring) -> String {
        let bytes = Array(field.utf8)
        guard bytes.contains(UInt8(ascii: "\\")) else { return String(field) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = 0
        func octal(_ b: UInt8) -> UInt8? { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "7") ? b - UInt8(ascii: "0") : nil }
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "\\"), i + 3 < bytes.count,
               let a = octal(bytes[i + 1]), let b = octal(bytes[i + 2]), let c = octal(bytes[i + 3]), a <= 3 {
                out.append(a << 6 | b << 3 | c)
                i += 4
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
