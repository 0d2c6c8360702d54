import Foundation
import Testing

/// `vigil plugins check`: the real binary, checking real `.so` files built by
/// cc, each run in a child process that a crash or a hang may take down.
@Suite(.serialized, .startsProcesses, .offThePool) struct CheckTests {
    func check(_ arguments: [String]) throws -> TestEnv.Output {
        try TestEnv.run(TestEnv.vigil, ["plugins", "check", "--plugin-dir", try TestEnv.cPlugins()] + arguments, timeout: 120)
    }

    /// The report's line for check `name`.
    func line(_ name: String, in output: TestEnv.Output) -> String? {
        output.stdout.split(separator: "\n").map(String.init).first {
            $0.hasPrefix("  ") && $0.dropFirst(8).hasPrefix(name)
        }
    }

    @Test func heartbeatPassesEveryCheckAndEachCallIsTimed() throws {
        let result = try check(["heartbeat"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        for name in ["negotiation", "self-description", "create with default options", "start/poll/stop twice",
                     "start and stop again, destroy", "two instances at once", "no emit after stop", "events match declarations"] {
            #expect(line(name, in: result)?.hasPrefix("  PASS  ") == true, "\(name): \(result.stdout)")
        }
        #expect(line("emits from plugin threads", in: result)?.hasPrefix("  INFO  ") == true, "\(result.stdout)")
        #expect(line("create with default options", in: result)?.contains("threads=0, push_interval=100ms, message=alive") == true)
        #expect(result.stdout.contains("plugin heartbeat 1.0.0, ABI 1.5"))
        #expect(result.stdout.hasSuffix("8 passed, 0 failed\n"), "\(result.stdout)")
        #expect(!result.stdout.contains("FAIL"))
        // One line per instance, every call with its time, in order.
        let a = try #require(result.stdout.split(separator: "\n").first { $0.hasPrefix("  instance a ") })
        let calls = a.dropFirst("  instance a ".count).split(separator: ",")
            .map { $0.split(separator: " ").first.map(String.init) ?? "" }
        #expect(calls == ["create", "start", "poll", "stop", "start", "poll", "stop", "stop", "start", "start", "stop", "destroy"], "\(a)")
        #expect(result.stdout.contains("  host        load "), "\(result.stdout)")
        #expect(result.stdout.contains("  instance b "))
        #expect(result.stdout.contains("  instance c "))
    }

    @Test func optionsCanBeGivenAsPairsAndAsYAML() throws {
        let result = try check(["heartbeat", "--options", "{threads: 2, message: hi}", "--option", "push_interval=1ms"])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(line("create with the given options", in: result)?.contains("threads=2, push_interval=1ms, message=hi") == true,
                "\(result.stdout)")
    }

    @Test func floodPassesAndItsEmitsComeFromPluginThreads() throws {
        let result = try check([try TestEnv.cPlugin("flood")])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("push (not polled)"))
        #expect(line("emits from plugin threads", in: result)?.contains("seen: ") == true, "\(result.stdout)")
        #expect(line("events match declarations", in: result)?.hasPrefix("  PASS  ") == true)
        #expect(result.stdout.hasSuffix("8 passed, 0 failed\n"), "\(result.stdout)")
    }

    @Test func aCrashInPollIsReportedWithItsSignalAndCall() throws {
        let result = try check(["crash_in_poll"])
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let failure = try #require(line("start/poll/stop twice", in: result), "\(result.stdout)")
        #expect(failure.hasPrefix("  FAIL  "))
        #expect(failure.contains("SIGSEGV"), "\(failure)")
        #expect(failure.contains("in poll of instance a"), "\(failure)")
        #expect(result.stdout.contains("poll (SIGSEGV)"), "\(result.stdout)")
        #expect(result.stdout.contains("1 failed"))
    }

    @Test func aHangInStopIsCutAtTheDeadline() throws {
        let started = Date()
        let result = try check(["hang_in_stop", "--timeout", "1s"])
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let failure = try #require(line("start/poll/stop twice", in: result), "\(result.stdout)")
        #expect(failure.hasPrefix("  FAIL  "))
        #expect(failure.contains("stop of instance a did not return within 1s"), "\(failure)")
        #expect(result.stdout.contains("stop >1000.000 (killed)"), "\(result.stdout)")
        #expect(Date().timeIntervalSince(started) < 60)
    }

    @Test func anEmitAfterStopFailsTheCheck() throws {
        let result = try check(["emit_after_stop"])
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let failure = try #require(line("no emit after stop", in: result), "\(result.stdout)")
        #expect(failure.hasPrefix("  FAIL  "), "\(failure)")
        #expect(failure.contains("after stop returned"), "\(failure)")
        #expect(failure.contains("instance a: "), "\(failure)")
        // Everything else about it is fine.
        #expect(line("start/poll/stop twice", in: result)?.hasPrefix("  PASS  ") == true, "\(result.stdout)")
        #expect(line("emits from plugin threads", in: result)?.contains("seen: ") == true)
        #expect(result.stdout.hasSuffix("7 passed, 1 failed\n"), "\(result.stdout)")
    }

    @Test func undeclaredKindsFieldsAndTypesAreNamed() throws {
        let result = try check(["undeclared_field"])
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        let failure = try #require(line("events match declarations", in: result), "\(result.stdout)")
        #expect(failure.hasPrefix("  FAIL  "))
        #expect(failure.contains("field 'bogus' of kind 'sample' is not declared"), "\(failure)")
        #expect(failure.contains("field 'value' of kind 'sample' is an int, declared a double"), "\(failure)")
        #expect(failure.contains("kind 'mystery' is not declared"), "\(failure)")
        // A kind with dynamic fields (ABI 1.2) takes fields it does not list.
        #expect(!failure.contains("extra"), "\(failure)")
        #expect(!failure.contains("'dynamic'"), "\(failure)")
    }

    @Test func aFailingCreateFailsItsCheckAndSkipsTheInstanceChecks() throws {
        let result = try check(["create_fails"])
        #expect(result.status == 1, "\(result.stdout)\(result.stderr)")
        #expect(line("create with default options", in: result)?
            .contains("VIGIL_E_INVALID_CONFIG: create refused: the sensor bus is not configured") == true, "\(result.stdout)")
        #expect(line("instance checks", in: result)?.hasPrefix("  SKIP  ") == true)
    }

    @Test func aRequiredOptionWithoutDefaultIsNamedUnlessGiven() throws {
        let without = try check(["needs_option"])
        #expect(without.status == 0, "\(without.stdout)\(without.stderr)")
        let skip = try #require(line("create with default options", in: without), "\(without.stdout)")
        #expect(skip.hasPrefix("  SKIP  "))
        #expect(skip.contains("'target' (string) is required and has no default"), "\(skip)")
        #expect(skip.contains("--option target=VALUE"), "\(skip)")
        #expect(without.stdout.contains("0 failed, 2 skipped"))

        let with = try check(["needs_option", "--option", "target=/dev/null"])
        #expect(with.status == 0, "\(with.stdout)\(with.stderr)")
        #expect(line("create with the given options", in: with)?.contains("target=/dev/null, level=3") == true, "\(with.stdout)")
        #expect(with.stdout.hasSuffix("8 passed, 0 failed\n"), "\(with.stdout)")

        let typo = try check(["needs_option", "--option", "levl=2"])
        #expect(typo.status == 2)
        #expect(typo.stderr.contains("unknown option 'levl'") && typo.stderr.contains("did you mean 'level'?"), "\(typo.stderr)")

        let wrongType = try check(["needs_option", "--option", "target=x", "--option", "level=high"])
        #expect(wrongType.status == 2)
        #expect(wrongType.stderr.contains("option 'level' of plugin 'needs_option' must be an int"), "\(wrongType.stderr)")
    }

    @Test func aPluginThatCannotBeLoadedIsNotChecked() throws {
        let missing = try check(["nosuch"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("no plugin named 'nosuch'"), "\(missing.stderr)")
        #expect(missing.stdout.isEmpty)

        let noFile = try check(["/nonexistent/x.so"])
        #expect(noFile.status == 2)
        #expect(noFile.stderr.contains("refused: cannot read the file"), "\(noFile.stderr)")

        let refused = try check(["abi_major2"])
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("built for Vigil ABI 2.0"), "\(refused.stderr)")

        // A name finds the file; the file must describe itself by that name.
        let dir = try TestEnv.tempDir()
        try FileManager.default.copyItem(atPath: try TestEnv.cPlugin("heartbeat"), toPath: dir + "/other.so")
        let renamed = try TestEnv.run(TestEnv.vigil, ["plugins", "check", "--plugin-dir", dir, "other"], timeout: 120)
        #expect(renamed.status == 2)
        #expect(renamed.stderr.contains("describes itself as plugin 'heartbeat', not 'other'"), "\(renamed.stderr)")
    }

    @Test func checkHasHelpAndHidesItsChildFlags() throws {
        let help = try TestEnv.run(TestEnv.vigil, ["plugins", "check", "--help"])
        #expect(help.status == 0)
        #expect(help.stdout.contains("--timeout"))
        #expect(help.stdout.contains("--option <NAME=VALUE>"))
        #expect(!help.stdout.contains("--child-fd") && !help.stdout.contains("--expect-name"))
        let bad = try TestEnv.run(TestEnv.vigil, ["plugins", "check", "heartbeat", "--option", "novalue"])
        #expect(bad.status == 64, "\(bad.stderr)")
        #expect(bad.stderr.contains("--option novalue: write NAME=VALUE"), "\(bad.stderr)")
    }
}
