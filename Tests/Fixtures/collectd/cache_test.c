/*
 * Unit test of the collectd shim's types.db registry (typesdb.c) and value
 * cache (cache.c), linked with util.c and containers.c:
 *
 *   S=Plugins/collectd/shim
 *   cc -std=gnu11 -O2 -pthread -DHAVE_CONFIG_H -I/usr/include/collectd \
 *      -I/usr/include/collectd/core -I$S Tests/Fixtures/collectd/cache_test.c \
 *      $S/typesdb.c $S/cache.c $S/util.c $S/containers.c -lm -o cache_test
 *
 * Needs /usr/share/collectd/types.db (Debian's collectd-core). Prints
 * "ok N checks"; the first failing check prints FILE:LINE and exits 1.
 *
 * Built with -DVCD_CACHE_MAX=64 -DVCD_TYPES_MAX=400 (for every file) it
 * also fills the cache and the type registry up to those limits.
 */
#include "shim.h"

#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TYPES_DB "/usr/share/collectd/types.db"

static unsigned checks;

#define CHECK(cond)                                                            \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_NEAR(a, b) CHECK(fabs((double)(a) - (double)(b)) < 1e-9)

/* ================================================================
 * Test doubles for what registry.c provides (globals.h, plugin.h).
 * ================================================================ */

char *hostname_g = "testhost";
cdtime_t interval_g = TIME_T_TO_CDTIME_T_STATIC(10);
int timeout_g = 2;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_log[2048];
static int last_log_level = -1;
static unsigned log_count;

void plugin_log(int level, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  pthread_mutex_lock(&log_lock);
  vsnprintf(last_log, sizeof(last_log), format, ap);
  last_log_level = level;
  log_count++;
  pthread_mutex_unlock(&log_lock);
  va_end(ap);
}

cdtime_t plugin_get_interval(void) { return interval_g; }

static unsigned missing_count;
static value_list_t last_missing;

int plugin_dispatch_missing(const value_list_t *vl) {
  missing_count++;
  last_missing = *vl;
  return 0;
}

/* Events seen; a CE_VALUE_NEW for a type_instance "watched" subscribes
 * it (mask 0x5), as the registry's dispatcher does for plugins. */
static unsigned new_events, update_events, expired_events;
static unsigned long last_event_mask;
static char last_event_name[6 * DATA_MAX_NAME_LEN];

void plugin_dispatch_cache_event(enum cache_event_type_e type,
                                 unsigned long mask, const char *name,
                                 const value_list_t *vl) {
  pthread_mutex_lock(&log_lock);
  if (type == CE_VALUE_NEW)
    new_events++;
  else if (type == CE_VALUE_UPDATE)
    update_events++;
  else
    expired_events++;
  last_event_mask = mask;
  snprintf(last_event_name, sizeof(last_event_name), "%s", name);
  pthread_mutex_unlock(&log_lock);
  if (type == CE_VALUE_NEW && strcmp(vl->type_instance, "watched") == 0)
    uc_set_callbacks_mask(name, 0x5);
}

/* ================================================================ */

static char tmpdir[] = "/tmp/vcd_cache_test.XXXXXX";

static const char *write_file(const char *name, const char *text, size_t len) {
  static char path[512];
  snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  CHECK(fwrite(text, 1, len, f) == len);
  CHECK(fclose(f) == 0);
  return path;
}

/* Loads `text` as a file and expects "PATH:LINE: <contains>". */
static void expect_refused(const char *text, int line, const char *contains) {
  const char *path = write_file("bad.db", text, strlen(text));
  char err[512] = "";
  char prefix[600];
  CHECK(vcd_types_load(path, err, sizeof(err)) == -1);
  snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
  if (strncmp(err, prefix, strlen(prefix)) != 0 ||
      strstr(err, contains) == NULL)
    fprintf(stderr, "unexpected error: %s\n", err);
  CHECK(strncmp(err, prefix, strlen(prefix)) == 0);
  CHECK(strstr(err, contains) != NULL);
}

static void test_types_db(void) {
  char err[512] = "";
  CHECK(vcd_types_load(TYPES_DB, err, sizeof(err)) == 0);
  CHECK(err[0] == 0);

  const data_set_t *cpu = plugin_get_ds("cpu");
  CHECK(cpu != NULL);
  CHECK(strcmp(cpu->type, "cpu") == 0);
  CHECK(cpu->ds_num == 1);
  CHECK(strcmp(cpu->ds[0].name, "value") == 0);
  CHECK(cpu->ds[0].type == DS_TYPE_DERIVE);
  CHECK(cpu->ds[0].min == 0);
  CHECK(isnan(cpu->ds[0].max));

  const data_set_t *load = plugin_get_ds("load");
  CHECK(load != NULL && load->ds_num == 3);
  const char *load_names[] = {"shortterm", "midterm", "longterm"};
  for (size_t i = 0; i < 3; i++) {
    CHECK(strcmp(load->ds[i].name, load_names[i]) == 0);
    CHECK(load->ds[i].type == DS_TYPE_GAUGE);
    CHECK(load->ds[i].min == 0 && load->ds[i].max == 5000);
  }

  const data_set_t *ifo = plugin_get_ds("if_octets");
  CHECK(ifo != NULL && ifo->ds_num == 2);
  CHECK(strcmp(ifo->ds[0].name, "rx") == 0 && strcmp(ifo->ds[1].name, "tx") == 0);
  CHECK(ifo->ds[0].type == DS_TYPE_DERIVE && ifo->ds[1].type == DS_TYPE_DERIVE);

  const data_set_t *abs = plugin_get_ds("absolute");
  CHECK(abs != NULL && abs->ds[0].type == DS_TYPE_ABSOLUTE);
  CHECK(plugin_get_ds("percent")->ds[0].max == 100.1);

  /* Loading the same file again keeps the same data sets. */
  CHECK(vcd_types_load(TYPES_DB, err, sizeof(err)) == 0);
  CHECK(plugin_get_ds("cpu") == cpu);

  /* Unknown types: NULL, reported once per name. */
  unsigned logs = log_count;
  CHECK(plugin_get_ds("no_such_type") == NULL);
  CHECK(log_count == logs + 1);
  CHECK(last_log_level == LOG_ERR);
  CHECK(strcmp(last_log, "plugin_get_ds: Type no_such_type not found.") == 0);
  CHECK(plugin_get_ds("no_such_type") == NULL);
  CHECK(log_count == logs + 1);
  CHECK(plugin_get_ds(NULL) == NULL);
}

static void test_types_good_file(void) {
  const data_set_t *cpu_before = plugin_get_ds("cpu");
  const char text[] = "# comment\r\n"
                      "\n"
                      "   \t  # indented comment\n"
                      "vt_one\tvalue:gauge:U:u\r\n"
                      "vt_two  a:Counter:0:4294967295,b:derive:-10:10 ,\n"
                      "vt_three x:ABSOLUTE:0:U, y:GAUGE:-1e3:1e3,\tz:GAUGE:U:U,\n"
                      "vt_one  value:DERIVE:0:U\n"
                      "cpu     value:GAUGE:0:100\n"
                      "vt_last value:GAUGE:0:1";
  const char *path = write_file("good.db", text, sizeof(text) - 1);
  char err[512] = "";
  CHECK(vcd_types_load(path, err, sizeof(err)) == 0);

  const data_set_t *one = plugin_get_ds("vt_one");
  CHECK(one != NULL && one->ds_num == 1 && one->ds[0].type == DS_TYPE_DERIVE);
  const data_set_t *two = plugin_get_ds("vt_two");
  CHECK(two != NULL && two->ds_num == 2);
  CHECK(two->ds[0].type == DS_TYPE_COUNTER && two->ds[0].max == 4294967295.0);
  CHECK(strcmp(two->ds[1].name, "b") == 0 && two->ds[1].min == -10);
  const data_set_t *three = plugin_get_ds("vt_three");
  CHECK(three != NULL && three->ds_num == 3);
  CHECK(three->ds[1].min == -1000 && isnan(three->ds[2].min));
  CHECK(plugin_get_ds("vt_last") != NULL);

  /* "cpu" was replaced; the old data set stays readable. */
  const data_set_t *cpu = plugin_get_ds("cpu");
  CHECK(cpu != cpu_before && cpu->ds[0].type == DS_TYPE_GAUGE);
  CHECK(cpu_before->ds[0].type == DS_TYPE_DERIVE && cpu_before->ds_num == 1);
  CHECK(vcd_types_load(TYPES_DB, err, sizeof(err)) == 0);
  CHECK(plugin_get_ds("cpu")->ds[0].type == DS_TYPE_DERIVE);
}

static void test_types_bad_files(void) {
  char err[512] = "";
  expect_refused("vt_bad1 value:GAUGE:0:U\nvt_bad2 value:GAUGE:0\n", 2,
                 "is not NAME:TYPE:MIN:MAX");
  CHECK(plugin_get_ds("vt_bad1") == NULL); /* nothing from the file */
  expect_refused("vt_bad value:GAUGE:0:U:7\n", 1, "is not NAME:TYPE:MIN:MAX");
  expect_refused("# c\n\nvt_bad value:FOO:0:U\n", 3, "unknown data source type");
  expect_refused("vt_bad value:GAUGE:abc:U\n", 1, "minimum \"abc\" is not a number");
  expect_refused("vt_bad value:GAUGE:0:1x\n", 1, "maximum \"1x\" is not a number");
  expect_refused("vt_bad value:GAUGE:0:1e999\n", 1, "out of range");
  expect_refused("vt_bad value:GAUGE:10:1\n", 1, "greater than");
  expect_refused("vt_ok value:GAUGE:0:U\nvt_lonely\n", 2, "has no data sources");
  expect_refused("vt_bad :GAUGE:0:U\n", 1, "empty name");

  char name[200];
  memset(name, 'n', sizeof(name));
  name[DATA_MAX_NAME_LEN] = 0; /* 128 characters: one too many */
  char text[70000];
  snprintf(text, sizeof(text), "%s value:GAUGE:0:U\n", name);
  expect_refused(text, 1, "longer than 127 characters");
  snprintf(text, sizeof(text), "vt_bad %s:GAUGE:0:U\n", name);
  expect_refused(text, 1, "longer than 127 characters");
  name[DATA_MAX_NAME_LEN - 1] = 0; /* 127 characters is fine */
  snprintf(text, sizeof(text), "%s %s:GAUGE:0:U\n", name, name);
  const char *path = write_file("long.db", text, strlen(text));
  CHECK(vcd_types_load(path, err, sizeof(err)) == 0);
  CHECK(plugin_get_ds(name) != NULL);

  size_t n = (size_t)snprintf(text, sizeof(text), "vt_wide");
  for (int i = 0; i <= 1024; i++)
    n += (size_t)snprintf(text + n, sizeof(text) - n, " s%d:GAUGE:U:U", i);
  expect_refused(text, 1, "more than 1024 data sources");

  memset(text, ' ', sizeof(text));
  memcpy(text, "vt_bad value:GAUGE:0:U", 22);
  text[sizeof(text) - 1] = 0;
  expect_refused(text, 1, "longer than 65536 bytes");

  const char nul[] = "vt_ok value:GAUGE:0:U\nvt_bad value:GA\0UGE:0:U\n";
  path = write_file("nul.db", nul, sizeof(nul) - 1);
  CHECK(vcd_types_load(path, err, sizeof(err)) == -1);
  CHECK(strstr(err, ":2: line contains a NUL byte") != NULL);
  CHECK(plugin_get_ds("vt_ok") == NULL);

  CHECK(vcd_types_load(tmpdir, err, sizeof(err)) == -1);
  CHECK(strstr(err, "not a regular file") != NULL);
  CHECK(vcd_types_load("/nonexistent/types.db", err, sizeof(err)) == -1);
  CHECK(strncmp(err, "/nonexistent/types.db: ", 23) == 0);

  char big[512];
  snprintf(big, sizeof(big), "%s/big.db", tmpdir);
  FILE *f = fopen(big, "wb");
  CHECK(f != NULL);
  CHECK(ftruncate(fileno(f), (off_t)64 * 1024 * 1024 + 1) == 0);
  fclose(f);
  CHECK(vcd_types_load(big, err, sizeof(err)) == -1);
  CHECK(strstr(err, "larger than 64 MiB") != NULL);
  unlink(big);
  CHECK(vcd_types_load(TYPES_DB, NULL, 0) == 0);
}

static void test_register(void) {
  data_source_t src[2] = {{"in", DS_TYPE_DERIVE, 0, NAN},
                          {"out", DS_TYPE_DERIVE, 0, NAN}};
  data_set_t ds = {"vt_reg", 2, src};
  CHECK(plugin_register_data_set(&ds) == 0);
  const data_set_t *got = plugin_get_ds("vt_reg");
  CHECK(got != NULL && got != &ds && got->ds != src);
  CHECK(got->ds_num == 2 && strcmp(got->ds[1].name, "out") == 0);
  strcpy(src[1].name, "changed"); /* the registry holds a copy */
  CHECK(strcmp(got->ds[1].name, "out") == 0);

  strcpy(src[1].name, "out");
  CHECK(plugin_register_data_set(&ds) == 0); /* identical: kept */
  CHECK(plugin_get_ds("vt_reg") == got);

  src[1].type = DS_TYPE_GAUGE;
  CHECK(plugin_register_data_set(&ds) == 0); /* different: replaced */
  const data_set_t *again = plugin_get_ds("vt_reg");
  CHECK(again != got && again->ds[1].type == DS_TYPE_GAUGE);
  CHECK(got->ds[1].type == DS_TYPE_DERIVE); /* the old one is still valid */

  CHECK(plugin_unregister_data_set("vt_reg") == 0);
  CHECK(plugin_get_ds("vt_reg") == NULL);
  CHECK(again->ds_num == 2);
  CHECK(plugin_unregister_data_set("vt_reg") == -1);

  data_set_t empty = {"vt_empty", 0, NULL};
  CHECK(plugin_register_data_set(&empty) == -1);
  src[0].type = 42;
  CHECK(plugin_register_data_set(&ds) == -1);
  src[0].type = DS_TYPE_GAUGE;
  data_set_t unnamed = {"", 2, src};
  CHECK(plugin_register_data_set(&unnamed) == -1);
  CHECK(plugin_register_data_set(NULL) == -1);
}

/* ------------------------------------------------------------ cache */

#define SEC(s) TIME_T_TO_CDTIME_T_STATIC(s)

static value_list_t make_vl(const char *plugin, const char *type,
                            const char *type_instance, value_t *values,
                            size_t n, cdtime_t time) {
  value_list_t vl = VALUE_LIST_INIT;
  vl.values = values;
  vl.values_len = n;
  vl.time = time;
  vl.interval = SEC(10);
  sstrncpy(vl.host, "h", sizeof(vl.host));
  sstrncpy(vl.plugin, plugin, sizeof(vl.plugin));
  sstrncpy(vl.type, type, sizeof(vl.type));
  sstrncpy(vl.type_instance, type_instance, sizeof(vl.type_instance));
  return vl;
}

static const data_set_t *register_one(const char *type, int ds_type) {
  data_source_t src = {"value", ds_type, NAN, NAN};
  data_set_t ds = {"", 1, &src};
  sstrncpy(ds.type, type, sizeof(ds.type));
  CHECK(plugin_register_data_set(&ds) == 0);
  return plugin_get_ds(type);
}

static void test_gauge(void) {
  const data_set_t *ds = plugin_get_ds("load");
  value_t v[3] = {{.gauge = 0.5}, {.gauge = 1.25}, {.gauge = 2}};
  value_list_t vl = make_vl("load", "load", "", v, 3, SEC(1000));
  unsigned news = new_events;
  CHECK(uc_update(ds, &vl) == 0);
  CHECK(new_events == news + 1);
  CHECK(strcmp(last_event_name, "h/load/load") == 0);
  gauge_t *r = uc_get_rate(ds, &vl);
  CHECK(r != NULL);
  CHECK(r[0] == 0.5 && r[1] == 1.25 && r[2] == 2);
  free(r);

  v[0].gauge = 6000; /* above max 5000: no rate */
  vl.time = SEC(1010);
  CHECK(uc_update(ds, &vl) == 0);
  r = uc_get_rate(ds, &vl);
  CHECK(r != NULL && isnan(r[0]) && r[2] == 2);
  free(r);
  value_t *raw = uc_get_value(ds, &vl);
  CHECK(raw != NULL && raw[0].gauge == 6000);
  free(raw);

  gauge_t rates[3];
  CHECK(vcd_cache_rates(ds, &vl, rates) == 0);
  CHECK(isnan(rates[0]) && rates[1] == 1.25);
  CHECK(uc_get_state(ds, &vl) == STATE_UNKNOWN);
}

static void test_derive(void) {
  const data_set_t *ds = plugin_get_ds("if_octets");
  value_t v[2] = {{.derive = 100}, {.derive = 200}};
  value_list_t vl = make_vl("interface", "if_octets", "eth0", v, 2, SEC(2000));
  CHECK(uc_update(ds, &vl) == 0);
  gauge_t *r = uc_get_rate(ds, &vl);
  CHECK(r != NULL && isnan(r[0]) && isnan(r[1])); /* first value: unknown */
  free(r);

  v[0].derive = 1100;
  v[1].derive = 700;
  vl.time = SEC(2010);
  CHECK(uc_update(ds, &vl) == 0);
  gauge_t *rates = NULL;
  size_t n = 0;
  CHECK(uc_get_rate_by_name("h/interface/if_octets-eth0", &rates, &n) == 0);
  CHECK(n == 2);
  CHECK_NEAR(rates[0], 100);
  CHECK_NEAR(rates[1], 50);
  free(rates);

  /* A DERIVE without a minimum may go down. */
  const data_set_t *dn = register_one("vt_derive", DS_TYPE_DERIVE);
  value_t d = {.derive = 500};
  value_list_t dl = make_vl("p", "vt_derive", "", &d, 1, SEC(100));
  CHECK(uc_update(dn, &dl) == 0);
  d.derive = 300;
  dl.time = SEC(110) + SEC(1) / 2; /* 10.5 s later */
  CHECK(uc_update(dn, &dl) == 0);
  r = uc_get_rate(dn, &dl);
  CHECK(r != NULL);
  CHECK_NEAR(r[0], -200.0 / 10.5);
  free(r);
}

static void test_counter_absolute(void) {
  const data_set_t *ds = register_one("vt_counter", DS_TYPE_COUNTER);
  value_t c = {.counter = 4294967290ULL};
  value_list_t vl = make_vl("p", "vt_counter", "", &c, 1, SEC(100));
  CHECK(uc_update(ds, &vl) == 0);
  c.counter = 10; /* wrapped at 2^32: 5 + 10 + 1 = 16 */
  vl.time = SEC(110);
  CHECK(uc_update(ds, &vl) == 0);
  gauge_t *r = uc_get_rate(ds, &vl);
  CHECK(r != NULL);
  CHECK_NEAR(r[0], 1.6);
  free(r);
  value_t *raw = uc_get_value(ds, &vl);
  CHECK(raw != NULL && raw[0].counter == 10);
  free(raw);

  const data_set_t *abs = plugin_get_ds("absolute");
  value_t a = {.absolute = 50};
  value_list_t al = make_vl("p", "absolute", "", &a, 1, SEC(100));
  CHECK(uc_update(abs, &al) == 0);
  r = uc_get_rate(abs, &al);
  CHECK(r != NULL);
  CHECK_NEAR(r[0], 5); /* per interval (10 s) for the first value */
  free(r);
  a.absolute = 30;
  al.time = SEC(120);
  CHECK(uc_update(abs, &al) == 0);
  r = uc_get_rate(abs, &al);
  CHECK(r != NULL);
  CHECK_NEAR(r[0], 1.5);
  free(r);
}

static void test_refused(void) {
  const data_set_t *ds = plugin_get_ds("if_octets");
  value_t v[2] = {{.derive = 5}, {.derive = 5}};
  value_list_t vl = make_vl("interface", "if_octets", "eth0", v, 2, SEC(2010));
  unsigned logs = log_count;
  CHECK(uc_update(ds, &vl) == -1); /* same time */
  CHECK(log_count == logs + 1);
  CHECK(last_log_level == LOG_WARNING);
  CHECK(strcmp(last_log, "uc_update: Value too old: name = "
                         "h/interface/if_octets-eth0; value time = 2010.000; "
                         "last cache update = 2010.000;") == 0);
  vl.time = SEC(2005);
  CHECK(uc_update(ds, &vl) == -1); /* older */
  value_t *raw = uc_get_value(ds, &vl);
  CHECK(raw != NULL && raw[0].derive == 1100); /* unchanged */
  free(raw);

  vl.values_len = 1;
  vl.time = SEC(3000);
  CHECK(uc_update(ds, &vl) == -1);
  CHECK(vcd_cache_update(ds, &vl) == -1);
  vl.values_len = 3;
  CHECK(uc_update(ds, &vl) == -1);
  vl.values_len = 2;
  vl.values = NULL;
  CHECK(uc_update(ds, &vl) == -1);
  CHECK(uc_update(NULL, &vl) == -1);

  value_list_t unknown = make_vl("nope", "if_octets", "", v, 2, SEC(1));
  CHECK(uc_get_rate(ds, &unknown) == NULL);
  CHECK(uc_get_value(ds, &unknown) == NULL);
  gauge_t *rates = NULL;
  size_t n = 0;
  CHECK(uc_get_rate_by_name("h/nope/if_octets", &rates, &n) == -1);
  CHECK(uc_get_state(ds, &unknown) == STATE_ERROR);
  CHECK(uc_set_state(ds, &unknown, STATE_OKAY) == -1);
  gauge_t r2[2];
  CHECK(vcd_cache_rates(ds, &unknown, r2) == -1);
  /* The cached entry has 2 values; a 3-source data set does not match. */
  CHECK(uc_get_rate(plugin_get_ds("load"), &vl) == NULL);
}

static void test_reshape(void) {
  const data_set_t *one = register_one("vt_shape", DS_TYPE_GAUGE);
  value_t v[2] = {{.gauge = 1}, {.gauge = 2}};
  value_list_t vl = make_vl("p", "vt_shape", "", v, 1, SEC(10));
  CHECK(uc_update(one, &vl) == 0);
  data_source_t src[2] = {{"a", DS_TYPE_GAUGE, NAN, NAN},
                          {"b", DS_TYPE_DERIVE, NAN, NAN}};
  data_set_t two = {"vt_shape", 2, src};
  CHECK(plugin_register_data_set(&two) == 0);
  vl.values_len = 2;
  vl.time = SEC(20);
  v[1].derive = 7;
  CHECK(uc_update(plugin_get_ds("vt_shape"), &vl) == 0);
  gauge_t *r = uc_get_rate(plugin_get_ds("vt_shape"), &vl);
  CHECK(r != NULL && r[0] == 1 && isnan(r[1]));
  free(r);
}

static bool sorted(char **names, size_t n) {
  for (size_t i = 1; i < n; i++)
    if (strcmp(names[i - 1], names[i]) >= 0)
      return false;
  return true;
}

static void test_names_iterator(void) {
  char **names = NULL;
  cdtime_t *times = NULL;
  size_t n = 0;
  CHECK(uc_get_names(&names, &times, &n) == 0);
  CHECK(n == uc_get_size() && n == 6);
  CHECK(sorted(names, n));
  bool found = false;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(names[i], "h/interface/if_octets-eth0") == 0) {
      found = true;
      CHECK(times[i] == SEC(2010));
    }
    free(names[i]);
  }
  CHECK(found);
  free(names);
  free(times);

  const value_list_t key = make_vl("interface", "if_octets", "eth0", NULL, 0, 0);
  CHECK(uc_meta_data_add_string(&key, "origin", "test") == 0);

  uc_iter_t *it = uc_get_iterator();
  CHECK(it != NULL);
  char *name = NULL;
  size_t count = 0;
  char prev[6 * DATA_MAX_NAME_LEN] = "";
  while (uc_iterator_next(it, &name) == 0) {
    CHECK(strcmp(prev, name) < 0);
    sstrncpy(prev, name, sizeof(prev));
    count++;
    cdtime_t t = 0, interval = 0;
    CHECK(uc_iterator_get_time(it, &t) == 0 && t > 0);
    CHECK(uc_iterator_get_interval(it, &interval) == 0 && interval == SEC(10));
    value_t *values = NULL;
    size_t num = 0;
    CHECK(uc_iterator_get_values(it, &values, &num) == 0 && num >= 1);
    meta_data_t *md = NULL;
    CHECK(uc_iterator_get_meta(it, &md) == 0);
    if (strcmp(name, "h/interface/if_octets-eth0") == 0) {
      CHECK(num == 2 && values[0].derive == 1100 && values[1].derive == 700);
      char *s = NULL;
      CHECK(md != NULL && meta_data_get_string(md, "origin", &s) == 0);
      CHECK(strcmp(s, "test") == 0);
      free(s);
    }
    meta_data_destroy(md);
    free(values);
  }
  CHECK(uc_iterator_next(it, &name) != 0);
  CHECK(uc_iterator_get_time(it, &(cdtime_t){0}) == -1);
  uc_iterator_destroy(it);
  CHECK(count == uc_get_size());
  CHECK(uc_iterator_next(NULL, &name) == -1);
}

static void check_history(const char *name, size_t steps, const gauge_t *want) {
  gauge_t got[8];
  CHECK(steps <= 8);
  CHECK(uc_get_history_by_name(name, got, steps, 1) == 0);
  for (size_t i = 0; i < steps; i++) {
    if (isnan(want[i]))
      CHECK(isnan(got[i]));
    else
      CHECK(got[i] == want[i]);
  }
}

static void test_history(void) {
  const data_set_t *ds = register_one("vt_hist", DS_TYPE_GAUGE);
  value_t v = {.gauge = 1};
  value_list_t vl = make_vl("p", "vt_hist", "", &v, 1, SEC(10));
  const char *name = "h/p/vt_hist";
  CHECK(uc_update(ds, &vl) == 0);
  check_history(name, 3, (gauge_t[]){1, NAN, NAN});
  v.gauge = 2;
  vl.time = SEC(20);
  CHECK(uc_update(ds, &vl) == 0);
  check_history(name, 3, (gauge_t[]){2, 1, NAN});
  check_history(name, 5, (gauge_t[]){2, 1, NAN, NAN, NAN}); /* grown */
  for (int i = 3; i <= 7; i++) {
    v.gauge = i;
    vl.time = SEC(10 * i);
    CHECK(uc_update(ds, &vl) == 0);
  }
  check_history(name, 5, (gauge_t[]){7, 6, 5, 4, 3}); /* wrapped */
  check_history(name, 7, (gauge_t[]){7, 6, 5, 4, 3, NAN, NAN});
  gauge_t two[4];
  CHECK(uc_get_history(ds, &vl, two, 2, 1) == 0);
  CHECK(two[0] == 7 && two[1] == 6);

  gauge_t buf[4];
  CHECK(uc_get_history_by_name(name, buf, 2, 2) == -EINVAL);
  CHECK(uc_get_history_by_name("h/p/none", buf, 2, 1) == -ENOENT);
  CHECK(uc_get_history_by_name(name, buf, 86401, 1) == -EINVAL);
  CHECK(uc_get_history_by_name(name, buf, 0, 1) == 0);
}

static void test_state_hits_meta(void) {
  const data_set_t *ds = plugin_get_ds("load");
  value_list_t vl = make_vl("load", "load", "", NULL, 0, 0);
  CHECK(uc_set_state(ds, &vl, STATE_WARNING) == STATE_UNKNOWN);
  CHECK(uc_get_state(ds, &vl) == STATE_WARNING);
  CHECK(uc_get_hits(ds, &vl) == 0);
  CHECK(uc_inc_hits(ds, &vl, 3) == 0);
  CHECK(uc_inc_hits(ds, &vl, 2) == 3);
  CHECK(uc_set_hits(ds, &vl, 1) == 5);
  CHECK(uc_get_hits(ds, &vl) == 1);

  CHECK(uc_meta_data_exists(&vl, "k") == 0);
  CHECK(uc_meta_data_add_signed_int(&vl, "si", -5) == 0);
  CHECK(uc_meta_data_add_unsigned_int(&vl, "ui", 7) == 0);
  CHECK(uc_meta_data_add_double(&vl, "d", 2.5) == 0);
  CHECK(uc_meta_data_add_boolean(&vl, "b", true) == 0);
  CHECK(uc_meta_data_add_string(&vl, "s", "str") == 0);
  int64_t si = 0;
  uint64_t ui = 0;
  double d = 0;
  bool b = false;
  char *s = NULL;
  CHECK(uc_meta_data_get_signed_int(&vl, "si", &si) == 0 && si == -5);
  CHECK(uc_meta_data_get_unsigned_int(&vl, "ui", &ui) == 0 && ui == 7);
  CHECK(uc_meta_data_get_double(&vl, "d", &d) == 0 && d == 2.5);
  CHECK(uc_meta_data_get_boolean(&vl, "b", &b) == 0 && b);
  CHECK(uc_meta_data_get_string(&vl, "s", &s) == 0 && strcmp(s, "str") == 0);
  free(s);
  CHECK(uc_meta_data_exists(&vl, "d") == 1);
  char **toc = NULL;
  int n = uc_meta_data_toc(&vl, &toc);
  CHECK(n == 5);
  for (int i = 0; i < n; i++)
    free(toc[i]);
  free(toc);
  CHECK(uc_meta_data_delete(&vl, "d") == 0);
  CHECK(uc_meta_data_exists(&vl, "d") == 0);
  CHECK(uc_meta_data_get_double(&vl, "d", &d) != 0);

  value_list_t unknown = make_vl("nope", "load", "", NULL, 0, 0);
  CHECK(uc_meta_data_add_string(&unknown, "k", "v") == -1);
  CHECK(uc_meta_data_exists(&unknown, "k") == -1);
  CHECK(uc_set_callbacks_mask("h/nope/load", 1) == -1);
}

static void test_events(void) {
  const data_set_t *ds = register_one("vt_event", DS_TYPE_GAUGE);
  value_t v = {.gauge = 1};
  value_list_t vl = make_vl("p", "vt_event", "watched", &v, 1, SEC(10));
  unsigned updates = update_events;
  CHECK(uc_update(ds, &vl) == 0); /* the double subscribes it */
  vl.time = SEC(20);
  CHECK(uc_update(ds, &vl) == 0);
  CHECK(update_events == updates + 1);
  CHECK(last_event_mask == 0x5);
  CHECK(strcmp(last_event_name, "h/p/vt_event-watched") == 0);
  value_list_t other = make_vl("p", "vt_event", "quiet", &v, 1, SEC(10));
  CHECK(uc_update(ds, &other) == 0);
  other.time = SEC(20);
  CHECK(uc_update(ds, &other) == 0);
  CHECK(update_events == updates + 1); /* no mask, no event */
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

static void test_timeout(void) {
  const data_set_t *ds = register_one("vt_fast", DS_TYPE_GAUGE);
  value_t v = {.gauge = 3};
  value_list_t vl = make_vl("fast", "vt_fast", "watched", &v, 1, cdtime());
  vl.interval = MS_TO_CDTIME_T(50);
  CHECK(uc_update(ds, &vl) == 0);
  size_t before = uc_get_size();
  unsigned missing = missing_count, expired = expired_events;

  CHECK(uc_check_timeout() == 0); /* fresh: stays */
  CHECK(uc_get_size() == before);
  sleep_ms(250); /* > timeout_g (2) * 50 ms */
  CHECK(uc_check_timeout() == 0);
  CHECK(uc_get_size() == before - 1);
  CHECK(missing_count == missing + 1);
  CHECK(strcmp(last_missing.host, "h") == 0);
  CHECK(strcmp(last_missing.plugin, "fast") == 0);
  CHECK(strcmp(last_missing.type, "vt_fast") == 0);
  CHECK(strcmp(last_missing.type_instance, "watched") == 0);
  CHECK(last_missing.time == vl.time && last_missing.interval == vl.interval);
  CHECK(expired_events == expired + 1 && last_event_mask == 0x5);
  CHECK(uc_get_rate(ds, &vl) == NULL);
  gauge_t *rates = NULL;
  size_t n = 0;
  CHECK(uc_get_rate_by_name("h/fast/vt_fast-watched", &rates, &n) == -1);

  /* The 10 s entries are still there; after it comes back it is new. */
  CHECK(uc_get_rate_by_name("h/load/load", &rates, &n) == 0);
  free(rates);
  vl.time = cdtime();
  CHECK(uc_update(ds, &vl) == 0);
  CHECK(uc_get_size() == before);
}

/* Several threads updating and reading at once. */
static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  const data_set_t *ds = plugin_get_ds("cpu");
  char inst[32];
  snprintf(inst, sizeof(inst), "t%d", id);
  value_t v = {.derive = 0};
  value_list_t vl = make_vl("cpu", "cpu", inst, &v, 1, SEC(1));
  for (int i = 1; i <= 2000; i++) {
    v.derive = i * 10;
    vl.time = SEC(i);
    if (uc_update(ds, &vl) != 0)
      return (void *)1;
    gauge_t *r = uc_get_rate(ds, &vl);
    if (r == NULL || (i > 1 && r[0] != 10))
      return (void *)1;
    free(r);
    if (i % 500 == 0)
      uc_check_timeout();
  }
  return NULL;
}

static void test_threads(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < 4; i++) {
    void *ret = NULL;
    CHECK(pthread_join(t[i], &ret) == 0);
    CHECK(ret == NULL);
  }
}

#if defined(VCD_CACHE_MAX) && defined(VCD_TYPES_MAX)
static void test_cache_limit(void) {
  const data_set_t *ds = plugin_get_ds("load");
  value_t v[3] = {{.gauge = 1}, {.gauge = 1}, {.gauge = 1}};
  char inst[32];
  int i = 0;
  for (; uc_get_size() < VCD_CACHE_MAX; i++) {
    snprintf(inst, sizeof(inst), "cap%d", i);
    value_list_t vl = make_vl("cap", "load", inst, v, 3, SEC(1));
    CHECK(uc_update(ds, &vl) == 0);
  }
  snprintf(inst, sizeof(inst), "cap%d", i);
  value_list_t vl = make_vl("cap", "load", inst, v, 3, SEC(1));
  CHECK(uc_update(ds, &vl) == -1);
  char want[128];
  snprintf(want, sizeof(want), "holds %d entries; not adding h/cap/load-%s.",
           VCD_CACHE_MAX, inst);
  CHECK(strstr(last_log, want) != NULL);
  CHECK(uc_get_size() == VCD_CACHE_MAX);
  value_list_t known = make_vl("cap", "load", "cap0", v, 3, SEC(2));
  CHECK(uc_update(ds, &known) == 0); /* known names still update */
}

static void test_types_limit(void) {
  data_source_t src = {"value", DS_TYPE_GAUGE, NAN, NAN};
  data_set_t t = {"", 1, &src};
  for (int i = 0;; i++) {
    snprintf(t.type, sizeof(t.type), "lim%d", i);
    if (plugin_register_data_set(&t) != 0)
      break;
    CHECK(i < VCD_TYPES_MAX);
  }
  CHECK(plugin_get_ds(t.type) == NULL);
  char err[512] = "";
  const char text[] = "lim0 value:DERIVE:0:U\nlim_new value:GAUGE:0:U\n";
  const char *path = write_file("bad.db", text, sizeof(text) - 1);
  CHECK(vcd_types_load(path, err, sizeof(err)) == -1);
  char want[64];
  snprintf(want, sizeof(want), ": more than %d types would be defined",
           VCD_TYPES_MAX);
  CHECK(strstr(err, want) != NULL);
  CHECK(plugin_get_ds("lim0")->ds[0].type == DS_TYPE_GAUGE); /* unchanged */
  path = write_file("bad.db", text, 22); /* only the redefinition */
  CHECK(vcd_types_load(path, err, sizeof(err)) == 0);
  CHECK(plugin_get_ds("lim0")->ds[0].type == DS_TYPE_DERIVE);
}
#endif

int main(void) {
  CHECK(mkdtemp(tmpdir) != NULL);
  CHECK(uc_init() == 0);
  test_types_db();
  test_types_good_file();
  test_types_bad_files();
  test_register();
  test_gauge();
  test_derive();
  test_counter_absolute();
  test_refused();
  test_reshape();
  test_names_iterator();
  test_history();
  test_state_hits_meta();
  test_events();
  test_timeout();
  test_threads();
#if defined(VCD_CACHE_MAX) && defined(VCD_TYPES_MAX)
  test_cache_limit();
  test_types_limit();
#endif
  char path[600];
  const char *files[] = {"bad.db", "good.db", "long.db", "nul.db"};
  for (size_t i = 0; i < STATIC_ARRAY_SIZE(files); i++) {
    snprintf(path, sizeof(path), "%s/%s", tmpdir, files[i]);
    unlink(path);
  }
  rmdir(tmpdir);
  printf("ok %u checks\n", checks);
  return 0;
}
