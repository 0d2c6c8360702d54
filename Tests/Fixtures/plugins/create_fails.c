/* create_fails.c — ABI test fixture: create fails with VIGIL_E_INVALID_CONFIG and a message. */
#include "fixture.h"

static vigil_status failing_create(const vigil_create_args *args, void **out, vigil_error *err) {
    (void)args;
    (void)out;
    return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                           "create refused: the sensor bus is not configured");
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("create_fails"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    failing_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
