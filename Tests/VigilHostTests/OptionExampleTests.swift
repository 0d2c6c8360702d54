import Foundation
@preconcurrency import CVigilPlugin
import Testing
@testable import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// ABI 1.3's `example_text` of an option: read from a plugin that chose 1.3
/// and whose option array's element size covers it, never otherwise; held
/// to the option's type like a default; and what `vigil plugins check` gives
/// an option when it is given none. Descriptors are built here in memory,
/// byte for byte as a C plugin lays them out.
@Suite struct OptionExampleTests {
    /// Texts the descriptors point to, alive for the test.
    final class Texts {
        private var kept: [UnsafeMutablePointer<CChar>] = []
        func str(_ text: String) -> vigil_str {
            let p = strdup(text)!
            kept.append(p)
            return vigil_str(ptr: p, len: strlen(p))
        }
        deinit { for p in kept { free(p) } }
    }

    static let create: @convention(c) (UnsafePointer<vigil_create_args>?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                       UnsafeMutablePointer<vigil_error>?) -> vigil_status = { _, _, _ in VIGIL_OK }
    static let call: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutablePointer<vigil_error>?) -> vigil_status = { _, _ in VIGIL_OK }
    static let destroy: @convention(c) (UnsafeMutableRawPointer?) -> Void = { _ in }

    /// `specs` laid out `stride` bytes apart, each with `size` = `stride`,
    /// described as a plugin that chose ABI 1.`minor` would describe them.
    static func describe(_ specs: [vigil_option_spec], stride: Int, minor: Int, texts: Texts) -> Result<PluginDescription, PluginLoader.Malformed> {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(1, specs.count * stride), alignment: 16)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0xA5, count: max(1, specs.count * stride))
        for (i, var spec) in specs.enumerated() {
            spec.size = UInt32(stride)
            withUnsafeBytes(of: &spec) { bytes in
                (buffer + i * stride).copyMemory(from: bytes.baseAddress!, byteCount: min(stride, bytes.count))
            }
        }
        var d = vigil_plugin_descriptor()
        d.size = UInt32(MemoryLayout<vigil_plugin_descriptor>.size)
        d.kind = UInt32(VIGIL_PLUGIN_MONITOR.rawValue)
        d.name = texts.str("examples")
        d.version = texts.str("1.0.0")
        d.options = UnsafePointer(buffer.assumingMemoryBound(to: vigil_option_spec.self))
        d.option_count = specs.count
        d.create = create
        d.start = call
        d.stop = call
        d.destroy = destroy
        return PluginLoader.describe(d, path: "/test/examples.so", abiMajor: 1, abiMinor: minor)
    }

    static func spec(_ name: String, _ type: vigil_type, default defaultText: String = "", example: vigil_str,
                     required: Bool = false, texts: Texts) -> vigil_option_spec {
        vigil_option_spec(size: 0, type: UInt32(type.rawValue), name: texts.str(name), default_text: texts.str(defaultText),
                          doc: texts.str("doc"), flags: required ? UInt32(VIGIL_OPTION_REQUIRED) : 0, reserved: 0,
                          example_text: example)
    }

    @Test func theLayoutIsTheHeadersAndOnlyAppends() {
        #expect(ABISizes.optionSpec == 64)
        #expect(ABISizes.optionSpec1_3 == 80)
        #expect(MemoryLayout<vigil_option_spec>.offset(of: \vigil_option_spec.example_text) == ABISizes.optionSpec)
        #expect(MemoryLayout<vigil_option_spec>.size == ABISizes.optionSpec1_3)
    }

    @Test func aPluginOf1_3DeclaresExamplesThatTypeCheck() throws {
        let texts = Texts()
        let d = try Self.describe([
            Self.spec("name", VIGIL_TYPE_STRING, example: texts.str("sshd"), texts: texts),
            Self.spec("paths", VIGIL_TYPE_JSON, example: texts.str("[/tmp, /var]"), required: true, texts: texts),
            Self.spec("every", VIGIL_TYPE_DURATION, default: "1s", example: vigil_str(ptr: nil, len: 0), texts: texts),
        ], stride: 80, minor: 3, texts: texts).get()
        #expect(d.options.map(\.exampleText) == ["sshd", "[/tmp, /var]", nil])
        #expect(d.options[2].defaultText == "1s")
        // Said by describe's JSON too, which the probe and the runner carry.
        let again = try PluginDescription(json: d.json())
        #expect(again.options.map(\.exampleText) == ["sshd", "[/tmp, /var]", nil])
        #expect(d.json().contains(#""example_text":"sshd""#))
        // A description from an older writer (no example_text key) still reads.
        let old = d.json().replacingOccurrences(of: #","example_text":"sshd""#, with: "")
            .replacingOccurrences(of: #","example_text":"[/tmp, /var]""#, with: "")
        #expect(try PluginDescription(json: old).options.allSatisfy { $0.exampleText == nil })
    }

    /// A plugin that chose 1.2 or earlier never had the field: whatever its
    /// bytes hold is not read, even with a wider element.
    @Test(arguments: [0, 1, 2]) func aPluginOfAnOlderMinorHasNoExamples(minor: Int) throws {
        let texts = Texts()
        let garbage = vigil_str(ptr: UnsafePointer(bitPattern: 0x10), len: Int.max)
        let d = try Self.describe([Self.spec("level", VIGIL_TYPE_INT, default: "3", example: garbage, texts: texts)],
                                  stride: 80, minor: minor, texts: texts).get()
        #expect(d.options[0].exampleText == nil)
        #expect(d.options[0].defaultText == "3")
    }

    /// A 1.3 plugin whose option elements are the 1.0 size (built with an
    /// older header's layout): the bytes after each element are the next
    /// element's (here 0xA5 filler), and are not read as its example.
    @Test func anElementTooSmallForTheFieldHasNoExample() throws {
        let texts = Texts()
        let d = try Self.describe([
            Self.spec("level", VIGIL_TYPE_INT, default: "3", example: texts.str("4"), texts: texts),
            Self.spec("other", VIGIL_TYPE_INT, default: "5", example: texts.str("6"), texts: texts),
        ], stride: 64, minor: 3, texts: texts).get()
        #expect(d.options.map(\.exampleText) == [nil, nil])
        #expect(d.options.map(\.defaultText) == ["3", "5"])
    }

    @Test func anExampleOfTheWrongTypeOrMalformedRefusesThePluginNamingTheOption() {
        let texts = Texts()
        func why(_ spec: vigil_option_spec) -> String? {
            if case .failure(let m) = Self.describe([spec], stride: 80, minor: 3, texts: texts) { return m.why }
            return nil
        }
        #expect(why(Self.spec("level", VIGIL_TYPE_INT, default: "3", example: texts.str("many"), texts: texts))?
            .hasPrefix("example 'many' of option 'level' is not an int") == true)
        #expect(why(Self.spec("targets", VIGIL_TYPE_JSON, example: texts.str("[unclosed, {"), texts: texts))?
            .hasPrefix("example '[unclosed, {' of json option 'targets' does not parse") == true)
        #expect(why(Self.spec("every", VIGIL_TYPE_DURATION, example: texts.str("soon"), texts: texts))?
            .hasPrefix("example 'soon' of option 'every' is not a duration") == true)
        // Lengths from outside: a NULL pointer with a length, and a length past the limit, read nothing.
        #expect(why(Self.spec("name", VIGIL_TYPE_STRING, example: vigil_str(ptr: nil, len: 3), texts: texts))
            == "option example has length 3 but a NULL pointer")
        #expect(why(Self.spec("name", VIGIL_TYPE_STRING, example: vigil_str(ptr: UnsafePointer(bitPattern: 0x10), len: Int.max), texts: texts))?
            .hasPrefix("option example is \(Int.max) bytes long") == true)
        // The JSON path (a probe's or a runner's answer) holds it to the same rules.
        var description = PluginDescription(name: "p", version: "1", summary: "", abiMajor: 1, abiMinor: 3,
                                            options: [OptionSpec(name: "level", type: .int, defaultText: nil, doc: "",
                                                                 exampleText: "many")],
                                            events: [], defaultInterval: 0, polled: true, path: "/p.so")
        #expect(throws: (any Error).self) { try PluginDescription(json: description.json()) }
        description.options[0].exampleText = String(repeating: "9", count: PluginDescription.maxTextBytes + 1)
        #expect(description.problems().contains { $0.hasPrefix("option example is ") })
    }
}
