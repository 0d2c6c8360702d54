import Testing
@testable import VigilCore

/// The manifest keys of issue 12: `isolation:` (top level and per monitor)
/// and, for isolation: process, `restart`, `restart_backoff`, `max_restarts`,
/// `restart_window`, `limits` and `user`. What is read, the defaults, and
/// every refusal at its line and column.
@Suite("Manifest: isolation")
struct IsolationManifestTests {
    static let full = """
        isolation: none
        monitors:
          vendor:
            plugin: ./plugins/vendor.so
            isolation: process
            restart: always
            restart_backoff: { min: 250ms, max: 2m }
            max_restarts: 0
            restart_window: 1h
            limits: { memory: 200MiB, cpu: 12.5%, open_files: 256 }
            user: nobody
          numeric:
            plugin: cpu
            isolation: process
            restart: never
            limits: { cpu: 150% }
            user: 65534
          inner:
            plugin: memory
        """ + "\n" + aSink

    @Test("defaults: no isolation said (the host decides), on-failure, 1s to 5m, 5 restarts in 10m, no limits, no user")
    func defaults() throws {
        let (m, d) = load("monitors:\n  cpu: {plugin: cpu}\n" + aSink)
        expectCount(d, 0)
        let manifest = try #require(m)
        #expect(manifest.isolation == nil && manifest.isolationLocation == nil)
        let cpu = try #require(monitor(m, "cpu"))
        #expect(cpu.isolation == nil && cpu.isolationLocation == nil)
        #expect(cpu.supervision == SupervisionConfig())
        #expect(cpu.supervision.restart == .onFailure)
        #expect(cpu.supervision.backoffMin == 1_000_000_000 && cpu.supervision.backoffMax == 300_000_000_000)
        #expect(cpu.supervision.maxRestarts == 5 && cpu.supervision.restartWindow == 600_000_000_000)
        #expect(cpu.limits.isEmpty && cpu.limits == ResourceLimits() && cpu.limitsLocation == nil)
        #expect(cpu.user == nil && cpu.userLocation == nil)
    }

    @Test("every key is read, with where it is written; the top-level default stays the manifest's")
    func everyKey() throws {
        let (m, d) = load(Self.full)
        expectCount(d, 0)
        let manifest = try #require(m)
        #expect(manifest.isolation == Isolation.none && manifest.isolationLocation == loc(1, 12))

        let vendor = try #require(monitor(m, "vendor"))
        #expect(vendor.isolation == .process && vendor.isolationLocation == loc(5, 16))
        var supervision = SupervisionConfig()
        supervision.restart = .always
        supervision.backoffMin = 250_000_000
        supervision.backoffMax = 120_000_000_000
        supervision.maxRestarts = 0
        supervision.restartWindow = 3_600_000_000_000
        #expect(vendor.supervision == supervision)
        #expect(vendor.limits == ResourceLimits(memory: 200 << 20, cpuPercent: 12.5, openFiles: 256))
        #expect(!vendor.limits.isEmpty && vendor.limitsLocation == loc(10, 13))
        #expect(vendor.user == "nobody" && vendor.userLocation == loc(11, 11))

        let numeric = try #require(monitor(m, "numeric"))
        #expect(numeric.supervision.restart == .never && numeric.supervision.maxRestarts == 5)
        #expect(numeric.limits == ResourceLimits(cpuPercent: 150))
        #expect(numeric.user == "65534")

        // Nil on the monitor: the top-level `isolation:` applies, read from the manifest.
        let inner = try #require(monitor(m, "inner"))
        #expect(inner.isolation == nil && inner.supervision == SupervisionConfig() && inner.limits.isEmpty)
    }

    @Test("the bounds themselves are accepted", arguments: [
        "restart_backoff: { min: 10ms, max: 365d }", "restart_backoff: { min: 5m }", "restart_backoff: { max: 1s }",
        "max_restarts: 1000", "restart_window: 1s", "restart_window: 365d", "limits: { memory: 32MiB }",
        "limits: { memory: 1PiB }", "limits: { cpu: 1% }", "limits: { cpu: 6400% }", "limits: { cpu: \"25 %\" }",
        "limits: { open_files: 16 }", "limits: { open_files: 1048576 }", "limits: {}", "restart_backoff: {}",
        "user: \"0\"", "user: 4294967294", "user: svc-vigil.sensor",
    ])
    func atTheBounds(setting: String) {
        let (m, d) = load("monitors:\n  a:\n    plugin: cpu\n    \(setting)\n" + aSink)
        expectCount(d, 0)
        #expect(monitor(m, "a") != nil)
    }

    // MARK: refusals

    @Test("unknown keys in 'restart_backoff' and 'limits' name the key and the known ones")
    func unknownKeys() {
        let (_, d) = load("""
            monitors:
              a:
                plugin: cpu
                restart_backoff: { min: 1s, maximum: 1m }
                limits:
                  memroy: 64MiB
                  nproc: 10
            """ + "\n" + aSink)
        expectCount(d, 3)
        expectDiagnostic(d, at: 4, 33, "unknown key 'maximum' in 'restart_backoff' of monitor 'a'",
                         hint: .equals("known keys: min, max"))
        expectDiagnostic(d, at: 6, 7, "unknown key 'memroy' in 'limits' of monitor 'a'", hint: .equals("did you mean 'memory'?"))
        expectDiagnostic(d, at: 7, 7, "unknown key 'nproc' in 'limits' of monitor 'a'",
                         hint: .equals("known keys: memory, cpu, open_files"))
    }

    @Test("an unknown monitor key is matched against the new keys too")
    func misspelledMonitorKey() {
        let (_, d) = load("monitors:\n  a:\n    plugin: cpu\n    max_restart: 3\n    isolaton: none\n" + aSink)
        expectCount(d, 2)
        expectDiagnostic(d, at: 4, 5, "unknown key 'max_restart' in monitor 'a'", hint: .equals("did you mean 'max_restarts'?"))
        expectDiagnostic(d, at: 5, 5, "unknown key 'isolaton' in monitor 'a'", hint: .equals("did you mean 'isolation'?"))
    }

    @Test("'isolation' and 'restart' take their words only")
    func choices() throws {
        let (m, d) = load("""
            isolation: container
            monitors:
              a:
                plugin: cpu
                isolation: [process]
                restart: on_failure
              b:
                plugin: cpu
                restart: sometimes
            """ + "\n" + aSink)
        expectCount(d, 4)
        expectDiagnostic(d, at: 1, 12, "'isolation' must be one of process, none, not 'container'", hint: .none)
        expectDiagnostic(d, at: 5, 16, "'isolation' must be one of process, none, not a list")
        expectDiagnostic(d, at: 6, 14, "'restart' must be one of on-failure, always, never, not 'on_failure'",
                         hint: .equals("did you mean 'on-failure'?"))
        expectDiagnostic(d, at: 9, 14, "'restart' must be one of on-failure, always, never, not 'sometimes'", hint: .none)
        #expect(m?.isolation == nil && monitor(m, "a")?.isolation == nil)
        #expect(monitor(m, "a")?.supervision.restart == .onFailure)
    }

    @Test("restart_backoff: each bound at least 10ms and at most 365d, min not past max (at max), a mapping")
    func backoff() throws {
        let (m, d) = load("""
            monitors:
              short:
                plugin: cpu
                restart_backoff: { min: 5ms, max: 400d }
              crossed:
                plugin: cpu
                restart_backoff:
                  min: 2m
                  max: 30s
              pastDefaultMax:
                plugin: cpu
                restart_backoff: { min: 10m }
              belowDefaultMin:
                plugin: cpu
                restart_backoff: { max: 500ms }
              scalar:
                plugin: cpu
                restart_backoff: 1s
              text:
                plugin: cpu
                restart_backoff: { min: soon }
            """ + "\n" + aSink)
        expectCount(d, 7)
        expectDiagnostic(d, at: 4, 29, "'restart_backoff.min' must be at least 10ms", hint: .none)
        expectDiagnostic(d, at: 4, 39, "'restart_backoff.max' is 400d, longer than the limit of 365d")
        expectDiagnostic(d, at: 9, 12, "'restart_backoff.max' (30s) is shorter than 'min' (2m)", hint: .none)
        expectDiagnostic(d, at: 12, 29, "'restart_backoff.min' (10m) is longer than the default 'max' (5m)",
                         hint: .equals("write a 'max' as well: restart_backoff: { min: 10m, max: 10m }"))
        expectDiagnostic(d, at: 15, 29, "'restart_backoff.max' (500ms) is shorter than 'min' (1s, the default)")
        expectDiagnostic(d, at: 18, 22, "'restart_backoff' must be a mapping, not a string",
                         hint: .equals("restart_backoff: { min: 1s, max: 5m }"))
        expectDiagnostic(d, at: 21, 29, "'restart_backoff.min' is not a duration: a string 'soon'", hint: .equals(durationHint))
        // A bound that was read stands even when the other is refused.
        #expect(monitor(m, "short")?.supervision.backoffMax == 300_000_000_000)
    }

    @Test("max_restarts from 0 to 1000, a whole number; restart_window from 1s to 365d")
    func counts() {
        let (_, d) = load("""
            monitors:
              a:
                plugin: cpu
                max_restarts: 1001
                restart_window: 500ms
              b:
                plugin: cpu
                max_restarts: -1
                restart_window: 400d
              c:
                plugin: cpu
                max_restarts: "x"
                restart_window: 10
            """ + "\n" + aSink)
        expectCount(d, 6)
        expectDiagnostic(d, at: 4, 19, "'max_restarts' must be between 0 and 1000, not 1001")
        expectDiagnostic(d, at: 5, 21, "'restart_window' must be at least 1s")
        expectDiagnostic(d, at: 8, 19, "'max_restarts' must be between 0 and 1000, not -1")
        expectDiagnostic(d, at: 9, 21, "'restart_window' is 400d, longer than the limit of 365d")
        expectDiagnostic(d, at: 12, 19, "'max_restarts' must be a whole number, not a string 'x'")
        expectDiagnostic(d, at: 13, 21, "'restart_window' is not a duration: a number '10'", hint: .equals(durationHint))
    }

    @Test("limits.memory: a size from 32MiB (the runner's own runtime) to 1PiB")
    func memory() throws {
        let (m, d) = load("""
            monitors:
              a:
                plugin: cpu
                limits:
                  memory: 16MiB
              b:
                plugin: cpu
                limits: { memory: 2PiB }
              c:
                plugin: cpu
                limits: { memory: lots, open_files: 64 }
            """ + "\n" + aSink)
        expectCount(d, 3)
        let small = expectDiagnostic(d, at: 5, 15, "'limits.memory' must be at least 32MiB")
        #expect(small?.hint?.contains("the runner is the vigil binary") == true, "\(String(describing: small))")
        expectDiagnostic(d, at: 8, 23, "'limits.memory' is 2PiB, larger than the limit of 1PiB")
        expectDiagnostic(d, at: 11, 23, "'limits.memory' is not a size: a string 'lots'", hint: .equals(sizeHint))
        // The mapping is kept with what was valid in it.
        #expect(monitor(m, "a")?.limits.isEmpty == true && monitor(m, "a")?.limitsLocation == loc(5, 7))
        #expect(monitor(m, "c")?.limits == ResourceLimits(openFiles: 64))
    }

    /// `  a: { plugin: cpu, ` is 20 characters: a value of `user:` is at column 27, of `limits: { cpu:` at 36.
    @Test("one bad value of limits.cpu, limits.open_files, limits or user, refused at its place", arguments: [
        ("limits: { cpu: 0.5% }", 36, "'limits.cpu' must be between 1% and 6400%, not 0.5%"),
        ("limits: { cpu: 6401% }", 36, "'limits.cpu' must be between 1% and 6400%, not 6401%"),
        ("limits: { cpu: 99999999999999999999999999999999% }", 36,
         "'limits.cpu' must be between 1% and 6400%, not 99999999999999999999999999999999%"),
        ("limits: { cpu: 1.2.3% }", 36, "'limits.cpu' is not a percentage: a string '1.2.3%'"),
        ("limits: { cpu: \"%\" }", 36, "'limits.cpu' is not a percentage: a string '%'"),
        ("limits: { cpu: [25%] }", 36, "'limits.cpu' is not a percentage: a list"),
        ("limits: { cpu: 1e3% }", 36, "'limits.cpu' is not a percentage: a string '1e3%'"),
        ("limits: { open_files: 8 }", 43, "'limits.open_files' must be between 16 and 1048576, not 8"),
        ("limits: { open_files: 2000000 }", 43, "'limits.open_files' must be between 16 and 1048576, not 2000000"),
        ("limits: { open_files: many }", 43, "'limits.open_files' must be a whole number, not a string 'many'"),
        ("limits: [memory]", 29, "'limits' must be a mapping, not a list"),
        ("user: \"svc\\tname\"", 27, "'user' holds a control character (U+09)"),
        ("user: \"svc\\u0085\"", 27, "'user' holds a control character (U+85)"),
        ("user: [nobody]", 27, "'user' must be a string, not a list"),
        ("user:", 27, "'user' must be a string, not nothing (null)"),
        ("user: 4294967295", 27, "'user' 4294967295 is not a uid: a numeric user is at most 4294967294"),
        ("user: 99999999999999999999999", 27, "'user' 99999999999999999999999 is not a uid"),
    ])
    func oneBadValue(setting: String, column: Int, message: String) throws {
        let (m, d) = load("monitors:\n  a: { plugin: cpu, \(setting) }\n" + aSink)
        expectCount(d, 1)
        expectDiagnostic(d, at: 2, column, message)
        let a = try #require(monitor(m, "a"))
        #expect(a.limits.isEmpty && a.user == nil && a.userLocation == nil)
    }

    @Test("the refusals that say how to write the value")
    func hints() {
        let (_, d) = load("""
            monitors:
              a: { plugin: cpu, limits: { cpu: 25 } }
              b: { plugin: cpu, limits: 5 }
              c: { plugin: cpu, user: "" }
            """ + "\n" + aSink)
        expectCount(d, 3)
        expectDiagnostic(d, at: 2, 36, "'limits.cpu' is not a percentage: a number '25'",
                         hint: .equals("write a percentage of one core: 25% for a quarter of a core, 200% for two cores"))
        expectDiagnostic(d, at: 3, 29, "'limits' must be a mapping, not a number",
                         hint: .equals("limits: { memory: 200MiB, cpu: 25%, open_files: 256 }"))
        expectDiagnostic(d, at: 4, 27, "'user' is empty", hint: .equals("name a user (nobody) or give a numeric uid (65534)"))
    }

    // MARK: isolation: none

    @Test("isolation: none on the monitor: each key for a runner is a warning at that key, and still checked")
    func warningsOnTheMonitor() throws {
        let (m, d) = load("""
            monitors:
              a:
                plugin: cpu
                isolation: none
                restart: always
                restart_backoff: { min: 1s }
                max_restarts: 3
                restart_window: 1m
                limits: { memory: 1MiB }
                user: nobody
            """ + "\n" + aSink)
        expectCount(d, 7)
        for (line, key) in [(5, "restart"), (6, "restart_backoff"), (7, "max_restarts"), (8, "restart_window"), (9, "limits"), (10, "user")] {
            expectDiagnostic(d, at: line, 5, "'\(key)' applies only to isolation: process",
                             hint: .equals("monitor 'a' runs in vigil's own process (isolation: none at test.yaml:4:16); remove '\(key)' or set isolation: process"),
                             level: .warning)
        }
        expectDiagnostic(d, at: 9, 23, "'limits.memory' must be at least 32MiB")
        let a = try #require(monitor(m, "a"))
        #expect(a.isolation == Isolation.none && a.supervision.restart == .always && a.user == "nobody")
    }

    @Test("isolation: none inherited from the top level warns the same, naming the top-level line")
    func warningsInherited() {
        let (_, d) = load("""
            isolation: none
            monitors:
              a:
                plugin: cpu
                user: nobody
              b:
                plugin: cpu
                isolation: process
                user: nobody
            """ + "\n" + aSink)
        expectCount(d, 1)
        expectDiagnostic(d, at: 5, 5, "'user' applies only to isolation: process",
                         hint: .equals("monitor 'a' runs in vigil's own process (the top-level isolation: none at test.yaml:1:12); remove 'user' or set isolation: process"),
                         level: .warning)
    }

    @Test("no warning with isolation: process, or with none said anywhere (the host's rule decides)")
    func noWarnings() {
        let (_, d1) = load("isolation: process\nmonitors:\n  a: { plugin: cpu, user: nobody, restart: never }\n" + aSink)
        expectCount(d1, 0)
        let (_, d2) = load("monitors:\n  a: { plugin: cpu, user: nobody, limits: { cpu: 50% } }\n" + aSink)
        expectCount(d2, 0)
    }
}
