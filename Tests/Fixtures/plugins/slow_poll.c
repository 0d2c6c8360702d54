/* slow_poll.c — test fixture: each poll from number `from` (default 1) on
 * sleeps for the `sleep` option before emitting (earlier ones return at
 * once), to show that a slow monitor delays no other, in its own first poll
 * or in a round of polls, and that the host's watchdog reports calls past
 * their deadline. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#define FX_INSTANCE_FIELDS int64_t sleep_ns, from, polls;
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_DURATION, VIGIL_STR("sleep"), VIGIL_STR("1s"),
      VIGIL_STR("How long each poll takes."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("from"), VIGIL_STR("1"),
      VIGIL_STR("The first poll that sleeps (1 is the first poll)."), 0, 0, { NULL, 0 } },
};

static const vigil_field_spec fields[] = {
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR("slept_ns"), VIGIL_STR("nanoseconds"),
      VIGIL_STR("How long the poll slept."), 0, 0 },
};

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("sample"), VIGIL_STR("Emitted after each slow poll."), fields, 1 },
};

static vigil_status slow_create(const vigil_create_args *args, void **out, vigil_error *err) {
    size_t i;
    instance *in;
    vigil_status status = fx_create(args, out, err);
    if (status != VIGIL_OK)
        return status;
    in = *out;
    in->sleep_ns = 1000000000;
    in->from = 1;
    in->polls = 0;
    for (i = 0; i < args->option_count; i++) {
        if (args->options[i].value.type == VIGIL_TYPE_DURATION)
            in->sleep_ns = args->options[i].value.as.i64;
        else if (args->options[i].value.type == VIGIL_TYPE_INT)
            in->from = args->options[i].value.as.i64;
    }
    return VIGIL_OK;
}

static vigil_status slow_poll(void *self, vigil_error *err) {
    instance *in = self;
    struct timespec ts;
    vigil_field field = { VIGIL_STR("slept_ns"), { VIGIL_TYPE_INT, 0, { 0 } } };
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("sample"), 0, NULL, 1 };
    in->polls++;
    ts.tv_sec = 0;
    ts.tv_nsec = 0;
    if (in->polls >= in->from) {
        ts.tv_sec = (time_t)(in->sleep_ns / 1000000000);
        ts.tv_nsec = (long)(in->sleep_ns % 1000000000);
    }
    field.value.as.i64 = in->polls >= in->from ? in->sleep_ns : 0;
    while (nanosleep(&ts, &ts) != 0) {
    }
    event.fields = &field;
    if (in->api->emit(in->host, &event) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("slow_poll"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: a poll that takes long."),
    options, 2, events, 1,
    1000000000,
    slow_create, fx_start, slow_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
