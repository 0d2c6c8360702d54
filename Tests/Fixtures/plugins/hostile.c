/* hostile.c — ABI test fixture: poll emits one `sample` whose names and values are hostile to encoders (JSON, UTF-8, floats). */
#include <math.h> /* NAN, INFINITY: constant macros, no libm needed */
#include <stdint.h>

#include "fixture.h"

/* The `text` value, byte for byte: quote, backslash, newline, tab, controls
 * 0x01 0x1f, DEL, a lone 0xff, 0xc3 followed by 'x' (broken 2-byte sequence),
 * an embedded NUL, U+00E9 "é", U+1F600 (an emoji), and a 3-byte sequence cut
 * after its second byte at the very end. Literals are split so that no hex
 * escape swallows the next character. */
#define HOSTILE_TEXT                                                        \
    "q\"b\\n\nt\tc\x01\x1f" "d\x7f" "f\xff" "c\xc3" "x|nul\0" "mid|"        \
    "\xc3\xa9|\xf0\x9f\x98\x80|cut\xe2\x82"

/* Bytes after the value: `len` stops before them and no NUL ends the value,
 * so a host that reads past `len` shows this text. */
static const char text_buffer[] = HOSTILE_TEXT "<READ PAST LEN>";
#define TEXT_LEN (sizeof(HOSTILE_TEXT) - 1)

#define WEIRD_NAME "we\"ird\nname"

static const vigil_field_spec fields[] = {
    { sizeof(vigil_field_spec), VIGIL_TYPE_STRING, VIGIL_STR("text"), VIGIL_STR(""), VIGIL_STR("Hostile bytes."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("nan"), VIGIL_STR(""), VIGIL_STR("NaN."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("inf"), VIGIL_STR(""), VIGIL_STR("+infinity."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("ninf"), VIGIL_STR(""), VIGIL_STR("-infinity."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("zero"), VIGIL_STR(""), VIGIL_STR("0.0."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("tiny"), VIGIL_STR(""), VIGIL_STR("Smallest subnormal."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("big"), VIGIL_STR(""), VIGIL_STR("Largest finite double."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR("min"), VIGIL_STR(""), VIGIL_STR("INT64_MIN."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR("max"), VIGIL_STR(""), VIGIL_STR("INT64_MAX."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_BOOL, VIGIL_STR("flag"), VIGIL_STR(""), VIGIL_STR("True."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR(WEIRD_NAME), VIGIL_STR(""), VIGIL_STR("A hostile field name; value 42."), 0, 0 },
};

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("sample"), VIGIL_STR("One hostile sample."),
      fields, sizeof fields / sizeof fields[0] },
};

static vigil_field field(vigil_str name, uint32_t type) {
    vigil_field f;
    memset(&f, 0, sizeof f);
    f.name = name;
    f.value.type = type;
    return f;
}

static vigil_status hostile_poll(void *self, vigil_error *err) {
    instance *in = self;
    vigil_field v[11];
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("sample"), 0, NULL, 11 };

    v[0] = field(vigil_str_from_cstr("text"), VIGIL_TYPE_STRING);
    v[0].value.as.str.ptr = text_buffer;
    v[0].value.as.str.len = TEXT_LEN;
    v[1] = field(vigil_str_from_cstr("nan"), VIGIL_TYPE_DOUBLE);
    v[1].value.as.f64 = NAN;
    v[2] = field(vigil_str_from_cstr("inf"), VIGIL_TYPE_DOUBLE);
    v[2].value.as.f64 = INFINITY;
    v[3] = field(vigil_str_from_cstr("ninf"), VIGIL_TYPE_DOUBLE);
    v[3].value.as.f64 = -INFINITY;
    v[4] = field(vigil_str_from_cstr("zero"), VIGIL_TYPE_DOUBLE);
    v[4].value.as.f64 = 0.0;
    v[5] = field(vigil_str_from_cstr("tiny"), VIGIL_TYPE_DOUBLE);
    v[5].value.as.f64 = 5e-324;
    v[6] = field(vigil_str_from_cstr("big"), VIGIL_TYPE_DOUBLE);
    v[6].value.as.f64 = 1.7976931348623157e308;
    v[7] = field(vigil_str_from_cstr("min"), VIGIL_TYPE_INT);
    v[7].value.as.i64 = INT64_MIN;
    v[8] = field(vigil_str_from_cstr("max"), VIGIL_TYPE_INT);
    v[8].value.as.i64 = INT64_MAX;
    v[9] = field(vigil_str_from_cstr("flag"), VIGIL_TYPE_BOOL);
    v[9].value.as.boolean = 1;
    v[10] = field(vigil_str_from_cstr(WEIRD_NAME), VIGIL_TYPE_INT);
    v[10].value.as.i64 = 42;
    event.fields = v;
    if (in->api->emit(in->host, &event) != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "emit refused");
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("hostile"), VIGIL_STR("1.0.0"), VIGIL_STR("ABI test fixture."),
    NULL, 0, events, 1,
    1000000000,
    fx_create, fx_start, hostile_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
