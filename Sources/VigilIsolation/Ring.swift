import CVigilSys
import Foundation
import Glibc
import Synchronization
import VigilABI
import VigilCore

/// The isolation channel's data path: a byte ring in a memfd mapped by the
/// host and by one runner. The runner (the one producer, its plugin's threads
/// taking turns under a lock) appends records; the host (the one consumer)
/// copies each out and hands it on. Positions only grow; a record never
/// straddles the end of the ring (a pad record fills the gap).
///
/// Wake-ups cost nothing while both sides are busy: the consumer sleeps on
/// an eventfd only after saying so in the header and seeing the ring empty;
/// the producer writes that eventfd only when it sees the consumer asleep
/// (the same for a producer waiting for room). An idle channel makes no
/// system call at all. While records come fast (`BatchLinger`) the consumer
/// that finds the ring empty lingers instead of sleeping: the producer wakes
/// it only once `lingerBytes` are waiting, and it wakes by itself after
/// `BatchLinger.nanoseconds`, so the two do not take turns per record.
///
/// A call's own records (those the thread of a `start` or `poll` writes
/// during the call) go into the call area beside the ring, not behind what
/// the plugin's other threads have filled the ring with: the host takes them
/// with the call's reply, which so never waits for that backlog (issue 26),
/// and, being shared memory, they outlive a runner that dies in the call.
/// What does not fit in the area goes into the ring after them.
///
/// The ring is memory the plugin's process can write: the host reads the
/// header and every record as hostile (positions out of order, lengths past
/// the data, unknown types), copies a record out before reading it, and
/// treats anything inconsistent as a broken channel.
package final class SharedRing: @unchecked Sendable {  // shared memory read and written through atomics and by the header's ownership rules
    /// Header layout: each field the other side writes on a cache line of its own.
    package enum Layout {
        static let magic: UInt32 = 0x5649_474C  // "VIGL"
        static let version: UInt32 = 2
        static let headerBytes = 256
        /// The call's records: its number (u32, from 1) and their length (u32).
        static let callSequenceOffset = 224
        static let callLengthOffset = 228
        /// The call area, between the header and the ring's data.
        static let callAreaBytes = 64 << 10
        static let magicOffset = 0
        static let versionOffset = 4
        static let capacityOffset = 8
        static let headOffset = 64
        static let tailOffset = 128
        static let consumerSleepingOffset = 192
        static let producerSleepingOffset = 196
        /// Record header: payload length (u32), type (u32).
        static let recordHeader = 8
    }

    /// Ring data bytes by default: room for ~50 k small events in flight.
    static let defaultCapacity = 4 << 20

    /// The consumer's state in the header's `consumerSleeping`.
    package enum ConsumerState: UInt32 {
        case awake = 0
        /// Asleep on the data eventfd: any record wakes it.
        case asleep = 1
        /// Lingering for a batch: a producer wakes it once this many bytes wait.
        case lingering = 2
    }
    static let lingerBytes = 16 << 10

    let fd: Int32
    let capacity: Int
    /// The largest payload of one record: a quarter of the ring, so a full
    /// record always fits behind a pad.
    let maxPayload: Int
    private let base: UnsafeMutableRawPointer
    private let mappedBytes: Int
    /// Unmapped and closed (`release`).
    private var released = false

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    private init(fd: Int32, base: UnsafeMutableRawPointer, capacity: Int, mappedBytes: Int) {
        self.fd = fd
        self.base = base
        self.capacity = capacity
        self.mappedBytes = mappedBytes
        self.maxPayload = capacity / 4 - Layout.recordHeader
    }

    deinit { release() }

    /// Unmaps the ring and closes its memfd, once no one reads or writes it
    /// any more (the host, when its runner has ended: a process object may
    /// outlive its runner, and must not hold the ring's memory and
    /// descriptor meanwhile). By the ring's one owner; idempotent.
    func release() {
        guard !released else { return }
        released = true
        munmap(base, mappedBytes)
        close(fd)
    }

    /// A new ring (the host's side): a memfd of the header and `capacity`
    /// bytes (a power of two), mapped shared.
    static func create(capacity: Int = defaultCapacity) throws -> SharedRing {
        precondition(capacity >= 4096 && capacity & (capacity - 1) == 0)
        let fd = vigil_memfd_create("vigil-ring")
        guard fd >= 0 else { throw Failure(description: "memfd_create: \(String(cString: strerror(errno)))") }
        let size = Layout.headerBytes + Layout.callAreaBytes + capacity
        guard ftruncate(fd, off_t(size)) == 0 else {
            let code = errno
            close(fd)
            var limit = rlimit()
            if code == EFBIG, getrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &limit) == 0 {
                // A memfd is a file: the host's file size limit caps it.
                throw Failure(description: "the runner's ring of \(Units.formatSize(Int64(capacity))) cannot be made under the host's file size limit (ulimit -f) of \(Units.formatSize(Int64(clamping: limit.rlim_cur))): raise the limit, or run this monitor with isolation: none")
            }
            throw Failure(description: "ftruncate ring to \(size) bytes: \(String(cString: strerror(code)))")
        }
        let ring = try map(fd: fd, size: size, capacity: capacity)
        ring.base.storeBytes(of: Layout.magic, toByteOffset: Layout.magicOffset, as: UInt32.self)
        ring.base.storeBytes(of: Layout.version, toByteOffset: Layout.versionOffset, as: UInt32.self)
        ring.base.storeBytes(of: UInt64(capacity), toByteOffset: Layout.capacityOffset, as: UInt64.self)
        return ring
    }

    /// The ring the host made (the runner's side), from its inherited descriptor.
    static func attach(fd: Int32) throws -> SharedRing {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw Failure(description: "fstat ring: \(String(cString: strerror(errno)))") }
        let size = Int(st.st_size)
        guard size > Layout.headerBytes + Layout.callAreaBytes else { throw Failure(description: "the ring is \(size) bytes") }
        let capacity = size - Layout.headerBytes - Layout.callAreaBytes
        guard capacity >= 4096, capacity & (capacity - 1) == 0 else {
            throw Failure(description: "the ring's capacity \(capacity) is not a power of two")
        }
        let ring = try map(fd: fd, size: size, capacity: capacity)
        guard ring.base.load(fromByteOffset: Layout.magicOffset, as: UInt32.self) == Layout.magic,
              ring.base.load(fromByteOffset: Layout.versionOffset, as: UInt32.self) == Layout.version,
              ring.base.load(fromByteOffset: Layout.capacityOffset, as: UInt64.self) == UInt64(capacity) else {
            throw Failure(description: "the ring's header is not this version's")
        }
        return ring
    }

    private static func map(fd: Int32, size: Int, capacity: Int) throws -> SharedRing {
        guard let p = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), p != MAP_FAILED else {
            let why = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "mmap ring: \(why)")
        }
        return SharedRing(fd: fd, base: p, capacity: capacity, mappedBytes: size)
    }

    // MARK: - header fields

    var head: UnsafeMutablePointer<UInt64> { (base + Layout.headOffset).assumingMemoryBound(to: UInt64.self) }
    var tail: UnsafeMutablePointer<UInt64> { (base + Layout.tailOffset).assumingMemoryBound(to: UInt64.self) }
    var consumerSleeping: UnsafeMutablePointer<UInt32> {
        (base + Layout.consumerSleepingOffset).assumingMemoryBound(to: UInt32.self)
    }
    var producerSleeping: UnsafeMutablePointer<UInt32> {
        (base + Layout.producerSleepingOffset).assumingMemoryBound(to: UInt32.self)
    }
    var callSequence: UnsafeMutablePointer<UInt32> {
        (base + Layout.callSequenceOffset).assumingMemoryBound(to: UInt32.self)
    }
    var callLength: UnsafeMutablePointer<UInt32> {
        (base + Layout.callLengthOffset).assumingMemoryBound(to: UInt32.self)
    }
    var callArea: UnsafeMutableRawPointer { base + Layout.headerBytes }

    /// Data byte `position` (mod capacity).
    @inline(__always)
    func data(at position: UInt64) -> UnsafeMutableRawPointer {
        base + Layout.headerBytes + Layout.callAreaBytes + Int(position & UInt64(capacity - 1))
    }

    @inline(__always)
    static func recordBytes(payload: Int) -> Int { (Layout.recordHeader + payload + 7) & ~7 }

    /// Adds one to an eventfd (non-blocking: a full counter already wakes).
    static func signal(_ eventFD: Int32) {
        var one: UInt64 = 1
        _ = Glibc.write(eventFD, &one, 8)
    }

    /// Empties an eventfd's counter.
    static func drain(_ eventFD: Int32) {
        var value: UInt64 = 0
        _ = Glibc.read(eventFD, &value, 8)
    }
}

/// Record types.
package enum RingRecord: UInt32 {
    case pad = 0
    /// An event the runner's decoder accepted (`RunnerWire.EventRecord`).
    case event = 1
    /// level (u32), bytes cut (u32), message.
    case log = 2
    /// available (u8), reason.
    case availability = 3
    /// The plugin called `finished`.
    case finished = 4
    /// An emit the runner refused: reason (u32, `EmitRefusal`), message.
    case refused = 5
}

/// The runner's end: appends records, waiting for room when the host is
/// behind (the plugin's emit waits, as it does in-process behind a full
/// blocking sink). Any thread; one record at a time.
///
/// One writer at a time waits for room, without the lock: the header has
/// one flag for a sleeping producer, and one wake-up of `spaceEvent`, which
/// the sleeper drains (a second sleeper could miss it). Writers to the ring
/// that come meanwhile wait behind it (`queue`), as they waited for the lock
/// when the wait was made under it; so nobody takes the room it waited for
/// before it takes the lock again, and the records keep their order.
package final class RingWriter: Sendable {
    private let ring: SharedRing
    /// The host sleeps on this one; the runner sleeps on `spaceEvent`.
    private let dataEvent: Int32
    private let spaceEvent: Int32
    private let positions = Mutex(Positions())
    /// Writers behind the one waiting for room (`Positions.queued`).
    private let queue = Wakeup()

    private struct Positions {
        /// Our copy of the head (we are its only writer).
        var head: UInt64 = 0
        /// The thread of the call in progress (`beginCall`), the call's number,
        /// the bytes of its records in the call area, and, when they did not all
        /// fit there, where the last one it put in the ring ends (0: none).
        var caller: pthread_t?
        var callSequence: UInt32 = 0
        var callUsed = 0
        var callerEnd: UInt64 = 0
        /// A writer waits for room (`waitForRoom`), and how many wait for it to have written.
        var waitingForRoom = false
        var queued = 0
    }

    /// What one try of `write` came to.
    private enum Step {
        /// Written; wake this many queued writers.
        case written(wake: Int)
        /// Another writer waits for room: wait for it (`queue`), then try again.
        case queued
        /// Not `bytes` free past `head`: wait for room, then try again.
        case noRoom(head: UInt64, bytes: Int)
    }

    init(ring: SharedRing, dataEvent: Int32, spaceEvent: Int32) {
        self.ring = ring
        self.dataEvent = dataEvent
        self.spaceEvent = spaceEvent
    }

    var maxPayload: Int { ring.maxPayload }

    /// What a call's reply says of the records its thread wrote.
    package struct CallRecords {
        /// The call's number, and the bytes of its records in the call area.
        var sequence: UInt32
        var length: UInt32
        /// Where the last of them that went in the ring ends (0: none did).
        var ringEnd: UInt64
    }

    /// A call runs on this thread from now: what it writes until `endCall`
    /// goes into the call area (see `SharedRing`). Records of the plugin's
    /// other threads are concurrent with the call and keep the ring.
    func beginCall() {
        positions.withLock { p in
            p.caller = pthread_self()
            p.callSequence = p.callSequence == .max ? 1 : p.callSequence + 1
            p.callUsed = 0
            p.callerEnd = 0
            vigil_store_release_u32(ring.callLength, 0)
            vigil_store_release_u32(ring.callSequence, p.callSequence)
        }
    }

    func endCall() -> CallRecords {
        positions.withLock { p in
            p.caller = nil
            return CallRecords(sequence: p.callSequence, length: UInt32(p.callUsed), ringEnd: p.callerEnd)
        }
    }

    /// Where every record written so far ends.
    var position: UInt64 { positions.withLock { $0.head } }

    /// Appends a record of `length` payload bytes that `fill` writes. False
    /// when the payload is larger than a record may be.
    @discardableResult
    func write(_ type: RingRecord, length: Int, _ fill: (UnsafeMutableRawPointer) -> Void) -> Bool {
        guard length >= 0, length <= ring.maxPayload else { return false }
        var waitedForRoom = false
        while true {
            switch positions.withLock({ p in tryWrite(type, length: length, fill, &p, waitedForRoom: waitedForRoom) }) {
            case .written(let waiters):
                queue.wake(waiters)
                return true
            case .queued:
                queue.wait()
            case .noRoom(let head, let bytes):
                waitedForRoom = true
                waitForRoom(bytes, after: head)
            }
        }
    }

    /// `write`, with the lock held: into the call area, or into the ring if
    /// it has room and no other writer waits for room first.
    private func tryWrite(_ type: RingRecord, length: Int, _ fill: (UnsafeMutableRawPointer) -> Void,
                          _ p: inout Positions, waitedForRoom: Bool) -> Step {
        if let caller = p.caller, pthread_equal(caller, pthread_self()) != 0, p.callerEnd == 0,
           p.callUsed + SharedRing.Layout.recordHeader + length <= SharedRing.Layout.callAreaBytes {
            let area = ring.callArea + p.callUsed
            area.storeBytes(of: UInt32(length).littleEndian, as: UInt32.self)
            area.storeBytes(of: type.rawValue.littleEndian, toByteOffset: 4, as: UInt32.self)
            fill(area + SharedRing.Layout.recordHeader)
            p.callUsed += SharedRing.Layout.recordHeader + length
            vigil_store_release_u32(ring.callLength, UInt32(p.callUsed))
            return .written(wake: 0)
        }
        if p.waitingForRoom && !waitedForRoom {
            p.queued += 1
            return .queued
        }
        let need = SharedRing.recordBytes(payload: length)
        let toEnd = ring.capacity - Int(p.head & UInt64(ring.capacity - 1))
        let pad = need > toEnd ? toEnd : 0
        guard hasRoom(pad + need, after: p.head) else {
            p.waitingForRoom = true
            return .noRoom(head: p.head, bytes: pad + need)
        }
        if pad > 0 {
            let record = ring.data(at: p.head)
            record.storeBytes(of: UInt32(pad - SharedRing.Layout.recordHeader).littleEndian, as: UInt32.self)
            record.storeBytes(of: RingRecord.pad.rawValue.littleEndian, toByteOffset: 4, as: UInt32.self)
            p.head &+= UInt64(pad)
        }
        let record = ring.data(at: p.head)
        record.storeBytes(of: UInt32(length).littleEndian, as: UInt32.self)
        record.storeBytes(of: type.rawValue.littleEndian, toByteOffset: 4, as: UInt32.self)
        fill(record + SharedRing.Layout.recordHeader)
        p.head &+= UInt64(need)
        if let caller = p.caller, pthread_equal(caller, pthread_self()) != 0 { p.callerEnd = p.head }
        vigil_store_release_u64(ring.head, p.head)
        vigil_fence()
        let consumer = vigil_load_acquire_u32(ring.consumerSleeping)
        if consumer != SharedRing.ConsumerState.awake.rawValue,
           consumer == SharedRing.ConsumerState.asleep.rawValue
            || p.head &- vigil_load_acquire_u64(ring.tail) >= UInt64(SharedRing.lingerBytes),
           vigil_exchange_u32(ring.consumerSleeping, 0) != 0 {
            SharedRing.signal(dataEvent)
        }
        guard waitedForRoom else { return .written(wake: 0) }
        p.waitingForRoom = false
        defer { p.queued = 0 }
        return .written(wake: p.queued)
    }

    private func hasRoom(_ bytes: Int, after head: UInt64) -> Bool {
        ring.capacity - Int(truncatingIfNeeded: head &- vigil_load_acquire_u64(ring.tail)) >= bytes
    }

    /// Waits until `bytes` are free past `head`. The host being gone ends
    /// this process (PR_SET_PDEATHSIG), so the wait needs no deadline of its own.
    private func waitForRoom(_ bytes: Int, after head: UInt64) {
        while true {
            if hasRoom(bytes, after: head) { return }
            _ = vigil_exchange_u32(ring.producerSleeping, 1)
            vigil_fence()
            if hasRoom(bytes, after: head) {
                vigil_store_release_u32(ring.producerSleeping, 0)
                return
            }
            var pfd = pollfd(fd: spaceEvent, events: Int16(POLLIN), revents: 0)
            _ = poll(&pfd, 1, 1000)
            SharedRing.drain(spaceEvent)
        }
    }
}

/// The host's end: takes records in order, each copied out of shared memory
/// before it is read. One thread.
///
/// The write position is read again only when the records known are taken,
/// and the read position is published in steps (an eighth of the ring, and
/// whenever the ring is found empty), so that the two sides do not pass a
/// cache line back and forth per record.
package final class RingReader: @unchecked Sendable {  // one reader: the channel thread that owns it
    private let ring: SharedRing
    private let dataEvent: Int32
    private let spaceEvent: Int32
    private var tail: UInt64 = 0
    /// The write position last read: records up to it are known published.
    private var head: UInt64 = 0
    /// The read position the producer has been told.
    private var publishedTail: UInt64 = 0
    private let publishStep: UInt64
    /// Private copy of the current record's payload.
    private let scratch: UnsafeMutableRawPointer
    /// Whether records come fast enough to linger for a batch.
    private var linger = BatchLinger()
    /// Records taken since the last sleep.
    private var taken = 0

    init(ring: SharedRing, dataEvent: Int32, spaceEvent: Int32) {
        self.ring = ring
        self.dataEvent = dataEvent
        self.spaceEvent = spaceEvent
        self.publishStep = UInt64(ring.capacity / 8)
        self.scratch = .allocate(byteCount: max(ring.maxPayload, 8), alignment: 16)
    }

    deinit { scratch.deallocate() }

    package enum Next {
        /// The payload is a private copy, valid until the next call.
        case record(RingRecord, UnsafeRawBufferPointer)
        case empty
        /// The ring's header or a record is inconsistent: the runner broke the channel.
        case corrupt(String)
    }

    /// The current call's number and the bytes of its records in the call
    /// area, as the producer last published them.
    func callRecords() -> (sequence: UInt32, length: UInt32) {
        (vigil_load_acquire_u32(ring.callSequence), vigil_load_acquire_u32(ring.callLength))
    }

    /// A private copy of the call area's first `length` bytes (at most the area).
    func copyCallArea(_ length: Int) -> [UInt8] {
        let n = min(max(0, length), SharedRing.Layout.callAreaBytes)
        return [UInt8](UnsafeRawBufferPointer(start: ring.callArea, count: n))
    }

    /// Where the producer has written to: records before it are published.
    /// A drain bounded by it ends even while the producer keeps writing.
    func writePosition() -> UInt64 { vigil_load_acquire_u64(ring.head) }

    /// The next record, if one was published before `bound` (a
    /// `writePosition()`); `.empty` once the read position reaches it.
    func next(before bound: UInt64 = .max) -> Next {
        while true {
            if tail >= bound {
                publish()
                return .empty
            }
            if head == tail {
                head = vigil_load_acquire_u64(ring.head)
                if head == tail {
                    publish()
                    return .empty
                }
            }
            let available = head &- tail
            guard available <= UInt64(ring.capacity), available >= UInt64(SharedRing.Layout.recordHeader) else {
                return .corrupt("the ring's write position moved to \(head) from \(tail)")
            }
            let p = ring.data(at: tail)
            let length = Int(UInt32(littleEndian: p.load(as: UInt32.self)))
            let rawType = UInt32(littleEndian: p.load(fromByteOffset: 4, as: UInt32.self))
            let toEnd = ring.capacity - Int(tail & UInt64(ring.capacity - 1))
            let bytes = SharedRing.recordBytes(payload: length)
            guard length <= ring.maxPayload || (rawType == RingRecord.pad.rawValue && bytes == toEnd),
                  bytes <= toEnd, UInt64(bytes) <= available else {
                return .corrupt("a record of \(length) bytes runs past the data written (\(available) bytes)")
            }
            guard let type = RingRecord(rawValue: rawType) else {
                return .corrupt("a record has the unknown type \(rawType)")
            }
            if type == .pad {
                advance(by: bytes)
                continue
            }
            scratch.copyMemory(from: p + SharedRing.Layout.recordHeader, byteCount: length)
            advance(by: bytes)
            taken &+= 1
            return .record(type, UnsafeRawBufferPointer(start: scratch, count: length))
        }
    }

    @inline(__always)
    private func advance(by bytes: Int) {
        tail &+= UInt64(bytes)
        if tail &- publishedTail >= publishStep { publish() }
    }

    /// Tells the producer the read position; wakes it if it waits for room.
    private func publish() {
        guard publishedTail != tail else { return }
        publishedTail = tail
        vigil_store_release_u64(ring.tail, tail)
        vigil_fence()
        if vigil_load_acquire_u32(ring.producerSleeping) != 0 && vigil_exchange_u32(ring.producerSleeping, 0) != 0 {
            SharedRing.signal(spaceEvent)
        }
    }

    /// Says the consumer is about to sleep on the data eventfd (after `next`
    /// found the ring empty): the longest it may sleep (ns, -1 for no
    /// limit), or nil (and not sleeping) when a record arrived meanwhile.
    /// While records come fast it lingers for a batch.
    func prepareToSleep() -> Int64? {
        let now = monotonicNanoseconds()
        linger.took(taken, now: now)
        taken = 0
        let state: SharedRing.ConsumerState = linger.fast ? .lingering : .asleep
        _ = vigil_exchange_u32(ring.consumerSleeping, state.rawValue)
        vigil_fence()
        if vigil_load_acquire_u64(ring.head) != tail {
            vigil_store_release_u32(ring.consumerSleeping, 0)
            return nil
        }
        return state == .lingering ? BatchLinger.nanoseconds : -1
    }

    /// After a sleep: the flag is ours again, and the eventfd emptied if it
    /// was written (`signaled`).
    func wokeUp(signaled: Bool) {
        vigil_store_release_u32(ring.consumerSleeping, 0)
        if signaled { SharedRing.drain(dataEvent) }
    }
}
