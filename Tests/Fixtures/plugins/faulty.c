/* faulty.c — hostile fixture for isolation: one plugin whose `fault` option
 * picks how it misbehaves, so each supervisor test names its failure in the
 * manifest.
 *
 *   none          behaves: one `sample` per poll
 *   segv_poll     SIGSEGV in poll number `at` (default 3), after emitting
 *   abort_create  abort() in create
 *   slow_create   create takes `at` tenths of a second
 *   exit_start    exit(3) in start
 *   loop_poll     an endless loop in poll number `at`
 *   loop_stop     an endless loop in stop
 *   leak          keeps `leak_mb` MiB more (touched) at every poll
 *   segv_thread   a thread of its own raises SIGSEGV after `at` polls' time
 *
 * With `threads` > 0, start spawns that many threads that emit `per_thread`
 * events each as fast as emit returns, then call `finished`; with
 * `per_thread` 0 they emit until stop.
 *
 * Every emit the host accepted is counted, and the count is written to
 * `count_file` (if set) after each change: "<accepted> <refused>\n", so a
 * test can match what the plugin sent against what was delivered, even
 * after the process died. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FX_INSTANCE_FIELDS                                                                                     \
    char fault[32];                                                                                            \
    int64_t at, leak_mb, threads, per_thread, polls;                                                           \
    char count_file[512];                                                                                      \
    pthread_mutex_t lock;                                                                                      \
    int64_t accepted, refused;                                                                                 \
    pthread_t workers[64];                                                                                     \
    int started_threads, done_threads;                                                                         \
    volatile int stopping;
#include "fixture.h"

static const vigil_field_spec fields[] = {
    { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("value"), VIGIL_STR(""), VIGIL_STR("A sample value."), 0, 0 },
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR("n"), VIGIL_STR("count"), VIGIL_STR("Emits before this one."), 0, 0 },
};

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("sample"), VIGIL_STR("One sample."), fields, 2 },
};

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_STRING, VIGIL_STR("fault"), VIGIL_STR("none"), VIGIL_STR("How to misbehave."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("at"), VIGIL_STR("3"), VIGIL_STR("Which poll misbehaves."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("leak_mb"), VIGIL_STR("10"), VIGIL_STR("MiB kept per poll (leak)."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("threads"), VIGIL_STR("0"), VIGIL_STR("Emitting threads, 0 to 64."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("per_thread"), VIGIL_STR("1000"), VIGIL_STR("Events per thread."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_STRING, VIGIL_STR("count_file"), VIGIL_STR(""), VIGIL_STR("Where to write the counts."), 0, 0, { NULL, 0 } },
};

static void copy_str(char *to, size_t size, vigil_str s) {
    size_t n = s.len < size - 1 ? s.len : size - 1;
    if (n > 0 && s.ptr != NULL)
        memcpy(to, s.ptr, n);
    to[n] = 0;
}

static void write_counts(instance *in) {
    FILE *f;
    if (in->count_file[0] == 0)
        return;
    f = fopen(in->count_file, "w");
    if (f == NULL)
        return;
    fprintf(f, "%lld %lld\n", (long long)in->accepted, (long long)in->refused);
    fclose(f);
}

static void emit_counted(instance *in, double value) {
    vigil_field f[2] = { { VIGIL_STR("value"), { VIGIL_TYPE_DOUBLE, 0, { 0 } } },
                         { VIGIL_STR("n"), { VIGIL_TYPE_INT, 0, { 0 } } } };
    vigil_event event = { sizeof(vigil_event), VIGIL_SEVERITY_INFO, VIGIL_STR("sample"), 0, NULL, 2 };
    vigil_status status;
    pthread_mutex_lock(&in->lock);
    f[1].value.as.i64 = in->accepted + in->refused;
    pthread_mutex_unlock(&in->lock);
    f[0].value.as.f64 = value;
    event.fields = f;
    status = in->api->emit(in->host, &event);
    pthread_mutex_lock(&in->lock);
    if (status == VIGIL_OK)
        in->accepted++;
    else
        in->refused++;
    pthread_mutex_unlock(&in->lock);
}

static int is(const instance *in, const char *fault) { return strcmp(in->fault, fault) == 0; }

/* Says what it is about to do, so the host's crash report can quote it. */
static void say(instance *in, const char *what) {
    char line[128];
    int n = snprintf(line, sizeof line, "about to %s (poll %lld)", what, (long long)in->polls);
    vigil_str s = { line, n < 0 ? 0 : (size_t)n };
    in->api->log(in->host, VIGIL_LOG_WARNING, s);
}

static vigil_status faulty_create(const vigil_create_args *args, void **out, vigil_error *err) {
    instance *in;
    size_t i;
    vigil_status status = fx_create(args, out, err);
    if (status != VIGIL_OK)
        return status;
    in = *out;
    pthread_mutex_init(&in->lock, NULL);
    strcpy(in->fault, "none");
    in->at = 3;
    in->leak_mb = 10;
    in->per_thread = 1000;
    for (i = 0; i < args->option_count; i++) {
        const vigil_option *o = &args->options[i];
        if (o->value.type == VIGIL_TYPE_NONE)
            continue;
        if (o->name.len == 5 && memcmp(o->name.ptr, "fault", 5) == 0)
            copy_str(in->fault, sizeof in->fault, o->value.as.str);
        else if (o->name.len == 2 && memcmp(o->name.ptr, "at", 2) == 0)
            in->at = o->value.as.i64;
        else if (o->name.len == 7 && memcmp(o->name.ptr, "leak_mb", 7) == 0)
            in->leak_mb = o->value.as.i64;
        else if (o->name.len == 7 && memcmp(o->name.ptr, "threads", 7) == 0)
            in->threads = o->value.as.i64 < 0 ? 0 : o->value.as.i64 > 64 ? 64 : o->value.as.i64;
        else if (o->name.len == 10 && memcmp(o->name.ptr, "per_thread", 10) == 0)
            in->per_thread = o->value.as.i64;
        else if (o->name.len == 10 && memcmp(o->name.ptr, "count_file", 10) == 0)
            copy_str(in->count_file, sizeof in->count_file, o->value.as.str);
    }
    if (is(in, "abort_create")) {
        say(in, "abort in create");
        abort();
    }
    if (is(in, "slow_create")) {
        struct timespec pause = { (time_t)(in->at / 10), (long)(in->at % 10) * 100000000L };
        nanosleep(&pause, NULL);
    }
    return VIGIL_OK;
}

static void *emitter(void *arg) {
    instance *in = arg;
    int64_t i;
    int last;
    for (i = 0; in->per_thread == 0 ? !__atomic_load_n(&in->stopping, __ATOMIC_RELAXED) : i < in->per_thread; i++)
        emit_counted(in, (double)i);
    pthread_mutex_lock(&in->lock);
    last = ++in->done_threads == in->started_threads;
    pthread_mutex_unlock(&in->lock);
    if (last) {
        write_counts(in);
        in->api->finished(in->host);
    }
    return NULL;
}

static void *crasher(void *arg) {
    instance *in = arg;
    struct timespec pause = { (time_t)(in->at / 10), (long)(in->at % 10) * 100000000L };
    nanosleep(&pause, NULL);
    raise(SIGSEGV);
    return NULL;
}

static vigil_status faulty_start(void *self, vigil_error *err) {
    instance *in = self;
    int i;
    (void)err;
    if (is(in, "exit_start")) {
        say(in, "exit(3) in start");
        exit(3);
    }
    if (is(in, "segv_thread")) {
        pthread_t t;
        pthread_create(&t, NULL, crasher, in);
        pthread_detach(t);
    }
    in->started_threads = (int)in->threads;
    for (i = 0; i < in->threads; i++)
        pthread_create(&in->workers[i], NULL, emitter, in);
    return VIGIL_OK;
}

static vigil_status faulty_poll(void *self, vigil_error *err) {
    instance *in = self;
    (void)err;
    in->polls++;
    if (is(in, "leak")) {
        size_t bytes = (size_t)in->leak_mb << 20;
        char *p = malloc(bytes);
        if (p == NULL) {
            say(in, "fail a poll: malloc refused");
            return VIGIL_E_NOMEM;
        }
        memset(p, 1, bytes); /* touched: resident, not just reserved */
    }
    if (in->threads == 0) {
        emit_counted(in, (double)in->polls);
        write_counts(in);
    }
    if (in->polls == in->at && is(in, "segv_poll")) {
        say(in, "raise SIGSEGV");
        raise(SIGSEGV);
    }
    if (in->polls == in->at && is(in, "loop_poll")) {
        say(in, "loop forever");
        for (;;) {
        }
    }
    return VIGIL_OK;
}

static vigil_status faulty_stop(void *self, vigil_error *err) {
    instance *in = self;
    int i;
    (void)err;
    if (is(in, "loop_stop")) {
        say(in, "loop forever in stop");
        for (;;) {
        }
    }
    __atomic_store_n(&in->stopping, 1, __ATOMIC_RELAXED);
    for (i = 0; i < in->started_threads; i++)
        pthread_join(in->workers[i], NULL);
    in->started_threads = 0;
    write_counts(in);
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("faulty"), VIGIL_STR("1.0.0"), VIGIL_STR("Test fixture: misbehaves as its `fault` option says."),
    options, sizeof options / sizeof options[0], events, 1,
    100000000,
    faulty_create, faulty_start, faulty_poll, faulty_stop, fx_destroy,
};

FX_ENTRY(descriptor)
