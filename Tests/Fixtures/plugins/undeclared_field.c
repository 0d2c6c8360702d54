/* undeclared_field.c — test fixture: poll emits events that do not match the
 * self-description: a `sample` with an undeclared field `bogus` and its
 * declared double `value` as an int, and a kind `mystery` it never declared.
 * It also emits a `dynamic` event (a kind with VIGIL_EVENT_DYNAMIC_FIELDS)
 * with a field named by options, `extra`, which is allowed. For `vigil
 * plugins check`, which must name each mismatch and only those. */
#include "fixture.h"

static const vigil_field_spec dynamic_fields[] = {
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR("count"), VIGIL_STR(""), VIGIL_STR("Always present."), 0, 0 },
};

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("sample"), VIGIL_STR("One sample."), fx_sample_fields, 1 },
    { sizeof(vigil_event_spec), VIGIL_EVENT_DYNAMIC_FIELDS, VIGIL_STR("dynamic"),
      VIGIL_STR("Fields named by options, besides count."), dynamic_fields, 1 },
};

static vigil_status mismatched_poll(void *self, vigil_error *err) {
    instance *in = self;
    vigil_field sample[2] = {
        { VIGIL_STR("value"), { VIGIL_TYPE_INT, 0, { 0 } } },
        { VIGIL_STR("bogus"), { VIGIL_TYPE_DOUBLE, 0, { 0 } } },
    };
    vigil_field mystery[1] = { { VIGIL_STR("value"), { VIGIL_TYPE_DOUBLE, 0, { 0 } } } };
    vigil_field dynamic[2] = {
        { VIGIL_STR("count"), { VIGIL_TYPE_INT, 0, { 0 } } },
        { VIGIL_STR("extra"), { VIGIL_TYPE_STRING, 0, { 0 } } },
    };
    vigil_event e = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("sample"), 0, NULL, 2 };
    vigil_status status;

    sample[0].value.as.i64 = 1;
    sample[1].value.as.f64 = 2.0;
    e.fields = sample;
    status = in->api->emit(in->host, &e);

    mystery[0].value.as.f64 = 3.0;
    e.kind = vigil_str_from_cstr("mystery");
    e.fields = mystery;
    e.field_count = 1;
    if (status == VIGIL_OK)
        status = in->api->emit(in->host, &e);

    dynamic[0].value.as.i64 = 4;
    dynamic[1].value.as.str = vigil_str_from_cstr("named by an option");
    e.kind = vigil_str_from_cstr("dynamic");
    e.fields = dynamic;
    e.field_count = 2;
    if (status == VIGIL_OK)
        status = in->api->emit(in->host, &e);

    if (status != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("undeclared_field"), VIGIL_STR("1.0.0"),
    VIGIL_STR("Test fixture: events that do not match the declarations."),
    NULL, 0, events, 2,
    1000000000,
    fx_create, fx_start, mismatched_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
