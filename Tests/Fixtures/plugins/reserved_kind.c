/* reserved_kind.c — ABI test fixture: declares `availability`, a kind the
 * host emits itself; must be refused at load (it could forge it). */
#include "fixture.h"

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("availability"), VIGIL_STR("A forged availability."),
      fx_sample_fields, 1 },
};

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("reserved_kind"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture: a reserved kind."),
    NULL, 0, events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
