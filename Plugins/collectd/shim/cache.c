/*
 * The value cache of the collectd shim (collectd's utils_cache.h): the last
 * value and rate of every identifier "host/plugin[-inst]/type[-inst]",
 * plus per-entry state, hit counters, rate history and meta data.
 *
 * Entries live in an AVL tree keyed by identifier, guarded by one rwlock.
 * The cache holds at most VCD_CACHE_MAX entries and histories of at most
 * VCD_HISTORY_MAX steps. Callbacks (missing values, cache events) and log
 * messages are issued with the lock released.
 */
#include "shim.h"

#include <math.h>
#include <pthread.h>

/* Overridable (-D) so that a test can reach the limit cheaply. */
#ifndef VCD_CACHE_MAX
#define VCD_CACHE_MAX 1000000
#endif
#define VCD_HISTORY_MAX 86400
#define VCD_KEY_LEN (6 * DATA_MAX_NAME_LEN)
#define VCD_LOG_GAP TIME_T_TO_CDTIME_T_STATIC(10)

typedef struct {
  char *name; /* the tree key */
  size_t num;
  int *types; /* the data source types the values were recorded with */
  value_t *raw;
  gauge_t *rates;
  cdtime_t last_time;   /* of the last value */
  cdtime_t last_update; /* local clock at the last value */
  cdtime_t interval;
  int state;
  int hits;
  /* Ring of past rates, `num` per step; `hist_index` is the next write. */
  gauge_t *history;
  size_t hist_index;
  size_t hist_len;
  meta_data_t *meta;
  unsigned long callbacks_mask;
} vcd_entry_t;

struct uc_iter_s {
  c_avl_iterator_t *iter;
  char *name;
  vcd_entry_t *entry;
};

static pthread_rwlock_t cache_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static c_avl_tree_t *cache_tree;
static size_t cache_count;

/* ------------------------------------------------------ rate-limited log */

typedef struct {
  pthread_mutex_t lock;
  cdtime_t last;
  unsigned long dropped;
} vcd_limit_t;

#define VCD_LIMIT_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0}

static vcd_limit_t too_old_limit = VCD_LIMIT_INIT;
static vcd_limit_t full_limit = VCD_LIMIT_INIT;
static vcd_limit_t input_limit = VCD_LIMIT_INIT;
static vcd_limit_t memory_limit = VCD_LIMIT_INIT;

/* True when a message may be logged now (at most one per VCD_LOG_GAP);
 * `dropped` gets how many were suppressed since the last one. */
static bool limit_pass(vcd_limit_t *l, unsigned long *dropped) {
  cdtime_t now = cdtime();
  bool pass = false;
  pthread_mutex_lock(&l->lock);
  if (l->last == 0 || now < l->last || now - l->last >= VCD_LOG_GAP) {
    pass = true;
    *dropped = l->dropped;
    l->dropped = 0;
    l->last = now;
  } else {
    l->dropped++;
  }
  pthread_mutex_unlock(&l->lock);
  return pass;
}

__attribute__((format(printf, 3, 4))) static void
limited_log(vcd_limit_t *l, int level, const char *format, ...) {
  unsigned long dropped = 0;
  if (!limit_pass(l, &dropped))
    return;
  char msg[1024];
  va_list ap;
  va_start(ap, format);
  vsnprintf(msg, sizeof(msg), format, ap);
  va_end(ap);
  if (dropped > 0)
    plugin_log(level, "%s (%lu similar messages suppressed)", msg, dropped);
  else
    plugin_log(level, "%s", msg);
}

/* ------------------------------------------------------------- the tree */

static int key_compare(const void *a, const void *b) {
  return strcmp(a, b);
}

static void cache_create(void) { cache_tree = c_avl_create(key_compare); }

static bool cache_ready(void) {
  pthread_once(&cache_once, cache_create);
  return cache_tree != NULL;
}

static bool cache_rdlock(void) {
  if (!cache_ready())
    return false;
  pthread_rwlock_rdlock(&cache_lock);
  return true;
}

static bool cache_wrlock(void) {
  if (!cache_ready())
    return false;
  pthread_rwlock_wrlock(&cache_lock);
  return true;
}

static void cache_unlock(void) { pthread_rwlock_unlock(&cache_lock); }

/* The entry for `key`; the lock is held. */
static vcd_entry_t *cache_find(const char *key) {
  void *value = NULL;
  if (c_avl_get(cache_tree, key, &value) != 0)
    return NULL;
  return value;
}

static bool field_ok(const char *field) {
  return memchr(field, 0, DATA_MAX_NAME_LEN) != NULL;
}

/* The identifier of `vl` into `key` (VCD_KEY_LEN bytes). */
static int vl_key(const value_list_t *vl, char *key) {
  if (vl == NULL || !field_ok(vl->host) || !field_ok(vl->plugin) ||
      !field_ok(vl->plugin_instance) || !field_ok(vl->type) ||
      !field_ok(vl->type_instance))
    return -1;
  return FORMAT_VL(key, VCD_KEY_LEN, vl) == 0 ? 0 : -1;
}

/* The entry of `vl` with the lock held, or NULL (lock released). */
static vcd_entry_t *vl_find(const value_list_t *vl, bool write,
                            const char *who) {
  char key[VCD_KEY_LEN];
  if (vl_key(vl, key) != 0) {
    plugin_log(LOG_ERR, "%s: FORMAT_VL failed.", who);
    return NULL;
  }
  if (!(write ? cache_wrlock() : cache_rdlock()))
    return NULL;
  vcd_entry_t *ce = cache_find(key);
  if (ce == NULL)
    cache_unlock();
  return ce;
}

/* -------------------------------------------------------------- entries */

static void entry_free(vcd_entry_t *ce) {
  if (ce == NULL)
    return;
  free(ce->types);
  free(ce->raw);
  free(ce->rates);
  free(ce->history);
  meta_data_destroy(ce->meta);
  free(ce->name);
  free(ce);
}

static vcd_entry_t *entry_new(const char *key) {
  vcd_entry_t *ce = calloc(1, sizeof(*ce));
  if (ce == NULL)
    return NULL;
  ce->name = strdup(key);
  if (ce->name == NULL) {
    free(ce);
    return NULL;
  }
  ce->state = STATE_UNKNOWN;
  return ce;
}

static bool entry_fits(const vcd_entry_t *ce, const data_set_t *ds) {
  if (ce->num != ds->ds_num)
    return false;
  for (size_t i = 0; i < ce->num; i++)
    if (ce->types[i] != ds->ds[i].type)
      return false;
  return true;
}

/* (Re)sizes the entry for `ds`, dropping values and history. */
static int entry_shape(vcd_entry_t *ce, const data_set_t *ds) {
  size_t n = ds->ds_num;
  int *types = calloc(n, sizeof(*types));
  value_t *raw = calloc(n, sizeof(*raw));
  gauge_t *rates = calloc(n, sizeof(*rates));
  if (types == NULL || raw == NULL || rates == NULL) {
    free(types);
    free(raw);
    free(rates);
    return ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    types[i] = ds->ds[i].type;
  free(ce->types);
  free(ce->raw);
  free(ce->rates);
  free(ce->history);
  *ce = (vcd_entry_t){.name = ce->name, .num = n, .types = types,
                      .raw = raw, .rates = rates, .state = ce->state,
                      .hits = ce->hits, .meta = ce->meta,
                      .callbacks_mask = ce->callbacks_mask};
  return 0;
}

/* Values out of the data source's [min, max] have no rate. */
static void entry_check_range(vcd_entry_t *ce, const data_set_t *ds) {
  for (size_t i = 0; i < ce->num; i++) {
    if (ce->rates[i] < ds->ds[i].min || ce->rates[i] > ds->ds[i].max)
      ce->rates[i] = NAN;
  }
}

static gauge_t first_rate(int type, value_t v, cdtime_t interval) {
  if (type == DS_TYPE_GAUGE)
    return v.gauge;
  if (type == DS_TYPE_ABSOLUTE && interval > 0)
    return (double)v.absolute / CDTIME_T_TO_DOUBLE(interval);
  return NAN;
}

static gauge_t next_rate(int type, value_t old, value_t v, double seconds) {
  switch (type) {
  case DS_TYPE_COUNTER:
    return (double)counter_diff(old.counter, v.counter) / seconds;
  case DS_TYPE_DERIVE:
    /* Two's complement difference, as collectd computes it. */
    return (double)(derive_t)((uint64_t)v.derive - (uint64_t)old.derive) /
           seconds;
  case DS_TYPE_ABSOLUTE:
    return (double)v.absolute / seconds;
  default:
    return v.gauge;
  }
}

static const gauge_t *history_step(const vcd_entry_t *ce, size_t age) {
  size_t pos = (ce->hist_index + ce->hist_len - 1 - age) % ce->hist_len;
  return ce->history + pos * ce->num;
}

static void history_push(vcd_entry_t *ce) {
  if (ce->history == NULL)
    return;
  memcpy(ce->history + ce->hist_index * ce->num, ce->rates,
         ce->num * sizeof(*ce->rates));
  ce->hist_index = (ce->hist_index + 1) % ce->hist_len;
}

/* Grows the ring to `steps`, keeping the past rates in order; a new ring
 * starts with the current rates. */
static int history_grow(vcd_entry_t *ce, size_t steps) {
  size_t n = ce->num;
  gauge_t *buf = malloc(steps * n * sizeof(*buf));
  if (buf == NULL)
    return ENOMEM;
  for (size_t i = 0; i < steps * n; i++)
    buf[i] = NAN;
  size_t kept = ce->hist_len;
  for (size_t age = 0; age < kept; age++)
    memcpy(buf + (kept - 1 - age) * n, history_step(ce, age), n * sizeof(*buf));
  if (kept == 0) {
    memcpy(buf, ce->rates, n * sizeof(*buf));
    kept = 1;
  }
  free(ce->history);
  ce->history = buf;
  ce->hist_len = steps;
  ce->hist_index = kept % steps;
  return 0;
}

static void entry_first(vcd_entry_t *ce, const data_set_t *ds,
                        const value_list_t *vl) {
  for (size_t i = 0; i < ce->num; i++) {
    ce->raw[i] = vl->values[i];
    ce->rates[i] = first_rate(ce->types[i], vl->values[i], vl->interval);
  }
  entry_check_range(ce, ds);
}

static void entry_next(vcd_entry_t *ce, const data_set_t *ds,
                       const value_list_t *vl) {
  double seconds = CDTIME_T_TO_DOUBLE(vl->time - ce->last_time);
  for (size_t i = 0; i < ce->num; i++) {
    ce->rates[i] = next_rate(ce->types[i], ce->raw[i], vl->values[i], seconds);
    ce->raw[i] = vl->values[i];
  }
  entry_check_range(ce, ds);
  history_push(ce);
}

static void entry_stamp(vcd_entry_t *ce, const value_list_t *vl) {
  ce->last_time = vl->time;
  ce->last_update = cdtime();
  ce->interval = vl->interval;
}

/* --------------------------------------------------------------- update */

typedef enum { UC_NEW, UC_UPDATED, UC_TOO_OLD, UC_FULL, UC_NOMEM } vcd_outcome_t;

typedef struct {
  vcd_outcome_t outcome;
  cdtime_t last_time;
  unsigned long callbacks_mask;
} vcd_result_t;

static vcd_outcome_t insert_locked(const data_set_t *ds,
                                   const value_list_t *vl, const char *key) {
  if (cache_count >= VCD_CACHE_MAX)
    return UC_FULL;
  vcd_entry_t *ce = entry_new(key);
  if (ce == NULL || entry_shape(ce, ds) != 0) {
    entry_free(ce);
    return UC_NOMEM;
  }
  entry_first(ce, ds, vl);
  entry_stamp(ce, vl);
  if (c_avl_insert(cache_tree, ce->name, ce) != 0) {
    entry_free(ce);
    return UC_NOMEM;
  }
  cache_count++;
  return UC_NEW;
}

static void update_locked(const data_set_t *ds, const value_list_t *vl,
                          const char *key, vcd_result_t *r) {
  vcd_entry_t *ce = cache_find(key);
  if (ce == NULL) {
    r->outcome = insert_locked(ds, vl, key);
    return;
  }
  r->last_time = ce->last_time;
  if (vl->time <= ce->last_time) {
    r->outcome = UC_TOO_OLD;
    return;
  }
  if (entry_fits(ce, ds)) {
    entry_next(ce, ds, vl);
  } else if (entry_shape(ce, ds) == 0) {
    entry_first(ce, ds, vl);
  } else {
    r->outcome = UC_NOMEM;
    return;
  }
  entry_stamp(ce, vl);
  r->callbacks_mask = ce->callbacks_mask;
  r->outcome = UC_UPDATED;
}

static bool ds_types_ok(const data_set_t *ds) {
  for (size_t i = 0; i < ds->ds_num; i++) {
    int t = ds->ds[i].type;
    if (t != DS_TYPE_COUNTER && t != DS_TYPE_GAUGE && t != DS_TYPE_DERIVE &&
        t != DS_TYPE_ABSOLUTE)
      return false;
  }
  return true;
}

static int update_input_ok(const data_set_t *ds, const value_list_t *vl,
                           const char *key) {
  if (ds->ds_num == 0 || ds->ds == NULL || !ds_types_ok(ds)) {
    limited_log(&input_limit, LOG_ERR,
                "uc_update: %s: invalid data set for type %.128s.", key,
                ds->type);
    return -1;
  }
  if (vl->values == NULL || vl->values_len != ds->ds_num) {
    limited_log(&input_limit, LOG_ERR,
                "uc_update: %s: %" PRIsz " values but type %.128s has %" PRIsz
                " data sources.",
                key, vl->values == NULL ? 0 : vl->values_len, ds->type,
                ds->ds_num);
    return -1;
  }
  return 0;
}

static int update_report(const vcd_result_t *r, const char *key,
                         const value_list_t *vl) {
  switch (r->outcome) {
  case UC_NEW:
    plugin_dispatch_cache_event(CE_VALUE_NEW, 0, key, vl);
    return 0;
  case UC_UPDATED:
    if (r->callbacks_mask != 0)
      plugin_dispatch_cache_event(CE_VALUE_UPDATE, r->callbacks_mask, key, vl);
    return 0;
  case UC_TOO_OLD:
    limited_log(&too_old_limit, LOG_WARNING,
                "uc_update: Value too old: name = %s; value time = %.3f; "
                "last cache update = %.3f;",
                key, CDTIME_T_TO_DOUBLE(vl->time),
                CDTIME_T_TO_DOUBLE(r->last_time));
    return -1;
  case UC_FULL:
    limited_log(&full_limit, LOG_ERR,
                "uc_update: the value cache holds %d entries; not adding %s.",
                VCD_CACHE_MAX, key);
    return -1;
  default:
    limited_log(&memory_limit, LOG_ERR, "uc_update: out of memory for %s.",
                key);
    return -1;
  }
}

int vcd_cache_update(const data_set_t *ds, const value_list_t *vl) {
  char key[VCD_KEY_LEN];
  if (ds == NULL || vl == NULL)
    return -1;
  if (vl_key(vl, key) != 0) {
    limited_log(&input_limit, LOG_ERR, "uc_update: FORMAT_VL failed.");
    return -1;
  }
  if (update_input_ok(ds, vl, key) != 0)
    return -1;
  value_list_t v = *vl;
  if (v.time == 0)
    v.time = cdtime();
  if (v.interval == 0)
    v.interval = plugin_get_interval();
  vcd_result_t r = {.outcome = UC_NOMEM};
  if (cache_wrlock()) {
    update_locked(ds, &v, key, &r);
    cache_unlock();
  }
  return update_report(&r, key, &v);
}

int uc_update(const data_set_t *ds, const value_list_t *vl) {
  return vcd_cache_update(ds, vl);
}

int vcd_cache_rates(const data_set_t *ds, const value_list_t *vl,
                    gauge_t *rates) {
  if (ds == NULL || rates == NULL)
    return -1;
  vcd_entry_t *ce = vl_find(vl, false, "vcd_cache_rates");
  if (ce == NULL)
    return -1;
  int status = -1;
  if (ce->num == ds->ds_num) {
    memcpy(rates, ce->rates, ce->num * sizeof(*rates));
    status = 0;
  }
  cache_unlock();
  return status;
}

int uc_init(void) { return cache_ready() ? 0 : -1; }

/* -------------------------------------------------------------- expiry */

typedef struct {
  char *key;
  cdtime_t time;
  cdtime_t interval;
  cdtime_t update;
  unsigned long callbacks_mask;
} vcd_expired_t;

typedef struct {
  vcd_expired_t *items;
  size_t num;
  size_t cap;
} vcd_expired_list_t;

static bool entry_expired(const vcd_entry_t *ce, cdtime_t now) {
  cdtime_t factor = timeout_g > 1 ? (cdtime_t)timeout_g : 1;
  if (now < ce->last_update || ce->interval > UINT64_MAX / factor)
    return false;
  return now - ce->last_update >= ce->interval * factor;
}

static int expired_add(vcd_expired_list_t *l, const char *key,
                       const vcd_entry_t *ce) {
  if (l->num == l->cap) {
    size_t cap = l->cap == 0 ? 16 : 2 * l->cap;
    vcd_expired_t *items = realloc(l->items, cap * sizeof(*items));
    if (items == NULL)
      return ENOMEM;
    l->items = items;
    l->cap = cap;
  }
  char *copy = strdup(key);
  if (copy == NULL)
    return ENOMEM;
  l->items[l->num++] = (vcd_expired_t){copy, ce->last_time, ce->interval,
                                       ce->last_update, ce->callbacks_mask};
  return 0;
}

static int expired_collect(vcd_expired_list_t *l) {
  if (!cache_rdlock())
    return -1;
  cdtime_t now = cdtime();
  c_avl_iterator_t *it = c_avl_get_iterator(cache_tree);
  int status = it == NULL && cache_count > 0 ? ENOMEM : 0;
  void *key = NULL, *value = NULL;
  while (it != NULL && status == 0 &&
         c_avl_iterator_next(it, &key, &value) == 0) {
    if (entry_expired(value, now))
      status = expired_add(l, key, value);
  }
  if (it != NULL)
    c_avl_iterator_destroy(it);
  cache_unlock();
  return status;
}

/* Tells the "missing" and cache-event callbacks, before removal, so that
 * they can still read the entry. */
static void expired_report(const vcd_expired_t *e) {
  value_list_t vl = VALUE_LIST_INIT;
  if (parse_identifier_vl(e->key, &vl) != 0) {
    plugin_log(LOG_ERR, "uc_check_timeout: parse_identifier_vl (\"%s\") "
                        "failed.",
               e->key);
    return;
  }
  vl.time = e->time;
  vl.interval = e->interval;
  plugin_dispatch_missing(&vl);
  if (e->callbacks_mask != 0)
    plugin_dispatch_cache_event(CE_VALUE_EXPIRED, e->callbacks_mask, e->key,
                                &vl);
}

/* Removes the entry unless it was updated meanwhile; the lock is held. */
static void expired_remove_locked(const vcd_expired_t *e) {
  vcd_entry_t *ce = cache_find(e->key);
  if (ce == NULL || ce->last_update != e->update)
    return;
  void *rkey = NULL, *rvalue = NULL;
  if (c_avl_remove(cache_tree, e->key, &rkey, &rvalue) == 0) {
    entry_free(rvalue);
    cache_count--;
  }
}

static void expired_free(vcd_expired_list_t *l) {
  for (size_t i = 0; i < l->num; i++)
    free(l->items[i].key);
  free(l->items);
}

int uc_check_timeout(void) {
  vcd_expired_list_t l = {0};
  int status = expired_collect(&l);
  if (status != 0)
    plugin_log(LOG_ERR, "uc_check_timeout: out of memory.");
  for (size_t i = 0; i < l.num; i++)
    expired_report(&l.items[i]);
  if (l.num > 0 && cache_wrlock()) {
    for (size_t i = 0; i < l.num; i++)
      expired_remove_locked(&l.items[i]);
    cache_unlock();
  }
  expired_free(&l);
  return status == 0 ? 0 : -1;
}

/* --------------------------------------------------------------- reads */

static int copy_out(const void *src, size_t num, size_t size, void **ret) {
  *ret = malloc(num * size);
  if (*ret == NULL)
    return -1;
  memcpy(*ret, src, num * size);
  return 0;
}

/* Copies an entry's rates (`rates`) or raw values; lock taken here. */
static int get_by_name(const char *name, bool rates, void **ret,
                       size_t *ret_num, const char *who) {
  if (name == NULL || ret == NULL || ret_num == NULL || !cache_rdlock())
    return -1;
  int status = -1;
  const vcd_entry_t *ce = cache_find(name);
  bool usable = ce != NULL && ce->state != STATE_MISSING;
  if (usable) {
    status = rates ? copy_out(ce->rates, ce->num, sizeof(gauge_t), ret)
                   : copy_out(ce->raw, ce->num, sizeof(value_t), ret);
    *ret_num = ce->num;
  }
  cache_unlock();
  if (ce == NULL)
    plugin_log(LOG_DEBUG, "utils_cache: %s: No such value: %s", who, name);
  else if (usable && status != 0)
    plugin_log(LOG_ERR, "utils_cache: %s: malloc failed.", who);
  return status;
}

int uc_get_rate_by_name(const char *name, gauge_t **ret_values,
                        size_t *ret_values_num) {
  void *ret = NULL;
  size_t num = 0;
  if (get_by_name(name, true, &ret, &num, "uc_get_rate_by_name") != 0)
    return -1;
  *ret_values = ret;
  *ret_values_num = num;
  return 0;
}

int uc_get_value_by_name(const char *name, value_t **ret_values,
                         size_t *ret_values_num) {
  void *ret = NULL;
  size_t num = 0;
  if (get_by_name(name, false, &ret, &num, "uc_get_value_by_name") != 0)
    return -1;
  *ret_values = ret;
  *ret_values_num = num;
  return 0;
}

/* The rates or raw values of `vl`, checked against `ds`. */
static void *get_checked(const data_set_t *ds, const value_list_t *vl,
                         bool rates, const char *who) {
  char key[VCD_KEY_LEN];
  if (ds == NULL || vl_key(vl, key) != 0) {
    plugin_log(LOG_ERR, "utils_cache: %s: FORMAT_VL failed.", who);
    return NULL;
  }
  void *ret = NULL;
  size_t num = 0;
  if (get_by_name(key, rates, &ret, &num, who) != 0)
    return NULL;
  if (num != ds->ds_num) {
    plugin_log(LOG_ERR, "utils_cache: %s: ds[%s] has %" PRIsz " values, "
                        "but the cache holds %" PRIsz ".",
               who, ds->type, ds->ds_num, num);
    free(ret);
    return NULL;
  }
  return ret;
}

gauge_t *uc_get_rate(const data_set_t *ds, const value_list_t *vl) {
  return get_checked(ds, vl, true, "uc_get_rate");
}

value_t *uc_get_value(const data_set_t *ds, const value_list_t *vl) {
  return get_checked(ds, vl, false, "uc_get_value");
}

size_t uc_get_size(void) {
  if (!cache_rdlock())
    return 0;
  size_t n = cache_count;
  cache_unlock();
  return n;
}

static void names_free(char **names, size_t num) {
  for (size_t i = 0; i < num; i++)
    free(names[i]);
  free(names);
}

static int name_add(char **names, cdtime_t *times, size_t *num,
                    const char *key, const vcd_entry_t *ce) {
  if (ce->state == STATE_MISSING || *num >= cache_count)
    return 0;
  names[*num] = strdup(key);
  if (names[*num] == NULL)
    return -1;
  times[(*num)++] = ce->last_time;
  return 0;
}

/* Fills `names` and `times` (room for cache_count); the lock is held. */
static int names_collect(char **names, cdtime_t *times, size_t *num) {
  c_avl_iterator_t *it = c_avl_get_iterator(cache_tree);
  if (it == NULL)
    return cache_count > 0 ? -1 : 0;
  void *key = NULL, *value = NULL;
  int status = 0;
  while (status == 0 && c_avl_iterator_next(it, &key, &value) == 0)
    status = name_add(names, times, num, key, value);
  c_avl_iterator_destroy(it);
  return status;
}

int uc_get_names(char ***ret_names, cdtime_t **ret_times, size_t *ret_number) {
  if (ret_names == NULL || ret_number == NULL || !cache_rdlock())
    return -1;
  size_t cap = cache_count > 0 ? cache_count : 1;
  char **names = calloc(cap, sizeof(*names));
  cdtime_t *times = calloc(cap, sizeof(*times));
  size_t num = 0;
  int status = names == NULL || times == NULL
                   ? -1
                   : names_collect(names, times, &num);
  cache_unlock();
  if (status != 0) {
    plugin_log(LOG_ERR, "uc_get_names: out of memory.");
    names_free(names, num);
    free(times);
    return -1;
  }
  *ret_names = names;
  *ret_number = num;
  if (ret_times != NULL)
    *ret_times = times;
  else
    free(times);
  return 0;
}

/* ------------------------------------------------------- state and hits */

int uc_get_state(const data_set_t *ds, const value_list_t *vl) {
  vcd_entry_t *ce = vl_find(vl, false, "uc_get_state");
  if (ce == NULL)
    return STATE_ERROR;
  int state = ce->state;
  cache_unlock();
  return state;
}

int uc_set_state(const data_set_t *ds, const value_list_t *vl, int state) {
  vcd_entry_t *ce = vl_find(vl, true, "uc_set_state");
  if (ce == NULL)
    return -1;
  int old = ce->state;
  ce->state = state;
  cache_unlock();
  return old;
}

int uc_get_hits(const data_set_t *ds, const value_list_t *vl) {
  vcd_entry_t *ce = vl_find(vl, false, "uc_get_hits");
  if (ce == NULL)
    return STATE_ERROR;
  int hits = ce->hits;
  cache_unlock();
  return hits;
}

int uc_set_hits(const data_set_t *ds, const value_list_t *vl, int hits) {
  vcd_entry_t *ce = vl_find(vl, true, "uc_set_hits");
  if (ce == NULL)
    return -1;
  int old = ce->hits;
  ce->hits = hits;
  cache_unlock();
  return old;
}

int uc_inc_hits(const data_set_t *ds, const value_list_t *vl, int step) {
  vcd_entry_t *ce = vl_find(vl, true, "uc_inc_hits");
  if (ce == NULL)
    return -1;
  int old = ce->hits;
  ce->hits = (int)((unsigned)old + (unsigned)step);
  cache_unlock();
  return old;
}

int uc_set_callbacks_mask(const char *name, unsigned long callbacks_mask) {
  if (name == NULL || !cache_wrlock())
    return -1;
  vcd_entry_t *ce = cache_find(name);
  if (ce != NULL)
    ce->callbacks_mask = callbacks_mask;
  cache_unlock();
  if (ce == NULL) {
    plugin_log(LOG_ERR, "uc_set_callbacks_mask: Couldn't find %s entry!",
               name);
    return -1;
  }
  return 0;
}

/* -------------------------------------------------------------- history */

static int history_locked(vcd_entry_t *ce, gauge_t *out, size_t steps,
                          size_t num_ds) {
  if (ce->num != num_ds)
    return -EINVAL;
  if (ce->hist_len < steps && history_grow(ce, steps) != 0)
    return -ENOMEM;
  for (size_t age = 0; age < steps; age++)
    memcpy(out + age * num_ds, history_step(ce, age),
           num_ds * sizeof(*out));
  return 0;
}

int uc_get_history_by_name(const char *name, gauge_t *ret_history,
                           size_t num_steps, size_t num_ds) {
  if (name == NULL || (ret_history == NULL && num_steps > 0) ||
      num_steps > VCD_HISTORY_MAX ||
      (num_ds > 0 && num_steps > SIZE_MAX / sizeof(gauge_t) / num_ds))
    return -EINVAL;
  if (!cache_wrlock())
    return -ENOMEM;
  vcd_entry_t *ce = cache_find(name);
  int status = ce == NULL ? -ENOENT
                          : history_locked(ce, ret_history, num_steps, num_ds);
  cache_unlock();
  return status;
}

int uc_get_history(const data_set_t *ds, const value_list_t *vl,
                   gauge_t *ret_history, size_t num_steps, size_t num_ds) {
  char key[VCD_KEY_LEN];
  if (vl_key(vl, key) != 0) {
    plugin_log(LOG_ERR, "utils_cache: uc_get_history: FORMAT_VL failed.");
    return -1;
  }
  return uc_get_history_by_name(key, ret_history, num_steps, num_ds);
}

/* ------------------------------------------------------------- iterator */

uc_iter_t *uc_get_iterator(void) {
  uc_iter_t *iter = calloc(1, sizeof(*iter));
  if (iter == NULL || !cache_rdlock()) {
    free(iter);
    return NULL;
  }
  iter->iter = c_avl_get_iterator(cache_tree);
  if (iter->iter == NULL) {
    cache_unlock();
    free(iter);
    return NULL;
  }
  return iter;
}

/* `*ret_name` points into the cache and stays valid until the next call
 * or uc_iterator_destroy: collectd's plugins (grpc) do not free it. */
int uc_iterator_next(uc_iter_t *iter, char **ret_name) {
  if (iter == NULL)
    return -1;
  void *key = NULL, *value = NULL;
  while (c_avl_iterator_next(iter->iter, &key, &value) == 0) {
    vcd_entry_t *ce = value;
    if (ce->state == STATE_MISSING)
      continue;
    iter->name = key;
    iter->entry = ce;
    if (ret_name != NULL)
      *ret_name = key;
    return 0;
  }
  iter->name = NULL;
  iter->entry = NULL;
  return -1;
}

void uc_iterator_destroy(uc_iter_t *iter) {
  if (iter == NULL)
    return;
  c_avl_iterator_destroy(iter->iter);
  cache_unlock();
  free(iter);
}

int uc_iterator_get_time(uc_iter_t *iter, cdtime_t *ret_time) {
  if (iter == NULL || iter->entry == NULL || ret_time == NULL)
    return -1;
  *ret_time = iter->entry->last_time;
  return 0;
}

int uc_iterator_get_values(uc_iter_t *iter, value_t **ret_values,
                           size_t *ret_num) {
  if (iter == NULL || iter->entry == NULL || ret_values == NULL ||
      ret_num == NULL)
    return -1;
  const vcd_entry_t *ce = iter->entry;
  void *copy = NULL;
  if (copy_out(ce->raw, ce->num, sizeof(value_t), &copy) != 0)
    return -1;
  *ret_values = copy;
  *ret_num = ce->num;
  return 0;
}

int uc_iterator_get_interval(uc_iter_t *iter, cdtime_t *ret_interval) {
  if (iter == NULL || iter->entry == NULL || ret_interval == NULL)
    return -1;
  *ret_interval = iter->entry->interval;
  return 0;
}

int uc_iterator_get_meta(uc_iter_t *iter, meta_data_t **ret_meta) {
  if (iter == NULL || iter->entry == NULL || ret_meta == NULL)
    return -1;
  meta_data_t *md = iter->entry->meta;
  *ret_meta = md == NULL ? NULL : meta_data_clone(md);
  return md != NULL && *ret_meta == NULL ? -1 : 0;
}

/* ------------------------------------------------------------ meta data */

/* The entry's meta data (created on demand) with the write lock held, or
 * NULL with the lock released. */
static meta_data_t *meta_lock(const value_list_t *vl) {
  vcd_entry_t *ce = vl_find(vl, true, "uc_get_meta");
  if (ce == NULL)
    return NULL;
  if (ce->meta == NULL)
    ce->meta = meta_data_create();
  if (ce->meta == NULL)
    cache_unlock();
  return ce->meta;
}

#define VCD_META_CALL(call)                                                    \
  do {                                                                         \
    meta_data_t *md = meta_lock(vl);                                           \
    if (md == NULL)                                                            \
      return -1;                                                               \
    int status = (call);                                                       \
    cache_unlock();                                                            \
    return status;                                                             \
  } while (0)

int uc_meta_data_exists(const value_list_t *vl, const char *key) {
  VCD_META_CALL(meta_data_exists(md, key));
}

int uc_meta_data_delete(const value_list_t *vl, const char *key) {
  VCD_META_CALL(meta_data_delete(md, key));
}

int uc_meta_data_toc(const value_list_t *vl, char ***toc) {
  VCD_META_CALL(meta_data_toc(md, toc));
}

int uc_meta_data_add_string(const value_list_t *vl, const char *key,
                            const char *value) {
  VCD_META_CALL(meta_data_add_string(md, key, value));
}

int uc_meta_data_add_signed_int(const value_list_t *vl, const char *key,
                                int64_t value) {
  VCD_META_CALL(meta_data_add_signed_int(md, key, value));
}

int uc_meta_data_add_unsigned_int(const value_list_t *vl, const char *key,
                                  uint64_t value) {
  VCD_META_CALL(meta_data_add_unsigned_int(md, key, value));
}

int uc_meta_data_add_double(const value_list_t *vl, const char *key,
                            double value) {
  VCD_META_CALL(meta_data_add_double(md, key, value));
}

int uc_meta_data_add_boolean(const value_list_t *vl, const char *key,
                             bool value) {
  VCD_META_CALL(meta_data_add_boolean(md, key, value));
}

int uc_meta_data_get_string(const value_list_t *vl, const char *key,
                            char **value) {
  VCD_META_CALL(meta_data_get_string(md, key, value));
}

int uc_meta_data_get_signed_int(const value_list_t *vl, const char *key,
                                int64_t *value) {
  VCD_META_CALL(meta_data_get_signed_int(md, key, value));
}

int uc_meta_data_get_unsigned_int(const value_list_t *vl, const char *key,
                                  uint64_t *value) {
  VCD_META_CALL(meta_data_get_unsigned_int(md, key, value));
}

int uc_meta_data_get_double(const value_list_t *vl, const char *key,
                            double *value) {
  VCD_META_CALL(meta_data_get_double(md, key, value));
}

int uc_meta_data_get_boolean(const value_list_t *vl, const char *key,
                             bool *value) {
  VCD_META_CALL(meta_data_get_boolean(md, key, value));
}
