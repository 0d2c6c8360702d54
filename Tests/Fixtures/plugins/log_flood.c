/* log_flood.c — log rate-limit fixture: its first poll calls the host's log
 * `lines` times (default 100000) as fast as the host returns, each line
 * "flood line N", then emits one `sample`; later polls only emit. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FX_INSTANCE_FIELDS int64_t lines, polls;
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("lines"), VIGIL_STR("100000"),
      VIGIL_STR("Lines logged in the first poll."), 0, 0, { NULL, 0 } },
};

static vigil_status flood_create(const vigil_create_args *args, void **out, vigil_error *err) {
    instance *in;
    size_t i;
    vigil_status status = fx_create(args, out, err);
    if (status != VIGIL_OK)
        return status;
    in = *out;
    in->lines = 100000;
    for (i = 0; i < args->option_count; i++) {
        const vigil_option *o = &args->options[i];
        if (o->value.type == VIGIL_TYPE_INT && o->name.len == 5 && memcmp(o->name.ptr, "lines", 5) == 0)
            in->lines = o->value.as.i64;
    }
    return VIGIL_OK;
}

static vigil_status flood_poll(void *self, vigil_error *err) {
    instance *in = self;
    char line[64];
    int64_t i;
    if (in->polls++ == 0) {
        for (i = 0; i < in->lines; i++) {
            int n = snprintf(line, sizeof line, "flood line %lld", (long long)i);
            in->api->log(in->host, VIGIL_LOG_WARNING, (vigil_str){ line, (size_t)n });
        }
    }
    return fx_poll(self, err);
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("log_flood"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: logs a flood of lines in its first poll."),
    options, sizeof options / sizeof options[0], fx_sample_events, 1,
    100000000,
    flood_create, fx_start, flood_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
