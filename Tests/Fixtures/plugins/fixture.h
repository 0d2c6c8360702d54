/* fixture.h — boilerplate shared by the ABI test fixtures in this directory
 * (not by Plugins/heartbeat, which stays self-contained for third parties).
 * Gives an `instance` (host + api, plus FX_INSTANCE_FIELDS if a fixture
 * defines it before the #include), the one-field `sample` event spec
 * (fx_sample_events), the default callbacks fx_create (calloc), fx_start and
 * fx_stop (no-ops), fx_poll (emits sample value=1.0), fx_destroy (free), the
 * helper fx_emit_sample, and FX_ENTRY(descriptor), the usual entry point
 * (written without a trailing ';', which -pedantic rejects at file scope).
 * A fixture writes only its descriptor and the callbacks that differ.
 * Everything is static (inline): what a fixture does not use costs nothing
 * and draws no unused warning. Each fixture is one translation unit. */
#ifndef VIGIL_TEST_FIXTURE_H
#define VIGIL_TEST_FIXTURE_H

#include <stdlib.h>

#include "vigil_plugin.h"

#if defined(__GNUC__) || defined(__clang__)
#define FX_UNUSED __attribute__((unused))
#else
#define FX_UNUSED
#endif

#ifndef FX_INSTANCE_FIELDS
#define FX_INSTANCE_FIELDS /* nothing more */
#endif

typedef struct instance {
    vigil_host_ctx *host;
    const vigil_host_api *api;
    FX_INSTANCE_FIELDS
} instance;

/* The `sample` kind with one DOUBLE field `value`. */
static const vigil_field_spec fx_sample_fields[] FX_UNUSED = {
    /* Designated: this file also builds against the frozen 1.0 header. */
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_DOUBLE, .name = VIGIL_STR("value"),
      .unit = VIGIL_STR(""), .doc = VIGIL_STR("A sample value.") },
};

static const vigil_event_spec fx_sample_events[] FX_UNUSED = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("sample"), VIGIL_STR("One sample."), fx_sample_fields, 1 },
};

static inline vigil_status fx_create(const vigil_create_args *args, void **out, vigil_error *err) {
    instance *in = calloc(1, sizeof *in);
    if (in == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    in->host = args->host;
    in->api = args->api;
    *out = in;
    return VIGIL_OK;
}

static inline vigil_status fx_start(void *self, vigil_error *err) {
    (void)self;
    (void)err;
    return VIGIL_OK;
}

/* Emits `sample` with value=`value`; returns what the host's emit returned. */
static inline vigil_status fx_emit_sample(instance *in, double value) {
    vigil_field field = { VIGIL_STR("value"), { VIGIL_TYPE_DOUBLE, 0, { 0 } } };
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("sample"), 0, NULL, 1 };
    field.value.as.f64 = value;
    event.fields = &field;
    return in->api->emit(in->host, &event);
}

static inline vigil_status fx_poll(void *self, vigil_error *err) {
    if (fx_emit_sample(self, 1.0) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static inline vigil_status fx_stop(void *self, vigil_error *err) {
    (void)self;
    (void)err;
    return VIGIL_OK;
}

static inline void fx_destroy(void *self) {
    free(self);
}

/* Defines the exported entry point: negotiates ABI 1.0 and answers `desc`. */
#define FX_ENTRY(desc)                                                          \
    VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args,  \
                                                 vigil_entry_result *result) {  \
        return vigil_negotiate(args, result, &(desc));                          \
    }

#endif /* VIGIL_TEST_FIXTURE_H */
