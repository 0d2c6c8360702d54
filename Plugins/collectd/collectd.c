/*
 * collectd.c — the `collectd` Vigil plugin: runs one of collectd's own
 * plugins (/usr/lib/collectd/NAME.so, unmodified) as a Vigil monitor.
 *
 * collectd's plugins bind at load time to the daemon's API (plugin_log,
 * plugin_dispatch_values, cf_util_get_string…). Vigil loads its plugins
 * RTLD_LOCAL, so that API lives in a separate library, the shim
 * (shim/, libvigil_collectd_shim.so, found in collectd-shim/ beside this
 * file), which this plugin loads RTLD_GLOBAL before the collectd plugin.
 *
 * Lifecycle: create loads the collectd plugin, runs its module_register
 * and hands it the manifest's `config`; start runs its init (once) and
 * opens the gate; poll runs its read callbacks that are due; stop closes
 * the gate (nothing it dispatches reaches the host after stop returns);
 * destroy runs its shutdown callbacks and unloads it.
 *
 * A collectd plugin keeps its state in statics, runs init once per process
 * and, for some, starts threads stopped with SIGTERM, forks or calls
 * exit(): in the host's process only the plugins known to do none of that
 * run, one instance each; the others, and any second instance, need a
 * process of their own. In the host's process their create answers
 * VIGIL_E_UNSUPPORTED, and the host runs them in a runner instead unless
 * the manifest says `isolation: none` (the runner sets
 * VIGIL_ISOLATION=process, and this plugin installs the SIGTERM handler
 * collectd's daemon would have).
 */
#define _GNU_SOURCE 1 /* dladdr */

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vigil_plugin.h"
#include "shim/vcd.h"

#define DEFAULT_PLUGIN_DIR "/usr/lib/collectd"
#define DEFAULT_TYPES_DB "/usr/share/collectd/types.db"
#define SHIM_RELATIVE "collectd-shim/libvigil_collectd_shim.so"
#define MAX_PLUGIN_LIST 8192

/* ------------------------------------------------------- self-description */

static const vigil_field_spec identity_fields[] = {
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("host"),
     .doc = VIGIL_STR("The host the value is about: this host, or the sender's name for received values."),
     .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("plugin"),
     .doc = VIGIL_STR("collectd's plugin name (cpu, df, interface…)."), .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("plugin_instance"),
     .doc = VIGIL_STR("collectd's plugin instance (a CPU number, a device); may be empty."),
     .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("type"),
     .doc = VIGIL_STR("The types.db type, which names the sources that follow as fields."),
     .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("type_instance"),
     .doc = VIGIL_STR("collectd's type instance (user, idle, free…); may be empty."),
     .flags = VIGIL_FIELD_IDENTITY},
};

static const vigil_field_spec notification_fields[] = {
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("host"),
     .doc = VIGIL_STR("The host the notification is about."), .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("plugin"),
     .doc = VIGIL_STR("collectd's plugin name."), .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("plugin_instance"),
     .doc = VIGIL_STR("collectd's plugin instance; may be empty."), .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("type"),
     .doc = VIGIL_STR("collectd's type; may be empty."), .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("type_instance"),
     .doc = VIGIL_STR("collectd's type instance; may be empty."), .flags = VIGIL_FIELD_IDENTITY},
    {.size = sizeof(vigil_field_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("message"),
     .doc = VIGIL_STR("The notification's text.")},
};

static const vigil_event_spec events[] = {
    {.size = sizeof(vigil_event_spec), .flags = VIGIL_EVENT_DYNAMIC_FIELDS, .kind = VIGIL_STR("value"),
     .doc = VIGIL_STR("One value list the plugin dispatched: the fields above, then one field per data source "
                      "of its type (a double for gauges, an integer for derive, counter and absolute "
                      "sources) and NAME_rate, per second, for derive, counter and absolute sources once "
                      "two values are known."),
     .fields = identity_fields, .field_count = sizeof identity_fields / sizeof identity_fields[0]},
    {.size = sizeof(vigil_event_spec), .flags = VIGIL_EVENT_DYNAMIC_FIELDS, .kind = VIGIL_STR("notification"),
     .doc = VIGIL_STR("A notification the plugin dispatched; FAILURE is an error, WARNING a warning, OKAY "
                      "info. Its meta data follow as fields of their own names (meta_NAME where a name "
                      "is taken)."),
     .fields = notification_fields, .field_count = sizeof notification_fields / sizeof notification_fields[0]},
};

/* Filled in at the first entry call: the `plugin` option's doc lists what
 * is installed here. */
static char plugin_doc[MAX_PLUGIN_LIST + 512];

static vigil_option_spec options[] = {
    {.size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("plugin"),
     .flags = VIGIL_OPTION_REQUIRED, .example_text = VIGIL_STR("load")},
    {.size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_JSON, .name = VIGIL_STR("config"),
     .default_text = VIGIL_STR("{}"),
     .doc = VIGIL_STR("The plugin's configuration as in a <Plugin> block: `Key: value`; a list repeats "
                      "the key; a map is a <Key ARGS> block whose `$args` are its arguments.")},
    {.size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("plugin_dir"),
     .default_text = VIGIL_STR(DEFAULT_PLUGIN_DIR),
     .doc = VIGIL_STR("Where a plugin given by name is looked for.")},
    {.size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_JSON, .name = VIGIL_STR("types_db"),
     .default_text = VIGIL_STR("[]"),
     .doc = VIGIL_STR("More types.db files, read after " DEFAULT_TYPES_DB " (collectd's TypesDB).")},
    {.size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("hostname"),
     .doc = VIGIL_STR("The host name values are dispatched with (collectd's Hostname); default: this "
                      "machine's.")},
};

static vigil_status compat_create(const vigil_create_args *, void **, vigil_error *);
static vigil_status compat_start(void *, vigil_error *);
static vigil_status compat_poll(void *, vigil_error *);
static vigil_status compat_stop(void *, vigil_error *);
static void compat_destroy(void *);

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_MONITOR,
    .name = VIGIL_STR("collectd"),
    .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("Runs one of collectd's own plugins, unmodified, and emits what it dispatches."),
    .options = options,
    .option_count = sizeof options / sizeof options[0],
    .events = events,
    .event_count = sizeof events / sizeof events[0],
    .default_interval_ns = 10000000000LL, /* collectd's Interval default */
    .create = compat_create,
    .start = compat_start,
    .poll = compat_poll,
    .stop = compat_stop,
    .destroy = compat_destroy,
};

/* ------------------------------------------------- plugins safe in-process */

/* collectd plugins that read /proc, /sys or a syscall from their read
 * callback and do nothing else a host process must fear: no threads of
 * their own, no signals, no fork, no exit(). Checked against Debian's
 * builds by the tests (none imports pthread_create, pthread_kill, fork,
 * exit, sigaction or popen). Everything else runs isolated. */
static const char *const in_process_safe[] = {
    "battery", "buddyinfo", "cgroups", "conntrack", "contextswitch", "cpu", "cpufreq", "cpusleep", "df",
    "disk", "drbd", "entropy", "ethstat", "fhcount", "filecount", "fscache", "hugepages", "interface", "ipc",
    "irq", "load", "md", "memory", "netlink", "nfs", "numa", "processes", "protocols", "serial", "swap",
    "synproxy", "tcpconns", "thermal", "ubi", "uptime", "users", "vmem", "vserver", "wireless", "zfs_arc",
};

static int safe_in_process(const char *name) {
    for (size_t i = 0; i < sizeof in_process_safe / sizeof in_process_safe[0]; i++)
        if (strcmp(in_process_safe[i], name) == 0) return 1;
    return 0;
}

static int isolated(void) {
    const char *mode = getenv("VIGIL_ISOLATION");
    return mode != NULL && strcmp(mode, "process") == 0;
}

/* ------------------------------------------------------------------- shim */

typedef struct shim_api {
    int (*interface_version)(void);
    int (*global_init)(const char *, cdtime_t, const char *, char *, size_t);
    int (*types_add)(const char *, int, char *, size_t);
    vcd_module *(*module_load)(const char *, const char *, const char *, cdtime_t, const vcd_sink *, void *, int *,
                               char *, size_t);
    vcd_config *(*config_parse)(const char *, size_t, const char *, char *, size_t);
    void (*config_free)(vcd_config *);
    int (*module_configure)(vcd_module *, const vcd_config *, char *, size_t);
    int (*module_init)(vcd_module *, char *, size_t);
    void (*module_gate)(vcd_module *, int);
    int (*module_read)(vcd_module *, cdtime_t, int *, char *, size_t);
    void (*module_unload)(vcd_module *);
    vcd_counts (*module_counts)(const vcd_module *);
} shim_api;

static pthread_mutex_t shim_lock = PTHREAD_MUTEX_INITIALIZER;
static shim_api shim;
static int shim_loaded;

/* This file's directory, from the loader. */
static int own_dir(char *out, size_t size) {
    Dl_info info;
    if (dladdr((void *)&vigil_plugin_entry, &info) == 0 || info.dli_fname == NULL) return -1;
    const char *slash = strrchr(info.dli_fname, '/');
    if (slash == NULL) return snprintf(out, size, ".") >= (int)size ? -1 : 0;
    size_t n = (size_t)(slash - info.dli_fname);
    if (n + 1 > size) return -1;
    memcpy(out, info.dli_fname, n);
    out[n] = 0;
    return 0;
}

#define RESOLVE(field, symbol)                                                                                \
    do {                                                                                                      \
        *(void **)&api->field = dlsym(handle, symbol);                                                        \
        if (api->field == NULL) return vigil_error_set(err, VIGIL_E_FATAL, "%s lacks %s", path, symbol);    \
    } while (0)

static vigil_status resolve_shim(void *handle, const char *path, shim_api *api, vigil_error *err) {
    RESOLVE(interface_version, "vcd_interface_version");
    RESOLVE(global_init, "vcd_global_init");
    RESOLVE(types_add, "vcd_types_add");
    RESOLVE(module_load, "vcd_module_load");
    RESOLVE(config_parse, "vcd_config_parse");
    RESOLVE(config_free, "vcd_config_free");
    RESOLVE(module_configure, "vcd_module_configure");
    RESOLVE(module_init, "vcd_module_init");
    RESOLVE(module_gate, "vcd_module_gate");
    RESOLVE(module_read, "vcd_module_read");
    RESOLVE(module_unload, "vcd_module_unload");
    RESOLVE(module_counts, "vcd_module_counts");
    if (api->interface_version() != VCD_INTERFACE_VERSION)
        return vigil_error_set(err, VIGIL_E_FATAL, "%s is interface %d, this plugin needs %d", path,
                               api->interface_version(), VCD_INTERFACE_VERSION);
    return VIGIL_OK;
}

#undef RESOLVE

static vigil_status load_shim(vigil_error *err) {
    vigil_status status = VIGIL_OK;
    pthread_mutex_lock(&shim_lock);
    if (!shim_loaded) {
        char dir[PATH_MAX], path[PATH_MAX + sizeof SHIM_RELATIVE + 1];
        void *handle = NULL;
        if (own_dir(dir, sizeof dir) != 0) {
            status = vigil_error_set(err, VIGIL_E_FATAL, "cannot tell where the collectd plugin file is");
        } else {
            snprintf(path, sizeof path, "%s/%s", dir, SHIM_RELATIVE);
            /* Global, so that collectd's plugins bind to it; never unloaded. */
            handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL | RTLD_NODELETE);
            if (handle == NULL) {
                const char *why = dlerror();
                status = vigil_error_set(err, VIGIL_E_FATAL, "cannot load the collectd shim: %s",
                                         why != NULL ? why : path);
            }
        }
        shim_api api;
        if (status == VIGIL_OK) status = resolve_shim(handle, path, &api, err);
        if (status == VIGIL_OK) {
            shim = api;
            shim_loaded = 1;
        }
    }
    pthread_mutex_unlock(&shim_lock);
    return status;
}

/* ---------------------------------------------------------------- instance */

typedef struct compat {
    vigil_host_ctx *host;
    const vigil_host_api *api;
    char name[DATA_MAX_NAME_LEN];
    vcd_module *module;
    vcd_config *config;
    int running;
    vcd_counts reported;     /* the module's counts as last said in the log */
    int64_t reported_at_ns;
} compat;

static int64_t cdtime_to_ns(cdtime_t t) {
    /* seconds << 30; past 2^63 ns (year 2262) it saturates */
    uint64_t seconds = t >> 30, fraction = t & 0x3FFFFFFF;
    if (seconds >= (uint64_t)INT64_MAX / 1000000000ULL) return INT64_MAX;
    return (int64_t)(seconds * 1000000000ULL + ((fraction * 1000000000ULL + (1ULL << 29)) >> 30));
}

static vigil_field str_field(const char *name, const char *value) {
    vigil_field f = {.name = vigil_str_from_cstr(name), .value = {.type = VIGIL_TYPE_STRING}};
    f.value.as.str = vigil_str_from_cstr(value);
    return f;
}

/* An unsigned number as an int; past INT64_MAX as a double rather than wrapped. */
static vigil_value unsigned_value(uint64_t u) {
    vigil_value out = {.type = VIGIL_TYPE_INT};
    if (u <= (uint64_t)INT64_MAX) {
        out.as.i64 = (int64_t)u;
    } else {
        out.type = VIGIL_TYPE_DOUBLE;
        out.as.f64 = (double)u;
    }
    return out;
}

static vigil_value number_value(int ds_type, value_t v) {
    vigil_value out = {.type = VIGIL_TYPE_INT};
    switch (ds_type) {
    case DS_TYPE_GAUGE:
        out.type = VIGIL_TYPE_DOUBLE;
        out.as.f64 = v.gauge;
        break;
    case DS_TYPE_DERIVE: out.as.i64 = v.derive; break;
    case DS_TYPE_COUNTER: return unsigned_value((uint64_t)v.counter);
    case DS_TYPE_ABSOLUTE: return unsigned_value(v.absolute);
    default:
        out.type = VIGIL_TYPE_DOUBLE;
        out.as.f64 = NAN;
    }
    return out;
}

static const char *const notification_names[] = {"host", "plugin", "plugin_instance", "type", "type_instance",
                                                 "message", "counters"};

static int taken_name(const char *name) {
    for (size_t i = 0; i < sizeof notification_names / sizeof notification_names[0]; i++)
        if (strcmp(notification_names[i], name) == 0) return 1;
    return 0;
}

enum { IDENTIFIER_FIELDS = 5 };

/* collectd's identifier as an event's first fields, named as the first of
 * notification_names; returns how many (IDENTIFIER_FIELDS). */
static size_t identifier_fields(vigil_field *fields, const char *host, const char *plugin, const char *plugin_instance,
                                const char *type, const char *type_instance) {
    const char *values[IDENTIFIER_FIELDS] = {host, plugin, plugin_instance, type, type_instance};
    for (size_t i = 0; i < IDENTIFIER_FIELDS; i++) fields[i] = str_field(notification_names[i], values[i]);
    return IDENTIFIER_FIELDS;
}

static void sink_values(void *ctx, const data_set_t *ds, const value_list_t *vl, const gauge_t *rates) {
    compat *c = ctx;
    size_t max = IDENTIFIER_FIELDS + 2 * ds->ds_num + 1;
    vigil_field stack_fields[IDENTIFIER_FIELDS + 2 * 16 + 1];
    char stack_names[16][DATA_MAX_NAME_LEN + 5];
    vigil_field *fields = max <= sizeof stack_fields / sizeof stack_fields[0] ? stack_fields
                                                                              : calloc(max, sizeof *fields);
    char(*rate_names)[DATA_MAX_NAME_LEN + 5] = ds->ds_num <= 16 ? stack_names
                                                                : calloc(ds->ds_num, sizeof *rate_names);
    char stack_sources[16][DATA_MAX_NAME_LEN + 4];
    char(*source_names)[DATA_MAX_NAME_LEN + 4] = ds->ds_num <= 16 ? stack_sources
                                                                  : calloc(ds->ds_num, sizeof *source_names);
    if (fields == NULL || rate_names == NULL || source_names == NULL) goto done;
    size_t n = identifier_fields(fields, vl->host, vl->plugin, vl->plugin_instance, vl->type, vl->type_instance);
    for (size_t i = 0; i < ds->ds_num; i++) {
        const data_source_t *source = &ds->ds[i];
        /* A source named like an identity field (a types.db of one's own)
         * is given as ds_NAME. */
        if (taken_name(source->name)) {
            snprintf(source_names[i], sizeof source_names[i], "ds_%s", source->name);
            fields[n].name = vigil_str_from_cstr(source_names[i]);
        } else {
            fields[n].name = vigil_str_from_cstr(source->name);
        }
        fields[n++].value = number_value(source->type, vl->values[i]);
        if (source->type != DS_TYPE_GAUGE && rates != NULL && !isnan(rates[i])) {
            snprintf(rate_names[i], sizeof rate_names[i], "%.*s_rate", (int)fields[n - 1].name.len,
                     fields[n - 1].name.ptr);
            fields[n].name = vigil_str_from_cstr(rate_names[i]);
            fields[n].value.type = VIGIL_TYPE_DOUBLE;
            fields[n].value.reserved = 0;
            fields[n++].value.as.f64 = rates[i];
        }
    }
    /* The sources that are no gauge, by the names given above: counters
     * (VIGIL_EVENT_DYNAMIC_FIELDS says how), cut at a whole name if a type
     * has more of them than the buffer holds. */
    char counters[512];
    size_t used = 0;
    counters[0] = 0;
    for (size_t i = 0, f = IDENTIFIER_FIELDS; i < ds->ds_num; i++) {
        const data_source_t *source = &ds->ds[i];
        const vigil_str name = fields[f].name;
        f += (source->type != DS_TYPE_GAUGE && rates != NULL && !isnan(rates[i])) ? 2 : 1;
        if (source->type == DS_TYPE_GAUGE) continue;
        if (used + name.len + 2 > sizeof counters) break;
        if (used > 0) counters[used++] = ',';
        memcpy(counters + used, name.ptr, name.len);
        used += name.len;
        counters[used] = 0;
    }
    if (used > 0) fields[n++] = str_field("counters", counters);
    vigil_event event = {.size = sizeof event, .severity = VIGIL_SEVERITY_INFO, .kind = VIGIL_STR("value"),
                         .time_ns = cdtime_to_ns(vl->time), .fields = fields, .field_count = n};
    (void)c->api->emit(c->host, &event);
done:
    if (fields != stack_fields) free(fields);
    if (rate_names != stack_names) free(rate_names);
    if (source_names != stack_sources) free(source_names);
}

#define MAX_META 256

static void sink_notification(void *ctx, const notification_t *n) {
    compat *c = ctx;
    vigil_field fields[IDENTIFIER_FIELDS + 1 + MAX_META];
    char renamed[MAX_META][DATA_MAX_NAME_LEN + 8];
    size_t count = identifier_fields(fields, n->host, n->plugin, n->plugin_instance, n->type, n->type_instance);
    fields[count++] = str_field("message", n->message);
    size_t metas = 0;
    for (const notification_meta_t *m = n->meta; m != NULL && metas < MAX_META; m = m->next, metas++) {
        char name[DATA_MAX_NAME_LEN];
        memcpy(name, m->name, sizeof name);
        name[sizeof name - 1] = 0;
        snprintf(renamed[metas], sizeof renamed[metas], "%s%s", taken_name(name) ? "meta_" : "", name);
        vigil_field *f = &fields[count++];
        f->name = vigil_str_from_cstr(renamed[metas]);
        f->value.reserved = 0;
        switch (m->type) {
        case NM_TYPE_STRING:
            f->value.type = VIGIL_TYPE_STRING;
            f->value.as.str = vigil_str_from_cstr(m->nm_value.nm_string);
            break;
        case NM_TYPE_SIGNED_INT:
            f->value.type = VIGIL_TYPE_INT;
            f->value.as.i64 = m->nm_value.nm_signed_int;
            break;
        case NM_TYPE_UNSIGNED_INT: f->value = unsigned_value(m->nm_value.nm_unsigned_int); break;
        case NM_TYPE_DOUBLE:
            f->value.type = VIGIL_TYPE_DOUBLE;
            f->value.as.f64 = m->nm_value.nm_double;
            break;
        case NM_TYPE_BOOLEAN:
            f->value.type = VIGIL_TYPE_BOOL;
            f->value.as.boolean = m->nm_value.nm_boolean ? 1 : 0;
            break;
        default: count--; break;
        }
    }
    uint32_t severity = n->severity == NOTIF_FAILURE   ? VIGIL_SEVERITY_ERROR
                        : n->severity == NOTIF_WARNING ? VIGIL_SEVERITY_WARNING
                        : n->severity == NOTIF_OKAY    ? VIGIL_SEVERITY_INFO
                                                       : VIGIL_SEVERITY_NOTICE;
    vigil_event event = {.size = sizeof event, .severity = severity, .kind = VIGIL_STR("notification"),
                         .time_ns = cdtime_to_ns(n->time), .fields = fields, .field_count = count};
    (void)c->api->emit(c->host, &event);
}

static void sink_log(void *ctx, int level, const char *message) {
    compat *c = ctx;
    vigil_log_level mapped = level < LOG_ERR        ? VIGIL_LOG_CRITICAL
                             : level == LOG_ERR     ? VIGIL_LOG_ERROR
                             : level == LOG_WARNING ? VIGIL_LOG_WARNING
                             : level == LOG_NOTICE  ? VIGIL_LOG_NOTICE
                             : level == LOG_INFO    ? VIGIL_LOG_INFO
                                                    : VIGIL_LOG_DEBUG;
    c->api->log(c->host, mapped, vigil_str_from_cstr(message));
}

static const vcd_sink sink = {.values = sink_values, .notification = sink_notification, .log = sink_log};

/* -------------------------------------------------------------- options */

static const vigil_option *option(const vigil_create_args *args, const char *name) {
    for (size_t i = 0; i < args->option_count; i++) {
        const vigil_option *o = &args->options[i];
        if (o->name.len == strlen(name) && memcmp(o->name.ptr, name, o->name.len) == 0) return o;
    }
    return NULL;
}

/* A string option as a NUL-terminated copy in `out`; "" when unset. */
static int option_text(const vigil_create_args *args, const char *name, char *out, size_t size) {
    const vigil_option *o = option(args, name);
    out[0] = 0;
    if (o == NULL || (o->value.type != VIGIL_TYPE_STRING && o->value.type != VIGIL_TYPE_JSON)) return 0;
    if (o->value.as.str.len >= size) return -1;
    if (memchr(o->value.as.str.ptr, 0, o->value.as.str.len) != NULL) return -1;
    memcpy(out, o->value.as.str.ptr, o->value.as.str.len);
    out[o->value.as.str.len] = 0;
    return 0;
}

static int valid_plugin_name(const char *name) {
    if (name[0] == 0 || strlen(name) >= 64) return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return 0;
    return 1;
}

/* Every "NAME.so" in `dir`, sorted, comma-separated, into `out`. */
static void list_plugins(const char *dir, char *out, size_t size) {
    out[0] = 0;
    struct dirent **entries = NULL;
    int n = scandir(dir, &entries, NULL, alphasort);
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const char *file = entries[i]->d_name;
        size_t len = strlen(file);
        if (len > 3 && strcmp(file + len - 3, ".so") == 0 && used + len + 2 < size) {
            used += (size_t)snprintf(out + used, size - used, "%s%.*s", used ? ", " : "", (int)(len - 3), file);
        }
        free(entries[i]);
    }
    free(entries);
}

/* The missing library a dlopen message names ("libfoo.so.1: cannot open
 * shared object file…"), when it names one other than the plugin itself. */
static int missing_library(const char *message, const char *plugin_path, char *out, size_t size) {
    const char *marker = strstr(message, ": cannot open shared object file");
    if (marker == NULL) return 0;
    const char *start = message;
    for (const char *p = message; p < marker; p++)
        if (p[0] == ':' && p[1] == ' ') start = p + 2;
    size_t n = (size_t)(marker - start);
    if (n == 0 || n >= size) return 0;
    memcpy(out, start, n);
    out[n] = 0;
    return strcmp(out, plugin_path) != 0;
}

static vigil_status add_types(const vigil_create_args *args, vigil_error *err) {
    const vigil_option *o = option(args, "types_db");
    if (o == NULL || o->value.type != VIGIL_TYPE_JSON) return VIGIL_OK;
    /* A list of strings: a small scan of the JSON the host wrote. */
    const char *p = o->value.as.str.ptr, *end = p + o->value.as.str.len;
    while (p < end && (*p == ' ' || *p == '\n')) p++;
    if (p >= end || *p != '[')
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.types_db: a list of file paths is expected");
    p++;
    for (int index = 0;; index++) {
        while (p < end && (*p == ' ' || *p == ',' || *p == '\n')) p++;
        if (p < end && *p == ']') break;
        if (p >= end || *p != '"')
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.types_db[%d]: a file path is expected",
                                   index);
        const char *start = ++p;
        while (p < end && *p != '"') p += *p == '\\' ? 2 : 1;
        char path[PATH_MAX];
        size_t n = (size_t)(p - start);
        if (p >= end || n >= sizeof path || memchr(start, '\\', n) != NULL)
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                                   "options.types_db[%d]: a plain file path is expected", index);
        memcpy(path, start, n);
        path[n] = 0;
        p++;
        char why[512] = "";
        /* In the host's process types are shared with the other monitors:
         * a file may add types there, not change them. */
        if (shim.types_add(path, isolated(), why, sizeof why) != 0)
            return vigil_error_set(err, strstr(why, "redefines type") != NULL ? VIGIL_E_UNSUPPORTED : VIGIL_E_INVALID_CONFIG,
                                   "options.types_db[%d]: %s%s", index, why,
                                   strstr(why, "redefines type") != NULL
                                       ? ", which other monitors of this process use"
                                       : "");
    }
    return VIGIL_OK;
}

/* ------------------------------------------------------------- lifecycle */

static vigil_status compat_create(const vigil_create_args *args, void **instance, vigil_error *err) {
    char plugin[PATH_MAX], dir[PATH_MAX], hostname[256];
    if (option_text(args, "plugin", plugin, sizeof plugin) != 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.plugin: at most %d bytes, no NUL", PATH_MAX - 1);
    if (plugin[0] == 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.plugin: a collectd plugin's name or path is required");
    if (option_text(args, "plugin_dir", dir, sizeof dir) != 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.plugin_dir: at most %d bytes, no NUL", PATH_MAX - 1);
    if (dir[0] == 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.plugin_dir: a directory is required");
    if (option_text(args, "hostname", hostname, sizeof hostname) != 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.hostname: at most 255 bytes, no NUL");
    if (hostname[0] == 0 && gethostname(hostname, sizeof hostname) != 0) snprintf(hostname, sizeof hostname, "localhost");
    hostname[sizeof hostname - 1] = 0;

    /* NAME (looked for in plugin_dir) or a path to NAME.so. */
    char path[PATH_MAX * 2 + 8], name[DATA_MAX_NAME_LEN];
    const char *slash = strrchr(plugin, '/');
    const char *base = slash != NULL ? slash + 1 : plugin;
    size_t base_len = strlen(base);
    if (slash != NULL && base_len > 3 && strcmp(base + base_len - 3, ".so") == 0) base_len -= 3;
    if (base_len >= sizeof name) base_len = sizeof name - 1;
    memcpy(name, base, base_len);
    name[base_len] = 0;
    if (!valid_plugin_name(name))
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG,
                               "options.plugin: '%s' is not a collectd plugin name (lower case letters, digits, _)",
                               plugin);
    if (slash != NULL) snprintf(path, sizeof path, "%s", plugin);
    else snprintf(path, sizeof path, "%s/%s.so", dir, name);
    struct stat info;
    int exists = stat(path, &info) == 0;
    int err_no = errno;
    if (!exists || !S_ISREG(info.st_mode)) {
        char found[64];
        list_plugins(dir, found, sizeof found);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.plugin: no collectd plugin '%s' (%s: %s)%s", name,
                               path, exists ? "not a regular file" : strerror(err_no),
                               found[0] ? "; `vigil plugins describe collectd` lists those installed"
                                        : "; none is installed there (apt-get install collectd-core)");
    }
    if (!isolated() && !safe_in_process(name))
        return vigil_error_set(err, VIGIL_E_UNSUPPORTED,
                               "options.plugin: collectd's '%s' plugin may start threads, handle signals, fork or "
                               "exit the process: it needs a process of its own (`isolation: process`)",
                               name);
    /* The list vouches for Debian's files, not for any file of that name. */
    char real[PATH_MAX], expected[PATH_MAX];
    snprintf(expected, sizeof expected, DEFAULT_PLUGIN_DIR "/%s.so", name);
    if (!isolated() && (realpath(path, real) == NULL || strcmp(real, expected) != 0))
        return vigil_error_set(err, VIGIL_E_UNSUPPORTED,
                               "options.plugin: %s is not collectd's own %s: only the plugins installed in "
                               DEFAULT_PLUGIN_DIR " run in the host's process; this one needs a process of its own "
                               "(`isolation: process`)",
                               path, expected);

    vigil_status status = load_shim(err);
    if (status != VIGIL_OK) return status;
    char why[1024] = "";
    cdtime_t interval = DOUBLE_TO_CDTIME_T((double)(args->interval_ns > 0 ? args->interval_ns : 10000000000LL) / 1e9);
    if (shim.global_init(hostname, interval, DEFAULT_TYPES_DB, why, sizeof why) != 0)
        return vigil_error_set(err, VIGIL_E_UNAVAILABLE, "collectd's types.db: %s (is collectd-core installed?)", why);
    status = add_types(args, err);
    if (status != VIGIL_OK) return status;

    compat *c = calloc(1, sizeof *c);
    if (c == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    c->host = args->host;
    c->api = args->api;
    snprintf(c->name, sizeof c->name, "%s", name);

    char config_text_small[1];
    const vigil_option *config = option(args, "config");
    const char *json = config_text_small;
    size_t json_len = 0;
    if (config != NULL && config->value.type == VIGIL_TYPE_JSON) {
        json = config->value.as.str.ptr;
        json_len = config->value.as.str.len;
    }
    c->config = shim.config_parse(json_len ? json : "null", json_len ? json_len : 4, name, why, sizeof why);
    if (c->config == NULL) {
        free(c);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "%s", why);
    }

    int already = 0;
    c->module = shim.module_load(path, name, hostname, interval, &sink, c, &already, why, sizeof why);
    if (c->module == NULL) {
        shim.config_free(c->config);
        free(c);
        char library[256];
        if (already)
            return vigil_error_set(err, VIGIL_E_UNSUPPORTED,
                                   "options.plugin: collectd's '%s' plugin is already loaded in this process and a "
                                   "private copy for this instance could not be made (%s): it needs a process of its "
                                   "own (`isolation: process`)",
                                   name, why);
        if (missing_library(why, path, library, sizeof library))
            return vigil_error_set(err, VIGIL_E_UNAVAILABLE,
                                   "collectd's '%s' plugin needs %s, which is not installed", name, library);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.plugin: cannot load %s: %s", path, why);
    }
    if (shim.module_configure(c->module, c->config, why, sizeof why) != 0) {
        shim.module_unload(c->module);
        shim.config_free(c->config);
        free(c);
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "%s", why);
    }
    *instance = c;
    return VIGIL_OK;
}

/* collectd's daemon handles SIGTERM; plugins stop their threads with
 * pthread_kill(thread, SIGTERM) to interrupt a blocking call. Alone in a
 * runner, this process gives them a handler that does nothing but
 * interrupt (no SA_RESTART). In the host's process such plugins never run. */
static void on_sigterm(int signo) { (void)signo; }

static void install_handlers_once(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    /* A plugin writing to a peer that went away gets EPIPE, not death. */
    signal(SIGPIPE, SIG_IGN);
}

static void install_signal_handlers(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (isolated()) pthread_once(&once, install_handlers_once);
}

static vigil_status compat_start(void *instance, vigil_error *err) {
    compat *c = instance;
    if (c->running) return VIGIL_OK;
    install_signal_handlers();
    char why[1024] = "";
    if (shim.module_init(c->module, why, sizeof why) != 0) return vigil_error_set(err, VIGIL_E_FATAL, "%s", why);
    shim.module_gate(c->module, 1);
    c->running = 1;
    return VIGIL_OK;
}

static cdtime_t now_cdtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((cdtime_t)ts.tv_sec << 30) + (((cdtime_t)ts.tv_nsec << 30) / 1000000000ULL);
}

/* Value lists the shim did not dispatch (as collectd would not have), said
 * in the log at most every 10 s with how many of each since the last time. */
static void report_refusals(compat *c, int now_or_never) {
    vcd_counts now = shim.module_counts(c->module);
    uint64_t unknown = now.unknown_type - c->reported.unknown_type, length = now.bad_length - c->reported.bad_length,
             old = now.too_old - c->reported.too_old;
    if (unknown + length + old == 0) return;
    int64_t at = c->api->now_ns(c->host);
    if (!now_or_never && c->reported_at_ns != 0 && at - c->reported_at_ns < 10000000000LL) return;
    char line[512];
    snprintf(line, sizeof line,
             "value lists of collectd's %s plugin not dispatched (as collectd would not): %llu of a type types.db "
             "does not have, %llu with a value count that does not match their type, %llu not newer than the "
             "last value of their identifier",
             c->name, (unsigned long long)unknown, (unsigned long long)length, (unsigned long long)old);
    c->api->log(c->host, VIGIL_LOG_WARNING, vigil_str_from_cstr(line));
    c->reported = now;
    c->reported_at_ns = at;
}

static vigil_status compat_poll(void *instance, vigil_error *err) {
    compat *c = instance;
    char why[1024] = "";
    int failed = 0;
    report_refusals(c, 0);
    int ran = shim.module_read(c->module, now_cdtime(), &failed, why, sizeof why);
    if (ran > 0 && failed == ran) return vigil_error_set(err, VIGIL_E_TEMPORARY, "%s", why);
    return VIGIL_OK;
}

static vigil_status compat_stop(void *instance, vigil_error *err) {
    compat *c = instance;
    (void)err;
    if (!c->running) return VIGIL_OK;
    shim.module_gate(c->module, 0);
    report_refusals(c, 1);
    c->running = 0;
    return VIGIL_OK;
}

static void compat_destroy(void *instance) {
    compat *c = instance;
    if (c == NULL) return;
    shim.module_unload(c->module);
    shim.config_free(c->config);
    free(c);
}

/* ------------------------------------------------------------------- entry */

static pthread_once_t describe_once = PTHREAD_ONCE_INIT;

static void describe_installed(void) {
    char found[MAX_PLUGIN_LIST];
    list_plugins(DEFAULT_PLUGIN_DIR, found, sizeof found);
    snprintf(plugin_doc, sizeof plugin_doc,
             "The collectd plugin to run: a name looked for in plugin_dir, or a path to its .so. "
             "Installed in " DEFAULT_PLUGIN_DIR ": %s.",
             found[0] ? found : "none (apt-get install collectd-core)");
    options[0].doc = vigil_str_from_cstr(plugin_doc);
}

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    pthread_once(&describe_once, describe_installed);
    return vigil_negotiate(args, result, &descriptor);
}
