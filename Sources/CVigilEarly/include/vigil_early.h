/* vigil_early.h — what the `vigil` executable does before any Swift code
 * runs: for `vigil run`, SIGHUP, SIGINT and SIGTERM are recorded instead of
 * killing a host that is still loading (see EarlySignals.swift). */
#ifndef VIGIL_EARLY_H
#define VIGIL_EARLY_H

/** Whether `signal` (SIGHUP, SIGINT or SIGTERM) arrived since the start or
 *  the last call; clears it. Always 0 unless the process is `vigil run`. */
int vigil_early_signal_take(int signal);

/** Whether the recording handlers were installed (the process is `vigil run`). */
int vigil_early_signals_installed(void);

#endif
