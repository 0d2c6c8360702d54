import VigilABI
import Foundation
import Testing
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// Plugin files vetted before dlopen (owner, permissions, ELF headers), the
/// entry symbol's type after it, and the hostile fixtures that used to kill
/// or hang `run`, `validate` and `plugins list`.
@Suite(.serialized, .startsProcesses, .offThePool) struct PluginFileTests {
    /// A fresh directory for plugin copies, 0755 (under /tmp, which is sticky
    /// and root's: accepted above the immediate directory).
    func pluginDir(_ tag: String = #function) throws -> String {
        let dir = try TestEnv.tempDir(tag)
        #expect(chmod(dir, 0o755) == 0)
        return dir
    }

    /// Copies fixture `name`.so into `dir` (as `as`.so), mode 0755.
    @discardableResult
    func copy(_ name: String, into dir: String, as target: String? = nil) throws -> String {
        let path = "\(dir)/\(target ?? name).so"
        try FileManager.default.copyItem(atPath: try TestEnv.cPlugin(name), toPath: path)
        #expect(chmod(path, 0o755) == 0)
        return path
    }

    func refusal(_ path: String, policy: PluginFilePolicy = PluginFilePolicy()) throws -> PluginFileRefusal {
        switch PluginFile.open(path, policy: policy) {
        case .success: throw TestFailure("\(path) passed the checks")
        case .failure(let refusal):
            #expect(refusal.description.hasPrefix("plugin \(path) refused: "))
            return refusal
        }
    }

    // MARK: - ELF

    @Test func aGoodPluginPassesAndIsHeldOpen() throws {
        let file = try PluginFile.open(try TestEnv.cPlugin("good_minimal"), policy: PluginFilePolicy()).get()
        #expect(file.fd >= 0)
        #expect(file.warnings.isEmpty)
        #expect(file.changedSinceChecked() == nil)
        #expect(!file.realPath.contains("/./") && file.realPath.hasPrefix("/"))
    }

    @Test func aTruncatedFileIsRefusedBeforeDlopen() throws {
        let r = try refusal(try TestEnv.cPlugin("truncated"))
        #expect(r.rule == .elf)
        #expect(r.reason.contains("truncated or corrupt: loadable segment #"), "\(r)")
        #expect(r.reason.contains("past the end of the file (4096 bytes)"), "\(r)")
    }

    @Test func otherClassMachineAndTextAreRefused() throws {
        let elf32 = try refusal(try TestEnv.cPlugin("elf32"))
        #expect(elf32.reason.contains("it is a 32-bit ELF file; this host loads 64-bit plugins"), "\(elf32)")
        let machine = try refusal(try TestEnv.cPlugin("wrong_machine"))
        #expect(machine.reason.contains("it is built for "), "\(machine)")
        #expect(machine.reason.contains("; this host is "), "\(machine)")
        let text = try refusal(try TestEnv.cPlugin("text"))
        #expect(text.reason == "not a loadable shared object: not an ELF file (no ELF magic number at its start)")
        // The override never lifts the ELF rules.
        #expect(try refusal(try TestEnv.cPlugin("truncated"), policy: PluginFilePolicy(allowUnsafe: true)).rule == .elf)
    }

    @Test func everyCutOfARealPluginIsRefusedNeverLoaded() throws {
        // Cuts at and around each header boundary and in each segment.
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: try TestEnv.cPlugin("good_minimal"))))
        let dir = try pluginDir()
        let path = dir + "/cut.so"
        for length in [0, 1, 15, 16, 63, 64, 65, 120, 500, 1000, 4095, 8192, bytes.count - 4096, bytes.count - 1] where length < bytes.count {
            try Data(bytes[0..<length]).write(to: URL(fileURLWithPath: path))
            #expect(try refusal(path).rule == .elf, "cut at \(length)")
        }
        // A corrupt header number is refused, never trusted: e_phnum and e_phoff.
        var corrupt = bytes
        corrupt[56] = 0xFF
        corrupt[57] = 0x7F
        try Data(corrupt).write(to: URL(fileURLWithPath: path))
        #expect(try refusal(path).rule == .elf)
        corrupt = bytes
        for i in 32..<40 { corrupt[i] = 0xFF }
        try Data(corrupt).write(to: URL(fileURLWithPath: path))
        #expect(try refusal(path).rule == .elf)
    }

    @Test func anEntrySymbolThatIsDataIsRefused() throws {
        switch PluginCatalog(directories: []).load(path: try TestEnv.cPlugin("entry_is_data")) {
        case .success: throw TestFailure("loaded")
        case .failure(let refusal): #expect(refusal.reason == "it exports vigil_plugin_entry as data, not a function")
        }
    }

    // MARK: - owner and permissions

    @Test func aCopyInA0755DirectoryUnderTmpPasses() throws {
        let path = try copy("good_minimal", into: try pluginDir())
        _ = try PluginFile.open(path, policy: PluginFilePolicy()).get()
        // And through a symlink: the target is what is checked.
        let link = try pluginDir() + "/link.so"
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        let file = try PluginFile.open(link, policy: PluginFilePolicy()).get()
        #expect(file.realPath == path)
    }

    @Test func aFileWritableByGroupOrOthersIsRefused() throws {
        let dir = try pluginDir()
        for (mode, shown) in [(0o775, "0775"), (0o757, "0757"), (0o666, "0666")] as [(mode_t, String)] {
            let path = try copy("good_minimal", into: dir, as: "m\(shown)")
            #expect(chmod(path, mode) == 0)
            let r = try refusal(path)
            #expect(r.rule == .writable)
            #expect(r.reason == "writable by group or others (mode \(shown)); chmod go-w it, or allow with --allow-unsafe-plugins")
            // The override loads it, with a warning naming the file and the rule.
            let file = try PluginFile.open(path, policy: PluginFilePolicy(allowUnsafe: true)).get()
            #expect(file.warnings == ["plugin \(path): writable by group or others (mode \(shown)); loaded anyway (unsafe plugins allowed)"])
        }
    }

    @Test func aWritableDirectoryIsRefusedEvenWhenSticky() throws {
        let dir = try pluginDir()
        let path = try copy("good_minimal", into: dir)
        #expect(chmod(dir, 0o777) == 0)
        var r = try refusal(path)
        #expect(r.rule == .writable)
        #expect(r.reason.contains("its directory \(dir) is writable by group or others (mode 0777): anyone can put a plugin there"), "\(r)")
        #expect(chmod(dir, 0o1777) == 0)
        r = try refusal(path)
        #expect(r.reason.contains("(mode 1777, sticky)"), "\(r)")
        // A writable directory further up, not sticky, is refused too.
        #expect(chmod(dir, 0o755) == 0)
        let inner = dir + "/inner"
        try FileManager.default.createDirectory(atPath: inner, withIntermediateDirectories: false)
        #expect(chmod(inner, 0o755) == 0)
        let deep = try copy("good_minimal", into: inner)
        #expect(chmod(dir, 0o757) == 0)
        r = try refusal(deep)
        #expect(r.reason.contains("directory \(dir) above it is writable by group or others and not sticky (mode 0757)"), "\(r)")
        // …and accepted when sticky: no one else can rename what is in it.
        #expect(chmod(dir, 0o1777) == 0)
        _ = try PluginFile.open(deep, policy: PluginFilePolicy()).get()
        #expect(chmod(dir, 0o755) == 0)
    }

    @Test func aFileOrDirectoryOfAnotherUserIsRefused() throws {
        guard geteuid() == 0 else { return }  // chown needs root
        let dir = try pluginDir()
        let path = try copy("good_minimal", into: dir)
        let nobody: uid_t = 65534
        #expect(chown(path, nobody, gid_t(nobody)) == 0)
        var r = try refusal(path)
        #expect(r.rule == .owner)
        #expect(r.reason.contains("owned by "), "\(r)")
        #expect(r.reason.contains("uid 65534), not by root"), "\(r)")
        #expect(r.reason.hasSuffix("chown it, or allow with --allow-unsafe-plugins"), "\(r)")
        #expect(chown(path, 0, 0) == 0)
        #expect(chown(dir, nobody, gid_t(nobody)) == 0)
        r = try refusal(path)
        #expect(r.reason.contains("its directory \(dir) is owned by "), "\(r)")
        let file = try PluginFile.open(path, policy: PluginFilePolicy(allowUnsafe: true)).get()
        #expect(file.warnings.count == 1 && file.warnings[0].contains("its directory \(dir) is owned by "))
        #expect(chown(dir, 0, 0) == 0)
    }

    @Test func aDirectoryOrAFIFOIsNotARegularFile() throws {
        let dir = try pluginDir()
        #expect(try refusal(dir).rule == .notRegular)
        let fifo = dir + "/fifo.so"
        #expect(mkfifo(fifo, 0o644) == 0)
        let r = try refusal(fifo)
        #expect(r.reason == "not a regular file (\(fifo) is a FIFO)")
    }

    // MARK: - the real binary

    /// A plugin directory with good plugins and every hostile fixture.
    func hostileDir() throws -> String {
        let dir = try pluginDir()
        for name in ["good_minimal", "heartbeat", "crash_in_constructor", "entry_is_data", "create_hangs", "create_crashes",
                     "truncated", "elf32", "wrong_machine", "no_entry"] {
            try copy(name, into: dir)
        }
        return dir
    }

    @Test func pluginsListListsTheGoodAndEachRefusalWithItsReason() throws {
        let dir = try hostileDir()
        let started = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["plugins", "list", "--plugin-dir", dir], timeout: 120)
        #expect(Date().timeIntervalSince(started) < 60)
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        for name in ["good_minimal", "heartbeat", "create_hangs", "create_crashes"] {
            #expect(result.stdout.contains("\n\(name) ") || result.stdout.contains("\(name) "), "\(name): \(result.stdout)")
        }
        let refusals = result.stderr.split(separator: "\n").map(String.init)
        func refusal(_ name: String) -> String? { refusals.first { $0.hasPrefix("vigil: plugin \(dir)/\(name).so refused: ") } }
        #expect(refusal("crash_in_constructor")?.contains("crashed with SIGSEGV") == true, "\(result.stderr)")
        #expect(refusal("crash_in_constructor")?.contains("load (dlopen, its constructors and vigil_plugin_entry)") == true)
        #expect(refusal("entry_is_data")?.hasSuffix("exports vigil_plugin_entry as data, not a function") == true, "\(result.stderr)")
        #expect(refusal("truncated")?.contains("truncated or corrupt") == true, "\(result.stderr)")
        #expect(refusal("elf32")?.contains("32-bit ELF file") == true)
        #expect(refusal("wrong_machine")?.contains("it is built for ") == true)
        // Not a plugin: skipped, as before.
        #expect(!result.stdout.contains("no_entry") && !result.stderr.contains("no_entry"))
        // The table first, the refusals after it, on stderr.
        #expect(!result.stdout.contains("refused"))
    }

    @Test func validateReportsEachBadPluginAtItsMonitorInBoundedTime() throws {
        let dir = try hostileDir()
        try TestEnv.write("""
        plugin_dirs: [\(dir)]
        monitors:
          good: { plugin: good_minimal }
          ctor: { plugin: crash_in_constructor }
          data: { plugin: \(dir)/entry_is_data.so }
          hang: { plugin: create_hangs, timeout: 1s }
          crash: { plugin: create_crashes }
          cut: { plugin: ./truncated.so }
          beat: { plugin: heartbeat }
        sinks:
          out: { type: log }
        """, to: dir + "/vigil.yaml")
        let started = Date()
        let result = try TestEnv.run(TestEnv.vigil, ["validate", dir + "/vigil.yaml"], timeout: 120)
        #expect(Date().timeIntervalSince(started) < 30)
        #expect(result.status == 1, "\(result.stderr)")
        let file = dir + "/vigil.yaml"
        let lines = result.stderr.split(separator: "\n").map(String.init)
        func line(_ prefix: String) -> String? { lines.first { $0.hasPrefix("\(file):\(prefix)") } }
        #expect(line("4:19: error: monitor 'ctor': plugin ")?.contains("crashed with SIGSEGV") == true, "\(result.stderr)")
        #expect(line("5:19: error: monitor 'data': plugin ")?.hasSuffix("as data, not a function") == true, "\(result.stderr)")
        #expect(line("6:3: error: monitor 'hang': create did not return within 1s; the probe was killed") != nil, "\(result.stderr)")
        #expect(line("7:3: error: monitor 'crash': create crashed with SIGSEGV") != nil, "\(result.stderr)")
        #expect(line("8:18: error: monitor 'cut': plugin ")?.contains("truncated or corrupt") == true, "\(result.stderr)")
        #expect(!lines.contains { $0.contains("'good'") || $0.contains("'beat'") }, "\(result.stderr)")
        #expect(result.stderr.hasSuffix("\(file): 5 errors, 0 warnings\n"), "\(result.stderr)")
    }

    @Test func runRunsTheGoodPluginBesideACrashingOne() throws {
        let dir = try hostileDir()
        try TestEnv.write("""
        plugin_dirs: [\(dir)]
        monitors:
          good: { plugin: good_minimal, interval: 200ms }
          ctor: { plugin: crash_in_constructor }
          data: { plugin: entry_is_data }
          cut: { plugin: ./truncated.so }
        sinks:
          out: { type: log, stream: stdout, format: json }
        """, to: dir + "/vigil.yaml")
        let result = try TestEnv.run(TestEnv.vigil, ["run", "--for", "2s", dir + "/vigil.yaml"], timeout: 60)
        #expect(result.status == 1, "three monitors did not run, which fails a run with an end: \(result.stderr)")
        #expect(result.stdout.contains("\"monitor\":\"good\",\"plugin\":\"good_minimal\",\"kind\":\"sample\""), "\(result.stdout)")
        #expect(result.stderr.contains("monitor 'ctor': plugin \(dir)/crash_in_constructor.so refused: load (dlopen, its constructors and vigil_plugin_entry) crashed with SIGSEGV"), "\(result.stderr)")
        #expect(result.stderr.contains("monitor 'data' will not run; the others go on"))
        #expect(result.stderr.contains("monitor 'cut' will not run; the others go on"))
    }

    @Test func permissionRefusalsAndTheOverrideFromTheCommandLineAndTheManifest() throws {
        let dir = try pluginDir()
        let path = try copy("good_minimal", into: dir)
        #expect(chmod(path, 0o666) == 0)
        let manifest = dir + "/vigil.yaml"
        try TestEnv.write("""
        plugin_dirs: [\(dir)]
        monitors:
          good: { plugin: good_minimal }
        sinks: {}
        """, to: manifest)
        let refused = try TestEnv.run(TestEnv.vigil, ["validate", manifest])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("\(manifest):3:19: error: monitor 'good': plugin \(path) refused: writable by group or others (mode 0666); chmod go-w it, or allow with --allow-unsafe-plugins"), "\(refused.stderr)")

        let allowed = try TestEnv.run(TestEnv.vigil, ["validate", "--allow-unsafe-plugins", manifest])
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(allowed.stderr.contains("vigil: warning: plugin \(path): writable by group or others (mode 0666); loaded anyway (unsafe plugins allowed)"), "\(allowed.stderr)")

        try TestEnv.write("""
        allow_unsafe_plugins: true
        plugin_dirs: [\(dir)]
        monitors:
          good: { plugin: good_minimal }
        sinks: {}
        """, to: manifest)
        let byManifest = try TestEnv.run(TestEnv.vigil, ["validate", manifest])
        #expect(byManifest.status == 0, "\(byManifest.stderr)")
        #expect(byManifest.stderr.contains("loaded anyway (unsafe plugins allowed)"))

        // The other verbs take the flag too; list refuses without it.
        let list = try TestEnv.run(TestEnv.vigil, ["plugins", "list", "--plugin-dir", dir])
        #expect(list.status == 1)
        #expect(list.stderr.contains("vigil: plugin \(path) refused: writable by group or others (mode 0666)"), "\(list.stderr)")
        let listAllowed = try TestEnv.run(TestEnv.vigil, ["plugins", "list", "--plugin-dir", dir, "--allow-unsafe-plugins"])
        #expect(listAllowed.status == 0, "\(listAllowed.stderr)")
        #expect(listAllowed.stdout.contains("good_minimal"))
        let describe = try TestEnv.run(TestEnv.vigil, ["plugins", "describe", path])
        #expect(describe.status == 1)
        #expect(try TestEnv.run(TestEnv.vigil, ["plugins", "describe", "--allow-unsafe-plugins", path]).status == 0)
        let check = try TestEnv.run(TestEnv.vigil, ["plugins", "check", path], timeout: 120)
        #expect(check.status == 2, "\(check.stdout)\(check.stderr)")
        #expect(check.stderr.contains("writable by group or others"), "\(check.stderr)")
        let checkAllowed = try TestEnv.run(TestEnv.vigil, ["plugins", "check", "--allow-unsafe-plugins", path], timeout: 120)
        #expect(checkAllowed.status == 0, "\(checkAllowed.stdout)\(checkAllowed.stderr)")
        #expect(checkAllowed.stderr.contains("vigil: warning: plugin \(path): writable by group or others (mode 0666); loaded anyway"), "\(checkAllowed.stderr)")

        // run: refused without the override, the other monitors go on.
        let run = try TestEnv.run(TestEnv.vigil, ["run", "--for", "1s", "--allow-unsafe-plugins", manifest])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stderr.contains("plugin \(path): writable by group or others (mode 0666); loaded anyway"), "\(run.stderr)")
    }

    @Test func ownershipRefusalFromTheCommandLine() throws {
        guard geteuid() == 0 else { return }
        let dir = try pluginDir()
        let path = try copy("good_minimal", into: dir)
        #expect(chown(path, 65534, 65534) == 0)
        let list = try TestEnv.run(TestEnv.vigil, ["plugins", "list", "--plugin-dir", dir])
        #expect(list.status == 1)
        #expect(list.stderr.contains("vigil: plugin \(path) refused: owned by "), "\(list.stderr)")
        #expect(list.stderr.contains("chown it, or allow with --allow-unsafe-plugins"))
    }
}
