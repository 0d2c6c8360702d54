@preconcurrency import CVigilPlugin
import VigilCore

/// Error buffers, create arguments and status names: what every side of the
/// boundary (the runtime, the checker, the test kit, the probe) needs to call
/// a plugin, written once.

/// Bytes of the error buffer each call into a plugin gets.
package let pluginErrorCapacity = 1024

/// Calls `body` with a fresh error buffer; returns its status and, when not
/// OK, the message the plugin wrote (up to the first NUL or the end of the
/// buffer, invalid UTF-8 repaired).
package func withPluginError(_ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> (vigil_status, String) {
    var message = [CChar](repeating: 0, count: pluginErrorCapacity)
    let status = message.withUnsafeMutableBufferPointer { buffer in
        var error = vigil_error(size: UInt32(MemoryLayout<vigil_error>.size), reserved: 0,
                                message: buffer.baseAddress, capacity: buffer.count)
        return body(&error)
    }
    return (status, status == VIGIL_OK ? "" : pluginMessage(message))
}

/// The message a plugin wrote into an error buffer: up to the first NUL or
/// the end of the buffer (a plugin may fill it without a terminator).
package func pluginMessage(_ buffer: [CChar]) -> String {
    let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}

/// A plugin's string, copied; invalid UTF-8 is replaced with U+FFFD. A NULL
/// pointer reads as empty (callers that must refuse it check first).
@inline(__always)
package func pluginString(_ s: vigil_str) -> String {
    guard s.len > 0, let ptr = s.ptr else { return "" }
    return String(decoding: UnsafeRawBufferPointer(start: ptr, count: s.len), as: UTF8.self)
}

/// A plugin's string for a log line or a report, at most `limit` bytes of it,
/// so that a 1 GiB length costs nothing.
package func pluginString(_ s: vigil_str, limit: Int) -> (text: String, cut: Int) {
    guard s.len > 0, let ptr = s.ptr else { return ("", 0) }
    var kept = min(s.len, limit)
    if kept < s.len {
        // Back up over UTF-8 continuation bytes: never half a character.
        let bytes = UnsafeRawPointer(ptr).assumingMemoryBound(to: UInt8.self)
        while kept > 0 && bytes[kept] & 0xC0 == 0x80 { kept -= 1 }
    }
    return (String(decoding: UnsafeRawBufferPointer(start: ptr, count: kept), as: UTF8.self), s.len - kept)
}

/// `create`'s arguments for one instance: C copies of the name and the bound
/// options, valid while `body` runs.
package func withCreateArgs<R>(name: String, options: [BoundOption], interval: Int64, host: OpaquePointer,
                               api: UnsafePointer<vigil_host_api>, _ body: (inout vigil_create_args) -> R) -> R {
    var arena = StringArena()
    defer { arena.free() }
    var cOptions = options.map { vigil_option(name: arena.str($0.name), value: arena.value($0.value)) }
    let instanceName = arena.str(name)
    return cOptions.withUnsafeMutableBufferPointer { buffer in
        var args = vigil_create_args()
        args.size = UInt32(MemoryLayout<vigil_create_args>.size)
        args.instance_name = instanceName
        args.host = host
        args.api = api
        args.options = UnsafePointer(buffer.baseAddress)
        args.option_count = buffer.count
        args.interval_ns = interval
        return body(&args)
    }
}

/// C copies of strings for the duration of one call into a plugin.
package struct StringArena {
    private var blocks: [UnsafeMutableRawPointer] = []

    package init() {}

    package mutating func str(_ s: String) -> vigil_str {
        let bytes = Array(s.utf8)
        let block = UnsafeMutableRawPointer.allocate(byteCount: bytes.count + 1, alignment: 1)
        block.copyMemory(from: bytes, byteCount: bytes.count)
        block.storeBytes(of: 0, toByteOffset: bytes.count, as: UInt8.self)
        blocks.append(block)
        return vigil_str(ptr: block.assumingMemoryBound(to: CChar.self), len: bytes.count)
    }

    package mutating func value(_ v: OptionValue) -> vigil_value {
        var out = vigil_value()
        switch v {
        case .none: out.type = UInt32(VIGIL_TYPE_NONE.rawValue)
        case .bool(let b): out.type = UInt32(VIGIL_TYPE_BOOL.rawValue); out.as.boolean = b ? 1 : 0
        case .int(let i): out.type = UInt32(VIGIL_TYPE_INT.rawValue); out.as.i64 = i
        case .double(let d): out.type = UInt32(VIGIL_TYPE_DOUBLE.rawValue); out.as.f64 = d
        case .string(let s): out.type = UInt32(VIGIL_TYPE_STRING.rawValue); out.as.str = str(s)
        case .duration(let ns): out.type = UInt32(VIGIL_TYPE_DURATION.rawValue); out.as.i64 = ns
        case .size(let b): out.type = UInt32(VIGIL_TYPE_SIZE.rawValue); out.as.i64 = b
        case .json(let j): out.type = UInt32(VIGIL_TYPE_JSON.rawValue); out.as.str = str(j)
        }
        return out
    }

    package func free() {
        for block in blocks { block.deallocate() }
    }
}

/// A status as people read it in logs and reports ("temporary failure").
package func statusName(_ status: vigil_status) -> String {
    switch status {
    case VIGIL_OK: "ok"
    case VIGIL_E_TEMPORARY: "temporary failure"
    case VIGIL_E_FATAL: "fatal"
    case VIGIL_E_INVALID_CONFIG: "invalid configuration"
    case VIGIL_E_UNAVAILABLE: "unavailable"
    case VIGIL_E_NOMEM: "out of memory"
    case VIGIL_E_UNSUPPORTED: "unsupported"
    case VIGIL_E_STOPPED: "stopped"
    case VIGIL_E_INVALID_ARGUMENT: "invalid argument"
    default: "status \(status.rawValue)"
    }
}

/// A status as the header spells it ("VIGIL_E_TEMPORARY"), for plugin authors.
package func statusSymbol(_ status: vigil_status) -> String {
    switch status {
    case VIGIL_OK: "VIGIL_OK"
    case VIGIL_E_TEMPORARY: "VIGIL_E_TEMPORARY"
    case VIGIL_E_FATAL: "VIGIL_E_FATAL"
    case VIGIL_E_INVALID_CONFIG: "VIGIL_E_INVALID_CONFIG"
    case VIGIL_E_UNAVAILABLE: "VIGIL_E_UNAVAILABLE"
    case VIGIL_E_NOMEM: "VIGIL_E_NOMEM"
    case VIGIL_E_UNSUPPORTED: "VIGIL_E_UNSUPPORTED"
    case VIGIL_E_STOPPED: "VIGIL_E_STOPPED"
    case VIGIL_E_INVALID_ARGUMENT: "VIGIL_E_INVALID_ARGUMENT"
    default: "status \(status.rawValue)"
    }
}
