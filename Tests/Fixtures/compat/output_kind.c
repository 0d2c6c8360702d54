/*
 * output_kind.c — compatibility fixture: a plugin built against the frozen
 * 1.4 header that calls itself an output (kind 2, VIGIL_PLUGIN_OUTPUT from
 * 1.5 on; 1.4 has no name for it) and answers ABI 1.4. Its descriptor ends
 * where 1.4's did, without `write`: the host must refuse it, saying that
 * outputs need ABI 1.5, and never read past the descriptor's size.
 */
#include <stdlib.h>

#include "vigil_plugin.h"

#if VIGIL_ABI_MINOR != 4
#error "build against the frozen 1.4 header"
#endif

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    (void)args, (void)err;
    *instance = NULL;
    return VIGIL_OK;
}
static vigil_status start_stop(void *instance, vigil_error *err) {
    (void)instance, (void)err;
    return VIGIL_OK;
}
static void destroy(void *instance) { (void)instance; }

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = 2, /* an output, from 1.5 on */
    .name = VIGIL_STR("early_output"),
    .version = VIGIL_STR("1.4.0"),
    .description = VIGIL_STR("Compatibility fixture: an output before outputs existed."),
    .create = create, .start = start_stop, .stop = start_stop, .destroy = destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
