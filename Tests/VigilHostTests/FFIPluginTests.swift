import Foundation
import Synchronization
import Testing
import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// The `ffi` plugin, loaded from the built libvigil-ffi.so and run by the real host
/// machinery: functions of libm and libc, and of Tests/Fixtures/ffi/vigiltest.c
/// compiled with cc for the run, one or more per type; then every problem
/// with the options, each reported by create as INVALID_CONFIG with the
/// option's path.
@Suite(.startsProcesses, .offThePool) struct FFIPluginTests {
    // MARK: - the fixture library

    private static let fixtureOnce = Mutex<String?>(nil)

    /// Tests/Fixtures/ffi/vigiltest.c as a shared library, built once per run.
    static func fixtureLibrary() throws -> String {
        try fixtureOnce.withLock { built in
            if let built { return built }
            let dir = try TestEnv.tempDir("ffi-fixture")
            let output = dir + "/libvigiltest.so"
            let compiler = try cCompiler()
            let result = try TestEnv.run(compiler[0], Array(compiler.dropFirst()) + [
                "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-shared", "-fPIC",
                TestEnv.fixture("ffi/vigiltest.c"), "-o", output,
            ], timeout: 120)
            guard result.status == 0 else {
                throw TestFailure("compiling vigiltest.c with \(compiler.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
            }
            built = output
            return output
        }
    }

    /// The C compiler as scripts/build-c-plugins picks it: $CC (which may hold
    /// words, e.g. "ccache gcc"), else cc, gcc or clang on PATH, else the clang
    /// next to swift. The first word resolved to a path.
    static func cCompiler() throws -> [String] {
        let environment = ProcessInfo.processInfo.environment
        func onPath(_ name: String) -> String? {
            if name.contains("/") { return FileManager.default.isExecutableFile(atPath: name) ? name : nil }
            for dir in (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
                let path = "\(dir)/\(name)"
                if FileManager.default.isExecutableFile(atPath: path) { return path }
            }
            return nil
        }
        if let cc = environment["CC"], !cc.isEmpty {
            var words = cc.split(separator: " ").map(String.init)
            guard let program = onPath(words[0]) else { throw TestFailure("CC is set to '\(cc)', which is not a command") }
            words[0] = program
            return words
        }
        for candidate in ["cc", "gcc", "clang"] {
            if let path = onPath(candidate) { return [path] }
        }
        if let swift = onPath("swift") {
            let clang = URL(fileURLWithPath: swift).resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("clang").path
            if FileManager.default.isExecutableFile(atPath: clang) { return [clang] }
        }
        throw TestFailure("no C compiler found: set CC, or install cc, gcc or clang")
    }

    // MARK: - helpers

    /// The options as a YAML flow mapping.
    static func options(library: String, symbol: String, args: String? = nil, returns: String? = nil,
                        fields: String? = nil) -> String {
        var parts = ["library: \(library)", "symbol: \(symbol)"]
        if let args { parts.append("args: \(args)") }
        if let returns { parts.append("returns: \(returns)") }
        if let fields { parts.append("fields: \(fields)") }
        return "{ " + parts.joined(separator: ", ") + " }"
    }

    /// The `result` events of `polls` polls (the first is the snapshot after start).
    func results(_ options: String, polls: Int = 1) async throws -> [Event] {
        let h = try Harness(plugin: "ffi", options: options)
        h.launch()
        var events = h.waitFor(1) { $0.kind == "result" || $0.kind == "instance_failed" }
        if let failed = events.first(where: { $0.kind == "instance_failed" }) {
            await h.stop()
            throw TestFailure("the instance failed: \(failed[field: "message"].map { "\($0)" } ?? "?")")
        }
        for n in 1..<max(polls, 1) {
            h.poll()
            events = h.waitFor(n + 1) { $0.kind == "result" }
        }
        await h.stop()
        #expect(events.count == polls)
        return events
    }

    func result(_ options: String) async throws -> Event {
        let events = try await results(options)
        guard let event = events.first else { throw TestFailure("no result event for \(options)") }
        return event
    }

    /// The message create failed with (and checks the status was INVALID_CONFIG).
    func createFailure(_ options: String) async throws -> String {
        let h = try Harness(plugin: "ffi", options: options)
        h.launch()
        let failed = h.waitFor(1) { $0.kind == "instance_failed" || $0.kind == "result" }.first
        await h.stop()
        guard let failed, failed.kind == "instance_failed" else { throw TestFailure("create succeeded for \(options)") }
        #expect(failed[field: "call"] == .string("create"))
        #expect(failed[field: "status"] == .string("invalid configuration"))
        guard case .string(let message)? = failed[field: "message"] else { throw TestFailure("no message") }
        return message
    }

    /// Every field but the duration, in order.
    static func values(_ event: Event) -> [Field] { event.fields.filter { $0.name != "elapsed_us" } }

    // MARK: - system libraries

    @Test func callsCosineOfLibm() async throws {
        let event = try await result(Self.options(library: "libm.so.6", symbol: "cos", args: "[{double: 0}]",
                                                   returns: "double", fields: "[value]"))
        #expect(event.plugin == "ffi")
        #expect(Self.values(event) == [Field("value", .double(1.0))])
        guard case .double(let elapsed)? = event[field: "elapsed_us"] else { throw TestFailure("no elapsed_us") }
        #expect(elapsed >= 0 && elapsed < 1_000_000)
    }

    @Test func callsGetloadavgWithAnOutArray() async throws {
        let event = try await result(Self.options(library: "libc.so.6", symbol: "getloadavg",
                                                   args: "[{out: \"double[3]\"}, {int32: 3}]", returns: "int32",
                                                   fields: "[count, load1, load5, load15]"))
        #expect(Self.values(event).map(\.name) == ["count", "load1", "load5", "load15"])
        #expect(event[field: "count"] == .int(3))
        for name in ["load1", "load5", "load15"] {
            guard case .double(let load)? = event[field: name] else { throw TestFailure("\(name) is not a double") }
            #expect(load >= 0)
        }
    }

    // MARK: - every type, through the fixture library

    struct Case: Sendable, CustomTestStringConvertible {
        var symbol: String
        var args: String
        var returns: String
        var fields: String
        var expected: [Field]
        var testDescription: String { "\(symbol)(\(args)) -> \(returns)" }
    }

    static let cases: [Case] = [
        Case(symbol: "vt_add", args: "[{int32: 40}, {int64: 2}]", returns: "int64", fields: "[sum]", expected: [Field("sum", .int(42))]),
        Case(symbol: "vt_add", args: "[{int32: -5}, {int64: 10000000000}]", returns: "int64", fields: "[sum]",
             expected: [Field("sum", .int(9_999_999_995))]),
        Case(symbol: "vt_sub", args: "[{int32: 10}, {int32: 3}]", returns: "int32", fields: "[d]", expected: [Field("d", .int(7))]),
        Case(symbol: "vt_i8", args: "[{int8: -5}]", returns: "int8", fields: "[v]", expected: [Field("v", .int(-6))]),
        Case(symbol: "vt_i16", args: "[{int16: -300}]", returns: "int16", fields: "[v]", expected: [Field("v", .int(-600))]),
        Case(symbol: "vt_neg", args: "[]", returns: "int32", fields: "[v]", expected: [Field("v", .int(-42))]),
        Case(symbol: "vt_i64", args: "[{int64: 9007199254740992}]", returns: "int64", fields: "[v]",
             expected: [Field("v", .int(-9_007_199_254_740_992))]),
        Case(symbol: "vt_u8", args: "[]", returns: "uint8", fields: "[v]", expected: [Field("v", .int(250))]),
        Case(symbol: "vt_u16", args: "[{uint16: 65534}]", returns: "uint16", fields: "[v]", expected: [Field("v", .int(65535))]),
        Case(symbol: "vt_u32max", args: "[]", returns: "uint32", fields: "[v]", expected: [Field("v", .int(4_294_967_295))]),
        Case(symbol: "vt_u32", args: "[{uint32: 4000000000}]", returns: "uint32", fields: "[v]",
             expected: [Field("v", .int(4_000_000_000))]),
        Case(symbol: "vt_u64", args: "[{uint64: 4503599627370496}]", returns: "uint64", fields: "[v]",
             expected: [Field("v", .int(9_007_199_254_740_992))]),
        // Above Int64.max an int field cannot hold it: a double.
        Case(symbol: "vt_u64max", args: "[]", returns: "uint64", fields: "[v]", expected: [Field("v", .double(18_446_744_073_709_551_615.0))]),
        Case(symbol: "vt_half", args: "[{float: 3}]", returns: "float", fields: "[v]", expected: [Field("v", .double(1.5))]),
        Case(symbol: "vt_scale", args: "[{float: 1.5}, {double: 4}]", returns: "double", fields: "[v]", expected: [Field("v", .double(6))]),
        Case(symbol: "vt_flag", args: "[{bool: true}]", returns: "bool", fields: "[v]", expected: [Field("v", .bool(false))]),
        Case(symbol: "vt_flag", args: "[{bool: false}]", returns: "bool", fields: "[v]", expected: [Field("v", .bool(true))]),
        Case(symbol: "vt_name", args: "[]", returns: "string", fields: "[name]", expected: [Field("name", .string("vigil"))]),
        // A NULL string: no field.
        Case(symbol: "vt_null", args: "[]", returns: "string", fields: "[name]", expected: []),
        Case(symbol: "vt_strlen", args: "[{string: héllo}]", returns: "int32", fields: "[n]", expected: [Field("n", .int(6))]),
        Case(symbol: "vt_strlen", args: "[{string: null}]", returns: "int32", fields: "[n]", expected: [Field("n", .int(-1))]),
        Case(symbol: "vt_fill", args: "[{out: \"int64[2]\"}]", returns: "void", fields: "[a, b]",
             expected: [Field("a", .int(-7)), Field("b", .int(1 << 40))]),
        Case(symbol: "vt_outs",
             args: "[{out: int8}, {int32: 10}, {out: \"uint16[2]\"}, {out: float}, {out: \"double[3]\"}, {out: uint64}]",
             returns: "int32", fields: "[ret, a, b0, b1, c, d0, d1, d2, e]",
             expected: [Field("ret", .int(10)), Field("a", .int(-3)), Field("b0", .int(65535)), Field("b1", .int(7)),
                        Field("c", .double(0.25)), Field("d0", .double(10.5)), Field("d1", .double(11.5)),
                        Field("d2", .double(12.5)), Field("e", .double(18_446_744_073_709_551_615.0))]),
        // The function writes nothing: the buffer was zeroed.
        Case(symbol: "vt_untouched", args: "[{out: \"int32[2]\"}]", returns: "void", fields: "[a, b]",
             expected: [Field("a", .int(0)), Field("b", .int(0))]),
        Case(symbol: "vt_nothing", args: "[]", returns: "void", fields: "[]", expected: []),
    ]

    @Test(arguments: cases)
    func callsTheFixture(_ c: Case) async throws {
        let library = try Self.fixtureLibrary()
        let event = try await result(Self.options(library: library, symbol: c.symbol, args: c.args, returns: c.returns,
                                                   fields: c.fields))
        #expect(Self.values(event) == c.expected)
        #expect(event.fields.first?.name == "elapsed_us")
    }

    @Test func callsAgainAtEachPoll() async throws {
        let library = try Self.fixtureLibrary()
        let events = try await results(Self.options(library: library, symbol: "vt_count", returns: "int32", fields: "[n]"),
                                       polls: 3)
        guard case .int(let first)? = events.first?[field: "n"] else { throw TestFailure("no count") }
        #expect(events.map { $0[field: "n"] } == [.int(first), .int(first + 1), .int(first + 2)])
    }

    @Test func passesTheSameStringCopyAtEveryCall() async throws {
        let library = try Self.fixtureLibrary()
        let events = try await results(Self.options(library: library, symbol: "vt_same", args: "[{string: kept}]",
                                                    returns: "int32", fields: "[same]"), polls: 3)
        #expect(events.map { $0[field: "same"] } == [.int(0), .int(1), .int(1)])
    }

    // MARK: - problems found by create

    struct Problem: Sendable, CustomTestStringConvertible {
        var options: String
        var message: String
        var testDescription: String { message }
    }

    static let knownArgumentTypes = "bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, string, out"

    static func libc(_ args: String? = nil, returns: String? = nil, fields: String? = nil) -> String {
        options(library: "libc.so.6", symbol: "getloadavg", args: args, returns: returns, fields: fields)
    }

    static let problems: [Problem] = [
        Problem(options: libc("[{double: 1}, {int33: 3}]"),
                message: "options.args[1]: unknown type \"int33\" (known: \(knownArgumentTypes))"),
        Problem(options: libc("[{int8: 300}]"), message: "options.args[0].int8: 300 does not fit int8 (-128 to 127)"),
        Problem(options: libc("[{int32: 1}, {uint8: -1}]"), message: "options.args[1].uint8: -1 does not fit uint8 (0 to 255)"),
        Problem(options: libc("[{uint64: 18446744073709551616}]"),
                message: "options.args[0].uint64: 1.8446744073709552e+19 does not fit uint64 (0 to 18446744073709551615)"),
        Problem(options: libc("[{int64: 1152921504606846976}]"),
                message: "options.args[0].int64: 1.152921504606847e+18 is beyond ±2^53 (9007199254740992), where JSON numbers are not exact integers"),
        Problem(options: libc("[{int32: 2.5}]"), message: "options.args[0].int32: 2.5 is not an integer"),
        Problem(options: libc("[{int16: \"7\"}]"), message: "options.args[0].int16: expected an integer, got a string (\"7\")"),
        Problem(options: libc("[{double: x}]"), message: "options.args[0].double: expected a number, got a string (\"x\")"),
        Problem(options: libc("[{float: 1e300}]"),
                message: "options.args[0].float: 1e+300 does not fit float (at most ±3.4028235e+38)"),
        Problem(options: libc("[{bool: 1}]"), message: "options.args[0].bool: expected true or false, got a number (1)"),
        Problem(options: libc("[{string: [a]}]"), message: "options.args[0].string: expected a string or null, got a list ([\"a\"])"),
        Problem(options: libc("[{void: null}]"),
                message: "options.args[0]: void is a return type only (a function without arguments has args: [])"),
        Problem(options: libc("[3]"),
                message: "options.args[0]: expected a one-key map such as {int32: 3} or {out: \"double[3]\"}, got a number"),
        Problem(options: libc("[{int32: 1, int64: 2}]"),
                message: "options.args[0]: expected a one-key map such as {int32: 3} or {out: \"double[3]\"}, got an object with 2 keys"),
        Problem(options: libc("{int32: 3}"),
                message: "options.args: expected a list of arguments such as [{int32: 3}, {out: \"double[3]\"}], got an object"),
        Problem(options: libc("[{out: \"double[0]\"}]"), message: "options.args[0].out: \"double[0]\": the count must be 1 to 4096"),
        Problem(options: libc("[{out: \"double[x]\"}]"),
                message: "options.args[0].out: \"double[x]\" is not TYPE or TYPE[COUNT] (such as \"double[3]\" or \"int32\")"),
        Problem(options: libc("[{out: \"dbl[2]\"}]"),
                message: "options.args[0].out: unknown type \"dbl\" (known for out-arguments: int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double)"),
        Problem(options: libc("[{out: string}]"),
                message: "options.args[0].out: \"string\": out-arguments hold numbers (int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double)"),
        Problem(options: libc("[{out: 3}]"),
                message: "options.args[0].out: expected a type as a string such as \"double[3]\" or \"int32\", got a number"),
        Problem(options: libc(returns: "int33"),
                message: "options.returns: unknown type \"int33\" (known: void, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, string)"),
        Problem(options: libc("[{out: \"double[3]\"}, {int32: 3}]", returns: "int32", fields: "[count, load1, load5]"),
                message: "options.fields: 3 names given, 4 needed (return value + double[3])"),
        Problem(options: libc("[{out: int8}, {int32: 10}, {out: \"uint16[2]\"}]", returns: "int32", fields: "[a]"),
                message: "options.fields: 1 name given, 4 needed (return value + int8 + uint16[2])"),
        Problem(options: libc(fields: "[x]"),
                message: "options.fields: 1 name given, 0 needed (the function returns void and has no out-arguments)"),
        Problem(options: libc(returns: "int32"), message: "options.fields: 0 names given, 1 needed (return value)"),
        Problem(options: libc(returns: "int32", fields: "[3]"),
                message: "options.fields[0]: expected a field name (a non-empty string), got a number"),
        Problem(options: libc(returns: "int32", fields: "[\"\"]"),
                message: "options.fields[0]: expected a field name (a non-empty string), got an empty string"),
        Problem(options: libc("[{out: \"int32[2]\"}]", fields: "[a, a]"),
                message: "options.fields[1]: \"a\" is already the name of field 0"),
        Problem(options: libc(returns: "int32", fields: "[elapsed_us]"),
                message: "options.fields[0]: \"elapsed_us\" is the plugin's own field (the call's duration)"),
        Problem(options: libc(fields: "{a: 1}"), message: "options.fields: expected a list of field names, got an object"),
        Problem(options: options(library: "libc.so.6", symbol: "nope"), message: "options.symbol: \"nope\" not found in libc.so.6"),
        // The options are checked before the library is loaded.
        Problem(options: options(library: "libnope.so", symbol: "nope", returns: "int33"),
                message: "options.returns: unknown type \"int33\" (known: void, bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float, double, string)"),
    ]

    @Test(arguments: problems)
    func createRefusesWithTheOptionPath(_ p: Problem) async throws {
        #expect(try await createFailure(p.options) == p.message)
    }

    @Test func createRefusesALibraryItCannotLoadWithDlerrorsText() async throws {
        let message = try await createFailure(Self.options(library: "libnope.so", symbol: "nope"))
        #expect(message.hasPrefix("options.library: cannot load \"libnope.so\": "))
        #expect(message.contains("libnope.so: cannot open shared object file"))
    }

    @Test func createRefusesAFileThatIsNotALibrary() async throws {
        let message = try await createFailure(Self.options(library: TestEnv.fixture("ffi/vigiltest.c"), symbol: "vt_add"))
        #expect(message.hasPrefix("options.library: cannot load \"\(TestEnv.fixture("ffi/vigiltest.c"))\": "))
    }

    @Test func declaresADynamicResultKind() throws {
        let catalog = PluginCatalog(directories: [TestEnv.productsDir])
        guard case .success(let plugin) = catalog.load(reference: "ffi") else { throw TestFailure("ffi plugin not loaded") }
        let description = plugin.description
        #expect(description.options.map(\.name) == ["library", "symbol", "args", "returns", "fields"])
        let result = description.events.first { $0.kind == "result" }
        #expect(result?.dynamicFields == true)
        #expect(result?.fields.map(\.name) == ["elapsed_us"])
    }
}
