/* output_old_abi.c — ABI test fixture: an output that answers ABI 1.4, before
 * outputs existed; must be refused, naming the minor it needs. */
#include <stdlib.h>
#include "vigil_plugin.h"

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    (void)args, (void)err;
    *instance = NULL;
    return VIGIL_OK;
}
static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    (void)instance, (void)batch, (void)result, (void)err;
    return VIGIL_OK;
}
static void destroy(void *instance) { (void)instance; }

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_old_abi"), .version = VIGIL_STR("1.0.0"), .description = VIGIL_STR("ABI test fixture."),
    .create = create, .destroy = destroy, .write = write_batch,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    vigil_status status = vigil_negotiate(args, result, &descriptor);
    result->abi_minor = 4;
    return status;
}
