import Synchronization
import VigilABI
import VigilCore

/// Why an event routed to a sink did not reach its destination. Each loss is
/// counted once, where it happens, under one reason.
public enum LossReason: Int, CaseIterable, Sendable {
    /// The sink's queue was full (`drop_newest`, `drop_oldest`).
    case queueFull
    /// The host was shutting down: the queue had closed, a producer waiting
    /// on a `block` sink gave up, or the sink gave up delivering at the drain
    /// deadline.
    case shutdown
    /// The sink's write failed (an I/O error, a datagram refused).
    case writeFailed
    /// Handed to the kernel, but still in a socket's send queue, not yet
    /// taken by the peer, when the connection broke or was given up.
    case kernelBuffer
    /// One event too large for the transport (a UDP datagram over 64 KiB).
    case tooLarge
    /// The peer took the request and refused these events in its answer
    /// (OTLP's `partial_success`); not retried.
    case rejected
    /// The sink's disk buffer was at `max_size` (`when_full: drop_oldest`
    /// or `drop_newest`).
    case bufferFull

    /// The name used in the exit line and `--summary` (`queue_full`…).
    public var name: String {
        switch self {
        case .queueFull: "queue_full"
        case .shutdown: "shutdown"
        case .writeFailed: "write_failed"
        case .kernelBuffer: "kernel_buffer"
        case .tooLarge: "too_large"
        case .rejected: "rejected"
        case .bufferFull: "buffer_full"
        }
    }
}

/// Events lost by one sink, per reason.
public struct LossCounts: Codable, Sendable, Equatable {
    public var queueFull: UInt64 = 0
    public var shutdown: UInt64 = 0
    public var writeFailed: UInt64 = 0
    public var kernelBuffer: UInt64 = 0
    public var tooLarge: UInt64 = 0
    public var rejected: UInt64 = 0
    public var bufferFull: UInt64 = 0

    public init() {}

    package enum CodingKeys: String, CodingKey {
        case queueFull, shutdown, writeFailed, kernelBuffer, tooLarge, rejected, bufferFull
    }

    /// `rejected` may be absent (a summary written before it existed).
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        queueFull = try c.decode(UInt64.self, forKey: .queueFull)
        shutdown = try c.decode(UInt64.self, forKey: .shutdown)
        writeFailed = try c.decode(UInt64.self, forKey: .writeFailed)
        kernelBuffer = try c.decode(UInt64.self, forKey: .kernelBuffer)
        tooLarge = try c.decode(UInt64.self, forKey: .tooLarge)
        rejected = try c.decodeIfPresent(UInt64.self, forKey: .rejected) ?? 0
        bufferFull = try c.decodeIfPresent(UInt64.self, forKey: .bufferFull) ?? 0
    }

    public subscript(reason: LossReason) -> UInt64 {
        get {
            switch reason {
            case .queueFull: queueFull
            case .shutdown: shutdown
            case .writeFailed: writeFailed
            case .kernelBuffer: kernelBuffer
            case .tooLarge: tooLarge
            case .rejected: rejected
            case .bufferFull: bufferFull
            }
        }
        set {
            switch reason {
            case .queueFull: queueFull = newValue
            case .shutdown: shutdown = newValue
            case .writeFailed: writeFailed = newValue
            case .kernelBuffer: kernelBuffer = newValue
            case .tooLarge: tooLarge = newValue
            case .rejected: rejected = newValue
            case .bufferFull: bufferFull = newValue
            }
        }
    }

    public var total: UInt64 { LossReason.allCases.reduce(0) { $0 &+ self[$1] } }

    /// `3 queue_full, 0 shutdown, …`: every reason, for the exit line.
    public var description: String {
        LossReason.allCases.map { "\(self[$0]) \($0.name)" }.joined(separator: ", ")
    }
}

/// The counters a sink's thread adds to and anyone reads: one atomic per
/// reason, touched once per batch, never per event.
package final class AtomicLossCounts: Sendable {
    private let writeFailed = Atomic<UInt64>(0)
    private let kernelBuffer = Atomic<UInt64>(0)
    private let tooLarge = Atomic<UInt64>(0)
    private let shutdown = Atomic<UInt64>(0)
    private let queueFull = Atomic<UInt64>(0)
    private let rejected = Atomic<UInt64>(0)
    private let bufferFull = Atomic<UInt64>(0)

    private func counter<R>(_ reason: LossReason, _ body: (borrowing Atomic<UInt64>) -> R) -> R {
        switch reason {
        case .queueFull: body(queueFull)
        case .shutdown: body(shutdown)
        case .writeFailed: body(writeFailed)
        case .kernelBuffer: body(kernelBuffer)
        case .tooLarge: body(tooLarge)
        case .rejected: body(rejected)
        case .bufferFull: body(bufferFull)
        }
    }

    func add(_ n: UInt64, _ reason: LossReason) {
        counter(reason) { _ = $0.add(n, ordering: .relaxed) }
    }

    package var counts: LossCounts {
        var c = LossCounts()
        for reason in LossReason.allCases { c[reason] = counter(reason) { $0.load(ordering: .relaxed) } }
        return c
    }
}

/// What happened to a sink's transport that cost nothing but is worth
/// knowing (each is logged too): counted per sink, in `--summary`
/// (`transport`) and `/metrics` (`vigil_sink_transport_events_total`).
public enum TransportEvent: Int, CaseIterable, Sendable {
    /// A connecting sink connected again after its connection ended.
    case reconnected
    /// Its peer closed (or reset) the connection while it was idle.
    case peerClosed
    /// A file sink's file was deleted or replaced under it: it writes a new one.
    case fileReopened
    /// A file sink's directory was deleted: it made it again.
    case directoryRecreated
    /// A listening sink cut off a client that fell `client_buffer` behind.
    case clientCut

    public var name: String {
        switch self {
        case .reconnected: "reconnected"
        case .peerClosed: "peer_closed"
        case .fileReopened: "file_reopened"
        case .directoryRecreated: "directory_recreated"
        case .clientCut: "client_cut"
        }
    }
}

/// `TransportEvent` counts of one sink.
/// Rare (a reconnection, a cut client): a lock is cheap enough.
package final class TransportEventCounts: Sendable {
    private let counts = Mutex<[UInt64]>(Array(repeating: 0, count: TransportEvent.allCases.count))

    func add(_ event: TransportEvent) { counts.withLock { $0[event.rawValue] &+= 1 } }

    /// The non-zero counts by name.
    package var snapshot: [String: UInt64] {
        let now = counts.withLock { $0 }
        var out: [String: UInt64] = [:]
        for event in TransportEvent.allCases where now[event.rawValue] > 0 { out[event.name] = now[event.rawValue] }
        return out
    }
}
