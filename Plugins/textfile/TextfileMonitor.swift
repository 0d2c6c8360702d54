import Glibc
import VigilForeign
import VigilKit

/// node_exporter's textfile collector: the `*.prom` files of a directory,
/// which cron jobs and scripts write in the Prometheus text format, read
/// each poll and passed on as series. A file is taken whole or not at all,
/// as node_exporter takes it: one that is being written (no newline at its
/// end), does not parse, is larger than `max_bytes`, gives client-side
/// timestamps, or gives a family another type or help than an earlier file
/// gave it is skipped, logged and counted (`error` of the `scrape` event,
/// node_exporter's node_textfile_scrape_error).
///
/// Each series is one `sample` event whose `prometheus_name` and
/// `prometheus_labels` say what it is: the `prometheus` sink serves it under
/// that name and those labels, as node_exporter would, and every other sink
/// sees them as the event's identity.
final class TextfileMonitor: PolledMonitor {
    static let spec = PluginSpec(
        name: "textfile", version: "1.1.0",
        summary: "node_exporter's textfile collector: the series of *.prom files in a directory",
        defaultInterval: .seconds(15),
        events: [
            EventDecl("sample", doc: "One per series of every file read whole, each poll.", fields: [
                FieldDecl("prometheus_name", .string, doc: "the sample's name as the file gives it", identity: true),
                FieldDecl("prometheus_labels", .string, doc: "its labels in the exposition's syntax (name=\"value\",…), ordered by name",
                          identity: true),
                FieldDecl("value", .double),
                FieldDecl("type", .string, doc: "its family's type: counter, gauge, histogram, summary or untyped"),
                FieldDecl("help", .string, doc: "its family's help (node_exporter's 'Metric read from FILE' when the file gives none), on the first sample of each name in a poll; cut with … past 64 KiB"),
                FieldDecl("file", .string, doc: "the file it came from"),
            ], policy: .samples),
            EventDecl("file", doc: "One per file read whole, each poll.", fields: [
                FieldDecl("file", .string, doc: "its path", identity: true),
                FieldDecl("mtime", .double, unit: "seconds", doc: "its modification time, seconds since the epoch"),
                FieldDecl("series", .int),
            ], policy: .samples),
            EventDecl("scrape", doc: "One per poll.", fields: [
                FieldDecl("error", .bool, doc: "a file could not be read or was skipped, or the directory could not be listed"),
                FieldDecl("files", .int, doc: "*.prom files found"),
                FieldDecl("skipped", .int, doc: "of them, not read whole (each logged with why)"),
                FieldDecl("series", .int, doc: "series read"),
            ], policy: .samples),
        ])

    struct Options: DeclaredOptions {
        var directory = ""
        var maxBytes: ByteCount = .mib(8)
        var maxSeries = 100_000
        static let schema = OptionSchema<Options>(
            .required("directory", \.directory, example: "/var/lib/prometheus/node-exporter",
                      doc: "The directory of *.prom files (node_exporter's --collector.textfile.directory); an empty string reads none."),
            .option("max_bytes", \.maxBytes, doc: "A larger file is skipped."),
            .option("max_series", \.maxSeries, doc: "Series read in one poll, over all files; the file that passes it is skipped."))
    }

    private let context: MonitorContext
    private let options: Options
    /// Why each file was last skipped, so that the same reason is logged once.
    private var told: [(file: String, why: String)] = []

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        guard options.directory.isEmpty || options.directory.hasPrefix("/") else {
            throw .invalidOption("directory", "'\(options.directory)' is not an absolute path")
        }
        guard options.maxBytes.bytes > 0 else { throw .invalidOption("max_bytes", "must be more than 0") }
        guard options.maxSeries > 0 else { throw .invalidOption("max_series", "must be more than 0") }
        self.context = context
        self.options = options
    }

    func poll() throws(MonitorError) {
        guard !options.directory.isEmpty else {
            context.emit("scrape", ["error": .bool(false), "files": .int(0), "skipped": .int(0), "series": .int(0)])
            return
        }
        var names: [String] = []
        let listed = Self.list(options.directory, into: &names)
        if let why = listed { tell(options.directory, "cannot list the directory: \(why)") }
        var skipped = 0, series = 0
        var families = Families()
        var samples: [Sample] = []
        var fileEvents: [[(String, Value)]] = []
        for name in names.sorted() {
            let path = options.directory + "/" + name
            switch read(path, seriesLeft: options.maxSeries - series, families: &families) {
            case .failure(let skip):
                skipped += 1
                tell(path, skip.why)
            case .success(let (read, mtime, note)):
                // What was skipped in a file that was read is said once, as a skip is.
                if let note { tell(path, note, read: true) } else { forget(path) }
                series += read.count
                samples += read
                fileEvents.append([("file", .string(path)), ("mtime", .double(mtime)), ("series", .int(Int64(read.count)))])
            }
        }
        // What was said of files that are gone is forgotten: a directory
        // where scripts leave partial files under new names each run would
        // otherwise grow the list without end.
        if listed == nil {
            let present = Set(names.map { options.directory + "/" + $0 })
            told.removeAll { !present.contains($0.file) }
        }
        // A family without HELP is "Metric read from" every file that has
        // it, as node_exporter says it once it has read them all. The help
        // goes with a name's first sample of the poll only, as the
        // exposition gives it once: copied into each of 10,000 series a
        // long HELP would be hundreds of megabytes a poll.
        var helped: Set<String> = []
        for sample in samples {
            var fields: [(String, Value)] = [
                ("prometheus_name", .string(sample.name)), ("prometheus_labels", .string(sample.labels)),
                ("value", .double(sample.value)), ("type", .string(sample.type.rawValue)), ("file", .string(sample.file)),
            ]
            if helped.insert(sample.name).inserted {
                let family = families.byName[sample.family]
                let help = sample.help ?? family?.help ?? "Metric read from " + (family?.files ?? [sample.file]).joined(separator: ", ")
                fields.append(("help", .text(help)))
            }
            context.emit("sample", fields: fields)
        }
        for fields in fileEvents { context.emit("file", fields: fields) }
        context.emit("scrape", ["error": .bool(listed != nil || skipped > 0), "files": .int(Int64(names.count)),
                                "skipped": .int(Int64(skipped)), "series": .int(Int64(series))])
    }

    /// Logs why a file was skipped (or, `read`, what of a file that was
    /// read was left out), once per reason.
    private func tell(_ file: String, _ why: String, read: Bool = false) {
        if let i = told.firstIndex(where: { $0.file == file }) {
            if told[i].why == why { return }
            told[i].why = why
        } else {
            told.append((file, why))
        }
        context.log(.warning, read ? "textfile \(file) read, but: \(why)" : "textfile \(file) skipped: \(why)")
    }

    private func forget(_ file: String) { told.removeAll { $0.file == file } }

    /// The `*.prom` names of `directory` (not hidden ones); why not, or nil.
    static func list(_ directory: String, into names: inout [String]) -> String? {
        guard let dir = opendir(directory) else { return String(cString: strerror(errno)) }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name.hasSuffix(".prom"), !name.hasPrefix(".") { names.append(name) }
        }
        return nil
    }

    /// One file's sample events, its mtime and what of it was left out, or
    /// why it is skipped.
    /// The families of the files read so far in a poll, by name, and their
    /// series (name and labels): looked up, not searched, so a poll costs
    /// time linear in what it reads.
    struct Families {
        /// The first file's type and help, and every file that has the family.
        var byName: [String: (type: PrometheusExposition.MetricType, help: String?, files: [String])] = [:]
        var series: Set<String> = []
    }

    /// One series as a file gave it; `help` nil when its family has none.
    struct Sample {
        var family: String
        var name: String
        var labels: String
        var value: Double
        var type: PrometheusExposition.MetricType
        var help: String?
        var file: String
    }

    private func read(_ path: String, seriesLeft: Int, families: inout Families)
        -> Result<([Sample], Double, String?), Skip> {
        // O_NONBLOCK: a FIFO named x.prom cannot hold the poll.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else { return .failure(Skip(String(cString: strerror(errno)))) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return .failure(Skip(String(cString: strerror(errno)))) }
        guard st.st_mode & S_IFMT == S_IFREG else { return .failure(Skip("not a regular file")) }
        let limit = Int(clamping: options.maxBytes.bytes)
        guard st.st_size <= limit else { return .failure(Skip("\(st.st_size) bytes, more than max_bytes (\(limit))")) }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size) + 1)
        var count = 0
        while count < bytes.count {
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + count, $0.count - count, off_t(count)) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .failure(Skip(String(cString: strerror(errno)))) }
            if n == 0 { break }
            count += n
        }
        guard count <= limit else { return .failure(Skip("grew past max_bytes (\(limit)) while it was read")) }
        bytes.removeSubrange(count...)
        if let last = bytes.last, last != 0x0A {
            return .failure(Skip("no newline at its end: it is being written, or was cut"))
        }
        let parsed: PrometheusExposition
        do {
            parsed = try PrometheusExposition.parse(bytes, format: .text, maxSeries: max(0, seriesLeft))
        } catch {
            return .failure(Skip("line \(error.line), column \(error.column): \(error.message)"))
        }
        var events: [Sample] = []
        var mine: [(name: String, type: PrometheusExposition.MetricType, help: String?)] = []
        var series: [String] = []
        var repeated: (series: String, count: Int)?
        var tooLarge: (series: String, count: Int)?
        for family in parsed.families {
            if let other = families.byName[family.name] {
                if other.type != family.type || (family.help != nil && other.help != nil && other.help != family.help) {
                    return .failure(Skip("family \(family.name) has another type or help in \(other.files[0])"))
                }
            }
            mine.append((family.name, family.type, family.help))
            for sample in family.samples {
                guard sample.timestamp == nil else {
                    return .failure(Skip("\(sample.name) has a client-side timestamp, which textfiles may not give"))
                }
                let labels = PrometheusExposition.labelText(sample.labels)
                // An identity cut would be another series: one past what an
                // event's string holds is left out, and said.
                guard sample.name.utf8.count <= Self.largestText, labels.utf8.count <= Self.largestText else {
                    tooLarge = (tooLarge?.series ?? String(sample.name.prefix(64)), (tooLarge?.count ?? 0) + 1)
                    continue
                }
                // A series an earlier file gave is that file's (node_exporter
                // keeps the first and says so): said once, not served twice.
                let key = sample.name + "{" + labels + "}"
                if families.series.contains(key) {
                    repeated = (repeated?.series ?? key, (repeated?.count ?? 0) + 1)
                    continue
                }
                series.append(key)
                events.append(Sample(family: family.name, name: sample.name, labels: labels, value: sample.value,
                                     type: family.type, help: family.help, file: path))
            }
        }
        for family in mine {
            if let known = families.byName[family.name] {
                families.byName[family.name] = (known.type, known.help ?? family.help, known.files + [path])
            } else {
                families.byName[family.name] = (family.type, family.help, [path])
            }
        }
        families.series.formUnion(series)
        let notes = [repeated.map { "\($0.count) series read before from another file (\($0.series)…): the earlier file's are kept" },
                     tooLarge.map { "\($0.count) series with a name or labels over \(Self.largestText) bytes (\($0.series)…) left out" }]
        let note = notes.compactMap { $0 }.joined(separator: "; ")
        // Whole seconds, as node_exporter gives them.
        let mtime = Double(st.st_mtim.tv_sec)
        return .success((events, mtime, note.isEmpty ? nil : note))
    }

    /// The longest name or label text a sample event can carry.
    static let largestText = Int(VIGIL_MAX_STRING_BYTES)

    struct Skip: Error {
        var why: String
        init(_ why: String) { self.why = why }
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(TextfileMonitor.self, a, r) }
