@preconcurrency import CVigilPlugin
import Foundation
import VigilCore

/// The const table of host functions every plugin receives. Allocated once,
/// never freed. Each function recovers its `MonitorInstance` from the opaque
/// `vigil_host_ctx` pointer (an unretained reference the instance keeps alive).
enum HostAPI {
    nonisolated(unsafe) static let table: UnsafePointer<vigil_host_api> = {
        let table = UnsafeMutablePointer<vigil_host_api>.allocate(capacity: 1)
        var api = vigil_host_api()
        api.size = UInt32(MemoryLayout<vigil_host_api>.size)
        api.abi_major = UInt16(VIGIL_ABI_MAJOR)
        api.abi_minor = UInt16(VIGIL_ABI_MINOR)
        api.emit = { ctx, event in
            guard let ctx, let event else { return VIGIL_E_INVALID_ARGUMENT }
            return MonitorInstance.from(ctx).emit(event)
        }
        api.log = { ctx, level, message in
            guard let ctx else { return }
            MonitorInstance.from(ctx).pluginLog(level: Int(level.rawValue), message: string(message))
        }
        api.set_availability = { ctx, available, reason in
            guard let ctx else { return }
            MonitorInstance.from(ctx).setAvailability(available != 0, reason: string(reason))
        }
        api.now_ns = { ctx in
            guard let ctx else { return realtimeNanoseconds() }
            return MonitorInstance.from(ctx).clock()
        }
        api.finished = { ctx in
            guard let ctx else { return }
            MonitorInstance.from(ctx).markFinished()
        }
        table.initialize(to: api)
        return UnsafePointer(table)
    }()

    /// The message a plugin wrote into an error buffer: up to the first NUL or
    /// the end of the buffer (a plugin may fill it without a terminator).
    static func message(_ buffer: [CChar]) -> String {
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A plugin's string, copied; invalid UTF-8 is replaced with U+FFFD.
    @inline(__always)
    static func string(_ s: vigil_str) -> String {
        guard s.len > 0, let ptr = s.ptr else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: ptr, count: s.len), as: UTF8.self)
    }
}

/// Calls `body` with a fresh 1 KiB error buffer; returns its status and, when
/// not OK, the message the plugin wrote.
package func withPluginError(_ body: (UnsafeMutablePointer<vigil_error>) -> vigil_status) -> (vigil_status, String) {
    var message = [CChar](repeating: 0, count: 1024)
    let status = message.withUnsafeMutableBufferPointer { buffer in
        var error = vigil_error(size: UInt32(MemoryLayout<vigil_error>.size), reserved: 0,
                                message: buffer.baseAddress, capacity: buffer.count)
        return body(&error)
    }
    return (status, status == VIGIL_OK ? "" : HostAPI.message(message))
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

/// A status as people read it in logs and reports.
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
