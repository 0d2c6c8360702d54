/* create_hangs.c — hostile fixture: a valid plugin whose create never
 * returns. `vigil validate` creates every instance: it must give up at the
 * monitor's deadline, not hang. */
#include <unistd.h>

#include "fixture.h"

static volatile int forever = 1;

static vigil_status hang_create(const vigil_create_args *args, void **out, vigil_error *err) {
    (void)args;
    (void)out;
    (void)err;
    while (forever)
        pause();
    return VIGIL_E_FATAL;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("create_hangs"), VIGIL_STR("1.0.0"), VIGIL_STR("Its create never returns."),
    NULL, 0, fx_sample_events, 1,
    1000000000,
    hang_create, fx_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
