/* descriptor_too_small.c — ABI test fixture: the descriptor says its size is 8 bytes, too small to be used; must be refused. */
#include "fixture.h"

static const vigil_plugin_descriptor descriptor = {
    8, VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("descriptor_too_small"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
