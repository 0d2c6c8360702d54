import Foundation
@preconcurrency import CVigilPlugin
import Testing
@testable import VigilABI
import VigilCore
@testable import VigilIsolation
@testable import VigilSinks
@testable import VigilRuntime
@testable import VigilControl

/// ABI 1.4's field flags (identity, counter) and the on-change event flag:
/// read from a plugin that chose 1.4 and whose field array's element size
/// covers them, never otherwise; held to the field's type; carried by the
/// description's JSON. Descriptors are built in memory, byte for byte as a
/// C plugin lays them out.
@Suite struct FieldFlagsTests {
    typealias Texts = OptionExampleTests.Texts

    /// One kind with `fields` laid out `stride` bytes apart, described as a
    /// plugin that chose ABI 1.`minor` would describe it.
    static func describe(_ fields: [vigil_field_spec], stride: Int, minor: Int, eventFlags: UInt32 = 0,
                         texts: Texts) -> Result<PluginDescription, PluginLoader.Malformed> {
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(1, fields.count * stride), alignment: 16)
        defer { buffer.deallocate() }
        // Bytes past a 1.0 element are garbage, as a plugin's next data would be.
        buffer.initializeMemory(as: UInt8.self, repeating: 0xA5, count: max(1, fields.count * stride))
        for (i, var field) in fields.enumerated() {
            field.size = UInt32(stride)
            withUnsafeBytes(of: &field) { bytes in
                (buffer + i * stride).copyMemory(from: bytes.baseAddress!, byteCount: min(stride, bytes.count))
            }
        }
        var events = [vigil_event_spec(size: UInt32(MemoryLayout<vigil_event_spec>.size), flags: eventFlags, kind: texts.str("zone"),
                                       doc: texts.str("doc"), fields: UnsafePointer(buffer.assumingMemoryBound(to: vigil_field_spec.self)),
                                       field_count: fields.count)]
        return events.withUnsafeMutableBufferPointer { e in
            var d = vigil_plugin_descriptor()
            d.size = UInt32(MemoryLayout<vigil_plugin_descriptor>.size)
            d.kind = UInt32(VIGIL_PLUGIN_MONITOR.rawValue)
            d.name = texts.str("flags")
            d.version = texts.str("1.0.0")
            d.events = UnsafePointer(e.baseAddress)
            d.event_count = 1
            d.create = OptionExampleTests.create
            d.start = OptionExampleTests.call
            d.stop = OptionExampleTests.call
            d.destroy = OptionExampleTests.destroy
            return PluginLoader.describe(d, path: "/test/flags.so", abiMajor: 1, abiMinor: minor)
        }
    }

    static func field(_ name: String, _ type: vigil_type, flags: Int, texts: Texts) -> vigil_field_spec {
        vigil_field_spec(size: 0, type: UInt32(type.rawValue), name: texts.str(name), unit: texts.str(""), doc: texts.str("doc"),
                         flags: UInt32(flags), reserved: 0)
    }

    @Test func theLayoutIsTheHeadersAndOnlyAppends() {
        #expect(ABISizes.fieldSpec == 56)
        #expect(MemoryLayout<vigil_field_spec>.offset(of: \vigil_field_spec.flags) == ABISizes.fieldSpec)
        #expect(MemoryLayout<vigil_field_spec>.size == 64)
    }

    @Test func aPluginOf1_4MarksIdentitiesCountersAndOnChangeKinds() throws {
        let texts = Texts()
        let d = try Self.describe([
            Self.field("zone", VIGIL_TYPE_STRING, flags: VIGIL_FIELD_IDENTITY, texts: texts),
            Self.field("trips", VIGIL_TYPE_INT, flags: VIGIL_FIELD_COUNTER, texts: texts),
            Self.field("temperature", VIGIL_TYPE_DOUBLE, flags: 0, texts: texts),
        ], stride: 64, minor: 4, eventFlags: UInt32(VIGIL_EVENT_ON_CHANGE), texts: texts).get()
        let fields = d.events[0].fields
        #expect(fields.map(\.identity) == [true, false, false])
        #expect(fields.map(\.counter) == [false, true, false])
        #expect(d.events[0].onChange)
        // The probe and the runner carry them in the description's JSON.
        let again = try PluginDescription(json: d.json())
        #expect(again.events[0].fields == fields && again.events[0].onChange)
    }

    @Test func olderPluginsAndShortElementsHaveNoFlags() throws {
        let texts = Texts()
        let marked = [Self.field("zone", VIGIL_TYPE_STRING, flags: VIGIL_FIELD_IDENTITY, texts: texts),
                      Self.field("trips", VIGIL_TYPE_INT, flags: VIGIL_FIELD_COUNTER, texts: texts)]
        // A 1.3 plugin: whatever its bytes say, no flags (and no on-change).
        let old = try Self.describe(marked, stride: 64, minor: 3, eventFlags: UInt32(VIGIL_EVENT_ON_CHANGE), texts: texts).get()
        #expect(old.events[0].fields.allSatisfy { !$0.identity && !$0.counter })
        #expect(!old.events[0].onChange)
        // A 1.4 plugin built with the 1.0 layout: the garbage past 56 bytes is not read.
        let short = try Self.describe(marked, stride: 56, minor: 4, texts: texts).get()
        #expect(short.events[0].fields.allSatisfy { !$0.identity && !$0.counter })
    }

    @Test func marksAreHeldToTheirTypes() {
        let texts = Texts()
        let cases: [(vigil_type, Int, String)] = [(VIGIL_TYPE_DOUBLE, VIGIL_FIELD_IDENTITY, "is an identity but a double"),
                                   (VIGIL_TYPE_BOOL, VIGIL_FIELD_IDENTITY, "is an identity but a bool"),
                                   (VIGIL_TYPE_STRING, VIGIL_FIELD_COUNTER, "is a counter but a string"),
                                   (VIGIL_TYPE_INT, VIGIL_FIELD_COUNTER | VIGIL_FIELD_IDENTITY, "is a counter but also an identity")]
        for (type, flags, why) in cases {
            let result = Self.describe([Self.field("f", type, flags: flags, texts: texts)], stride: 64, minor: 4, texts: texts)
            guard case .failure(let error) = result else {
                Issue.record("\(type) with flags \(flags) was accepted")
                continue
            }
            #expect(error.why.contains(why), "\(error.why)")
        }
    }
}
