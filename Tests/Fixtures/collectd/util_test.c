/*
 * Unit test of the collectd shim's util.c and containers.c. Build and run:
 *
 *   cc -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -O2 -pthread \
 *      -DHAVE_CONFIG_H -I/usr/include/collectd -I/usr/include/collectd/core \
 *      Tests/Fixtures/collectd/util_test.c \
 *      Plugins/collectd/shim/util.c Plugins/collectd/shim/containers.c \
 *      -o /tmp/util_test && /tmp/util_test
 *
 * Prints "ok N checks" and exits 0, or names the first failing check
 * (file:line) and exits 1.
 */
#include "../../../Plugins/collectd/shim/shim.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

static int checks;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#define CHECK_STR(a, b) CHECK(strcmp((a), (b)) == 0)

/* ------------------------------------------------ test doubles (registry.c,
 * cache.c): stand-ins for the shim's real definitions, which this test does
 * not link. */

static int log_calls;
static int last_log_level;
static char last_log[1024];

void plugin_log(int level, const char *format, ...) {
  va_list ap;
  va_start(ap, format);
  vsnprintf(last_log, sizeof(last_log), format, ap);
  va_end(ap);
  last_log_level = level;
  log_calls++;
}

cdtime_t plugin_get_interval(void) {
  return TIME_T_TO_CDTIME_T_STATIC(10);
}

gauge_t *uc_get_rate(const data_set_t *ds, const value_list_t *vl) {
  gauge_t *rates = calloc(ds->ds_num, sizeof(*rates));
  for (size_t i = 0; rates != NULL && i < ds->ds_num; i++)
    rates[i] = 0.25 * (double)(i + 1);
  return rates;
}

/* ----------------------------------------------------------- strings */

static void test_strings(void) {
  char buf[8];
  memset(buf, 'x', sizeof(buf));
  CHECK(sstrncpy(buf, "0123456789", sizeof(buf)) == buf);
  CHECK_STR(buf, "0123456");
  buf[0] = 'q';
  sstrncpy(buf, "abc", 0);
  CHECK(buf[0] == 'q');

  CHECK(ssnprintf(buf, sizeof(buf), "%d", 123456789) == 9);
  CHECK_STR(buf, "1234567");

  char big[3000];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  char *s = ssnprintf_alloc("<%s>", big);
  CHECK(s != NULL && strlen(s) == sizeof(big) + 1 && s[0] == '<' && s[sizeof(big)] == '>');
  free(s);

  s = sstrdup("dup");
  CHECK(s != NULL && strcmp(s, "dup") == 0);
  free(s);
  CHECK(sstrdup(NULL) == NULL);
  s = sstrndup("abcdef", 3);
  CHECK_STR(s, "abc");
  free(s);
  CHECK(sstrnlen("abcdef", 4) == 4);

  char eb[64];
  CHECK(sstrerror(ENOENT, eb, sizeof(eb)) == eb);
  CHECK(strstr(eb, "No such file") != NULL);
  CHECK(strlen(STRERROR(EINVAL)) > 0);
  char tiny[4];
  sstrerror(ENOENT, tiny, sizeof(tiny));
  CHECK(strlen(tiny) < sizeof(tiny));

  void *m = smalloc(16);
  CHECK(m != NULL);
  free(m);
}

static void test_strsplit(void) {
  char str[] = "  alpha beta\tgamma\r\ndelta  ";
  char *fields[8];
  CHECK(strsplit(str, fields, 8) == 4);
  CHECK_STR(fields[0], "alpha");
  CHECK_STR(fields[3], "delta");
  CHECK(fields[4] == NULL);

  char str2[] = "a b c d e";
  CHECK(strsplit(str2, fields, 2) == 2);
  CHECK_STR(fields[0], "a");
  CHECK_STR(fields[1], "b");

  char str3[] = "a b";
  fields[0] = (char *)"untouched";
  CHECK(strsplit(str3, fields, 0) == 0);
  CHECK_STR(fields[0], "untouched");

  char str4[] = " \t ";
  CHECK(strsplit(str4, fields, 8) == 0);
  CHECK(strsplit(NULL, fields, 8) == 0);
}

static void test_strjoin(void) {
  char *f[] = {(char *)"foo", (char *)"bar", (char *)"baz"};
  char buf[32];
  CHECK(strjoin(buf, sizeof(buf), f, 3, ", ") == 13);
  CHECK_STR(buf, "foo, bar, baz");
  CHECK(strjoin(buf, sizeof(buf), f, 3, NULL) == 9);
  CHECK_STR(buf, "foobarbaz");
  CHECK(strjoin(NULL, 0, f, 3, "-") == 11);
  CHECK(strjoin(buf, 6, f, 3, "-") == 11);
  CHECK_STR(buf, "foo-b");
  /* A separator that does not fit whole is not written. */
  CHECK(strjoin(buf, 5, f, 3, "--") == 13);
  CHECK_STR(buf, "foo");
  CHECK(strjoin(buf, sizeof(buf), f, 0, "-") == 0);
  CHECK_STR(buf, "");
  CHECK(strjoin(NULL, 4, f, 3, "-") < 0);
  CHECK(strjoin(buf, sizeof(buf), NULL, 2, "-") < 0);
  char *g[] = {(char *)"a", NULL};
  CHECK(strjoin(buf, sizeof(buf), g, 2, "-") < 0);
}

static void test_escapes(void) {
  char buf[64] = "simple";
  CHECK(escape_string(buf, sizeof(buf)) == 0);
  CHECK_STR(buf, "simple");
  sstrncpy(buf, "more \"complex\"", sizeof(buf));
  CHECK(escape_string(buf, sizeof(buf)) == 0);
  CHECK_STR(buf, "\"more \\\"complex\\\"\"");
  char small[8] = "a b c d";
  CHECK(escape_string(small, sizeof(small)) == 0);
  CHECK(small[0] == '"' && small[strlen(small) - 1] == '"' && strlen(small) < sizeof(small));
  char two[2] = " ";
  CHECK(escape_string(two, sizeof(two)) != 0);

  char sl[16] = "/";
  CHECK(escape_slashes(sl, sizeof(sl)) == 0);
  CHECK_STR(sl, "root");
  sstrncpy(sl, "/var/lib/x", sizeof(sl));
  CHECK(escape_slashes(sl, sizeof(sl)) == 0);
  CHECK_STR(sl, "var_lib_x");
  char sl2[3] = "/";
  CHECK(escape_slashes(sl2, sizeof(sl2)) < 0);

  char sp[] = "foo$bar&-9";
  replace_special(sp, sizeof(sp));
  CHECK_STR(sp, "foo_bar_-9");

  char un[32] = "a\\tb\\nc\\\\d\\qe";
  CHECK(strunescape(un, sizeof(un)) == 0);
  CHECK_STR(un, "a\tb\nc\\dqe");
  char un2[8] = "ab\\";
  CHECK(strunescape(un2, sizeof(un2)) < 0);

  char nl[] = "line\r\n\n";
  CHECK(strstripnewline(nl) == 4);
  CHECK_STR(nl, "line");
}

static void test_subst(void) {
  char buf[64];
  CHECK(subst(buf, sizeof(buf), "foo_____bar", 3, 8, " - ") == buf);
  CHECK_STR(buf, "foo - bar");
  CHECK(subst(buf, 6, "foo_____bar", 3, 8, " - ") == buf);
  CHECK_STR(buf, "foo -");
  CHECK(subst(buf, sizeof(buf), "abc", 2, 1, "x") == NULL);
  CHECK(subst(buf, sizeof(buf), "abc", 1, 9, "x") == NULL);

  CHECK(subst_string(buf, sizeof(buf), "aXbXc", "X", "--") == buf);
  CHECK_STR(buf, "a--b--c");
  CHECK(subst_string(buf, sizeof(buf), "aXbXc", "X", "XX") == buf);
  CHECK_STR(buf, "aXXbXXc");
  CHECK(subst_string(buf, sizeof(buf), "none here", "X", "Y") == buf);
  CHECK_STR(buf, "none here");
  CHECK(subst_string(buf, 5, "aXbXc", "X", "--") == buf);
  CHECK_STR(buf, "a--b");
  sstrncpy(buf, "1.2.3", sizeof(buf));
  CHECK(subst_string(buf, sizeof(buf), buf, ".", "::") == buf);
  CHECK_STR(buf, "1::2::3");
  CHECK(subst_string(buf, sizeof(buf), "x", "", "y") == buf);
  CHECK_STR(buf, "x");
}

/* ----------------------------------------------------- parse and format */

static data_source_t two_ds[2] = {{"value", DS_TYPE_GAUGE, 0, NAN}, {"count", DS_TYPE_DERIVE, 0, NAN}};
static data_set_t two_set = {"test_type", 2, two_ds};

static void test_parse_value(void) {
  value_t v;
  CHECK(parse_value("0x10", &v, DS_TYPE_COUNTER) == 0 && v.counter == 16);
  CHECK(parse_value("18446744073709551615", &v, DS_TYPE_COUNTER) == 0 &&
        v.counter == 18446744073709551615ULL);
  CHECK(parse_value("1.5e3", &v, DS_TYPE_GAUGE) == 0 && v.gauge == 1500.0);
  CHECK(parse_value("-42", &v, DS_TYPE_DERIVE) == 0 && v.derive == -42);
  CHECK(parse_value("7", &v, DS_TYPE_ABSOLUTE) == 0 && v.absolute == 7);
  CHECK(parse_value("  12 \n", &v, DS_TYPE_DERIVE) == 0 && v.derive == 12);
  v.derive = 99;
  CHECK(parse_value("abc", &v, DS_TYPE_DERIVE) == -1 && v.derive == 99);
  CHECK(parse_value("", &v, DS_TYPE_GAUGE) == -1);
  CHECK(parse_value("1", &v, 42) == -1);
  CHECK(parse_value(NULL, &v, DS_TYPE_GAUGE) == EINVAL);
  CHECK(parse_value("1", NULL, DS_TYPE_GAUGE) == EINVAL);
  int before = log_calls;
  CHECK(parse_value("12abc", &v, DS_TYPE_DERIVE) == 0 && v.derive == 12);
  CHECK(log_calls == before + 1 && last_log_level == LOG_INFO);

  derive_t d = 5;
  CHECK(strtoderive("-17", &d) == 0 && d == -17);
  CHECK(strtoderive("x", &d) != 0 && d == -17);
  gauge_t g = 1.0;
  CHECK(strtogauge("2.5", &g) == 0 && g == 2.5);
  CHECK(strtogauge("2.5x", &g) != 0 && g == 2.5);
  CHECK(strtogauge(NULL, &g) == EINVAL);
}

static void test_parse_values(void) {
  value_t values[2];
  value_list_t vl = VALUE_LIST_INIT;
  vl.values = values;
  vl.values_len = 2;
  sstrncpy(vl.type, "test_type", sizeof(vl.type));

  char b1[] = "1136214245.5:U:-3";
  CHECK(parse_values(b1, &vl, &two_set) == 0);
  CHECK(vl.time == DOUBLE_TO_CDTIME_T(1136214245.5));
  CHECK(isnan(values[0].gauge) && values[1].derive == -3);

  char b2[] = "N:1.25:7";
  cdtime_t before = cdtime();
  CHECK(parse_values(b2, &vl, &two_set) == 0);
  CHECK(vl.time >= before && values[0].gauge == 1.25 && values[1].derive == 7);

  char b3[] = "10:1:2:3";
  CHECK(parse_values(b3, &vl, &two_set) != 0);
  char b4[] = "10";
  CHECK(parse_values(b4, &vl, &two_set) != 0);
  char b5[] = "10:x:1";
  CHECK(parse_values(b5, &vl, &two_set) != 0);
  char b6[] = "later:1:2";
  CHECK(parse_values(b6, &vl, &two_set) != 0);
  CHECK(parse_values(NULL, &vl, &two_set) == EINVAL);
}

static void test_identifiers(void) {
  char name[6 * DATA_MAX_NAME_LEN];
  CHECK(format_name(name, sizeof(name), "host", "cpu", "0", "cpu", "idle") == 0);
  CHECK_STR(name, "host/cpu-0/cpu-idle");
  CHECK(format_name(name, sizeof(name), "host", "load", "", "load", NULL) == 0);
  CHECK_STR(name, "host/load/load");
  CHECK(format_name(name, 8, "host", "load", "", "load", NULL) == ENOBUFS);
  CHECK(strlen(name) < 8);
  CHECK(format_name(name, sizeof(name), "host", NULL, NULL, "load", NULL) != 0);

  value_list_t vl = VALUE_LIST_INIT;
  CHECK(parse_identifier_vl("myhost/interface-eth0/if_octets-rx", &vl) == 0);
  CHECK_STR(vl.host, "myhost");
  CHECK_STR(vl.plugin, "interface");
  CHECK_STR(vl.plugin_instance, "eth0");
  CHECK_STR(vl.type, "if_octets");
  CHECK_STR(vl.type_instance, "rx");
  CHECK(FORMAT_VL(name, sizeof(name), &vl) == 0);
  CHECK_STR(name, "myhost/interface-eth0/if_octets-rx");

  value_list_t vl2 = VALUE_LIST_INIT;
  CHECK(parse_identifier_vl(name, &vl2) == 0);
  CHECK(memcmp(vl.host, vl2.host, sizeof(vl.host)) == 0);
  CHECK_STR(vl2.type_instance, "rx");
  CHECK(parse_identifier_vl("h/p/t", &vl2) == 0);
  CHECK_STR(vl2.plugin_instance, "");
  CHECK_STR(vl2.type_instance, "");
  CHECK(parse_identifier_vl("plugin/type", &vl2) != 0);
  CHECK(parse_identifier_vl(NULL, &vl2) == EINVAL);

  char id[] = "plugin-a/type-b";
  char *h, *p, *pi, *t, *ti;
  CHECK(parse_identifier(id, &h, &p, &pi, &t, &ti, (char *)"dflt") == 0);
  CHECK_STR(h, "dflt");
  CHECK_STR(p, "plugin");
  CHECK_STR(pi, "a");
  CHECK_STR(t, "type");
  CHECK_STR(ti, "b");
}

static void test_format_values(void) {
  value_t values[2] = {{.gauge = 1.5}, {.derive = 42}};
  value_list_t vl = VALUE_LIST_INIT;
  vl.values = values;
  vl.values_len = 2;
  vl.time = TIME_T_TO_CDTIME_T_STATIC(100);
  sstrncpy(vl.type, "test_type", sizeof(vl.type));
  char buf[128];
  CHECK(format_values(buf, sizeof(buf), &two_set, &vl, false) == 0);
  CHECK_STR(buf, "100.000:1.5:42");
  CHECK(format_values(buf, sizeof(buf), &two_set, &vl, true) == 0);
  CHECK_STR(buf, "100.000:1.5:0.5");
  CHECK(format_values(buf, 10, &two_set, &vl, false) != 0);
  sstrncpy(vl.type, "other", sizeof(vl.type));
  CHECK(format_values(buf, sizeof(buf), &two_set, &vl, false) != 0);
}

/* ------------------------------------------------------------- rates */

static void test_rates(void) {
  CHECK(counter_diff(10, 15) == 5);
  CHECK(counter_diff(4294967290ULL, 5) == 11);
  CHECK(counter_diff(18446744073709551610ULL, 5) == 11);

  value_to_rate_state_t st;
  memset(&st, 0, sizeof(st));
  gauge_t rate = -1;
  cdtime_t t0 = TIME_T_TO_CDTIME_T_STATIC(1000);
  cdtime_t ten = TIME_T_TO_CDTIME_T_STATIC(10);
  CHECK(value_to_rate(&rate, (value_t){.derive = 100}, DS_TYPE_DERIVE, t0, &st) == EAGAIN);
  CHECK(value_to_rate(&rate, (value_t){.derive = 150}, DS_TYPE_DERIVE, t0 + ten, &st) == 0);
  CHECK(rate == 5.0);
  CHECK(value_to_rate(&rate, (value_t){.derive = 130}, DS_TYPE_DERIVE, t0 + 2 * ten, &st) == 0);
  CHECK(rate == -2.0);
  CHECK(value_to_rate(&rate, (value_t){.derive = 1}, DS_TYPE_DERIVE, t0 + 2 * ten, &st) == EINVAL);
  CHECK(st.last_time == 0);

  memset(&st, 0, sizeof(st));
  CHECK(value_to_rate(&rate, (value_t){.counter = 4294967290ULL}, DS_TYPE_COUNTER, t0, &st) ==
        EAGAIN);
  CHECK(value_to_rate(&rate, (value_t){.counter = 10}, DS_TYPE_COUNTER, t0 + ten, &st) == 0);
  CHECK(rate == 1.6);
  CHECK(value_to_rate(&rate, (value_t){.counter = 30}, DS_TYPE_COUNTER, t0 + 2 * ten, &st) == 0);
  CHECK(rate == 2.0);

  memset(&st, 0, sizeof(st));
  CHECK(value_to_rate(&rate, (value_t){.absolute = 50}, DS_TYPE_ABSOLUTE, t0, &st) == EAGAIN);
  CHECK(value_to_rate(&rate, (value_t){.absolute = 50}, DS_TYPE_ABSOLUTE, t0 + ten, &st) == 0);
  CHECK(rate == 5.0);
  memset(&st, 0, sizeof(st));
  CHECK(value_to_rate(&rate, (value_t){.gauge = 3.5}, DS_TYPE_GAUGE, t0, &st) == EAGAIN);
  CHECK(value_to_rate(&rate, (value_t){.gauge = 4.5}, DS_TYPE_GAUGE, t0 + ten, &st) == 0);
  CHECK(rate == 4.5);
  CHECK(value_to_rate(NULL, (value_t){.gauge = 1}, DS_TYPE_GAUGE, t0, &st) == EINVAL);

  rate_to_value_state_t rs;
  memset(&rs, 0, sizeof(rs));
  value_t v;
  CHECK(rate_to_value(&v, 0.25, &rs, DS_TYPE_DERIVE, t0) == EAGAIN);
  CHECK(rate_to_value(&v, 0.25, &rs, DS_TYPE_DERIVE, t0 + TIME_T_TO_CDTIME_T_STATIC(2)) == 0);
  CHECK(v.derive == 0);
  CHECK(rate_to_value(&v, 0.25, &rs, DS_TYPE_DERIVE, t0 + TIME_T_TO_CDTIME_T_STATIC(4)) == 0);
  CHECK(v.derive == 1);
  CHECK(rate_to_value(&v, 10.0, &rs, DS_TYPE_DERIVE, t0 + TIME_T_TO_CDTIME_T_STATIC(5)) == 0);
  CHECK(v.derive == 11);
  CHECK(rate_to_value(&v, -1.0, &rs, DS_TYPE_COUNTER, t0 + TIME_T_TO_CDTIME_T_STATIC(6)) == EINVAL);
  CHECK(rs.last_time == 0);
  CHECK(rate_to_value(&v, 1e300, &rs, DS_TYPE_COUNTER, t0) == EINVAL);
  CHECK(rate_to_value(&v, 2.5, &rs, DS_TYPE_GAUGE, t0) == 0 && v.gauge == 2.5);
}

/* -------------------------------------------------------------- time */

static void test_time(void) {
  struct timeval a = {10, 500000}, b = {12, 100000}, d;
  CHECK(timeval_cmp(a, b, &d) == -1 && d.tv_sec == 1 && d.tv_usec == 600000);
  CHECK(timeval_cmp(b, a, &d) == 1 && d.tv_sec == 1 && d.tv_usec == 600000);
  CHECK(timeval_cmp(a, a, &d) == 0 && d.tv_sec == 0 && d.tv_usec == 0);
  struct timeval c = {9, 1500000};
  CHECK(timeval_cmp(a, c, NULL) == 0);

  cdtime_t now = cdtime();
  time_t wall = time(NULL);
  CHECK(CDTIME_T_TO_TIME_T(now) >= wall - 1 && CDTIME_T_TO_TIME_T(now) <= wall + 1);

  char buf[64];
  cdtime_t t = TIME_T_TO_CDTIME_T_STATIC(1136214245);
  CHECK(rfc3339(buf, sizeof(buf), t) == 0);
  CHECK_STR(buf, "2006-01-02T15:04:05Z");
  CHECK(rfc3339nano(buf, sizeof(buf), t + (1 << 29)) == 0);
  CHECK_STR(buf, "2006-01-02T15:04:05.500000000Z");
  CHECK(rfc3339(buf, RFC3339_SIZE - 1, t) == ENOMEM);
  CHECK(rfc3339nano(buf, RFC3339_SIZE, t) == ENOMEM);
  CHECK(rfc3339(NULL, sizeof(buf), t) != 0);

  setenv("TZ", "UTC-2", 1);
  tzset();
  CHECK(rfc3339_local(buf, sizeof(buf), t) == 0);
  CHECK_STR(buf, "2006-01-02T17:04:05+02:00");
  CHECK(rfc3339nano_local(buf, RFC3339NANO_SIZE, t) == 0);
  CHECK_STR(buf, "2006-01-02T17:04:05.000000000+02:00");
  setenv("TZ", "UTC", 1);
  tzset();
}

/* -------------------------------------------------------- complaints */

static void test_complain(void) {
  c_complain_t c = C_COMPLAIN_INIT_STATIC;
  int before = log_calls;
  c_complain(LOG_WARNING, &c, "broken %d", 1);
  CHECK(log_calls == before + 1);
  CHECK_STR(last_log, "broken 1");
  CHECK(c.interval == TIME_T_TO_CDTIME_T_STATIC(10) && c.complained_once);
  c_complain(LOG_WARNING, &c, "broken %d", 2);
  c_complain(LOG_WARNING, &c, "broken %d", 3);
  CHECK(log_calls == before + 1);

  /* Once the wait has passed it logs again and the wait doubles. */
  c.last -= TIME_T_TO_CDTIME_T_STATIC(11);
  c_complain(LOG_WARNING, &c, "broken %d", 4);
  CHECK(log_calls == before + 2);
  CHECK(c.interval == TIME_T_TO_CDTIME_T_STATIC(20));
  c_complain(LOG_WARNING, &c, "broken %d", 5);
  CHECK(log_calls == before + 2);

  c.interval = TIME_T_TO_CDTIME_T_STATIC(80000);
  c.last -= TIME_T_TO_CDTIME_T_STATIC(90000);
  c_complain(LOG_WARNING, &c, "broken %d", 6);
  CHECK(log_calls == before + 3);
  CHECK(c.interval == TIME_T_TO_CDTIME_T_STATIC(86400));

  c_complain_once(LOG_WARNING, &c, "once");
  CHECK(log_calls == before + 3);

  c_release(LOG_INFO, &c, "fixed");
  CHECK(log_calls == before + 4);
  CHECK_STR(last_log, "fixed");
  CHECK(c.interval == 0 && !c.complained_once);
  c_release(LOG_INFO, &c, "fixed again");
  CHECK(log_calls == before + 4);

  c_complain_once(LOG_ERR, &c, "once %s", "only");
  CHECK(log_calls == before + 5 && last_log_level == LOG_ERR);
  c.last = 0;
  c_complain_once(LOG_ERR, &c, "once %s", "only");
  CHECK(log_calls == before + 5);
}

/* ------------------------------------------------------------ random */

static void test_random(void) {
  bool seen_lo = false, seen_hi = false;
  for (int i = 0; i < 10000; i++) {
    double d = cdrand_d();
    CHECK(d >= 0.0 && d < 1.0);
    long r = cdrand_range(-3, 3);
    CHECK(r >= -3 && r <= 3);
    seen_lo |= (r == -3);
    seen_hi |= (r == 3);
  }
  CHECK(seen_lo && seen_hi);
  CHECK(cdrand_range(5, 5) == 5);
  long full = cdrand_range(LONG_MIN, LONG_MAX);
  CHECK(full >= LONG_MIN && full <= LONG_MAX);
  uint32_t a = cdrand_u(), b = cdrand_u(), c = cdrand_u();
  CHECK(!(a == b && b == c));
}

/* ----------------------------------------------------- notifications */

static void test_notifications(void) {
  notification_t n;
  CHECK(notification_init(&n, NOTIF_WARNING, "msg", "host", "plug", "pi", "type", NULL) == 0);
  CHECK(n.severity == NOTIF_WARNING && n.meta == NULL);
  CHECK_STR(n.message, "msg");
  CHECK_STR(n.plugin_instance, "pi");
  CHECK_STR(n.type_instance, "");

  CHECK(plugin_notification_meta_add_string(&n, "s", "text") == 0);
  CHECK(plugin_notification_meta_add_signed_int(&n, "i", -5) == 0);
  CHECK(plugin_notification_meta_add_unsigned_int(&n, "u", 7) == 0);
  CHECK(plugin_notification_meta_add_double(&n, "d", 2.5) == 0);
  CHECK(plugin_notification_meta_add_boolean(&n, "b", true) == 0);
  CHECK(plugin_notification_meta_add_string(&n, "x", NULL) != 0);
  CHECK(plugin_notification_meta_add_string(NULL, "x", "y") != 0);

  const notification_meta_t *m = n.meta;
  CHECK(m != NULL && m->type == NM_TYPE_STRING && strcmp(m->nm_value.nm_string, "text") == 0);
  m = m->next;
  CHECK(m != NULL && m->type == NM_TYPE_SIGNED_INT && m->nm_value.nm_signed_int == -5);
  m = m->next;
  CHECK(m != NULL && m->type == NM_TYPE_UNSIGNED_INT && m->nm_value.nm_unsigned_int == 7);
  m = m->next;
  CHECK(m != NULL && m->type == NM_TYPE_DOUBLE && m->nm_value.nm_double == 2.5);
  m = m->next;
  CHECK(m != NULL && m->type == NM_TYPE_BOOLEAN && m->nm_value.nm_boolean && m->next == NULL);

  notification_t copy;
  notification_init(&copy, NOTIF_OKAY, NULL, NULL, NULL, NULL, NULL, NULL);
  CHECK(plugin_notification_meta_add_string(&copy, "first", "1") == 0);
  CHECK(plugin_notification_meta_copy(&copy, &n) == 0);
  int count = 0;
  for (m = copy.meta; m != NULL; m = m->next)
    count++;
  CHECK(count == 6);
  CHECK(strcmp(copy.meta->name, "first") == 0 && strcmp(copy.meta->next->name, "s") == 0);
  CHECK(copy.meta->next->nm_value.nm_string != n.meta->nm_value.nm_string);
  CHECK(plugin_notification_meta_copy(&n, &n) != 0);

  CHECK(plugin_notification_meta_free(n.meta) == 0);
  CHECK(plugin_notification_meta_free(copy.meta) == 0);
  CHECK(plugin_notification_meta_free(NULL) != 0);

  CHECK(parse_notif_severity("FAILURE") == NOTIF_FAILURE);
  CHECK(parse_notif_severity("failure") == NOTIF_FAILURE);
  CHECK(parse_notif_severity("Warning") == NOTIF_WARNING);
  CHECK(parse_notif_severity("WARN") == NOTIF_WARNING);
  CHECK(parse_notif_severity("okay") == NOTIF_OKAY);
  CHECK(parse_notif_severity("bogus") < 0);
  CHECK(parse_notif_severity(NULL) < 0);
  CHECK(parse_log_severity("err") == LOG_ERR);
  CHECK(parse_log_severity("CRIT") == LOG_ERR);
  CHECK(parse_log_severity("warning") == LOG_WARNING);
  CHECK(parse_log_severity("notice") == LOG_NOTICE);
  CHECK(parse_log_severity("Info") == LOG_INFO);
  CHECK(parse_log_severity("loud") < 0);
}

/* ---------------------------------------------------- files and misc */

static int walk_count;

static int walk_cb(const char *dir, const char *file, void *ud) {
  walk_count++;
  return strcmp(file, (const char *)ud) == 0 ? 0 : -1;
}

static void test_files(void) {
  char tmpl[] = "/tmp/vcd_util_test.XXXXXX";
  char *dir = mkdtemp(tmpl);
  CHECK(dir != NULL);
  char path[PATH_MAX];

  snprintf(path, sizeof(path), "%s/a/b/c/file.txt", dir);
  CHECK(check_create_dir(path) == 0);
  snprintf(path, sizeof(path), "%s/a/b/c", dir);
  struct stat st;
  CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
  snprintf(path, sizeof(path), "%s/a/b/c/file.txt", dir);
  CHECK(stat(path, &st) != 0);
  snprintf(path, sizeof(path), "%s/d/e/", dir);
  CHECK(check_create_dir(path) == 0);
  CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
  snprintf(path, sizeof(path), "%s/.hidden/x", dir);
  CHECK(check_create_dir(path) == -2);
  CHECK(check_create_dir("") == -1);

  snprintf(path, sizeof(path), "%s/value", dir);
  FILE *fh = fopen(path, "w");
  CHECK(fh != NULL);
  fputs("12345\n", fh);
  fclose(fh);
  value_t v;
  CHECK(parse_value_file(path, &v, DS_TYPE_DERIVE) == 0 && v.derive == 12345);
  char buf[16];
  CHECK(read_file_contents(path, buf, sizeof(buf)) == 6);
  CHECK(read_text_file_contents(path, buf, sizeof(buf)) == 7);
  CHECK_STR(buf, "12345\n");
  CHECK(read_text_file_contents(path, buf, 4) == 4);
  CHECK_STR(buf, "123");
  CHECK(read_text_file_contents(path, buf, 0) < 0);
  CHECK(read_file_contents("/nonexistent/file", buf, sizeof(buf)) < 0);
  CHECK(parse_value_file("/nonexistent/file", &v, DS_TYPE_GAUGE) != 0);

  snprintf(path, sizeof(path), "%s/.dot", dir);
  fh = fopen(path, "w");
  CHECK(fh != NULL);
  fclose(fh);
  walk_count = 0;
  CHECK(walk_directory(dir, walk_cb, (void *)"value", 0) == 0);
  CHECK(walk_count == 3);
  walk_count = 0;
  CHECK(walk_directory(dir, walk_cb, (void *)"value", 1) == 0);
  CHECK(walk_count == 4);
  CHECK(walk_directory(dir, walk_cb, (void *)"nothing", 0) == -1);
  CHECK(walk_directory("/nonexistent/dir", walk_cb, NULL, 0) == -1);

  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
}

static void test_io_and_misc(void) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  CHECK(swrite(sv[0], "hello", 5) == 0);
  char buf[8] = "";
  CHECK(sread(sv[1], buf, 5) == 0);
  CHECK(memcmp(buf, "hello", 5) == 0);
  close(sv[0]);
  CHECK(sread(sv[1], buf, 1) != 0);
  close(sv[1]);
  CHECK(swrite(-1, "x", 1) != 0);

  int tcp = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(tcp >= 0);
  set_sock_opts(tcp);
  int on = 0;
  socklen_t len = sizeof(on);
  CHECK(getsockopt(tcp, SOL_SOCKET, SO_KEEPALIVE, &on, &len) == 0 && on == 1);
  int idle = 0;
  len = sizeof(idle);
  CHECK(getsockopt(tcp, IPPROTO_TCP, TCP_KEEPIDLE, &idle, &len) == 0 && idle == 100);
  close(tcp);

  CHECK(ntohll(htonll(0x0102030405060708ULL)) == 0x0102030405060708ULL);
  unsigned long long be = htonll(0x0102030405060708ULL);
  CHECK(((unsigned char *)&be)[0] == 1 && ((unsigned char *)&be)[7] == 8);

  char **array = NULL;
  size_t array_len = 0;
  CHECK(strarray_add(&array, &array_len, "one") == 0);
  CHECK(strarray_add(&array, &array_len, "two") == 0);
  CHECK(strarray_add(&array, &array_len, NULL) == EINVAL);
  CHECK(array_len == 2 && strcmp(array[1], "two") == 0);
  strarray_free(array, array_len);

  /* CAP_NET_ADMIN (12) against the effective set the kernel reports. */
  FILE *fh = fopen("/proc/self/status", "r");
  CHECK(fh != NULL);
  char line[256];
  unsigned long long eff = 0;
  while (fgets(line, sizeof(line), fh) != NULL)
    sscanf(line, "CapEff: %llx", &eff);
  fclose(fh);
  CHECK(check_capability(12) == (((eff >> 12) & 1) ? 0 : -1));
  CHECK(check_capability(200) < 0);
  CHECK(check_capability(-1) < 0);

  int port = service_name_to_port_number("80");
  CHECK(port == 80);
  CHECK(service_name_to_port_number(NULL) < 0);
}

/* ---------------------------------------------------------- AVL tree */

static int int_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

#define AVL_N 10000

static void test_avl(void) {
  c_avl_tree_t *t = c_avl_create(int_cmp);
  CHECK(t != NULL && c_avl_size(t) == 0);
  CHECK(c_avl_create(NULL) == NULL);

  static int keys[AVL_N];
  srand(12345);
  for (int i = 0; i < AVL_N; i++)
    keys[i] = i * 7;
  for (int i = AVL_N - 1; i > 0; i--) {
    int j = rand() % (i + 1);
    int tmp = keys[i];
    keys[i] = keys[j];
    keys[j] = tmp;
  }
  for (int i = 0; i < AVL_N; i++)
    CHECK(c_avl_insert(t, &keys[i], &keys[i]) == 0);
  CHECK(c_avl_size(t) == AVL_N);
  int dup = keys[17];
  CHECK(c_avl_insert(t, &dup, NULL) > 0);
  CHECK(c_avl_size(t) == AVL_N);

  for (int i = 0; i < AVL_N; i++) {
    void *val = NULL;
    int k = i * 7;
    CHECK(c_avl_get(t, &k, &val) == 0 && *(int *)val == k);
  }
  int missing = 3;
  CHECK(c_avl_get(t, &missing, NULL) != 0);
  int present = 14;
  CHECK(c_avl_get(t, &present, NULL) == 0);

  c_avl_iterator_t *it = c_avl_get_iterator(t);
  void *k, *v;
  int n = 0, last = -1;
  while (c_avl_iterator_next(it, &k, &v) == 0) {
    CHECK(*(int *)k > last);
    last = *(int *)k;
    n++;
  }
  CHECK(n == AVL_N && last == (AVL_N - 1) * 7);
  CHECK(c_avl_iterator_prev(it, &k, &v) == 0 && *(int *)k == (AVL_N - 2) * 7);
  c_avl_iterator_destroy(it);

  it = c_avl_get_iterator(t);
  CHECK(c_avl_iterator_prev(it, &k, &v) == 0 && *(int *)k == (AVL_N - 1) * 7);
  n = 1;
  last = *(int *)k;
  while (c_avl_iterator_prev(it, &k, NULL) == 0) {
    CHECK(*(int *)k < last);
    last = *(int *)k;
    n++;
  }
  CHECK(n == AVL_N && last == 0);
  c_avl_iterator_destroy(it);

  /* Remove the even-indexed half, returning the stored pointers. */
  for (int i = 0; i < AVL_N; i += 2) {
    int key = keys[i];
    void *rk = NULL, *rv = NULL;
    CHECK(c_avl_remove(t, &key, &rk, &rv) == 0);
    CHECK(rk == &keys[i] && rv == &keys[i]);
    CHECK(c_avl_remove(t, &key, NULL, NULL) != 0);
  }
  CHECK(c_avl_size(t) == AVL_N / 2);
  for (int i = 0; i < AVL_N; i++)
    CHECK((c_avl_get(t, &keys[i], NULL) == 0) == (i % 2 == 1));
  it = c_avl_get_iterator(t);
  n = 0;
  last = -1;
  while (c_avl_iterator_next(it, &k, NULL) == 0) {
    CHECK(*(int *)k > last);
    last = *(int *)k;
    n++;
  }
  CHECK(n == AVL_N / 2);
  c_avl_iterator_destroy(it);

  n = 0;
  while (c_avl_pick(t, &k, &v) == 0) {
    CHECK(k == v);
    n++;
  }
  CHECK(n == AVL_N / 2 && c_avl_size(t) == 0);
  CHECK(c_avl_pick(t, &k, NULL) != 0);
  it = c_avl_get_iterator(t);
  CHECK(c_avl_iterator_next(it, &k, &v) != 0);
  c_avl_iterator_destroy(it);
  c_avl_destroy(t);

  t = c_avl_create((int (*)(const void *, const void *))strcmp);
  CHECK(c_avl_insert(t, (void *)"b", (void *)"2") == 0);
  CHECK(c_avl_insert(t, (void *)"a", (void *)"1") == 0);
  CHECK(c_avl_get(t, "a", &v) == 0 && strcmp(v, "1") == 0);
  c_avl_destroy(t);
  CHECK(c_avl_size(NULL) == 0);
  CHECK(c_avl_get_iterator(NULL) == NULL);
}

/* ------------------------------------------------------- linked list */

static int value_is(llentry_t *e, void *ud) {
  return (e->value == ud) ? 0 : 1;
}

static void test_llist(void) {
  llist_t *l = llist_create();
  CHECK(l != NULL && llist_size(l) == 0 && llist_head(l) == NULL && llist_tail(l) == NULL);
  int one = 1, two = 2, three = 3;
  llentry_t *a = llentry_create((char *)"a", &one);
  llentry_t *b = llentry_create((char *)"b", &two);
  llentry_t *c = llentry_create((char *)"c", &three);
  llist_append(l, b);
  llist_append(l, c);
  llist_prepend(l, a);
  CHECK(llist_size(l) == 3 && llist_head(l) == a && llist_tail(l) == c);
  CHECK(a->next == b && b->next == c && c->next == NULL);
  CHECK(llist_search(l, "b") == b);
  CHECK(llist_search(l, "z") == NULL);
  CHECK(llist_search(l, NULL) == NULL);
  CHECK(llist_search_custom(l, value_is, &three) == c);

  llist_remove(l, c);
  CHECK(llist_size(l) == 2 && llist_tail(l) == b && b->next == NULL);
  llist_remove(l, c);
  CHECK(llist_size(l) == 2);
  llist_remove(l, a);
  CHECK(llist_head(l) == b && llist_tail(l) == b && llist_size(l) == 1);
  llentry_destroy(a);
  llentry_destroy(c);
  llist_remove(l, b);
  CHECK(llist_size(l) == 0 && llist_head(l) == NULL && llist_tail(l) == NULL);
  llist_append(l, b);
  CHECK(llist_head(l) == b && llist_size(l) == 1);
  llist_destroy(l);
  CHECK(llist_size(NULL) == 0 && llist_head(NULL) == NULL);
}

/* --------------------------------------------------------- meta data */

static void test_meta_data(void) {
  meta_data_t *md = meta_data_create();
  CHECK(md != NULL);
  CHECK(meta_data_add_string(md, "str", "hello") == 0);
  CHECK(meta_data_add_signed_int(md, "neg", -7) == 0);
  CHECK(meta_data_add_unsigned_int(md, "pos", 9) == 0);
  CHECK(meta_data_add_double(md, "dbl", 0.5) == 0);
  CHECK(meta_data_add_boolean(md, "flag", true) == 0);
  CHECK(meta_data_add_string(md, "bad", NULL) != 0);
  CHECK(meta_data_add_string(NULL, "x", "y") != 0);

  char *s = NULL;
  CHECK(meta_data_get_string(md, "str", &s) == 0 && strcmp(s, "hello") == 0);
  free(s);
  int64_t i64 = 0;
  CHECK(meta_data_get_signed_int(md, "neg", &i64) == 0 && i64 == -7);
  uint64_t u64 = 0;
  CHECK(meta_data_get_unsigned_int(md, "pos", &u64) == 0 && u64 == 9);
  double dbl = 0;
  CHECK(meta_data_get_double(md, "dbl", &dbl) == 0 && dbl == 0.5);
  bool flag = false;
  CHECK(meta_data_get_boolean(md, "flag", &flag) == 0 && flag);
  CHECK(meta_data_get_signed_int(md, "str", &i64) == -ENOENT);
  CHECK(meta_data_get_double(md, "missing", &dbl) == -ENOENT);
  CHECK(meta_data_exists(md, "STR") == 1 && meta_data_exists(md, "nope") == 0);
  CHECK(meta_data_type(md, "dbl") == MD_TYPE_DOUBLE && meta_data_type(md, "nope") == 0);

  /* Adding an existing key replaces its value (and type) in place. */
  CHECK(meta_data_add_signed_int(md, "str", 42) == 0);
  CHECK(meta_data_type(md, "str") == MD_TYPE_SIGNED_INT);
  CHECK(meta_data_get_signed_int(md, "str", &i64) == 0 && i64 == 42);

  char **toc = NULL;
  int n = meta_data_toc(md, &toc);
  CHECK(n == 5);
  CHECK(strcmp(toc[0], "str") == 0 && strcmp(toc[4], "flag") == 0);
  strarray_free(toc, (size_t)n);

  CHECK(meta_data_as_string(md, "neg", &s) == 0 && strcmp(s, "-7") == 0);
  free(s);
  CHECK(meta_data_as_string(md, "dbl", &s) == 0 && strcmp(s, "0.5") == 0);
  free(s);
  CHECK(meta_data_as_string(md, "flag", &s) == 0 && strcmp(s, "true") == 0);
  free(s);
  CHECK(meta_data_as_string(md, "pos", &s) == 0 && strcmp(s, "9") == 0);
  free(s);
  CHECK(meta_data_as_string(md, "missing", &s) == -ENOENT);

  meta_data_t *clone = meta_data_clone(md);
  CHECK(clone != NULL);
  CHECK(meta_data_delete(md, "neg") == 0);
  CHECK(meta_data_delete(md, "neg") == -ENOENT);
  CHECK(meta_data_exists(md, "neg") == 0 && meta_data_exists(clone, "neg") == 1);

  meta_data_t *other = meta_data_create();
  CHECK(meta_data_add_string(other, "pos", "replaced") == 0);
  CHECK(meta_data_add_string(other, "new", "added") == 0);
  CHECK(meta_data_clone_merge(&clone, other) == 0);
  CHECK(meta_data_get_string(clone, "pos", &s) == 0 && strcmp(s, "replaced") == 0);
  free(s);
  CHECK(meta_data_get_string(clone, "new", &s) == 0 && strcmp(s, "added") == 0);
  free(s);
  CHECK(meta_data_toc(clone, &toc) == 6);
  strarray_free(toc, 6);

  meta_data_t *none = NULL;
  CHECK(meta_data_clone_merge(&none, other) == 0 && none != NULL);
  CHECK(meta_data_exists(none, "new") == 1);
  CHECK(meta_data_clone_merge(&none, NULL) == 0);

  meta_data_t *empty = meta_data_create();
  toc = (char **)&toc;
  CHECK(meta_data_toc(empty, &toc) == 0 && toc == NULL);

  meta_data_destroy(empty);
  meta_data_destroy(none);
  meta_data_destroy(other);
  meta_data_destroy(clone);
  meta_data_destroy(md);
  meta_data_destroy(NULL);
}

int main(void) {
  test_strings();
  test_strsplit();
  test_strjoin();
  test_escapes();
  test_subst();
  test_parse_value();
  test_parse_values();
  test_identifiers();
  test_format_values();
  test_rates();
  test_time();
  test_complain();
  test_random();
  test_notifications();
  test_files();
  test_io_and_misc();
  test_avl();
  test_llist();
  test_meta_data();
  printf("ok %d checks\n", checks);
  return 0;
}
