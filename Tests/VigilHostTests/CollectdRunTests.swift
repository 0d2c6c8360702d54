import Foundation
import Glibc
import Synchronization
import Testing

/// The `collectd` plugin through the real `vigil`, with collectd's own
/// plugins (Debian's collectd-core) and a real collectd daemon: tail, exec
/// and python configured from a manifest; the network plugin receiving
/// from collectd over loopback; isolation, validation, describe; and a
/// hostile collectd plugin written against the headers alone.
@Suite(.serialized, .startsProcesses, .offThePool)
struct CollectdRunTests {
    let setup: CollectdTestSetup
    init() throws { setup = try CollectdTestSetup() }

    func run(_ manifest: String, in dir: String, for duration: String = "3s", control: String = "none",
             during: ((RunningProcess) throws -> Void)? = nil) throws -> (TestEnv.Output, CollectdValues, [[String: Any]]) {
        try TestEnv.write(manifest, to: dir + "/m.yaml")
        let process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/m.yaml", "--plugin-dir", setup.pluginDir, "--for", duration,
                                                        "--control", control])
        try during?(process)
        let output = process.wait(timeout: 90)
        let lines = ((try? String(contentsOfFile: dir + "/events.jsonl", encoding: .utf8)) ?? "").split(separator: "\n")
        let events = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        return (output, CollectdValues(file: dir + "/events.jsonl"), events)
    }

    static func sink(_ dir: String) -> String { "sinks:\n  out: { type: file, path: \(dir)/events.jsonl }\n" }

    @Test func tailCountsLinesAppendedToAFile() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = dir + "/app.log"
        try TestEnv.write("", to: log)
        let manifest = """
        monitors:
          cd_tail:
            plugin: collectd
            isolation: process
            interval: 500ms
            options:
              plugin: tail
              config:
                File:
                  $args: \(log)
                  Instance: app
                  Match: { Regex: "ERROR", DSType: CounterInc, Type: counter, Instance: errors }
        """ + "\n" + Self.sink(dir)
        let (output, values, _) = try run(manifest, in: dir, for: "4s") { _ in
            Thread.sleep(forTimeInterval: 1.5)
            let handle = try #require(FileHandle(forWritingAtPath: log))
            handle.seekToEndOfFile()
            handle.write(Data("ERROR one\nfine\nERROR two\nERROR three\n".utf8))
            try handle.close()
        }
        #expect(output.status == 0, "\(output.stderr)")
        let counts = values.of(monitor: "cd_tail").filter { $0.typeInstance == "errors" }
        #expect(counts.first?.fields["plugin"] as? String == "tail")
        #expect(counts.first?.pluginInstance == "app")
        #expect(counts.last?.number("value") == 3, "\(counts.map { $0.fields })")
        // collectd's type `counter` is a DERIVE source: named as a counter.
        #expect(counts.last?.fields["counters"] as? String == "value", "\(counts.map { $0.fields })")
    }

    @Test func execReadsAScriptsPutvalLines() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir, 0o755)
        let script = dir + "/putval.sh"
        try TestEnv.write("""
        #!/bin/sh
        while true; do
          echo "PUTVAL \\"$COLLECTD_HOSTNAME/exec-script/gauge-answer\\" interval=$COLLECTD_INTERVAL N:42"
          echo "PUTVAL \\"$COLLECTD_HOSTNAME/exec-script/derive-total\\" N:1000"
          sleep 0.5
        done
        """, to: script)
        chmod(script, 0o755)
        // exec refuses to run a program as root: it runs as nobody then.
        let user = getuid() == 0 ? "nobody" : String(cString: getpwuid(getuid()).pointee.pw_name)
        let manifest = """
        monitors:
          cd_exec:
            plugin: collectd
            isolation: process
            interval: 1s
            options: { plugin: exec, hostname: exec-host, config: { Exec: { $args: [\(user), \(script)] } } }
        """ + "\n" + Self.sink(dir)
        let (output, values, _) = try run(manifest, in: dir)
        #expect(output.status == 0, "\(output.stderr)")
        let answers = values.of(monitor: "cd_exec").filter { $0.type == "gauge" && $0.typeInstance == "answer" }
        #expect(!answers.isEmpty, "\(output.stderr)")
        #expect(answers.allSatisfy { $0.number("value") == 42 && $0.fields["host"] as? String == "exec-host" })
        #expect(answers.first?.pluginInstance == "script")
        let totals = values.of(monitor: "cd_exec").filter { $0.type == "derive" }
        #expect(totals.first?.fields["value"] as? Int == 1000, "derive sources are integers")
    }

    /// Issue 28: a collectd plugin that can only run in a process of its
    /// own (exec forks; a copy of load.so that is not collectd's own file
    /// is not vouched for) is put in a runner by default, with one line
    /// saying so, while two instances of load run in process, and
    /// `validate` calls the manifest valid; `isolation: none` still refuses it
    /// (pluginsThatNeedAProcessOfTheirOwnAreRefusedInProcessOthersRunTwice).
    @Test func pluginsThatNeedAProcessOfTheirOwnGetOneByDefault() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        chmod(dir, 0o755)
        let script = dir + "/putval.sh"
        try TestEnv.write("#!/bin/sh\nwhile true; do echo \"PUTVAL $COLLECTD_HOSTNAME/exec-script/gauge-answer N:42\"; sleep 0.5; done\n",
                          to: script)
        chmod(script, 0o755)
        let user = getuid() == 0 ? "nobody" : String(cString: getpwuid(getuid()).pointee.pw_name)
        let manifest = """
        monitors:
          cd_exec: { plugin: collectd, interval: 1s, options: { plugin: exec, config: { Exec: { $args: [\(user), \(script)] } } } }
          load_a: { plugin: collectd, interval: 1s, options: { plugin: load } }
          load_b: { plugin: collectd, interval: 1s, options: { plugin: load } }
          renamed: { plugin: collectd, interval: 1s, options: { plugin: \(dir)/load.so } }
        """ + "\n" + Self.sink(dir)
        try FileManager.default.copyItem(atPath: "/usr/lib/collectd/load.so", toPath: dir + "/load.so")
        try TestEnv.write(manifest, to: dir + "/m.yaml")
        // As installed: the collectd plugin in the host's own directory
        // (bin/../lib/vigil/plugins), where nothing says where it runs.
        let plugins = dir + "/lib/vigil/plugins"
        try FileManager.default.createDirectory(atPath: dir + "/bin", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
        try FileManager.default.linkItem(atPath: TestEnv.vigil, toPath: dir + "/bin/vigil")
        try FileManager.default.copyItem(atPath: setup.pluginDir + "/collectd.so", toPath: plugins + "/collectd.so")
        try FileManager.default.copyItem(atPath: setup.pluginDir + "/collectd-shim", toPath: plugins + "/collectd-shim")
        let vigil = dir + "/bin/vigil"
        let validate = try TestEnv.run(vigil, ["validate", dir + "/m.yaml"], timeout: 60)
        #expect(validate.status == 0, "\(validate.stdout)\(validate.stderr)")
        #expect((validate.stdout + validate.stderr).contains("note: monitor 'cd_exec' will run in a runner process: its plugin cannot run in the host's"),
                "\(validate.stdout)\(validate.stderr)")
        let output = try TestEnv.run(vigil, ["run", dir + "/m.yaml", "--for", "3s", "--control", "none"], timeout: 60)
        let values = CollectdValues(file: dir + "/events.jsonl")
        #expect(output.status == 0, "\(output.stderr)")
        let moved = output.stderr.split(separator: "\n").filter { $0.contains("moves to a runner process: its plugin cannot run in the host's (") }
        #expect(moved.count == 2, "\(output.stderr)")
        #expect(moved.contains { $0.contains("monitor 'cd_exec'") && $0.contains("'exec' plugin may start threads") }, "\(moved)")
        #expect(moved.contains { $0.contains("monitor 'renamed'") && $0.contains("is not collectd's own") }, "\(moved)")
        #expect(output.stderr.contains("monitor 'load_a' runs in process"), "\(output.stderr)")
        #expect(output.stderr.contains("monitor 'load_b' runs in process"), "\(output.stderr)")
        #expect(!output.stderr.contains(" error "), "\(output.stderr)")
        #expect(values.of(monitor: "cd_exec").contains { $0.type == "gauge" && $0.number("value") == 42 }, "\(output.stderr)")
        for monitor in ["load_a", "load_b", "renamed"] {
            #expect(!values.of(monitor: monitor).isEmpty, "\(monitor): \(output.stderr)")
        }
        // --once too: the moved monitor is the one watched.
        let once = try TestEnv.run(vigil, ["run", dir + "/m.yaml", "--once"], timeout: 60)
        #expect(once.status == 0, "\(once.stderr)")
        #expect(once.stdout.split(separator: "\n").contains { $0.hasPrefix("renamed/value ") }, "\(once.stdout)\(once.stderr)")
    }

    @Test func pythonRunsAModuleConfiguredFromTheManifest() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
        import collectd

        settings = {"prefix": "none", "scale": 1.0}

        def configure(conf):
            for node in conf.children:
                settings[node.key.lower()] = node.values[0]

        def read():
            collectd.Values(plugin="pyprobe", plugin_instance=settings["prefix"], type="gauge",
                            type_instance="scaled").dispatch(values=[21.0 * settings["scale"]])
            collectd.Notification(plugin="pyprobe", type="gauge", type_instance="hello",
                                  severity=collectd.NOTIF_FAILURE, message="from python").dispatch()

        collectd.register_config(configure)
        collectd.register_read(read)
        """, to: dir + "/vigil_probe.py")
        let manifest = """
        monitors:
          cd_python:
            plugin: collectd
            isolation: process
            interval: 1s
            options:
              plugin: python
              config:
                ModulePath: \(dir)
                Import: vigil_probe
                Module: { $args: vigil_probe, Prefix: mine, Scale: 2 }
        """ + "\n" + Self.sink(dir)
        let (output, values, events) = try run(manifest, in: dir)
        #expect(output.status == 0, "\(output.stderr)")
        let scaled = values.of(monitor: "cd_python").filter { $0.typeInstance == "scaled" }
        #expect(!scaled.isEmpty, "\(output.stderr)")
        #expect(scaled.allSatisfy { $0.number("value") == 42 && $0.pluginInstance == "mine" })
        let notes = events.filter { $0["kind"] as? String == "notification" }
        #expect(notes.first?["severity"] as? String == "error", "FAILURE is an error")
        #expect((notes.first?["fields"] as? [String: Any])?["message"] as? String == "from python")
    }

    /// Many in-process monitors of one plugin created at the same moment,
    /// under load, again and again: each runs its own copy of the file
    /// (statics of its own), so each first count is its own directory's.
    /// Before the shim took the "is the file taken?" decision and the
    /// module's registration under one lock, two could both load the file
    /// itself and share one configuration (issue 25: 10 runs in 20 wrong).
    @Test func monitorsOfOnePluginCreatedAtOnceKeepTheirOwnData() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let count = 12
        var monitors = "monitors:\n"
        for i in 1...count {
            let d = "\(dir)/d\(i)"
            try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
            for f in 0..<i { try TestEnv.write("x", to: "\(d)/f\(f)") }
            monitors += "  fc\(i): { plugin: collectd, isolation: none, interval: 1s, "
                + "options: { plugin: filecount, config: { Directory: { $args: \(d), Instance: i\(i) } } } }\n"
        }
        // Both cores busy while the monitors are created.
        let busy = Atomic<Bool>(true)
        let burners = (0..<2).map { _ in
            let t = Thread { var x = 0.0; while busy.load(ordering: .relaxed) { x += sin(x) } }
            t.start()
            return t
        }
        defer { busy.store(false, ordering: .relaxed); _ = burners }
        for run in 1...5 {
            try? FileManager.default.removeItem(atPath: dir + "/events.jsonl")
            let (output, values, _) = try self.run(monitors + "\n" + Self.sink(dir), in: dir, for: "1500ms")
            #expect(output.status == 0, "run \(run): \(output.stderr)")
            for i in 1...count {
                // Its own directory only, with its own count (a shared copy
                // reports every directory configured into it, or one count
                // over another's).
                let files = values.of(monitor: "fc\(i)").filter { $0.type == "files" }
                #expect(!files.isEmpty && files.allSatisfy { $0.pluginInstance == "i\(i)" && $0.number("value") == Double(i) },
                        "run \(run), fc\(i): \(files.map(\.fields))")
            }
        }
    }

    /// collectd's own perl and python plugins, as collectd runs them: their
    /// interpreters' extension modules (Perl's threads, Python's _decimal,
    /// _ssl, _contextvars) resolve symbols of libperl and libpython, which
    /// only a global load exports. The same scripts run by the real
    /// collectd daemon (its csv writer) give the same values.
    @Test func perlAndPythonRunTheirExtensionModulesAsCollectdDoes() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let collectd = try #require(["/usr/sbin/collectd", "/usr/bin/collectd"].first { FileManager.default.isExecutableFile(atPath: $0) },
                                    "collectd is not installed (apt-get install collectd-core; scripts/test-deps installs it)")
        try TestEnv.write("""
        import collectd, contextvars, decimal, ssl

        factor = contextvars.ContextVar("factor", default=3)

        def read():
            value = float(decimal.Decimal("1.25") * factor.get())
            collectd.Values(plugin="pyext", type="gauge", type_instance="decimal").dispatch(values=[value])
            collectd.Values(plugin="pyext", type="gauge", type_instance="ssl").dispatch(
                values=[1.0 if ssl.OPENSSL_VERSION_NUMBER > 0 else 0.0])

        collectd.register_read(read)
        """, to: dir + "/vigil_ext.py")
        try FileManager.default.createDirectory(atPath: dir + "/perl/Collectd/Plugins", withIntermediateDirectories: true)
        try TestEnv.write("""
        package Collectd::Plugins::VigilProbe;
        use strict;
        use warnings;
        use threads;
        use Collectd qw(:all);

        sub vigil_read {
            plugin_dispatch_values({ plugin => "plext", type => "gauge", type_instance => "answer", values => [6 * 7] });
            return 1;
        }

        plugin_register(TYPE_READ, "vigil_probe", "vigil_read");
        1;
        """, to: dir + "/perl/Collectd/Plugins/VigilProbe.pm")
        let manifest = """
        monitors:
          cd_python:
            plugin: collectd
            isolation: process
            interval: 1s
            options: { plugin: python, config: { ModulePath: \(dir), Import: vigil_ext } }
          cd_perl:
            plugin: collectd
            isolation: process
            interval: 1s
            options: { plugin: perl, config: { IncludeDir: \(dir)/perl, BaseName: Collectd::Plugins, LoadPlugin: VigilProbe } }
        """ + "\n" + Self.sink(dir)
        let (output, values, _) = try run(manifest, in: dir, for: "2500ms")
        #expect(output.status == 0, "\(output.stderr)")
        let mine: [String: Double] = Dictionary(
            (values.of(monitor: "cd_python") + values.of(monitor: "cd_perl")).compactMap { v in
                v.number("value").map { ("\(v.fields["plugin"] as? String ?? "")/\(v.typeInstance)", $0) }
            }, uniquingKeysWith: { first, _ in first })
        #expect(mine == ["pyext/decimal": 3.75, "pyext/ssl": 1, "plext/answer": 42], "\(mine)\n\(output.stderr)")

        // The same scripts under collectd itself, written by its csv plugin.
        try writeCollectdConf(in: dir, hostname: "vigiltest", """
        LoadPlugin csv
        <Plugin csv>
          DataDir "\(dir)/csv"
          StoreRates false
        </Plugin>
        <LoadPlugin python>
          Globals true
        </LoadPlugin>
        <Plugin python>
          ModulePath "\(dir)"
          Import "vigil_ext"
        </Plugin>
        <LoadPlugin perl>
          Globals true
        </LoadPlugin>
        <Plugin perl>
          IncludeDir "\(dir)/perl"
          BaseName "Collectd::Plugins"
          LoadPlugin VigilProbe
        </Plugin>

        """)
        let daemon = try TestEnv.start(collectd, ["-C", dir + "/collectd.conf", "-f"])
        Thread.sleep(forTimeInterval: 2.5)
        daemon.signal(SIGTERM)
        let said = daemon.wait(timeout: 10)
        var theirs: [String: Double] = [:]
        for (key, file) in [("pyext/decimal", "pyext/gauge-decimal"), ("pyext/ssl", "pyext/gauge-ssl"), ("plext/answer", "plext/gauge-answer")] {
            let found = (try? FileManager.default.contentsOfDirectory(atPath: "\(dir)/csv/vigiltest/\(file.split(separator: "/")[0])")) ?? []
            guard let name = found.first(where: { $0.hasPrefix(String(file.split(separator: "/")[1]) + "-") }),
                  let text = try? String(contentsOfFile: "\(dir)/csv/vigiltest/\(file.split(separator: "/")[0])/\(name)", encoding: .utf8),
                  let last = text.split(separator: "\n").last?.split(separator: ",").last,
                  let value = Double(last) else { continue }
            theirs[key] = value
        }
        #expect(theirs == mine, "collectd wrote \(theirs); vigil \(mine)\ncollectd: \(said.stdout) \(said.stderr)")
    }

    /// A plugin whose library is missing waits in its runner for a retry;
    /// at the end of the run that runner goes with the monitor, and the run
    /// ends on time (it used to end 2 s late: "some runner processes had
    /// not ended").
    @Test func aMonitorWaitingForAMissingLibraryLetsTheRunEndOnTime() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("int vigil_gone_value(void) { return 42; }\n", to: dir + "/gone.c")
        try TestEnv.write("""
        int vigil_gone_value(void);
        extern int plugin_register_read(const char *name, int (*callback)(void));
        static int read_it(void) { return vigil_gone_value() == 42 ? 0 : -1; }
        void module_register(void) { plugin_register_read("needs_gone", read_it); }
        """, to: dir + "/needs_gone.c")
        let build = try TestEnv.run("/bin/sh", ["-c", "cd \(dir) && ${CC:-cc} -shared -fPIC gone.c -o libgone.so && "
            + "${CC:-cc} -shared -fPIC needs_gone.c -L. -lgone -Wl,-rpath,\(dir) -Wl,--allow-shlib-undefined -o needs_gone.so && rm libgone.so"])
        try #require(build.status == 0, "\(build.stderr)")
        let manifest = """
        monitors:
          waiting:
            plugin: collectd
            isolation: process
            interval: 1s
            options: { plugin: \(dir)/needs_gone.so }
        """ + "\n" + Self.sink(dir)
        let started = Date()
        let (output, _, _) = try run(manifest, in: dir, for: "1500ms")
        let took = Date().timeIntervalSince(started)
        #expect(output.stderr.contains("libgone.so"), "\(output.stderr)")
        #expect(!output.stderr.contains("some runner processes had not ended"), "\(output.stderr)")
        #expect(took < 3.4, "the run took \(took) s for --for 1500ms\n\(output.stderr)")
    }

    @Test func networkReceivesFromARealCollectdDaemon() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let collectd = try #require(["/usr/sbin/collectd", "/usr/bin/collectd"].first { FileManager.default.isExecutableFile(atPath: $0) },
                                    "collectd is not installed (apt-get install collectd-core; scripts/test-deps installs it)")
        let port = try freeUDPPort()
        let sender = "sender-\(UUID().uuidString.prefix(8).lowercased())"
        try writeCollectdConf(in: dir, hostname: sender, """
        LoadPlugin load
        LoadPlugin memory
        <LoadPlugin network>
          FlushInterval 1
        </LoadPlugin>
        <Plugin network>
          Server "127.0.0.1" "\(port)"
        </Plugin>

        """)
        let manifest = """
        monitors:
          cd_agents:
            plugin: collectd
            isolation: process
            options: { plugin: network, config: { Listen: { $args: ["127.0.0.1", "\(port)"] } } }
        """ + "\n" + Self.sink(dir)
        var daemon: RunningProcess?
        var stopped: Date?
        let control = "unix:\(dir)/ctl.sock"
        let (output, values, events) = try run(manifest, in: dir, for: "7s", control: control) { _ in
            Thread.sleep(forTimeInterval: 0.5)
            daemon = try TestEnv.start(collectd, ["-C", dir + "/collectd.conf", "-f"])
            // Once values have come, the monitor is stopped while collectd
            // goes on sending: the network plugin's threads still receive,
            // but nothing reaches the host after stop returned.
            Thread.sleep(forTimeInterval: 3.5)
            let stop = try TestEnv.run(TestEnv.vigil, ["ctl", "stop", "cd_agents", "--control", control])
            stopped = Date()
            #expect(stop.status == 0, "\(stop.stdout)\(stop.stderr)")
        }
        daemon?.signal(SIGTERM)
        let said = daemon?.wait(timeout: 10)
        #expect(output.status == 0, "\(output.stderr)")
        let received = values.of(monitor: "cd_agents")
        #expect(received.contains { $0.fields["host"] as? String == sender && $0.fields["plugin"] as? String == "load" },
                "nothing from \(sender): \(received.prefix(3).map { $0.fields })\n\(output.stderr)\ncollectd: \(said?.stdout ?? "") \(said?.stderr ?? "")")
        #expect(received.contains { $0.fields["host"] as? String == sender && $0.type == "memory" })
        // The receiving host's own name is not put in place of the sender's.
        #expect(received.allSatisfy { $0.fields["host"] as? String == sender })
        // Nothing after the stop: the last value event came before it.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let times = events.filter { $0["monitor"] as? String == "cd_agents" && $0["kind"] as? String == "value" }
            .compactMap { ($0["time"] as? String).flatMap { formatter.date(from: String($0.prefix(23)) + "Z") } }
        let stopTime = try #require(stopped)
        #expect(!times.isEmpty && times.allSatisfy { $0 <= stopTime }, "values after the stop at \(stopTime): \(times.filter { $0 > stopTime })")
    }

    @Test func pluginsThatNeedAProcessOfTheirOwnAreRefusedInProcessOthersRunTwice() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // Plugins that must not run in process, asked to: the manifest's own
        // errors, so `run` refuses them as `validate` does (issue 26), each
        // at its place: one that may start threads, a file named like one
        // of collectd's that is not it, types that would redefine others'.
        try FileManager.default.copyItem(atPath: "/usr/lib/collectd/load.so", toPath: dir + "/load.so")
        try TestEnv.write("percent value:GAUGE:0:100, other:GAUGE:0:100\n", to: dir + "/percent.db")
        try TestEnv.write("""
        monitors:
          in_host: { plugin: collectd, isolation: none, options: { plugin: statsd } }
          renamed: { plugin: collectd, isolation: none, options: { plugin: \(dir)/load.so } }
          memory: { plugin: collectd, isolation: none, options: { plugin: memory, config: { ValuesPercentage: true } } }
          redefines: { plugin: collectd, isolation: none, options: { plugin: swap, types_db: [\(dir)/percent.db] } }

        """ + Self.sink(dir), to: dir + "/refused.yaml")
        let refused = try TestEnv.run(TestEnv.vigil, ["run", dir + "/refused.yaml", "--plugin-dir", setup.pluginDir, "--for", "2s",
                                                      "--control", "none"], timeout: 60)
        #expect(refused.status == 2, "\(refused.stderr)")
        #expect(refused.stderr.contains("refused.yaml:2:"), "at its place: \(refused.stderr)")
        #expect(refused.stderr.contains("collectd's 'statsd' plugin may start threads, handle signals, fork or exit the process: it needs a process of its own"),
                "\(refused.stderr)")
        #expect(refused.stderr.contains("monitor 'renamed': options.plugin: \(dir)/load.so is not collectd's own"), "\(refused.stderr)")
        #expect(refused.stderr.contains("percent.db: redefines type percent, which other monitors of this process use"),
                "\(refused.stderr)")
        let manifest = """
        monitors:
          load_a:
            plugin: collectd
            isolation: none
            interval: 1s
            options: { plugin: load }
          load_b:
            plugin: collectd
            isolation: none
            interval: 1s
            options: { plugin: load }
          load_isolated:
            plugin: collectd
            isolation: process
            interval: 1s
            options: { plugin: load }
          uptime_a: { plugin: collectd, isolation: none, interval: 1s, options: { plugin: uptime } }
          uptime_b: { plugin: collectd, isolation: none, interval: 1s, options: { plugin: uptime } }
          entropy_a: { plugin: collectd, isolation: none, interval: 1s, options: { plugin: entropy } }
          entropy_b: { plugin: collectd, isolation: none, interval: 1s, options: { plugin: entropy } }
          if_a: { plugin: collectd, isolation: none, interval: 1s, options: { plugin: interface, config: { Interface: lo } } }
          if_b: { plugin: collectd, isolation: none, interval: 1s, options: { plugin: interface, config: { Interface: lo } } }
          percent:
            plugin: collectd
            isolation: none
            interval: 1s
            options: { plugin: memory, config: { ValuesAbsolute: false, ValuesPercentage: true } }
        """ + "\n" + Self.sink(dir)
        let (output, values, _) = try run(manifest, in: dir, for: "2500ms")
        // Two instances of one plugin in the host's process: the second runs
        // a private copy of the plugin's file, with statics of its own.
        #expect(!output.stderr.contains("already loaded"), "\(output.stderr)")
        for monitor in ["load_a", "load_b"] {
            #expect(values.of(monitor: monitor).count >= 2, "\(monitor): \(output.stderr)")
        }
        // Each copy runs its own plugin's code, whichever loaded first.
        for (monitor, plugin) in [("uptime_a", "uptime"), ("uptime_b", "uptime"), ("entropy_a", "entropy"), ("entropy_b", "entropy"),
                                  ("load_a", "load"), ("load_b", "load")] {
            let plugins = Set(values.of(monitor: monitor).compactMap { $0.fields["plugin"] as? String })
            #expect(plugins == [plugin], "\(monitor): \(plugins)")
        }
        // Each instance's rates are its own: the first value of each has none.
        for monitor in ["if_a", "if_b"] {
            let octets = values.of(monitor: monitor).filter { $0.type == "if_octets" }
            #expect(octets.first.map { $0.fields["rx_rate"] == nil } == true, "\(monitor): \(octets.map(\.fields))")
            #expect(octets.dropFirst().allSatisfy { $0.fields["rx_rate"] != nil }, "\(monitor)")
        }
        // plugin_dispatch_multivalue with percentages dispatches type percent.
        let percent = values.of(monitor: "percent")
        #expect(!percent.isEmpty && percent.allSatisfy { $0.type == "percent" }, "\(percent.map(\.type))")
        #expect(!values.of(monitor: "load_isolated").isEmpty)
    }

    @Test func validateReportsMissingPluginsLibrariesAndRefusedConfigAtTheirPlace() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // A plugin whose library is missing: one of Debian's whose
        // dependencies are not installed here, if there is one.
        let missingLib = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/collectd"))?.sorted().first { file in
            file.hasSuffix(".so") && ((try? TestEnv.run("/usr/bin/ldd", ["/usr/lib/collectd/" + file]))?.stdout.contains("not found") ?? false)
        }
        var manifest = """
        isolation: process
        monitors:
          nosuch:
            plugin: collectd
            options: { plugin: no_such_plugin }
          badkey:
            plugin: collectd
            options:
              plugin: cpu
              config: { ReportByCpu: true, NoSuchKey: 1 }
          nested:
            plugin: collectd
            options:
              plugin: tail
              config:
                File:
                  $args: /var/log/none
                  Instance: x
                  Match: { Regex: "x", DSType: CounterInc, Type: counter, Unknown: y }
          listlist:
            plugin: collectd
            options: { plugin: df, config: { MountPoint: [[a, b]] } }
          unsafe_here:
            plugin: collectd
            isolation: none
            options: { plugin: network }
          topargs:
            plugin: collectd
            options: { plugin: df, config: { $args: x } }
          deep:
            plugin: collectd
            options: { plugin: df, config: \(String(repeating: "{ A: ", count: 33) + "1" + String(repeating: " }", count: 33)) }
          infinite:
            plugin: collectd
            options: { plugin: df, config: { MountPoint: .inf } }
          warned:                       # filecount only warns of the key, and fails at init
            plugin: collectd
            options: { plugin: filecount, config: { Directory: { $args: /tmp, Bogus: 1 } } }
          warned_value:                 # a value it could not read, only warned of
            plugin: collectd
            options: { plugin: filecount, config: { Directory: { $args: /tmp, MTime: garbage } } }
          warned_isolated:              # memcached only warns of the key, and never emits
            plugin: collectd
            options: { plugin: memcached, config: { Instance: { $args: x, Bogus: 1 } } }

        """
        if let missingLib {
            manifest += "  nolib:\n    plugin: collectd\n    options: { plugin: \(missingLib.dropLast(3)) }\n"
        }
        try TestEnv.write(manifest, to: dir + "/m.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml", "--plugin-dir", setup.pluginDir], timeout: 120)
        let text = result.stdout + result.stderr
        #expect(result.status != 0)
        #expect(text.contains("m.yaml:5:16: error: monitor 'nosuch': options.plugin: no collectd plugin 'no_such_plugin'"), "\(text)")
        #expect(text.contains("m.yaml:10:36: error: monitor 'badkey': options.config.NoSuchKey: the cpu plugin does not take 'NoSuchKey'"), "\(text)")
        #expect(text.contains("m.yaml:19:67: error: monitor 'nested': options.config.File.Match.Unknown: the tail plugin refused its configuration"), "\(text)")
        #expect(text.contains("monitor 'listlist': options.config.MountPoint[0]: a list inside a list"), "\(text)")
        #expect(text.contains("m.yaml:26:16: error: monitor 'unsafe_here': options.plugin: collectd's 'network' plugin may start threads"), "\(text)")
        #expect(text.contains("monitor 'topargs': options.config.$args: the plugin's own block takes no arguments"), "\(text)")
        #expect(text.contains("monitor 'deep': options.config" + String(repeating: ".A", count: 32) + ": nested deeper than 32 levels"),
                "\(text)")
        #expect(text.contains("monitor 'infinite': options.config.MountPoint: a null (or a number without a finite value"), "\(text)")
        // A warning naming a key of the configuration is a refusal of it, at that key.
        #expect(text.contains("m.yaml:38:71: error: monitor 'warned': options.config.Directory.Bogus: the filecount plugin refused its configuration"), "\(text)")
        #expect(text.contains("m.yaml:41:71: error: monitor 'warned_value': options.config.Directory.MTime: the filecount plugin refused its configuration: filecount plugin: Converting `garbage' to a number failed"),
                "\(text)")
        #expect(text.contains("m.yaml:44:67: error: monitor 'warned_isolated': options.config.Instance.Bogus: the memcached plugin refused its configuration"),
                "\(text)")
        if let missingLib {
            #expect(text.contains("monitor 'nolib' is unavailable on this machine: collectd's '\(missingLib.dropLast(3))' plugin needs lib"),
                    "\(text)")
        }
    }

    @Test func describeListsTheCollectdPluginsInstalledHere() throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "collectd", "--plugin-dir", setup.pluginDir])
        #expect(result.status == 0, "\(result.stderr)")
        let installed = try FileManager.default.contentsOfDirectory(atPath: "/usr/lib/collectd").filter { $0.hasSuffix(".so") }
        for name in ["cpu", "df", "network", "python"] where installed.contains(name + ".so") {
            #expect(result.stdout.contains(name), "describe does not list \(name): \(result.stdout)")
        }
        #expect(result.stdout.contains("value") && result.stdout.contains("notification"))
        #expect(result.stdout.contains("type_instance"))
    }

    @Test func theCheckerAcceptsThePluginAsShipped() throws {
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "check", setup.pluginDir + "/collectd.so"], timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\n\(result.stderr)")
    }

    /// Debian's builds of the plugins allowed in the host's process do none
    /// of what a plugin needs a process of its own for.
    @Test func pluginsAllowedInProcessImportNothingThatNeedsAProcessOfTheirOwn() throws {
        let source = try String(contentsOfFile: TestEnv.repoRoot + "/Plugins/collectd/collectd.c", encoding: .utf8)
        let start = try #require(source.range(of: "in_process_safe[] = {"))
        let end = try #require(source.range(of: "};", range: start.upperBound..<source.endIndex))
        let names = source[start.upperBound..<end.lowerBound].split(separator: ",").map {
            $0.trimmingCharacters(in: .whitespacesAndNewlines).trimmingCharacters(in: CharacterSet(charactersIn: "\""))
        }.filter { !$0.isEmpty }
        #expect(names.count >= 30)
        let forbidden: Set<String> = ["pthread_create", "pthread_kill", "plugin_thread_create", "fork", "vfork", "exit", "_exit",
                                      "abort", "sigaction", "signal", "popen", "system", "execv", "execve", "execvp", "daemon",
                                      "setuid", "dlopen"]
        for name in names {
            let path = "/usr/lib/collectd/\(name).so"
            guard FileManager.default.fileExists(atPath: path) else { continue }
            let nm = try TestEnv.run("/usr/bin/nm", ["-D", "--undefined-only", path])
            let imported = Set(nm.stdout.split(separator: "\n").compactMap { $0.split(separator: " ").last.map { String($0.split(separator: "@")[0]) } })
            #expect(imported.isDisjoint(with: forbidden), "\(name) imports \(imported.intersection(forbidden).sorted())")
        }
    }

    /// A collectd plugin that dispatches what it should not (more values
    /// than its type has, an unknown type, names without a NUL, a
    /// notification with 300 meta entries), unregisters itself from inside
    /// its read, exits or crashes: the host counts and goes on, the
    /// bystander keeps running.
    @Test func aHostileCollectdPluginCostsOnlyItsOwnRunner() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plugin = try buildHostilePlugin(in: dir)
        let manifest = """
        isolation: process
        monitors:
          abuse:
            plugin: collectd
            interval: 300ms
            options: { plugin: \(plugin) }
          exits:
            plugin: collectd
            interval: 300ms
            restart: never
            options: { plugin: \(plugin), config: { Mode: exit } }
          crashes:
            plugin: collectd
            interval: 300ms
            restart: never
            options: { plugin: \(plugin), config: { Mode: crash } }
          bystander:
            plugin: collectd
            interval: 300ms
            options: { plugin: load }
        """ + "\n" + Self.sink(dir)
        let (output, values, events) = try run(manifest, in: dir, for: "3s")
        // Monitors failed: not a clean run, but the host stayed up and said so.
        #expect(output.stderr.contains("stopped;"), "\(output.stderr)")
        #expect(output.stderr.contains("exit") || output.stderr.contains("exited"), "\(output.stderr)")
        #expect(output.stderr.contains("SIGSEGV"), "\(output.stderr)")
        let abuse = values.of(monitor: "abuse")
        let ok = abuse.filter { $0.typeInstance == "ok" }.compactMap { $0.number("value") }
        #expect(ok.prefix(3) == [1, 2, 3], "\(ok)")
        #expect(abuse.contains { $0.typeInstance == "second" }, "a read registered from inside a read runs")
        #expect(!abuse.contains { $0.type == "no_such_type" })
        // Names without a NUL are cut at 127 bytes, never read past.
        let raw = abuse.first { ($0.fields["host"] as? String)?.hasPrefix("hhh") == true }
        #expect((raw?.fields["host"] as? String)?.count == 127)
        #expect((raw?.fields["type_instance"] as? String)?.count == 127)
        let notes = events.filter { $0["monitor"] as? String == "abuse" && $0["kind"] as? String == "notification" }
        let fields = notes.first?["fields"] as? [String: Any]
        #expect((fields?["message"] as? String)?.count == 255)
        #expect(fields?["k254"] as? Int == 254, "meta entries as fields, the first 256")
        #expect(fields?["k255"] == nil)
        #expect(fields?["meta_host"] as? String == "a meta named like a field")
        #expect(values.of(monitor: "bystander").count >= 5)
        // What the shim did not dispatch is said, with how many of each.
        #expect(output.stderr.contains("value lists of collectd's hostile_cd plugin not dispatched (as collectd would not): "),
                "\(output.stderr)")
        #expect(values.of(monitor: "exits").filter { $0.typeInstance == "ok" }.count <= 1, "exit(7) on the second read")
    }

    /// collectd's read scheduling: a read callback with an interval of its
    /// own runs at that interval, not the monitor's; a failing one waits
    /// twice as long after each failure (collectd's back-off).
    @Test func readCallbacksKeepTheirIntervalsAndBackOffWhenTheyFail() throws {
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plugin = try buildHostilePlugin(in: dir)
        let manifest = """
        isolation: process
        monitors:
          failing:
            plugin: collectd
            interval: 100ms
            options: { plugin: \(plugin), config: { Mode: failing } }
          slow:
            plugin: collectd
            interval: 100ms
            options: { plugin: \(plugin), config: { Mode: slow } }
        """ + "\n" + Self.sink(dir)
        let (output, values, _) = try run(manifest, in: dir, for: "3200ms")
        // Reads at 0, 0.2, 0.6, 1.4 and 3.0 s: 5, where the monitor's 100 ms would give 32.
        let attempts = values.of(monitor: "failing").filter { $0.typeInstance == "attempt" }.count
        #expect((4...6).contains(attempts), "\(attempts) failing reads\n\(output.stderr)")
        #expect(output.stderr.contains("read function failing failed; suspended for 0.800 s"), "\(output.stderr)")
        // Every second, where the monitor polls every 100 ms: 3 or 4 in 3.2 s.
        let slow = values.of(monitor: "slow").filter { $0.typeInstance == "slow" }.count
        #expect((3...4).contains(slow), "\(slow) reads of a callback with a 1 s interval")
    }

    /// Tests/Fixtures/collectd/hostile_cd.c built with cc against collectd-dev's headers, into `dir`.
    /// A collectd.conf for the real daemon in `dir` (its base directory
    /// there, Debian's plugins and types), then `body`.
    func writeCollectdConf(in dir: String, hostname: String, _ body: String) throws {
        try FileManager.default.createDirectory(atPath: dir + "/base", withIntermediateDirectories: true)
        try TestEnv.write("""
        Hostname "\(hostname)"
        FQDNLookup false
        Interval 1
        BaseDir "\(dir)/base"
        PIDFile "\(dir)/base/collectd.pid"
        PluginDir "/usr/lib/collectd"
        TypesDB "/usr/share/collectd/types.db"

        """ + body, to: dir + "/collectd.conf")
    }

    func buildHostilePlugin(in dir: String) throws -> String {
        let plugin = dir + "/hostile_cd.so"
        let build = try TestEnv.run("/bin/sh", ["-c", "${CC:-cc} -std=gnu11 -O2 -shared -fPIC -DHAVE_CONFIG_H -I/usr/include/collectd -I/usr/include/collectd/core \(TestEnv.fixture("collectd/hostile_cd.c")) -o \(plugin)"])
        try #require(build.status == 0, "\(build.stderr)")
        return plugin
    }

    func freeUDPPort() throws -> Int {
        let s = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(s) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(s, $0, length) == 0 && getsockname(s, $0, &length) == 0 }
        }
        guard ok else { throw TestFailure("no UDP port: errno \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// The shim's C unit tests (Tests/Fixtures/collectd/*_test.c), built with
/// cc against collectd-dev's headers and run.
struct CollectdShimUnitTests {
    func buildAndRun(_ test: String, _ sources: [String], sanitize: Bool = false) throws -> TestEnv.Output {
        _ = try CollectdTestSetup()
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let shim = TestEnv.repoRoot + "/Plugins/collectd/shim/"
        let files = ([TestEnv.fixture("collectd/\(test).c")] + sources.map { shim + $0 }).joined(separator: " ")
        let flags = "-std=gnu11 -Wall -Wextra -Wno-unused-parameter -O1 -g -pthread -DHAVE_CONFIG_H -I/usr/include/collectd -I/usr/include/collectd/core -I\(shim)"
            + (sanitize ? " -fsanitize=address,undefined -fno-sanitize-recover=all" : "")
        let build = try TestEnv.run("/bin/sh", ["-c", "${CC:-cc} \(flags) \(files) -lm -o \(dir)/\(test)"], timeout: 120)
        try #require(build.status == 0, "\(build.stderr)")
        return try TestEnv.run(dir + "/" + test, [], timeout: 120)
    }

    @Test func utilitiesAndContainers() throws {
        let result = try buildAndRun("util_test", ["util.c", "containers.c"], sanitize: true)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("ok "))
    }

    /// Every collectd plugin installed here binds to the shim: each one
    /// either loads with all it imports from the daemon found, or needs a
    /// library of its own that is not installed; none misses a symbol.
    @Test func everyInstalledCollectdPluginLinksAgainstTheShim() throws {
        let setup = try CollectdTestSetup()
        let dir = try TestEnv.tempDir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let build = try TestEnv.run("/bin/sh", ["-c", "${CC:-cc} -O1 \(TestEnv.fixture("collectd/link_all.c")) -ldl -o \(dir)/link_all"])
        try #require(build.status == 0, "\(build.stderr)")
        // A process of its own: some plugins' libraries start a runtime when loaded.
        let result = try TestEnv.run(dir + "/link_all", [setup.pluginDir + "/collectd-shim/libvigil_collectd_shim.so", "/usr/lib/collectd"],
                                     timeout: 120)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let loaded = result.stdout.split(separator: "\n").last.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0.filter(\.isNumber)) }
        #expect((loaded ?? 0) >= 60, "\(result.stdout)")
        print("collectd plugins against the shim: \(result.stdout.split(separator: "\n").last ?? "")")
    }

    @Test func typesDBAndValueCache() throws {
        let result = try buildAndRun("cache_test", ["typesdb.c", "cache.c", "util.c", "containers.c"], sanitize: true)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("ok "))
    }
}
