import Foundation
import Glibc
import Synchronization
import Testing
import VigilForeign

/// The `munin` plugin through the real `vigil`, with Debian's own munin
/// plugins (munin-plugins-core), each compared with `munin-run` run just
/// before and just after vigil's run: vigil's value lies between the two
/// (with slack for the few that move up and down), its fields, labels and
/// types are those munin-run prints. Then plugin-conf.d's user, group, env
/// and wildcards against munin-run, and hostile plugins written here.
@Suite(.serialized, .startsProcesses, .offThePool)
struct MuninRunTests {
    static let munin = "/usr/share/munin/plugins"
    static let muninRun = "/usr/sbin/munin-run"
    static let debianConf = "/etc/munin/plugin-conf.d"

    /// Debian's plugins this compares. Those that move both ways between
    /// two runs a moment apart get slack; the counters must fall between.
    static let plugins = ["cpu", "df", "df_inode", "diskstats", "entropy", "forks", "fw_conntrack", "fw_forwarded_local",
                          "fw_packets", "interrupts", "irqstats", "load", "memory", "netstat", "open_files", "open_inodes",
                          "proc_pri", "processes", "swap", "threads", "uptime", "users", "vmstat"]
    static let volatile: Set<String> = ["df", "df_inode", "entropy", "fw_conntrack", "load", "memory", "open_files", "open_inodes",
                                        "proc_pri", "processes", "threads", "users", "vmstat", "netstat"]
    /// Keeps its own state between runs (a rate of its own): vigil's runs
    /// and munin-run's do not share it, so only what it declares is compared.
    static let stateful: Set<String> = ["diskstats"]

    static func dir() throws -> String {
        let dir = try TestEnv.tempDir()
        chmod(dir, 0o755)
        return dir
    }

    /// `dir/name`, made 0755: plugins and their configuration are refused
    /// from a directory others can write.
    static func subdirectory(_ name: String, of dir: String) throws -> String {
        let path = dir + "/" + name
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        chmod(path, 0o755)
        return path
    }

    func run(_ monitors: String, in dir: String, for duration: String = "4s") throws -> (TestEnv.Output, [[String: Any]]) {
        try TestEnv.write("monitors:\n" + monitors + "\nsinks:\n  out: { type: file, path: \(dir)/events.jsonl }\n", to: dir + "/m.yaml")
        let output = try TestEnv.run(TestEnv.vigil, ["run", dir + "/m.yaml", "--for", duration, "--control", "none"], timeout: 180)
        return (output, NagiosRunTests.events(dir + "/events.jsonl"))
    }

    /// munin-run's output for `service` in `serviceDir`.
    static func muninRun(_ service: String, _ argument: String? = nil, serviceDir: String, conf: String) throws -> TestEnv.Output {
        var arguments = ["--servicedir", serviceDir, "--sconfdir", conf, service]
        if let argument { arguments.append(argument) }
        return try TestEnv.run(muninRun, arguments, timeout: 60)
    }

    static func parse(_ text: String, _ service: String) -> Munin.Output { Munin.parse(Array(text.utf8), plugin: service) }

    /// graph → field → value, from an output.
    static func values(_ output: Munin.Output) -> [String: [String: Double?]] {
        var values: [String: [String: Double?]] = [:]
        for graph in output.graphs {
            for field in graph.fields {
                guard let value = field.value else { continue }
                if case .number(let n, _, _) = value { values[graph.name, default: [:]][field.name] = n } else { values[graph.name, default: [:]][field.name] = .some(nil) }
            }
        }
        return values
    }

    /// One run of munin-run: when (seconds since the epoch) and what it gave.
    struct ByHand {
        var began: Double
        var ended: Double
        var values: [String: [String: Double?]]
    }

    /// An event's time ("2026-11-29T17:46:59.791172337Z") in seconds since the epoch.
    static func seconds(_ time: Any?) -> Double? {
        guard let text = time as? String, text.count >= 20 else { return nil }
        let whole = String(text.prefix(19)) + "Z"
        guard let date = ISO8601DateFormatter().date(from: whole) else { return nil }
        let fraction = text.dropFirst(19).dropLast().drop { $0 == "." }
        return date.timeIntervalSince1970 + (Double("0." + fraction) ?? 0)
    }

    @Test func debiansPluginsGiveWhatMuninRunGives() throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.muninRun), "munin-node is not installed (scripts/test-deps installs it)")
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let serviceDir = try Self.subdirectory("plugins", of: dir)
        var services = Self.plugins.filter { FileManager.default.isExecutableFile(atPath: Self.munin + "/" + $0) }
        for service in services { symlink(Self.munin + "/" + service, serviceDir + "/" + service) }
        // The wildcard ones through their suggest, asked of munin-run as
        // munin-node-configure asks it (from a directory of their own, or
        // vigil's all-of-plugin_dir instance would run if_ itself).
        let wildDir = try Self.subdirectory("wild", of: dir)
        var wild: [String] = []
        for base in ["if_", "if_err_"] {
            symlink(Self.munin + "/" + base, wildDir + "/" + base)
            let suggested = try Self.muninRun(base, "suggest", serviceDir: wildDir, conf: Self.debianConf)
            for suffix in suggested.stdout.split(separator: "\n") where !suffix.isEmpty {
                symlink(Self.munin + "/" + base, serviceDir + "/" + base + suffix)
                wild.append(base + suffix)
            }
        }
        #expect(!wild.isEmpty, "if_ suggests no interface on this machine")
        services += wild
        #expect(services.count >= 20, "\(services)")

        var configs: [String: Munin.Output] = [:]
        for service in services {
            configs[service] = Self.parse(try Self.muninRun(service, "config", serviceDir: serviceDir, conf: Self.debianConf).stdout, service)
        }
        // All of plugin_dir in one instance, and the wildcards through suggest in others.
        let monitors = """
              all:
                plugin: munin
                interval: 2s
                options: { plugin_dir: \(serviceDir), plugin_conf_dir: \(Self.debianConf), state_dir: \(dir)/state }
              ifs:
                plugin: munin
                interval: 2s
                options: { plugin: \(Self.munin)/if_, plugin_conf_dir: \(Self.debianConf), state_dir: \(dir)/state }
              if_errs:
                plugin: munin
                interval: 2s
                options: { plugin: \(Self.munin)/if_err_, plugin_conf_dir: \(Self.debianConf), state_dir: \(dir)/state }
            sinks:
              out: { type: file, path: \(dir)/events.jsonl }
            """
        try TestEnv.write("monitors:\n" + monitors + "\n", to: dir + "/m.yaml")
        // munin-run over and over while vigil runs its rounds, each run's
        // start and end noted: a value of vigil's is compared with the runs
        // just before and just after it, when vigil (its threads, its
        // memory) is part of what both see.
        // Four passes over every plugin, however long each takes (under CI's
        // load one pass took longer than a fixed run of vigil's), with vigil
        // running a round every 2 s beside them: each plugin has a round of
        // vigil's between two of its runs by hand. Then vigil is stopped.
        let process = try TestEnv.start(TestEnv.vigil, ["run", dir + "/m.yaml", "--for", "300s", "--control", "none"])
        // memory's values are the whole host's: under the suite another
        // test's ring in /dev/shm or its processes come and go within a
        // pass (shmem 9 MB, then 12 MB at vigil's round, then 9 MB again).
        // munin-run memory runs over and over beside the passes, so that
        // vigil's round has runs by hand a fraction of a second around it.
        let sampled = Mutex<[ByHand]>([])
        let sampling = Atomic<Bool>(true)
        let sampler = Thread {
            while sampling.load(ordering: .relaxed) {
                let began = Date().timeIntervalSince1970
                guard let fetched = try? Self.muninRun("memory", serviceDir: serviceDir, conf: Self.debianConf) else { usleep(100_000); continue }
                let run = ByHand(began: began, ended: Date().timeIntervalSince1970, values: Self.values(Self.parse(fetched.stdout, "memory")))
                sampled.withLock { $0.append(run) }
            }
        }
        if services.contains("memory") { sampler.start() }
        var byHand: [String: [ByHand]] = [:]
        var exitStatus: [String: Int32] = [:]
        for _ in 0..<4 where process.isRunning {
            for service in services where process.isRunning {
                let began = Date().timeIntervalSince1970
                let fetched = try Self.muninRun(service, serviceDir: serviceDir, conf: Self.debianConf)
                exitStatus[service] = fetched.status
                byHand[service, default: []].append(ByHand(began: began, ended: Date().timeIntervalSince1970,
                                                           values: Self.values(Self.parse(fetched.stdout, service))))
            }
        }
        process.signal(SIGTERM)
        let output = process.wait(timeout: 60)
        sampling.store(false, ordering: .relaxed)
        while sampler.isExecuting { usleep(10_000) }
        byHand["memory", default: []] += sampled.withLock { $0 }
        byHand["memory"]?.sort { $0.began < $1.began }
        let events = NagiosRunTests.events(dir + "/events.jsonl")
        #expect(output.status == 0, "\(output.stderr)")

        let runs = NagiosRunTests.of(events, monitor: "all", kind: "run")
        for service in services {
            #expect(runs.contains { $0["plugin"] as? String == service }, "\(service): not run by the all-of-plugin_dir instance")
        }
        // The suggested ones, by the wildcard instances as by munin-run's suggest.
        let ifRuns = NagiosRunTests.of(events, monitor: "ifs", kind: "run").compactMap { $0["plugin"] as? String }
        #expect(Set(ifRuns) == Set(wild.filter { !$0.hasPrefix("if_err_") }), "\(ifRuns) suggested \(wild)")
        let errRuns = NagiosRunTests.of(events, monitor: "if_errs", kind: "run").compactMap { $0["plugin"] as? String }
        #expect(Set(errRuns) == Set(wild.filter { $0.hasPrefix("if_err_") }), "\(errRuns) suggested \(wild)")

        var compared = 0
        let allRuns = events.filter {
            ($0["monitor"] as? String).map { ["all", "ifs", "if_errs"].contains($0) } == true && $0["kind"] as? String == "run"
        }
        for service in services {
            let fields = events.filter {
                ($0["monitor"] as? String).map { ["all", "ifs", "if_errs"].contains($0) } == true && $0["kind"] as? String == "field"
                    && ($0["fields"] as? [String: Any])?["plugin"] as? String == service
            }
            let run = runs.first { $0["plugin"] as? String == service }
            #expect((run?["ok"] as? Bool) == (exitStatus[service] == 0), "\(service): \(run ?? [:]) munin-run exited \(exitStatus[service] ?? -1)")
            let config = configs[service] ?? Munin.Output()
            // Labels, types, units and categories are the config's.
            for event in fields {
                let field = event["fields"] as? [String: Any] ?? [:]
                let graph = config.graph(field["graph"] as? String ?? "")
                let declared = graph?.field(field["field"] as? String ?? "")
                #expect(declared != nil, "\(service): \(field) is not in munin-run's config")
                #expect(field["label"] as? String == declared?.label, "\(service): \(field)")
                #expect(field["type"] as? String == declared?.type.rawValue, "\(service): \(field)")
                #expect(field["category"] as? String == graph?.attributes["graph_category"], "\(service): \(field)")
            }
            if Self.stateful.contains(service) {
                // A multigraph plugin with state of its own: its graphs are the config's.
                let graphs = Set(fields.compactMap { ($0["fields"] as? [String: Any])?["graph"] as? String })
                #expect(graphs.count > 1 && graphs.isSubset(of: Set(config.graphs.map(\.name))), "\(service): \(graphs)")
                continue
            }
            // A round of vigil's between two runs by hand.
            let hands = byHand[service] ?? []
            var bracket: (ByHand, [String: [String: Double?]], ByHand, [ByHand])?
            for event in allRuns where (event["fields"] as? [String: Any])?["plugin"] as? String == service {
                guard let time = Self.seconds(event["time"]) else { continue }
                let took = (event["fields"] as? [String: Any])?["duration"] as? Double ?? 0
                guard let before = hands.last(where: { $0.ended < time - took }),
                      let after = hands.first(where: { $0.began > time }) else { continue }
                // What moves both ways: every run by hand within a second of
                // the two around vigil's round, so that a value that came and
                // went between two of them is seen by the others.
                let around = Self.volatile.contains(service)
                    ? hands.filter { $0.ended >= before.began - 1 && $0.began <= after.ended + 1 } : [before, after]
                var seen: [String: [String: Double?]] = [:]
                for e in fields where Self.seconds(e["time"]).map({ abs($0 - time) < 0.05 }) == true {
                    let field = e["fields"] as? [String: Any] ?? [:]
                    seen[field["graph"] as? String ?? "", default: [:]][field["field"] as? String ?? ""] = .some(field["value"] as? Double)
                }
                bracket = (before, seen, after, around)
                break
            }
            guard let (before, seen, after, around) = bracket else {
                Issue.record("\(service): no round of vigil's fell between two runs of munin-run (\(hands.count) runs by hand)")
                continue
            }
            let a = before.values, b = after.values
            #expect(Set(seen.keys) == Set(a.keys), "\(service): graphs \(seen.keys.sorted()) munin-run \(a.keys.sorted())")
            for (graph, values) in a {
                #expect(Set(seen[graph]?.keys ?? [:].keys) == Set(values.keys), "\(service) \(graph): \(seen[graph] ?? [:]) munin-run \(values)")
                for (name, first) in values {
                    let mine = seen[graph]?[name] ?? nil
                    let second = b[graph]?[name] ?? nil
                    guard let first, let second else {
                        #expect(mine == nil || first == nil || second == nil, "\(service) \(graph).\(name)")
                        continue
                    }
                    guard let mine else {
                        Issue.record("\(service) \(graph).\(name): vigil has U, munin-run \(first) and \(second)")
                        continue
                    }
                    let seenByHand = around.compactMap { $0.values[graph]?[name] ?? nil }
                    let low = seenByHand.min() ?? min(first, second), high = seenByHand.max() ?? max(first, second)
                    let scale = max(abs(low), abs(high))
                    // memory's page tables and committed bytes move with the
                    // processes of the moment (munin-run's perl, vigil's other plugins).
                    let share = service == "memory" ? 0.25 : 0.1
                    // Established connections: the tests running beside it open and close dozens.
                    // The host's threads, processes and open files: other tests'
                    // vigils (dozens of threads each) start and stop within a pass.
                    let least: Double = switch (service, name) {
                    case ("netstat", "established"): 32
                    case ("threads", _): 96
                    case ("processes", _), ("proc_pri", _): 32
                    case ("open_files", _): 256
                    default: 5
                    }
                    let slack = Self.volatile.contains(service) ? max(least, scale * share) : scale * 1e-9
                    #expect(mine >= low - slack && mine <= high + slack,
                            "\(service) \(graph).\(name): vigil \(mine), munin-run \(first) then \(second), \(low)...\(high) in \(around.count) runs around")
                    compared += 1
                }
            }
        }
        #expect(compared >= 60, "only \(compared) values compared")
        // netstat is a multigraph plugin: both its graphs came.
        let netstat = Set(events.compactMap { ($0["fields"] as? [String: Any]).flatMap { $0["plugin"] as? String == "netstat" ? $0["graph"] as? String : nil } })
        #expect(netstat.count >= 2 && netstat == Set((configs["netstat"] ?? Munin.Output()).graphs.map(\.name)), "\(netstat)")
    }

    // MARK: plugin-conf.d

    @Test func pluginConfUserGroupEnvAndWildcardsAsMuninRunHasThem() throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.muninRun), "munin-node is not installed")
        try #require(geteuid() == 0, "changing user takes root")
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plugins = try Self.subdirectory("plugins", of: dir), conf = try Self.subdirectory("conf", of: dir)
        let who = """
            #!/bin/sh
            if [ "$1" = config ]; then
              echo 'graph_title who runs me'
              for f in uid gid groups answer other home statefile; do echo "$f.label $f"; done
              exit 0
            fi
            echo "uid.value $(id -u)"
            echo "gid.value $(id -g)"
            echo "groups.value $(id -G | wc -w)"
            echo "answer.value ${answer:-U}"
            echo "other.value ${other:-U}"
            if [ -d "$MUNIN_PLUGSTATE" ] && [ -w "$MUNIN_PLUGSTATE" ]; then echo home.value 1; else echo home.value 0; fi
            case "$MUNIN_STATEFILE" in "$MUNIN_PLUGSTATE/$(basename $0)-") echo statefile.value 1;; *) echo statefile.value 0;; esac
            """
        for name in ["who_nobody", "who_root", "who_default", "who_cmd"] {
            try TestEnv.write(who + "\n", to: plugins + "/" + name)
            chmod(plugins + "/" + name, 0o755)
        }
        try TestEnv.write("""
            [who_*]
            env.answer 1
            env.other 7

            [who_nobody]
            user nobody
            group nogroup, (no-such-group-here)
            env.answer 42  # the plugin's own wins over the wildcard

            [who_root]
            user root

            [who_cmd]
            command env answer=5 %c
            """, to: conf + "/10-test")
        try TestEnv.write("[who_root]\nenv.answer 99\n", to: conf + "/20-later")
        chmod(conf + "/10-test", 0o644)
        chmod(conf + "/20-later", 0o644)

        let (output, events) = try run("""
              who:
                plugin: munin
                interval: 1m
                options: { plugin_dir: \(plugins), plugin_conf_dir: \(conf), state_dir: \(dir)/state }
            """, in: dir, for: "3s")
        #expect(output.status == 0, "\(output.stderr)")
        let fields = NagiosRunTests.of(events, monitor: "who", kind: "field")
        for service in ["who_nobody", "who_root", "who_default", "who_cmd"] {
            let byHand = Self.values(Self.parse(try Self.muninRun(service, serviceDir: plugins, conf: conf).stdout, service))[service] ?? [:]
            #expect(byHand.count == 7, "\(service): munin-run \(byHand)")
            for (name, value) in byHand where name != "home" && name != "statefile" {
                let mine = fields.first { $0["plugin"] as? String == service && $0["field"] as? String == name }
                #expect(mine?["value"] as? Double == value, "\(service).\(name): vigil \(mine ?? [:]) munin-run \(String(describing: value))")
            }
            let home = fields.first { $0["plugin"] as? String == service && $0["field"] as? String == "home" }
            #expect(home?["value"] as? Double == 1, "\(service): MUNIN_PLUGSTATE is not the plugin user's to write")
            let statefile = fields.first { $0["plugin"] as? String == service && $0["field"] as? String == "statefile" }
            #expect(statefile?["value"] as? Double == 1, "\(service): MUNIN_STATEFILE")
        }
        let nobody = fields.first { $0["plugin"] as? String == "who_nobody" && $0["field"] as? String == "uid" }
        #expect(nobody?["value"] as? Double == 65534)
        let answers = fields.filter { $0["field"] as? String == "answer" }.map { "\($0["plugin"]!)=\($0["value"] ?? "U")" }
        #expect(Set(answers) == ["who_nobody=42.0", "who_root=99.0", "who_default=1.0", "who_cmd=5.0"], "\(answers)")
    }

    // MARK: hostile plugins, rates, dirtyconfig

    @Test func hostilePluginsAreEndedCountedAndLeaveNothing() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let plugins = try Self.subdirectory("plugins", of: dir), conf = try Self.subdirectory("conf", of: dir)
        let mark = UUID().uuidString
        let config = "if [ \"$1\" = config ]; then echo graph_title t; echo a.label a; exit 0; fi\n"
        let scripts: [String: String] = [
            // Ignores SIGTERM and leaves a grandchild holding stdout.
            "stubborn": config + "trap '' TERM\n( trap '' TERM; sleep 60; echo late ) &\necho a.value 1\nwhile :; do sleep 1; done",
            // 10 MB of noise.
            "noisy": config + "head -c 10000000 /dev/urandom",
            // Values of a field it did not declare, and lines that are not values.
            "liar": """
                if [ "$1" = config ]; then echo graph_title t; echo a.label a; echo c.label c; exit 0; fi
                echo a.value 1; echo b.value 2; echo c.value twelve; echo garbage
                """,
            // A counter whose values carry their own times: its rate is exactly 10/s.
            "timed": """
                if [ "$1" = config ]; then echo graph_title t; echo c.label c; echo c.type DERIVE; echo c.min 0; echo c.warning 5; exit 0; fi
                f=/tmp/vigil-munin-timed-\(mark); n=$(cat $f 2>/dev/null || echo 1700000000); echo $((n + 30)) > $f
                echo "c.value $n:$((n * 10))"
                """,
            // dirtyconfig: the values come with the config, and the fetch is never run.
            "dirty": """
                if [ "$1" = config ]; then
                  echo graph_title t; echo d.label d
                  if [ "$MUNIN_CAP_DIRTYCONFIG" = 1 ]; then echo d.value 5; fi
                  exit 0
                fi
                echo fetched >> /tmp/vigil-munin-dirty-\(mark); echo d.value 6
                """,
            "fails": config + "echo 'oops' >&2; exit 3",
            // Values, then a bad exit: munin-node takes none of them ("# Bad exit").
            "badexit": config + "echo a.value 7; exit 1",
            // A value cut at the 1 MiB capture limit: "big.value 98" is not a value.
            "cut": """
                if [ "$1" = config ]; then echo graph_title t; echo big.label big; echo big.critical 1000; exit 0; fi
                head -c 1048563 /dev/zero | tr '\\0' '#'; echo; echo big.value 987654321
                """,
            // Numbers past what a rate can be: no rate, never an infinite one.
            "huge": """
                if [ "$1" = config ]; then echo graph_title t; echo h.label h; echo h.type DERIVE; echo h.warning 5; echo s.label s; echo s.cdef h,0,/; exit 0; fi
                f=/tmp/vigil-munin-huge-\(mark); if [ -e $f ]; then rm $f; echo h.value -1e308; else touch $f; echo h.value 1e308; fi; echo s.value 1
                """,
            // 9,000 fields, 900 of them with cdefs of 250 tokens: read in
            // time linear in the output.
            "wide": """
                if [ "$1" != config ]; then exit 0; fi
                echo graph_title wide
                awk 'BEGIN { for (i = 0; i < 8100; i++) printf "g%d.label x\\ng%d.value 1\\n", i, i;
                  c = "z"; for (j = 0; j < 124; j++) c = c ",z,+"; for (i = 0; i < 900; i++) printf "f%d.label x\\nf%d.cdef %s\\nf%d.value 1\\n", i, i, c, i;
                  print "z.label z"; print "z.value 1" }'
                """,
        ]
        // The slow ones in instances of their own: an instance runs its
        // plugins one after another, and these take seconds a round.
        let slow = try Self.subdirectory("slow", of: dir), wideDir = try Self.subdirectory("wide", of: dir)
        for (name, body) in scripts {
            let home = ["stubborn", "noisy"].contains(name) ? slow : name == "wide" ? wideDir : plugins
            try TestEnv.write("#!/bin/sh\n" + body + "\n", to: home + "/" + name)
            chmod(home + "/" + name, 0o755)
        }
        // One others can write is refused.
        try TestEnv.write("#!/bin/sh\necho a.value 1\n", to: plugins + "/writable")
        chmod(plugins + "/writable", 0o777)
        // A wildcard plugin whose first suggest fails: asked again, not given up on.
        let wild = try Self.subdirectory("wild", of: dir)
        try TestEnv.write("""
            #!/bin/sh
            f=/tmp/vigil-munin-suggest-\(mark)
            if [ "$1" = suggest ]; then if [ -e $f ]; then echo one; exit 0; fi; touch $f; exit 1; fi
            if [ "$1" = config ]; then echo graph_title t; echo a.label a; exit 0; fi
            echo a.value 1
            """, to: wild + "/fl_")
        chmod(wild + "/fl_", 0o755)
        // A link in a directory others can write is refused, though it points at a trusted file.
        let open = dir + "/open"
        try FileManager.default.createDirectory(atPath: open, withIntermediateDirectories: false)
        chmod(open, 0o777)
        symlink(plugins + "/liar", open + "/liar")
        try TestEnv.write("[stubborn]\ntimeout 1\n[*]\nuser root\n", to: conf + "/t")
        chmod(conf + "/t", 0o644)
        defer {
            unlink("/tmp/vigil-munin-timed-\(mark)")
            unlink("/tmp/vigil-munin-dirty-\(mark)")
            unlink("/tmp/vigil-munin-huge-\(mark)")
            unlink("/tmp/vigil-munin-suggest-\(mark)")
        }
        let (output, events) = try run("""
              h:
                plugin: munin
                interval: 1s
                options: { plugin_dir: \(plugins), plugin_conf_dir: \(conf), state_dir: \(dir)/state, env: { VIGIL_TEST_MARK: "\(mark)" } }
              slow:
                plugin: munin
                interval: 1s
                options: { plugin_dir: \(slow), plugin_conf_dir: \(conf), state_dir: \(dir)/state, env: { VIGIL_TEST_MARK: "\(mark)" } }
              wide:
                plugin: munin
                interval: 1s
                options: { plugin_dir: \(wideDir), state_dir: \(dir)/state, env: { VIGIL_TEST_MARK: "\(mark)" } }
              o:
                plugin: munin
                interval: 1m
                options: { plugin_dir: \(open), state_dir: \(dir)/state }
              w:
                plugin: munin
                interval: 1s
                options: { plugin: \(wild)/fl_, state_dir: \(dir)/state, env: { VIGIL_TEST_MARK: "\(mark)" } }
            """, in: dir, for: "7s")
        #expect(output.status == 0, "\(output.stderr)")
        let opened = NagiosRunTests.of(events, monitor: "o", kind: "run").first ?? [:]
        #expect((opened["error"] as? String ?? "").contains("refused: the directory of the link"), "\(opened)")
        #expect(NagiosRunTests.of(events, monitor: "o", kind: "field").isEmpty)
        let runs = NagiosRunTests.of(events, monitor: "h", kind: "run")
        let slowRuns = NagiosRunTests.of(events, monitor: "slow", kind: "run")
        func first(_ plugin: String) -> [String: Any] { (runs + slowRuns).first { $0["plugin"] as? String == plugin } ?? [:] }
        #expect(first("stubborn")["timed_out"] as? Bool == true && first("stubborn")["ok"] as? Bool == false, "\(first("stubborn"))")
        #expect((first("noisy")["errors"] as? Int ?? 0) > 0 && first("noisy")["ok"] as? Bool == false, "\(first("noisy"))")
        #expect(first("liar")["errors"] as? Int == 3 && first("liar")["fields"] as? Int == 2, "\(first("liar"))")
        #expect((first("fails")["error"] as? String ?? "").contains("exit status 3; no values taken from it (stderr: oops)"), "\(first("fails"))")
        let fields = NagiosRunTests.of(events, monitor: "h", kind: "field")
        #expect(first("badexit")["ok"] as? Bool == false && fields.allSatisfy { $0["plugin"] as? String != "badexit" }, "\(first("badexit"))")
        #expect(first("cut")["ok"] as? Bool == false && fields.allSatisfy { $0["plugin"] as? String != "cut" }, "\(first("cut"))")
        #expect((first("writable")["error"] as? String ?? "").contains("refused"), "\(first("writable"))")
        #expect(first("dirty")["dirty"] as? Bool == true)
        #expect(!FileManager.default.fileExists(atPath: "/tmp/vigil-munin-dirty-\(mark)"), "the fetch ran though the config had the values")
        let dirty = NagiosRunTests.of(events, monitor: "h", kind: "field").filter { $0["plugin"] as? String == "dirty" }
        #expect(dirty.first?["value"] as? Double == 5)
        // Exactly 10 a second by the values' own times, over the warning of 5.
        let timed = NagiosRunTests.of(events, monitor: "h", kind: "field").filter { $0["plugin"] as? String == "timed" }
        #expect(timed.first?["gap"] as? String == "first")
        #expect(timed.dropFirst().allSatisfy { $0["rate"] as? Double == 10 && $0["level"] as? String == "warning" }, "\(timed)")
        #expect(timed.count >= 2)
        let limits = NagiosRunTests.of(events, monitor: "h", kind: "limit")
        #expect(limits.first?["level"] as? String == "warning" && limits.count == 1, "\(limits)")
        // Several rounds ran though one plugin hangs each time.
        #expect(runs.filter { $0["plugin"] as? String == "liar" }.count >= 2)
        // No rate or shown value past a double: a gap, and nothing judged.
        let huge = NagiosRunTests.of(events, monitor: "h", kind: "field").filter { $0["plugin"] as? String == "huge" }
        #expect(huge.filter { $0["field"] as? String == "h" }.dropFirst().allSatisfy { $0["gap"] as? String == "range" && $0["rate"] == nil }, "\(huge)")
        #expect(huge.allSatisfy { !($0["rate"] is NSNull) && !($0["shown"] is NSNull) }, "\(huge)")
        #expect(huge.filter { $0["field"] as? String == "s" }.allSatisfy { $0["shown"] == nil && $0["rate"] as? Double == 1 })
        // The wide plugin's rounds, every field of them.
        let wide = NagiosRunTests.of(events, monitor: "wide", kind: "run")
        #expect(!wide.isEmpty && wide.allSatisfy { $0["fields"] as? Int == 9_001 && $0["errors"] as? Int == 0 }, "\(wide)")
        // The retried suggest.
        let retried = NagiosRunTests.of(events, monitor: "w", kind: "run").compactMap { $0["plugin"] as? String }
        #expect(retried.contains("fl_one"), "\(retried)")
        NagiosRunTests.expectNoneLeft(mark)
    }

    @Test func validateSaysWhatIsWrong() throws {
        let dir = try Self.dir()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try TestEnv.write("""
            monitors:
              m:
                plugin: munin
                options: { plugin: plugins/cpu, timeout: 0s }
            """, to: dir + "/m.yaml")
        let output = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/m.yaml"])
        #expect(output.status != 0)
        let text = output.stdout + output.stderr
        #expect(text.contains("m.yaml:4:") && text.contains("give a plugin of plugin_dir"), "\(text)")
    }
}
