/*
 * Modules, callback registration, dispatch, logging, contexts, threads and
 * the daemon's globals: the part of collectd's daemon a plugin talks to
 * while it runs. See shim.h and vcd.h.
 */
#include "shim.h"
#include "vcd.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <stdarg.h>

/* ---------------------------------------------------------------- globals */

char *hostname_g;
cdtime_t interval_g;
int timeout_g = 2;
int pidfile_from_cli;

/* collectd's MaxReadInterval default: the longest a failing read waits. */
#define VCD_MAX_READ_INTERVAL TIME_T_TO_CDTIME_T_STATIC(86400)
#define VCD_MAX_MESSAGE 1024
/* Callbacks one module may register (collectd has no limit; a plugin that
 * registers without end would make every registration slower). */
#define VCD_MAX_CALLBACKS 10000
/* Identifiers one module keeps last values of, for rates. */
#define VCD_MAX_RATE_ENTRIES 1000000

typedef enum {
    CB_CONFIG, CB_COMPLEX_CONFIG, CB_INIT, CB_READ, CB_WRITE, CB_FLUSH, CB_MISSING,
    CB_CACHE_EVENT, CB_SHUTDOWN, CB_LOG, CB_NOTIFICATION, CB_KINDS
} cb_kind;

static const char *const cb_kind_names[CB_KINDS] = {
    "config", "complex config", "init", "read", "write", "flush", "missing",
    "cache event", "shutdown", "log", "notification"};

typedef struct callback {
    cb_kind kind;
    char name[DATA_MAX_NAME_LEN];
    char group[DATA_MAX_NAME_LEN];
    vcd_module *module;
    int removed;
    union {
        int (*config)(const char *, const char *);
        int (*complex_config)(oconfig_item_t *);
        plugin_init_cb init;
        int (*simple_read)(void);
        plugin_read_cb read;
        plugin_shutdown_cb shutdown;
        void (*any)(void);
    } fn;
    int simple;            /* plugin_register_read: no user data */
    user_data_t ud;
    char **keys;           /* simple config: the keys it takes */
    int keys_num;
    cdtime_t interval;     /* read: 0 means the module's */
    cdtime_t wait;         /* read: current interval, doubled on failure */
    cdtime_t next;         /* read: when it is due */
    struct callback *next_cb;
} callback;

struct vcd_module {
    char name[DATA_MAX_NAME_LEN];
    char path[PATH_MAX];
    void *dl;
    vcd_sink sink;
    void *ctx;
    cdtime_t interval;
    pthread_rwlock_t gate_lock;
    int gate_open;
    int inited;
    int threads;
    int copy;              /* loaded from a private copy of the file */
    int copy_fd;           /* the copy's memfd, open while the copy is loaded */
    char hostname[DATA_MAX_NAME_LEN]; /* the monitor's; hostname_g is the first one's */
    pthread_mutex_t rates_lock;
    c_avl_tree_t *rates;   /* identifier -> rate_entry: the module's last values */
    cdtime_t rates_swept;
    int callbacks;         /* registered, live or not: at most VCD_MAX_CALLBACKS */
    int had_reads;         /* it once had a read callback */
    int said_no_reads;
    c_complain_t bad_length_complaint;
    int detached;          /* unloaded: its sink is gone (gate_lock) */
    char last_error[VCD_MAX_MESSAGE];
    char logged_error[VCD_MAX_MESSAGE]; /* the last LOG_ERR while capturing */
    char first_problem[VCD_MAX_MESSAGE]; /* the first warning or error while capturing */
    int capture;           /* while configuring or initialising: keep errors */
    vcd_counts counts;
    pthread_mutex_t counts_lock;
    struct vcd_module *next;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
/* Serializes what decides which file a module runs from: a load's "is the
 * file itself taken?" with the module's entry into `modules`, and an
 * unload's leaving `modules` with its verdict on whether the file stays
 * mapped (`spent`). Without it two monitors created at the same moment both
 * found the file free and both loaded it, sharing its statics. Held across
 * dlopen and dlclose: the constructors and destructors they run may
 * register callbacks, which take registry_lock, never this one. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static callback *callbacks;          /* every kind, newest first */
static vcd_module *modules;          /* loaded modules */
/* Names of modules that stayed mapped after their unload: their statics
 * are spent, so they cannot be loaded again in this process. */
static char **spent_names;
static size_t spent_count;

/* The module a thread works for: set around every call into a module and
 * inherited by the threads it creates (plugin_thread_create). */
static __thread vcd_module *tl_module;
static __thread callback *tl_read;   /* the read callback running, if any */
static __thread plugin_ctx_t tl_ctx;
static __thread int tl_ctx_set;

int vcd_interface_version(void) { return VCD_INTERFACE_VERSION; }

/* ---------------------------------------------------------------- helpers */

static void copy_name(char *dst, const char *src) {
    sstrncpy(dst, src != NULL ? src : "", DATA_MAX_NAME_LEN);
}

static void set_err(char *err, size_t len, const char *format, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t len, const char *format, ...) {
    if (err == NULL || len == 0) return;
    va_list ap;
    va_start(ap, format);
    vsnprintf(err, len, format, ap);
    va_end(ap);
}

/* The module a call from a plugin is attributed to: the thread's, else the
 * only one loaded, else the one whose name is `hint`. */
static vcd_module *current_module(const char *hint) {
    if (tl_module != NULL) return tl_module;
    vcd_module *found = NULL;
    pthread_mutex_lock(&registry_lock);
    if (modules != NULL && modules->next == NULL) found = modules;
    for (vcd_module *m = modules; found == NULL && hint != NULL && m != NULL; m = m->next)
        if (strcasecmp(m->name, hint) == 0) found = m;
    pthread_mutex_unlock(&registry_lock);
    return found;
}

static void count(vcd_module *m, uint64_t *field) {
    pthread_mutex_lock(&m->counts_lock);
    if (*field < UINT64_MAX) (*field)++;
    pthread_mutex_unlock(&m->counts_lock);
}

/* ---------------------------------------------------------------- logging */

static void log_message(int level, const char *message) {
    vcd_module *m = current_module(NULL);
    if (m == NULL) {
        fprintf(stderr, "collectd: %s\n", message);
        return;
    }
    if (m->capture && level <= LOG_WARNING) sstrncpy(m->last_error, message, sizeof m->last_error);
    if (m->capture && level <= LOG_ERR) sstrncpy(m->logged_error, message, sizeof m->logged_error);
    if (m->capture && level <= LOG_WARNING && m->first_problem[0] == 0)
        sstrncpy(m->first_problem, message, sizeof m->first_problem);
    /* After its unload a module that stayed mapped (threads of its own may
     * still log) is detached from the instance that is gone. */
    pthread_rwlock_rdlock(&m->gate_lock);
    if (!m->detached && m->sink.log != NULL) m->sink.log(m->ctx, level, message);
    pthread_rwlock_unlock(&m->gate_lock);
}

void plugin_log(int level, const char *format, ...) {
    char message[VCD_MAX_MESSAGE];
    va_list ap;
    va_start(ap, format);
    vsnprintf(message, sizeof message, format != NULL ? format : "(null)", ap);
    va_end(ap);
#if !COLLECT_DEBUG
    if (level >= LOG_DEBUG) return;
#endif
    log_message(level, message);
}

void daemon_log(int level, const char *format, ...) {
    char message[VCD_MAX_MESSAGE];
    va_list ap;
    va_start(ap, format);
    vsnprintf(message, sizeof message, format != NULL ? format : "(null)", ap);
    va_end(ap);
    vcd_module *m = current_module(NULL);
    char prefixed[VCD_MAX_MESSAGE + DATA_MAX_NAME_LEN + 16];
    snprintf(prefixed, sizeof prefixed, "%s plugin: %s", m != NULL ? m->name : "collectd", message);
    if (level < LOG_DEBUG) log_message(level, prefixed);
}

/* ------------------------------------------------------------ registration */

/* Names are the module's own: two copies of one plugin (see
 * vcd_module_load) each register "load". */
static callback *find_callback(cb_kind kind, const char *name, const vcd_module *m) {
    for (callback *cb = callbacks; cb != NULL; cb = cb->next_cb)
        if (cb->kind == kind && cb->module == m && !cb->removed && strcasecmp(cb->name, name) == 0) return cb;
    return NULL;
}

static void free_user_data(callback *cb) {
    if (cb->ud.free_func != NULL && cb->ud.data != NULL) cb->ud.free_func(cb->ud.data);
    cb->ud.data = NULL;
    cb->ud.free_func = NULL;
}

/* Adds a callback for the calling module. A name already registered for
 * the kind is replaced, as collectd does (with a warning). */
static callback *add_callback(cb_kind kind, const char *name, void (*fn)(void), user_data_t const *ud) {
    if (name == NULL || fn == NULL) {
        ERROR("plugin_register_%s: a name and a callback are required", cb_kind_names[kind]);
        return NULL;
    }
    vcd_module *m = current_module(name);
    if (m != NULL && __atomic_add_fetch(&m->callbacks, 1, __ATOMIC_RELAXED) > VCD_MAX_CALLBACKS) {
        static c_complain_t complaint = C_COMPLAIN_INIT_STATIC;
        c_complain_once(LOG_ERR, &complaint, "plugin_register_%s: more than %d callbacks registered: refused",
                        cb_kind_names[kind], VCD_MAX_CALLBACKS);
        return NULL;
    }
    callback *cb = calloc(1, sizeof *cb);
    if (cb == NULL) return NULL;
    cb->kind = kind;
    copy_name(cb->name, name);
    cb->module = m;
    cb->fn.any = fn;
    if (ud != NULL) cb->ud = *ud;
    pthread_mutex_lock(&registry_lock);
    callback *old = find_callback(kind, cb->name, m);
    if (old != NULL) old->removed = 1;
    cb->next_cb = callbacks;
    callbacks = cb;
    pthread_mutex_unlock(&registry_lock);
    if (old != NULL && kind != CB_READ && kind != CB_CONFIG && kind != CB_COMPLEX_CONFIG)
        WARNING("plugin_register_%s: a callback named \"%s\" already exists, it is replaced", cb_kind_names[kind],
                cb->name);
    return cb;
}

/* Marks callbacks of `kind` named `name` (or in group `name`) removed.
 * They stay allocated until their module unloads: a plugin may unregister
 * itself from inside the callback that is running. */
static int remove_callbacks(cb_kind kind, const char *name, int by_group) {
    int found = 0;
    if (name == NULL) return -1;
    vcd_module *m = current_module(NULL);
    pthread_mutex_lock(&registry_lock);
    for (callback *cb = callbacks; cb != NULL; cb = cb->next_cb) {
        if (cb->kind != kind || cb->removed || (m != NULL && cb->module != m)) continue;
        if (strcasecmp(by_group ? cb->group : cb->name, name) != 0) continue;
        cb->removed = 1;
        found = 1;
    }
    pthread_mutex_unlock(&registry_lock);
    return found ? 0 : -ENOENT;
}

#define FN(f) ((void (*)(void))(f))

int plugin_register_config(const char *name, int (*callback_fn)(const char *key, const char *val),
                           const char **keys, int keys_num) {
    callback *cb = add_callback(CB_CONFIG, name, FN(callback_fn), NULL);
    if (cb == NULL) return -1;
    if (keys != NULL && keys_num > 0) {
        cb->keys = calloc((size_t)keys_num, sizeof *cb->keys);
        for (int i = 0; cb->keys != NULL && i < keys_num; i++) {
            cb->keys[i] = sstrdup(keys[i] != NULL ? keys[i] : "");
            cb->keys_num = i + 1;
        }
    }
    return 0;
}

int plugin_register_complex_config(const char *type, int (*callback_fn)(oconfig_item_t *)) {
    return add_callback(CB_COMPLEX_CONFIG, type, FN(callback_fn), NULL) != NULL ? 0 : -1;
}

int plugin_register_init(const char *name, plugin_init_cb callback_fn) {
    return add_callback(CB_INIT, name, FN(callback_fn), NULL) != NULL ? 0 : -1;
}

int plugin_register_read(const char *name, int (*callback_fn)(void)) {
    callback *cb = add_callback(CB_READ, name, FN(callback_fn), NULL);
    if (cb == NULL) return -1;
    cb->simple = 1;
    return 0;
}

int plugin_register_complex_read(const char *group, const char *name, plugin_read_cb callback_fn,
                                 cdtime_t interval, user_data_t const *user_data) {
    callback *cb = add_callback(CB_READ, name, FN(callback_fn), user_data);
    if (cb == NULL) return -1;
    copy_name(cb->group, group);
    cb->interval = interval;
    return 0;
}

int plugin_register_write(const char *name, plugin_write_cb callback_fn, user_data_t const *user_data) {
    return add_callback(CB_WRITE, name, FN(callback_fn), user_data) != NULL ? 0 : -1;
}

int plugin_register_flush(const char *name, plugin_flush_cb callback_fn, user_data_t const *user_data) {
    return add_callback(CB_FLUSH, name, FN(callback_fn), user_data) != NULL ? 0 : -1;
}

int plugin_register_missing(const char *name, plugin_missing_cb callback_fn, user_data_t const *user_data) {
    return add_callback(CB_MISSING, name, FN(callback_fn), user_data) != NULL ? 0 : -1;
}

int plugin_register_cache_event(const char *name, plugin_cache_event_cb callback_fn, user_data_t const *ud) {
    return add_callback(CB_CACHE_EVENT, name, FN(callback_fn), ud) != NULL ? 0 : -1;
}

int plugin_register_shutdown(const char *name, plugin_shutdown_cb callback_fn) {
    return add_callback(CB_SHUTDOWN, name, FN(callback_fn), NULL) != NULL ? 0 : -1;
}

int plugin_register_log(const char *name, plugin_log_cb callback_fn, user_data_t const *user_data) {
    return add_callback(CB_LOG, name, FN(callback_fn), user_data) != NULL ? 0 : -1;
}

int plugin_register_notification(const char *name, plugin_notification_cb callback_fn,
                                 user_data_t const *user_data) {
    return add_callback(CB_NOTIFICATION, name, FN(callback_fn), user_data) != NULL ? 0 : -1;
}

int plugin_unregister_config(const char *name) { return remove_callbacks(CB_CONFIG, name, 0); }
int plugin_unregister_complex_config(const char *name) { return remove_callbacks(CB_COMPLEX_CONFIG, name, 0); }
int plugin_unregister_init(const char *name) { return remove_callbacks(CB_INIT, name, 0); }
int plugin_unregister_read(const char *name) { return remove_callbacks(CB_READ, name, 0); }
int plugin_unregister_read_group(const char *group) { return remove_callbacks(CB_READ, group, 1); }
int plugin_unregister_write(const char *name) { return remove_callbacks(CB_WRITE, name, 0); }
int plugin_unregister_flush(const char *name) { return remove_callbacks(CB_FLUSH, name, 0); }
int plugin_unregister_missing(const char *name) { return remove_callbacks(CB_MISSING, name, 0); }
int plugin_unregister_cache_event(const char *name) { return remove_callbacks(CB_CACHE_EVENT, name, 0); }
int plugin_unregister_shutdown(const char *name) { return remove_callbacks(CB_SHUTDOWN, name, 0); }
int plugin_unregister_log(const char *name) { return remove_callbacks(CB_LOG, name, 0); }
int plugin_unregister_notification(const char *name) { return remove_callbacks(CB_NOTIFICATION, name, 0); }

/* configfile.h's registration, which some plugins call directly. */
void cf_register(const char *type, int (*callback_fn)(const char *, const char *), const char **keys,
                 int keys_num) {
    plugin_register_config(type, callback_fn, keys, keys_num);
}
int cf_register_complex(const char *type, int (*callback_fn)(oconfig_item_t *)) {
    return plugin_register_complex_config(type, callback_fn);
}
void cf_unregister(const char *type) { plugin_unregister_config(type); }
void cf_unregister_complex(const char *type) { plugin_unregister_complex_config(type); }

/* Callbacks of `kind` belonging to `m` (NULL: of every module, as collectd
 * runs missing-value and cache-event callbacks), live, oldest first, as a
 * NULL-ended array the caller frees; entries stay valid until their module
 * unloads. */
static callback **module_callbacks(vcd_module *m, cb_kind kind) {
    size_t n = 0;
    pthread_mutex_lock(&registry_lock);
    for (callback *cb = callbacks; cb != NULL; cb = cb->next_cb)
        if (cb->kind == kind && (m == NULL || cb->module == m) && !cb->removed) n++;
    callback **list = calloc(n + 1, sizeof *list);
    if (list != NULL) {
        size_t i = n;
        for (callback *cb = callbacks; cb != NULL && i > 0; cb = cb->next_cb)
            if (cb->kind == kind && (m == NULL || cb->module == m) && !cb->removed) list[--i] = cb;
    }
    pthread_mutex_unlock(&registry_lock);
    return list;
}

/* ---------------------------------------------------------------- context */

plugin_ctx_t plugin_get_ctx(void) {
    if (tl_ctx_set) return tl_ctx;
    plugin_ctx_t ctx = {0};
    vcd_module *m = tl_module;
    ctx.name = m != NULL ? m->name : NULL;
    ctx.interval = plugin_get_interval();
    return ctx;
}

plugin_ctx_t plugin_set_ctx(plugin_ctx_t ctx) {
    plugin_ctx_t old = plugin_get_ctx();
    tl_ctx = ctx;
    tl_ctx_set = 1;
    if (ctx.name != NULL) {
        pthread_mutex_lock(&registry_lock);
        for (vcd_module *m = modules; m != NULL; m = m->next)
            if (strcasecmp(m->name, ctx.name) == 0) tl_module = m;
        pthread_mutex_unlock(&registry_lock);
    }
    return old;
}

void plugin_init_ctx(void) {}

cdtime_t plugin_get_interval(void) {
    if (tl_ctx_set && tl_ctx.interval > 0) return tl_ctx.interval;
    if (tl_read != NULL && tl_read->interval > 0) return tl_read->interval;
    if (tl_module != NULL && tl_module->interval > 0) return tl_module->interval;
    return interval_g > 0 ? interval_g : TIME_T_TO_CDTIME_T_STATIC(10);
}

void hostname_set(char const *hostname) {
    char *copy = sstrdup(hostname != NULL ? hostname : "");
    if (copy == NULL) return;
    hostname_g = copy; /* the old one is kept: other threads may be reading it */
}

/* ---------------------------------------------------------------- threads */

typedef struct thread_start {
    void *(*routine)(void *);
    void *arg;
    vcd_module *module;
    cdtime_t interval;
    char name[16];
} thread_start;

static void *thread_trampoline(void *p) {
    thread_start start = *(thread_start *)p;
    free(p);
    tl_module = start.module;
    if (start.name[0] != 0) pthread_setname_np(pthread_self(), start.name);
    return start.routine(start.arg);
}

int plugin_thread_create(pthread_t *thread, void *(*start_routine)(void *), void *arg, char const *name) {
    if (thread == NULL || start_routine == NULL) return EINVAL;
    thread_start *start = calloc(1, sizeof *start);
    if (start == NULL) return ENOMEM;
    start->routine = start_routine;
    start->arg = arg;
    start->module = tl_module;
    if (name != NULL) {
        char full[64];
        snprintf(full, sizeof full, "collectd:%s", name);
        sstrncpy(start->name, full, sizeof start->name);
    }
    if (start->module != NULL) __atomic_store_n(&start->module->threads, 1, __ATOMIC_RELAXED);
    int status = pthread_create(thread, NULL, thread_trampoline, start);
    if (status != 0) free(start);
    return status;
}

/* --------------------------------------------------------------- dispatch */

static int gate_enter(vcd_module *m) {
    pthread_rwlock_rdlock(&m->gate_lock);
    if (m->gate_open) return 1;
    pthread_rwlock_unlock(&m->gate_lock);
    return 0;
}

static void gate_leave(vcd_module *m) { pthread_rwlock_unlock(&m->gate_lock); }

/* The host a value or notification is dispatched with: the module's host
 * name where the plugin left it empty, or wrote the process's hostname_g
 * (which is the first monitor's) into it. */
static void own_host(const vcd_module *m, char host[DATA_MAX_NAME_LEN]) {
    if (host[0] == 0 || (m->hostname[0] != 0 && hostname_g != NULL && strcmp(host, hostname_g) == 0))
        copy_name(host, m->hostname[0] != 0 ? m->hostname : hostname_g);
}

/* The last values of each identifier a module dispatched, for its rates
 * and collectd's "value too old": the module's own, so that two instances
 * of one plugin (the same identifiers) do not see each other's values. */
typedef struct rate_entry {
    cdtime_t time;
    cdtime_t interval;
    size_t count;
    value_t values[];
} rate_entry;

static int compare_keys(const void *a, const void *b) { return strcmp(a, b); }

/* Rates of `vl` against the module's last values into `rates` (NAN where
 * unknown), which then become `vl`'s. -1: not newer than the last value. */
static int module_rates(vcd_module *m, const data_set_t *ds, const value_list_t *vl, gauge_t *rates) {
    char name[6 * DATA_MAX_NAME_LEN];
    for (size_t i = 0; i < ds->ds_num; i++) rates[i] = ds->ds[i].type == DS_TYPE_GAUGE ? vl->values[i].gauge : NAN;
    if (FORMAT_VL(name, sizeof name, vl) != 0) return 0;
    int status = 0;
    pthread_mutex_lock(&m->rates_lock);
    if (m->rates == NULL) m->rates = c_avl_create(compare_keys);
    rate_entry *last = NULL;
    if (m->rates != NULL && c_avl_get(m->rates, name, (void **)&last) == 0) {
        if (vl->time <= last->time) {
            status = -1;
        } else if (last->count == ds->ds_num) {
            double seconds = CDTIME_T_TO_DOUBLE(vl->time - last->time);
            for (size_t i = 0; i < ds->ds_num; i++) {
                value_t now = vl->values[i], before = last->values[i];
                switch (ds->ds[i].type) {
                case DS_TYPE_COUNTER: rates[i] = (double)counter_diff(before.counter, now.counter) / seconds; break;
                case DS_TYPE_DERIVE: rates[i] = ((double)now.derive - (double)before.derive) / seconds; break;
                case DS_TYPE_ABSOLUTE: rates[i] = (double)now.absolute / seconds; break;
                default: break;
                }
            }
        }
        if (status == 0 && last->count == ds->ds_num) {
            memcpy(last->values, vl->values, ds->ds_num * sizeof *vl->values);
            last->time = vl->time;
            last->interval = vl->interval;
        } else if (status == 0) {
            /* The type changed its sources: the entry starts again. */
            char *key = NULL;
            if (c_avl_remove(m->rates, name, (void **)&key, (void **)&last) == 0) {
                free(key);
                free(last);
            }
            last = NULL;
        }
    }
    if (status == 0 && last == NULL && m->rates != NULL && c_avl_size(m->rates) < VCD_MAX_RATE_ENTRIES) {
        rate_entry *entry = malloc(sizeof *entry + ds->ds_num * sizeof(value_t));
        char *key = sstrdup(name);
        if (entry != NULL && key != NULL) {
            entry->time = vl->time;
            entry->interval = vl->interval;
            entry->count = ds->ds_num;
            memcpy(entry->values, vl->values, ds->ds_num * sizeof *vl->values);
            if (c_avl_insert(m->rates, key, entry) == 0) entry = NULL, key = NULL;
        }
        free(entry);
        free(key);
    }
    pthread_mutex_unlock(&m->rates_lock);
    return status;
}

/* Forgets identifiers that stopped coming (collectd's Timeout: that many
 * intervals), at most once a minute, so that a module receiving from
 * hosts that come and go does not keep them all. */
static void sweep_rates(vcd_module *m, cdtime_t now) {
    pthread_mutex_lock(&m->rates_lock);
    if (m->rates == NULL || now < m->rates_swept + TIME_T_TO_CDTIME_T_STATIC(60)) {
        pthread_mutex_unlock(&m->rates_lock);
        return;
    }
    m->rates_swept = now;
    int rounds = timeout_g > 0 ? timeout_g : 2;
    char **stale = NULL;
    size_t n = 0, cap = 0;
    c_avl_iterator_t *it = c_avl_get_iterator(m->rates);
    char *key;
    rate_entry *entry;
    while (it != NULL && c_avl_iterator_next(it, (void **)&key, (void **)&entry) == 0) {
        cdtime_t interval = entry->interval > 0 ? entry->interval : m->interval;
        if (entry->time + (cdtime_t)rounds * interval >= now) continue;
        if (n == cap) {
            size_t grown = cap ? cap * 2 : 64;
            char **bigger = realloc(stale, grown * sizeof *bigger);
            if (bigger == NULL) break;
            stale = bigger;
            cap = grown;
        }
        stale[n++] = key;
    }
    c_avl_iterator_destroy(it);
    for (size_t i = 0; i < n; i++) {
        char *stored = NULL;
        if (c_avl_remove(m->rates, stale[i], (void **)&stored, (void **)&entry) == 0) {
            free(stored);
            free(entry);
        }
    }
    free(stale);
    pthread_mutex_unlock(&m->rates_lock);
}

static void free_rates(vcd_module *m) {
    char *key;
    rate_entry *entry;
    pthread_mutex_lock(&m->rates_lock);
    while (m->rates != NULL && c_avl_pick(m->rates, (void **)&key, (void **)&entry) == 0) {
        free(key);
        free(entry);
    }
    if (m->rates != NULL) c_avl_destroy(m->rates);
    m->rates = NULL;
    pthread_mutex_unlock(&m->rates_lock);
}

/* Fills what collectd fills for a plugin that left it out, checks the
 * list against its type and hands it to the module's sink. */
static int dispatch(vcd_module *m, const data_set_t *ds, value_list_t const *given) {
    if (given == NULL) return EINVAL;
    value_list_t vl = *given;
    vl.host[DATA_MAX_NAME_LEN - 1] = 0;
    vl.plugin[DATA_MAX_NAME_LEN - 1] = 0;
    vl.plugin_instance[DATA_MAX_NAME_LEN - 1] = 0;
    vl.type[DATA_MAX_NAME_LEN - 1] = 0;
    vl.type_instance[DATA_MAX_NAME_LEN - 1] = 0;
    if (m == NULL) m = current_module(vl.plugin);
    if (m == NULL) return -1;
    if (ds == NULL) ds = plugin_get_ds(vl.type);
    if (ds == NULL) {
        count(m, &m->counts.unknown_type);
        return ENOENT;
    }
    if (vl.values == NULL || vl.values_len != ds->ds_num) {
        count(m, &m->counts.bad_length);
        if (vl.values == NULL)
            c_complain_once(LOG_WARNING, &m->bad_length_complaint,
                            "plugin_dispatch_values: %s/%s: no values (a NULL pointer): not dispatched", vl.plugin,
                            vl.type);
        else
            c_complain_once(LOG_WARNING, &m->bad_length_complaint,
                            "plugin_dispatch_values: %s/%s: %zu values where type %s has %zu sources: not dispatched",
                            vl.plugin, vl.type, vl.values_len, ds->type, ds->ds_num);
        return EINVAL;
    }
    own_host(m, vl.host);
    if (vl.time == 0) vl.time = cdtime();
    if (vl.interval == 0) vl.interval = plugin_get_interval();
    if (!gate_enter(m)) {
        count(m, &m->counts.gate_closed);
        return 0;
    }
    int status = 0;
    gauge_t stack_rates[16];
    gauge_t *rates = ds->ds_num <= 16 ? stack_rates : calloc(ds->ds_num, sizeof *rates);
    if (rates == NULL) {
        status = ENOMEM;
    } else if (module_rates(m, ds, &vl, rates) != 0) {
        count(m, &m->counts.too_old);
        status = -1;
    } else {
        /* The process's value cache, which plugins may ask (uc_*), from
         * the plugin's own file: copies repeat its identifiers. */
        if (!m->copy) (void)vcd_cache_update(ds, &vl);
        if (m->sink.values != NULL) m->sink.values(m->ctx, ds, &vl, rates);
    }
    if (rates != stack_rates) free(rates);
    gate_leave(m);
    return status;
}

int plugin_dispatch_values(value_list_t const *vl) { return dispatch(tl_module, NULL, vl); }

/* From a read plugin, a write is a value like any other (write plugins are
 * not loaded by Vigil). */
int plugin_write(const char *plugin, const data_set_t *ds, const value_list_t *vl) {
    (void)plugin;
    return dispatch(tl_module, ds, vl);
}

int plugin_flush(const char *plugin, cdtime_t timeout, const char *identifier) {
    (void)plugin;
    (void)timeout;
    (void)identifier;
    return 0;
}

int plugin_dispatch_multivalue(value_list_t const *template, bool store_percentage, int store_type, ...) {
    if (template == NULL) return EINVAL;
    if (store_percentage && store_type != DS_TYPE_GAUGE) {
        ERROR("plugin_dispatch_multivalue: store_percentage works with gauges only");
        return EINVAL;
    }
    value_list_t vl = *template;
    value_t value;
    vl.values = &value;
    vl.values_len = 1;
    /* Percentages are of type "percent", whatever the template says. */
    if (store_percentage) copy_name(vl.type, "percent");
    gauge_t sum = 0;
    va_list ap;
    if (store_percentage) {
        va_start(ap, store_type);
        while (va_arg(ap, char const *) != NULL) {
            gauge_t g = va_arg(ap, gauge_t);
            if (!isnan(g)) sum += g;
        }
        va_end(ap);
    }
    int failed = 0;
    va_start(ap, store_type);
    for (char const *name; (name = va_arg(ap, char const *)) != NULL;) {
        copy_name(vl.type_instance, name);
        switch (store_type) {
        case DS_TYPE_GAUGE:
            value.gauge = va_arg(ap, gauge_t);
            if (store_percentage) value.gauge *= sum != 0 ? 100.0 / sum : NAN;
            break;
        case DS_TYPE_ABSOLUTE: value.absolute = va_arg(ap, absolute_t); break;
        case DS_TYPE_COUNTER: value.counter = va_arg(ap, counter_t); break;
        case DS_TYPE_DERIVE: value.derive = va_arg(ap, derive_t); break;
        default:
            va_end(ap);
            ERROR("plugin_dispatch_multivalue: unknown data source type %d", store_type);
            return EINVAL;
        }
        if (dispatch(tl_module, NULL, &vl) != 0) failed++;
    }
    va_end(ap);
    return failed;
}

/* A value that stopped coming (the cache's timeout): each missing
 * callback is told, in its module's context. */
int plugin_dispatch_missing(const value_list_t *vl) {
    if (vl == NULL) return EINVAL;
    callback **list = module_callbacks(NULL, CB_MISSING);
    vcd_module *saved = tl_module;
    for (size_t i = 0; list != NULL && list[i] != NULL; i++) {
        tl_module = list[i]->module;
        int status = ((plugin_missing_cb)list[i]->fn.any)(vl, &list[i]->ud);
        if (status != 0 && status != -1) WARNING("plugin_dispatch_missing: callback %s returned %d", list[i]->name, status);
    }
    tl_module = saved;
    free(list);
    return 0;
}

/* New, updated and expired cache entries, to the plugins that asked. A
 * callback answering 0 to a new entry asks for its updates too (bit i of
 * the entry's mask, as collectd keeps it). */
void plugin_dispatch_cache_event(enum cache_event_type_e event_type, unsigned long callbacks_mask,
                                 const char *name, const value_list_t *vl) {
    callback **list = module_callbacks(NULL, CB_CACHE_EVENT);
    vcd_module *saved = tl_module;
    unsigned long wanted = 0;
    for (size_t i = 0; list != NULL && list[i] != NULL && i < sizeof(unsigned long) * 8; i++) {
        if (event_type != CE_VALUE_NEW && !(callbacks_mask & (1UL << i))) continue;
        cache_event_t event = {.type = event_type, .value_list = vl, .value_list_name = name, .ret = 0};
        tl_module = list[i]->module;
        ((plugin_cache_event_cb)list[i]->fn.any)(&event, &list[i]->ud);
        if (event_type == CE_VALUE_NEW && event.ret) wanted |= 1UL << i;
    }
    tl_module = saved;
    free(list);
    if (event_type == CE_VALUE_NEW && wanted != 0 && name != NULL) uc_set_callbacks_mask(name, wanted);
}

int plugin_dispatch_notification(const notification_t *given) {
    if (given == NULL) return EINVAL;
    notification_t n = *given;
    vcd_module *m = current_module(n.plugin);
    if (m == NULL) return -1;
    n.message[NOTIF_MAX_MSG_LEN - 1] = 0;
    n.host[DATA_MAX_NAME_LEN - 1] = 0;
    n.plugin[DATA_MAX_NAME_LEN - 1] = 0;
    n.plugin_instance[DATA_MAX_NAME_LEN - 1] = 0;
    n.type[DATA_MAX_NAME_LEN - 1] = 0;
    n.type_instance[DATA_MAX_NAME_LEN - 1] = 0;
    own_host(m, n.host);
    if (n.time == 0) n.time = cdtime();
    if (!gate_enter(m)) {
        count(m, &m->counts.gate_closed);
        return 0;
    }
    if (m->sink.notification != NULL) m->sink.notification(m->ctx, &n);
    gate_leave(m);
    return 0;
}

/* ---------------------------------------------------------------- modules */

int vcd_global_init(const char *hostname, cdtime_t interval, const char *types_db, char *err, size_t err_len) {
    static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;
    static int done;
    int status = 0;
    pthread_mutex_lock(&once_lock);
    if (!done) {
        if (hostname_g == NULL) hostname_set(hostname);
        if (interval_g == 0) interval_g = interval;
        status = types_db != NULL ? vcd_types_load(types_db, err, err_len) : 0;
        if (status == 0) done = 1;
    }
    pthread_mutex_unlock(&once_lock);
    return status;
}

int vcd_types_add(const char *path, int replace, char *err, size_t err_len) {
    return replace ? vcd_types_load(path, err, err_len) : vcd_types_load_new(path, err, err_len);
}

static int spent(const char *name) {
    for (size_t i = 0; i < spent_count; i++)
        if (strcmp(spent_names[i], name) == 0) return 1;
    return 0;
}

/* A private copy of `path` in a memfd, opened as a library of its own:
 * the loader tells libraries apart by file, so the copy gets statics of its
 * own and runs module_register and init again, as a second collectd daemon
 * would. The loader also knows a library by the path it was opened with
 * ("/proc/self/fd/N"), so the memfd stays open, its number taken, for as
 * long as the copy is loaded: a later copy never gets a path that names an
 * earlier one. NULL with a message when it cannot be made; `*fd_out` the
 * memfd to close once the copy is unloaded. */
static void *open_private_copy(const char *path, const char *name, int *fd_out, char *err, size_t err_len) {
    *fd_out = -1;
    int in = open(path, O_RDONLY | O_CLOEXEC);
    struct stat info;
    if (in < 0 || fstat(in, &info) != 0 || !S_ISREG(info.st_mode) || info.st_size > (off_t)256 << 20) {
        set_err(err, err_len, "cannot copy %s for a second instance: %s", path, in < 0 ? strerror(errno) : "not a plugin file");
        if (in >= 0) close(in);
        return NULL;
    }
    int out = memfd_create(name, MFD_CLOEXEC);
    if (out < 0) {
        set_err(err, err_len, "cannot copy %s for a second instance: memfd_create: %s", path, strerror(errno));
        close(in);
        return NULL;
    }
    char buffer[65536];
    ssize_t n;
    int failed = 0;
    while ((n = read(in, buffer, sizeof buffer)) > 0)
        if (swrite(out, buffer, (size_t)n) != 0) {
            failed = 1;
            break;
        }
    close(in);
    void *handle = NULL;
    if (n < 0 || failed) {
        set_err(err, err_len, "cannot copy %s for a second instance: %s", path, strerror(errno));
    } else {
        char fd_path[64];
        snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", out);
        dlerror();
        handle = dlopen(fd_path, RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) set_err(err, err_len, "%s", dlerror());
    }
    if (handle == NULL) close(out);
    else *fd_out = out;
    return handle;
}

vcd_module *vcd_module_load(const char *path, const char *name, const char *hostname, cdtime_t interval,
                            const vcd_sink *sink,
                            void *ctx, int *already, char *err, size_t err_len) {
    if (already != NULL) *already = 0;
    if (path == NULL || name == NULL || sink == NULL) {
        set_err(err, err_len, "vcd_module_load: path, name and sink are required");
        return NULL;
    }
    /* The plugin's file is loaded once; a second instance, or one after an
     * unload that left the file mapped, gets a private copy. */
    pthread_mutex_lock(&load_lock);
    pthread_mutex_lock(&registry_lock);
    int taken = spent(name);
    for (vcd_module *m = modules; m != NULL && !taken; m = m->next)
        if (strcmp(m->name, name) == 0 && !m->copy) taken = 1;
    pthread_mutex_unlock(&registry_lock);
    vcd_module *m = calloc(1, sizeof *m);
    if (m == NULL) {
        pthread_mutex_unlock(&load_lock);
        set_err(err, err_len, "out of memory");
        return NULL;
    }
    copy_name(m->name, name);
    copy_name(m->hostname, hostname);
    sstrncpy(m->path, path, sizeof m->path);
    m->sink = *sink;
    m->ctx = ctx;
    m->interval = interval;
    pthread_rwlock_init(&m->gate_lock, NULL);
    pthread_mutex_init(&m->counts_lock, NULL);
    pthread_mutex_init(&m->rates_lock, NULL);
    C_COMPLAIN_INIT(&m->bad_length_complaint);

    dlerror();
    m->copy = taken;
    m->copy_fd = -1;
    /* perl and python are loaded as collectd loads them, with their
     * symbols global: the interpreters' own extension modules (Perl's
     * threads.so, Python's _decimal, _ssl, _contextvars) resolve symbols of
     * libperl and libpython through the global scope. Both run only in a
     * runner process of their own (collectd.c refuses them in the host's),
     * so nothing of them reaches the host's scope. */
    int global = strcmp(name, "perl") == 0 || strcmp(name, "python") == 0;
    m->dl = taken ? open_private_copy(path, name, &m->copy_fd, err, err_len)
                  : dlopen(path, RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
    if (m->dl == NULL) {
        pthread_mutex_unlock(&load_lock);
        if (!taken) {
            const char *why = dlerror();
            set_err(err, err_len, "%s", why != NULL ? why : "dlopen failed");
        } else if (already != NULL) {
            *already = 1;
        }
        free(m);
        return NULL;
    }
    void (*register_fn)(void) = (void (*)(void))dlsym(m->dl, "module_register");
    if (register_fn == NULL) {
        dlclose(m->dl);
        pthread_mutex_unlock(&load_lock);
        set_err(err, err_len, "%s is not a collectd plugin: it has no module_register", path);
        free(m);
        return NULL;
    }
    pthread_mutex_lock(&registry_lock);
    m->next = modules;
    modules = m;
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_unlock(&load_lock);

    vcd_module *saved = tl_module;
    tl_module = m;
    register_fn();
    tl_module = saved;
    return m;
}

static int key_registered(const callback *cb, const char *key) {
    for (int i = 0; i < cb->keys_num; i++)
        if (strcasecmp(cb->keys[i], key) == 0) return 1;
    return 0;
}

/* One line of a simple config as collectd joins it: values separated by
 * spaces, numbers as "%lf", booleans as true/false. */
static void join_values(const oconfig_item_t *ci, char *buffer, size_t size) {
    size_t used = 0;
    buffer[0] = 0;
    for (int i = 0; i < ci->values_num && used < size; i++) {
        const oconfig_value_t *v = &ci->values[i];
        int n;
        if (v->type == OCONFIG_TYPE_STRING)
            n = snprintf(buffer + used, size - used, "%s%s", i ? " " : "", v->value.string);
        else if (v->type == OCONFIG_TYPE_NUMBER)
            n = snprintf(buffer + used, size - used, "%s%lf", i ? " " : "", v->value.number);
        else
            n = snprintf(buffer + used, size - used, "%s%s", i ? " " : "", v->value.boolean ? "true" : "false");
        if (n < 0) break;
        used += (size_t)n;
    }
}

VCD_HIDDEN const char *vcd_config_path_of(const vcd_config *config, const oconfig_item_t *item);
VCD_HIDDEN const oconfig_item_t *vcd_config_root(const vcd_config *config);
VCD_HIDDEN const char *vcd_config_guess_path(const vcd_config *config, const char *message);
VCD_HIDDEN const char *vcd_config_item_named(const vcd_config *config, const char *message);

static int configure_simple(vcd_module *m, callback *cb, const vcd_config *config, char *err, size_t err_len) {
    const oconfig_item_t *root = vcd_config_root(config);
    for (int i = 0; i < root->children_num; i++) {
        const oconfig_item_t *child = &root->children[i];
        const char *at = vcd_config_path_of(config, child);
        if (!key_registered(cb, child->key)) {
            set_err(err, err_len, "%s: the %s plugin does not take '%s'", at, m->name, child->key);
            return -1;
        }
        if (child->children_num > 0) {
            set_err(err, err_len, "%s: the %s plugin takes '%s' as a value, not a block", at, m->name, child->key);
            return -1;
        }
        char value[4096];
        join_values(child, value, sizeof value);
        m->last_error[0] = 0;
        int status = cb->fn.config(child->key, value);
        /* A warning about the item is a refusal too (see vcd_module_configure). */
        if (status != 0 || (m->last_error[0] != 0 && vcd_config_item_named(config, m->last_error) != NULL)) {
            set_err(err, err_len, "%s: the %s plugin refused '%s %s'%s%s", at, m->name, child->key, value,
                    m->last_error[0] ? ": " : "", m->last_error);
            return -1;
        }
    }
    return 0;
}

int vcd_module_configure(vcd_module *m, const vcd_config *config, char *err, size_t err_len) {
    const oconfig_item_t *root = vcd_config_root(config);
    if (root == NULL || root->children_num == 0) return 0;
    callback **complex_list = module_callbacks(m, CB_COMPLEX_CONFIG);
    callback **simple_list = module_callbacks(m, CB_CONFIG);
    int status = 0;
    vcd_module *saved = tl_module;
    tl_module = m;
    m->capture = 1;
    m->last_error[0] = 0;
    m->logged_error[0] = 0;
    m->first_problem[0] = 0;
    if (complex_list != NULL && complex_list[0] != NULL) {
        oconfig_item_t *copy = oconfig_clone(root);
        if (copy == NULL) {
            set_err(err, err_len, "options.config: out of memory");
            status = -1;
        } else if (complex_list[0]->fn.complex_config(copy) != 0 || m->logged_error[0] != 0 ||
                   vcd_config_item_named(config, m->first_problem) != NULL) {
            /* Refused, or accepted with an error logged (an option it could
             * not use and ignored, where collectd would have run without
             * it), or with a warning that names an item of the configuration,
             * its key or its value (filecount and memcached warn "Option
             * `Bogus' not allowed here" or "Converting `garbage' to a number
             * failed" and go on without it, to fail at init or never emit).
             * Reported at the item the first complaint names. */
            const char *at = vcd_config_guess_path(config, m->first_problem);
            if (strcmp(at, "options.config") == 0) at = vcd_config_guess_path(config, m->logged_error);
            int two = m->logged_error[0] != 0 && strcmp(m->first_problem, m->logged_error) != 0;
            set_err(err, err_len, "%s: the %s plugin refused its configuration%s%s%s%s", at, m->name,
                    m->first_problem[0] ? ": " : "", m->first_problem, two ? "; then: " : "",
                    two ? m->logged_error : "");
            status = -1;
        }
        /* Plugins keep pointers into the tree they were given (collectd
         * frees it after configuring; some copy, some do not): it stays. */
    } else if (simple_list != NULL && simple_list[0] != NULL) {
        status = configure_simple(m, simple_list[0], config, err, err_len);
    } else {
        set_err(err, err_len, "options.config: the %s plugin takes no configuration", m->name);
        status = -1;
    }
    m->capture = 0;
    tl_module = saved;
    free(complex_list);
    free(simple_list);
    return status;
}

int vcd_module_init(vcd_module *m, char *err, size_t err_len) {
    if (m->inited) return 0;
    callback **list = module_callbacks(m, CB_INIT);
    if (list == NULL) {
        set_err(err, err_len, "out of memory");
        return -1;
    }
    int status = 0;
    vcd_module *saved = tl_module;
    tl_module = m;
    m->capture = 1;
    for (size_t i = 0; list[i] != NULL && status == 0; i++) {
        if (list[i]->removed) continue;
        m->last_error[0] = 0;
        int s = list[i]->fn.init();
        if (s != 0) {
            set_err(err, err_len, "the %s plugin's init (%s) failed with status %d%s%s", m->name, list[i]->name, s,
                    m->last_error[0] ? ": " : "", m->last_error);
            status = -1;
        }
    }
    m->capture = 0;
    tl_module = saved;
    free(list);
    m->inited = 1; /* collectd runs init once, failed or not */
    return status;
}

void vcd_module_gate(vcd_module *m, int open) {
    pthread_rwlock_wrlock(&m->gate_lock);
    m->gate_open = open;
    pthread_rwlock_unlock(&m->gate_lock);
}

/* collectd's main loop expires cache entries once an interval; here the
 * first read of any module after an interval has passed does it. */
static void expire_cache(cdtime_t now) {
    static cdtime_t last;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    cdtime_t every = interval_g > 0 ? interval_g : TIME_T_TO_CDTIME_T_STATIC(10);
    pthread_mutex_lock(&lock);
    int due = now >= last + every;
    if (due) last = now;
    pthread_mutex_unlock(&lock);
    if (due) uc_check_timeout();
}

int vcd_module_read(vcd_module *m, cdtime_t now, int *failed, char *err, size_t err_len) {
    int ran = 0, bad = 0;
    expire_cache(now);
    sweep_rates(m, now);
    callback **list = module_callbacks(m, CB_READ);
    if (list == NULL) return 0;
    if (list[0] != NULL) {
        m->had_reads = 1;
    } else if (m->had_reads && !m->said_no_reads) {
        /* Unregistered from inside itself: say so once, or the monitor
         * would look running with nothing to show. */
        m->said_no_reads = 1;
        vcd_module *saved_module = tl_module;
        tl_module = m;
        WARNING("the %s plugin unregistered its last read callback: it reads nothing more until the monitor restarts",
                m->name);
        tl_module = saved_module;
    }
    /* A callback due within half the module's interval runs now: polls
     * come at the module's interval, give or take scheduling. */
    cdtime_t slack = m->interval / 2;
    vcd_module *saved = tl_module;
    tl_module = m;
    for (size_t i = 0; list[i] != NULL; i++) {
        callback *cb = list[i];
        if (cb->removed || (cb->next != 0 && cb->next > now + slack)) continue;
        cdtime_t interval = cb->interval > 0 ? cb->interval : m->interval;
        tl_read = cb;
        m->capture = 1;
        m->last_error[0] = 0;
        int status = cb->simple ? cb->fn.simple_read() : cb->fn.read(&cb->ud);
        m->capture = 0;
        tl_read = NULL;
        ran++;
        if (status == 0) {
            cb->wait = interval;
        } else {
            bad++;
            count(m, &m->counts.read_failures);
            /* collectd's back-off: each failure doubles the wait, up to a day. */
            cdtime_t wait = cb->wait > 0 ? cb->wait : interval;
            cb->wait = wait > VCD_MAX_READ_INTERVAL / 2 ? VCD_MAX_READ_INTERVAL : wait * 2;
            set_err(err, err_len, "read function %s failed%s%s; suspended for %.3f s", cb->name,
                    m->last_error[0] ? ": " : "", m->last_error, CDTIME_T_TO_DOUBLE(cb->wait));
        }
        cb->next = now + (status == 0 ? interval : cb->wait);
    }
    tl_module = saved;
    free(list);
    if (failed != NULL) *failed = bad;
    return ran;
}

static void drop_callbacks(vcd_module *m) {
    pthread_mutex_lock(&registry_lock);
    callback **link = &callbacks;
    while (*link != NULL) {
        callback *cb = *link;
        if (cb->module != m) {
            link = &cb->next_cb;
            continue;
        }
        *link = cb->next_cb;
        free_user_data(cb);
        for (int i = 0; i < cb->keys_num; i++) free(cb->keys[i]);
        free(cb->keys);
        free(cb);
    }
    pthread_mutex_unlock(&registry_lock);
}

void vcd_module_unload(vcd_module *m) {
    if (m == NULL) return;
    vcd_module_gate(m, 0);
    vcd_module *saved = tl_module;
    tl_module = m;
    if (m->inited) {
        callback **list = module_callbacks(m, CB_SHUTDOWN);
        for (size_t i = 0; list != NULL && list[i] != NULL; i++)
            if (!list[i]->removed) list[i]->fn.shutdown();
        free(list);
    }
    tl_module = saved;
    /* Callbacks of the module's own (user data freed by the module's code)
     * go before the module is unmapped. */
    drop_callbacks(m);
    /* Until the file is known let go or spent, no load may decide on it. */
    pthread_mutex_lock(&load_lock);
    pthread_mutex_lock(&registry_lock);
    for (vcd_module **link = &modules; *link != NULL; link = &(*link)->next)
        if (*link == m) {
            *link = m->next;
            break;
        }
    int keep_mapped = __atomic_load_n(&m->threads, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&registry_lock);
    /* A module that started threads may have some left: it stays mapped
     * (and spent). Otherwise it is closed, and if the loader really let it
     * go its statics are fresh for a next load. */
    int still_mapped = 1;
    if (!keep_mapped) {
        dlclose(m->dl);
        char copy_path[64];
        if (m->copy) snprintf(copy_path, sizeof copy_path, "/proc/self/fd/%d", m->copy_fd);
        void *probe = dlopen(m->copy ? copy_path : m->path, RTLD_NOW | RTLD_NOLOAD);
        still_mapped = probe != NULL;
        if (probe != NULL) dlclose(probe);
    }
    /* A copy the loader let go frees its memfd number; one still mapped
     * keeps it, so that no later copy is taken for it. */
    if (m->copy && !still_mapped && m->copy_fd >= 0) close(m->copy_fd);
    if (still_mapped && !m->copy) {
        pthread_mutex_lock(&registry_lock);
        char **grown = realloc(spent_names, (spent_count + 1) * sizeof *grown);
        if (grown != NULL) {
            spent_names = grown;
            spent_names[spent_count] = sstrdup(m->name);
            if (spent_names[spent_count] != NULL) spent_count++;
        }
        pthread_mutex_unlock(&registry_lock);
    }
    pthread_mutex_unlock(&load_lock);
    if (still_mapped) {
        /* The struct stays (its threads may still log), cut from the sink. */
        pthread_rwlock_wrlock(&m->gate_lock);
        m->detached = 1;
        pthread_rwlock_unlock(&m->gate_lock);
        free_rates(m);
        return;
    }
    free_rates(m);
    pthread_rwlock_destroy(&m->gate_lock);
    pthread_mutex_destroy(&m->counts_lock);
    pthread_mutex_destroy(&m->rates_lock);
    free(m);
}

vcd_counts vcd_module_counts(const vcd_module *m) {
    vcd_counts c;
    pthread_mutex_lock((pthread_mutex_t *)&m->counts_lock);
    c = m->counts;
    pthread_mutex_unlock((pthread_mutex_t *)&m->counts_lock);
    return c;
}

int vcd_module_has_threads(const vcd_module *m) { return __atomic_load_n(&m->threads, __ATOMIC_RELAXED); }
