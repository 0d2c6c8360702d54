// The calls through libffi, built with the package trait FFI (on by
// default); without it WithoutLibffi.swift stands in for this file.
#if FFI
import CFFI
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import VigilKit

/// One function of a library, its libffi call interface prepared once, with
/// its argument storage allocated once: strings copied for the life of the
/// object, out-buffers zeroed before every call.
final class ForeignCall {
    /// A returned string is read up to this many bytes.
    static let maxStringBytes = 65_536

    private let library: SharedLibrary  // keeps the library open while calls may come
    private let function: UnsafeMutableRawPointer
    private let signature: Signature
    private let cif: UnsafeMutablePointer<ffi_cif>
    private let types: UnsafeMutablePointer<UnsafeMutablePointer<ffi_type>?>
    private let values: UnsafeMutablePointer<UnsafeMutableRawPointer?>
    /// One 8-byte slot per argument: the value itself, or a pointer.
    private let slots: UnsafeMutableRawPointer
    private let outs: [(buffer: UnsafeMutableRawPointer, spec: OutSpec)]
    private let strings: [UnsafeMutablePointer<CChar>]
    /// Room for the return value, which libffi widens to at least an ffi_arg.
    private let result: UnsafeMutableRawPointer

    static let slotSize = 8
    static let resultSize = max(16, MemoryLayout<ffi_arg>.size)

    init(library: SharedLibrary, function: UnsafeMutableRawPointer, signature: Signature) throws(MonitorError) {
        self.library = library
        self.function = function
        self.signature = signature
        let n = signature.arguments.count
        cif = .allocate(capacity: 1)
        types = .allocate(capacity: max(n, 1))
        values = .allocate(capacity: max(n, 1))
        slots = .allocate(byteCount: max(n, 1) * Self.slotSize, alignment: Self.slotSize)
        slots.initializeMemory(as: UInt8.self, repeating: 0, count: max(n, 1) * Self.slotSize)
        result = .allocate(byteCount: Self.resultSize, alignment: 16)
        var outs: [(buffer: UnsafeMutableRawPointer, spec: OutSpec)] = []
        var strings: [UnsafeMutablePointer<CChar>] = []
        for (i, argument) in signature.arguments.enumerated() {
            let slot = slots + i * Self.slotSize
            values[i] = slot
            switch argument {
            case .input(let type, let value):
                types[i] = Self.ffiType(type)
                switch value {
                case .signed(let v): Self.store(UInt64(bitPattern: v), size: type.size, at: slot)
                case .unsigned(let v): Self.store(v, size: type.size, at: slot)
                case .float(let f): slot.storeBytes(of: f, as: Float.self)
                case .double(let d): slot.storeBytes(of: d, as: Double.self)
                case .bool(let b): slot.storeBytes(of: b ? 1 : 0, as: UInt8.self)
                case .string(let s):
                    var pointer: UnsafeMutablePointer<CChar>? = nil
                    if let s {
                        pointer = strdup(s)
                        strings.append(pointer!)
                    }
                    slot.storeBytes(of: pointer, as: UnsafeMutablePointer<CChar>?.self)
                }
            case .output(let spec):
                types[i] = vigil_ffi_type_pointer()
                let buffer = UnsafeMutableRawPointer.allocate(byteCount: spec.type.size * spec.count, alignment: 8)
                outs.append((buffer, spec))
                slot.storeBytes(of: buffer, as: UnsafeMutableRawPointer.self)
            }
        }
        self.outs = outs
        self.strings = strings
        let status = vigil_ffi_prep_cif(cif, UInt32(n), Self.ffiType(signature.returns), types)
        guard status == FFI_OK else {
            // Released by deinit, which runs as this initializer throws.
            throw .fatal("libffi could not prepare a call of this signature (ffi_prep_cif status \(status.rawValue))")
        }
    }

    deinit {
        for s in strings { free(s) }
        for out in outs { out.buffer.deallocate() }
        result.deallocate()
        slots.deallocate()
        values.deallocate()
        types.deallocate()
        cif.deallocate()
    }

    /// Calls the function once. Returns one value per field name, in order
    /// (nil for a NULL string), and how long the call took in microseconds.
    func invoke() -> (values: [Value?], elapsedMicroseconds: Double) {
        for out in outs {
            out.buffer.initializeMemory(as: UInt8.self, repeating: 0, count: out.spec.type.size * out.spec.count)
        }
        result.initializeMemory(as: UInt8.self, repeating: 0, count: Self.resultSize)
        let started = Self.monotonic()
        vigil_ffi_call(cif, function, result, values)
        let elapsed = Self.monotonic() - started
        var fields: [Value?] = []
        fields.reserveCapacity(signature.fields.count)
        if signature.returns != .void { fields.append(returned()) }
        for out in outs {
            for k in 0..<out.spec.count {
                fields.append(Self.load(out.spec.type, at: out.buffer + k * out.spec.type.size))
            }
        }
        return (fields, Double(elapsed) / 1000)
    }

    /// libffi returns integers narrower than a register widened to an ffi_arg.
    private func returned() -> Value? {
        let type = signature.returns
        if type != .float, type != .double, type != .string, type.size < MemoryLayout<ffi_arg>.size {
            return Self.integer(type, bits: UInt64(result.load(as: ffi_arg.self)))
        }
        return Self.load(type, at: result)
    }

    static func load(_ type: CType, at p: UnsafeRawPointer) -> Value? {
        switch type {
        case .void: nil
        case .float: .double(Double(p.load(as: Float.self)))
        case .double: .double(p.load(as: Double.self))
        case .string:
            p.load(as: UnsafePointer<CChar>?.self).map { s in
                let length = strnlen(s, maxStringBytes)
                return .string(String(decoding: UnsafeRawBufferPointer(start: s, count: length), as: UTF8.self))
            }
        case .bool, .int8, .uint8: integer(type, bits: UInt64(p.load(as: UInt8.self)))
        case .int16, .uint16: integer(type, bits: UInt64(p.load(as: UInt16.self)))
        case .int32, .uint32: integer(type, bits: UInt64(p.load(as: UInt32.self)))
        case .int64, .uint64: integer(type, bits: p.load(as: UInt64.self))
        }
    }

    /// An integer (or bool) from the low bits of `bits`. A uint64 above
    /// Int64.max, which an int field cannot hold, becomes a double.
    static func integer(_ type: CType, bits: UInt64) -> Value {
        switch type {
        case .bool: .bool(UInt8(truncatingIfNeeded: bits) != 0)
        case .int8: .int(Int64(Int8(truncatingIfNeeded: bits)))
        case .int16: .int(Int64(Int16(truncatingIfNeeded: bits)))
        case .int32: .int(Int64(Int32(truncatingIfNeeded: bits)))
        case .int64: .int(Int64(bitPattern: bits))
        case .uint8: .int(Int64(UInt8(truncatingIfNeeded: bits)))
        case .uint16: .int(Int64(UInt16(truncatingIfNeeded: bits)))
        case .uint32: .int(Int64(UInt32(truncatingIfNeeded: bits)))
        case .uint64: bits <= UInt64(Int64.max) ? .int(Int64(bits)) : .double(Double(bits))
        case .void, .float, .double, .string: preconditionFailure("not an integer type: \(type.name)")
        }
    }

    /// Stores the low `size` bytes of `bits` as an integer of that size.
    static func store(_ bits: UInt64, size: Int, at p: UnsafeMutableRawPointer) {
        switch size {
        case 1: p.storeBytes(of: UInt8(truncatingIfNeeded: bits), as: UInt8.self)
        case 2: p.storeBytes(of: UInt16(truncatingIfNeeded: bits), as: UInt16.self)
        case 4: p.storeBytes(of: UInt32(truncatingIfNeeded: bits), as: UInt32.self)
        default: p.storeBytes(of: bits, as: UInt64.self)
        }
    }

    static func ffiType(_ type: CType) -> UnsafeMutablePointer<ffi_type> {
        switch type {
        case .void: vigil_ffi_type_void()
        case .bool, .uint8: vigil_ffi_type_uint8()  // C's bool is one byte, 0 or 1
        case .int8: vigil_ffi_type_sint8()
        case .int16: vigil_ffi_type_sint16()
        case .uint16: vigil_ffi_type_uint16()
        case .int32: vigil_ffi_type_sint32()
        case .uint32: vigil_ffi_type_uint32()
        case .int64: vigil_ffi_type_sint64()
        case .uint64: vigil_ffi_type_uint64()
        case .float: vigil_ffi_type_float()
        case .double: vigil_ffi_type_double()
        case .string: vigil_ffi_type_pointer()
        }
    }

    static func monotonic() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }
}
#endif
