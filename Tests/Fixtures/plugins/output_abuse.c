/* output_abuse.c — ABI test fixture: an output plugin that abuses what the
 * host lends it and what it may hand back, chosen by its `mode` option:
 *   scribble     writes over the batch it was lent (every event's strings, fields, counts and
 *                pointers, the batch's own fields) and the result's size, verdict and reserved
 *                word, then answers OK for every event through the host's per_event array;
 *   mix          on attempt 1 answers per event by seq % 4: OK, REJECT, 77 (unknown: a retry),
 *                RETRY, with per_event_used = 0xFFFFFFFF and retry_after_ns = `retry_after`;
 *                on later attempts OK; a 4 KiB unterminated, invalid UTF-8 message with the rejects;
 *   status       returns `status` (any 32-bit value) from every write, with an error message that
 *                fills the whole buffer without a NUL (invalid UTF-8 and control bytes);
 *   status_once  returns `status` from the first write only, then delivers;
 *   talk         from each write: 200 logs of 1 MiB each (no NUL, invalid UTF-8), a log at level
 *                0x7FFFFFFF and at -1, a log with a NULL pointer and a non-zero length, emit of a
 *                real event and of NULL, set_availability and finished; a thread made in create
 *                logs until the process ends (never joined: it goes on past destroy);
 *   slow         sleeps `sleep_ms` in every write, then delivers;
 *   retry        RETRY for every event with retry_after_ns = `retry_after`;
 * and, in any mode, `hang` or `crash` names the call (create, start, stop, destroy, flush,
 * write) that never returns or raises SIGSEGV; `flush_status` is what flush returns;
 * `ignore_term` makes create ignore SIGTERM (in a runner: it answers until the SIGKILL).
 * Delivered events (OK) are appended to `path`, one seq a line. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "vigil_plugin.h"

typedef struct {
    char mode[32], hang[16], crash[16];
    int64_t status, retry_after, sleep_ms, flush_status, ignore_term;
    int writes;
    FILE *out;
    vigil_host_ctx *host;
    const vigil_host_api *api;
} output;

#define OPT(t, n, d, doc_) { .size = sizeof(vigil_option_spec), .type = (t), .name = VIGIL_STR(n), \
                             .default_text = VIGIL_STR(d), .doc = VIGIL_STR(doc_) }
static const vigil_option_spec options[] = {
    OPT(VIGIL_TYPE_STRING, "mode", "scribble", "scribble, mix, status, status_once, talk, slow or retry."),
    OPT(VIGIL_TYPE_INT, "status", "1", "What status and status_once return from write."),
    OPT(VIGIL_TYPE_INT, "retry_after", "0", "retry_after_ns of mix and retry."),
    OPT(VIGIL_TYPE_INT, "sleep_ms", "0", "How long slow sleeps in each write."),
    OPT(VIGIL_TYPE_INT, "flush_status", "0", "What flush returns."),
    OPT(VIGIL_TYPE_STRING, "hang", "none", "The call that never returns."),
    OPT(VIGIL_TYPE_STRING, "crash", "none", "The call that raises SIGSEGV."),
    OPT(VIGIL_TYPE_BOOL, "ignore_term", "false", "Ignore SIGTERM from create on."),
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("path"),
      .doc = VIGIL_STR("Append each delivered event's seq to this file.") },
};

static int is(const vigil_option *o, const char *name) {
    return o->name.len == strlen(name) && memcmp(o->name.ptr, name, o->name.len) == 0;
}

static void copy(char *to, size_t size, vigil_str s) {
    size_t n = s.len < size - 1 ? s.len : size - 1;
    memcpy(to, s.ptr, n);
    to[n] = 0;
}

static void fault(output *o, const char *call) {
    if (strcmp(o->crash, call) == 0) raise(SIGSEGV);
    if (strcmp(o->hang, call) == 0)
        for (;;) pause();
}

static void *chatter(void *arg) {
    output *o = arg;
    vigil_host_ctx *host = o->host;
    const vigil_host_api *api = o->api;
    static const char line[] = "from a thread that is never joined";
    for (;;) {
        api->log(host, VIGIL_LOG_DEBUG, (vigil_str)VIGIL_STR(line));
        struct timespec t = { 0, 1000000L };
        nanosleep(&t, NULL);
    }
    return NULL;
}

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    output *o = calloc(1, sizeof *o);
    if (o == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    o->host = args->host;
    o->api = args->api;
    for (size_t i = 0; i < args->option_count; i++) {
        const vigil_option *opt = &args->options[i];
        if (is(opt, "mode")) copy(o->mode, sizeof o->mode, opt->value.as.str);
        if (is(opt, "hang")) copy(o->hang, sizeof o->hang, opt->value.as.str);
        if (is(opt, "crash")) copy(o->crash, sizeof o->crash, opt->value.as.str);
        if (is(opt, "status")) o->status = opt->value.as.i64;
        if (is(opt, "retry_after")) o->retry_after = opt->value.as.i64;
        if (is(opt, "sleep_ms")) o->sleep_ms = opt->value.as.i64;
        if (is(opt, "flush_status")) o->flush_status = opt->value.as.i64;
        if (is(opt, "ignore_term")) o->ignore_term = opt->value.as.boolean;
        if (is(opt, "path") && opt->value.type == VIGIL_TYPE_STRING && opt->value.as.str.len > 0) {
            char path[4096];
            copy(path, sizeof path, opt->value.as.str);
            o->out = fopen(path, "a");
        }
    }
    fault(o, "create");
    if (o->ignore_term) signal(SIGTERM, SIG_IGN);
    if (strcmp(o->mode, "talk") == 0) {
        pthread_t thread;
        pthread_create(&thread, NULL, chatter, o);
        pthread_detach(thread);
    }
    *instance = o;
    return VIGIL_OK;
}

static vigil_status start(void *instance, vigil_error *err) {
    (void)err;
    fault(instance, "start");
    return VIGIL_OK;
}

static vigil_status stop(void *instance, vigil_error *err) {
    (void)err;
    fault(instance, "stop");
    return VIGIL_OK;
}

static void deliver(output *o, const char *events, size_t stride, size_t count, const uint8_t *verdicts) {
    if (o->out == NULL) return;
    for (size_t i = 0; i < count; i++)
        if (verdicts == NULL || verdicts[i] == VIGIL_WRITE_OK)
            fprintf(o->out, "%llu\n", (unsigned long long)((const vigil_output_event *)(events + i * stride))->seq);
    fflush(o->out);
}

/* Fills the whole error buffer: invalid UTF-8, control bytes, no NUL. */
static void garbage_message(vigil_error *err) {
    if (err == NULL || err->message == NULL) return;
    for (size_t i = 0; i < err->capacity; i++) err->message[i] = (char)(i % 3 == 0 ? 0xFF : i % 3 == 1 ? 0x1B : 'x');
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    output *o = instance;
    o->writes++;
    fault(o, "write");
    const char *events = (const char *)batch->events;
    size_t stride = batch->event_size, count = batch->count;
    uint8_t *verdicts = result->per_event;
    if (strcmp(o->mode, "scribble") == 0) {
        deliver(o, events, stride, count, NULL);
        for (size_t i = 0; i < count; i++) {
            vigil_output_event *e = (vigil_output_event *)(events + i * stride);
            for (size_t f = 0; f < e->field_count; f++) {
                vigil_field *field = (vigil_field *)&e->fields[f];
                memset((char *)field->name.ptr, 0xFF, field->name.len);
                if (field->value.type == VIGIL_TYPE_STRING) memset((char *)field->value.as.str.ptr, 0, field->value.as.str.len);
                field->name.len = SIZE_MAX;
                field->value.type = 0x7FFFFFFF;
            }
            memset((char *)e->kind.ptr, 0xC0, e->kind.len);
            memset((char *)e->monitor.ptr, 0, e->monitor.len);
            e->kind.len = SIZE_MAX;
            e->fields = NULL;
            e->field_count = SIZE_MAX;
            e->seq = UINT64_MAX;
            e->size = 0;
        }
        vigil_batch *b = (vigil_batch *)batch;
        b->count = SIZE_MAX;
        b->event_size = 0;
        b->events = NULL;
        b->size = 0xFFFFFFFF;
        memset(verdicts, VIGIL_WRITE_OK, count);
        result->size = 0;
        /* per_event is left where the host put it: moved, the answers are
         * not read and the write fails (output_hostile's moved_per_event). */
        result->per_event_used = 1;
        result->reserved = 0xFFFFFFFF;
        result->verdict = 0xFFFFFFFF;
        if (err != NULL) { err->message = NULL; err->capacity = SIZE_MAX; err->size = 0; }
        return VIGIL_OK;
    }
    if (strcmp(o->mode, "mix") == 0) {
        if (batch->attempt == 1) {
            static const uint8_t pattern[4] = { VIGIL_WRITE_OK, VIGIL_WRITE_REJECT, 77, VIGIL_WRITE_RETRY };
            for (size_t i = 0; i < count; i++)
                verdicts[i] = pattern[((const vigil_output_event *)(events + i * stride))->seq % 4];
            result->per_event_used = 0xFFFFFFFF;
            result->retry_after_ns = o->retry_after;
            result->verdict = VIGIL_WRITE_REJECT;
            if (err != NULL && err->message != NULL && err->capacity > 0) {
                memset(err->message, 0xFE, err->capacity);
            }
        }
        deliver(o, events, stride, count, result->per_event_used ? verdicts : NULL);
        return VIGIL_OK;
    }
    if (strcmp(o->mode, "status") == 0 || (strcmp(o->mode, "status_once") == 0 && o->writes == 1)) {
        garbage_message(err);
        return (vigil_status)o->status;
    }
    if (strcmp(o->mode, "talk") == 0) {
        static char big[1 << 20];
        memset(big, 0xFF, sizeof big);
        memcpy(big, "\x1b[31mforged\n2026-01-01 vigil: critical", 38);
        for (int i = 0; i < 200; i++) o->api->log(o->host, VIGIL_LOG_ERROR, (vigil_str){ big, sizeof big });
        o->api->log(o->host, (vigil_log_level)0x7FFFFFFF, (vigil_str)VIGIL_STR("level max"));
        o->api->log(o->host, (vigil_log_level)-1, (vigil_str)VIGIL_STR("level -1"));
        o->api->log(o->host, VIGIL_LOG_INFO, (vigil_str){ NULL, 100 });
        vigil_field field = { VIGIL_STR("x"), { .type = VIGIL_TYPE_INT, .as.i64 = 1 } };
        vigil_event event = { .size = sizeof event, .kind = VIGIL_STR("sample"), .fields = &field, .field_count = 1 };
        if (o->api->emit(o->host, &event) != VIGIL_E_UNSUPPORTED) abort();
        (void)o->api->emit(o->host, NULL);
        o->api->set_availability(o->host, 0, (vigil_str){ big, sizeof big });
        if (VIGIL_HOST_HAS(o->api, finished)) o->api->finished(o->host);
        deliver(o, events, stride, count, NULL);
        return VIGIL_OK;
    }
    if (strcmp(o->mode, "slow") == 0) {
        struct timespec t = { (time_t)(o->sleep_ms / 1000), (long)(o->sleep_ms % 1000) * 1000000L };
        while (nanosleep(&t, &t) != 0) {}
        deliver(o, events, stride, count, NULL);
        return VIGIL_OK;
    }
    if (strcmp(o->mode, "retry") == 0) {
        result->verdict = VIGIL_WRITE_RETRY;
        result->retry_after_ns = o->retry_after;
        return VIGIL_OK;
    }
    deliver(o, events, stride, count, NULL);
    return VIGIL_OK;
}

static vigil_status flush(void *instance, int64_t deadline_ns, vigil_error *err) {
    (void)deadline_ns;
    output *o = instance;
    fault(o, "flush");
    if (o->flush_status != 0) garbage_message(err);
    return (vigil_status)o->flush_status;
}

static void destroy(void *instance) {
    output *o = instance;
    fault(o, "destroy");
    if (o->out != NULL) fclose(o->out);
    /* Not freed: the `talk` thread still reads it. */
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_abuse"), .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("ABI test fixture: an output that abuses what it is lent and hands back."),
    .options = options, .option_count = sizeof options / sizeof options[0],
    .create = create, .start = start, .stop = stop, .destroy = destroy, .write = write_batch, .flush = flush,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
