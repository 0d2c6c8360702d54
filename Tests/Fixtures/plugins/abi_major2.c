/* abi_major2.c — ABI test fixture: answers ABI major 2 whatever the host offers; must be refused for the major. */
#include <stdlib.h>

#include "vigil_plugin.h"

typedef struct instance {
    vigil_host_ctx *host;
    const vigil_host_api *api;
} instance;

static const vigil_field_spec fields[] = {
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("value"), VIGIL_STR(""),
      VIGIL_STR("A sample value.") },
};

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("sample"), VIGIL_STR("One sample."), fields, 1 },
};

static vigil_status fx_create(const vigil_create_args *args, void **out, vigil_error *err) {
    instance *in = calloc(1, sizeof *in);
    if (in == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    in->host = args->host;
    in->api = args->api;
    *out = in;
    return VIGIL_OK;
}

static vigil_status fx_start(void *self, vigil_error *err) {
    (void)self;
    (void)err;
    return VIGIL_OK;
}

static vigil_status emit_sample(instance *in, double value) {
    vigil_field field = { VIGIL_STR("value"), { VIGIL_TYPE_DOUBLE, 0, { 0 } } };
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("sample"), 0, NULL, 1 };
    field.value.as.f64 = value;
    event.fields = &field;
    return in->api->emit(in->host, &event);
}

static vigil_status fx_poll(void *self, vigil_error *err) {
    if (emit_sample(self, 1.0) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static vigil_status fx_stop(void *self, vigil_error *err) {
    (void)self;
    (void)err;
    return VIGIL_OK;
}

static void fx_destroy(void *self) {
    free(self);
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("abi_major2"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, events, 1,
    1000000000,
    fx_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args,
                                             vigil_entry_result *result) {
    (void)args; /* deliberately ignores what the host offers */
    if (result == NULL || result->size < offsetof(vigil_entry_result, error))
        return VIGIL_E_INVALID_ARGUMENT;
    result->abi_major = 2;
    result->abi_minor = 0;
    result->descriptor = &descriptor;
    return VIGIL_OK;
}
