/*
 * heartbeat.c — the reference Vigil monitor plugin, in plain C99.
 *
 * It shows everything a C plugin needs and nothing more:
 *   - a static self-description (options, event kinds, callbacks);
 *   - reading and validating options by name in create;
 *   - a polled event (`beat`, emitted by poll);
 *   - pushed events (`push`, emitted by threads the instance owns), with a
 *     start/stop pair that is idempotent and joins every thread in stop.
 *
 * Build:
 *   cc -std=c99 -Wall -Wextra -Werror -pedantic -shared -fPIC -pthread \
 *      -I Sources/CVigilPlugin/include Plugins/heartbeat/heartbeat.c -o heartbeat.so
 *
 * The only global data is the const self-description: everything else lives
 * in the instance, so any number of instances can run side by side.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, pthreads */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vigil_plugin.h"

#define MAX_THREADS 64

/* ------------------------------------------------------- self-description */

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("threads"), .default_text = VIGIL_STR("0"),
      .doc = VIGIL_STR("Number of threads that push events of their own (0-64).") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_DURATION,
      .name = VIGIL_STR("push_interval"), .default_text = VIGIL_STR("100ms"),
      .doc = VIGIL_STR("How often each push thread emits a push event.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING,
      .name = VIGIL_STR("message"), .default_text = VIGIL_STR("alive"),
      .doc = VIGIL_STR("A string copied into each beat event.") },
};

static const vigil_field_spec beat_fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("count"), .unit = VIGIL_STR("count"),
      .doc = VIGIL_STR("Beats emitted by this instance so far, this one included."),
      .flags = VIGIL_FIELD_COUNTER },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING,
      .name = VIGIL_STR("message"),
      .doc = VIGIL_STR("The configured message.") },
};

static const vigil_field_spec push_fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("thread"),
      .doc = VIGIL_STR("Index of the pushing thread, from 0."), .flags = VIGIL_FIELD_IDENTITY },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("count"), .unit = VIGIL_STR("count"),
      .doc = VIGIL_STR("Events pushed by this thread since start, this one included."),
      .flags = VIGIL_FIELD_COUNTER },
};

static const vigil_event_spec events[] = {
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("beat"),
      .doc = VIGIL_STR("One per poll."),
      .fields = beat_fields, .field_count = sizeof beat_fields / sizeof beat_fields[0] },
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("push"),
      .doc = VIGIL_STR("One per push_interval from each push thread."),
      .fields = push_fields, .field_count = sizeof push_fields / sizeof push_fields[0] },
};

/* ----------------------------------------------------------------- instance */

typedef struct heartbeat heartbeat;

typedef struct pusher {
    heartbeat *hb;
    int64_t index;
    pthread_t thread;
} pusher;

struct heartbeat {
    vigil_host_ctx *host;       /* valid for the life of the instance */
    const vigil_host_api *api;  /* idem */

    /* Options, validated and copied in create. */
    int64_t threads;
    int64_t push_interval_ns;
    char *message;
    size_t message_len;

    /* Only poll touches this; the host never runs two calls of one instance
     * at once, so it needs no lock. */
    int64_t beats;

    /* Only start and stop touch these (same reason). */
    int running;
    int64_t started; /* threads actually running */

    /* Shared with the push threads. */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* signalled when `stopping` is set */
    int stopping;        /* guarded by `lock` */

    pusher pushers[];    /* `threads` of them */
};

/* ------------------------------------------------------------------ options */

static const vigil_option *find_option(const vigil_create_args *args, const char *name) {
    size_t i, len = strlen(name);
    for (i = 0; args->options != NULL && i < args->option_count; i++) {
        vigil_str n = args->options[i].name;
        if (n.len == len && memcmp(n.ptr, name, len) == 0)
            return &args->options[i];
    }
    return NULL;
}

/* Reads an INT or DURATION option; `fallback` when absent (the host fills in
 * defaults, so that only happens with an unusual host). */
static vigil_status option_i64(const vigil_create_args *args, const char *name,
                               vigil_type type, int64_t fallback, int64_t *out,
                               vigil_error *err) {
    const vigil_option *o = find_option(args, name);
    *out = fallback;
    if (o == NULL || o->value.type == VIGIL_TYPE_NONE)
        return VIGIL_OK;
    if (o->value.type != (uint32_t)type)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "option %s: unexpected value type %u", name,
                               (unsigned)o->value.type);
    *out = o->value.as.i64;
    return VIGIL_OK;
}

/* ---------------------------------------------------------------- callbacks */

static vigil_status heartbeat_stop(void *instance, vigil_error *err);

static vigil_status heartbeat_create(const vigil_create_args *in, void **instance,
                                     vigil_error *err) {
    vigil_create_args args;
    const vigil_option *msg;
    vigil_str text = VIGIL_STR("alive");
    int64_t threads, interval;
    vigil_status status;
    heartbeat *hb;

    /* The size rule: copy what the host gave into a zeroed struct of our own
     * layout, so that a field the host did not send reads as zero. */
    memset(&args, 0, sizeof args);
    memcpy(&args, in, in->size < sizeof args ? in->size : sizeof args);
    if (args.api == NULL)
        return vigil_error_set(err, VIGIL_E_FATAL, "create: the host passed no api table");

    if ((status = option_i64(&args, "threads", VIGIL_TYPE_INT, 0, &threads, err)) != VIGIL_OK ||
        (status = option_i64(&args, "push_interval", VIGIL_TYPE_DURATION, 100000000,
                             &interval, err)) != VIGIL_OK)
        return status;
    if (threads < 0 || threads > MAX_THREADS)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "threads must be between 0 and %d, not %lld",
                               MAX_THREADS, (long long)threads);
    if (interval < 1000000)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "push_interval must be at least 1ms, not %lldns",
                               (long long)interval);
    msg = find_option(&args, "message");
    if (msg != NULL && msg->value.type == VIGIL_TYPE_STRING)
        text = msg->value.as.str;
    else if (msg != NULL && msg->value.type != VIGIL_TYPE_NONE)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "option message: unexpected value type %u",
                               (unsigned)msg->value.type);

    hb = calloc(1, sizeof *hb + (size_t)threads * sizeof hb->pushers[0]);
    if (hb == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    /* Options are borrowed for the call: copy the string (it may contain NUL
     * bytes, so copy by length, never with strdup). */
    hb->message = malloc(text.len + 1);
    if (hb->message == NULL) {
        free(hb);
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    }
    if (text.len > 0)
        memcpy(hb->message, text.ptr, text.len);
    hb->message[text.len] = '\0';
    hb->message_len = text.len;

    if (pthread_mutex_init(&hb->lock, NULL) != 0) {
        free(hb->message);
        free(hb);
        return vigil_error_set(err, VIGIL_E_FATAL, "pthread_mutex_init failed");
    }
    if (pthread_cond_init(&hb->wake, NULL) != 0) {
        pthread_mutex_destroy(&hb->lock);
        free(hb->message);
        free(hb);
        return vigil_error_set(err, VIGIL_E_FATAL, "pthread_cond_init failed");
    }
    hb->host = args.host;
    hb->api = args.api;
    hb->threads = threads;
    hb->push_interval_ns = interval;
    *instance = hb;
    return VIGIL_OK;
}

static void emit_push(const pusher *p, int64_t count) {
    vigil_field fields[2] = {
        { .name = VIGIL_STR("thread"),
          .value = { .type = VIGIL_TYPE_INT, .as.i64 = p->index } },
        { .name = VIGIL_STR("count"),
          .value = { .type = VIGIL_TYPE_INT, .as.i64 = count } },
    };
    vigil_event event = {
        .size = sizeof(vigil_event), .severity = VIGIL_SEVERITY_INFO,
        .kind = VIGIL_STR("push"), .time_ns = 0, /* 0: the host stamps it */
        .fields = fields, .field_count = 2,
    };
    /* A refusal (VIGIL_E_STOPPED) only means that stop is on its way. */
    (void)p->hb->api->emit(p->hb->host, &event);
}

/* Body of one push thread: sleep push_interval (or until stop), emit, repeat. */
static void *push_main(void *arg) {
    pusher *p = arg;
    heartbeat *hb = p->hb;
    int64_t count = 0;

    pthread_mutex_lock(&hb->lock);
    while (!hb->stopping) {
        struct timespec deadline;
        int rc = 0;

        /* Condition variables wait on CLOCK_REALTIME by default. */
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += (time_t)(hb->push_interval_ns / 1000000000);
        deadline.tv_nsec += (long)(hb->push_interval_ns % 1000000000);
        if (deadline.tv_nsec >= 1000000000) {
            deadline.tv_sec += 1;
            deadline.tv_nsec -= 1000000000;
        }
        /* Loop: pthread_cond_timedwait may wake up spuriously. */
        while (!hb->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&hb->wake, &hb->lock, &deadline);
        if (hb->stopping)
            break;

        /* Never hold a lock while calling the host: emit may block (a sink
         * with `overflow: block`), and stop must still be able to run. */
        pthread_mutex_unlock(&hb->lock);
        emit_push(p, ++count);
        pthread_mutex_lock(&hb->lock);
    }
    pthread_mutex_unlock(&hb->lock);
    return NULL;
}

static vigil_status heartbeat_start(void *instance, vigil_error *err) {
    heartbeat *hb = instance;
    char line[64];
    int rc;

    if (hb->running) /* start on a started instance is harmless */
        return VIGIL_OK;

    hb->stopping = 0; /* no thread runs yet: no lock needed */
    hb->running = 1;  /* so that heartbeat_stop cleans up a partial start */
    for (hb->started = 0; hb->started < hb->threads; hb->started++) {
        pusher *p = &hb->pushers[hb->started];
        p->hb = hb;
        p->index = hb->started;
        rc = pthread_create(&p->thread, NULL, push_main, p);
        if (rc != 0) {
            heartbeat_stop(hb, NULL); /* join the threads already started */
            return vigil_error_set(err, VIGIL_E_FATAL,
                                   "cannot start push thread %lld (error %d)",
                                   (long long)p->index, rc);
        }
    }

    /* No snapshot here: the host polls once right after a successful start.
     * (log is an ABI 1.0 member, so this check always passes; it is the
     * pattern to follow for members that later minors append.) */
    if (VIGIL_HOST_HAS(hb->api, log)) {
        snprintf(line, sizeof line, "started %lld push thread(s)", (long long)hb->started);
        hb->api->log(hb->host, VIGIL_LOG_INFO, vigil_str_from_cstr(line));
    }
    return VIGIL_OK;
}

static vigil_status heartbeat_poll(void *instance, vigil_error *err) {
    heartbeat *hb = instance;
    vigil_status status;

    hb->beats++;
    vigil_field fields[2] = {
        { .name = VIGIL_STR("count"),
          .value = { .type = VIGIL_TYPE_INT, .as.i64 = hb->beats } },
        { .name = VIGIL_STR("message"),
          .value = { .type = VIGIL_TYPE_STRING,
                     .as.str = { hb->message, hb->message_len } } },
    };
    vigil_event event = {
        .size = sizeof(vigil_event), .severity = VIGIL_SEVERITY_INFO,
        .kind = VIGIL_STR("beat"), .time_ns = 0,
        .fields = fields, .field_count = 2,
    };

    /* emit copies the event: `fields` may go out of scope right after. */
    status = hb->api->emit(hb->host, &event);
    if (status != VIGIL_OK)
        return vigil_error_set(err, VIGIL_E_TEMPORARY,
                               "the host refused a beat (status %d)", (int)status);
    return VIGIL_OK;
}

static vigil_status heartbeat_stop(void *instance, vigil_error *err) {
    heartbeat *hb = instance;
    int64_t i;

    (void)err;
    if (!hb->running) /* stop on a stopped instance is harmless */
        return VIGIL_OK;

    pthread_mutex_lock(&hb->lock);
    hb->stopping = 1;
    pthread_cond_broadcast(&hb->wake);
    pthread_mutex_unlock(&hb->lock);

    /* Not before every thread is gone: after stop returns, nothing of this
     * instance may call the host. */
    for (i = 0; i < hb->started; i++)
        pthread_join(hb->pushers[i].thread, NULL);
    hb->started = 0;
    hb->running = 0;
    return VIGIL_OK;
}

static void heartbeat_destroy(void *instance) {
    heartbeat *hb = instance;

    if (hb == NULL)
        return;
    heartbeat_stop(hb, NULL); /* never needed with a correct host; cheap */
    pthread_cond_destroy(&hb->wake);
    pthread_mutex_destroy(&hb->lock);
    free(hb->message);
    free(hb);
}

/* ------------------------------------------------------------------- entry */

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_MONITOR,
    .name = VIGIL_STR("heartbeat"),
    .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("Emits a beat every interval, and pushes from threads of its own."),
    .options = options,
    .option_count = sizeof options / sizeof options[0],
    .events = events,
    .event_count = sizeof events / sizeof events[0],
    .default_interval_ns = 1000000000, /* 1s */
    .create = heartbeat_create,
    .start = heartbeat_start,
    .poll = heartbeat_poll,
    .stop = heartbeat_stop,
    .destroy = heartbeat_destroy,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args,
                                             vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
