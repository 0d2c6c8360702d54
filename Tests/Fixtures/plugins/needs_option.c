/* needs_option.c — test fixture: option `target` is required and has no
 * default; create refuses to run without it. For `vigil plugins check`,
 * which must say so (and skip the instance checks) unless given a value. */
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_STRING, VIGIL_STR("target"), VIGIL_STR(""),
      VIGIL_STR("What to watch."), VIGIL_OPTION_REQUIRED, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("level"), VIGIL_STR("3"),
      VIGIL_STR("How closely."), 0, 0, { NULL, 0 } },
};

static vigil_status needy_create(const vigil_create_args *args, void **out, vigil_error *err) {
    if (args->option_count < 1 || args->options[0].value.type != VIGIL_TYPE_STRING)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.target: required");
    return fx_create(args, out, err);
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("needs_option"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: a required option."),
    options, 2, fx_sample_events, 1,
    1000000000,
    needy_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
