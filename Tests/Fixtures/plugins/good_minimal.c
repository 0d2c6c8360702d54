/* good_minimal.c — ABI test fixture: a minimal valid monitor; poll emits `sample` with value 1.0. */
#include "fixture.h"

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("good_minimal"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
