import Dispatch
import Foundation
import Synchronization
import VigilABI
import VigilChildProcess

extension Spawn {
    /// Starts the child from the spawner thread, a thread that lives as
    /// long as the process: for a child that asks to die with its parent
    /// (a plugin runner's `PR_SET_PDEATHSIG`), since the kernel takes the
    /// *thread* that created a child for its parent, and the host's threads
    /// come and go (dispatch's idle workers, a disk buffer's delivery
    /// thread, a sink's thread at a reload): a runner spawned from one of
    /// them would be killed when that thread ends.
    func startFromSpawnerThread() throws(SpawnError) -> pid_t {
        try SpawnerThread.shared.run(self)
    }
}

/// The one long-lived thread `startFromSpawnerThread` spawns from; callers
/// wait for their turn and their result.
private final class SpawnerThread: Sendable {
    static let shared = SpawnerThread()

    private let jobs = Mutex<[Job]>([])
    private let ready = DispatchSemaphore(value: 0)

    /// A spawn waiting for the thread, and its result once it ran.
    private final class Job: Sendable {
        let spawn: Spawn
        let result = Mutex<Result<pid_t, SpawnError>?>(nil)
        let done = DispatchSemaphore(value: 0)

        init(_ spawn: Spawn) { self.spawn = spawn }

        func run() {
            do throws(SpawnError) {
                let pid = try spawn.start()
                result.withLock { $0 = .success(pid) }
            } catch {
                result.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
    }

    private init() {
        startHostThread(named: "vigil-spawner", stackSize: 256 << 10) { [self] in
            while true {
                ready.wait()
                let job = jobs.withLock { $0.isEmpty ? nil : $0.removeFirst() }
                job?.run()
            }
        }
    }

    func run(_ spawn: Spawn) throws(SpawnError) -> pid_t {
        let job = Job(spawn)
        jobs.withLock { $0.append(job) }
        ready.signal()
        job.done.wait()
        return try job.result.withLock { $0 ?? .failure(SpawnError(program: spawn.program, step: .spawn, code: EAGAIN)) }.get()
    }
}
