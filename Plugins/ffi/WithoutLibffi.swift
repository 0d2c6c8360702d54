// What stands in for ForeignCall.swift when the package is built without its
// trait FFI, as scripts/build builds it where libffi's headers are missing.
#if !FFI
import VigilKit

/// No call can be made without libffi, so no `ForeignCall` is ever made
/// (its one initializer is private and unused): the plugin is built all the
/// same, describes itself as the real one does, checks its options as the
/// real one does, and then refuses every instance at create with `refusal`,
/// FATAL, before it loads any library.
final class ForeignCall {
    static let refusal = MonitorError.fatal(
        "this ffi plugin was built without libffi, whose headers were missing: "
            + "install libffi-dev (Fedora: libffi-devel) and build again (scripts/build)")

    private init() {}

    func invoke() -> (values: [Value?], elapsedMicroseconds: Double) {
        fatalError("unreachable: FFIMonitor.init throws ForeignCall.refusal before any ForeignCall could exist")
    }
}
#endif
