import Glibc
import LinuxProbes
import VigilChildProcess
import VigilForeign
import VigilKit

/// Runs munin plugins the way munin-node runs them, each interval: `config`,
/// then a fetch unless the config already held the values (dirtyconfig),
/// with munin-node's environment (MUNIN_LIBDIR, MUNIN_PLUGSTATE,
/// MUNIN_STATEFILE, MUNIN_CAP_MULTIGRAPH, LC_ALL=C, its PATH), as its user
/// (nobody and group munin unless plugin-conf.d says otherwise), within its
/// timeout. Each field's value becomes a `field` event with the rate munin's
/// RRD would store for its type; each run a `run` event.
///
/// One plugin (`plugin: cpu`), a wildcard plugin expanded through its
/// `suggest` (`plugin: /usr/share/munin/plugins/if_`), or, without
/// `plugin`, every plugin of `plugin_dir` as munin-node lists them. The
/// plugins of an instance run one after another on its own thread; each
/// run is a `ChildRun` in a process group of its own, ended whole at its
/// timeout, and its file is held to the rules plugins are (`FileTrust`).
final class MuninMonitor: PolledMonitor, @unchecked Sendable {  // the worker alone touches the mutable state
    static let spec = PluginSpec(
        name: "munin", version: "1.0.1",
        summary: "Runs munin plugins as munin-node does (config, fetch, plugin-conf.d, multigraph, dirtyconfig) and reports their fields",
        defaultInterval: .seconds(300),
        events: [
            EventDecl("field", doc: "One per field of each graph at each run that printed a value for it.", fields: [
                FieldDecl("plugin", .string, doc: "the plugin as munin names it (if_eth0)", identity: true),
                FieldDecl("graph", .string, doc: "the plugin's name, or the multigraph section's", identity: true),
                FieldDecl("field", .string, doc: "the field's name as munin cleans it", identity: true),
                FieldDecl("label", .string),
                FieldDecl("type", .string, doc: "GAUGE, DERIVE, COUNTER or ABSOLUTE"),
                FieldDecl("value", .double, doc: "as printed; absent when the plugin printed U"),
                FieldDecl("rate", .double, doc: "what munin stores: a GAUGE's value, the others' change per second (a COUNTER across a 32- or 64-bit wrap); absent when there is none (see gap)"),
                FieldDecl("shown", .double, doc: "what munin graphs: the rate through the field's cdef (if_'s down,8,* for bits), or the rate"),
                FieldDecl("gap", .string, doc: "why there is no rate: first (a counter's first value), unknown (U), time, reset (a COUNTER went down without wrapping), range (outside min or max)"),
                FieldDecl("level", .string, doc: "ok, warning or critical: where the rate falls by the field's warning and critical"),
                FieldDecl("warning", .string),
                FieldDecl("critical", .string),
                FieldDecl("vlabel", .string, doc: "the graph's graph_vlabel"),
                FieldDecl("category", .string, doc: "the graph's graph_category"),
            ], policy: .samples, key: ["plugin", "graph", "field"]),
            EventDecl("run", doc: "One per plugin at each run: how it went.", fields: [
                FieldDecl("plugin", .string, identity: true),
                FieldDecl("ok", .bool, doc: "both runs exited 0 within the timeout and printed what could be read"),
                FieldDecl("graphs", .int),
                FieldDecl("fields", .int, doc: "values printed"),
                FieldDecl("dirty", .bool, doc: "the config run held the values (dirtyconfig): no fetch was run"),
                FieldDecl("duration", .double, unit: "seconds", doc: "of config and fetch together"),
                FieldDecl("cpu", .double, unit: "seconds", doc: "user and system CPU of both runs"),
                FieldDecl("peak_memory", .int, unit: "bytes", doc: "the higher of the two runs' own peaks; absent when both ended before it could be read"),
                FieldDecl("timed_out", .bool),
                FieldDecl("exit_status", .int, doc: "of the last run; -1 when it did not exit"),
                FieldDecl("errors", .int, doc: "lines not understood, values of fields the config did not declare, limits and cdefs that do not read"),
                FieldDecl("error", .string, doc: "the first of them, or why the plugin did not run"),
            ], policy: .samples),
            .occurrence("limit", doc: "A field's level changed (munin-limits' warning and critical).", fields: [
                FieldDecl("plugin", .string), FieldDecl("graph", .string), FieldDecl("field", .string),
                FieldDecl("level", .string), FieldDecl("previous_level", .string), FieldDecl("rate", .double),
                FieldDecl("limit", .string, doc: "the warning or critical range it is outside of"),
            ]),
        ])

    struct Options: DeclaredOptions {
        var plugin: String?
        var pluginDir = "/etc/munin/plugins"
        var pluginConfDir: String?
        var user = "nobody"
        var group = "munin"
        var timeout: Duration = .seconds(10)
        var stateDir = "/var/lib/vigil/munin"
        var libDir = "/usr/share/munin"
        var autoconf = false
        var dirtyconfig = true
        var env: JSONValue = .object([])
        static let schema = OptionSchema<Options>(
            .optional("plugin", \.plugin, example: "cpu",
                      doc: "A plugin of plugin_dir, or a path; a wildcard plugin (its name ends in _) runs once per line its suggest prints. Without it: every plugin of plugin_dir, as munin-node lists them."),
            .option("plugin_dir", \.pluginDir, doc: "munin-node's plugin directory (its links to /usr/share/munin/plugins)."),
            .optional("plugin_conf_dir", \.pluginConfDir, example: "/etc/munin/plugin-conf.d",
                      doc: "munin-node's plugin-conf.d, read as it reads it: user, group, env.*, timeout and command per [plugin] or [wild*card]."),
            .option("user", \.user, doc: "Who a plugin runs as when plugin-conf.d names no one (munin-node's default; when vigil runs as root)."),
            .option("group", \.group, doc: "The group it runs with when plugin-conf.d names none (the user's own where this group does not exist)."),
            .option("timeout", \.timeout, doc: "A run still going after this is ended, its whole process group (plugin-conf.d's timeout wins)."),
            .option("state_dir", \.stateDir, doc: "Where plugins keep state: MUNIN_PLUGSTATE is a directory per user under it."),
            .option("lib_dir", \.libDir, doc: "MUNIN_LIBDIR, where plugins find plugins/plugin.sh."),
            .option("autoconf", \.autoconf, doc: "Ask each plugin `autoconf` first and leave out those that answer no."),
            .option("dirtyconfig", \.dirtyconfig, doc: "Tell plugins MUNIN_CAP_DIRTYCONFIG=1: one that prints its values with its config is not run twice."),
            .option("env", \.env, doc: "Variables added to every plugin's environment (plugin-conf.d's env.* win)."))
    }

    static let path = "/usr/sbin:/usr/bin:/sbin:/bin"
    static let captureLimit = 1_048_576
    static let killGrace: Int64 = 1_000_000_000
    /// Most instances one wildcard plugin's suggest may give.
    static let maxSuggested = 1_000

    private let context: MonitorContext
    private let options: Options
    private let extraEnvironment: [String: String]
    private let requests: PollRequests
    /// The worker's alone, from here down.
    private var services: [Service]?
    /// Per plugin, per graph and field: what the last values were and the
    /// level they were at; each plugin's kept only for the fields of its
    /// last run, so fields that come and go do not pile up.
    private var rates: [String: [String: Munin.Rate]] = [:]
    private var levels: [String: [String: String]] = [:]
    private var told: [String: String] = [:]

    init(options: Options, context: MonitorContext) throws(MonitorError) {
        if let plugin = options.plugin {
            guard !plugin.isEmpty, plugin.hasPrefix("/") || !plugin.contains("/") else {
                throw .invalidOption("plugin", "give a plugin of plugin_dir (cpu) or an absolute path")
            }
        }
        for (name, path) in [("plugin_dir", options.pluginDir), ("state_dir", options.stateDir), ("lib_dir", options.libDir)]
        where !path.hasPrefix("/") {
            throw .invalidOption(name, "'\(path)' is not an absolute path")
        }
        guard options.timeout > .zero else { throw .invalidOption("timeout", "must be more than 0") }
        guard case .object(let extra) = options.env else { throw .invalidOption("env", "must map names to strings") }
        var environment: [String: String] = [:]
        for (name, value) in extra {
            guard case .string(let text) = value, !text.utf8.contains(0), !name.isEmpty, !name.contains("="), !name.utf8.contains(0) else {
                throw .invalidOption("env.\(name)", "must be a string")
            }
            environment[name] = text
        }
        self.context = context
        self.options = options
        self.extraEnvironment = environment
        self.requests = try PollRequests()
    }

    func start() throws(MonitorError) {
        if let plugin = options.plugin {
            let path = plugin.hasPrefix("/") ? plugin : options.pluginDir + "/" + plugin
            guard access(path, X_OK) == 0 else { throw .unavailable("munin plugin \(path) is not there or not executable") }
        } else {
            var st = stat()
            guard stat(options.pluginDir, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
                throw .unavailable("munin plugin directory \(options.pluginDir) is not there")
            }
        }
        services = nil
        context.spawn("munin") { [self] token in work(token) }
    }

    func stop() { requests.clear() }

    /// Asks the worker for a run of every plugin and returns at once.
    func poll() throws(MonitorError) { requests.ask() }

    private func work(_ token: Worker.Token) {
        while !token.isCancelled {
            guard requests.wait(token) else { return }
            guard requests.take() != nil else { continue }
            // Until it succeeds: a suggest that failed, or links that could
            // not be made, are tried again next round.
            if services == nil { services = discover(token) }
            for service in services ?? [] {
                if token.isCancelled { return }
                cycle(service, token)
            }
        }
    }

    // MARK: what runs, and how

    /// One plugin as munin-node runs it.
    struct Service {
        /// As munin names it: the file's name, or a wildcard's with its suffix.
        var name: String
        /// What is executed, so that the plugin's $0 is its name: the file
        /// in plugin_dir, or a link to the wildcard plugin under state_dir.
        var path: String
        var settings: Munin.PluginConf.Section
    }

    private func pluginConf() -> Munin.PluginConf {
        var conf = Munin.PluginConf()
        guard let dir = options.pluginConfDir else { return conf }
        for name in FSRoot.listDirectory(dir) ?? [] where !name.hasPrefix(".") && name.utf8.allSatisfy(Self.isServiceByte) {
            let path = dir + "/" + name
            var st = stat()
            guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { continue }
            if let problem = FileTrust.problems(real: FileTrust.realPath(of: path) ?? path, file: st,
                                                owners: FileTrust.defaultOwners(), noun: "plugin configuration").first {
                say("conf:" + path, .warning, "plugin configuration \(path) skipped: \(problem.text); \(problem.fix)")
                continue
            }
            // LinuxProbes' reader: a regular file only (a FIFO is refused, not waited on), bounded.
            guard let text = try? FSRoot(dir).readText(name) else { continue }
            conf.read(text, file: path)
        }
        for error in conf.errors { say("conf:" + error, .warning, error) }
        return conf
    }

    /// The plugins to run: the one named (a wildcard one once per suggested
    /// suffix), or those of plugin_dir, and with `autoconf` only those that
    /// answer yes.
    private func discover(_ token: Worker.Token) -> [Service]? {
        let conf = pluginConf()
        var found: [Service] = []
        if let plugin = options.plugin {
            let path = plugin.hasPrefix("/") ? plugin : options.pluginDir + "/" + plugin
            let name = String(path.split(separator: "/").last ?? "")
            if name.hasSuffix("_") {
                let wild = Service(name: name, path: path, settings: conf.settings(for: name))
                let ran = run(wild, argument: "suggest", token)
                guard ran.status == 0 else {
                    say("suggest:" + name, .warning,
                        "munin plugin \(name): suggest failed: \(ran.error ?? "exit status \(ran.status)"); asked again next round")
                    return nil
                }
                for line in String(decoding: ran.stdout, as: UTF8.self).split(separator: "\n") {
                    let suffix = line.trimmingWhitespace()
                    guard !suffix.isEmpty, suffix.utf8.allSatisfy(Self.isServiceByte), suffix.utf8.count < 200 else {
                        say("suggest:" + name, .warning, "munin plugin \(name): suggest printed '\(suffix.prefix(60))', not a name: left out")
                        continue
                    }
                    guard found.count < Self.maxSuggested else {
                        say("suggest:" + name, .warning, "munin plugin \(name): suggest printed more than \(Self.maxSuggested) names: the rest are left out")
                        break
                    }
                    let service = name + suffix
                    guard !found.contains(where: { $0.name == service }) else { continue }
                    guard let link = link(service, to: path) else { return nil }
                    found.append(Service(name: service, path: link, settings: conf.settings(for: service)))
                }
                if found.isEmpty {
                    say("suggest:" + name, .notice, "munin plugin \(name): suggest printed nothing to run; asked again next round")
                    return nil
                }
            } else {
                found = [Service(name: name, path: path, settings: conf.settings(for: name))]
            }
        } else {
            for name in FSRoot.listDirectory(options.pluginDir) ?? [] where Self.isRunnable(name) {
                let path = options.pluginDir + "/" + name
                var st = stat()
                guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, access(path, X_OK) == 0 else { continue }
                found.append(Service(name: name, path: path, settings: conf.settings(for: name)))
            }
        }
        guard options.autoconf else { return found }
        return found.filter { service in
            let ran = run(service, argument: "autoconf", token)
            let answer = String(decoding: ran.stdout.prefix(200), as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
            if answer.hasPrefix("yes") { return true }
            context.log(.info, "munin plugin \(service.name) left out: autoconf says \(answer.isEmpty ? "nothing" : answer)")
            return false
        }
    }

    /// munin-node's rule for a file of plugin_dir: not hidden, not .conf,
    /// and only letters, digits and -_@.: in its name.
    static func isRunnable(_ name: String) -> Bool {
        !name.hasPrefix(".") && !name.hasSuffix(".conf") && !name.isEmpty && name.utf8.allSatisfy(isServiceByte)
    }

    static func isServiceByte(_ b: UInt8) -> Bool {
        (b >= 0x30 && b <= 0x39) || ((b | 0x20) >= 0x61 && (b | 0x20) <= 0x7a) || b == 0x5f || b == 0x2d || b == 0x40 || b == 0x2e || b == 0x3a
    }

    /// A link named `service` to the wildcard plugin, under state_dir's
    /// `links` (made 0755 and owned by vigil's user, so no one else can
    /// change where it points): shell plugins read their name from $0.
    private func link(_ service: String, to path: String) -> String? {
        let dir = options.stateDir + "/links"
        guard Self.makeDirectories(dir) else {
            say("links", .error, "munin: cannot make \(dir): \(String(cString: strerror(errno)))")
            return nil
        }
        var st = stat()
        guard lstat(dir, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == geteuid(), st.st_mode & 0o022 == 0 else {
            say("links", .error, "munin: \(dir) must be a directory of vigil's user that no one else can write")
            return nil
        }
        let link = dir + "/" + service
        var target = [CChar](repeating: 0, count: 4097)
        let n = readlink(link, &target, 4096)
        if n >= 0 && String(decoding: target[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self) == path { return link }
        unlink(link)
        guard symlink(path, link) == 0 else {
            say("links", .error, "munin: cannot link \(link): \(String(cString: strerror(errno)))")
            return nil
        }
        return link
    }

    // MARK: one run of a plugin

    struct Ran {
        var status: Int32 = -1
        var stdout: [UInt8] = []
        var stderr: [UInt8] = []
        var duration: Int64 = 0
        var cpu: Int64 = 0
        /// nil when the run ended before it could be read (ChildRun).
        var peakMemory: Int64?
        var timedOut = false
        var cancelled = false
        /// It printed more than `captureLimit`: the rest was dropped.
        var stdoutCut = false
        /// Why it did not run, or how it ended other than by exiting.
        var error: String?
    }

    /// Output up to its last newline: a line cut off is not read.
    static func wholeLines(_ bytes: [UInt8]) -> [UInt8] {
        guard let end = bytes.lastIndex(of: 0x0A) else { return [] }
        return Array(bytes[...end])
    }

    /// Runs `service` with `argument` (config, suggest, autoconf; nil: the
    /// fetch) as munin-node would.
    private func run(_ service: Service, argument: String?, _ token: Worker.Token) -> Ran {
        var ran = Ran()
        guard let real = FileTrust.realPath(of: service.path) else {
            ran.error = "\(service.path): \(String(cString: strerror(errno)))"
            return ran
        }
        var st = stat()
        guard stat(real, &st) == 0, st.st_mode & S_IFMT == S_IFREG else {
            ran.error = "\(real) is not a regular file"
            return ran
        }
        if let problem = FileTrust.problems(real: real, file: st, owners: FileTrust.defaultOwners(), noun: "munin plugin").first {
            ran.error = "\(real) refused: \(problem.text); \(problem.fix)"
            return ran
        }
        // A link (plugin_dir's, or a wildcard's) is as good as its directory:
        // whoever can write there chooses what runs, and by what name.
        if real != service.path {
            var dirStat = stat()
            guard let dir = FileTrust.realPath(of: FileTrust.parent(of: service.path)), stat(dir, &dirStat) == 0 else {
                ran.error = "\(service.path): its directory: \(String(cString: strerror(errno)))"
                return ran
            }
            if let problem = FileTrust.problems(real: dir, file: dirStat, owners: FileTrust.defaultOwners(), noun: "munin plugin").first {
                ran.error = "\(service.path) refused: the directory of the link, \(dir): \(problem.text); \(problem.fix)"
                return ran
            }
        }
        let identity: Identity
        switch self.identity(for: service) {
        case .success(let found): identity = found
        case .failure(let refusal):
            ran.error = refusal.text
            return ran
        }
        var argv = [service.path] + (argument.map { [$0] } ?? [])
        if let command = service.settings.command, !command.isEmpty {
            argv = command.flatMap { $0 == "%c" ? argv : [$0] }
        }
        // plugin-conf.d's command (sudo -u mail %c) names its program as a
        // shell would: looked up in munin's PATH.
        var program = argv[0]
        if !program.contains("/") {
            guard let found = Self.path.split(separator: ":").map({ $0 + "/" + program }).first(where: { access($0, X_OK) == 0 }) else {
                ran.error = "plugin-conf.d's command: \(program) is not in \(Self.path)"
                return ran
            }
            program = found
        }
        var timeout = options.timeout.nanoseconds
        if let text = service.settings.timeout, let seconds = Double(text), seconds > 0, seconds < 86_400 {
            timeout = Int64(seconds * 1e9)
        }
        do {
            let child = try ChildRun.spawn(argv: argv, program: program, environment: environment(for: service, identity),
                                           searchPath: false, credentials: identity.credentials)
            let ending = child.supervise(input: [], timeout: timeout, killGrace: Self.killGrace, captureLimit: Self.captureLimit,
                                         endGroup: true, cancel: token.cancelFD)
            ran.stdout = ending.stdout
            ran.stderr = ending.stderr
            ran.duration = ending.duration
            ran.cpu = (ending.userCPU ?? 0) + (ending.systemCPU ?? 0)
            ran.peakMemory = ending.peakMemory
            ran.timedOut = ending.timedOut
            ran.cancelled = ending.cancelled
            if let raw = ending.status {
                if raw & 0x7f == 0 { ran.status = (raw >> 8) & 0xff } else if !ending.timedOut { ran.error = "ended by signal \(raw & 0x7f)" }
            }
            if ending.timedOut { ran.error = "timed out after \(Double(timeout) / 1e9)s and was ended" }
            ran.stdoutCut = ending.stdoutCut
            if ending.stdoutCut { ran.error = ran.error ?? "printed more than \(Self.captureLimit / 1024) KiB: the rest was dropped" }
        } catch {
            ran.error = "cannot run: \(error)"
        }
        return ran
    }

    /// Who a plugin runs as: plugin-conf.d's user and groups, or the
    /// instance's, as munin-node resolves them (the first group is the
    /// group, and all of them the supplementary ones; "(name)" one that may
    /// be missing). Not root: as vigil's own user, said once.
    struct Identity {
        var user: String
        var credentials: Spawn.Credentials?
    }

    struct Refusal: Error { var text: String }

    private func identity(for service: Service) -> Result<Identity, Refusal> {
        let userName = service.settings.user ?? options.user
        guard let user = Accounts.user(userName) else {
            return .failure(Refusal(text: "user '\(userName)' for \(service.name) does not exist"))
        }
        var gids: [gid_t] = []
        for var group in service.settings.groups ?? [] {
            let optional = group.hasPrefix("(") && group.hasSuffix(")")
            if optional { group = String(group.dropFirst().dropLast()) }
            if let gid = Accounts.group(group) { gids.append(gid) } else if !optional {
                return .failure(Refusal(text: "group '\(group)' for \(service.name) does not exist"))
            }
        }
        if gids.isEmpty { gids = [Accounts.group(options.group) ?? user.gid] }
        guard geteuid() == 0 else {
            if user.uid != geteuid() || service.settings.groups != nil {
                say("user:" + service.name, .warning,
                    "munin plugin \(service.name) runs as vigil's user, not \(userName): changing user and group takes root")
            }
            return .success(Identity(user: Accounts.name(of: geteuid()) ?? userName, credentials: nil))
        }
        return .success(Identity(user: Accounts.name(of: user.uid) ?? userName,
                                 credentials: Spawn.Credentials(uid: user.uid, gid: gids[0], groups: gids)))
    }

    /// munin-node's environment for a plugin: its exported defaults, the
    /// capabilities, the state directory (made for the user, as munin-node
    /// makes it) and file, `env`, then plugin-conf.d's env.*.
    private func environment(for service: Service, _ identity: Identity) -> [String: String] {
        let plugstate = options.stateDir + "/" + identity.user
        if Self.makeDirectories(options.stateDir) {
            if mkdir(plugstate, 0o755) == 0, let credentials = identity.credentials {
                _ = chown(plugstate, credentials.uid, credentials.gid)
            }
        } else {
            say("state", .warning, "munin: cannot make state_dir \(options.stateDir): \(String(cString: strerror(errno))); plugins that keep state will fail")
        }
        var environment: [String: String] = [
            "LC_ALL": "C", "LANG": "C", "PATH": Self.path, "PYTHONIOENCODING": "utf8:replace",
            "MUNIN_CAP_MULTIGRAPH": "1", "MUNIN_DEBUG": "0", "MUNIN_MASTER_IP": "",
            "MUNIN_LIBDIR": options.libDir, "MUNIN_CONFDIR": "/etc/munin", "MUNIN_PLUGSTATE": plugstate,
            "MUNIN_STATEFILE": plugstate + "/" + service.name + "-", "MUNIN_PLUGINUSER": options.user,
            "MUNIN_GROUP": options.group, "MUNIN_GOODSH": "/bin/sh", "MUNIN_BASH": "/bin/bash",
            "MUNIN_PERL": "/usr/bin/perl", "MUNIN_PYTHON": "/usr/bin/env python3", "FQDN": Self.hostName,
        ]
        if options.dirtyconfig { environment["MUNIN_CAP_DIRTYCONFIG"] = "1" }
        for (name, value) in extraEnvironment { environment[name] = value }
        for (name, value) in service.settings.env where !name.contains("=") && !name.utf8.contains(0) && !value.utf8.contains(0) {
            environment[name] = value
        }
        return environment
    }

    static let hostName: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        gethostname(&buffer, 255)
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }()

    // MARK: a cycle: config, fetch, events

    private func cycle(_ service: Service, _ token: Worker.Token) {
        // The first errors as text, all of them counted.
        var errors: [String] = []
        var errorCount = 0
        func fail(_ text: String) {
            errorCount += 1
            if errors.count < Munin.maxErrors { errors.append(text) }
        }
        let config = run(service, argument: "config", token)
        if config.cancelled { return }
        var parsedConfig = Munin.parse(config.stdout, plugin: service.name)
        var ranFetch: Ran?
        let dirty = config.status == 0 && config.error == nil
            && parsedConfig.graphs.contains { $0.fields.contains { $0.value != nil } }
        var values = parsedConfig
        if config.status != 0 || config.error != nil {
            fail("config: " + (config.error ?? "exit status \(config.status)") + Self.stderrText(config.stderr))
            parsedConfig = Munin.Output()
        } else if !dirty {
            let fetch = run(service, argument: nil, token)
            if fetch.cancelled { return }
            ranFetch = fetch
            // As munin-node: a fetch that timed out, was killed or exited
            // other than 0 gives no values ("# Timed out", "# Bad exit"):
            // a line cut in the middle would read as another number. One cut
            // at the capture limit gives its whole lines.
            let failed = fetch.timedOut || fetch.status != 0 || (fetch.error != nil && !fetch.stdoutCut)
            values = failed ? Munin.Output()
                : Munin.parse(fetch.stdoutCut ? Self.wholeLines(fetch.stdout) : fetch.stdout, plugin: service.name)
            if fetch.status != 0 || fetch.error != nil {
                fail("fetch: " + (fetch.error ?? "exit status \(fetch.status)") + (failed ? "; no values taken from it" : "")
                     + Self.stderrText(fetch.stderr))
            }
        }
        for error in parsedConfig.errors { fail("config " + error) }
        errorCount += parsedConfig.moreErrors
        if ranFetch != nil {
            for error in values.errors { fail("fetch " + error) }
            errorCount += values.moreErrors
        }
        var oldRates = rates.removeValue(forKey: service.name) ?? [:]
        var newRates: [String: Munin.Rate] = [:]
        var oldLevels = levels.removeValue(forKey: service.name) ?? [:]
        var newLevels: [String: String] = [:]
        defer {
            rates[service.name] = newRates
            levels[service.name] = newLevels
        }

        let now = context.now()
        var printed = 0
        if config.error == nil && config.status == 0 {
            for graph in values.graphs {
                let declared = parsedConfig.graph(graph.name)
                // Every field's rate first: a cdef may name the others.
                var sampled: [(field: Munin.Field, value: Munin.Value, rate: Result<Double, Munin.GapError>)] = []
                for field in graph.fields {
                    guard let value = field.value else { continue }
                    guard let decl = declared?.field(field.name) else {
                        fail("\(graph.name): \(field.name).value on line \(field.valueLine) is of a field the config did not declare")
                        continue
                    }
                    let key = graph.name + "\u{0}" + field.name
                    var state = oldRates.removeValue(forKey: key) ?? newRates[key] ?? Munin.Rate()
                    let rate = state.sample(value, at: now, type: decl.type, min: decl.min, max: decl.max)
                    newRates[key] = state
                    sampled.append((decl, value, rate))
                }
                var byName: [String: Double?] = [:]
                for s in sampled { byName[s.field.name] = try? s.rate.get() }
                for s in sampled {
                    printed += 1
                    var shown: Double?
                    if let cdef = s.field.attributes["cdef"] {
                        // A declared field with no value this run is unknown, as in RRD.
                        switch Munin.evaluate(cdef: cdef, value: { byName[$0] ?? (declared?.field($0) != nil ? .some(nil) : nil) }) {
                        case .value(let v): shown = v.isFinite ? v : nil
                        case .unknown: break
                        case .invalid(let why): fail("\(graph.name): \(s.field.name).cdef '\(cdef.prefix(60))': \(why)")
                        }
                    } else {
                        shown = try? s.rate.get()
                    }
                    let key = graph.name + "\u{0}" + s.field.name
                    let previous = oldLevels.removeValue(forKey: key) ?? newLevels[key] ?? "ok"
                    let (level, problems) = emit(service, graph: declared ?? graph, field: s.field, value: s.value, rate: s.rate,
                                                 shown: shown, previousLevel: previous, now: now)
                    newLevels[key] = level
                    for problem in problems { fail(problem) }
                }
            }
        }
        for error in errors.prefix(5) { say("\(service.name):" + error, .warning, "munin plugin \(service.name): \(error)") }
        let last = ranFetch ?? config
        var fields: [(String, Value)] = [
            ("plugin", .string(service.name)), ("ok", .bool(errorCount == 0)),
            ("graphs", .int(Int64(values.graphs.count))), ("fields", .int(Int64(printed))), ("dirty", .bool(dirty)),
            ("duration", .double(Double(config.duration + (ranFetch?.duration ?? 0)) / 1e9)),
            ("cpu", .double(Double(config.cpu + (ranFetch?.cpu ?? 0)) / 1e9)),
            ("timed_out", .bool(config.timedOut || ranFetch?.timedOut == true)),
            ("exit_status", .int(Int64(last.status))), ("errors", .int(Int64(errorCount))),
        ]
        if let first = errors.first { fields.append(("error", .string(String(first.prefix(1024))))) }
        if let peak = [config.peakMemory, ranFetch?.peakMemory].compactMap({ $0 }).max() { fields.append(("peak_memory", .int(peak))) }
        context.emit("run", severity: errors.isEmpty ? .info : .warning, fields: fields)
    }

    /// Emits one field's event (and a `limit` when its level changed);
    /// returns its level and what in its declaration could not be read.
    private func emit(_ service: Service, graph: Munin.Graph, field: Munin.Field, value: Munin.Value,
                      rate: Result<Double, Munin.GapError>, shown: Double?, previousLevel previous: String,
                      now: Int64) -> (level: String, problems: [String]) {
        var problems: [String] = []
        var newLevel = previous
        var time = now
        if case .number(_, let own?, _) = value, own >= 0, own < Int64.max / 1_000_000_000 { time = own * 1_000_000_000 }
        var fields: [(String, Value)] = [
            ("plugin", .string(service.name)), ("graph", .string(graph.name)), ("field", .string(field.name)),
            ("label", .text(field.label)), ("type", .string(field.type.rawValue)),
        ]
        if case .number(let number, _, _) = value { fields.append(("value", .double(number))) }
        var severity = Severity.info
        switch rate {
        case .success(let rate):
            fields.append(("rate", .double(rate)))
            if let shown { fields.append(("shown", .double(shown))) }
            let warning = field.attributes["warning"], critical = field.attributes["critical"]
            for (name, text) in [("warning", warning), ("critical", critical)] {
                guard let text else { continue }
                fields.append((name, .text(text)))
                if Munin.Limit(text) == nil { problems.append("\(graph.name): \(field.name).\(name) '\(text.prefix(40))' is not min:max") }
            }
            let level = Munin.level(of: rate, warning: warning, critical: critical)
            fields.append(("level", .string(level)))
            severity = level == "critical" ? .critical : level == "warning" ? .warning : .info
            newLevel = level
            if previous != level {
                context.emit("limit", severity: level == "ok" ? .notice : severity, time: time, [
                    "plugin": .string(service.name), "graph": .string(graph.name), "field": .string(field.name),
                    "level": .string(level), "previous_level": .string(previous), "rate": .double(rate),
                    "limit": .text((level == "critical" ? critical : level == "warning" ? warning : nil) ?? ""),
                ])
            }
        case .failure(let gap):
            fields.append(("gap", .string(gap.gap.rawValue)))
        }
        if let vlabel = graph.attributes["graph_vlabel"] { fields.append(("vlabel", .text(vlabel))) }
        if let category = graph.attributes["graph_category"] { fields.append(("category", .text(category))) }
        context.emit("field", severity: severity, time: time, fields: fields)
        return (newLevel, problems)
    }

    // MARK: small things

    /// Logs `text` unless the last thing said under `key` was the same.
    private func say(_ key: String, _ level: MonitorContext.LogLevel, _ text: String) {
        guard told.updateValue(text, forKey: key) != text else { return }
        if told.count > 10_000 { told.removeAll() }
        context.log(level, text)
    }

    private static func stderrText(_ bytes: [UInt8]) -> String {
        let text = String(decoding: bytes.prefix(512), as: UTF8.self).trimmingWhitespace()
        return text.isEmpty ? "" : " (stderr: \(text))"
    }

    /// mkdir -p, each made 0755; true when the whole path is there.
    static func makeDirectories(_ path: String) -> Bool {
        var made = ""
        for part in path.split(separator: "/") {
            made += "/" + part
            if mkdir(made, 0o755) != 0 && errno != EEXIST { return false }
        }
        var st = stat()
        return stat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFDIR
    }
}

/// Users and groups by name or number (getpwnam_r, getgrnam_r).
enum Accounts {
    static func user(_ name: String) -> (uid: uid_t, gid: gid_t)? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        if getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil { return (entry.pw_uid, entry.pw_gid) }
        if let uid = UInt32(name), getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil {
            return (entry.pw_uid, entry.pw_gid)
        }
        return UInt32(name).map { ($0, $0) }
    }

    static func name(of uid: uid_t) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return String(cString: entry.pw_name)
    }

    static func group(_ name: String) -> gid_t? {
        var entry = Glibc.group()
        var result: UnsafeMutablePointer<Glibc.group>?
        var buffer = [CChar](repeating: 0, count: 16_384)
        if getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil { return entry.gr_gid }
        return UInt32(name)
    }
}

extension StringProtocol {
    fileprivate func trimmingWhitespace() -> String {
        String(self.drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }
}

@_cdecl("vigil_plugin_entry") public func entry(_ a: VigilEntryArgs, _ r: VigilEntryResult) -> vigil_status { VigilKit.export(MuninMonitor.self, a, r) }
