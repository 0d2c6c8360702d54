/*
 * ticker.c: an example Vigil monitor plugin in C. Copy it to start your own.
 *
 * What it does: every `period`, a thread owned by the instance emits one event
 * of kind `tick`:
 *
 *     count    int     ticks since the instance was (last) started: 1, 2, 3...
 *     label    string  the `label` option, copied into every tick
 *     late_ms  double  how long after its scheduled time the tick was taken
 *     missed   int     scheduled ticks skipped because the thread woke up more
 *                      than a whole period late (0 on a healthy machine)
 *
 * After `limit` ticks (when it is not 0) it tells the host it has finished and
 * its thread ends.
 *
 * What it shows, with the reasons spelled out in the comments below:
 *   - the self-description: options (type, default, doc), one event kind with
 *     typed, documented fields and units; all static const data;
 *   - the entry point: one line, vigil_negotiate();
 *   - create: the size rule for structs the host passes in, reading options
 *     by name, rejecting bad values with VIGIL_E_INVALID_CONFIG and a message
 *     that starts with the option's path ("options.period: ..."), copying the
 *     strings it keeps (everything passed in is borrowed for the call);
 *   - a push monitor (descriptor `poll` is NULL): start starts a thread that
 *     emits; stop wakes it at once, even in the middle of a 1 h sleep, and
 *     joins it, so that nothing of the instance calls the host after stop
 *     returns; start and stop are idempotent;
 *   - calling a host function added by a later minor (`finished`, ABI 1.1)
 *     only when the host's table has it (VIGIL_HOST_HAS);
 *   - several instances side by side: all state is in the instance struct;
 *     the only globals are the const self-description.
 *
 * Build it against the header alone (a plugin never links against the host):
 *
 *     cc -std=c99 -Wall -Wextra -Werror -pedantic -O2 -fPIC -shared -pthread \
 *        -fvisibility=hidden -I Sources/CVigilPlugin/include \
 *        Plugins/examples/c/ticker.c -o ticker.so
 *
 * -fvisibility=hidden keeps every symbol private except the one VIGIL_EXPORT
 * marks, vigil_plugin_entry: `nm -D --defined-only ticker.so` shows no other
 * function (some linkers add their own _end, _edata, __bss_start).
 *
 * Linux only (timerfd, eventfd), like the host.
 */

/* POSIX 2008 for clock_gettime, pthreads, pthread_sigmask and the portable
 * (int-returning) strerror_r. Must come before every #include. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "vigil_plugin.h"

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)

/* Bounds of `period`. The upper one keeps "start time + period" far from
 * overflowing an int64 of nanoseconds. */
#define MIN_PERIOD_NS NS_PER_MS
#define MAX_PERIOD_NS (INT64_C(365) * 24 * 3600 * NS_PER_S)

/* ------------------------------------------------------- self-description */

/*
 * Everything the descriptor points to must stay valid and unchanged until the
 * process exits (the host never unloads a plugin), so it is all static const.
 * `size` is sizeof as *we* compiled the struct: a host built against another
 * minor of the header steps through these arrays by that size.
 *
 * Defaults are written as the manifest would write them (plain YAML scalars of
 * the option's type); the host parses them, so a manifest without `options:`
 * still hands create a value for every option below.
 */
static const vigil_option_spec ticker_options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_DURATION,
      .name = VIGIL_STR("period"), .default_text = VIGIL_STR("1s"),
      .doc = VIGIL_STR("Time between two ticks, from 1ms to 365d.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING,
      .name = VIGIL_STR("label"), .default_text = VIGIL_STR("tick"),
      .doc = VIGIL_STR("Text copied into the label field of every tick.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("limit"), .default_text = VIGIL_STR("0"),
      .doc = VIGIL_STR("Ticks to emit before the monitor reports it has finished; 0 = no limit.") },
};

/* Fields are listed in the order emit_tick() writes them: the host matches
 * names in declared order first, which saves it a search per field. */
static const vigil_field_spec tick_fields[] = {
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("count"), .unit = VIGIL_STR("count"),
      .doc = VIGIL_STR("Ticks emitted since the instance was started, this one included.") },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING,
      .name = VIGIL_STR("label"),
      .doc = VIGIL_STR("The label option.") },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_DOUBLE,
      .name = VIGIL_STR("late_ms"), .unit = VIGIL_STR("milliseconds"),
      .doc = VIGIL_STR("How long after its scheduled time the tick was taken.") },
    { .size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_INT,
      .name = VIGIL_STR("missed"), .unit = VIGIL_STR("count"),
      .doc = VIGIL_STR("Scheduled ticks skipped since the previous one (the thread woke up over a period late).") },
};

static const vigil_event_spec ticker_events[] = {
    { .size = sizeof(vigil_event_spec), .kind = VIGIL_STR("tick"),
      .doc = VIGIL_STR("One per period, from the instance's own thread."),
      .fields = tick_fields, .field_count = sizeof tick_fields / sizeof tick_fields[0] },
};

/* ----------------------------------------------------------------- instance */

/*
 * One instance: one `monitors:` entry of a manifest. The host may run many at
 * once, of this plugin too, and calls into different instances in parallel:
 * that is why nothing here is global.
 *
 * Who touches what (this is the whole locking story, and why there is no
 * mutex):
 *   - The configuration is written in create and only read afterwards, by
 *     every thread. pthread_create() orders those writes before anything the
 *     new thread does.
 *   - The lifecycle state is touched only by start, stop and destroy, which
 *     the host never calls concurrently for one instance (it may call them
 *     from different OS threads, one after the other, which is fine).
 *     start sets the descriptors before pthread_create() and stop closes them
 *     after pthread_join(): the thread only ever sees them open.
 *   - The ticking thread keeps its counters in local variables. It hears from
 *     stop through `stop_fd` alone.
 */
typedef struct ticker {
    /* From create. `host` and `api` stay valid for the life of the instance;
     * every host function may be called from any thread. */
    vigil_host_ctx *host;
    const vigil_host_api *api;

    /* Configuration, validated in create. */
    int64_t period_ns;
    int64_t limit;     /* 0: no limit */
    char *label;       /* our own copy; may hold NUL bytes, hence the length */
    size_t label_len;

    /* Lifecycle (start/stop/destroy only). */
    int running;       /* start succeeded and stop has not run since */
    pthread_t thread;
    int timer_fd;      /* timerfd: readable when a period has elapsed */
    int stop_fd;       /* eventfd: readable once stop asks the thread to end */
    int64_t base_ns;   /* CLOCK_MONOTONIC at start; tick k is due at base + k * period */
} ticker;

/* ------------------------------------------------------------------ helpers */

static int64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static struct timespec timespec_from_ns(int64_t ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / NS_PER_S);
    ts.tv_nsec = (long)(ns % NS_PER_S);
    return ts;
}

/* Writes one line to the host's log, attributed to this instance. The host
 * copies the message: a stack buffer is fine. Callable from any thread
 * between the start of create and the end of destroy. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static void say(const ticker *t, vigil_log_level level, const char *format, ...) {
    char line[256];
    va_list args;

    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    t->api->log(t->host, level, vigil_str_from_cstr(line));
}

/* A failed system call in start, as a status and message. Resource
 * exhaustion (file descriptors, threads) may pass, so it is TEMPORARY: the host
 * reports it and calls start again later, with backoff. Uses strerror_r, not
 * strerror, whose buffer other threads (other instances) may share. */
static vigil_status system_error(vigil_error *err, const char *call, int error) {
    char why[128];

    if (strerror_r(error, why, sizeof why) != 0)
        snprintf(why, sizeof why, "error %d", error);
    return vigil_error_set(err, VIGIL_E_TEMPORARY, "%s failed: %s", call, why);
}

/* ------------------------------------------------------------------ options */

/* The option named `name`, or NULL. The host passes every declared option,
 * in declared order, defaults filled in; looking them up by name costs
 * nothing at create time and survives a reordering of the declarations. */
static const vigil_option *find_option(const vigil_create_args *args, const char *name) {
    size_t i, len = strlen(name);

    for (i = 0; args->options != NULL && i < args->option_count; i++) {
        vigil_str n = args->options[i].name;
        if (n.len == len && memcmp(n.ptr, name, len) == 0)
            return &args->options[i];
    }
    return NULL;
}

/* Reads an INT or DURATION option into *out; `fallback` when there is none
 * (VIGIL_TYPE_NONE: unset and no default, which cannot happen here since
 * every option has a default, but a plugin should not rely on it).
 *
 * Messages that start with "options.NAME: " let the host report the problem
 * at that option in the manifest (see VIGIL_E_INVALID_CONFIG). */
static vigil_status option_i64(const vigil_create_args *args, const char *name, vigil_type type,
                               int64_t fallback, int64_t *out, vigil_error *err) {
    const vigil_option *o = find_option(args, name);

    *out = fallback;
    if (o == NULL || o->value.type == VIGIL_TYPE_NONE)
        return VIGIL_OK;
    if (o->value.type != (uint32_t)type)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "options.%s: expected a value of type %u, got type %u",
                               name, (unsigned)type, (unsigned)o->value.type);
    *out = o->value.as.i64;
    return VIGIL_OK;
}

/* Reads a STRING option. The result is BORROWED, like all of create's
 * arguments: it points into the host's memory, valid until create returns.
 * Copy it before keeping it. */
static vigil_status option_str(const vigil_create_args *args, const char *name, vigil_str fallback,
                               vigil_str *out, vigil_error *err) {
    const vigil_option *o = find_option(args, name);

    *out = fallback;
    if (o == NULL || o->value.type == VIGIL_TYPE_NONE)
        return VIGIL_OK;
    if (o->value.type != VIGIL_TYPE_STRING)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "options.%s: expected a string (type %u), got type %u",
                               name, (unsigned)VIGIL_TYPE_STRING, (unsigned)o->value.type);
    *out = o->value.as.str;
    return VIGIL_OK;
}

/* ------------------------------------------------------------------- create */

/*
 * Reads and checks the options and allocates the instance. No thread, no
 * event, no source opened yet: the host may create an instance only to check
 * a manifest (`vigil plugins describe --timing` creates and destroys one).
 * On failure nothing else is called for this attempt, so free what was
 * allocated before returning.
 */
static vigil_status ticker_create(const vigil_create_args *in, void **instance, vigil_error *err) {
    static const vigil_str default_label = VIGIL_STR("tick");
    vigil_create_args args;
    int64_t period, limit;
    vigil_str label;
    vigil_status status;
    ticker *t;

    /* The size rule: the host set `size` to sizeof as *it* compiled the
     * struct. Copy at most our sizeof into a zeroed struct: a field an older
     * host does not have reads as 0, one a newer host added is ignored. */
    if (in == NULL || in->size < VIGIL_CREATE_ARGS_SIZE_1_0)
        return vigil_error_set(err, VIGIL_E_FATAL, "create: malformed arguments from the host");
    memset(&args, 0, sizeof args);
    memcpy(&args, in, in->size < sizeof args ? in->size : sizeof args);
    /* The ABI 1.0 functions (emit, log, set_availability, now_ns) are always
     * there in a table of at least the 1.0 size; later ones need
     * VIGIL_HOST_HAS (see the thread below). */
    if (args.api == NULL || args.api->size < VIGIL_HOST_API_SIZE_1_0)
        return vigil_error_set(err, VIGIL_E_FATAL, "create: the host passed no usable function table");

    /* The host already checked each value's type against our declarations
     * (a period of "fast" never gets here); ranges are ours to check. */
    if ((status = option_i64(&args, "period", VIGIL_TYPE_DURATION, NS_PER_S, &period, err)) != VIGIL_OK ||
        (status = option_i64(&args, "limit", VIGIL_TYPE_INT, 0, &limit, err)) != VIGIL_OK ||
        (status = option_str(&args, "label", default_label, &label, err)) != VIGIL_OK)
        return status;
    if (period < MIN_PERIOD_NS)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "options.period: must be at least 1ms, not %lldns", (long long)period);
    if (period > MAX_PERIOD_NS)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "options.period: must be at most 365d");
    if (limit < 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "options.limit: must be 0 (no limit) or more, not %lld", (long long)limit);

    t = calloc(1, sizeof *t);
    if (t == NULL)
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    /* Copy the label by length: a vigil_str need not end with a NUL and may
     * contain one, so neither strdup nor strlen applies. */
    t->label = malloc(label.len + 1);
    if (t->label == NULL) {
        free(t);
        return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    }
    if (label.len > 0)
        memcpy(t->label, label.ptr, label.len);
    t->label[label.len] = '\0';
    t->label_len = label.len;

    t->host = args.host;
    t->api = args.api;
    t->period_ns = period;
    t->limit = limit;
    t->timer_fd = -1;
    t->stop_fd = -1;
    *instance = t; /* plugin-owned; the host hands it back to every call */
    return VIGIL_OK;
}

/* ---------------------------------------------------------- ticking thread */

/* Emits one tick. Runs on the ticking thread. */
static vigil_status emit_tick(const ticker *t, int64_t count, int64_t late_ns, int64_t missed) {
    /* The event and its fields live on this thread's stack, and the label
     * points into the instance: emit copies everything before it returns, so
     * nothing here has to outlive the call. */
    vigil_field fields[4] = {
        { .name = VIGIL_STR("count"),
          .value = { .type = VIGIL_TYPE_INT, .as.i64 = count } },
        { .name = VIGIL_STR("label"),
          .value = { .type = VIGIL_TYPE_STRING, .as.str = { t->label, t->label_len } } },
        { .name = VIGIL_STR("late_ms"),
          .value = { .type = VIGIL_TYPE_DOUBLE, .as.f64 = (double)late_ns / (double)NS_PER_MS } },
        { .name = VIGIL_STR("missed"),
          .value = { .type = VIGIL_TYPE_INT, .as.i64 = missed } },
    };
    vigil_event event = {
        .size = sizeof(vigil_event),
        .severity = VIGIL_SEVERITY_INFO,
        .kind = VIGIL_STR("tick"),
        .time_ns = 0, /* 0: the host stamps the event with its own clock */
        .fields = fields,
        .field_count = sizeof fields / sizeof fields[0],
    };

    /* Safe from any thread. Returns at once unless a sink is configured with
     * `overflow: block`, in which case it waits for room: never call it while
     * holding a lock that stop needs. */
    return t->api->emit(t->host, &event);
}

/*
 * The thread start starts. It sleeps in poll() on two descriptors:
 *   - timer_fd, a periodic timerfd on CLOCK_MONOTONIC with an absolute
 *     schedule (tick k due at base + k * period), so ticks do not drift
 *     however long emit takes, and a late wake-up is counted, not lost;
 *   - stop_fd, an eventfd that stop makes readable. It stays readable (no one
 *     reads it), so the thread cannot miss it: whether it is asleep in poll()
 *     or busy in emit when stop writes, its next poll() returns at once.
 *     A pipe would do as well. A plain sleep (nanosleep, clock_nanosleep)
 *     would not: stop would wait up to a whole period for the join.
 */
static void *ticker_main(void *arg) {
    ticker *t = arg;
    int64_t count = 0;   /* ticks emitted since start */
    int64_t elapsed = 0; /* timer periods elapsed since start */
    int refusal_logged = 0;
    struct pollfd fds[2];

    fds[0].fd = t->stop_fd;
    fds[0].events = POLLIN;
    fds[1].fd = t->timer_fd;
    fds[1].events = POLLIN;

    for (;;) {
        uint64_t fired;
        int64_t due, late;
        vigil_status status;

        fds[0].revents = 0;
        fds[1].revents = 0;
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            say(t, VIGIL_LOG_ERROR, "poll failed (errno %d); no more ticks until restarted", errno);
            break;
        }
        /* Stop first: once stop has asked, emit nothing more, even if a tick
         * is due at the same moment. */
        if (fds[0].revents != 0)
            break;
        if (fds[1].revents & (POLLERR | POLLHUP | POLLNVAL)) {
            say(t, VIGIL_LOG_ERROR, "the timer failed; no more ticks until restarted");
            break;
        }
        /* The timerfd is non-blocking: if there was nothing to read after all,
         * read fails with EAGAIN and we wait again. Otherwise it gives the
         * number of periods elapsed since the last read: more than 1 when
         * this thread was held up for over a period. */
        if (read(t->timer_fd, &fired, sizeof fired) != (ssize_t)sizeof fired || fired == 0)
            continue;
        elapsed += (int64_t)fired;

        /* Lateness is measured on the timer's own clock (CLOCK_MONOTONIC),
         * against the latest due time, not on the host's wall clock
         * (now_ns), which can jump. */
        due = t->base_ns + elapsed * t->period_ns;
        late = monotonic_ns() - due;
        if (late < 0)
            late = 0;

        count++;
        status = emit_tick(t, count, late, (int64_t)fired - 1);
        /* The host accepts our events from the start of start until stop
         * returns, and stop joins this thread before returning, so a refusal
         * means a malformed event (our bug): say so once, and go on. */
        if (status != VIGIL_OK && !refusal_logged) {
            say(t, VIGIL_LOG_WARNING, "the host refused a tick (status %d)", (int)status);
            refusal_logged = 1;
        }

        if (t->limit > 0 && count >= t->limit) {
            say(t, VIGIL_LOG_INFO, "limit of %lld ticks reached", (long long)t->limit);
            /* `finished` came with ABI 1.1: check that the host's table is
             * long enough to hold it before calling it. It may be called from
             * any thread, after the instance's last emit: this is that point.
             * The thread then ends; stop still joins it. */
            if (VIGIL_HOST_HAS(t->api, finished))
                t->api->finished(t->host);
            break;
        }
    }
    return NULL;
}

/* -------------------------------------------------------------- start, stop */

static void close_fds(ticker *t) {
    if (t->timer_fd >= 0)
        close(t->timer_fd);
    if (t->stop_fd >= 0)
        close(t->stop_fd);
    t->timer_fd = -1;
    t->stop_fd = -1;
}

/*
 * Opens the sources and starts the thread. A push monitor has nothing to
 * snapshot here (the host calls poll right after start only for polled
 * plugins); the first tick comes one period after start.
 *
 * A failed start leaves the instance stopped (the host will not call stop for
 * it), so it undoes whatever it began before returning.
 */
static vigil_status ticker_start(void *instance, vigil_error *err) {
    ticker *t = instance;
    struct itimerspec schedule;
    sigset_t blocked, previous;
    int rc;

    if (t->running) /* start on a started instance: harmless, does nothing */
        return VIGIL_OK;

    t->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (t->stop_fd < 0)
        return system_error(err, "eventfd", errno);
    t->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (t->timer_fd < 0) {
        rc = errno;
        close_fds(t);
        return system_error(err, "timerfd_create", rc);
    }
    t->base_ns = monotonic_ns();
    schedule.it_value = timespec_from_ns(t->base_ns + t->period_ns); /* first tick */
    schedule.it_interval = timespec_from_ns(t->period_ns);           /* then every period */
    if (timerfd_settime(t->timer_fd, TFD_TIMER_ABSTIME, &schedule, NULL) != 0) {
        rc = errno;
        close_fds(t);
        return system_error(err, "timerfd_settime", rc);
    }

    /* A new thread inherits the signal mask of the thread that creates it,
     * which is one of the host's. Block the asynchronous signals in ours, so
     * that SIGTERM, SIGINT and the like are delivered to the host's threads,
     * which handle them, and never interrupt this one. (Faults such as SIGSEGV
     * stay unblocked: blocking them would hide a crash from the host.) */
    sigfillset(&blocked);
    sigdelset(&blocked, SIGSEGV);
    sigdelset(&blocked, SIGBUS);
    sigdelset(&blocked, SIGFPE);
    sigdelset(&blocked, SIGILL);
    pthread_sigmask(SIG_SETMASK, &blocked, &previous);
    rc = pthread_create(&t->thread, NULL, ticker_main, t);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (rc != 0) {
        close_fds(t);
        return system_error(err, "pthread_create", rc);
    }

    t->running = 1;
    say(t, VIGIL_LOG_DEBUG, "ticking every %.3fs%s", (double)t->period_ns / (double)NS_PER_S,
        t->limit > 0 ? ", up to a limit" : "");
    return VIGIL_OK;
}

/*
 * Stops the thread and waits for it. After stop returns, nothing of this
 * instance may call the host (the host refuses such events, counts them as a
 * plugin bug and drops them): hence the join, which is also what makes
 * closing the descriptors afterwards safe. Prompt whatever the period: the
 * eventfd wakes the thread at once; the longest wait is one emit in progress.
 */
static vigil_status ticker_stop(void *instance, vigil_error *err) {
    ticker *t = instance;
    uint64_t one = 1;

    (void)err; /* nothing here can fail in a way worth reporting */
    if (!t->running) /* stop on a stopped instance: harmless, does nothing */
        return VIGIL_OK;

    /* Adding 1 to an eventfd counter that is at most 1 cannot fail; only a
     * signal can interrupt the write before it happens. */
    while (write(t->stop_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    /* Also needed when the thread already ended by itself (limit reached):
     * joining is what releases a thread's resources. */
    pthread_join(t->thread, NULL);

    close_fds(t);
    t->running = 0;
    return VIGIL_OK;
}

/* Frees the instance. The host never calls destroy on a started instance; the
 * stop is a cheap guard against a host bug, not part of the contract. */
static void ticker_destroy(void *instance) {
    ticker *t = instance;

    if (t == NULL)
        return;
    ticker_stop(t, NULL);
    free(t->label);
    free(t);
}

/* -------------------------------------------------------------------- entry */

static const vigil_plugin_descriptor ticker_descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_MONITOR,
    .name = VIGIL_STR("ticker"), /* the name manifests use: `plugin: ticker` */
    .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("Example push monitor: emits a tick every period from a thread of its own."),
    .options = ticker_options,
    .option_count = sizeof ticker_options / sizeof ticker_options[0],
    .events = ticker_events,
    .event_count = sizeof ticker_events / sizeof ticker_events[0],
    .default_interval_ns = 0, /* push only: the host has no interval to keep */
    .create = ticker_create,
    .start = ticker_start,
    .poll = NULL,             /* push only: the host never polls; we emit */
    .stop = ticker_stop,
    .destroy = ticker_destroy,
};

/*
 * The one exported symbol. The host may call it more than once (tools do),
 * from one thread at a time, before any instance exists; it must answer the
 * same descriptor each time, which a static const one does.
 *
 * vigil_negotiate() answers with the ABI this file was compiled against
 * (VIGIL_ABI_MAJOR.VIGIL_ABI_MINOR of the header), when the host speaks that
 * major; otherwise it refuses with a message naming both versions.
 */
VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &ticker_descriptor);
}
