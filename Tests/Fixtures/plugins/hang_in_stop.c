/* hang_in_stop.c — test fixture: stop never returns, for `vigil plugins
 * check`, which must stop waiting at its deadline and name the call. */
#define _POSIX_C_SOURCE 200809L
#include <unistd.h>

#include "fixture.h"

static vigil_status hanging_stop(void *self, vigil_error *err) {
    (void)self;
    (void)err;
    for (;;)
        pause();
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("hang_in_stop"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: stop hangs."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, hanging_stop, fx_destroy,
};

FX_ENTRY(descriptor)
