/* tiny_interval.c — ABI test fixture: asks to be polled every nanosecond
 * (default_interval_ns = 1). The host holds it to 1 ms, as a manifest's
 * interval is held. */
#include "fixture.h"

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("tiny_interval"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture: a 1 ns default interval."),
    NULL, 0, fx_sample_events, 1,
    1,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
