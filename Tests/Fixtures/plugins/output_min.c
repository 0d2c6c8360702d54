/* output_min.c — ABI test fixture: the least output plugin (ABI 1.5): it
 * takes batches and answers OK for each, counting events. Its `threshold`
 * option makes it answer REJECT for events whose seq is a multiple of it. */
#include <stdlib.h>
#include "vigil_plugin.h"

typedef struct { int64_t threshold; uint64_t events; } counter;

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("threshold"),
      .default_text = VIGIL_STR("0"), .doc = VIGIL_STR("Reject events whose seq is a multiple of this (0: none).") },
};

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    counter *c = calloc(1, sizeof *c);
    if (c == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < args->option_count; i++)
        if (args->options[i].value.type == VIGIL_TYPE_INT) c->threshold = args->options[i].value.as.i64;
    *instance = c;
    return VIGIL_OK;
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    counter *c = instance;
    const char *at = (const char *)batch->events;
    int rejected = 0;
    for (size_t i = 0; i < batch->count; i++, at += batch->event_size) {
        const vigil_output_event *e = (const vigil_output_event *)at;
        if (c->threshold > 0 && e->seq % (uint64_t)c->threshold == 0) {
            result->per_event[i] = VIGIL_WRITE_REJECT;
            rejected = 1;
        } else {
            c->events++;
        }
    }
    result->per_event_used = (uint32_t)rejected;
    if (rejected) vigil_error_set(err, VIGIL_E_INVALID_ARGUMENT, "seq is a multiple of %lld", (long long)c->threshold);
    return VIGIL_OK;
}

static void destroy(void *instance) { free(instance); }

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_min"), .version = VIGIL_STR("1.0.0"), .description = VIGIL_STR("ABI test fixture: an output."),
    .options = options, .option_count = 1,
    .create = create, .destroy = destroy, .write = write_batch,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
