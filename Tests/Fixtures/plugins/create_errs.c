/* create_errs.c — test fixture: create fails with VIGIL_E_FATAL, a failure of
 * the plugin's (its device is gone), not of the manifest's options: `run`
 * reports the monitor failed and the others go on, where an INVALID_CONFIG
 * (create_fails.c) refuses the run as `validate` calls the manifest invalid. */
#include "fixture.h"

static vigil_status erring_create(const vigil_create_args *args, void **out, vigil_error *err) {
    (void)args;
    (void)out;
    return vigil_error_set(err, VIGIL_E_FATAL, "create failed: the sensor is gone");
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("create_errs"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: create fails (FATAL)."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    erring_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
