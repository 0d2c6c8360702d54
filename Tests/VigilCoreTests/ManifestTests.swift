import Foundation
import Testing
@testable import VigilCore
@testable import VigilSinks

// MARK: - Helpers

func loc(_ line: Int, _ column: Int) -> VigilCore.SourceLocation {
    VigilCore.SourceLocation(file: "test.yaml", line: line, column: column)
}

func load(_ text: String, env: [String: String] = [:]) -> (Manifest?, [Diagnostic]) {
    ManifestLoader(file: "test.yaml", environment: env).load(text)
}

enum HintCheck {
    case unchecked
    case none
    case equals(String)
}

/// Expects exactly one diagnostic at `line`:`column` whose message contains `message`, of `level`,
/// with the given hint; returns it.
@discardableResult
func expectDiagnostic(_ diagnostics: [Diagnostic], at line: Int, _ column: Int, _ message: String,
                      hint: HintCheck = .unchecked, level: Diagnostic.Level = .error,
                      sourceLocation: Testing.SourceLocation = #_sourceLocation) -> Diagnostic? {
    let found = diagnostics.filter { $0.message.contains(message) }
    guard found.count == 1, let d = found.first else {
        Issue.record("expected one diagnostic containing \"\(message)\", found \(found.count) in:\n\(ManifestErrors(diagnostics))",
                     sourceLocation: sourceLocation)
        return nil
    }
    #expect(d.location == loc(line, column), "\(d)", sourceLocation: sourceLocation)
    #expect(d.level == level, "\(d)", sourceLocation: sourceLocation)
    switch hint {
    case .unchecked: break
    case .none: #expect(d.hint == nil, "\(d)", sourceLocation: sourceLocation)
    case .equals(let h): #expect(d.hint == h, "\(d)", sourceLocation: sourceLocation)
    }
    return d
}

func expectInvalid(_ diagnostics: [Diagnostic], sourceLocation: Testing.SourceLocation = #_sourceLocation) {
    #expect(diagnostics.contains { $0.level == .error }, "expected an error", sourceLocation: sourceLocation)
}

func expectCount(_ diagnostics: [Diagnostic], _ count: Int, sourceLocation: Testing.SourceLocation = #_sourceLocation) {
    #expect(diagnostics.count == count, "\(ManifestErrors(diagnostics))", sourceLocation: sourceLocation)
}

func monitor(_ m: Manifest?, _ name: String) -> MonitorConfig? { m?.monitors.first { $0.name == name } }
func sink(_ m: Manifest?, _ name: String) -> SinkConfig? { m?.sinks.first { $0.name == name } }

let durationHint = "write a number and a unit: 250ms, 5s, 1m, 1h30m (units: ns, us, ms, s, m, h, d)"
let sizeHint = "write bytes or a number and a unit: 4096, 512KiB, 64MiB, 1GB"
let nameHint = "use letters, digits, '_', '-' and '.'; '/' and glob characters are reserved for routing"
let severityList = "debug, info, notice, warning, error, critical"

// MARK: - Valid manifests

@Suite("Manifest: valid")
struct ValidManifestTests {
    static let full = """
        host: web-1
        log_level: notice
        plugin_dirs: [./plugins, /usr/lib/vigil]
        monitors:
          cpu:
            plugin: cpu
            interval: 1s
            options: { per_cpu: false }
          memory:
            plugin: memory
            interval: 5s
          load:
            plugin: load
            interval: 1m30s
            enabled: no
          custom:
            plugin: ./plugins/custom.so
        sinks:
          console:
            type: log
            min_severity: info
            match: ["*"]
          journal:
            type: file
            path: ${VIGIL_STATE_DIR:-.vigil}/events.jsonl
            rotate: { size: 64MiB, keep: 5 }
            fsync: interval
          collector:
            type: socket
            connect: "tcp://127.0.0.1:5170"
            reconnect_min: 250ms
            reconnect_max: 1m
            queue_size: 1024
            overflow: block
            match: [cpu, "*/threshold", "!vigil/*"]
          local:
            type: socket
            listen: unix:/run/vigil/events.sock
            client_buffer: 8MiB
            min_severity: warning
            overflow: drop_newest
          v6:
            type: socket
            connect: "udp://[::1]:8125"
          everything:
            type: log
            stream: stdout
            format: json
          discard:
            type: null
        """

    @Test("a full manifest loads with no diagnostics and the right values")
    func full() throws {
        let (m, diagnostics) = load(Self.full)
        expectCount(diagnostics, 0)
        let manifest = try #require(m)
        #expect(manifest.file == "test.yaml")
        #expect(manifest.host == "web-1")
        #expect(manifest.logLevel == .notice)
        #expect(manifest.pluginDirs == ["./plugins", "/usr/lib/vigil"])
        #expect(manifest.monitors.map(\.name) == ["cpu", "memory", "load", "custom"])
        #expect(manifest.sinks.map(\.name) == ["console", "journal", "collector", "local", "v6", "everything", "discard"])

        let cpu = try #require(monitor(m, "cpu"))
        #expect(cpu.plugin == "cpu" && !cpu.pluginIsPath)
        #expect(cpu.interval == 1_000_000_000)
        #expect(cpu.enabled)
        #expect(cpu.location == loc(5, 3))
        #expect(cpu.pluginLocation == loc(6, 13))
        #expect(cpu.optionsLocation == loc(8, 14))
        #expect(cpu.options.map(\.key.text) == ["per_cpu"])
        #expect(cpu.options.first?.key.location == loc(8, 16))
        #expect(cpu.options.first?.value.scalar?.text == "false")
        #expect(monitor(m, "memory")?.interval == 5_000_000_000)
        let loadMonitor = try #require(monitor(m, "load"))
        #expect(loadMonitor.interval == 90_000_000_000)
        #expect(loadMonitor.enabled == false)
        let custom = try #require(monitor(m, "custom"))
        #expect(custom.plugin == "./plugins/custom.so" && custom.pluginIsPath)
        #expect(custom.interval == nil)
        #expect(custom.options.isEmpty)

        let console = try #require(sink(m, "console"))
        guard let log = console.settings as? LogSinkConfig else { Issue.record("console is \(console.type)"); return }
        #expect(log.stream == .stderr && log.format == .text)
        #expect(console.minSeverity == .info)
        #expect(console.match == ["*"])
        #expect(console.queueCapacity == 65_536)
        #expect(console.overflow == .dropOldest)
        #expect(console.location == loc(19, 3))

        let journal = try #require(sink(m, "journal"))
        guard let file = journal.settings as? FileSinkConfig else { Issue.record("journal is \(journal.type)"); return }
        #expect(file.path == ".vigil/events.jsonl")
        #expect(file.rotateSize == 67_108_864)
        #expect(file.rotateKeep == 5)
        #expect(file.fsync == .interval)
        #expect(file.fsyncInterval == 1_000_000_000)
        #expect(journal.minSeverity == .debug)
        #expect(journal.match == ["*"])

        let collector = try #require(sink(m, "collector"))
        guard let socket = collector.settings as? SocketSinkConfig else { Issue.record("collector is \(collector.type)"); return }
        #expect(socket.mode == .connect(.tcp(host: "127.0.0.1", port: 5170)))
        #expect(socket.reconnectMin == 250_000_000)
        #expect(socket.reconnectMax == 60_000_000_000)
        #expect(socket.clientBuffer == 4 << 20)
        #expect(collector.queueCapacity == 1024)
        #expect(collector.overflow == .block)
        #expect(collector.match == ["cpu", "*/threshold", "!vigil/*"])
        #expect(collector.minSeverity == .debug)

        let local = try #require(sink(m, "local"))
        guard let listener = local.settings as? SocketSinkConfig else { Issue.record("local is \(local.type)"); return }
        #expect(listener.mode == .listen(.unix(path: "/run/vigil/events.sock")))
        #expect(listener.clientBuffer == 8 << 20)
        #expect(listener.reconnectMin == 100_000_000 && listener.reconnectMax == 30_000_000_000)
        #expect(local.minSeverity == .warning)
        #expect(local.overflow == .dropNewest)

        guard let v6 = sink(m, "v6")?.settings as? SocketSinkConfig else { Issue.record("v6"); return }
        #expect(v6.mode == .connect(.udp(host: "::1", port: 8125)))
        guard let everything = sink(m, "everything")?.settings as? LogSinkConfig else { Issue.record("everything"); return }
        #expect(everything.stream == .stdout && everything.format == .json)
        #expect(sink(m, "discard")?.type == "null")
    }

    @Test("environment values reach the model")
    func fullWithEnvironment() throws {
        let (m, diagnostics) = load(Self.full, env: ["VIGIL_STATE_DIR": "/var/lib/vigil"])
        expectCount(diagnostics, 0)
        guard let file = sink(m, "journal")?.settings as? FileSinkConfig else { Issue.record("journal"); return }
        #expect(file.path == "/var/lib/vigil/events.jsonl")
    }

    @Test("defaults: queue 65536, drop_oldest, min_severity debug, match [*], enabled true, log level info")
    func defaults() throws {
        let (m, diagnostics) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out: {type: log}
            """)
        expectCount(diagnostics, 0)
        let manifest = try #require(m)
        #expect(manifest.host == nil)
        #expect(manifest.logLevel == .info)
        #expect(manifest.pluginDirs == [])
        let cpu = try #require(monitor(m, "cpu"))
        #expect(cpu.enabled == true)
        #expect(cpu.interval == nil)
        #expect(cpu.options.isEmpty)
        #expect(cpu.optionsLocation == cpu.location)
        let out = try #require(sink(m, "out"))
        #expect(out.queueCapacity == 65_536)
        #expect(out.queueCapacity == SinkConfig.defaultQueueCapacity)
        #expect(out.overflow == .dropOldest)
        #expect(out.minSeverity == .debug)
        #expect(out.match == ["*"])
    }

    @Test("clamped values and file/socket defaults")
    func clamps() throws {
        let (m, diagnostics) = load("""
            monitors:
              cpu: {plugin: cpu, interval: 1ms}
            sinks:
              j:
                type: file
                path: /tmp/j.jsonl
                fsync: always
                fsync_interval: 0
              s:
                type: socket
                connect: "tcp://h:1"
                reconnect_min: 5s
                reconnect_max: 1s
                client_buffer: 1
              z:
                type: socket
                connect: "tcp://h:2"
                reconnect_min: 0
            """)
        expectCount(diagnostics, 0)
        #expect(monitor(m, "cpu")?.interval == 1_000_000)
        guard let file = sink(m, "j")?.settings as? FileSinkConfig else { Issue.record("j"); return }
        #expect(file.rotateSize == nil)
        #expect(file.rotateKeep == 5)
        #expect(file.fsync == .always)
        #expect(file.fsyncInterval == 1_000_000)
        guard let s = sink(m, "s")?.settings as? SocketSinkConfig else { Issue.record("s"); return }
        #expect(s.reconnectMin == 5_000_000_000)
        #expect(s.reconnectMax == 5_000_000_000)  // never below reconnect_min
        #expect(s.clientBuffer == 4096)
        guard let z = sink(m, "z")?.settings as? SocketSinkConfig else { Issue.record("z"); return }
        #expect(z.reconnectMin == 10_000_000)  // at least 10ms: a dead peer is never retried in a busy loop
    }

    @Test("booleans in YAML 1.2 and 1.1 spellings", arguments: [
        ("true", true), ("True", true), ("yes", true), ("on", true), ("ON", true),
        ("false", false), ("no", false), ("Off", false), ("NO", false),
    ])
    func booleans(text: String, value: Bool) {
        let (m, diagnostics) = load("monitors:\n  cpu: {plugin: cpu, enabled: \(text)}\nsinks: {out: {type: null}}\n")
        expectCount(diagnostics, 0)
        #expect(monitor(m, "cpu")?.enabled == value)
    }

    @Test("severity aliases 'warn' and 'crit' are accepted like in Fluent Bit and syslog")
    func severityAliases() {
        let (m, diagnostics) = load("""
            log_level: warn
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out: {type: log, min_severity: crit}
            """)
        expectCount(diagnostics, 0)
        #expect(m?.logLevel == .warning)
        #expect(sink(m, "out")?.minSeverity == .critical)
    }

    @Test("empty 'monitors:' and 'sinks:' are empty, not errors (no sink is a warning); a single match string is a list of one")
    func emptySections() throws {
        let (m, diagnostics) = load("monitors:\nsinks:\n")
        expectCount(diagnostics, 1)
        expectDiagnostic(diagnostics, at: 2, 7, "'sinks' is empty: every event would be lost", level: .warning)
        #expect(try #require(m).monitors.isEmpty)
        #expect(m?.sinks.isEmpty == true)
        let (m2, d2) = load("monitors:\n  cpu: {plugin: cpu}\nsinks:\n  out: {type: log, match: cpu/sample}\nplugin_dirs: ./p\n")
        expectCount(d2, 0)
        #expect(sink(m2, "out")?.match == ["cpu/sample"])
        #expect(m2?.pluginDirs == ["./p"])
    }

    @Test("relative plugin_dirs are taken from the manifest's directory", arguments: [
        ("test.yaml", "", ["./plugins", "/usr/lib/vigil"]),
        ("manifests/default.yaml", "manifests", ["manifests/./plugins", "/usr/lib/vigil"]),
        ("/etc/vigil/vigil.yaml", "/etc/vigil", ["/etc/vigil/./plugins", "/usr/lib/vigil"]),
    ])
    func pluginDirs(file: String, directory: String, resolved: [String]) {
        let manifest = Manifest(file: file, pluginDirs: ["./plugins", "/usr/lib/vigil"])
        #expect(manifest.directory == directory)
        #expect(manifest.resolvedPluginDirs == resolved)
    }

    @Test("manifests/default.yaml loads with no diagnostics")
    func shippedDefault() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent("manifests/default.yaml").path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let (m, diagnostics) = ManifestLoader(file: "manifests/default.yaml", environment: [:]).load(text)
        #expect(diagnostics.isEmpty, "\(ManifestErrors(diagnostics))")
        #expect(m?.monitors.map(\.name) == ["cpu", "memory", "load"])
        #expect(m?.sinks.map(\.name) == ["console", "journal", "history"])
        #expect(monitor(m, "cpu")?.interval == 1_000_000_000)
        guard let file = sink(m, "journal")?.settings as? FileSinkConfig else { Issue.record("journal"); return }
        #expect(file.path == ".vigil/events.jsonl")
        #expect(file.rotateSize == 64 << 20)
    }
}

// MARK: - Unknown keys

@Suite("Manifest: unknown keys")
struct UnknownKeyTests {
    @Test("unknown top-level key")
    func topLevel() {
        let (_, d) = load("""
            monitors:
              cpu:
                plugin: cpu
            hosts: web-1
            colour: blue
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 2)
        expectDiagnostic(d, at: 4, 1, "unknown key 'hosts' in the manifest", hint: .equals("did you mean 'host'?"))
        expectDiagnostic(d, at: 5, 1, "unknown key 'colour' in the manifest",
                         hint: .equals("known keys: host, log_level, plugin_dirs, monitors, sinks, rules, allow_unsafe_plugins, isolation, interval, include"))
    }

    @Test("unknown monitor key: intervall → did you mean 'interval'?")
    func monitorKey() {
        let (_, d) = load("""
            monitors:
              cpu:
                plugin: cpu
                intervall: 5s
              memory:
                plugin: memory
                colour: red
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 2)
        let diag = expectDiagnostic(d, at: 4, 5, "unknown key 'intervall' in monitor 'cpu'",
                                    hint: .equals("did you mean 'interval'?"))
        #expect(diag?.description == "test.yaml:4:5: error: unknown key 'intervall' in monitor 'cpu'\n  hint: did you mean 'interval'?")
        expectDiagnostic(d, at: 7, 5, "unknown key 'colour' in monitor 'memory'",
                         hint: .equals("known keys: plugin, interval, timeout, enabled, options, thresholds, isolation, restart, "
                                       + "restart_backoff, max_restarts, restart_window, limits, user"))
    }

    @Test("unknown sink keys, including another sink type's key and a key of 'rotate'")
    func sinkKey() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out:
                type: log
                strem: stdout
                path: /tmp/x
              j:
                type: file
                path: /tmp/j
                rotate: {size: 1MiB, kepe: 3}
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 6, 5, "unknown key 'strem' in sink 'out' (type log)", hint: .equals("did you mean 'stream'?"))
        expectDiagnostic(d, at: 7, 5, "unknown key 'path' in sink 'out' (type log)",
                         hint: .equals("known keys: stream, format, type, match, min_severity, queue_size, overflow, buffer"))
        expectDiagnostic(d, at: 11, 26, "unknown key 'kepe' in 'rotate' of sink 'j'", hint: .equals("did you mean 'keep'?"))
    }
}

// MARK: - Duplicates

@Suite("Manifest: duplicate names")
struct DuplicateTests {
    @Test("duplicate monitor: reported at the second occurrence; later errors still reported")
    func duplicateMonitor() {
        let (m, d) = load("""
            monitors:
              cpu:
                plugin: cpu
              memory:
                plugin: memory
              cpu:
                plugin: cpu
            sinks:
              out:
                type: log
                min_severity: warnng
                colour: red
            """)
        expectInvalid(d)
        expectCount(d, 3)
        // The repeat is dropped; the first definition stands.
        #expect(m?.monitors.map(\.name) == ["cpu", "memory"])
        #expect(monitor(m, "cpu")?.pluginLocation == loc(3, 13))
        let dup = expectDiagnostic(d, at: 6, 3, "duplicate key 'cpu'", hint: .equals("first defined at test.yaml:2:3"))
        #expect(dup?.message == "duplicate key 'cpu': names must be unique")
        expectDiagnostic(d, at: 11, 19, "'min_severity' must be one of", hint: .equals("did you mean 'warning'?"))
        expectDiagnostic(d, at: 12, 5, "unknown key 'colour' in sink 'out'")
    }

    @Test("two different duplicated names in one mapping are both reported, each pointing at its first definition")
    func twoDuplicates() {
        let (m, d) = load("""
            monitors:
              mem:
                plugin: memory
              cpu:
                plugin: cpu
              mem:
                plugin: memory
              cpu:
                plugin: cpu
              mem:
                plugin: memory
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 3)
        #expect(m?.monitors.map(\.name) == ["mem", "cpu"])
        let dups = d.filter { $0.message.hasPrefix("duplicate key") }
            .sorted { $0.location.line < $1.location.line }
        #expect(dups.map(\.location) == [loc(6, 3), loc(8, 3), loc(10, 3)])
        #expect(dups.map(\.message) == ["duplicate key 'mem': names must be unique", "duplicate key 'cpu': names must be unique",
                                        "duplicate key 'mem': names must be unique"])
        #expect(dups.map(\.hint) == ["first defined at test.yaml:2:3", "first defined at test.yaml:4:3",
                                     "first defined at test.yaml:2:3"])
    }

    @Test("duplicate sink name")
    func duplicateSink() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out:
                type: log
              out:
                type: null
              other:
                type: nul
            """)
        expectInvalid(d)
        expectCount(d, 2)
        expectDiagnostic(d, at: 6, 3, "duplicate key 'out': names must be unique", hint: .equals("first defined at test.yaml:4:3"))
        expectDiagnostic(d, at: 9, 11, "sink type must be one of file, history, log, null, otlp, plugin, prometheus, remote_write, socket, syslog, not 'nul'",
                         hint: .equals("did you mean 'null'?"))
    }

    @Test("a duplicate key inside a monitor")
    func nestedDuplicate() {
        let (m, d) = load("""
            monitors:
              cpu:
                plugin: cpu
                interval: 1s
                plugin: memory
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 1)
        expectDiagnostic(d, at: 5, 5, "duplicate key 'plugin': names must be unique", hint: .equals("first defined at test.yaml:3:5"))
        #expect(monitor(m, "cpu")?.plugin == "cpu")
        #expect(monitor(m, "cpu")?.interval == 1_000_000_000)
    }

    @Test("duplicates in a flow mapping are reported at the repeat, like in a block mapping")
    func flowDuplicate() {
        let (_, d) = load("monitors: {cpu: {plugin: cpu}, cpu: {plugin: load}}\nsinks: {out: {type: null}}\n")
        expectInvalid(d)
        expectCount(d, 1)
        expectDiagnostic(d, at: 1, 32, "duplicate key 'cpu': names must be unique", hint: .equals("first defined at test.yaml:1:12"))
    }

    @Test("duplicates are found in a file with CRLF line ends")
    func crlfDuplicate() {
        let text = "monitors:\r\n  cpu:\r\n    plugin: cpu\r\n\r\n  cpu:\r\n    plugin: cpu\r\nsinks:\r\n  out:\r\n    type: lag\r\n"
        let (_, d) = load(text)
        expectInvalid(d)
        expectCount(d, 2)
        expectDiagnostic(d, at: 5, 3, "duplicate key 'cpu': names must be unique", hint: .equals("first defined at test.yaml:2:3"))
        expectDiagnostic(d, at: 9, 11, "sink type must be one of", hint: .equals("did you mean 'log'?"))
    }
}

// MARK: - Types and values

@Suite("Manifest: wrong types and bad values")
struct ValueErrorTests {
    @Test("wrong types: enabled: maybe, plugin: a list, options: a list, queue_size: lots")
    func wrongTypes() {
        let (m, d) = load("""
            monitors:
              cpu:
                plugin: cpu
                enabled: maybe
              memory:
                plugin: [memory]
                options: [per_cpu]
            sinks:
              out:
                type: log
                queue_size: lots
              out2:
                type: log
                queue_size: 0
            """)
        expectInvalid(d)
        #expect(monitor(m, "cpu")?.enabled == true)  // the default stands in for a bad value
        #expect(sink(m, "out")?.queueCapacity == 65_536)
        expectCount(d, 5)
        expectDiagnostic(d, at: 4, 14, "'enabled' must be true or false, not a string 'maybe'")
        expectDiagnostic(d, at: 6, 13, "'plugin' must be a string, not a list")
        expectDiagnostic(d, at: 7, 14, "'options' must be a mapping, not a list")
        expectDiagnostic(d, at: 11, 17, "'queue_size' must be a whole number, not a string 'lots'")
        expectDiagnostic(d, at: 14, 17, "'queue_size' must be between 1 and 16777216 events")
    }

    @Test("monitors and sinks of the wrong shape")
    func wrongSections() {
        let (_, d) = load("""
            monitors: [a, b]
            sinks: 5
            """)
        expectInvalid(d)
        expectCount(d, 2)
        expectDiagnostic(d, at: 1, 11, "'monitors' must be a mapping of monitor names to settings, not a list")
        expectDiagnostic(d, at: 2, 8, "'sinks' must be a mapping of sink names to settings, not a number")
    }

    @Test("a quoted boolean is a string")
    func quotedBool() {
        let (_, d) = load("monitors:\n  cpu: {plugin: cpu, enabled: \"true\"}\nsinks: {out: {type: null}}\n")
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, 31, "'enabled' must be true or false, not a string 'true'")
    }

    @Test("host, log_level and plugin_dirs of the wrong type")
    func topLevelTypes() {
        let (_, d) = load("""
            host: [a]
            log_level: verbose
            plugin_dirs: [a, [b]]
            monitors:
              cpu: {plugin: cpu}
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 1, 7, "'host' must be a string, not a list")
        expectDiagnostic(d, at: 2, 12, "'log_level' must be one of \(severityList), not 'verbose'", hint: .none)
        expectDiagnostic(d, at: 3, 18, "'plugin_dirs' must list strings, not a list")
        let (_, d2) = load("plugin_dirs: {a: b}\nmonitors:\n  cpu: {plugin: cpu}\nsinks: {out: {type: null}}\n")
        expectCount(d2, 1)
        expectDiagnostic(d2, at: 1, 14, "'plugin_dirs' must be a list of strings, not a mapping")
    }

    @Test("bad durations: 5 seconds, -1s, 0.5us (below 1ms), 5 (no unit)")
    func badDurations() {
        let (m, d) = load("""
            monitors:
              a:
                plugin: cpu
                interval: 5 seconds
              b:
                plugin: cpu
                interval: -1s
              c:
                plugin: cpu
                interval: 0.5us
              d:
                plugin: cpu
                interval: 5
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        #expect(m?.monitors.map(\.interval) == [nil, nil, nil, nil])
        expectCount(d, 4)
        expectDiagnostic(d, at: 4, 15, "'interval' is not a duration: a string '5 seconds'", hint: .equals(durationHint))
        expectDiagnostic(d, at: 7, 15, "'interval' is not a duration: a string '-1s'", hint: .equals(durationHint))
        expectDiagnostic(d, at: 10, 15, "'interval' must be at least 1ms", hint: .none)
        expectDiagnostic(d, at: 13, 15, "'interval' is not a duration: a number '5'", hint: .equals(durationHint))
    }

    @Test("bad durations in sinks")
    func badSinkDurations() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              j:
                type: file
                path: /tmp/j
                fsync_interval: soon
              s:
                type: socket
                connect: "tcp://h:1"
                reconnect_max: [1s]
            """)
        expectInvalid(d)
        expectCount(d, 2)
        expectDiagnostic(d, at: 7, 21, "'fsync_interval' is not a duration: a string 'soon'")
        expectDiagnostic(d, at: 11, 20, "'reconnect_max' is not a duration: a list")
    }

    @Test("bad sizes: 64 MiBs, too small, missing, not a mapping, keep out of range")
    func badSizes() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              journal:
                type: file
                path: /tmp/e.jsonl
                rotate: {size: 64 MiBs}
              small:
                type: file
                path: /tmp/s.jsonl
                rotate: {size: 1KiB, keep: 0}
              nosize:
                type: file
                path: /tmp/n.jsonl
                rotate: {keep: 3}
              notmap:
                type: file
                path: /tmp/m.jsonl
                rotate: 64MiB
              buf:
                type: socket
                listen: "tcp://0.0.0.0:5170"
                client_buffer: lots
            """)
        expectInvalid(d)
        expectCount(d, 6)
        expectDiagnostic(d, at: 7, 20, "'rotate.size' is not a size: a string '64 MiBs'", hint: .equals(sizeHint))
        expectDiagnostic(d, at: 11, 20, "'rotate.size' must be at least 4KiB")
        expectDiagnostic(d, at: 11, 32, "'rotate.keep' must be between 1 and 1000")
        expectDiagnostic(d, at: 15, 13, "'rotate' needs a 'size'", hint: .equals("rotate: { size: 64MiB, keep: 5 }"))
        expectDiagnostic(d, at: 19, 13, "'rotate' must be a mapping, not a string", hint: .equals("rotate: { size: 64MiB, keep: 5 }"))
        expectDiagnostic(d, at: 23, 20, "'client_buffer' is not a size: a string 'lots'", hint: .equals(sizeHint))
    }

    @Test("bad socket addresses; connect and listen together; neither")
    func badAddresses() {
        let (m, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              a:
                type: socket
                connect: "tcp://127.0.0.1"
              b:
                type: socket
                listen: "udp://127.0.0.1:8125"
              c:
                type: socket
                connect: "ftp://x:1"
              d:
                type: socket
                connect: "tcp://127.0.0.1:70000"
              e:
                type: socket
                connect: "tcp://127.0.0.1:1"
                listen: "unix:/tmp/x.sock"
              f:
                type: socket
              g:
                type: socket
                listen: "unix:"
            """)
        expectInvalid(d)
        #expect(m?.sinks.isEmpty == true)  // sinks without a usable address are left out
        expectCount(d, 7)
        expectDiagnostic(d, at: 6, 14,
                         "'connect' is not a socket address: 'tcp://127.0.0.1': address needs a port, as in tcp://127.0.0.1:5170")
        expectDiagnostic(d, at: 9, 13, "'listen' takes unix:/PATH or tcp://ADDR:PORT; udp is only for 'connect'")
        expectDiagnostic(d, at: 12, 14,
                         "'connect' is not a socket address: 'ftp://x:1': unknown scheme 'ftp'; use unix:/PATH, tcp://HOST:PORT or udp://HOST:PORT")
        expectDiagnostic(d, at: 15, 14, "'connect' is not a socket address: 'tcp://127.0.0.1:70000': '70000' is not a port (1-65535)")
        expectDiagnostic(d, at: 19, 13, "socket sink 'e' has both 'connect' (line 18) and 'listen'; use one sink for each")
        expectDiagnostic(d, at: 20, 3, "socket sink 'f' needs 'connect' or 'listen'",
                         hint: .equals(#"connect: "tcp://127.0.0.1:5170" or listen: "unix:/run/vigil/events.sock""#))
        expectDiagnostic(d, at: 24, 13, "'listen' is not a socket address: 'unix:': unix: address needs a path")
    }

    @Test("file sink without a path, or with a directory")
    func fileSinkPath() {
        let (m, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              j:
                type: file
                rotate: {size: 64MiB}
              d:
                type: file
                path: /var/log/
              e:
                type: file
                path: ""
            """)
        expectInvalid(d)
        #expect(m?.sinks.isEmpty == true)
        expectCount(d, 3)
        expectDiagnostic(d, at: 4, 3, "file sink 'j' has no 'path'", hint: .equals("path: /var/log/vigil/events.jsonl"))
        expectDiagnostic(d, at: 9, 11, "'path' must name a file, got '/var/log/'")
        expectDiagnostic(d, at: 12, 11, "'path' must name a file, got ''")
    }

    @Test("bad min_severity, stream and format with did-you-mean")
    func badChoices() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out:
                type: log
                min_severity: warnng
                stream: stdrr
                format: yaml
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 6, 19, "'min_severity' must be one of \(severityList), not 'warnng'",
                         hint: .equals("did you mean 'warning'?"))
        expectDiagnostic(d, at: 7, 13, "'stream' must be one of stderr, stdout, not 'stdrr'", hint: .equals("did you mean 'stderr'?"))
        expectDiagnostic(d, at: 8, 13, "'format' must be one of text, json, not 'yaml'", hint: .none)
    }

    @Test("bad overflow policy")
    func badOverflow() {
        let (m, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out:
                type: log
                overflow: drop_oldets
              out2:
                type: log
                overflow: discard
            """)
        expectInvalid(d)
        #expect(m?.sinks.map(\.overflow) == [.dropOldest, .dropOldest])
        expectCount(d, 2)
        expectDiagnostic(d, at: 6, 15, "'overflow' must be one of drop_oldest, drop_newest, block, not 'drop_oldets'",
                         hint: .equals("did you mean 'drop_oldest'?"))
        expectDiagnostic(d, at: 9, 15, "'overflow' must be one of drop_oldest, drop_newest, block, not 'discard'", hint: .none)
    }
}

// MARK: - Names and shapes

@Suite("Manifest: names and shapes")
struct NameTests {
    @Test("invalid monitor and sink names")
    func invalidNames() {
        let (m, d) = load("""
            monitors:
              "cpu/x": {plugin: cpu}
              cpu*: {plugin: cpu}
              ok-name_1.2: {plugin: cpu}
              "": {plugin: cpu}
              café: {plugin: cpu}
            sinks:
              "out/1":
                type: log
            """)
        expectInvalid(d)
        #expect(m?.monitors.map(\.name) == ["ok-name_1.2"])  // invalid names are left out
        #expect(m?.sinks.isEmpty == true)
        expectCount(d, 5)
        expectDiagnostic(d, at: 2, 3, "'cpu/x' is not a valid monitor name", hint: .equals(nameHint))
        expectDiagnostic(d, at: 3, 3, "'cpu*' is not a valid monitor name", hint: .equals(nameHint))
        expectDiagnostic(d, at: 5, 3, "'' is not a valid monitor name", hint: .equals(nameHint))
        expectDiagnostic(d, at: 6, 3, "'café' is not a valid monitor name", hint: .equals(nameHint))
        expectDiagnostic(d, at: 8, 3, "'out/1' is not a valid sink name", hint: .equals(nameHint))
    }

    @Test("the monitor name 'vigil' is reserved")
    func reserved() {
        let (m, d) = load("""
            monitors:
              vigil:
                plugin: cpu
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        #expect(m?.monitors.isEmpty == true)
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, 3, "'vigil' is reserved for the host's own events", hint: .equals("pick another monitor name"))
    }

    @Test("monitors that are not a mapping, without a plugin, or with an empty one")
    func monitorShapes() {
        let (_, d) = load("""
            monitors:
              cpu: cpu
              memory:
              load: {interval: 5s}
              disk: {plugin: ""}
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 4)
        expectDiagnostic(d, at: 2, 8, "monitor 'cpu' must be a mapping with at least 'plugin:', not a string",
                         hint: .equals("cpu: { plugin: cpu }"))
        expectDiagnostic(d, at: 3, 10, "monitor 'memory' must be a mapping with at least 'plugin:', not nothing (null)")
        expectDiagnostic(d, at: 4, 3, "monitor 'load' has no 'plugin'",
                         hint: .equals("name a plugin (see 'vigil plugins list') or a path to a .so"))
        expectDiagnostic(d, at: 5, 18, "'plugin' is empty")
    }

    @Test("sinks without a type, not a mapping, or of an unknown type")
    func sinkShapes() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              a: {min_severity: info}
              b: log
              c:
                type: lag
              d:
                type: [log]
            """)
        expectInvalid(d)
        expectCount(d, 4)
        expectDiagnostic(d, at: 4, 3, "sink 'a' has no 'type'", hint: .equals("one of: file, history, log, null, otlp, plugin, prometheus, remote_write, socket, syslog"))
        expectDiagnostic(d, at: 5, 6, "sink 'b' must be a mapping with at least 'type:', not a string")
        expectDiagnostic(d, at: 7, 11, "sink type must be one of file, history, log, null, otlp, plugin, prometheus, remote_write, socket, syslog, not 'lag'", hint: .equals("did you mean 'log'?"))
        expectDiagnostic(d, at: 9, 11, "sink type must be one of file, history, log, null, otlp, plugin, prometheus, remote_write, socket, syslog, not a list", hint: .none)
    }

    @Test("at most 64 sinks")
    func tooManySinks() {
        func manifest(sinks: Int) -> String {
            "monitors:\n  cpu: {plugin: cpu}\nsinks:\n" + (0..<sinks).map { "  s\($0): {type: null}\n" }.joined()
        }
        let (ok, d64) = load(manifest(sinks: 64))
        expectCount(d64, 0)
        #expect(ok?.sinks.count == 64)
        let (m, d) = load(manifest(sinks: 65))
        expectInvalid(d)
        #expect(m?.sinks.count == 65)
        expectCount(d, 1)
        expectDiagnostic(d, at: 4, 3, "at most 64 sinks are supported, this manifest has 65")
    }
}

// MARK: - Whole-file problems

@Suite("Manifest: whole-file problems")
struct WholeFileTests {
    @Test("empty and whitespace-only files", arguments: ["", "  \n\n\t\n   ", "\n"])
    func empty(text: String) {
        let (m, d) = load(text)
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 1, 1, "the manifest is empty",
                         hint: .equals("a manifest needs at least a 'monitors:' mapping; see manifests/default.yaml"))
    }

    @Test("a file of comments holds no document")
    func commentsOnly() {
        let (m, d) = load("# nothing here\n# at all\n")
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 1, 1, "the manifest holds no YAML document")
    }

    @Test("top level a scalar or a list")
    func topLevelShape() {
        let (m, d) = load("just some text\n")
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 1, 1, "the manifest must be a mapping with 'monitors:' and 'sinks:', not a string")
        let (m2, d2) = load("- cpu\n- memory\n")
        #expect(m2 == nil)
        expectCount(d2, 1)
        expectDiagnostic(d2, at: 1, 1, "the manifest must be a mapping with 'monitors:' and 'sinks:', not a list")
    }

    @Test("missing 'monitors:'")
    func missingMonitors() {
        let (m, d) = load("""
            # a comment first
            sinks:
              out: {type: log}
            """)
        expectInvalid(d)
        #expect(m?.monitors.isEmpty == true)  // a partial model, for 'vigil validate'
        #expect(m?.sinks.map(\.name) == ["out"])
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, 1, "the manifest has no 'monitors:'",
                         hint: .equals("add a 'monitors:' mapping, e.g. monitors: { cpu: { plugin: cpu } }"))
    }

    @Test("YAML syntax error: unbalanced '['")
    func unbalancedBracket() {
        let (m, d) = load("""
            monitors:
              cpu:
                plugin: cpu
                options: {layout: [1, 2}
            """)
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 4, 28, "invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence at 4:23)")
    }

    @Test("YAML syntax error: a tab used for indentation")
    func tabIndentation() {
        let (m, d) = load("monitors:\n  cpu:\n\tplugin: cpu\n")
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 3, 1, "invalid YAML: found character that cannot start any token")
    }

    @Test("YAML syntax error: an unterminated quoted string")
    func unterminatedQuote() {
        let (m, d) = load("monitors:\n  cpu:\n    plugin: \"cpu\n")
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 4, 1, "invalid YAML: found unexpected end of stream (while scanning a quoted scalar at 3:13)")
    }

    @Test("a control character is located by line and column, after non-ASCII text too")
    func controlCharacter() {
        let (m, d) = load("# café ☕\nmonitors:\n  cpu: {plugin: c\u{01}pu}\n")
        #expect(m == nil)
        expectCount(d, 1)
        expectDiagnostic(d, at: 3, 18, "not a YAML text file: control characters are not allowed")
    }

    @Test("line ends CRLF: locations as with LF")
    func crlf() {
        let (m, d) = load("monitors:\r\n  cpu:\r\n    plugin: cpu\r\n    intervall: 5s\r\nsinks: {out: {type: null}}\r\n")
        expectInvalid(d)
        #expect(m?.monitors.first?.pluginLocation == loc(3, 13))
        expectCount(d, 1)
        expectDiagnostic(d, at: 4, 5, "unknown key 'intervall' in monitor 'cpu'", hint: .equals("did you mean 'interval'?"))
    }
}

// MARK: - Environment

@Suite("Manifest: ${ENV} interpolation")
struct EnvironmentTests {
    static let manifest = """
        host: ${HOST_NAME}
        monitors:
          cpu:
            plugin: ${PLUGIN:-cpu}
            interval: ${INTERVAL:-5s}
        sinks:
          j:
            type: file
            path: "$${LITERAL}/${DIR:-logs}/e$x.jsonl"
        """

    @Test("set, unset with default, $${ escape, empty with :- default")
    func defaults() throws {
        let (m, d) = load(Self.manifest, env: ["HOST_NAME": "web-9", "DIR": ""])
        expectCount(d, 0)
        #expect(m?.host == "web-9")
        #expect(monitor(m, "cpu")?.plugin == "cpu")
        #expect(monitor(m, "cpu")?.interval == 5_000_000_000)
        guard let file = sink(m, "j")?.settings as? FileSinkConfig else { Issue.record("j"); return }
        #expect(file.path == "${LITERAL}/logs/e$x.jsonl")
    }

    @Test("set values win over defaults")
    func setValues() throws {
        let (m, d) = load(Self.manifest, env: ["HOST_NAME": "web-9", "PLUGIN": "load", "INTERVAL": "250ms", "DIR": "/var/log"])
        expectCount(d, 0)
        #expect(monitor(m, "cpu")?.plugin == "load")
        #expect(monitor(m, "cpu")?.interval == 250_000_000)
        guard let file = sink(m, "j")?.settings as? FileSinkConfig else { Issue.record("j"); return }
        #expect(file.path == "${LITERAL}//var/log/e$x.jsonl")
    }

    @Test("an empty value without a default is used as is")
    func emptyWithoutDefault() {
        let (m, d) = load("host: \"a${EMPTY}b\"\nmonitors:\n  cpu: {plugin: cpu}\nsinks: {out: {type: null}}\n", env: ["EMPTY": ""])
        expectCount(d, 0)
        #expect(m?.host == "ab")
    }

    @Test("unset without default: an error at the scalar's location")
    func unset() {
        let (_, d) = load("""
            monitors:
              cpu:
                plugin: ${NOPE}
                interval: "${ALSO_NOPE}s"
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 3, 13, "environment variable 'NOPE' is not set", hint: .equals("set it, or give a default: ${NOPE:-VALUE}"))
        expectDiagnostic(d, at: 4, 15, "environment variable 'ALSO_NOPE' is not set",
                         hint: .equals("set it, or give a default: ${ALSO_NOPE:-VALUE}"))
        // The reference is kept as written, so 'plugin' gets no second error for an empty value.
        expectDiagnostic(d, at: 4, 15, "'interval' is not a duration: a string '${ALSO_NOPE}s'")
    }

    @Test("bad references and unterminated ${")
    func badReferences() {
        let (_, d) = load("""
            monitors:
              cpu:
                plugin: "${1BAD}"
                interval: ${OPEN
            sinks: { out: { type: null } }
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 3, 13, "'${1BAD}' is not a valid environment variable reference",
                         hint: .equals("names are letters, digits and '_', as in ${HOME} or ${LOG_DIR:-/var/log}"))
        expectDiagnostic(d, at: 4, 15, "unterminated '${' in \"${OPEN\"", hint: .equals("write ${NAME} or ${NAME:-default}; $${ gives a literal ${"))
    }

    @Test("keys are not interpolated")
    func keysStayLiteral() {
        let (_, d) = load("monitors:\n  ${X}:\n    plugin: cpu\nsinks: {out: {type: null}}\n", env: ["X": "cpu"])
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, 3, "'${X}' is not a valid monitor name")
    }

    @Test("ConfigParser.interpolate directly")
    func interpolate() {
        let parser = ConfigParser(file: "test.yaml", environment: ["A": "1", "B": "", "C": "x}y"])
        var d: [Diagnostic] = []
        let at = loc(1, 1)
        #expect(parser.interpolate("no dollars", at: at, diagnostics: &d) == "no dollars")
        #expect(parser.interpolate("${A}${A}", at: at, diagnostics: &d) == "11")
        #expect(parser.interpolate("$A ${A} $", at: at, diagnostics: &d) == "$A 1 $")
        #expect(parser.interpolate("${B:-def}", at: at, diagnostics: &d) == "def")
        #expect(parser.interpolate("${B}", at: at, diagnostics: &d) == "")
        #expect(parser.interpolate("${UNSET:-}", at: at, diagnostics: &d) == "")
        #expect(parser.interpolate("${UNSET:-a:-b}", at: at, diagnostics: &d) == "a:-b")
        #expect(parser.interpolate("$${A}", at: at, diagnostics: &d) == "${A}")
        #expect(parser.interpolate("$$${A}", at: at, diagnostics: &d) == "$${A}")
        #expect(parser.interpolate("${C}", at: at, diagnostics: &d) == "x}y")   // values are not re-expanded
        #expect(parser.interpolate("${_x9}", at: at, diagnostics: &d) == "${_x9}")  // kept as written, with one error
        #expect(d.count == 1)
        #expect(d.first?.message == "environment variable '_x9' is not set")
    }
}

// MARK: - Match patterns

@Suite("Manifest: match patterns")
struct MatchTests {
    @Test("bad patterns are errors; a literal monitor that does not exist is a warning")
    func patterns() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out:
                type: log
                match: ["[ab", "a/b/c", cpuu, "cpu/sample", "*", "!vigil/*"]
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 6, 13, "bad pattern '[ab' in 'match': unterminated '[' at position 1")
        expectDiagnostic(d, at: 6, 20, "bad pattern 'a/b/c' in 'match': it has more than one '/': write MONITOR/KIND")
        expectDiagnostic(d, at: 6, 29, "pattern 'cpuu' matches no monitor of this manifest", hint: .equals("did you mean 'cpu'?"),
                         level: .warning)
    }

    @Test("warnings alone do not make the manifest invalid")
    func warningsOnly() throws {
        let (m, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              out:
                type: log
                match:
                  - cpuu/sample
                  - memry
                  - "!vigil"
            """)
        expectCount(d, 2)
        #expect(d.allSatisfy { $0.level == .warning })
        expectDiagnostic(d, at: 7, 9, "pattern 'cpuu/sample' matches no monitor of this manifest", hint: .equals("did you mean 'cpu'?"),
                         level: .warning)
        expectDiagnostic(d, at: 8, 9, "pattern 'memry' matches no monitor of this manifest", hint: .none, level: .warning)
        let manifest = try #require(m)
        #expect(sink(manifest, "out")?.match == ["cpuu/sample", "memry", "!vigil"])
    }

    @Test("match of the wrong shape; empty patterns")
    func wrongShape() {
        let (_, d) = load("""
            monitors:
              cpu: {plugin: cpu}
            sinks:
              a:
                type: log
                match: {cpu: yes}
              b:
                type: log
                match: [cpu, [x], ""]
            """)
        expectInvalid(d)
        expectCount(d, 3)
        expectDiagnostic(d, at: 6, 12, "'match' must be a list of strings, not a mapping")
        expectDiagnostic(d, at: 9, 18, "'match' must list strings, not a list")
        expectDiagnostic(d, at: 9, 23, "bad pattern '' in 'match': it is empty")
    }
}

// MARK: - ConfigNode

@Suite("ConfigNode and ConfigScalar")
struct ConfigNodeTests {
    func scalar(_ text: String, quoted: Bool = false) -> ConfigScalar { ConfigScalar(text, quoted: quoted, at: loc(1, 1)) }

    func node(_ yaml: String) throws -> ConfigNode {
        let (root, d) = ConfigParser(file: "test.yaml", environment: [:]).parse("v: " + yaml + "\n")
        #expect(d.isEmpty, "\(d)")
        guard case .mapping(let entries, _)? = root, let value = entries.first?.value else {
            throw ManifestErrors(d)
        }
        return value
    }

    @Test("typed views of scalars")
    func scalars() {
        #expect(scalar("0x1F").int == 31)
        #expect(scalar("1_000").int == 1000)
        #expect(scalar("-5").int == -5)
        #expect(scalar("5", quoted: true).int == nil)
        #expect(scalar("1.5").int == nil)
        #expect(scalar("1e3").double == 1000)
        #expect(scalar(".5").double == 0.5)
        #expect(scalar(".inf").double == .infinity)
        #expect(scalar("-.Inf").double == -.infinity)
        #expect(scalar(".NaN").double?.isNaN == true)
        #expect(scalar("1.5", quoted: true).double == nil)
        #expect(scalar("yes").bool == true)
        #expect(scalar("yes", quoted: true).bool == nil)
        #expect(scalar("").isNull && scalar("~").isNull && scalar("null").isNull && scalar("NULL").isNull)
        #expect(!scalar("null", quoted: true).isNull)
        #expect(!scalar("nil").isNull)
    }

    @Test("words Swift's Double() reads but YAML does not treat as numbers stay strings", arguments: [
        "nan", "NaN", "inf", "infinity", "-Infinity", "0x1p3",
    ])
    func notNumbers(text: String) {
        #expect(scalar(text).double == nil)
        #expect(ConfigNode.scalar(scalar(text)).kindName == "a string")
        #expect(ConfigNode.scalar(scalar(text)).json == "\"" + text + "\"")
    }

    @Test("kind names for messages")
    func kindNames() throws {
        #expect(try node("~").kindName == "nothing (null)")
        #expect(try node("").kindName == "nothing (null)")
        #expect(try node("true").kindName == "a boolean")
        #expect(try node("12").kindName == "a number")
        #expect(try node("1.5").kindName == "a number")
        #expect(try node("hello").kindName == "a string")
        #expect(try node("\"12\"").kindName == "a string")
        #expect(try node("[1]").kindName == "a list")
        #expect(try node("{a: 1}").kindName == "a mapping")
    }

    @Test("JSON text of YAML values", arguments: [
        (#"[ {out: "double[3]"}, {int32: 3} ]"#, #"[{"out":"double[3]"},{"int32":3}]"#),
        (#"{a: true, b: ~, c: 1.5, d: "5", e: [x, 'y'], f: 0x10, g: 1_000, h: .inf, i: nan, j: -3, "k\"ey": 'it''s'}"#,
         #"{"a":true,"b":null,"c":1.5,"d":"5","e":["x","y"],"f":16,"g":1000,"h":null,"i":"nan","j":-3,"k\"ey":"it's"}"#),
        ("[]", "[]"),
        ("{}", "{}"),
        ("5", "5"),
        ("hello", #""hello""#),
        ("\"tab\\there\"", #""tab\there""#),
        ("|\n  line1\n  line2", #""line1\nline2\n""#),
    ])
    func json(yaml: String, json: String) throws {
        let value = try node(yaml)
        #expect(value.json == json)
        // And it is JSON that Foundation accepts.
        #expect(throws: Never.self) { try JSONSerialization.jsonObject(with: Data(json.utf8), options: [.fragmentsAllowed]) }
    }
}

@Suite("Manifest: sinks sharing a resource")
struct SharedResourceTests {
    @Test func twoSinksOnOneFileOrListenAddressAreAnError() {
        let (_, d) = ManifestLoader(file: "test.yaml").load("""
        monitors: {}
        sinks:
          a: { type: file, path: /tmp/x.jsonl }
          b: { type: file, path: /tmp/x.jsonl }
          c: { type: socket, listen: "unix:/tmp/v.sock" }
          d: { type: socket, listen: "unix:/tmp/v.sock" }
          e: { type: socket, connect: "unix:/tmp/v.sock" }
        """)
        let errors = d.filter { $0.level == .error }
        #expect(errors.count == 2)
        #expect(errors.first?.location == SourceLocation(file: "test.yaml", line: 4, column: 3))
        #expect(errors.first?.message == "sinks 'a' and 'b' both use file /tmp/x.jsonl")
        #expect(errors.first?.hint == "'a' is at test.yaml:3:3; give each sink its own")
        #expect(errors.last?.message == "sinks 'c' and 'd' both use listen address unix:/tmp/v.sock")
    }
}

/// The top-level `interval:`, collectd's global `Interval`.
@Suite struct TopLevelIntervalTests {
    @Test func monitorsWithoutTheirOwnTakeIt() throws {
        let (m, d) = load("""
        interval: 30s
        monitors:
          cpu: { plugin: cpu }
          load: { plugin: load, interval: 5s }
        sinks:
          out: { type: null }
        """)
        #expect(d.isEmpty, "\(ManifestErrors(d))")
        let manifest = try #require(m)
        #expect(manifest.interval == 30_000_000_000)
        #expect(manifest.monitors.first { $0.name == "cpu" }?.interval == 30_000_000_000)
        #expect(manifest.monitors.first { $0.name == "load" }?.interval == 5_000_000_000)
        // Without it, the plugin's default decides (nil).
        let (plain, _) = load("monitors:\n  cpu: { plugin: cpu }\nsinks:\n  out: { type: null }\n")
        #expect(plain?.interval == nil && plain?.monitors.first?.interval == nil)
    }

    @Test func aBadOneIsAnErrorWhereItIs() {
        let (_, d) = load("interval: soon\nmonitors:\n  cpu: { plugin: cpu }\nsinks:\n  out: { type: null }\n")
        expectDiagnostic(d, at: 1, 11, "'interval'")
        let (_, tiny) = load("interval: 1ns\nmonitors:\n  cpu: { plugin: cpu }\nsinks:\n  out: { type: null }\n")
        expectDiagnostic(tiny, at: 1, 11, "'interval'")
    }
}
