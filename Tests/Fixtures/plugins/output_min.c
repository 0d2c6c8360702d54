/* output_min.c — ABI test fixture: a small output plugin (ABI 1.5). It
 * appends each delivered event's seq to `path` (one line each, if given),
 * answers RETRY to its first `retry_first` write calls (asking for
 * `retry_after` ms), and REJECTs events whose seq is a multiple of
 * `threshold` (0: none), giving the reason in the call's error. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vigil_plugin.h"

typedef struct {
    int64_t threshold, retry_first, retry_after_ms, writes;
    FILE *out;
} output;

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("threshold"),
      .default_text = VIGIL_STR("0"), .doc = VIGIL_STR("Reject events whose seq is a multiple of this (0: none).") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("path"),
      .doc = VIGIL_STR("Append each delivered event's seq to this file.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("retry_first"),
      .default_text = VIGIL_STR("0"), .doc = VIGIL_STR("Answer RETRY to this many write calls first.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("retry_after"),
      .default_text = VIGIL_STR("0"), .doc = VIGIL_STR("Milliseconds a RETRY asks the host to wait.") },
};

static int is(const vigil_option *o, const char *name) {
    return o->name.len == strlen(name) && memcmp(o->name.ptr, name, o->name.len) == 0;
}

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    output *o = calloc(1, sizeof *o);
    if (o == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < args->option_count; i++) {
        const vigil_option *opt = &args->options[i];
        if (is(opt, "threshold")) o->threshold = opt->value.as.i64;
        if (is(opt, "retry_first")) o->retry_first = opt->value.as.i64;
        if (is(opt, "retry_after")) o->retry_after_ms = opt->value.as.i64;
        if (is(opt, "path") && opt->value.type == VIGIL_TYPE_STRING && opt->value.as.str.len > 0) {
            char path[4096];
            size_t n = opt->value.as.str.len < sizeof path - 1 ? opt->value.as.str.len : sizeof path - 1;
            memcpy(path, opt->value.as.str.ptr, n);
            path[n] = 0;
            o->out = fopen(path, "a");
            if (o->out == NULL) {
                free(o);
                return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.path: cannot open %s", path);
            }
        }
    }
    *instance = o;
    return VIGIL_OK;
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    output *o = instance;
    if (o->writes++ < o->retry_first) {
        result->verdict = VIGIL_WRITE_RETRY;
        result->retry_after_ns = o->retry_after_ms * 1000000;
        return VIGIL_OK;
    }
    const char *at = (const char *)batch->events;
    int rejected = 0;
    for (size_t i = 0; i < batch->count; i++, at += batch->event_size) {
        const vigil_output_event *e = (const vigil_output_event *)at;
        if (o->threshold > 0 && e->seq % (uint64_t)o->threshold == 0) {
            result->per_event[i] = VIGIL_WRITE_REJECT;
            rejected = 1;
        } else if (o->out != NULL) {
            fprintf(o->out, "%llu %.*s\n", (unsigned long long)e->seq, (int)e->monitor.len, e->monitor.ptr);
        }
    }
    if (o->out != NULL) fflush(o->out);
    result->per_event_used = (uint32_t)rejected;
    if (rejected) vigil_error_set(err, VIGIL_E_INVALID_ARGUMENT, "seq is a multiple of %lld", (long long)o->threshold);
    return VIGIL_OK;
}

static void destroy(void *instance) {
    output *o = instance;
    if (o->out != NULL) fclose(o->out);
    free(o);
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_min"), .version = VIGIL_STR("1.0.0"), .description = VIGIL_STR("ABI test fixture: an output."),
    .options = options, .option_count = sizeof options / sizeof options[0],
    .create = create, .destroy = destroy, .write = write_batch,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
