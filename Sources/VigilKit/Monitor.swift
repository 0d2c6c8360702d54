@preconcurrency import CVigilPlugin

/// A monitor written in Swift. The SDK turns it into a C plugin: the
/// descriptor comes from `spec`, each instance is one object of the type, and
/// the host's calls arrive as these methods, never two at once for one object.
public protocol Monitor: AnyObject {
    static var spec: PluginSpec { get }
    /// Reads the options and prepares; no threads, no events yet.
    init(options: Options, context: MonitorContext) throws(MonitorError)
    /// Opens sources. Throw `.unavailable` when the source is not on this machine.
    func start() throws(MonitorError)
    /// Closes sources and joins any threads the monitor started.
    func stop()
}

extension Monitor {
    public func start() throws(MonitorError) {}
    public func stop() {}
}

/// A monitor the host polls every interval (and once right after start, for
/// the snapshot).
public protocol PolledMonitor: Monitor {
    func poll() throws(MonitorError)
}

/// The host, as one instance sees it: emit, log, availability.
/// Safe to use from any thread between start and stop.
public final class MonitorContext: @unchecked Sendable {
    public let instanceName: String
    /// Poll interval in nanoseconds (0 for push-only monitors).
    public let interval: Int64
    private let host: OpaquePointer
    private let api: UnsafePointer<vigil_host_api>

    init(instanceName: String, interval: Int64, host: OpaquePointer, api: UnsafePointer<vigil_host_api>) {
        self.instanceName = instanceName
        self.interval = interval
        self.host = host
        self.api = api
    }

    /// Emits one event. Returns false when the host refused it (the instance is stopped).
    @discardableResult
    public func emit(_ kind: String, severity: Severity = .info, time: Int64 = 0,
                     _ fields: KeyValuePairs<String, Value>) -> Bool {
        emit(kind, severity: severity, time: time, fields: fields.map { ($0.key, $0.value) })
    }

    /// Emits one event with fields given as an array (for a variable number of fields).
    @discardableResult
    public func emit(_ kind: String, severity: Severity = .info, time: Int64 = 0, fields: [(String, Value)]) -> Bool {
        // Every string goes into one buffer; the C structs point into it for the call.
        var text: [UInt8] = Array(kind.utf8)
        var spans: [(name: Range<Int>, value: Range<Int>?)] = []
        spans.reserveCapacity(fields.count)
        for (name, value) in fields {
            let nameStart = text.count
            text.append(contentsOf: name.utf8)
            let nameRange = nameStart..<text.count
            if case .string(let s) = value {
                let start = text.count
                text.append(contentsOf: s.utf8)
                spans.append((nameRange, start..<text.count))
            } else {
                spans.append((nameRange, nil))
            }
        }
        let kindLength = kind.utf8.count
        let status: vigil_status = text.withUnsafeBufferPointer { buffer in
            let base = UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self)
            func str(_ r: Range<Int>) -> vigil_str { vigil_str(ptr: base + r.lowerBound, len: r.count) }
            var cFields = [vigil_field]()
            cFields.reserveCapacity(fields.count)
            for (i, (_, value)) in fields.enumerated() {
                var v = vigil_value()
                switch value {
                case .double(let d): v.type = UInt32(VIGIL_TYPE_DOUBLE.rawValue); v.as.f64 = d
                case .int(let n): v.type = UInt32(VIGIL_TYPE_INT.rawValue); v.as.i64 = n
                case .bool(let b): v.type = UInt32(VIGIL_TYPE_BOOL.rawValue); v.as.boolean = b ? 1 : 0
                case .string: v.type = UInt32(VIGIL_TYPE_STRING.rawValue); v.as.str = str(spans[i].value!)
                }
                cFields.append(vigil_field(name: str(spans[i].name), value: v))
            }
            return cFields.withUnsafeBufferPointer { fieldBuffer in
                var event = vigil_event()
                event.size = UInt32(MemoryLayout<vigil_event>.size)
                event.severity = severity.rawValue
                event.kind = vigil_str(ptr: base, len: kindLength)
                event.time_ns = time
                event.fields = fieldBuffer.baseAddress
                event.field_count = fieldBuffer.count
                return api.pointee.emit(host, &event)
            }
        }
        return status == VIGIL_OK
    }

    public enum LogLevel: UInt32, Sendable { case debug = 0, info, notice, warning, error, critical }

    public func log(_ level: LogLevel, _ message: String) {
        var message = message
        message.withUTF8 { bytes in
            api.pointee.log(host, vigil_log_level(rawValue: level.rawValue),
                            vigil_str(ptr: UnsafeRawPointer(bytes.baseAddress)?.assumingMemoryBound(to: CChar.self), len: bytes.count))
        }
    }

    /// Declares the source present or absent; the host emits `availability` on change.
    public func setAvailability(_ available: Bool, reason: String = "") {
        var reason = reason
        reason.withUTF8 { bytes in
            api.pointee.set_availability(host, available ? 1 : 0,
                                         vigil_str(ptr: UnsafeRawPointer(bytes.baseAddress)?.assumingMemoryBound(to: CChar.self), len: bytes.count))
        }
    }

    /// The host's wall clock, nanoseconds since the epoch.
    public func now() -> Int64 { api.pointee.now_ns(host) }
}
