// boottime: a Vigil monitor plugin in Swift, and the Swift monitor scaffold
// (`vigil new-plugin NAME --lang swift` starts a plugin from a copy of it).
//
// What it does: every interval the host calls `poll`, which reads the first
// number of PROCFS/uptime (seconds since boot; `procfs` is an option, "/proc"
// by default) and emits one event of kind `sample`:
//
//     uptime           double  seconds since boot
//     recently_booted  bool    uptime < the `recent` option (10m by default)
//
// It is a starting point: replace the file it reads and the event it emits
// with your own. VigilKit turns the class into the C plugin the host loads:
// the self-description comes from `spec` and `Options`, each instance of the
// manifest is one object, and the host's calls arrive as `init`, `start`,
// `poll` and `stop`, never two at once for one object.

import VigilKit

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

final class BoottimeMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "boottime",  // manifests say `plugin: boottime`
        version: "0.1.0",
        summary: "Seconds since boot, from PROCFS/uptime.",
        defaultInterval: .seconds(10),  // when the manifest gives no interval
        events: [
            EventDecl("sample", doc: "One per poll.", fields: [
                FieldDecl("uptime", .double, unit: "seconds", doc: "Time since boot."),
                FieldDecl("recently_booted", .bool, doc: "Whether the uptime is below the recent option."),
            ], policy: .samples),  // every poll is passed on (.changes: only what changed)
        ])

    /// The options, typed, with their defaults: the schema adds names and docs,
    /// and is both the self-description and the decoder. A value of the wrong
    /// type never gets here: the host reports it at its line of the manifest.
    struct Options: DeclaredOptions {
        var procfs = "/proc"
        var recent: Duration = .seconds(600)
        static let schema = OptionSchema<Options>(
            .option("procfs", \.procfs,
                    doc: "Root of the proc filesystem; the plugin reads PROCFS/uptime (a fixture directory in tests)."),
            .option("recent", \.recent,
                    doc: "An uptime shorter than this counts as a recent boot (the recently_booted field); more than 0s."))
    }

    private let context: MonitorContext
    private let path: String
    private let recentSeconds: Double

    /// Reads and checks the options; no I/O (a missing file is start's
    /// business: create also runs for `vigil validate`). `.invalidOption`
    /// makes the host report the problem at that option in the manifest.
    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard !options.procfs.isEmpty else { throw .invalidOption("procfs", "must not be empty") }
        guard options.recent > .zero else { throw .invalidOption("recent", "must be more than 0s") }
        self.context = context
        self.path = options.procfs + "/uptime"
        let (seconds, attoseconds) = options.recent.components
        self.recentSeconds = Double(seconds) + Double(attoseconds) / 1e18
    }

    /// Checks that the source can be read: a missing file makes the host report
    /// the monitor unavailable (not an error) and retry later. Content that
    /// does not parse now may parse at the next poll.
    func start() throws(MonitorError) {
        do throws(MonitorError) {
            _ = try readUptime()
        } catch where error.status == .temporary {
            return
        }
    }

    /// Called every interval, and once right after start for the snapshot.
    func poll() throws(MonitorError) {
        let uptime = try readUptime()
        context.emit("sample", ["uptime": .double(uptime), "recently_booted": .bool(uptime < recentSeconds)])
    }

    /// The first number of PROCFS/uptime ("12345.67 54321.00\n": uptime, then
    /// idle time summed over all CPUs). A file that is not there (or not for
    /// us) is `.unavailable`; anything else fails this poll only (`.temporary`:
    /// counted and logged, polling goes on).
    private func readUptime() throws(MonitorError) -> Double {
        guard let file = fopen(path, "r") else {
            let code = errno
            let why = "cannot read \(path): \(String(cString: strerror(code)))"
            throw code == ENOENT || code == ENOTDIR || code == EACCES ? .unavailable(why) : .temporary(why)
        }
        defer { fclose(file) }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = fread(&buffer, 1, buffer.count, file)
        let text = String(decoding: buffer[0..<count], as: UTF8.self)
        let first = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).first.map(String.init) ?? ""
        guard let seconds = Double(first), seconds.isFinite, seconds >= 0 else {
            throw .temporary("\(path): expected a number of seconds, found \"\(first)\"")
        }
        return seconds
    }
}

// The one symbol the host looks up: the SDK answers with the descriptor.
@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(BoottimeMonitor.self, a, r) }

