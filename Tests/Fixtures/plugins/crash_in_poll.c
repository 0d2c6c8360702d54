/* crash_in_poll.c — test fixture: poll dereferences NULL (SIGSEGV), for
 * `vigil plugins check`, which must report the signal and the call. */
#include "fixture.h"

static vigil_status crashing_poll(void *self, vigil_error *err) {
    volatile int *nowhere = NULL;
    (void)self;
    (void)err;
    *nowhere = 1;
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("crash_in_poll"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: poll crashes."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, crashing_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
