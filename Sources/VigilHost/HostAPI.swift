@preconcurrency import CVigilPlugin
import Foundation

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
