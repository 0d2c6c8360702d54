/* poll_errors.c — ABI test fixture: poll fails with VIGIL_E_TEMPORARY on odd calls (1st, 3rd...) and emits on even ones. */
#define FX_INSTANCE_FIELDS long polls;
#include "fixture.h"

static vigil_status failing_poll(void *self, vigil_error *err) {
    instance *in = self;
    in->polls++;
    if (in->polls % 2 == 1)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "sensor read failed (EIO)");
    if (fx_emit_sample(in, (double)in->polls) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("poll_errors"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, failing_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
