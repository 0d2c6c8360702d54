/* abi_major2.c — ABI test fixture: answers ABI major 2 whatever the host offers; must be refused for the major. */
#include "fixture.h"

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("abi_major2"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args,
                                             vigil_entry_result *result) {
    (void)args; /* deliberately ignores what the host offers */
    if (result == NULL || result->size < offsetof(vigil_entry_result, error))
        return VIGIL_E_INVALID_ARGUMENT;
    result->abi_major = 2;
    result->abi_minor = 0;
    result->descriptor = &descriptor;
    return VIGIL_OK;
}
