/* crash_in_constructor.c — hostile fixture: a library constructor that
 * dereferences NULL, so that merely loading the file (dlopen runs
 * constructors) kills the process with SIGSEGV. The host must refuse it in a
 * child process and go on. */
#include <signal.h>

#include "fixture.h"

__attribute__((constructor)) static void crash_on_load(void) {
    /* raise rather than a NULL store, which the compiler may treat as unreachable. */
    raise(SIGSEGV);
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("crash_in_constructor"), VIGIL_STR("1.0.0"), VIGIL_STR("Crashes in its constructor."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
