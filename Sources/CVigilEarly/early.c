/* early.c — installs the recording handlers of `vigil run` from an ELF
 * constructor: after the dynamic loader, before the Swift runtime and main,
 * which take milliseconds during which a signal's default action would kill
 * the host. The service group's own handlers replace these later. */
#define _GNU_SOURCE
#include <signal.h>
#include <string.h>

#include "vigil_early.h"

static volatile sig_atomic_t hangup, interrupt, terminate;
static int installed;

static void record(int signal) {
    if (signal == SIGHUP) hangup = 1;
    else if (signal == SIGINT) interrupt = 1;
    else terminate = 1;
}

__attribute__((constructor)) static void vigil_early_install(int argc, char **argv, char **envp) {
    static const int trapped[] = { SIGHUP, SIGINT, SIGTERM };
    struct sigaction action;
    unsigned i;
    (void)envp;
    if (argc < 2 || argv == NULL || argv[1] == NULL || strcmp(argv[1], "run") != 0) return;
    memset(&action, 0, sizeof action);
    action.sa_handler = record;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (i = 0; i < sizeof trapped / sizeof trapped[0]; i++) sigaction(trapped[i], &action, NULL);
    installed = 1;
}

int vigil_early_signal_take(int signal) {
    int seen = 0;
    switch (signal) {
    case SIGHUP: seen = hangup; hangup = 0; break;
    case SIGINT: seen = interrupt; interrupt = 0; break;
    case SIGTERM: seen = terminate; terminate = 0; break;
    default: break;
    }
    return seen;
}

int vigil_early_signals_installed(void) { return installed; }
