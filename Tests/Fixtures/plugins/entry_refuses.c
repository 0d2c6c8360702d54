/* entry_refuses.c — ABI test fixture: vigil_plugin_entry refuses with VIGIL_E_UNSUPPORTED and a message. */
#include "fixture.h"

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("entry_refuses"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args,
                                             vigil_entry_result *result) {
    (void)args;
    (void)descriptor; /* never handed out */
    if (result != NULL && result->size >= sizeof(vigil_entry_result))
        vigil_error_set(&result->error, VIGIL_E_UNSUPPORTED, "this plugin needs Vigil ABI 3");
    return VIGIL_E_UNSUPPORTED;
}
