#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import VigilKit

/// A shared library opened for one instance.
///
/// Opened with RTLD_NODELETE, so the `dlclose` that balances our `dlopen`
/// never unmaps it: code another user of the library (the host, another
/// instance, the library's own threads) may be running stays in place.
final class SharedLibrary {
    let name: String
    private let handle: UnsafeMutableRawPointer

    init(_ name: String) throws(MonitorError) {
        guard !name.isEmpty else {
            throw .invalidConfig("options.library: give a library file name (such as libm.so.6) or a path")
        }
        guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            let why = dlerror().map { String(cString: $0) } ?? "unknown dlopen error"
            throw .invalidConfig("options.library: cannot load \(Signature.quoted(name)): \(why)")
        }
        self.name = name
        self.handle = handle
    }

    deinit { dlclose(handle) }

    /// The address of `symbol` in the library (or a library it depends on).
    func function(_ symbol: String) throws(MonitorError) -> UnsafeMutableRawPointer {
        guard !symbol.isEmpty else { throw .invalidConfig("options.symbol: give the name of a function") }
        _ = dlerror()
        guard let address = dlsym(handle, symbol) else {
            throw .invalidConfig("options.symbol: \(Signature.quoted(symbol)) not found in \(name)")
        }
        return address
    }
}
