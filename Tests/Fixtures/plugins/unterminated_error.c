/* unterminated_error.c — test fixture: create fills the whole error buffer
 * with 'x' and no terminating NUL (as a careless strncpy would); the host must
 * read at most `capacity` bytes and go on. */
#include <string.h>

#include "fixture.h"

static vigil_status careless_create(const vigil_create_args *args, void **out, vigil_error *err) {
    (void)args;
    (void)out;
    memset(err->message, 'x', err->capacity);
    return VIGIL_E_INVALID_CONFIG;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("unterminated_error"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    careless_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
