/* output_hostile.c — ABI test fixture: an output plugin that answers what a
 * careless or hostile one might, chosen by its `mode` option:
 *   retry_forever  RETRY for every batch, asking to wait INT64_MAX ns;
 *   garbage        per-event verdicts of 200 (no such verdict), per_event_used = 7;
 *   fatal          VIGIL_E_FATAL from the third write on;
 *   overclaim      OK for the batch, and writes verdicts past its end into nothing it owns (it must not:
 *                  it only sets per_event_used without writing, leaving the host's OK preset). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "vigil_plugin.h"

typedef struct { char mode[32]; int writes; } output;

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("mode"),
      .default_text = VIGIL_STR("retry_forever"), .doc = VIGIL_STR("retry_forever, garbage, fatal or overclaim.") },
};

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    output *o = calloc(1, sizeof *o);
    if (o == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < args->option_count; i++)
        if (args->options[i].value.type == VIGIL_TYPE_STRING) {
            size_t n = args->options[i].value.as.str.len;
            if (n >= sizeof o->mode) n = sizeof o->mode - 1;
            memcpy(o->mode, args->options[i].value.as.str.ptr, n);
        }
    *instance = o;
    return VIGIL_OK;
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    output *o = instance;
    o->writes++;
    if (strcmp(o->mode, "retry_forever") == 0) {
        result->verdict = VIGIL_WRITE_RETRY;
        result->retry_after_ns = INT64_MAX;
    } else if (strcmp(o->mode, "garbage") == 0) {
        memset(result->per_event, 200, batch->count);
        result->per_event_used = 7;
        result->verdict = 99;
    } else if (strcmp(o->mode, "fatal") == 0 && o->writes >= 3) {
        return vigil_error_set(err, VIGIL_E_FATAL, "the peer is gone for good");
    } else if (strcmp(o->mode, "overclaim") == 0) {
        result->per_event_used = 1;
    }
    return VIGIL_OK;
}

static void destroy(void *instance) { free(instance); }

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_hostile"), .version = VIGIL_STR("1.0.0"), .description = VIGIL_STR("ABI test fixture: a hostile output."),
    .options = options, .option_count = 1,
    .create = create, .destroy = destroy, .write = write_batch,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
