import CVigilEarly
import Glibc
import Logging
import ServiceLifecycle

/// The first service of `vigil run`'s group. SIGHUP, SIGINT and SIGTERM are
/// recorded from before `main` (an ELF constructor in CVigilEarly, linked
/// into the `vigil` executable) until the group's own handlers take over;
/// the group registers those before it starts any service, so this service
/// sees whatever came before. If SIGINT or SIGTERM came while the host was
/// starting, it returns at once, which shuts the group down gracefully
/// (everything started is stopped and drained); otherwise it waits for the
/// shutdown like the others. An early SIGHUP needs nothing: no file is open.
/// Before returning it tells every monitor that the host is stopping: under
/// systemd the same SIGTERM reaches the runners, which die in their `create`
/// while the host is still starting, and such a death is neither restarted
/// nor a monitor that failed to start.
package struct EarlySignalService: Service {
    let runtime: VigilRuntime
    let logger: Logger

    package func run() async throws {
        _ = vigil_early_signal_take(SIGHUP)
        let term = vigil_early_signal_take(SIGTERM) != 0
        if term || vigil_early_signal_take(SIGINT) != 0 {
            logger.notice("\(term ? "SIGTERM" : "SIGINT") arrived while starting; shutting down")
            runtime.hostIsStopping()
            return
        }
        try? await gracefulShutdown()
    }
}

/// The last service of `vigil run`'s group, so the first a shutdown
/// reaches: the group ends its services in reverse order, and the
/// supervisor's turn comes only once the services after it (the control
/// API, the watch) have ended. It tells every monitor at once that the host
/// is stopping, before the runners the same SIGTERM killed (systemd signals
/// the whole unit) are seen dead and restarted.
package struct StopNoticeService: Service {
    let runtime: VigilRuntime

    package func run() async throws {
        try? await gracefulShutdown()
        runtime.hostIsStopping()
    }
}
