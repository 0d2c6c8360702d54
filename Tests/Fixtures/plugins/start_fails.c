/* start_fails.c — ABI test fixture: create succeeds, start fails with VIGIL_E_FATAL and a message. */
#include "fixture.h"

static vigil_status failing_start(void *self, vigil_error *err) {
    (void)self;
    return vigil_error_set(err, VIGIL_E_FATAL, "start refused: device busy");
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("start_fails"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, failing_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
