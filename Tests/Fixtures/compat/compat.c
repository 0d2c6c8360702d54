/*
 * compat.c — compatibility fixture: a plugin as an author of ABI 1.COMPAT_MINOR
 * writes it, using what that minor offers and nothing newer. Built with cc
 * against the frozen header of that minor (Tests/Compat/vigil_plugin-1.N.h,
 * copied as vigil_plugin.h), and against the current header to prove that a
 * plugin's source still builds unchanged (ABICompatTests.swift):
 *
 *   cc -std=c99 -Wall -Wextra -Werror -pedantic -shared -fPIC \
 *      -DCOMPAT_MINOR=2 -I DIR_WITH_vigil_plugin.h compat.c -o compat.so
 *
 * What each minor adds (cumulative):
 *   1.0  a polled monitor: options label (string), scale (double), limit
 *        (int), loud (bool); kind `reading` with n, value, label; the first
 *        `limit` polls emit one reading each (warning when loud), later
 *        polls nothing.
 *   1.1  after the last reading, `finished` (checked with VIGIL_HOST_HAS), so
 *        `vigil run` ends by itself.
 *   1.2  option extra (json, a list of names): `reading` carries one more int
 *        field per name (= n), declared VIGIL_EVENT_DYNAMIC_FIELDS; a bad name
 *        is INVALID_CONFIG naming its place, "options.extra[I]: …".
 *   1.3  option target (string, required) with an example_text, so that
 *        `vigil plugins check` passes with no options; `reading` carries it.
 *   1.4  `label` marked an identity and `n` a counter; kind `state` (field
 *        phase: running, then done) declared on change.
 *
 * With -DCOMPAT_ANSWER_MINOR=M it answers ABI 1.M, whatever it was built for.
 *
 * Initializers are designated, as a plugin that means to build against later
 * headers writes them: a later minor appends struct members, which
 * positional initializers under -Wextra -Werror would have to name.
 */
#include <stdlib.h>
#include <string.h>

#include "vigil_plugin.h"

#ifndef COMPAT_MINOR
#error "build with -DCOMPAT_MINOR=N, the minor this plugin is written for"
#endif
#if COMPAT_MINOR > VIGIL_ABI_MINOR
#error "COMPAT_MINOR is newer than this header"
#endif

#define COMPAT_STR2(x) #x
#define COMPAT_STR(x) COMPAT_STR2(x)
#define COMPAT_COUNT(a) (sizeof(a) / sizeof((a)[0]))

#define MAX_EXTRA 8
#define MAX_NAME 32

#if COMPAT_MINOR >= 4
#define IDENTITY_FLAG VIGIL_FIELD_IDENTITY
#define COUNTER_FLAG VIGIL_FIELD_COUNTER
#define DESCRIBE_FLAGS(f) .flags = (f),
#else
#define DESCRIBE_FLAGS(f) /* field flags are 1.4's */
#endif

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("label"),
      .default_text = VIGIL_STR("compat"), .doc = VIGIL_STR("Carried by every reading.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_DOUBLE, .name = VIGIL_STR("scale"),
      .default_text = VIGIL_STR("1.5"), .doc = VIGIL_STR("A reading's value is n times this.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("limit"),
      .default_text = VIGIL_STR("3"), .doc = VIGIL_STR("Readings in all, 1 to 1000.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_BOOL, .name = VIGIL_STR("loud"),
      .default_text = VIGIL_STR("false"), .doc = VIGIL_STR("Readings are warnings.") },
#if COMPAT_MINOR >= 2
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_JSON, .name = VIGIL_STR("extra"),
      .doc = VIGIL_STR("Names of more int fields of a reading, each equal to n.") },
#endif
#if COMPAT_MINOR >= 3
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("target"),
      .doc = VIGIL_STR("What the readings are about."), .flags = VIGIL_OPTION_REQUIRED,
      .example_text = VIGIL_STR("demo") },
#endif
};

static const vigil_field_spec reading_fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("n"),
      .doc = VIGIL_STR("1 for the first reading, then 2, 3…"), DESCRIBE_FLAGS(COUNTER_FLAG) },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_DOUBLE, .name = VIGIL_STR("value"),
      .unit = VIGIL_STR("ratio"), .doc = VIGIL_STR("n times scale.") },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("label"),
      .doc = VIGIL_STR("The label option."), DESCRIBE_FLAGS(IDENTITY_FLAG) },
#if COMPAT_MINOR >= 3
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("target"),
      .doc = VIGIL_STR("The target option.") },
#endif
};

#if COMPAT_MINOR >= 4
static const vigil_field_spec state_fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("phase"),
      .doc = VIGIL_STR("running, then done after the last reading.") },
};
#endif

static const vigil_event_spec events[] = {
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("reading"), .doc = VIGIL_STR("One reading."),
#if COMPAT_MINOR >= 2
      .flags = VIGIL_EVENT_DYNAMIC_FIELDS,
#endif
      .fields = reading_fields, .field_count = COMPAT_COUNT(reading_fields) },
#if COMPAT_MINOR >= 4
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("state"), .doc = VIGIL_STR("Where the readings are."),
      .flags = VIGIL_EVENT_ON_CHANGE, .fields = state_fields, .field_count = COMPAT_COUNT(state_fields) },
#endif
};

typedef struct instance {
    vigil_host_ctx *host;
    const vigil_host_api *api;
    char label[256];
    double scale;
    int64_t limit, n;
    int loud;
#if COMPAT_MINOR >= 2
    char extra[MAX_EXTRA][MAX_NAME + 1];
    size_t extra_count;
#endif
#if COMPAT_MINOR >= 3
    char target[256];
#endif
} instance;

static const vigil_value *option(const vigil_create_args *args, const char *name) {
    size_t i;
    for (i = 0; i < args->option_count; i++)
        if (args->options[i].name.len == strlen(name) && memcmp(args->options[i].name.ptr, name, strlen(name)) == 0)
            return &args->options[i].value;
    return NULL;
}

static int copy_text(char *dst, size_t capacity, const vigil_value *v) {
    if (v == NULL || v->type != VIGIL_TYPE_STRING || v->as.str.len >= capacity)
        return 0;
    memcpy(dst, v->as.str.ptr, v->as.str.len);
    dst[v->as.str.len] = 0;
    return 1;
}

#if COMPAT_MINOR >= 2
static const char *skip_space(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* `extra` as JSON text: a list of strings, each [a-z0-9_]{1,32}. A problem
 * names its place, "options.extra[I]: …" (1.2). */
static vigil_status parse_extra(instance *in, vigil_str json, vigil_error *err) {
    const char *p = json.ptr, *end = json.ptr + json.len;
    p = skip_space(p, end);
    if (p == end || *p != '[')
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.extra: expected a list of field names");
    p = skip_space(p + 1, end);
    if (p < end && *p == ']')
        return VIGIL_OK;
    for (;;) {
        const char *name;
        size_t len, i = in->extra_count;
        if (i == MAX_EXTRA)
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.extra[%zu]: at most %d names", i, MAX_EXTRA);
        if (p == end || *p != '"')
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.extra[%zu]: expected a field name", i);
        name = ++p;
        while (p < end && *p != '"')
            p++;
        if (p == end)
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.extra[%zu]: unterminated", i);
        len = (size_t)(p - name);
        if (len == 0 || len > MAX_NAME || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") < len)
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                                   "options.extra[%zu]: '%.*s' is not a field name ([a-z0-9_], 1 to %d characters)",
                                   i, (int)len, name, MAX_NAME);
        memcpy(in->extra[i], name, len);
        in->extra[i][len] = 0;
        in->extra_count++;
        p = skip_space(p + 1, end);
        if (p < end && *p == ']')
            return VIGIL_OK;
        if (p == end || *p != ',')
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.extra: expected ',' or ']' after item %zu", i);
        p = skip_space(p + 1, end);
    }
}
#endif

static vigil_status compat_create(const vigil_create_args *args, void **out, vigil_error *err) {
    const vigil_value *v;
    instance *in = calloc(1, sizeof *in);
    if (in == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    in->host = args->host;
    in->api = args->api;
    if (!copy_text(in->label, sizeof in->label, option(args, "label"))) {
        free(in);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.label: a string of at most 255 bytes");
    }
    v = option(args, "scale");
    in->scale = v && v->type == VIGIL_TYPE_DOUBLE ? v->as.f64 : 1.5;
    v = option(args, "limit");
    in->limit = v && v->type == VIGIL_TYPE_INT ? v->as.i64 : 3;
    if (in->limit < 1 || in->limit > 1000) {
        free(in);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.limit: 1 to 1000");
    }
    v = option(args, "loud");
    in->loud = v && v->type == VIGIL_TYPE_BOOL && v->as.boolean;
#if COMPAT_MINOR >= 2
    v = option(args, "extra");
    if (v != NULL && v->type == VIGIL_TYPE_JSON) {
        vigil_status status = parse_extra(in, v->as.str, err);
        if (status != VIGIL_OK) {
            free(in);
            return status;
        }
    }
#endif
#if COMPAT_MINOR >= 3
    if (!copy_text(in->target, sizeof in->target, option(args, "target"))) {
        free(in);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.target: required, a string of at most 255 bytes");
    }
#endif
    *out = in;
    return VIGIL_OK;
}

static vigil_status compat_start(void *self, vigil_error *err) {
    (void)self, (void)err;
    return VIGIL_OK;
}

#if COMPAT_MINOR >= 4
static void emit_state(instance *in, const char *phase) {
    vigil_field field = { VIGIL_STR("phase"), { VIGIL_TYPE_STRING, 0, { 0 } } };
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("state"), 0, NULL, 1 };
    field.value.as.str = vigil_str_from_cstr(phase);
    event.fields = &field;
    in->api->emit(in->host, &event);
}
#endif

static vigil_status compat_poll(void *self, vigil_error *err) {
    instance *in = self;
    vigil_field fields[4 + MAX_EXTRA];
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("reading"), 0, fields, 0 };
    size_t count = 0;
    if (in->n == in->limit)
        return VIGIL_OK; /* done: a 1.0 host has no `finished` to be told */
    in->n++;
#if COMPAT_MINOR >= 4
    if (in->n == 1)
        emit_state(in, "running");
#endif
    fields[count].name = vigil_str_from_cstr("n");
    fields[count].value.type = VIGIL_TYPE_INT;
    fields[count].value.reserved = 0;
    fields[count++].value.as.i64 = in->n;
    fields[count].name = vigil_str_from_cstr("value");
    fields[count].value.type = VIGIL_TYPE_DOUBLE;
    fields[count].value.reserved = 0;
    fields[count++].value.as.f64 = (double)in->n * in->scale;
    fields[count].name = vigil_str_from_cstr("label");
    fields[count].value.type = VIGIL_TYPE_STRING;
    fields[count].value.reserved = 0;
    fields[count++].value.as.str = vigil_str_from_cstr(in->label);
#if COMPAT_MINOR >= 3
    fields[count].name = vigil_str_from_cstr("target");
    fields[count].value.type = VIGIL_TYPE_STRING;
    fields[count].value.reserved = 0;
    fields[count++].value.as.str = vigil_str_from_cstr(in->target);
#endif
#if COMPAT_MINOR >= 2
    {
        size_t i;
        for (i = 0; i < in->extra_count; i++) {
            fields[count].name = vigil_str_from_cstr(in->extra[i]);
            fields[count].value.type = VIGIL_TYPE_INT;
            fields[count].value.reserved = 0;
            fields[count++].value.as.i64 = in->n;
        }
    }
#endif
    event.field_count = count;
    if (in->loud)
        event.severity = VIGIL_SEVERITY_WARNING;
    if (in->api->emit(in->host, &event) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    if (in->n == in->limit) {
#if COMPAT_MINOR >= 4
        emit_state(in, "done");
#endif
#if COMPAT_MINOR >= 1
        if (VIGIL_HOST_HAS(in->api, finished))
            in->api->finished(in->host);
#endif
    }
    return VIGIL_OK;
}

static vigil_status compat_stop(void *self, vigil_error *err) {
    (void)self, (void)err;
    return VIGIL_OK;
}

static void compat_destroy(void *self) {
    free(self);
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_MONITOR,
    .name = VIGIL_STR("compat"),
    .version = VIGIL_STR("1." COMPAT_STR(COMPAT_MINOR) ".0"),
    .description = VIGIL_STR("Compatibility fixture of ABI 1." COMPAT_STR(COMPAT_MINOR) "."),
    .options = options,
    .option_count = COMPAT_COUNT(options),
    .events = events,
    .event_count = COMPAT_COUNT(events),
    .default_interval_ns = 10000000,
    .create = compat_create,
    .start = compat_start,
    .poll = compat_poll,
    .stop = compat_stop,
    .destroy = compat_destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    vigil_status status = vigil_negotiate(args, result, &descriptor);
#ifdef COMPAT_ANSWER_MINOR
    /* Tests only: a plugin that chooses an older minor than its header's
     * (which a plugin may, if it needs no more) is read as that minor: what
     * its structs hold beyond it is never looked at. */
    if (status == VIGIL_OK)
        result->abi_minor = COMPAT_ANSWER_MINOR;
#endif
    return status;
}
