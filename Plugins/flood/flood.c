/*
 * flood — a benchmark plugin: emits events as fast as asked, from threads of
 * its own, then tells the host it has finished.
 *
 * Options: count (events per thread… per instance, 0 = unlimited), rate
 * (events/s for the instance, 0 = as fast as possible), fields (numeric
 * fields per event, 1…16), threads (1…64). Each event is kind `flood` with
 * fields v0…v(N-1), doubles that change with every event. With entities N
 * (> 0) each event also carries `entity`, an identity cycling 0…N-1, so the
 * events describe N things (series for a `prometheus` sink).
 *
 * Built with cc against the header alone, like heartbeat:
 *   cc -std=c99 -O2 -shared -fPIC -pthread -I Sources/CVigilPlugin/include \
 *      Plugins/flood/flood.c -o flood.so
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vigil_plugin.h"

#define MAX_FIELDS 16
#define MAX_THREADS 64

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("count"), VIGIL_STR("1000000"),
      VIGIL_STR("Events to emit in all (split across threads); 0 = unlimited."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("rate"), VIGIL_STR("0"),
      VIGIL_STR("Events per second in all; 0 = as fast as possible."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("fields"), VIGIL_STR("1"),
      VIGIL_STR("Numeric fields per event, 1 to 16."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("threads"), VIGIL_STR("1"),
      VIGIL_STR("Threads emitting at once, 1 to 64."), 0, 0, { NULL, 0 } },
    { sizeof(vigil_option_spec), VIGIL_TYPE_INT, VIGIL_STR("entities"), VIGIL_STR("0"),
      VIGIL_STR("Things the events describe, 0 to 1000000: each event's `entity` identity cycles through them; 0 = no entity field."),
      0, 0, { NULL, 0 } },
};

#define FIELD(n) { sizeof(vigil_field_spec), VIGIL_TYPE_DOUBLE, VIGIL_STR("v" #n), VIGIL_STR(""), VIGIL_STR(""), 0, 0 }
static const vigil_field_spec fields[MAX_FIELDS + 1] = {
    FIELD(0), FIELD(1), FIELD(2), FIELD(3), FIELD(4), FIELD(5), FIELD(6), FIELD(7),
    FIELD(8), FIELD(9), FIELD(10), FIELD(11), FIELD(12), FIELD(13), FIELD(14), FIELD(15),
    { sizeof(vigil_field_spec), VIGIL_TYPE_INT, VIGIL_STR("entity"), VIGIL_STR(""),
      VIGIL_STR("Which of `entities` things the event is about (with entities > 0)."), VIGIL_FIELD_IDENTITY, 0 },
};
static const char *const field_names[MAX_FIELDS] = {
    "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15",
};

static const vigil_event_spec events[] = {
    { sizeof(vigil_event_spec), 0, VIGIL_STR("flood"),
      VIGIL_STR("One synthetic event; the first `fields` of v0…v15 are present, and `entity` with entities > 0."),
      fields, MAX_FIELDS + 1 },
};

typedef struct flood flood;

typedef struct pusher {
    flood *owner;
    pthread_t thread;
    int64_t count; /* events for this thread; 0 = unlimited */
    int index;
    int started;   /* `thread` was created and must be joined */
} pusher;

struct flood {
    vigil_host_ctx *host;
    const vigil_host_api *api;
    int64_t count, rate, entities;
    int fields, threads;

    int running;
    pthread_mutex_t lock; /* guards `stopping` and `done` */
    int stopping;
    int done; /* threads that emitted their count */
    pusher pushers[MAX_THREADS];
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int should_stop(flood *f) {
    int stop;
    pthread_mutex_lock(&f->lock);
    stop = f->stopping;
    pthread_mutex_unlock(&f->lock);
    return stop;
}

static void *push(void *arg) {
    pusher *p = arg;
    flood *f = p->owner;
    vigil_field values[MAX_FIELDS + 1];
    vigil_event event;
    int64_t sent = 0, start = now_ns();
    /* Each thread's share of the rate, in ns between events. */
    int64_t gap = f->rate > 0 ? (int64_t)1000000000 * f->threads / f->rate : 0;
    int i;
    int finished = 0;

    for (i = 0; i < f->fields; i++) {
        values[i].name = vigil_str_from_cstr(field_names[i]);
        values[i].value.type = VIGIL_TYPE_DOUBLE;
        values[i].value.reserved = 0;
    }
    if (f->entities > 0) {
        values[f->fields].name = vigil_str_from_cstr("entity");
        values[f->fields].value.type = VIGIL_TYPE_INT;
        values[f->fields].value.reserved = 0;
    }
    memset(&event, 0, sizeof event);
    event.size = sizeof(vigil_event);
    event.severity = VIGIL_SEVERITY_INFO;
    event.kind = vigil_str_from_cstr("flood");
    event.fields = values;
    event.field_count = (size_t)f->fields + (f->entities > 0 ? 1 : 0);

    while (p->count == 0 || sent < p->count) {
        /* Check for stop every 1024 events: cheap, and prompt enough; at
         * every event when paced (1024 events at 25/s are 41 s). */
        if ((gap > 0 || (sent & 1023) == 0) && should_stop(f))
            break;
        if (gap > 0) {
            int64_t due = start + sent * gap, now = now_ns();
            if (due > now) {
                struct timespec ts;
                ts.tv_sec = (time_t)((due - now) / 1000000000);
                ts.tv_nsec = (long)((due - now) % 1000000000);
                nanosleep(&ts, NULL);
            }
        }
        for (i = 0; i < f->fields; i++)
            values[i].value.as.f64 = (double)sent + i * 0.5;
        if (f->entities > 0)
            values[f->fields].value.as.i64 = (sent * f->threads + p->index) % f->entities;
        if (f->api->emit(f->host, &event) != VIGIL_OK)
            break; /* the host is stopping this instance */
        sent++;
    }
    if (p->count != 0 && sent >= p->count) {
        pthread_mutex_lock(&f->lock);
        finished = ++f->done == f->threads;
        pthread_mutex_unlock(&f->lock);
    }
    /* The last thread to finish tells the host (ABI 1.1; optional). */
    if (finished && VIGIL_HOST_HAS(f->api, finished))
        f->api->finished(f->host);
    return NULL;
}

static const vigil_option *find(const vigil_create_args *args, const char *name) {
    size_t i, len = strlen(name);
    for (i = 0; args->options != NULL && i < args->option_count; i++)
        if (args->options[i].name.len == len && memcmp(args->options[i].name.ptr, name, len) == 0)
            return &args->options[i];
    return NULL;
}

static int64_t int_option(const vigil_create_args *args, const char *name, int64_t fallback) {
    const vigil_option *o = find(args, name);
    return o != NULL && o->value.type == VIGIL_TYPE_INT ? o->value.as.i64 : fallback;
}

static vigil_status flood_create(const vigil_create_args *args, void **out, vigil_error *err) {
    flood *f;
    int64_t count = int_option(args, "count", 1000000), rate = int_option(args, "rate", 0);
    int64_t fields_n = int_option(args, "fields", 1), threads = int_option(args, "threads", 1);
    int64_t entities = int_option(args, "entities", 0);
    if (count < 0 || rate < 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "count and rate must not be negative");
    if (fields_n < 1 || fields_n > MAX_FIELDS)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "fields must be 1 to %d, not %lld",
                               MAX_FIELDS, (long long)fields_n);
    if (entities < 0 || entities > 1000000)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "entities must be 0 to 1000000, not %lld", (long long)entities);
    if (threads < 1 || threads > MAX_THREADS)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "threads must be 1 to %d, not %lld",
                               MAX_THREADS, (long long)threads);
    f = calloc(1, sizeof *f);
    if (f == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    f->host = args->host;
    f->api = args->api;
    f->count = count;
    f->rate = rate;
    f->entities = entities;
    f->fields = (int)fields_n;
    f->threads = (int)threads;
    pthread_mutex_init(&f->lock, NULL);
    *out = f;
    return VIGIL_OK;
}

static vigil_status flood_stop(void *self, vigil_error *err);

static vigil_status flood_start(void *self, vigil_error *err) {
    flood *f = self;
    int i;
    if (f->running)
        return VIGIL_OK;
    f->stopping = 0;
    f->done = 0;
    for (i = 0; i < f->threads; i++) {
        pusher *p = &f->pushers[i];
        p->owner = f;
        p->index = i;
        p->started = 0;
        /* Split the count; the first threads take the remainder. */
        p->count = f->count == 0 ? 0 : f->count / f->threads + (i < f->count % f->threads ? 1 : 0);
        if (p->count == 0 && f->count != 0) {
            /* Fewer events than threads: this one has nothing to do. */
            pthread_mutex_lock(&f->lock);
            f->done++;
            pthread_mutex_unlock(&f->lock);
            continue;
        }
        if (pthread_create(&p->thread, NULL, push, p) != 0) {
            f->running = 1;
            flood_stop(f, NULL);
            return vigil_error_set(err, VIGIL_E_FATAL, "cannot start thread %d", i);
        }
        p->started = 1;
    }
    f->running = 1;
    return VIGIL_OK;
}

static vigil_status flood_stop(void *self, vigil_error *err) {
    flood *f = self;
    int i;
    (void)err;
    if (!f->running)
        return VIGIL_OK;
    pthread_mutex_lock(&f->lock);
    f->stopping = 1;
    pthread_mutex_unlock(&f->lock);
    for (i = 0; i < f->threads; i++) {
        if (f->pushers[i].started)
            pthread_join(f->pushers[i].thread, NULL);
        f->pushers[i].started = 0;
    }
    f->running = 0;
    return VIGIL_OK;
}

static void flood_destroy(void *self) {
    flood *f = self;
    flood_stop(f, NULL);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_MONITOR,
    .name = VIGIL_STR("flood"),
    .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("Benchmark load: emits events as fast as asked from its own threads, then finishes"),
    .options = options,
    .option_count = sizeof options / sizeof options[0],
    .events = events,
    .event_count = 1,
    .default_interval_ns = 0,
    .create = flood_create,
    .start = flood_start,
    .poll = NULL, /* push only */
    .stop = flood_stop,
    .destroy = flood_destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
