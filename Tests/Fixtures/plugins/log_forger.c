/* log_forger.c — sink and log test fixture: each poll tries to forge host log
 * lines and to crash the encoders. It logs a warning whose text holds a
 * newline followed by a fake host line, a CR and ANSI escapes; logs a 1 MiB
 * message; emits a `sample` whose kind and field name hold a newline and a
 * fake host line; a `sample` at time_ns = INT64_MIN, which the host refuses;
 * and a plain `sample` at INT64_MAX. */
#include <stdint.h>
#include <string.h>

#include "fixture.h"

#define FORGED "\n2026-01-01T00:00:00.000Z critical [vigil] FORGED"
#define BIG_LEN (1u << 20)

static char big[BIG_LEN];

static vigil_status forger_poll(void *self, vigil_error *err) {
    instance *in = self;
    vigil_field field = { VIGIL_STR("value"), { VIGIL_TYPE_INT, 0, { 0 } } };
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_WARNING, VIGIL_STR("sample"), 0, NULL, 1 };
    vigil_str text = vigil_str_from_cstr("innocent" FORGED " log\r\x1b[31mred\x1b[0m\x07");

    in->api->log(in->host, VIGIL_LOG_WARNING, text);
    memset(big, 'A', sizeof big);
    in->api->log(in->host, VIGIL_LOG_INFO, (vigil_str){ big, sizeof big });

    event.kind = vigil_str_from_cstr("sample" FORGED " kind");
    field.name = vigil_str_from_cstr("f" FORGED " field\x1b[2J");
    field.value.as.i64 = 1;
    event.fields = &field;
    if (in->api->emit(in->host, &event) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    /* A time before 1970: the host refuses it (VIGIL_E_INVALID_ARGUMENT) and counts it. */
    event.kind = vigil_str_from_cstr("sample");
    event.time_ns = INT64_MIN;
    field.name = vigil_str_from_cstr("value");
    if (in->api->emit(in->host, &event) != VIGIL_E_INVALID_ARGUMENT)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "a negative time was not refused");
    event.time_ns = INT64_MAX;
    field.name = vigil_str_from_cstr("value");
    field.value.as.i64 = 2;
    if (in->api->emit(in->host, &event) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("log_forger"), VIGIL_STR("1.0.0"), VIGIL_STR("Sink test fixture: hostile log text, kinds, names, times."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    fx_create, fx_start, forger_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
