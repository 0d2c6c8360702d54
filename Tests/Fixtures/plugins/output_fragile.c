/* output_fragile.c — ABI test fixture: an output (ABI 1.5) written as if
 * every event had fields: it takes the first field of each event as given,
 * and an event with none makes it write through NULL (SIGSEGV). Events with
 * fields are delivered. `vigil plugins check` must
 * report the crash with the call it happened in, and the host must survive
 * it when the output runs in a runner. */
#include <stdlib.h>
#include "vigil_plugin.h"

static int marker;

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    (void)args;
    (void)err;
    *instance = &marker;
    return VIGIL_OK;
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    const char *at = (const char *)batch->events;
    volatile int *nowhere = NULL;
    size_t i;
    (void)instance;
    (void)err;
    for (i = 0; i < batch->count; i++, at += batch->event_size) {
        const vigil_output_event *e = (const vigil_output_event *)at;
        /* The bug: an event may have no fields. */
        if (e->field_count == 0) *nowhere = 1;
    }
    result->verdict = VIGIL_WRITE_OK;
    return VIGIL_OK;
}

static void destroy(void *instance) {
    (void)instance;
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_fragile"), .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("ABI test fixture: an output that crashes on an event without fields."),
    .create = create, .destroy = destroy, .write = write_batch,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
