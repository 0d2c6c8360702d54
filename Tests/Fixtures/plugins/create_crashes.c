/* create_crashes.c — hostile fixture: a valid plugin whose create kills the
 * process with SIGSEGV. `vigil validate` must report it at the monitor. */
#include <signal.h>

#include "fixture.h"

static vigil_status crash_create(const vigil_create_args *args, void **out, vigil_error *err) {
    (void)args;
    (void)out;
    (void)err;
    raise(SIGSEGV);
    return VIGIL_E_FATAL;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("create_crashes"), VIGIL_STR("1.0.0"), VIGIL_STR("Its create crashes."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    crash_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
