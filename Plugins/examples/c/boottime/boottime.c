/*
 * boottime.c: a Vigil monitor plugin in C, and the C monitor scaffold:
 * `vigil new-plugin NAME --lang c` starts a plugin from a copy of this directory.
 *
 * What it does: every interval the host calls poll, which reads the first
 * number of PROCFS/uptime (seconds since boot; `procfs` is an option, "/proc"
 * by default) and emits one event of kind `sample`:
 *
 *     uptime           double  seconds since boot
 *     recently_booted  bool    uptime < the `recent` option (10m by default)
 *
 * It is a starting point: replace the file it reads and the event it emits
 * with your own, and keep the rest, which is what every plugin needs:
 *   - the self-description as static const data (options with type, default
 *     and doc; one event kind with typed fields and units);
 *   - create: the size rule for what the host passes in, options read by
 *     name, bad values refused with VIGIL_E_INVALID_CONFIG and a message that
 *     starts with "options.NAME: " (the host reports it at that option's line
 *     of the manifest), and the strings it keeps copied;
 *   - statuses that say what went wrong: a missing file is
 *     VIGIL_E_UNAVAILABLE (the source is not on this machine: the host
 *     reports it and retries, no error), unreadable content is
 *     VIGIL_E_TEMPORARY (counted, polling goes on);
 *   - idempotent start and stop; all state in the instance, so any number of
 *     instances can run side by side;
 *   - the entry point: one call to vigil_negotiate().
 *
 * The contract is vigil_plugin.h, next to this file: every field there says
 * who owns it and from which thread it is called. Build with `make`, test
 * with `make test`, check against a real host with `make check`.
 */

/* POSIX 2008 for strerror_r (the int-returning one). Before every #include. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vigil_plugin.h"

#define NS_PER_S INT64_C(1000000000)

/* ------------------------------------------------------- self-description */

/*
 * Everything the descriptor points to stays valid until the process exits
 * (the host never unloads a plugin): static const data. `size` is sizeof as
 * this file was compiled; a host built against another minor of the header
 * steps through the arrays by it. Defaults are written as a manifest would
 * write them; the host parses them and passes every option to create.
 */
static const vigil_option_spec boottime_options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING,
      .name = VIGIL_STR("procfs"), .default_text = VIGIL_STR("/proc"),
      .doc = VIGIL_STR("Root of the proc filesystem; the plugin reads PROCFS/uptime (a fixture directory in tests).") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_DURATION,
      .name = VIGIL_STR("recent"), .default_text = VIGIL_STR("10m"),
      .doc = VIGIL_STR("An uptime shorter than this counts as a recent boot (the recently_booted field); more than 0s.") },
};

/* In the order poll writes them: the host matches names in declared order
 * first. */
static const vigil_field_spec boottime_sample_fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_DOUBLE,
      .name = VIGIL_STR("uptime"), .unit = VIGIL_STR("seconds"),
      .doc = VIGIL_STR("Time since boot.") },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_BOOL,
      .name = VIGIL_STR("recently_booted"),
      .doc = VIGIL_STR("Whether the uptime is below the recent option.") },
};

static const vigil_event_spec boottime_events[] = {
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("sample"),
      .doc = VIGIL_STR("One per poll."),
      .fields = boottime_sample_fields,
      .field_count = sizeof boottime_sample_fields / sizeof boottime_sample_fields[0] },
};

/* ----------------------------------------------------------------- instance */

/* One instance: one `monitors:` entry of a manifest. The host never calls
 * into one instance twice at once, so it needs no lock; it may call
 * different instances in parallel, so nothing here is global. */
typedef struct boottime_instance {
    vigil_host_ctx *host;       /* from create; valid until destroy */
    const vigil_host_api *api;  /* likewise; its functions work from any thread */
    char *path;                 /* PROCFS/uptime, our own NUL-terminated copy */
    int64_t recent_ns;          /* the `recent` option */
    int running;                /* start succeeded and stop has not run since */
} boottime_instance;

/* ------------------------------------------------------------------ options */

/* The option named `name`, or NULL. The host passes every declared option, in
 * declared order, defaults filled in; looking up by name survives reordering. */
static const vigil_option *find_option(const vigil_create_args *args, const char *name) {
    size_t i, len = strlen(name);

    for (i = 0; args->options != NULL && i < args->option_count; i++) {
        vigil_str n = args->options[i].name;
        if (n.len == len && memcmp(n.ptr, name, len) == 0)
            return &args->options[i];
    }
    return NULL;
}

/* ------------------------------------------------------------------- create */

/*
 * Reads and checks the options and allocates the instance. No I/O: a missing
 * file is start's business (create also runs for `vigil validate`, on
 * machines that may not have the source). On failure nothing else is called
 * for this attempt, so free what was allocated before returning.
 */
static vigil_status boottime_create(const vigil_create_args *in, void **instance, vigil_error *err) {
    static const char file[] = "/uptime";
    vigil_create_args args;
    const vigil_option *o;
    vigil_str procfs = VIGIL_STR("/proc");
    int64_t recent_ns = 600 * NS_PER_S;
    boottime_instance *z;

    /* The size rule: the host set `size` to sizeof as *it* compiled the
     * struct. Copy at most our sizeof into a zeroed struct: a field an older
     * host does not have reads as 0, one a newer host added is ignored. */
    if (in == NULL || in->size < VIGIL_CREATE_ARGS_SIZE_1_0)
        return vigil_error_set(err, VIGIL_E_FATAL, "create: malformed arguments from the host");
    memset(&args, 0, sizeof args);
    memcpy(&args, in, in->size < sizeof args ? in->size : sizeof args);
    if (args.api == NULL || args.api->size < VIGIL_HOST_API_SIZE_1_0)
        return vigil_error_set(err, VIGIL_E_FATAL, "create: the host passed no usable function table");

    /* The host has checked each value's type against the declarations (a
     * `recent` of "soon" never gets here); NONE means unset without a
     * default, which cannot happen with our defaults but costs nothing to
     * accept. Ranges are ours to check. */
    if ((o = find_option(&args, "procfs")) != NULL && o->value.type == VIGIL_TYPE_STRING)
        procfs = o->value.as.str;
    if ((o = find_option(&args, "recent")) != NULL && o->value.type == VIGIL_TYPE_DURATION)
        recent_ns = o->value.as.i64;
    if (procfs.len == 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.procfs: must not be empty");
    /* A vigil_str is pointer + length and may hold a NUL: not for a path. */
    if (memchr(procfs.ptr, '\0', procfs.len) != NULL)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.procfs: must not contain a NUL byte");
    if (recent_ns <= 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.recent: must be more than 0s");

    z = calloc(1, sizeof *z);
    if (z == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    /* Everything create is passed is borrowed for the call: copy the path
     * (by length: it need not end with a NUL). */
    z->path = malloc(procfs.len + sizeof file);
    if (z->path == NULL) {
        free(z);
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    }
    memcpy(z->path, procfs.ptr, procfs.len);
    memcpy(z->path + procfs.len, file, sizeof file); /* with its NUL */

    z->host = args.host;
    z->api = args.api;
    z->recent_ns = recent_ns;
    *instance = z; /* plugin-owned; the host hands it back to every call */
    return VIGIL_OK;
}

/* ------------------------------------------------------------------ reading */

/*
 * Reads the first number of z->path into *seconds. A file that is not there
 * (or not for us) means the source is absent on this machine: UNAVAILABLE,
 * which the host reports, without an error, and retries. Content that does
 * not parse is TEMPORARY: counted and logged, and polling goes on.
 */
static vigil_status read_uptime(const boottime_instance *z, double *seconds, vigil_error *err) {
    char text[128], why[128], *end;
    size_t n;
    FILE *f = fopen(z->path, "r");

    if (f == NULL) {
        int error = errno;
        if (strerror_r(error, why, sizeof why) != 0)
            snprintf(why, sizeof why, "error %d", error);
        return vigil_error_set(err,
                               error == ENOENT || error == ENOTDIR || error == EACCES ? VIGIL_E_UNAVAILABLE
                                                                                     : VIGIL_E_TEMPORARY,
                               "cannot read %s: %s", z->path, why);
    }
    n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';

    /* "12345.67 54321.00\n": uptime, then idle time summed over all CPUs. */
    errno = 0;
    *seconds = strtod(text, &end);
    if (end == text || errno != 0 || !(*seconds >= 0) || (*end != ' ' && *end != '\n' && *end != '\0'))
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "%s: expected a number of seconds, found \"%.20s\"",
                               z->path, text);
    return VIGIL_OK;
}

/* ------------------------------------------------------ start, poll, stop */

/* Opens the source, here: checks that it can be read. A polled plugin
 * emits nothing here: the host polls right after start for the snapshot. */
static vigil_status boottime_start(void *instance, vigil_error *err) {
    boottime_instance *z = instance;
    double seconds;
    vigil_status status;

    if (z->running) /* start on a started instance: harmless */
        return VIGIL_OK;
    if ((status = read_uptime(z, &seconds, err)) != VIGIL_OK && status != VIGIL_E_TEMPORARY)
        return status; /* a failed start leaves the instance stopped */
    z->running = 1;
    return VIGIL_OK;
}

/* Reads the source and emits one event. */
static vigil_status boottime_poll(void *instance, vigil_error *err) {
    const boottime_instance *z = instance;
    double seconds;
    vigil_status status = read_uptime(z, &seconds, err);

    if (status != VIGIL_OK)
        return status;
    {
        /* The event lives on the stack: emit copies it before it returns. */
        vigil_field fields[2] = {
            { .name = VIGIL_STR("uptime"),
              .value = { .type = VIGIL_TYPE_DOUBLE, .as.f64 = seconds } },
            { .name = VIGIL_STR("recently_booted"),
              .value = { .type = VIGIL_TYPE_BOOL,
                         .as.boolean = seconds * (double)NS_PER_S < (double)z->recent_ns } },
        };
        vigil_event event = {
            .size = sizeof(vigil_event),
            .severity = VIGIL_SEVERITY_INFO,
            .kind = VIGIL_STR("sample"),
            .time_ns = 0, /* 0: the host stamps the event with its clock */
            .fields = fields,
            .field_count = sizeof fields / sizeof fields[0],
        };
        /* A refusal (VIGIL_E_STOPPED, VIGIL_E_INVALID_ARGUMENT) is a bug the
         * host already counts; there is nothing to retry. */
        (void)z->api->emit(z->host, &event);
    }
    return VIGIL_OK;
}

/* Closes the source: nothing to close here. After stop returns, nothing of
 * this instance may call the host (a plugin with threads joins them here). */
static vigil_status boottime_stop(void *instance, vigil_error *err) {
    boottime_instance *z = instance;

    (void)err;
    z->running = 0; /* stop on a stopped instance: harmless */
    return VIGIL_OK;
}

/* Frees the instance. Never called while started. */
static void boottime_destroy(void *instance) {
    boottime_instance *z = instance;

    if (z == NULL)
        return;
    free(z->path);
    free(z);
}

/* -------------------------------------------------------------------- entry */

static const vigil_plugin_descriptor boottime_descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_MONITOR,
    .name = VIGIL_STR("boottime"), /* manifests say `plugin: boottime` */
    .version = VIGIL_STR("0.1.0"),
    .description = VIGIL_STR("Seconds since boot, from PROCFS/uptime."),
    .options = boottime_options,
    .option_count = sizeof boottime_options / sizeof boottime_options[0],
    .events = boottime_events,
    .event_count = sizeof boottime_events / sizeof boottime_events[0],
    .default_interval_ns = 10 * NS_PER_S, /* when the manifest gives no interval */
    .create = boottime_create,
    .start = boottime_start,
    .poll = boottime_poll, /* NULL would make a push-only plugin */
    .stop = boottime_stop,
    .destroy = boottime_destroy,
};

/* The one exported symbol (VIGIL_EXPORT; -fvisibility=hidden keeps all else
 * private). The host may call it more than once and gets the same descriptor. */
VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &boottime_descriptor);
}

