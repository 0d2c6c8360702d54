/* malformed.c — ABI test fixture: a plugin that hands the host what the
 * header says it refuses, one case at a time, so that the runtime, the
 * checker and the test kit can be shown to give the same verdict.
 *
 * Options:
 *   case        each poll emits malformed event CASE (1…15, see below), then
 *               one good `sample`; 0: only the good sample
 *   flap        each poll flips set_availability this many times
 *   stale_host  the first create stores its host handle and fails with
 *               VIGIL_E_TEMPORARY; every later poll calls log,
 *               set_availability and emit through that dead handle
 *   log_text    each poll logs this text (may hold newlines, escapes)
 *   log_bytes   each poll logs a message of this many 'x' bytes */
#include <stdint.h>
#include <string.h>

#define FX_INSTANCE_FIELDS int64_t which; int64_t flap; int stale; char *log_text; size_t log_len; int64_t log_bytes;
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("case"), VIGIL_STR("0"),
      VIGIL_STR("Which malformed event each poll emits (0: none)."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("flap"), VIGIL_STR("0"),
      VIGIL_STR("Availability flips per poll."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_BOOL, VIGIL_STR("stale_host"), VIGIL_STR("false"),
      VIGIL_STR("Call the host through a failed create's handle."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_STRING, VIGIL_STR("log_text"), VIGIL_STR(""),
      VIGIL_STR("Logged each poll."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("log_bytes"), VIGIL_STR("0"),
      VIGIL_STR("A message of this many bytes logged each poll."), 0, 0, { NULL, 0 } },
};

/* The handle of a create that failed: the host must ignore calls through it. */
static vigil_host_ctx *stale_handle;
static const vigil_host_api *stale_api;

static vigil_status malformed_create(const vigil_create_args *args, void **out, vigil_error *err) {
    size_t i;
    instance *in;
    int stale = 0;
    for (i = 0; i < args->option_count; i++)
        if (args->options[i].name.len == 10 && memcmp(args->options[i].name.ptr, "stale_host", 10) == 0)
            stale = args->options[i].value.as.boolean;
    if (stale && stale_handle == NULL) {
        stale_handle = args->host;
        stale_api = args->api;
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "not yet (the host retries)");
    }
    if (fx_create(args, out, err) != VIGIL_OK)
        return VIGIL_E_NOMEM;
    in = *out;
    in->stale = stale;
    for (i = 0; i < args->option_count; i++) {
        const vigil_option *o = &args->options[i];
        if (o->name.len == 4 && memcmp(o->name.ptr, "case", 4) == 0) in->which = o->value.as.i64;
        if (o->name.len == 4 && memcmp(o->name.ptr, "flap", 4) == 0) in->flap = o->value.as.i64;
        if (o->name.len == 9 && memcmp(o->name.ptr, "log_bytes", 9) == 0) in->log_bytes = o->value.as.i64;
        if (o->name.len == 8 && memcmp(o->name.ptr, "log_text", 8) == 0 && o->value.type == VIGIL_TYPE_STRING) {
            in->log_len = o->value.as.str.len;
            in->log_text = malloc(in->log_len + 1);
            if (in->log_text != NULL) memcpy(in->log_text, o->value.as.str.ptr, in->log_len);
        }
    }
    return VIGIL_OK;
}

static void malformed_destroy(void *self) {
    instance *in = self;
    free(in->log_text);
    free(in);
}

/* Emits malformed event `which`; returns the host's answer. */
static vigil_status emit_case(instance *in, int64_t which) {
    static vigil_field many[2000];
    static char big[100000];
    static char long_kind[300];
    vigil_field f[2];
    vigil_event e;
    size_t i;
    memset(f, 0, sizeof f);
    memset(&e, 0, sizeof e);
    e.size = sizeof e;
    e.severity = VIGIL_SEVERITY_INFO;
    e.kind = vigil_str_from_cstr("sample");
    f[0].name = vigil_str_from_cstr("value");
    f[0].value.type = VIGIL_TYPE_DOUBLE;
    f[0].value.as.f64 = 1.0;
    e.fields = f;
    e.field_count = 1;
    switch (which) {
    case 1: return in->api->emit(in->host, NULL);                        /* malformed */
    case 2: e.size = 8; break;                                            /* malformed */
    case 3: e.severity = 9; break;                                        /* bad_severity */
    case 4: e.time_ns = INT64_MIN; break;                                 /* bad_time */
    case 5: e.kind.ptr = NULL; e.kind.len = 5; break;                     /* malformed */
    case 6: e.kind.len = 0; break;                                        /* malformed */
    case 7: e.kind = vigil_str_from_cstr("availability"); break;          /* reserved_kind */
    case 8: f[0].name.ptr = NULL; f[0].name.len = 3; break;               /* malformed */
    case 9: f[1] = f[0]; e.field_count = 2; break;                        /* duplicate_field */
    case 10: f[0].value.type = VIGIL_TYPE_DURATION; break;                /* bad_field_type */
    case 11: f[0].value.type = 99; break;                                 /* unsupported_type */
    case 12:                                                              /* too_large */
        for (i = 0; i < 2000; i++) many[i] = f[0];
        e.fields = many;
        e.field_count = 2000;
        break;
    case 13:                                                              /* too_large */
        memset(big, 'b', sizeof big);
        f[0].value.type = VIGIL_TYPE_STRING;
        f[0].value.as.str.ptr = big;
        f[0].value.as.str.len = sizeof big;
        break;
    case 14:                                                              /* too_large */
        memset(long_kind, 'k', sizeof long_kind);
        e.kind.ptr = long_kind;
        e.kind.len = sizeof long_kind;
        break;
    case 15:                                                              /* malformed */
        f[0].value.type = VIGIL_TYPE_STRING;
        f[0].value.as.str.ptr = NULL;
        f[0].value.as.str.len = 4;
        break;
    default: return VIGIL_OK;
    }
    return in->api->emit(in->host, &e);
}

static vigil_status malformed_poll(void *self, vigil_error *err) {
    instance *in = self;
    int64_t i;
    (void)err;
    if (in->which > 0) (void)emit_case(in, in->which);
    for (i = 0; i < in->flap; i++)
        in->api->set_availability(in->host, (int32_t)(i % 2), vigil_str_from_cstr("flapping"));
    if (in->log_text != NULL) {
        vigil_str s;
        s.ptr = in->log_text;
        s.len = in->log_len;
        in->api->log(in->host, VIGIL_LOG_WARNING, s);
    }
    if (in->log_bytes > 0) {
        size_t n = (size_t)in->log_bytes;
        char *text = malloc(n);
        if (text != NULL) {
            vigil_str s;
            memset(text, 'x', n);
            s.ptr = text;
            s.len = n;
            in->api->log(in->host, VIGIL_LOG_INFO, s);
            free(text);
        }
    }
    if (in->stale && stale_handle != NULL) {
        vigil_field f = { VIGIL_STR("value"), { VIGIL_TYPE_DOUBLE, 0, { 0 } } };
        vigil_event e = { sizeof(vigil_event), VIGIL_SEVERITY_CRITICAL, VIGIL_STR("sample"), 0, NULL, 1 };
        e.fields = &f;
        stale_api->log(stale_handle, VIGIL_LOG_CRITICAL, vigil_str_from_cstr("through a dead handle"));
        stale_api->set_availability(stale_handle, 0, vigil_str_from_cstr("through a dead handle"));
        (void)stale_api->emit(stale_handle, &e);
    }
    return fx_emit_sample(in, 1.0) == VIGIL_OK ? VIGIL_OK : VIGIL_E_TEMPORARY;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("malformed"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: events and calls the host refuses."),
    options, sizeof options / sizeof options[0], fx_sample_events, 1,
    1000000000,
    malformed_create, fx_start, malformed_poll, fx_stop, malformed_destroy,
};

FX_ENTRY(descriptor)
