/*
 * vigil_plugin.h — the whole contract between the Vigil host and a plugin.
 *
 * A plugin is a shared library that exports exactly one symbol,
 * `vigil_plugin_entry`. It needs this header and nothing else: it never links
 * against the host. Everything the host offers arrives as a const table of
 * function pointers (`vigil_host_api`); everything the plugin offers is
 * described by a `vigil_plugin_descriptor` it returns from the entry point.
 *
 * Versioning (semantic, for the binary interface):
 *   - The ABI has a major and a minor number (VIGIL_ABI_MAJOR/MINOR below).
 *   - A minor version only appends: new fields at the end of a struct that
 *     starts with a `size` field, new function pointers at the end of
 *     `vigil_host_api` or `vigil_plugin_descriptor`, new enum values.
 *   - A major version may change anything else; the host refuses a plugin
 *     whose major it does not speak, and one that needs a newer minor than it
 *     knows. What negotiation itself uses is frozen across ALL majors, so any
 *     host can call any plugin's entry point to refuse it with both versions
 *     named: the symbol name and vigil_plugin_entry_fn, vigil_entry_args,
 *     vigil_abi_version, vigil_entry_result, vigil_error, VIGIL_OK and
 *     VIGIL_E_UNSUPPORTED.
 *   - Enumerations are 32-bit integers on the wire (each has a 0x7FFFFFFF
 *     member to force that, as Vulkan does). Bindings in other languages
 *     should hold them as int32/uint32, never as a closed enum: a later minor
 *     may add values, and a reader must treat an unknown value as the
 *     documented fallback, never as undefined.
 *   - Every struct that may grow starts with `uint32_t size`, set by whoever
 *     fills the struct to `sizeof` of the struct as *they* compiled it. The
 *     reader copies min(size, its own sizeof) into a zeroed struct and never
 *     reads a field beyond the size it was given. The smallest size a reader
 *     accepts is the struct's 1.0 size (the VIGIL_*_SIZE_1_0 constants below),
 *     never its own sizeof, so a newer writer and an older reader still meet.
 *     Structs without a size field (vigil_str, vigil_value, vigil_field,
 *     vigil_option, vigil_abi_version) and vigil_error are frozen for the life
 *     of a major version.
 *
 * Memory (who allocates, frees):
 *   - Every pointer passed *into* a function is borrowed for the duration of
 *     that call only, unless the comment on it says otherwise. In particular
 *     `emit` copies the event before it returns, so the plugin may reuse or
 *     free its buffers at once.
 *   - The descriptor returned by the entry point, and everything it points
 *     to, is owned by the plugin and must stay valid and unchanged until the
 *     process exits (modules are never unloaded: the host loads them with
 *     RTLD_NODELETE). Static data is the natural choice.
 *   - Strings are UTF-8, given as pointer + length (`vigil_str`), and need
 *     not be NUL-terminated. The host replaces invalid UTF-8 with U+FFFD.
 *
 * Threads:
 *   - The entry point is called from the host's main thread before any
 *     instance exists. It may be called more than once (by tools such as
 *     `vigil plugins check`) and must return the same descriptor each time.
 *   - create, start, poll, stop and destroy of ONE instance are never called
 *     concurrently: the host calls them in order on that instance's own serial
 *     context (which may be a different OS thread from call to call). Calls
 *     into DIFFERENT instances, even of the same plugin, may run in parallel;
 *     a plugin with global state must lock it.
 *   - Every `vigil_host_api` function is safe to call from any thread,
 *     including threads the plugin created itself. `log`, `now_ns` and
 *     `set_availability` may be called from the start of `create` until
 *     `destroy` returns. `emit` is accepted from the start of `start` until
 *     `stop` returns; outside that window it returns VIGIL_E_STOPPED and the
 *     event is dropped (a plugin bug, counted by the host, never a crash).
 *   - `stop` must not return before every thread the instance created has
 *     stopped calling into the host (join them).
 *
 * What the host refuses (VIGIL_MAX_* below, and the rules of `emit`): the
 * host never traps or stalls on what a plugin hands over; it refuses the call
 * and counts it, per monitor and by reason, in `vigil run --summary` and its
 * exit log. `vigil plugins check` and the test kit give the same verdict,
 * from the same decoder.
 *
 * This header is C99 and C++ compatible and includes only the C standard
 * library.
 */
#ifndef VIGIL_PLUGIN_H
#define VIGIL_PLUGIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- version */

/** The ABI version this header describes. */
#define VIGIL_ABI_MAJOR 1
#define VIGIL_ABI_MINOR 5

/** Name of the one symbol every plugin exports. */
#define VIGIL_ENTRY_SYMBOL "vigil_plugin_entry"

#if defined(_WIN32)
#define VIGIL_EXPORT __declspec(dllexport)
#else
#define VIGIL_EXPORT __attribute__((visibility("default")))
#endif

/* ----------------------------------------------------------------- limits */

/** An event has at most this many fields; more is VIGIL_E_INVALID_ARGUMENT. */
#define VIGIL_MAX_EVENT_FIELDS 1024
/** An event kind or a field name: 1 to this many bytes. */
#define VIGIL_MAX_NAME_BYTES 256
/** A string field's value: at most this many bytes. */
#define VIGIL_MAX_STRING_BYTES 65536
/** A log message is cut after this many bytes (the cut is said and counted). */
#define VIGIL_MAX_LOG_BYTES 8192
/** An availability reason is cut after this many bytes. */
#define VIGIL_MAX_REASON_BYTES 1024
/*
 * Also refused by `emit` (VIGIL_E_INVALID_ARGUMENT): a negative `time_ns`
 * (0 means now; any positive value is nanoseconds since 1970, up to
 * 2262-04-11); a field name given twice in one event (JSON objects have
 * unique keys); a kind the host emits itself ("availability", "threshold",
 * "rule" — a descriptor that declares one is refused at load); a NULL
 * pointer with a non-zero length; an empty kind or field name.
 *
 * A descriptor's `default_interval_ns` is held to 1 ms … 365 days, as a
 * manifest's `interval` is.
 */

/* ----------------------------------------------------------------- status */

/**
 * Result of every call that can fail. 0 is success; anything else comes with
 * a message written into the call's `vigil_error` where there is one.
 */
typedef enum vigil_status {
    VIGIL_OK = 0,
    /** Failed this time; the host retries at the next interval. */
    VIGIL_E_TEMPORARY = 1,
    /** Failed for good; the host stops and destroys the instance. */
    VIGIL_E_FATAL = 2,
    /** An option value is unusable (create only). The message may start
     *  with the option's path and ": " so that the host reports it at that
     *  place in the manifest: "options.NAME: ...", "options.NAME[2]: ..." or
     *  "options.NAME[2].KEY: ..." (indexes from 0, into JSON options). */
    VIGIL_E_INVALID_CONFIG = 3,
    /** The source does not exist on this machine. Not an error: the host
     *  reports the instance unavailable (with the message as the reason) and
     *  retries start later. */
    VIGIL_E_UNAVAILABLE = 4,
    /** Out of memory. */
    VIGIL_E_NOMEM = 5,
    /** Host: the call or a value in it is not supported by this host
     *  (e.g. an unknown value type). Plugin: the ABI offered is not one the
     *  plugin speaks (entry); or, from create, this instance cannot run in
     *  the host's process (it starts threads, catches signals or forks; the
     *  environment says VIGIL_ISOLATION=none there and =process in a runner
     *  process of its own). A host left to choose where the monitor runs
     *  (the manifest says no `isolation:`) runs it in a runner and says so; where the manifest says
     *  `isolation: none` the monitor is refused with the message. A host
     *  older than this rule refuses the monitor with the message. */
    VIGIL_E_UNSUPPORTED = 6,
    /** Host: the instance is stopped; the event was not accepted. */
    VIGIL_E_STOPPED = 7,
    /** Host: an argument is malformed (NULL, a size field too small). */
    VIGIL_E_INVALID_ARGUMENT = 8,
    VIGIL_STATUS_MAX_ENUM_ = 0x7FFFFFFF /* forces 32 bits; never returned */
} vigil_status;

/**
 * Room for a message explaining a non-zero status. Owned by the host, valid
 * for the duration of the call it is passed to. The plugin writes at most
 * `capacity` bytes including a terminating NUL (use vigil_error_set); the
 * host reads at most `capacity` bytes whether or not a NUL is there. Frozen
 * for all majors (it is part of negotiation); `size` only lets a reader check
 * that it was given one.
 */
typedef struct vigil_error {
    uint32_t size;     /* sizeof(vigil_error) as the host compiled it */
    uint32_t reserved; /* 0 */
    char *message;     /* host-owned buffer, NUL-terminated UTF-8 */
    size_t capacity;   /* bytes in `message`, including room for the NUL */
} vigil_error;

/** Writes a printf-style message into `err` (NULL-safe) and returns `status`. */
static inline vigil_status vigil_error_set(vigil_error *err, vigil_status status,
                                           const char *format, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline vigil_status vigil_error_set(vigil_error *err, vigil_status status,
                                           const char *format, ...) {
    if (err != NULL && err->size >= sizeof(vigil_error) && err->message != NULL && err->capacity > 0) {
        va_list args;
        va_start(args, format);
        vsnprintf(err->message, err->capacity, format, args);
        va_end(args);
    }
    return status;
}

/* ---------------------------------------------------------------- strings */

/** UTF-8 text: pointer and length in bytes; not necessarily NUL-terminated.
 *  Frozen for ABI major 1. `ptr` may be NULL only when `len` is 0. */
typedef struct vigil_str {
    const char *ptr;
    size_t len;
} vigil_str;

/** A vigil_str from a string literal, usable in static initialisers. */
#define VIGIL_STR(literal) { (literal), sizeof(literal) - 1 }

/** A vigil_str from a NUL-terminated string (NULL gives the empty string). */
static inline vigil_str vigil_str_from_cstr(const char *s) {
    vigil_str r;
    r.ptr = s;
    r.len = s ? strlen(s) : 0;
    return r;
}

/* ----------------------------------------------------------------- values */

/** Type of a value: of an event field, an option, a declared field. */
typedef enum vigil_type {
    VIGIL_TYPE_NONE = 0,     /* no value (an option without a default) */
    VIGIL_TYPE_BOOL = 1,     /* as.boolean: 0 or 1 */
    VIGIL_TYPE_INT = 2,      /* as.i64 */
    VIGIL_TYPE_DOUBLE = 3,   /* as.f64; NaN and infinities allowed */
    VIGIL_TYPE_STRING = 4,   /* as.str */
    /* Option types only (never in an event): */
    VIGIL_TYPE_DURATION = 5, /* as.i64, nanoseconds; manifest "250ms", "5s" */
    VIGIL_TYPE_SIZE = 6,     /* as.i64, bytes; manifest "64MiB", "1GB", "4096" */
    VIGIL_TYPE_JSON = 7,     /* as.str: any YAML value, handed over as JSON text
                                (lists, maps); the plugin parses it */
    VIGIL_TYPE_MAX_ENUM_ = 0x7FFFFFFF
} vigil_type;

/** A typed value. Frozen for ABI major 1 (24 bytes on LP64). */
typedef struct vigil_value {
    uint32_t type;     /* a vigil_type */
    uint32_t reserved; /* 0 */
    union {
        int64_t i64;
        double f64;
        int32_t boolean;
        vigil_str str;
    } as;
} vigil_value;

/** One named value of an event. Frozen for ABI major 1. */
typedef struct vigil_field {
    vigil_str name;    /* any UTF-8, by convention [a-z0-9_.]+ and declared in
                          the kind's vigil_event_spec; the host escapes what it
                          must (an embedded NUL becomes \u0000 in JSON) */
    vigil_value value; /* BOOL, INT, DOUBLE or STRING */
} vigil_field;

/* ------------------------------------------------------------------ events */

/** How bad an event is. Ordered: a sink's min_severity keeps >=. */
typedef enum vigil_severity {
    VIGIL_SEVERITY_DEBUG = 0,
    VIGIL_SEVERITY_INFO = 1,
    VIGIL_SEVERITY_NOTICE = 2,
    VIGIL_SEVERITY_WARNING = 3,
    VIGIL_SEVERITY_ERROR = 4,
    VIGIL_SEVERITY_CRITICAL = 5,
    VIGIL_SEVERITY_MAX_ENUM_ = 0x7FFFFFFF
} vigil_severity;

/**
 * An event as a plugin hands it to `emit`. Borrowed for the call: the host
 * copies kind and fields before emit returns. The host adds host name,
 * monitor (instance) name, plugin name and a sequence number. The host does
 * not refuse kinds or fields that the descriptor does not declare (they are
 * routed like any other); `vigil plugins check` reports them.
 */
typedef struct vigil_event {
    uint32_t size;              /* sizeof(vigil_event) */
    uint32_t severity;          /* a vigil_severity */
    vigil_str kind;             /* e.g. "sample"; one of the declared kinds */
    int64_t time_ns;            /* CLOCK_REALTIME ns since the epoch; 0 = now */
    const vigil_field *fields;  /* `field_count` fields, may be NULL if 0 */
    size_t field_count;
} vigil_event;

/* ------------------------------------------------------------ host table */

/** Opaque handle for one instance, given by the host in create. */
typedef struct vigil_host_ctx vigil_host_ctx;

/** Log levels for vigil_host_api.log (same order as severities). */
typedef enum vigil_log_level {
    VIGIL_LOG_DEBUG = 0,
    VIGIL_LOG_INFO = 1,
    VIGIL_LOG_NOTICE = 2,
    VIGIL_LOG_WARNING = 3,
    VIGIL_LOG_ERROR = 4,
    VIGIL_LOG_CRITICAL = 5,
    VIGIL_LOG_MAX_ENUM_ = 0x7FFFFFFF
} vigil_log_level;

/**
 * Functions the host offers. The table is const, owned by the host and valid
 * until the process exits. It only ever grows at its end: check a member
 * added after ABI 1.0 with VIGIL_HOST_HAS(api, member) before calling it.
 * Every function is callable from any thread, within the windows given at
 * the top of this file, with the `host` handle of the instance.
 */
typedef struct vigil_host_api {
    uint32_t size;        /* sizeof(vigil_host_api) as the host compiled it */
    uint16_t abi_major;   /* the version this table implements: the major, */
    uint16_t abi_minor;   /* and the highest minor of it (members to `size`) */

    /** Hands an event to the host, which copies it before returning.
     *  Returns VIGIL_OK, VIGIL_E_STOPPED (instance not running),
     *  VIGIL_E_INVALID_ARGUMENT (NULL, size too small, an option-only type
     *  such as DURATION in a field), VIGIL_E_UNSUPPORTED (a value type newer
     *  than this host). Never
     *  blocks on a sink unless a sink is configured with `overflow: block`.
     *  See "limits" above for what else is refused. After `destroy`, every
     *  host function called with the instance's handle does nothing (emit
     *  answers VIGIL_E_STOPPED). */
    vigil_status (*emit)(vigil_host_ctx *host, const vigil_event *event);

    /** Writes one line to the host's log, attributed to the instance.
     *  `message` is borrowed for the call; the host cuts it after
     *  VIGIL_MAX_LOG_BYTES and escapes control characters, so a message can
     *  neither flood the log nor forge a line of its own. Lines are
     *  rate-limited per instance (100 at once, then 20 a second): the rest
     *  are dropped, counted, and said in one line of the host's. */
    void (*log)(vigil_host_ctx *host, vigil_log_level level, vigil_str message);

    /** Declares whether the instance's source exists now. `reason` (borrowed)
     *  says why not; ignored when available. The host emits an
     *  `availability` event on every change, at most 10 at once and then one a
     *  second per instance (a flapping source: the state changes at once, the
     *  later report carries the latest state). Unavailable is not an error. */
    void (*set_availability)(vigil_host_ctx *host, int32_t available, vigil_str reason);

    /** CLOCK_REALTIME in nanoseconds, as the host sees it (tests inject a
     *  clock through this). */
    int64_t (*now_ns)(vigil_host_ctx *host);

    /* ---- ABI 1.1 (check VIGIL_HOST_HAS(api, finished) before calling) ---- */

    /** The instance has nothing more to emit: a bounded workload (a
     *  benchmark's flood, a one-shot import) is done. When every monitor of
     *  the run has finished or failed, `vigil run` stops them, drains its
     *  sinks and exits. Any thread, after the instance's last emit. */
    void (*finished)(vigil_host_ctx *host);

    /* Room for later minors, appended here: timers, fd watches, allocation. */
} vigil_host_api;

/** True when the host's table is large enough to hold `member`. */
#define VIGIL_HOST_HAS(api, member) \
    ((api) != NULL && (api)->size >= offsetof(vigil_host_api, member) + sizeof((api)->member))

/* ------------------------------------------------------- self-description */

/** Flags of an option. */
enum {
    VIGIL_OPTION_REQUIRED = 1u << 0 /* the manifest must give a value */
};

/** One option a plugin accepts in the manifest's `options:`. */
typedef struct vigil_option_spec {
    uint32_t size;          /* sizeof(vigil_option_spec); same for every element */
    uint32_t type;          /* vigil_type: BOOL INT DOUBLE STRING DURATION SIZE JSON */
    vigil_str name;         /* [a-z][a-z0-9_]* */
    vigil_str default_text; /* the default, written as a plain (unquoted) YAML
                               scalar of the option's type: "false", "/proc",
                               "1s", "64MiB"; for JSON options any YAML ("[]").
                               Empty: no default (an empty string default
                               cannot be expressed; treat NONE as empty). */
    vigil_str doc;          /* one sentence for `vigil plugins describe` */
    uint32_t flags;         /* VIGIL_OPTION_* */
    uint32_t reserved;      /* 0 */
    /* ---- ABI 1.3: read only from a plugin that chose 1.3 or later, and
     *      only when the array's element size covers it
     *      (VIGIL_OPTION_SPEC_SIZE_1_3). ---- */
    vigil_str example_text; /* a value that works on any machine, written as
                               default_text is, for tools that create an
                               instance with nothing else to go on:
                               `vigil plugins check` with no --option takes
                               it in place of the default, so that a plugin
                               whose create needs a value ("name or pidfile")
                               is checked as shipped. `vigil run` and
                               `validate` never use it. Empty: none. */
} vigil_option_spec;

/** Flags of a declared field (ABI 1.4; a 1.0 to 1.3 plugin has none). */
enum {
    /** The field says which thing the event is about (an interface's name,
     *  a mount point, a CPU number): events of one kind with the same
     *  identity fields describe the same thing over time. A STRING or INT
     *  field only. Sinks that keep series (Prometheus) make it a label;
     *  others pass it on as any field. */
    VIGIL_FIELD_IDENTITY = 1u << 0,
    /** The field only grows (a total since boot or since the plugin
     *  started), except when its source restarts: a counter, where a
     *  field without the flag is a gauge (a level now). An INT or DOUBLE
     *  field only, never an identity. */
    VIGIL_FIELD_COUNTER = 1u << 1
};

/** One field of a declared event kind. */
typedef struct vigil_field_spec {
    uint32_t size;    /* sizeof(vigil_field_spec); same for every element */
    uint32_t type;    /* vigil_type: BOOL INT DOUBLE STRING */
    vigil_str name;   /* non-empty, unique within the kind */
    vigil_str unit;   /* "ratio", "bytes", "percent", "celsius"…; may be empty */
    vigil_str doc;
    /* ---- ABI 1.4: read only from a plugin that chose 1.4 or later, and
     *      only when the array's element size covers it
     *      (VIGIL_FIELD_SPEC_SIZE_1_4). ---- */
    uint32_t flags;   /* VIGIL_FIELD_* */
    uint32_t reserved; /* 0 */
} vigil_field_spec;

/** Flags of an event kind (ABI 1.2; a 1.0 or 1.1 plugin leaves them 0). */
enum {
    /** The kind's fields are named by the instance's options (e.g. the ffi
     *  plugin's `fields:`), so `fields` lists only those always present and
     *  checkers accept others. Which of an event's undeclared fields are
     *  counters (as VIGIL_FIELD_COUNTER says of a declared one) it may say in
     *  a STRING field named "counters": their names, comma-separated (the
     *  collectd plugin's DERIVE, COUNTER and ABSOLUTE sources). */
    VIGIL_EVENT_DYNAMIC_FIELDS = 1u << 0,
    /** (ABI 1.4, read only from a 1.4 plugin.) Events of the kind come as a
     *  snapshot on start, then only when something changed: silence means
     *  the last values still hold, for as long as the instance runs. Sinks
     *  that keep series (Prometheus) keep such a series while its monitor
     *  runs, where a series of another kind expires when no event renews it. */
    VIGIL_EVENT_ON_CHANGE = 1u << 1
};

/** One kind of event a plugin emits, with its fields. */
typedef struct vigil_event_spec {
    uint32_t size;                  /* sizeof(vigil_event_spec); same for all */
    uint32_t flags;                 /* VIGIL_EVENT_* (1.2; `reserved`, 0, before) */
    vigil_str kind;                 /* [a-z][a-z0-9_]* e.g. "sample" */
    vigil_str doc;
    const vigil_field_spec *fields; /* `field_count` fields */
    size_t field_count;
} vigil_event_spec;

/** What a plugin is. Monitors emit events; outputs (ABI 1.5) take them and
 *  send them on (a sink of `type: plugin` in the manifest). */
typedef enum vigil_plugin_kind {
    VIGIL_PLUGIN_MONITOR = 1,
    VIGIL_PLUGIN_OUTPUT = 2,
    VIGIL_PLUGIN_KIND_MAX_ENUM_ = 0x7FFFFFFF
} vigil_plugin_kind;

/** One option value as the host passes it to create. Frozen for major 1. */
typedef struct vigil_option {
    vigil_str name;
    vigil_value value; /* type as declared; VIGIL_TYPE_NONE if unset and no default */
} vigil_option;

/** Arguments of create. Borrowed for the call; copy what you keep, except
 *  `host` and `api`, which stay valid for the life of the instance. */
typedef struct vigil_create_args {
    uint32_t size;                 /* sizeof(vigil_create_args) */
    uint32_t reserved;             /* 0 */
    vigil_str instance_name;       /* the manifest's monitor name */
    vigil_host_ctx *host;          /* pass to every host function */
    const vigil_host_api *api;     /* the host's function table */
    const vigil_option *options;   /* every declared option, in declared
                                      order, defaults filled in */
    size_t option_count;
    int64_t interval_ns;           /* poll interval; 0 for push-only plugins */
} vigil_create_args;

/* ------------------------------------------------------ outputs (ABI 1.5) */

/**
 * An event as the host hands it to an output: what a monitor emitted, with
 * the host's stamps. Borrowed for the `write` call, like everything in the
 * batch. `time_ns` is always set. Step through a batch's events by
 * `vigil_batch.event_size`, never by your own sizeof.
 */
typedef struct vigil_output_event {
    uint32_t size;              /* sizeof(vigil_output_event) as the host compiled it */
    uint32_t severity;          /* a vigil_severity */
    vigil_str kind;
    int64_t time_ns;            /* CLOCK_REALTIME ns since the epoch */
    const vigil_field *fields;  /* `field_count` fields */
    size_t field_count;
    vigil_str host;             /* the host's name */
    vigil_str monitor;          /* the monitor (instance) that emitted it */
    vigil_str plugin;           /* the monitor's plugin */
    uint64_t seq;               /* the host's sequence number, per host run */
} vigil_output_event;

/** A batch of events for `write`. Borrowed for the call; the host keeps the
 *  events until the plugin answered for each. */
typedef struct vigil_batch {
    uint32_t size;              /* sizeof(vigil_batch) */
    uint32_t attempt;           /* 1 the first time these events are written, then 2, 3… */
    const vigil_output_event *events;
    size_t count;               /* at least 1 */
    size_t event_size;          /* the stride of `events`: sizeof(vigil_output_event) as the host compiled it */
} vigil_batch;

/** An output's answer for an event. */
typedef enum vigil_write_verdict {
    /** Delivered. */
    VIGIL_WRITE_OK = 0,
    /** Not delivered, may be later: the host keeps it and writes it again
     *  (after `retry_after_ns`, or its own backoff). */
    VIGIL_WRITE_RETRY = 1,
    /** Never deliverable (a permanent error: the peer refused it): the host
     *  counts it lost as `rejected`, with the call's error message as reason. */
    VIGIL_WRITE_REJECT = 2,
    VIGIL_WRITE_VERDICT_MAX_ENUM_ = 0x7FFFFFFF
} vigil_write_verdict;

/**
 * Where `write` answers, host-owned, valid for the call. The plugin sets
 * `verdict` for the whole batch, or answers per event: it writes `count`
 * verdicts into `per_event` and sets `per_event_used` to 1. An unknown
 * verdict counts as RETRY. The host believes no more than it was given.
 * `per_event` itself is not the plugin's to change: per-event answers with
 * it pointed elsewhere are not read, and fail the sink as VIGIL_E_FATAL.
 */
typedef struct vigil_write_result {
    uint32_t size;              /* sizeof(vigil_write_result) as the host compiled it */
    uint32_t verdict;           /* a vigil_write_verdict for every event; host preset: VIGIL_WRITE_OK */
    int64_t retry_after_ns;     /* with RETRY: wait at least this long (0: the host's backoff) */
    uint8_t *per_event;         /* `count` bytes, host preset to VIGIL_WRITE_OK */
    uint32_t per_event_used;    /* 1: `per_event` holds the answers */
    uint32_t reserved;          /* 0 */
} vigil_write_result;

/**
 * Instance lifecycle. An instance is created, started, polled (if `poll` is
 * not NULL) every interval, stopped and destroyed, in that order, never two
 * calls at once. The host may start and stop an instance several times
 * between create and destroy; start on a started instance and stop on a
 * stopped one must be harmless. `err` is host-owned and valid for the call.
 *
 * create:  reads and validates options; allocates the instance; no threads,
 *          no events yet. Sets *instance (plugin-owned, opaque to the host).
 *          May return INVALID_CONFIG, NOMEM or FATAL (the monitor does not
 *          run), or UNAVAILABLE or TEMPORARY (the host reports it and calls
 *          create again later, with backoff). On failure nothing else is
 *          called for this attempt.
 * start:   opens sources, may start threads that emit. Should emit the current
 *          state (a snapshot) unless the plugin is polled: the host calls
 *          poll once right after a successful start for that purpose.
 *          May return UNAVAILABLE ("not on this machine now": the host
 *          reports it and retries start later), TEMPORARY (retried later),
 *          FATAL or NOMEM (the instance is destroyed). A failed start leaves
 *          the instance stopped: the host does not call stop for it, and
 *          must undo whatever the failed start began.
 * poll:    reads the source and emits; called every interval, and on demand.
 *          TEMPORARY failures are counted and logged (rate-limited); polling
 *          goes on. UNAVAILABLE reports the source gone (the host emits an
 *          `availability` event) and polling goes on; the next OK poll reports
 *          it back. Any other status (FATAL, NOMEM, …) stops and destroys the
 *          instance.
 * stop:    closes sources and joins every thread the instance started; after
 *          it returns the plugin must not emit for this instance. A non-OK
 *          status is logged; the instance counts as stopped all the same.
 * destroy: frees the instance. Never fails; never called while started.
 *
 * An output (kind VIGIL_PLUGIN_OUTPUT, ABI 1.5) declares no event kinds and
 * has no `poll`. create opens it with its options (`interval_ns` is 0; a
 * host function `emit` answers VIGIL_E_UNSUPPORTED), start and stop may be
 * NULL, destroy closes it. The host calls `write` with batches, from the
 * sink's own thread, one call at a time, between start and stop: the
 * return is VIGIL_OK with the answer in `result`, or an error for the whole
 * batch (TEMPORARY: retried like RETRY; FATAL: the sink fails, its events
 * are counted lost). `flush` (may be NULL) sends what the plugin buffered,
 * giving up at `deadline_ns` (CLOCK_MONOTONIC); it is called on the same
 * thread, never beside write: periodically, and before stop. The host owns
 * the queue, retries with backoff, the disk buffer and every counter.
 */
typedef struct vigil_plugin_descriptor {
    uint32_t size;        /* sizeof(vigil_plugin_descriptor) as the plugin compiled it */
    uint32_t kind;        /* vigil_plugin_kind */
    vigil_str name;       /* [a-z][a-z0-9_-]*, the name manifests use */
    vigil_str version;    /* the plugin's own version, e.g. "1.2.0" */
    vigil_str description;/* one line */

    const vigil_option_spec *options; /* `option_count` options */
    size_t option_count;
    const vigil_event_spec *events;   /* `event_count` kinds */
    size_t event_count;

    int64_t default_interval_ns;      /* poll interval when the manifest gives none;
                                         0: the host's default (10 s). Ignored
                                         when `poll` is NULL (push only). */

    vigil_status (*create)(const vigil_create_args *args, void **instance, vigil_error *err);
    vigil_status (*start)(void *instance, vigil_error *err);
    vigil_status (*poll)(void *instance, vigil_error *err); /* NULL: push only */
    vigil_status (*stop)(void *instance, vigil_error *err);
    void (*destroy)(void *instance);

    /* ---- ABI 1.5: outputs. Read only from an output that chose 1.5 or
     *      later, and only when the descriptor's size covers them
     *      (VIGIL_DESCRIPTOR_SIZE_1_5). ---- */
    vigil_status (*write)(void *instance, const vigil_batch *batch, vigil_write_result *result, vigil_error *err);
    vigil_status (*flush)(void *instance, int64_t deadline_ns, vigil_error *err); /* NULL: nothing buffered */

    /* Room for later minors, appended here. */
} vigil_plugin_descriptor;

/** The 1.0 size of every struct that may grow: the least a reader accepts.
 *  Arrays of size-prefixed structs (options, events, fields) are stepped
 *  through by the `size` of their first element, which every element repeats,
 *  which is at least the 1.0 size, a multiple of 8, and at most 4096. */
#define VIGIL_EVENT_SIZE_1_0          (offsetof(vigil_event, field_count) + sizeof(size_t))
#define VIGIL_HOST_API_SIZE_1_0       (offsetof(vigil_host_api, now_ns) + sizeof(void (*)(void)))
#define VIGIL_OPTION_SPEC_SIZE_1_0    (offsetof(vigil_option_spec, reserved) + sizeof(uint32_t))
/** vigil_option_spec with `example_text` (ABI 1.3). */
#define VIGIL_OPTION_SPEC_SIZE_1_3    (offsetof(vigil_option_spec, example_text) + sizeof(vigil_str))
#define VIGIL_FIELD_SPEC_SIZE_1_0     (offsetof(vigil_field_spec, doc) + sizeof(vigil_str))
/** vigil_field_spec with `flags` (ABI 1.4). */
#define VIGIL_FIELD_SPEC_SIZE_1_4     (offsetof(vigil_field_spec, reserved) + sizeof(uint32_t))
#define VIGIL_EVENT_SPEC_SIZE_1_0     (offsetof(vigil_event_spec, field_count) + sizeof(size_t))
#define VIGIL_CREATE_ARGS_SIZE_1_0    (offsetof(vigil_create_args, interval_ns) + sizeof(int64_t))
#define VIGIL_DESCRIPTOR_SIZE_1_0 \
    (offsetof(vigil_plugin_descriptor, destroy) + sizeof(void (*)(void *)))
/** The descriptor with `write` and `flush` (ABI 1.5): an output's least. */
#define VIGIL_DESCRIPTOR_SIZE_1_5 \
    (offsetof(vigil_plugin_descriptor, flush) + sizeof(void (*)(void)))
/** Kept for readers of the first drafts of this header. */
#define VIGIL_DESCRIPTOR_MIN_SIZE VIGIL_DESCRIPTOR_SIZE_1_0

/* ------------------------------------------------------------- entry point */

/** One ABI version: a major and the highest minor of it that is spoken. */
typedef struct vigil_abi_version {
    uint16_t major;
    uint16_t minor;
} vigil_abi_version;

/** What the host offers. Borrowed for the call. Frozen for all majors. The
 *  host's function table is not offered here (its layout depends on the
 *  version chosen): each instance gets it in vigil_create_args. */
typedef struct vigil_entry_args {
    uint32_t size;                       /* sizeof(vigil_entry_args) */
    uint32_t version_count;              /* entries in `versions` */
    const vigil_abi_version *versions;   /* the majors the host speaks, each with
                                            its highest minor, best first */
} vigil_entry_args;

/** What the plugin answers. Host-owned; the plugin fills it in. Frozen for
 *  all majors. */
typedef struct vigil_entry_result {
    uint32_t size;        /* set by the HOST: sizeof as the host compiled it.
                             The plugin writes no field beyond it. */
    uint16_t abi_major;   /* the version the plugin chose: the major must be */
    uint16_t abi_minor;   /* one offered, the minor the one it was built for */
    const vigil_plugin_descriptor *descriptor; /* plugin-owned, static */
    vigil_error error;    /* host-owned buffer for a refusal message */
} vigil_entry_result;

/**
 * The one exported symbol. Called from one thread at a time, before any
 * instance of the plugin exists, possibly more than once, with no side effects expected beyond
 * building the descriptor (the same one on every call). Returns VIGIL_OK and fills `result`, or VIGIL_E_UNSUPPORTED
 * (no offered version is spoken) with a message in result->error.
 */
typedef vigil_status (*vigil_plugin_entry_fn)(const vigil_entry_args *args,
                                              vigil_entry_result *result);

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args,
                                             vigil_entry_result *result);

/**
 * Helper for the common case: picks ABI VIGIL_ABI_MAJOR.VIGIL_ABI_MINOR from
 * what the host offers and answers with `descriptor`. It answers with the
 * minor the plugin was built for even when the host offers a lower one; the
 * host then refuses it with a message naming both versions (a plugin that can
 * work with less may answer a lower minor itself). A plugin's whole entry
 * point can be `return vigil_negotiate(args, result, &my_descriptor);`.
 */
static inline vigil_status vigil_negotiate(const vigil_entry_args *args,
                                           vigil_entry_result *result,
                                           const vigil_plugin_descriptor *descriptor) {
    uint32_t i;
    if (args == NULL || result == NULL ||
        args->size < offsetof(vigil_entry_args, versions) + sizeof(args->versions) ||
        result->size < offsetof(vigil_entry_result, descriptor) + sizeof(result->descriptor))
        return VIGIL_E_INVALID_ARGUMENT;
    for (i = 0; args->versions != NULL && i < args->version_count; i++) {
        if (args->versions[i].major == VIGIL_ABI_MAJOR) {
            result->abi_major = VIGIL_ABI_MAJOR;
            result->abi_minor = VIGIL_ABI_MINOR;
            result->descriptor = descriptor;
            return VIGIL_OK;
        }
    }
    if (result->size >= sizeof(vigil_entry_result))
        vigil_error_set(&result->error, VIGIL_E_UNSUPPORTED,
                        "plugin speaks Vigil ABI %d.%d; the host offers no major %d",
                        VIGIL_ABI_MAJOR, VIGIL_ABI_MINOR, VIGIL_ABI_MAJOR);
    return VIGIL_E_UNSUPPORTED;
}

/* ------------------------------------------------------------- layout pins */

#if !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define VIGIL_STATIC_ASSERT(c, m) _Static_assert(c, m)
#elif defined(__cplusplus) && __cplusplus >= 201103L
#define VIGIL_STATIC_ASSERT(c, m) static_assert(c, m)
#else /* C99: a negative array size fails the build */
#define VIGIL_CAT2_(a, b) a##b
#define VIGIL_CAT_(a, b) VIGIL_CAT2_(a, b)
#define VIGIL_STATIC_ASSERT(c, m) typedef char VIGIL_CAT_(vigil_layout_check_, __LINE__)[(c) ? 1 : -1]
#endif

VIGIL_STATIC_ASSERT(sizeof(vigil_status) == 4, "enums are 32-bit on the wire");
VIGIL_STATIC_ASSERT(sizeof(vigil_type) == 4, "enums are 32-bit on the wire");
VIGIL_STATIC_ASSERT(sizeof(vigil_log_level) == 4, "enums are 32-bit on the wire");

#if UINTPTR_MAX == 0xffffffffffffffffu
VIGIL_STATIC_ASSERT(sizeof(vigil_str) == 16, "vigil_str is frozen");
VIGIL_STATIC_ASSERT(sizeof(vigil_value) == 24, "vigil_value is frozen");
VIGIL_STATIC_ASSERT(sizeof(vigil_field) == 40, "vigil_field is frozen");
VIGIL_STATIC_ASSERT(sizeof(vigil_option) == 40, "vigil_option is frozen");
VIGIL_STATIC_ASSERT(sizeof(vigil_event) == 48, "vigil_event 1.0 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_error) == 24, "vigil_error 1.0 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_host_api) == 48, "vigil_host_api 1.1 layout");
VIGIL_STATIC_ASSERT(VIGIL_HOST_API_SIZE_1_0 == 40, "vigil_host_api 1.0 size");
VIGIL_STATIC_ASSERT(VIGIL_OPTION_SPEC_SIZE_1_0 == 64, "vigil_option_spec 1.0 size");
VIGIL_STATIC_ASSERT(offsetof(vigil_option_spec, example_text) == 64, "example_text follows the 1.0 members");
VIGIL_STATIC_ASSERT(sizeof(vigil_option_spec) == 80, "vigil_option_spec 1.3 layout");
VIGIL_STATIC_ASSERT(VIGIL_OPTION_SPEC_SIZE_1_3 == 80, "vigil_option_spec 1.3 size");
VIGIL_STATIC_ASSERT(VIGIL_FIELD_SPEC_SIZE_1_0 == 56, "vigil_field_spec 1.0 size");
VIGIL_STATIC_ASSERT(offsetof(vigil_field_spec, flags) == 56, "flags follow the 1.0 members");
VIGIL_STATIC_ASSERT(sizeof(vigil_field_spec) == 64, "vigil_field_spec 1.4 layout");
VIGIL_STATIC_ASSERT(VIGIL_FIELD_SPEC_SIZE_1_4 == 64, "vigil_field_spec 1.4 size");
VIGIL_STATIC_ASSERT(sizeof(vigil_event_spec) == 56, "vigil_event_spec 1.0 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_create_args) == 64, "vigil_create_args 1.0 layout");
VIGIL_STATIC_ASSERT(VIGIL_DESCRIPTOR_SIZE_1_0 == 136, "descriptor 1.0 size");
VIGIL_STATIC_ASSERT(sizeof(vigil_plugin_descriptor) == 152, "descriptor 1.5 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_output_event) == 104, "vigil_output_event 1.5 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_batch) == 32, "vigil_batch 1.5 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_write_result) == 32, "vigil_write_result 1.5 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_entry_args) == 16, "vigil_entry_args 1.0 layout");
VIGIL_STATIC_ASSERT(sizeof(vigil_entry_result) == 40, "vigil_entry_result 1.0 layout");
#endif

#ifdef __cplusplus
}
#endif

#endif /* VIGIL_PLUGIN_H */
