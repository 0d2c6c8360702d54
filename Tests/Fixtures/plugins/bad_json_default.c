/* bad_json_default.c — ABI test fixture: a json option whose default does
 * not parse, and a 1 ns default interval; the first must refuse the plugin
 * at load, naming the option. */
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_JSON, VIGIL_STR("targets"), VIGIL_STR("[unclosed, {"),
      VIGIL_STR("A list that is not one."), 0, 0, { NULL, 0 } },
};

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("bad_json_default"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture: a json default that is not."),
    options, 1, fx_sample_events, 1,
    1,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
