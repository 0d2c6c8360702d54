/* output_hostile.c — ABI test fixture: an output plugin that answers what a
 * careless or hostile one might, chosen by its `mode` option:
 *   ok             OK for every batch (delivers it);
 *   retry_forever  RETRY for every batch, asking to wait INT64_MAX ns;
 *   garbage        per-event verdicts of 200 (no such verdict), per_event_used = 7;
 *   fatal          VIGIL_E_FATAL from the third write on (the first two deliver);
 *   moved_per_event REJECT per event, in an array of its own that it points `per_event` at;
 *   overclaim      OK for the batch, and writes verdicts past its end into nothing it owns (it must not:
 *                  it only sets per_event_used without writing, leaving the host's OK preset);
 * and what only a runner survives, on the `at`-th write call of its process (before it delivers
 * anything of that batch), or only the first time when `once` names a file that does not exist yet
 * (made then, so across runners the fault happens once):
 *   crash_in_write raise(SIGSEGV);
 *   hang_in_write  never return;
 *   exit_in_write  exit(7);
 *   crash_on_seq   raise(SIGSEGV) whenever the batch holds seq `poison` (a batch that always kills);
 *   noisy          every write prints binary garbage on stdout and stderr, then delivers;
 *   fork_in_write  fork a child that sleeps for an hour holding every descriptor (its pid into `once`),
 *                  then deliver.
 *   crash_in_flush raise(SIGSEGV) in the `at`-th flush call of its process (with `once`: once);
 *   leak_in_write  from that write on, each write keeps 16 MiB it has touched, then delivers;
 *   spin_in_write  spin on the CPU for ever.
 * Delivered events (OK) are appended to `path`, one seq a line, before the call returns; each flush
 * appends a line "flush". */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include "vigil_plugin.h"

typedef struct {
    char mode[32];
    char once[1024];
    int64_t at, poison;
    int writes, flushes;
    FILE *out;
} output;

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("mode"),
      .default_text = VIGIL_STR("retry_forever"),
      .doc = VIGIL_STR("retry_forever, garbage, fatal, overclaim, crash_in_write, hang_in_write, exit_in_write, crash_on_seq, noisy, fork_in_write or crash_in_flush.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("at"),
      .default_text = VIGIL_STR("3"), .doc = VIGIL_STR("The write call of this process the fault happens in.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("once"),
      .doc = VIGIL_STR("A file made at the fault: when it exists, no fault.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("poison"),
      .default_text = VIGIL_STR("0"), .doc = VIGIL_STR("crash_on_seq: the seq whose batch crashes.") },
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

static vigil_status create(const vigil_create_args *args, void **instance, vigil_error *err) {
    output *o = calloc(1, sizeof *o);
    if (o == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    strcpy(o->mode, "retry_forever");
    o->at = 3;
    for (size_t i = 0; i < args->option_count; i++) {
        const vigil_option *opt = &args->options[i];
        if (is(opt, "mode") && opt->value.type == VIGIL_TYPE_STRING) copy(o->mode, sizeof o->mode, opt->value.as.str);
        if (is(opt, "once") && opt->value.type == VIGIL_TYPE_STRING) copy(o->once, sizeof o->once, opt->value.as.str);
        if (is(opt, "at")) o->at = opt->value.as.i64;
        if (is(opt, "poison")) o->poison = opt->value.as.i64;
        if (is(opt, "path") && opt->value.type == VIGIL_TYPE_STRING && opt->value.as.str.len > 0) {
            char path[4096];
            copy(path, sizeof path, opt->value.as.str);
            o->out = fopen(path, "a");
            if (o->out == NULL) {
                free(o);
                return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.path: cannot open %s", path);
            }
        }
    }
    *instance = o;
    return VIGIL_OK;
}

/* Whether this call (the `n`-th of its kind) is the one the fault happens in. */
static int fault_at(output *o, int n) {
    if (n != o->at) return 0;
    if (o->once[0] == 0) return 1;
    int fd = open(o->once, O_CREAT | O_EXCL | O_WRONLY, 0644);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

/* What leak_in_write keeps, each block pointing at the one before. */
static void *volatile leaked;

static int fault_now(output *o) { return fault_at(o, o->writes); }

static void deliver(output *o, const vigil_batch *batch) {
    if (o->out == NULL) return;
    const char *at = (const char *)batch->events;
    for (size_t i = 0; i < batch->count; i++, at += batch->event_size)
        fprintf(o->out, "%llu\n", (unsigned long long)((const vigil_output_event *)at)->seq);
    fflush(o->out);
}

static vigil_status write_batch(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err) {
    output *o = instance;
    o->writes++;
    if (strcmp(o->mode, "ok") == 0) {
        deliver(o, batch);
    } else if (strcmp(o->mode, "retry_forever") == 0) {
        result->verdict = VIGIL_WRITE_RETRY;
        result->retry_after_ns = INT64_MAX;
    } else if (strcmp(o->mode, "garbage") == 0) {
        memset(result->per_event, 200, batch->count);
        result->per_event_used = 7;
        result->verdict = 99;
    } else if (strcmp(o->mode, "fatal") == 0) {
        if (o->writes >= 3) return vigil_error_set(err, VIGIL_E_FATAL, "the peer is gone for good");
        deliver(o, batch);
    } else if (strcmp(o->mode, "moved_per_event") == 0) {
        static uint8_t mine[4096];
        memset(mine, VIGIL_WRITE_REJECT, sizeof mine);
        result->per_event = mine;
        result->per_event_used = 1;
    } else if (strcmp(o->mode, "overclaim") == 0) {
        result->per_event_used = 1;
    } else if (strcmp(o->mode, "crash_in_write") == 0) {
        if (fault_now(o)) raise(SIGSEGV);
        deliver(o, batch);
    } else if (strcmp(o->mode, "hang_in_write") == 0) {
        if (fault_now(o))
            for (;;) pause();
        deliver(o, batch);
    } else if (strcmp(o->mode, "exit_in_write") == 0) {
        if (fault_now(o)) exit(7);
        deliver(o, batch);
    } else if (strcmp(o->mode, "crash_on_seq") == 0) {
        const char *at = (const char *)batch->events;
        for (size_t i = 0; i < batch->count; i++, at += batch->event_size)
            if (((const vigil_output_event *)at)->seq == (uint64_t)o->poison) raise(SIGSEGV);
        deliver(o, batch);
    } else if (strcmp(o->mode, "noisy") == 0) {
        static const char junk[] = "\x01\xff\xfe garbage \x1b[31m\x00\x7f\n";
        (void)!write(1, junk, sizeof junk);
        (void)!write(2, junk, sizeof junk);
        deliver(o, batch);
    } else if (strcmp(o->mode, "fork_in_write") == 0) {
        if (fault_now(o)) {
            pid_t child = fork();
            if (child == 0) {
                sleep(3600);
                _exit(0);
            }
            if (o->once[0] != 0) { /* the child's pid, for a test to look for */
                FILE *f = fopen(o->once, "w");
                if (f != NULL) { fprintf(f, "%d\n", (int)child); fclose(f); }
            }
        }
        deliver(o, batch);
    } else if (strcmp(o->mode, "crash_in_flush") == 0) {
        deliver(o, batch);
    } else if (strcmp(o->mode, "leak_in_write") == 0) {
        if (o->writes >= o->at) {
            char *kept = malloc(16 << 20);
            if (kept != NULL) {
                memset(kept, 0x5a, 16 << 20);
                *(void **)kept = leaked; /* kept reachable: the leak cannot be optimised away */
                leaked = kept;
            }
        }
        deliver(o, batch);
    } else if (strcmp(o->mode, "spin_in_write") == 0) {
        if (fault_now(o))
            for (volatile uint64_t n = 0;; n++) {}
        deliver(o, batch);
    }
    return VIGIL_OK;
}

static vigil_status flush(void *instance, int64_t deadline_ns, vigil_error *err) {
    (void)deadline_ns;
    (void)err;
    output *o = instance;
    o->flushes++;
    if (strcmp(o->mode, "crash_in_flush") == 0 && fault_at(o, o->flushes)) raise(SIGSEGV);
    if (o->out != NULL) {
        fputs("flush\n", o->out);
        fflush(o->out);
    }
    return VIGIL_OK;
}

static void destroy(void *instance) {
    output *o = instance;
    if (o->out != NULL) fclose(o->out);
    free(o);
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor), .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("output_hostile"), .version = VIGIL_STR("1.0.0"), .description = VIGIL_STR("ABI test fixture: a hostile output."),
    .options = options, .option_count = sizeof options / sizeof options[0],
    .create = create, .destroy = destroy, .write = write_batch, .flush = flush,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
