/*
 * flood_collectd.c - a load generator plugin for collectd 5.12, written for
 * Vigil's benchmarks (issue 3). It is the collectd counterpart of Vigil's
 * `flood` plugin: it dispatches value lists as fast as possible (or at a
 * given rate) from threads of its own, so that collectd's write path --
 * dispatch queue, value cache, filter chain, write plugins -- can be
 * measured in isolation from any real data source.
 *
 * Build: scripts/collectd/build.sh OUTDIR   (produces OUTDIR/flood.so)
 *
 * Configuration (all optional):
 *
 *   LoadPlugin flood
 *   <Plugin flood>
 *     Count    1000000     # value lists per thread; 0 = until shutdown
 *     Rate     0           # value lists per second per thread; 0 = unpaced
 *     Fields   1           # gauge values per value list (1..64)
 *     Threads  1           # dispatching threads, started in init
 *     DoneFile "/tmp/x/flood.done"  # written (atomically) when all threads
 *                                   # have dispatched Count value lists
 *     SplitFields false    # true: N value lists of one value instead of
 *                          # one value list of N values
 *     Direct   false       # true: call plugin_write() synchronously instead
 *                          # of plugin_dispatch_values() (skips the write
 *                          # queue, the cache and the filter chains)
 *     NullWriter "/tmp/x/null.status"
 *                          # also registers a write callback that does
 *                          # nothing but count the flood value lists it is
 *                          # handed, and writes this file (atomically) when
 *                          # it has seen them all: collectd's "null sink"
 *   </Plugin>
 *
 * One "event with N numeric fields" is modelled as one value list of the
 * type "flood" whose data set has N GAUGE data sources f0 .. f(N-1). The
 * plugin registers that data set itself (plugin_register_data_set), so no
 * custom types.db is needed. With SplitFields the type is "flood_1" (one
 * data source, "value") and each field becomes its own value list with
 * type instance "fK".
 *
 * Each thread uses its own plugin instance ("0", "1", ...), so the value
 * cache sees one identifier per thread; timestamps are strictly increasing
 * per thread.
 */

#include "collectd/core/daemon/collectd.h"
#include "collectd/core/daemon/plugin.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define FLOOD_MAX_FIELDS 64
#define FLOOD_TYPE "flood"
#define FLOOD_TYPE_SPLIT "flood_1"

static uint64_t conf_count = 1000000;
static double conf_rate = 0.0;
static int conf_fields = 1;
static int conf_threads = 1;
static bool conf_split = false;
static bool conf_direct = false;
static char *conf_done_file = NULL;
static char *conf_null_file = NULL;

struct flood_thread_s {
  pthread_t tid;
  bool started;
  int index;
  uint64_t dispatched; /* value lists handed to collectd successfully */
  uint64_t failed;     /* value lists collectd refused (queue limit, ...) */
  uint64_t first_ns;   /* CLOCK_REALTIME of the first and last dispatch */
  uint64_t last_ns;
};
typedef struct flood_thread_s flood_thread_t;

static flood_thread_t *threads = NULL;
static atomic_bool stop_requested = false;
static atomic_int threads_finished = 0;

static atomic_uint_fast64_t null_received = 0;
static atomic_uint_fast64_t null_first_ns = 0;

static uint64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ null writer */

static uint64_t flood_expected_value_lists(void) {
  return conf_count * (uint64_t)conf_threads *
         (uint64_t)(conf_split ? conf_fields : 1);
}

static void flood_write_json_file(const char *path, const char *json) {
  size_t len = strlen(path);
  char *tmp = malloc(len + 5);
  if (tmp == NULL)
    return;
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".tmp", 5);
  FILE *fh = fopen(tmp, "w");
  if (fh == NULL) {
    ERROR("flood plugin: cannot write %s: %s", tmp, strerror(errno));
    free(tmp);
    return;
  }
  fputs(json, fh);
  fclose(fh);
  if (rename(tmp, path) != 0)
    ERROR("flood plugin: rename to %s failed: %s", path, strerror(errno));
  free(tmp);
}

/* A write callback that does nothing but count: what collectd's core costs
 * from plugin_dispatch_values() to a writer, without formatting or I/O. It
 * is called from collectd's write threads, concurrently. */
static int flood_null_write(const data_set_t *ds, const value_list_t *vl,
                            user_data_t *ud) {
  if (strcmp(vl->plugin, "flood") != 0)
    return 0;
  uint64_t zero = 0;
  if (atomic_load_explicit(&null_first_ns, memory_order_relaxed) == 0)
    atomic_compare_exchange_strong(&null_first_ns, &zero,
                                   now_ns(CLOCK_REALTIME));
  uint64_t n = atomic_fetch_add(&null_received, 1) + 1;
  if (conf_count != 0 && n == flood_expected_value_lists() &&
      conf_null_file != NULL) {
    char json[256];
    snprintf(json, sizeof(json),
             "{\"value_lists\":%" PRIu64 ",\"values\":%" PRIu64
             ",\"first_ns\":%" PRIu64 ",\"last_ns\":%" PRIu64 "}\n",
             n, n * (uint64_t)ds->ds_num, (uint64_t)atomic_load(&null_first_ns),
             now_ns(CLOCK_REALTIME));
    flood_write_json_file(conf_null_file, json);
  }
  return 0;
}

/* ------------------------------------------------------------------ config */

static int flood_get_number(oconfig_item_t *ci, double *ret) {
  if (ci->values_num != 1 || ci->values[0].type != OCONFIG_TYPE_NUMBER) {
    ERROR("flood plugin: option `%s' needs exactly one number.", ci->key);
    return -1;
  }
  *ret = ci->values[0].value.number;
  return 0;
}

static int flood_config(oconfig_item_t *ci) {
  for (int i = 0; i < ci->children_num; i++) {
    oconfig_item_t *child = ci->children + i;
    double d = 0;
    int status = 0;

    if (strcasecmp("Count", child->key) == 0) {
      status = flood_get_number(child, &d);
      if (status == 0 && (d < 0 || d != floor(d))) {
        ERROR("flood plugin: Count must be a whole number >= 0.");
        status = -1;
      }
      if (status == 0)
        conf_count = (uint64_t)d;
    } else if (strcasecmp("Rate", child->key) == 0) {
      status = flood_get_number(child, &d);
      if (status == 0 && !(d >= 0)) {
        ERROR("flood plugin: Rate must be >= 0.");
        status = -1;
      }
      if (status == 0)
        conf_rate = d;
    } else if (strcasecmp("Fields", child->key) == 0) {
      status = flood_get_number(child, &d);
      if (status == 0 && (d < 1 || d > FLOOD_MAX_FIELDS || d != floor(d))) {
        ERROR("flood plugin: Fields must be a whole number in 1..%d.",
              FLOOD_MAX_FIELDS);
        status = -1;
      }
      if (status == 0)
        conf_fields = (int)d;
    } else if (strcasecmp("Threads", child->key) == 0) {
      status = flood_get_number(child, &d);
      if (status == 0 && (d < 1 || d > 256 || d != floor(d))) {
        ERROR("flood plugin: Threads must be a whole number in 1..256.");
        status = -1;
      }
      if (status == 0)
        conf_threads = (int)d;
    } else if (strcasecmp("DoneFile", child->key) == 0) {
      status = cf_util_get_string(child, &conf_done_file);
    } else if (strcasecmp("SplitFields", child->key) == 0) {
      status = cf_util_get_boolean(child, &conf_split);
    } else if (strcasecmp("Direct", child->key) == 0) {
      status = cf_util_get_boolean(child, &conf_direct);
    } else if (strcasecmp("NullWriter", child->key) == 0) {
      status = cf_util_get_string(child, &conf_null_file);
      if (status == 0)
        status = plugin_register_write("flood_null", flood_null_write, NULL);
    } else {
      ERROR("flood plugin: unknown option `%s'.", child->key);
      status = -1;
    }
    if (status != 0)
      return -1;
  }
  return 0;
}

/* ------------------------------------------------------------- completion */

static void flood_write_done_file(void) {
  uint64_t dispatched = 0, failed = 0, first = UINT64_MAX, last = 0;
  for (int i = 0; i < conf_threads; i++) {
    dispatched += threads[i].dispatched;
    failed += threads[i].failed;
    if (threads[i].first_ns != 0 && threads[i].first_ns < first)
      first = threads[i].first_ns;
    if (threads[i].last_ns > last)
      last = threads[i].last_ns;
  }
  if (first == UINT64_MAX)
    first = 0;

  NOTICE("flood plugin: done: %" PRIu64 " value lists dispatched, %" PRIu64
         " refused.",
         dispatched, failed);

  if (conf_done_file == NULL)
    return;
  char json[512];
  snprintf(json, sizeof(json),
           "{\"dispatched\":%" PRIu64 ",\"refused\":%" PRIu64
           ",\"value_lists_per_event\":%d,\"values_per_value_list\":%d"
           ",\"threads\":%d,\"first_dispatch_ns\":%" PRIu64
           ",\"last_dispatch_ns\":%" PRIu64 "}\n",
           dispatched, failed, conf_split ? conf_fields : 1,
           conf_split ? 1 : conf_fields, conf_threads, first, last);
  flood_write_json_file(conf_done_file, json);
}

/* ---------------------------------------------------------------- threads */

static void flood_pace(uint64_t start_ns, uint64_t n) {
  /* Schedule-based pacing: value list n is due at start + n / rate. */
  uint64_t due = start_ns + (uint64_t)((double)n * 1e9 / conf_rate);
  if (now_ns(CLOCK_MONOTONIC) >= due)
    return;
  struct timespec ts = {.tv_sec = (time_t)(due / 1000000000ull),
                        .tv_nsec = (long)(due % 1000000000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
    ;
}

static int flood_submit(value_list_t *vl) {
  if (conf_direct)
    return plugin_write(/* all writers */ NULL, /* look up ds */ NULL, vl);
  return plugin_dispatch_values(vl);
}

static void *flood_thread(void *arg) {
  flood_thread_t *t = arg;
  value_t values[FLOOD_MAX_FIELDS];
  value_list_t vl = VALUE_LIST_INIT;
  cdtime_t last_time = 0;

  /* host is filled in by plugin_dispatch_values() when empty; plugin_write()
   * does not, so set it here for both paths. */
  snprintf(vl.host, sizeof(vl.host), "%s",
           (hostname_g != NULL) ? hostname_g : "localhost");
  snprintf(vl.plugin, sizeof(vl.plugin), "flood");
  snprintf(vl.plugin_instance, sizeof(vl.plugin_instance), "%d", t->index);
  snprintf(vl.type, sizeof(vl.type), "%s",
           conf_split ? FLOOD_TYPE_SPLIT : FLOOD_TYPE);
  vl.interval = plugin_get_interval();
  vl.values = values;
  vl.values_len = conf_split ? 1 : (size_t)conf_fields;

  uint64_t start = now_ns(CLOCK_MONOTONIC);
  for (uint64_t n = 0; conf_count == 0 || n < conf_count; n++) {
    if (atomic_load_explicit(&stop_requested, memory_order_relaxed))
      break;
    if (conf_rate > 0)
      flood_pace(start, n);

    /* Strictly increasing time per identifier, so the value cache never
     * rejects one of our own values as "too old". */
    cdtime_t tm = cdtime();
    if (tm <= last_time)
      tm = last_time + 1;
    last_time = tm;
    vl.time = tm;

    if (t->first_ns == 0)
      t->first_ns = now_ns(CLOCK_REALTIME);

    if (conf_split) {
      for (int k = 0; k < conf_fields; k++) {
        values[0].gauge = (gauge_t)n + (gauge_t)k;
        snprintf(vl.type_instance, sizeof(vl.type_instance), "f%d", k);
        if (flood_submit(&vl) == 0)
          t->dispatched++;
        else
          t->failed++;
      }
    } else {
      for (int k = 0; k < conf_fields; k++)
        values[k].gauge = (gauge_t)n + (gauge_t)k;
      if (flood_submit(&vl) == 0)
        t->dispatched++;
      else
        t->failed++;
    }
  }
  t->last_ns = now_ns(CLOCK_REALTIME);

  /* The last thread to finish its Count reports completion. */
  if (conf_count != 0 &&
      atomic_fetch_add(&threads_finished, 1) + 1 == conf_threads &&
      !atomic_load(&stop_requested))
    flood_write_done_file();
  return NULL;
}

/* ------------------------------------------------------ init and shutdown */

static int flood_register_types(void) {
  data_source_t dsrc[FLOOD_MAX_FIELDS];
  memset(dsrc, 0, sizeof(dsrc));

  data_set_t ds = {.ds_num = (size_t)conf_fields, .ds = dsrc};
  snprintf(ds.type, sizeof(ds.type), "%s", FLOOD_TYPE);
  for (int k = 0; k < conf_fields; k++) {
    snprintf(dsrc[k].name, sizeof(dsrc[k].name), "f%d", k);
    dsrc[k].type = DS_TYPE_GAUGE;
    dsrc[k].min = NAN;
    dsrc[k].max = NAN;
  }
  if (plugin_register_data_set(&ds) != 0)
    return -1;

  data_set_t ds1 = {.ds_num = 1, .ds = dsrc};
  snprintf(ds1.type, sizeof(ds1.type), "%s", FLOOD_TYPE_SPLIT);
  snprintf(dsrc[0].name, sizeof(dsrc[0].name), "value");
  return plugin_register_data_set(&ds1);
}

static int flood_init(void) {
  if (threads != NULL) /* init is called once; be safe anyway */
    return 0;
  if (flood_register_types() != 0) {
    ERROR("flood plugin: registering the data sets failed.");
    return -1;
  }
  if (conf_done_file != NULL)
    unlink(conf_done_file);
  if (conf_null_file != NULL)
    unlink(conf_null_file);

  threads = calloc((size_t)conf_threads, sizeof(*threads));
  if (threads == NULL)
    return -1;

  INFO("flood plugin: %d thread(s), count %" PRIu64 ", rate %g, fields %d%s%s",
       conf_threads, conf_count, conf_rate, conf_fields,
       conf_split ? ", split" : "", conf_direct ? ", direct" : "");

  for (int i = 0; i < conf_threads; i++) {
    threads[i].index = i;
    char name[32];
    snprintf(name, sizeof(name), "flood#%d", i);
    int status = plugin_thread_create(&threads[i].tid, flood_thread,
                                      &threads[i], name);
    if (status != 0) {
      ERROR("flood plugin: starting thread %d failed: %s", i, strerror(status));
      atomic_store(&stop_requested, true);
      return -1;
    }
    threads[i].started = true;
  }
  return 0;
}

static int flood_shutdown(void) {
  atomic_store(&stop_requested, true);
  if (threads != NULL) {
    for (int i = 0; i < conf_threads; i++)
      if (threads[i].started)
        pthread_join(threads[i].tid, NULL);
    free(threads);
    threads = NULL;
  }
  free(conf_done_file);
  conf_done_file = NULL;
  /* conf_null_file stays: the null writer may still be called until
   * collectd has stopped its write threads (which happens before this). */
  return 0;
}

void module_register(void) {
  plugin_register_complex_config("flood", flood_config);
  plugin_register_init("flood", flood_init);
  plugin_register_shutdown("flood", flood_shutdown);
}
