import CVigilSys
import Foundation

/// Starts a thread of the host's own, named so that `top -H`, `ps -L`,
/// `perf` and a core dump say what it is. Foundation's `Thread.name` does
/// not reach the kernel on Linux, and the kernel keeps 15 bytes of a name:
/// longer names are cut there (a monitor's or sink's name at the end is
/// what is cut).
/// `stackSize` in bytes, or Foundation's default (8 MiB, mostly never touched).
package func startHostThread(named name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
    let thread = Thread {
        nameCurrentThread(name)
        body()
    }
    thread.name = name
    if let stackSize { thread.stackSize = stackSize }
    thread.start()
}

/// Names the calling thread (the kernel keeps its first 15 bytes).
package func nameCurrentThread(_ name: String) {
    _ = vigil_name_thread(name)
}
