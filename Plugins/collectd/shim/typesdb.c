/*
 * types.db for the collectd shim: the data-set registry behind
 * plugin_get_ds, plugin_register_data_set and plugin_unregister_data_set,
 * and the parser of collectd's types.db files (vcd_types_load).
 *
 * Types live in a hash table keyed by name, guarded by a rwlock. A data set
 * that is replaced or unregistered is never freed: plugins keep the pointers
 * plugin_get_ds returned, so it moves to a retired list instead. Redefining
 * a type identically keeps the existing data set, so reloading the same
 * files costs no memory.
 */
#include "shim.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* Overridable (-D) so that a test can reach the limit cheaply. */
#ifndef VCD_TYPES_MAX
#define VCD_TYPES_MAX 1000000
#endif
#define VCD_RETIRED_MAX 1000000
#define VCD_SOURCES_MAX 1024
#define VCD_LINE_MAX 65536
#define VCD_FILE_MAX ((off_t)64 * 1024 * 1024)
#define VCD_COMPLAINTS_MAX 4096
#define VCD_TABLE_MIN 64

typedef struct vcd_type_s {
  struct vcd_type_s *next;
  data_set_t ds;
} vcd_type_t;

/* Chained hash table; `cap` is 0 or a power of two, load factor <= 1. */
typedef struct {
  vcd_type_t **slots;
  size_t cap;
  size_t count;
} vcd_table_t;

static pthread_rwlock_t types_lock = PTHREAD_RWLOCK_INITIALIZER;
static vcd_table_t types;
static vcd_type_t *retired;
static size_t retired_count;

/* Names plugin_get_ds has already reported as unknown. */
static pthread_mutex_t complaints_lock = PTHREAD_MUTEX_INITIALIZER;
static vcd_table_t complaints;
static bool complaints_full;

/* ------------------------------------------------------------ hash table */

static uint64_t name_hash(const char *name) {
  uint64_t h = 14695981039346656037ULL;
  for (const unsigned char *p = (const unsigned char *)name; *p != 0; p++) {
    h ^= *p;
    h *= 1099511628211ULL;
  }
  return h;
}

/* The link that points at `name`'s node, or at the end of its chain. */
static vcd_type_t **table_link_of(const vcd_table_t *t, const char *name) {
  vcd_type_t **link = &t->slots[name_hash(name) & (t->cap - 1)];
  while (*link != NULL && strcmp((*link)->ds.type, name) != 0)
    link = &(*link)->next;
  return link;
}

static vcd_type_t *table_get(const vcd_table_t *t, const char *name) {
  if (t->cap == 0)
    return NULL;
  return *table_link_of(t, name);
}

static void table_push(vcd_type_t **slots, size_t cap, vcd_type_t *node) {
  vcd_type_t **slot = &slots[name_hash(node->ds.type) & (cap - 1)];
  node->next = *slot;
  *slot = node;
}

/* Makes room for `n` nodes, so that table_add cannot fail. */
static int table_reserve(vcd_table_t *t, size_t n) {
  if (n <= t->cap)
    return 0;
  size_t cap = VCD_TABLE_MIN;
  while (cap < n)
    cap *= 2;
  vcd_type_t **slots = calloc(cap, sizeof(*slots));
  if (slots == NULL)
    return ENOMEM;
  for (size_t i = 0; i < t->cap; i++) {
    vcd_type_t *node = t->slots[i];
    while (node != NULL) {
      vcd_type_t *next = node->next;
      table_push(slots, cap, node);
      node = next;
    }
  }
  free(t->slots);
  t->slots = slots;
  t->cap = cap;
  return 0;
}

/* Adds a node whose name is not in the table; room was reserved. */
static void table_add(vcd_table_t *t, vcd_type_t *node) {
  table_push(t->slots, t->cap, node);
  t->count++;
}

static vcd_type_t *table_remove(vcd_table_t *t, const char *name) {
  if (t->cap == 0)
    return NULL;
  vcd_type_t **link = table_link_of(t, name);
  vcd_type_t *node = *link;
  if (node != NULL) {
    *link = node->next;
    node->next = NULL;
    t->count--;
  }
  return node;
}

/* Detaches every node into a list (the table is left empty). */
static vcd_type_t *table_drain(vcd_table_t *t) {
  vcd_type_t *list = NULL;
  for (size_t i = 0; i < t->cap; i++) {
    while (t->slots[i] != NULL) {
      vcd_type_t *node = t->slots[i];
      t->slots[i] = node->next;
      node->next = list;
      list = node;
    }
  }
  free(t->slots);
  *t = (vcd_table_t){0};
  return list;
}

/* ------------------------------------------------------------ data sets */

static void type_free(vcd_type_t *node) {
  if (node == NULL)
    return;
  free(node->ds.ds);
  free(node);
}

static void type_list_free(vcd_type_t *list) {
  while (list != NULL) {
    vcd_type_t *next = list->next;
    type_free(list);
    list = next;
  }
}

static vcd_type_t *type_new(size_t ds_num) {
  vcd_type_t *node = calloc(1, sizeof(*node));
  if (node == NULL)
    return NULL;
  node->ds.ds = calloc(ds_num, sizeof(*node->ds.ds));
  if (node->ds.ds == NULL) {
    free(node);
    return NULL;
  }
  node->ds.ds_num = ds_num;
  return node;
}

static bool limit_equal(double a, double b) {
  return (isnan(a) && isnan(b)) || a == b;
}

static bool ds_equal(const data_set_t *a, const data_set_t *b) {
  if (strcmp(a->type, b->type) != 0 || a->ds_num != b->ds_num)
    return false;
  for (size_t i = 0; i < a->ds_num; i++) {
    const data_source_t *x = &a->ds[i], *y = &b->ds[i];
    if (strcmp(x->name, y->name) != 0 || x->type != y->type ||
        !limit_equal(x->min, y->min) || !limit_equal(x->max, y->max))
      return false;
  }
  return true;
}

static bool name_ok(const char *name) {
  return name[0] != 0 && memchr(name, 0, DATA_MAX_NAME_LEN) != NULL;
}

static bool ds_type_ok(int type) {
  return type == DS_TYPE_COUNTER || type == DS_TYPE_GAUGE ||
         type == DS_TYPE_DERIVE || type == DS_TYPE_ABSOLUTE;
}

/* NULL when `ds` is acceptable, else what is wrong with it. */
static const char *ds_problem(const data_set_t *ds) {
  if (!name_ok(ds->type))
    return "the type name is empty or too long";
  if (ds->ds_num == 0 || ds->ds == NULL)
    return "it has no data sources";
  if (ds->ds_num > VCD_SOURCES_MAX)
    return "it has more than 1024 data sources";
  for (size_t i = 0; i < ds->ds_num; i++) {
    if (!name_ok(ds->ds[i].name))
      return "a data source name is empty or too long";
    if (!ds_type_ok(ds->ds[i].type))
      return "a data source has an unknown type";
  }
  return NULL;
}

static vcd_type_t *type_copy(const data_set_t *ds) {
  vcd_type_t *node = type_new(ds->ds_num);
  if (node == NULL)
    return NULL;
  memcpy(node->ds.type, ds->type, sizeof(node->ds.type));
  memcpy(node->ds.ds, ds->ds, ds->ds_num * sizeof(*ds->ds));
  return node;
}

/* ------------------------------------------------------- installation */

typedef struct {
  size_t added;    /* names not known yet */
  size_t replaced; /* known names with a different definition */
  char first_replaced[DATA_MAX_NAME_LEN];
} vcd_plan_t;

static void plan_one(vcd_plan_t *plan, const vcd_type_t *node) {
  const vcd_type_t *old = table_get(&types, node->ds.type);
  if (old == NULL)
    plan->added++;
  else if (!ds_equal(&old->ds, &node->ds) && plan->replaced++ == 0)
    sstrncpy(plan->first_replaced, node->ds.type, sizeof(plan->first_replaced));
}

/* Checks the limits and reserves room; types_lock is held for writing. */
static int plan_check(const vcd_plan_t *plan, char *err, size_t err_len) {
  if (types.count + plan->added > VCD_TYPES_MAX) {
    snprintf(err, err_len, "more than %d types would be defined",
             VCD_TYPES_MAX);
    return -1;
  }
  if (retired_count + plan->replaced > VCD_RETIRED_MAX) {
    snprintf(err, err_len, "more than %d types would have been replaced",
             VCD_RETIRED_MAX);
    return -1;
  }
  if (table_reserve(&types, types.count + plan->added) != 0) {
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  return 0;
}

static void retire(vcd_type_t *node) {
  node->next = retired;
  retired = node;
  retired_count++;
}

/* Installs `node` (types_lock held for writing, room reserved). Returns
 * true when it replaced a different definition. */
static bool install(vcd_type_t *node) {
  vcd_type_t *old = table_get(&types, node->ds.type);
  if (old != NULL && ds_equal(&old->ds, &node->ds)) {
    type_free(node);
    return false;
  }
  if (old != NULL)
    retire(table_remove(&types, node->ds.type));
  table_add(&types, node);
  return old != NULL;
}

/* Installs every node of `list` or none; consumes the list either way.
 * Without `replace`, a list that would redefine a known type is refused. */
static int install_list(vcd_type_t *list, bool replace, char *err,
                        size_t err_len) {
  vcd_plan_t plan = {0};
  pthread_rwlock_wrlock(&types_lock);
  for (const vcd_type_t *n = list; n != NULL; n = n->next)
    plan_one(&plan, n);
  int status = 0;
  if (!replace && plan.replaced > 0) {
    snprintf(err, err_len, "redefines type %s%s", plan.first_replaced,
             plan.replaced > 1 ? " and others" : "");
    status = -1;
  }
  if (status == 0)
    status = plan_check(&plan, err, err_len);
  while (status == 0 && list != NULL) {
    vcd_type_t *next = list->next;
    install(list);
    list = next;
  }
  pthread_rwlock_unlock(&types_lock);
  type_list_free(list);
  return status;
}

/* ------------------------------------------------------- collectd API */

int plugin_register_data_set(const data_set_t *ds) {
  if (ds == NULL)
    return -1;
  const char *problem = ds_problem(ds);
  if (problem != NULL) {
    plugin_log(LOG_ERR, "plugin_register_data_set: refusing data set: %s.",
               problem);
    return -1;
  }
  vcd_type_t *node = type_copy(ds);
  if (node == NULL) {
    plugin_log(LOG_ERR, "plugin_register_data_set: out of memory.");
    return -1;
  }
  char err[128] = "";
  vcd_plan_t plan = {0};
  pthread_rwlock_wrlock(&types_lock);
  plan_one(&plan, node);
  int status = plan_check(&plan, err, sizeof(err));
  bool replaced = status == 0 && install(node);
  pthread_rwlock_unlock(&types_lock);
  if (status != 0) {
    type_free(node);
    plugin_log(LOG_ERR, "plugin_register_data_set: %s: %s.", ds->type, err);
    return -1;
  }
  if (replaced)
    plugin_log(LOG_NOTICE, "Replacing DS `%s' with another version.",
               ds->type);
  return 0;
}

int plugin_unregister_data_set(const char *name) {
  if (name == NULL)
    return -1;
  int status = -1;
  bool full = false;
  pthread_rwlock_wrlock(&types_lock);
  if (retired_count >= VCD_RETIRED_MAX)
    full = table_get(&types, name) != NULL;
  else if (table_get(&types, name) != NULL) {
    retire(table_remove(&types, name));
    status = 0;
  }
  pthread_rwlock_unlock(&types_lock);
  if (full)
    plugin_log(LOG_ERR,
               "plugin_unregister_data_set: %s: more than %d types have "
               "been replaced or removed; keeping it.",
               name, VCD_RETIRED_MAX);
  return status;
}

/* True when `name` was not reported before and should be now. */
static bool complaint_new(const char *name, bool *now_full) {
  char key[DATA_MAX_NAME_LEN];
  sstrncpy(key, name, sizeof(key));
  bool report = false;
  pthread_mutex_lock(&complaints_lock);
  if (table_get(&complaints, key) == NULL) {
    vcd_type_t *node = NULL;
    if (complaints.count < VCD_COMPLAINTS_MAX &&
        table_reserve(&complaints, complaints.count + 1) == 0)
      node = calloc(1, sizeof(*node));
    if (node != NULL) {
      memcpy(node->ds.type, key, sizeof(key));
      table_add(&complaints, node);
      report = true;
    } else if (!complaints_full) {
      complaints_full = report = *now_full = true;
    }
  }
  pthread_mutex_unlock(&complaints_lock);
  return report;
}

static void complain_unknown(const char *name) {
  bool now_full = false;
  if (!complaint_new(name, &now_full))
    return;
  plugin_log(LOG_ERR, "plugin_get_ds: Type %s not found.", name);
  if (now_full)
    plugin_log(LOG_ERR, "plugin_get_ds: too many unknown types; further "
                        "ones are not reported.");
}

const data_set_t *plugin_get_ds(const char *name) {
  if (name == NULL)
    return NULL;
  pthread_rwlock_rdlock(&types_lock);
  const vcd_type_t *node = table_get(&types, name);
  pthread_rwlock_unlock(&types_lock);
  if (node == NULL) {
    complain_unknown(name);
    return NULL;
  }
  return &node->ds;
}

/* ------------------------------------------------------------- parsing */

typedef struct {
  const char *path;
  size_t line;
  char *err;
  size_t err_len;
} vcd_parse_t;

__attribute__((format(printf, 2, 3))) static int
parse_fail(const vcd_parse_t *p, const char *format, ...) {
  int n = snprintf(p->err, p->err_len, "%s:%zu: ", p->path, p->line);
  if (n >= 0 && (size_t)n < p->err_len) {
    va_list ap;
    va_start(ap, format);
    vsnprintf(p->err + n, p->err_len - (size_t)n, format, ap);
    va_end(ap);
  }
  return -1;
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }
static bool is_separator(char c) { return is_blank(c) || c == ','; }

static char *skip_separators(char *s) {
  while (is_separator(*s))
    s++;
  return s;
}

/* Cuts the token at `s` (ended by a separator) and returns what follows. */
static char *cut_token(char *s) {
  while (*s != 0 && !is_separator(*s))
    s++;
  if (*s != 0)
    *s++ = 0;
  return s;
}

static size_t count_tokens(const char *s) {
  size_t n = 0;
  while (*s != 0) {
    while (is_separator(*s))
      s++;
    if (*s == 0)
      break;
    n++;
    while (*s != 0 && !is_separator(*s))
      s++;
  }
  return n;
}

static int parse_ds_type(const vcd_parse_t *p, const char *s, int *type) {
  static const struct {
    const char *name;
    int type;
  } names[] = {{"GAUGE", DS_TYPE_GAUGE},
               {"COUNTER", DS_TYPE_COUNTER},
               {"DERIVE", DS_TYPE_DERIVE},
               {"ABSOLUTE", DS_TYPE_ABSOLUTE}};
  for (size_t i = 0; i < STATIC_ARRAY_SIZE(names); i++) {
    if (strcasecmp(s, names[i].name) == 0) {
      *type = names[i].type;
      return 0;
    }
  }
  return parse_fail(p,
                    "unknown data source type \"%.64s\" (expected GAUGE, "
                    "COUNTER, DERIVE or ABSOLUTE)",
                    s);
}

static int parse_limit(const vcd_parse_t *p, const char *s, const char *what,
                       double *ret) {
  if (strcasecmp(s, "U") == 0) {
    *ret = NAN;
    return 0;
  }
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (s[0] == 0 || end == NULL || *end != 0)
    return parse_fail(p, "%s \"%.64s\" is not a number or U", what, s);
  if (errno == ERANGE)
    return parse_fail(p, "%s \"%.64s\" is out of range", what, s);
  *ret = v;
  return 0;
}

/* Splits "NAME:TYPE:MIN:MAX" in place into its four fields. */
static int split_source(const vcd_parse_t *p, char *tok, char *fields[4]) {
  size_t colons = 0;
  for (const char *s = tok; *s != 0; s++)
    colons += *s == ':';
  if (colons != 3)
    return parse_fail(p, "data source \"%.64s\" is not NAME:TYPE:MIN:MAX",
                      tok);
  fields[0] = tok;
  for (size_t i = 1; i < 4; i++) {
    char *colon = strchr(fields[i - 1], ':');
    *colon = 0;
    fields[i] = colon + 1;
  }
  return 0;
}

static int parse_source(const vcd_parse_t *p, char *tok, data_source_t *dsrc) {
  char *f[4];
  if (split_source(p, tok, f) != 0)
    return -1;
  if (f[0][0] == 0)
    return parse_fail(p, "a data source has an empty name");
  if (strlen(f[0]) >= sizeof(dsrc->name))
    return parse_fail(p, "data source name \"%.64s...\" is longer than %d "
                         "characters",
                      f[0], DATA_MAX_NAME_LEN - 1);
  sstrncpy(dsrc->name, f[0], sizeof(dsrc->name));
  if (parse_ds_type(p, f[1], &dsrc->type) != 0 ||
      parse_limit(p, f[2], "minimum", &dsrc->min) != 0 ||
      parse_limit(p, f[3], "maximum", &dsrc->max) != 0)
    return -1;
  if (dsrc->min > dsrc->max)
    return parse_fail(p, "data source %s: minimum %g is greater than "
                         "maximum %g",
                      dsrc->name, dsrc->min, dsrc->max);
  return 0;
}

static int parse_sources(const vcd_parse_t *p, char *rest, vcd_type_t *node) {
  for (size_t i = 0; i < node->ds.ds_num; i++) {
    rest = skip_separators(rest);
    char *tok = rest;
    rest = cut_token(rest);
    if (parse_source(p, tok, &node->ds.ds[i]) != 0)
      return -1;
  }
  return 0;
}

/* Parses one line; *ret stays NULL for blank lines and comments. */
static int parse_line(const vcd_parse_t *p, char *line, vcd_type_t **ret) {
  while (is_blank(*line))
    line++;
  if (*line == 0 || *line == '#')
    return 0;
  char *name = line;
  while (*line != 0 && !is_blank(*line))
    line++;
  if (*line != 0)
    *line++ = 0;
  if (strlen(name) >= DATA_MAX_NAME_LEN)
    return parse_fail(p, "type name \"%.64s...\" is longer than %d characters",
                      name, DATA_MAX_NAME_LEN - 1);
  size_t n = count_tokens(line);
  if (n == 0)
    return parse_fail(p, "type %s has no data sources", name);
  if (n > VCD_SOURCES_MAX)
    return parse_fail(p, "type %s has more than %d data sources", name,
                      VCD_SOURCES_MAX);
  vcd_type_t *node = type_new(n);
  if (node == NULL)
    return parse_fail(p, "out of memory");
  sstrncpy(node->ds.type, name, sizeof(node->ds.type));
  if (parse_sources(p, line, node) != 0) {
    type_free(node);
    return -1;
  }
  *ret = node;
  return 0;
}

/* Adds a parsed type to the file's table; a later line for the same name
 * replaces an earlier one. */
static int collect(const vcd_parse_t *p, vcd_table_t *t, vcd_type_t *node) {
  type_free(table_remove(t, node->ds.type));
  if (t->count >= VCD_TYPES_MAX) {
    type_free(node);
    return parse_fail(p, "more than %d types", VCD_TYPES_MAX);
  }
  if (table_reserve(t, t->count + 1) != 0) {
    type_free(node);
    return parse_fail(p, "out of memory");
  }
  table_add(t, node);
  return 0;
}

/* Terminates the line at `s` (of `len` bytes before its newline). */
static int take_line(const vcd_parse_t *p, char *s, size_t len) {
  if (len > VCD_LINE_MAX)
    return parse_fail(p, "line is longer than %d bytes", VCD_LINE_MAX);
  if (memchr(s, 0, len) != NULL)
    return parse_fail(p, "line contains a NUL byte");
  if (len > 0 && s[len - 1] == '\r')
    len--;
  s[len] = 0;
  return 0;
}

/* Parses `buf` (`len` bytes plus one spare) into `t`. */
static int parse_buffer(vcd_parse_t *p, char *buf, size_t len,
                        vcd_table_t *t) {
  size_t pos = 0;
  while (pos < len) {
    p->line++;
    char *s = buf + pos;
    char *nl = memchr(s, '\n', len - pos);
    size_t n = nl != NULL ? (size_t)(nl - s) : len - pos;
    pos += n + 1;
    if (take_line(p, s, n) != 0)
      return -1;
    vcd_type_t *node = NULL;
    if (parse_line(p, s, &node) != 0)
      return -1;
    if (node != NULL && collect(p, t, node) != 0)
      return -1;
  }
  return 0;
}

/* ------------------------------------------------------------- reading */

static int read_all(int fd, char *buf, size_t size, size_t *got) {
  *got = 0;
  while (*got < size) {
    ssize_t n = read(fd, buf + *got, size - *got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno;
    if (n == 0)
      break;
    *got += (size_t)n;
  }
  return 0;
}

static int file_fail(const char *path, char *err, size_t err_len,
                     const char *what) {
  snprintf(err, err_len, "%s: %s", path, what);
  return -1;
}

/* Reads a regular file of at most VCD_FILE_MAX bytes; the buffer has one
 * spare byte after the content. */
static int read_fd(const char *path, int fd, char **ret, size_t *ret_len,
                   char *err, size_t err_len) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return file_fail(path, err, err_len, STRERRNO);
  if (!S_ISREG(st.st_mode))
    return file_fail(path, err, err_len, "not a regular file");
  if (st.st_size > VCD_FILE_MAX)
    return file_fail(path, err, err_len, "larger than 64 MiB");
  size_t size = (size_t)st.st_size;
  char *buf = malloc(size + 2);
  if (buf == NULL)
    return file_fail(path, err, err_len, "out of memory");
  size_t got = 0;
  int status = read_all(fd, buf, size + 1, &got);
  if (status != 0 || got > size) {
    free(buf);
    return file_fail(path, err, err_len,
                     status != 0 ? STRERROR(status)
                                 : "the file grew while being read");
  }
  *ret = buf;
  *ret_len = got;
  return 0;
}

static int read_file(const char *path, char **ret, size_t *ret_len, char *err,
                     size_t err_len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return file_fail(path, err, err_len, STRERRNO);
  int status = read_fd(path, fd, ret, ret_len, err, err_len);
  close(fd);
  return status;
}

static int load_types(const char *path, bool replace, char *err,
                      size_t err_len);

int vcd_types_load(const char *path, char *err, size_t err_len) {
  return load_types(path, true, err, err_len);
}

int vcd_types_load_new(const char *path, char *err, size_t err_len) {
  return load_types(path, false, err, err_len);
}

static int load_types(const char *path, bool replace, char *err,
                      size_t err_len) {
  char spare[1];
  if (err == NULL || err_len == 0) {
    err = spare;
    err_len = sizeof(spare);
  }
  err[0] = 0;
  if (path == NULL) {
    snprintf(err, err_len, "no types.db path given");
    return -1;
  }
  char *buf = NULL;
  size_t len = 0;
  if (read_file(path, &buf, &len, err, err_len) != 0)
    return -1;
  vcd_parse_t p = {.path = path, .err = err, .err_len = err_len};
  vcd_table_t parsed = {0};
  int status = parse_buffer(&p, buf, len, &parsed);
  free(buf);
  vcd_type_t *list = table_drain(&parsed);
  if (status != 0) {
    type_list_free(list);
    return -1;
  }
  char why[256] = "";
  if (install_list(list, replace, why, sizeof(why)) != 0) {
    snprintf(err, err_len, "%s: %s", path, why);
    return -1;
  }
  return 0;
}
