/* bad_description.c — ABI test fixture: malformed self-description (empty name, an option of unknown type 99); must be refused. */
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), 99 /* no such vigil_type */, VIGIL_STR("level"),
      VIGIL_STR("1"), VIGIL_STR("An option of an unknown type."), 0, 0, { NULL, 0 } },
};

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR(""), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    options, 1, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
