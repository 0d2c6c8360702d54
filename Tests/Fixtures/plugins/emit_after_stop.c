/* emit_after_stop.c — test fixture: start launches a thread that emits a
 * `sample` every millisecond, forever; stop returns without stopping it (the
 * bug: stop must join every thread that emits). Each instance gets one
 * thread, started by its first start; the instance is never freed, since the
 * thread keeps using it. For `vigil plugins check`, which must report the
 * emits that arrive after stop returned. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#define FX_INSTANCE_FIELDS int launched;
#include "fixture.h"

static void *emit_forever(void *arg) {
    instance *in = arg;
    struct timespec ms = { 0, 1000000 };
    double n = 0;
    for (;;) {
        (void)fx_emit_sample(in, n++); /* VIGIL_E_STOPPED after stop: ignored (the bug) */
        nanosleep(&ms, NULL);
    }
    return NULL;
}

static vigil_status leaky_start(void *self, vigil_error *err) {
    instance *in = self;
    pthread_t thread;
    if (in->launched)
        return VIGIL_OK;
    if (pthread_create(&thread, NULL, emit_forever, in) != 0)
        return vigil_error_set(err, VIGIL_E_FATAL, "cannot start the emitting thread");
    pthread_detach(thread);
    in->launched = 1;
    return VIGIL_OK;
}

static void leaky_destroy(void *self) {
    (void)self; /* the thread still uses it */
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("emit_after_stop"), VIGIL_STR("1.0.0"),
    VIGIL_STR("Test fixture: a thread that goes on emitting after stop."),
    NULL, 0, fx_sample_events, 1,
    0,
    fx_create, leaky_start, NULL, fx_stop, leaky_destroy,
};

FX_ENTRY(descriptor)
