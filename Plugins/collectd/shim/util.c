/*
 * util.c: the utility half of collectd's daemon API, written for Vigil from
 * the declarations in collectd-dev's headers: common.h (strings, parsing,
 * files, rates), utils_time.h, utils_complain.h, utils_random.h,
 * utils_subst.h, and from plugin.h the notification meta list and the
 * severity parsers.
 *
 * Where collectd would crash on a bad argument (NULL, zero sizes) these
 * return its error value instead; where collectd exits on out-of-memory
 * these log and return NULL.
 */
#include "shim.h"

#include <dirent.h>
#include <endian.h>
#include <linux/capability.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* Plugins bind to these by name, whatever -fvisibility the build uses. */
#pragma GCC visibility push(default)

/* ===================================================== strings and memory */

char *sstrncpy(char *dest, const char *src, size_t n) {
  if (dest == NULL || n == 0)
    return dest;
  if (src == NULL)
    src = "";
  size_t len = strnlen(src, n - 1);
  memmove(dest, src, len);
  dest[len] = '\0';
  return dest;
}

int ssnprintf(char *str, size_t size, char const *format, ...) {
  if (format == NULL || (str == NULL && size != 0)) {
    errno = EINVAL;
    return -1;
  }
  va_list ap;
  va_start(ap, format);
  int status = vsnprintf(str, size, format, ap);
  va_end(ap);
  return status;
}

char *ssnprintf_alloc(char const *format, ...) {
  if (format == NULL)
    return NULL;

  va_list ap;
  va_start(ap, format);
  int len = vsnprintf(NULL, 0, format, ap);
  va_end(ap);
  if (len < 0)
    return NULL;

  /* len <= INT_MAX, so len + 1 cannot overflow size_t. */
  size_t size = (size_t)len + 1;
  char *buf = malloc(size);
  if (buf == NULL)
    return NULL;

  va_start(ap, format);
  int status = vsnprintf(buf, size, format, ap);
  va_end(ap);
  if (status < 0 || (size_t)status >= size) {
    free(buf);
    return NULL;
  }
  return buf;
}

char *sstrdup(const char *s) {
  if (s == NULL)
    return NULL;
  size_t size = strlen(s) + 1;
  char *r = malloc(size);
  if (r == NULL) {
    /* collectd exits here; a host process must not, so the caller gets NULL. */
    ERROR("sstrdup: out of memory");
    return NULL;
  }
  memcpy(r, s, size);
  return r;
}

size_t sstrnlen(const char *s, size_t n) {
  if (s == NULL)
    return 0;
  return strnlen(s, n);
}

char *sstrndup(const char *s, size_t n) {
  if (s == NULL)
    return NULL;
  size_t len = strnlen(s, n);
  char *r = malloc(len + 1);
  if (r == NULL) {
    ERROR("sstrndup: out of memory");
    return NULL;
  }
  memcpy(r, s, len);
  r[len] = '\0';
  return r;
}

/* strerror_r is the XSI int-returning function or the GNU char *-returning
 * one depending on feature macros; _Generic picks the matching adapter. */
__attribute__((unused)) static char *vcd_strerror_xsi(int rc, char *buf, size_t buflen, int errnum) {
  if (rc != 0 || buf[0] == '\0')
    snprintf(buf, buflen, "Unknown error %d", errnum);
  return buf;
}

__attribute__((unused)) static char *vcd_strerror_gnu(char *msg, char *buf, size_t buflen, int errnum) {
  if (msg == NULL || msg[0] == '\0')
    snprintf(buf, buflen, "Unknown error %d", errnum);
  else if (msg != buf)
    sstrncpy(buf, msg, buflen);
  return buf;
}

#define VCD_STRERROR_ADAPTER(r) _Generic((r), int: vcd_strerror_xsi, char *: vcd_strerror_gnu)

char *sstrerror(int errnum, char *buf, size_t buflen) {
  static __thread char fallback[ERRBUF_SIZE];
  if (buf == NULL || buflen == 0) {
    buf = fallback;
    buflen = sizeof(fallback);
  }
  buf[0] = '\0';
  return VCD_STRERROR_ADAPTER(strerror_r(errnum, buf, buflen))(strerror_r(errnum, buf, buflen), buf,
                                                                buflen, errnum);
}

void *smalloc(size_t size) {
  void *r = malloc(size);
  if (r == NULL)
    ERROR("smalloc: out of memory (%zu bytes)", size);
  return r;
}

/* Waits until `fd` is ready for `events` instead of spinning on EAGAIN. */
static void vcd_wait_fd(int fd, short events) {
  struct pollfd pfd = {.fd = fd, .events = events};
  (void)poll(&pfd, 1, 1000);
}

int sread(int fd, void *buf, size_t count) {
  if (fd < 0 || (buf == NULL && count != 0)) {
    errno = EINVAL;
    return -1;
  }
  char *ptr = buf;
  while (count > 0) {
    ssize_t status = read(fd, ptr, count);
    if (status < 0 && errno == EINTR)
      continue;
    if (status < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      vcd_wait_fd(fd, POLLIN);
      continue;
    }
    if (status < 0)
      return -1;
    if (status == 0) {
      /* End of file before `count` bytes is a failure, as in collectd. */
      errno = ECONNRESET;
      return -1;
    }
    ptr += status;
    count -= (size_t)status;
  }
  return 0;
}

/* True when `fd` is a socket whose peer has closed the connection. */
static bool vcd_peer_closed(int fd) {
  struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLHUP};
  if (poll(&pfd, 1, 0) <= 0)
    return false;
  char probe[32];
  return recv(fd, probe, sizeof(probe), MSG_PEEK | MSG_DONTWAIT) == 0;
}

int swrite(int fd, const void *buf, size_t count) {
  if (fd < 0 || (buf == NULL && count != 0)) {
    errno = EINVAL;
    return errno;
  }
  /* collectd checks for a closed peer first so a dead socket fails fast. */
  if (vcd_peer_closed(fd)) {
    errno = ECONNRESET;
    return -1;
  }
  const char *ptr = buf;
  while (count > 0) {
    ssize_t status = write(fd, ptr, count);
    if (status < 0 && errno == EINTR)
      continue;
    if (status < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      vcd_wait_fd(fd, POLLOUT);
      continue;
    }
    if (status < 0)
      return errno != 0 ? errno : -1;
    ptr += status;
    count -= (size_t)status;
  }
  return 0;
}

int strsplit(char *string, char **fields, size_t size) {
  if (string == NULL || fields == NULL || size == 0)
    return 0;
  size_t i = 0;
  char *saveptr = NULL;
  char *ptr = string;
  while (i < size) {
    char *field = strtok_r(ptr, " \t\r\n", &saveptr);
    ptr = NULL;
    fields[i] = field;
    if (field == NULL)
      break;
    i++;
  }
  return (int)i;
}

int strjoin(char *dst, size_t dst_len, char **fields, size_t fields_num, const char *sep) {
  if ((fields_num != 0 && fields == NULL) || (dst_len != 0 && dst == NULL))
    return -EINVAL;

  size_t sep_len = (sep != NULL) ? strlen(sep) : 0;
  size_t avail = (dst_len != 0) ? dst_len - 1 : 0;
  size_t required = 0;
  char *ptr = dst;
  if (dst_len != 0)
    dst[0] = '\0';

  for (size_t i = 0; i < fields_num; i++) {
    if (fields[i] == NULL)
      return -EINVAL;
    size_t field_len = strlen(fields[i]);
    size_t add = field_len + (i != 0 ? sep_len : 0);
    if (add > (size_t)INT_MAX - required)
      return -EOVERFLOW;
    required += add;
    if (dst_len == 0)
      continue;

    if (i != 0 && sep_len > 0) {
      /* A separator is written whole or not at all, as collectd does. */
      if (sep_len >= avail) {
        avail = 0;
        continue;
      }
      memcpy(ptr, sep, sep_len);
      ptr += sep_len;
      avail -= sep_len;
    }
    if (field_len > avail)
      field_len = avail;
    memcpy(ptr, fields[i], field_len);
    ptr += field_len;
    avail -= field_len;
    *ptr = '\0';
  }
  return (int)required;
}

int escape_string(char *buffer, size_t buffer_size) {
  if (buffer == NULL || buffer_size == 0)
    return EINVAL;
  size_t len = strnlen(buffer, buffer_size);
  if (len == buffer_size)
    return EINVAL;
  if (strpbrk(buffer, " \t\"\\") == NULL)
    return 0;
  if (buffer_size < 3)
    return EINVAL;

  char *temp = calloc(1, buffer_size);
  if (temp == NULL)
    return ENOMEM;
  size_t j = 0;
  temp[j++] = '"';
  for (size_t i = 0; i < len; i++) {
    bool quote = (buffer[i] == '"' || buffer[i] == '\\');
    /* Room must stay for the closing quote and the terminating NUL. */
    if (j + (quote ? 2 : 1) > buffer_size - 2)
      break;
    if (quote)
      temp[j++] = '\\';
    temp[j++] = buffer[i];
  }
  temp[j++] = '"';
  temp[j] = '\0';
  memcpy(buffer, temp, j + 1);
  free(temp);
  return 0;
}

int strunescape(char *buf, size_t buf_len) {
  if (buf == NULL)
    return -1;
  for (size_t i = 0; i < buf_len && buf[i] != '\0'; i++) {
    if (buf[i] != '\\')
      continue;
    if (i + 1 >= buf_len || buf[i + 1] == '\0') {
      ERROR("string unescape: backslash found at end of string.");
      buf[i] = '\0';
      return -1;
    }
    switch (buf[i + 1]) {
    case 't':
      buf[i] = '\t';
      break;
    case 'n':
      buf[i] = '\n';
      break;
    case 'r':
      buf[i] = '\r';
      break;
    default:
      buf[i] = buf[i + 1];
      break;
    }
    memmove(buf + i + 1, buf + i + 2, buf_len - i - 2);
    buf[buf_len - 1] = '\0';
  }
  return 0;
}

size_t strstripnewline(char *buffer) {
  /* The header promises nonnull; the barrier keeps the check anyway. */
  char *checked = buffer;
  __asm__("" : "+r"(checked));
  if (checked == NULL)
    return 0;
  size_t len = strlen(buffer);
  while (len > 0 && (buffer[len - 1] == '\n' || buffer[len - 1] == '\r'))
    buffer[--len] = '\0';
  return len;
}

int escape_slashes(char *buffer, size_t buffer_size) {
  if (buffer == NULL || buffer_size == 0)
    return -1;
  size_t len = strnlen(buffer, buffer_size);
  if (len == buffer_size)
    return -1;
  if (len <= 1) {
    if (strcmp(buffer, "/") == 0) {
      /* A lone slash becomes "root", as in collectd. */
      if (buffer_size < 5)
        return -1;
      sstrncpy(buffer, "root", buffer_size);
    }
    return 0;
  }
  if (buffer[0] == '/') {
    memmove(buffer, buffer + 1, len);
    len--;
  }
  for (size_t i = 0; i < len; i++)
    if (buffer[i] == '/')
      buffer[i] = '_';
  return 0;
}

void replace_special(char *buffer, size_t buffer_size) {
  if (buffer == NULL)
    return;
  for (size_t i = 0; i < buffer_size && buffer[i] != '\0'; i++) {
    unsigned char c = (unsigned char)buffer[i];
    if (!isalnum(c) && c != '-')
      buffer[i] = '_';
  }
}

/* ================================================================ time */

int timeval_cmp(struct timeval tv0, struct timeval tv1, struct timeval *delta) {
  NORMALIZE_TIMEVAL(tv0);
  NORMALIZE_TIMEVAL(tv1);

  int status = 0;
  if (tv0.tv_sec != tv1.tv_sec)
    status = (tv0.tv_sec < tv1.tv_sec) ? -1 : 1;
  else if (tv0.tv_usec != tv1.tv_usec)
    status = (tv0.tv_usec < tv1.tv_usec) ? -1 : 1;

  if (delta == NULL)
    return status;
  const struct timeval *larger = (status < 0) ? &tv1 : &tv0;
  const struct timeval *smaller = (status < 0) ? &tv0 : &tv1;
  delta->tv_sec = larger->tv_sec - smaller->tv_sec;
  delta->tv_usec = larger->tv_usec - smaller->tv_usec;
  if (delta->tv_usec < 0) {
    delta->tv_sec--;
    delta->tv_usec += 1000000;
  }
  return status;
}

cdtime_t cdtime(void) {
  struct timespec ts = {0, 0};
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
    ERROR("cdtime: clock_gettime failed: %s", STRERRNO);
    return 0;
  }
  return TIMESPEC_TO_CDTIME_T(&ts);
}

/* Formats `t` as RFC 3339 into `buffer`: UTC with "Z", or local time with
 * a "+hh:mm" offset; with nanoseconds when `nano`. */
static int vcd_rfc3339(char *buffer, size_t buffer_size, cdtime_t t, bool local, bool nano) {
  if (buffer == NULL)
    return EINVAL;
  if (buffer_size < (nano ? RFC3339NANO_SIZE : RFC3339_SIZE))
    return ENOMEM;

  struct timespec ts = CDTIME_T_TO_TIMESPEC(t);
  NORMALIZE_TIMESPEC(ts);
  struct tm tm;
  if ((local ? localtime_r(&ts.tv_sec, &tm) : gmtime_r(&ts.tv_sec, &tm)) == NULL)
    return errno != 0 ? errno : EINVAL;

  char base[64];
  if (strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm) == 0)
    return ENOMEM;
  char frac[16] = "";
  if (nano)
    snprintf(frac, sizeof(frac), ".%09ld", (long)ts.tv_nsec);
  char zone[16] = "Z";
  if (local) {
    char z[16];
    size_t n = strftime(z, sizeof(z), "%z", &tm);
    if (n == 5)
      snprintf(zone, sizeof(zone), "%.3s:%.2s", z, z + 3);
    else
      sstrncpy(zone, n > 0 ? z : "+00:00", sizeof(zone));
  }
  int status = snprintf(buffer, buffer_size, "%s%s%s", base, frac, zone);
  if (status < 0 || (size_t)status >= buffer_size)
    return ENOMEM;
  return 0;
}

int rfc3339(char *buffer, size_t buffer_size, cdtime_t t) {
  return vcd_rfc3339(buffer, buffer_size, t, false, false);
}

int rfc3339nano(char *buffer, size_t buffer_size, cdtime_t t) {
  return vcd_rfc3339(buffer, buffer_size, t, false, true);
}

int rfc3339_local(char *buffer, size_t buffer_size, cdtime_t t) {
  return vcd_rfc3339(buffer, buffer_size, t, true, false);
}

int rfc3339nano_local(char *buffer, size_t buffer_size, cdtime_t t) {
  return vcd_rfc3339(buffer, buffer_size, t, true, true);
}

/* ========================================================== directories */

/* Makes sure `dir` exists as a directory, creating it if missing. */
static int vcd_ensure_dir(const char *dir) {
  for (;;) {
    struct stat st;
    if (stat(dir, &st) == 0 || lstat(dir, &st) == 0) {
      if (S_ISDIR(st.st_mode))
        return 0;
      ERROR("check_create_dir: `%s' exists but is not a directory!", dir);
      return -1;
    }
    if (errno != ENOENT) {
      ERROR("check_create_dir: stat (%s): %s", dir, STRERRNO);
      return -1;
    }
    if (mkdir(dir, S_IRWXU | S_IRWXG | S_IRWXO) == 0)
      return 0;
    /* Another thread may have created it meanwhile: look again. */
    if (errno != EEXIST) {
      ERROR("check_create_dir: mkdir (%s): %s", dir, STRERRNO);
      return -1;
    }
  }
}

int check_create_dir(const char *file_orig) {
  if (file_orig == NULL)
    return -1;
  size_t len = strlen(file_orig);
  if (len == 0)
    return -1;
  if (len >= PATH_MAX) {
    ERROR("check_create_dir: name (%s) is too long.", file_orig);
    return -1;
  }

  char copy[PATH_MAX];
  char dir[PATH_MAX];
  memcpy(copy, file_orig, len + 1);
  /* Without a trailing slash the last component names a file. */
  bool last_is_file = (file_orig[len - 1] != '/');
  size_t dir_len = 0;
  dir[0] = '\0';
  if (file_orig[0] == '/')
    dir[dir_len++] = '/';

  char *saveptr = NULL;
  char *comp = strtok_r(copy, "/", &saveptr);
  while (comp != NULL) {
    char *next = strtok_r(NULL, "/", &saveptr);
    if (next == NULL && last_is_file)
      break;
    /* Refuses dot directories (no "../" escapes), as collectd does. */
    if (comp[0] == '.') {
      ERROR("Cowardly refusing to create a directory that begins with a `.' (dot): `%s'", file_orig);
      return -2;
    }
    size_t comp_len = strlen(comp);
    if (dir_len > 0 && dir[dir_len - 1] != '/')
      dir[dir_len++] = '/';
    memcpy(dir + dir_len, comp, comp_len);
    dir_len += comp_len;
    dir[dir_len] = '\0';
    if (vcd_ensure_dir(dir) != 0)
      return -1;
    comp = next;
  }
  return 0;
}

int walk_directory(const char *dir, dirwalk_callback_f callback, void *user_data, int hidden) {
  if (dir == NULL || callback == NULL)
    return -1;
  DIR *dh = opendir(dir);
  if (dh == NULL) {
    ERROR("walk_directory: Cannot open '%s': %s", dir, STRERRNO);
    return -1;
  }
  int success = 0;
  int failure = 0;
  struct dirent *ent;
  while ((ent = readdir(dh)) != NULL) {
    const char *name = ent->d_name;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
      continue;
    if (!hidden && name[0] == '.')
      continue;
    if (callback(dir, name, user_data) != 0)
      failure++;
    else
      success++;
  }
  closedir(dh);
  /* Fails only when every callback failed, as in collectd. */
  return (success == 0 && failure > 0) ? -1 : 0;
}

ssize_t read_file_contents(char const *filename, void *buf, size_t bufsize) {
  if (filename == NULL || (buf == NULL && bufsize != 0))
    return -1;
  FILE *fh = fopen(filename, "r");
  if (fh == NULL)
    return -1;
  if (bufsize > (size_t)SSIZE_MAX)
    bufsize = (size_t)SSIZE_MAX;
  ssize_t ret = (ssize_t)fread(buf, 1, bufsize, fh);
  if (ret == 0 && ferror(fh) != 0) {
    ERROR("read_file_contents: Reading file \"%s\" failed.", filename);
    ret = -1;
  }
  fclose(fh);
  return ret;
}

ssize_t read_text_file_contents(char const *filename, char *buf, size_t bufsize) {
  if (buf == NULL || bufsize == 0)
    return -1;
  ssize_t ret = read_file_contents(filename, buf, bufsize - 1);
  if (ret < 0)
    return ret;
  buf[ret] = '\0';
  return ret + 1;
}

/* ========================================================== byte order */

unsigned long long ntohll(unsigned long long n) {
  return (unsigned long long)be64toh((uint64_t)n);
}

unsigned long long htonll(unsigned long long n) {
  return (unsigned long long)htobe64((uint64_t)n);
}

/* ================================================ identifiers and values */

/* Appends `str` to the buffer at `*pos`, leaving room for the NUL. */
static int vcd_append(char **pos, size_t *left, const char *str) {
  size_t len = strlen(str);
  if (len >= *left)
    return ENOBUFS;
  memcpy(*pos, str, len);
  *pos += len;
  *left -= len;
  return 0;
}

int format_name(char *ret, int ret_len, const char *hostname, const char *plugin,
                const char *plugin_instance, const char *type, const char *type_instance) {
  if (ret == NULL || ret_len <= 0 || hostname == NULL || plugin == NULL || type == NULL)
    return EINVAL;
  char *pos = ret;
  size_t left = (size_t)ret_len;
  bool has_pi = (plugin_instance != NULL && plugin_instance[0] != '\0');
  bool has_ti = (type_instance != NULL && type_instance[0] != '\0');

  int status = vcd_append(&pos, &left, hostname);
  if (status == 0)
    status = vcd_append(&pos, &left, "/");
  if (status == 0)
    status = vcd_append(&pos, &left, plugin);
  if (status == 0 && has_pi)
    status = vcd_append(&pos, &left, "-");
  if (status == 0 && has_pi)
    status = vcd_append(&pos, &left, plugin_instance);
  if (status == 0)
    status = vcd_append(&pos, &left, "/");
  if (status == 0)
    status = vcd_append(&pos, &left, type);
  if (status == 0 && has_ti)
    status = vcd_append(&pos, &left, "-");
  if (status == 0 && has_ti)
    status = vcd_append(&pos, &left, type_instance);
  *pos = '\0';
  return status;
}

/* Appends printf output at `*offset`; false when it does not fit. */
__attribute__((format(printf, 4, 5))) static bool vcd_buffer_add(char *buf, size_t len,
                                                                 size_t *offset, const char *fmt,
                                                                 ...) {
  va_list ap;
  va_start(ap, fmt);
  int status = vsnprintf(buf + *offset, len - *offset, fmt, ap);
  va_end(ap);
  if (status < 1 || (size_t)status >= len - *offset)
    return false;
  *offset += (size_t)status;
  return true;
}

/* One value of `vl` as text; rates from the cache when `rates` is given. */
static bool vcd_format_one(char *ret, size_t ret_len, size_t *offset, int type, value_t v,
                           const gauge_t *rate) {
  if (type == DS_TYPE_GAUGE)
    return vcd_buffer_add(ret, ret_len, offset, ":" GAUGE_FORMAT, v.gauge);
  if (rate != NULL)
    return vcd_buffer_add(ret, ret_len, offset, ":" GAUGE_FORMAT, *rate);
  switch (type) {
  case DS_TYPE_COUNTER:
    return vcd_buffer_add(ret, ret_len, offset, ":%" PRIu64, (uint64_t)v.counter);
  case DS_TYPE_DERIVE:
    return vcd_buffer_add(ret, ret_len, offset, ":%" PRIi64, v.derive);
  case DS_TYPE_ABSOLUTE:
    return vcd_buffer_add(ret, ret_len, offset, ":%" PRIu64, v.absolute);
  default:
    ERROR("format_values: Unknown data source type: %i", type);
    return false;
  }
}

int format_values(char *ret, size_t ret_len, const data_set_t *ds, const value_list_t *vl,
                  bool store_rates) {
  if (ret == NULL || ret_len == 0 || ds == NULL || vl == NULL)
    return -1;
  if (strcmp(ds->type, vl->type) != 0 || vl->values_len < ds->ds_num ||
      (ds->ds_num > 0 && (ds->ds == NULL || vl->values == NULL)))
    return -1;

  memset(ret, 0, ret_len);
  size_t offset = 0;
  gauge_t *rates = NULL;
  if (!vcd_buffer_add(ret, ret_len, &offset, "%.3f", CDTIME_T_TO_DOUBLE(vl->time)))
    return -1;

  int status = 0;
  for (size_t i = 0; i < ds->ds_num && status == 0; i++) {
    int type = ds->ds[i].type;
    if (store_rates && type != DS_TYPE_GAUGE && rates == NULL) {
      rates = uc_get_rate(ds, vl);
      if (rates == NULL) {
        WARNING("format_values: uc_get_rate failed.");
        status = -1;
        break;
      }
    }
    const gauge_t *rate = (store_rates && type != DS_TYPE_GAUGE) ? &rates[i] : NULL;
    if (!vcd_format_one(ret, ret_len, &offset, type, vl->values[i], rate))
      status = -1;
  }
  free(rates);
  return status;
}

int parse_identifier(char *str, char **ret_host, char **ret_plugin, char **ret_plugin_instance,
                     char **ret_type, char **ret_type_instance, char *default_host) {
  if (str == NULL || ret_host == NULL || ret_plugin == NULL || ret_plugin_instance == NULL ||
      ret_type == NULL || ret_type_instance == NULL)
    return -1;

  char *host = str;
  char *plugin = strchr(host, '/');
  if (plugin == NULL)
    return -1;
  *plugin++ = '\0';

  char *type = strchr(plugin, '/');
  if (type == NULL) {
    /* "plugin/type" is accepted only when a default host is given. */
    if (default_host == NULL)
      return -1;
    type = plugin;
    plugin = host;
    host = default_host;
  } else {
    *type++ = '\0';
  }

  char *plugin_instance = strchr(plugin, '-');
  if (plugin_instance != NULL)
    *plugin_instance++ = '\0';
  char *type_instance = strchr(type, '-');
  if (type_instance != NULL)
    *type_instance++ = '\0';

  *ret_host = host;
  *ret_plugin = plugin;
  *ret_plugin_instance = plugin_instance;
  *ret_type = type;
  *ret_type_instance = type_instance;
  return 0;
}

int parse_identifier_vl(const char *str, value_list_t *vl) {
  if (str == NULL || vl == NULL)
    return EINVAL;
  char copy[6 * DATA_MAX_NAME_LEN];
  sstrncpy(copy, str, sizeof(copy));

  char *host, *plugin, *plugin_instance, *type, *type_instance;
  int status =
      parse_identifier(copy, &host, &plugin, &plugin_instance, &type, &type_instance, NULL);
  if (status != 0)
    return status;

  sstrncpy(vl->host, host, sizeof(vl->host));
  sstrncpy(vl->plugin, plugin, sizeof(vl->plugin));
  sstrncpy(vl->plugin_instance, plugin_instance ? plugin_instance : "",
           sizeof(vl->plugin_instance));
  sstrncpy(vl->type, type, sizeof(vl->type));
  sstrncpy(vl->type_instance, type_instance ? type_instance : "", sizeof(vl->type_instance));
  return 0;
}

int parse_value(const char *value_orig, value_t *ret_value, int ds_type) {
  if (value_orig == NULL || ret_value == NULL)
    return EINVAL;
  if (ds_type < DS_TYPE_COUNTER || ds_type > DS_TYPE_ABSOLUTE) {
    ERROR("parse_value: Invalid data source type: %i.", ds_type);
    return -1;
  }

  char *value = strdup(value_orig);
  if (value == NULL)
    return ENOMEM;
  size_t len = strlen(value);
  while (len > 0 && isspace((unsigned char)value[len - 1]))
    value[--len] = '\0';

  char *endptr = NULL;
  value_t v;
  switch (ds_type) {
  case DS_TYPE_COUNTER:
    v.counter = (counter_t)strtoull(value, &endptr, 0);
    break;
  case DS_TYPE_GAUGE:
    v.gauge = (gauge_t)strtod(value, &endptr);
    break;
  case DS_TYPE_DERIVE:
    v.derive = (derive_t)strtoll(value, &endptr, 0);
    break;
  default:
    v.absolute = (absolute_t)strtoull(value, &endptr, 0);
    break;
  }

  int status = 0;
  if (endptr == value) {
    ERROR("parse_value: Failed to parse string as %s: \"%s\".", DS_TYPE_TO_STRING(ds_type), value);
    status = -1;
  } else {
    /* Trailing garbage is ignored with a note, as in collectd. */
    if (endptr != NULL && *endptr != '\0')
      INFO("parse_value: Ignoring trailing garbage \"%s\" after %s value. Input string was \"%s\".",
           endptr, DS_TYPE_TO_STRING(ds_type), value_orig);
    *ret_value = v;
  }
  free(value);
  return status;
}

/* Parses the leading time field of a PUTVAL-style value string. */
static int vcd_parse_time(const char *s, cdtime_t *t) {
  if (strcmp(s, "N") == 0) {
    *t = cdtime();
    return 0;
  }
  errno = 0;
  char *endptr = NULL;
  double d = strtod(s, &endptr);
  if (errno != 0 || endptr == s || endptr == NULL || *endptr != '\0' || !(d >= 0.0) ||
      d >= 17179869184.0)
    return -1;
  *t = DOUBLE_TO_CDTIME_T(d);
  return 0;
}

int parse_values(char *buffer, value_list_t *vl, const data_set_t *ds) {
  if (buffer == NULL || vl == NULL || ds == NULL)
    return EINVAL;
  if (vl->values == NULL && vl->values_len != 0)
    return EINVAL;

  size_t i = 0;
  bool have_time = false;
  char *saveptr = NULL;
  char *ptr;
  char *dummy = buffer;
  vl->time = 0;
  while ((ptr = strtok_r(dummy, ":", &saveptr)) != NULL) {
    dummy = NULL;
    if (i >= vl->values_len || i >= ds->ds_num || ds->ds == NULL) {
      i = 0;
      break;
    }
    if (!have_time) {
      if (vcd_parse_time(ptr, &vl->time) != 0)
        return -1;
      have_time = true;
      continue;
    }
    if (strcmp(ptr, "U") == 0 && ds->ds[i].type == DS_TYPE_GAUGE)
      vl->values[i].gauge = NAN;
    else if (parse_value(ptr, &vl->values[i], ds->ds[i].type) != 0)
      return -1;
    i++;
  }
  /* More fields than values, or no value at all, is an error. */
  if (ptr != NULL || i == 0)
    return -1;
  return 0;
}

int parse_value_file(char const *path, value_t *ret_value, int ds_type) {
  if (path == NULL || ret_value == NULL)
    return -1;
  FILE *fh = fopen(path, "r");
  if (fh == NULL)
    return -1;
  char buffer[256];
  char *line = fgets(buffer, sizeof(buffer), fh);
  fclose(fh);
  if (line == NULL)
    return -1;
  strstripnewline(buffer);
  return parse_value(buffer, ret_value, ds_type);
}

int strtoderive(const char *string, derive_t *ret_value) {
  if (string == NULL || ret_value == NULL)
    return EINVAL;
  errno = 0;
  char *endptr = NULL;
  derive_t tmp = (derive_t)strtoll(string, &endptr, 0);
  if (endptr == string || errno != 0)
    return -1;
  *ret_value = tmp;
  return 0;
}

int strtogauge(const char *string, gauge_t *ret_value) {
  if (string == NULL || ret_value == NULL)
    return EINVAL;
  errno = 0;
  char *endptr = NULL;
  gauge_t tmp = (gauge_t)strtod(string, &endptr);
  if (errno != 0)
    return errno;
  if (endptr == NULL || endptr == string || *endptr != '\0')
    return EINVAL;
  *ret_value = tmp;
  return 0;
}

/* ============================================================== rates */

counter_t counter_diff(counter_t old_value, counter_t new_value) {
  if (old_value <= new_value)
    return new_value - old_value;
  /* A counter that was below 2^32 is taken to have wrapped at 32 bits. */
  if (old_value <= 4294967295ULL)
    return (4294967295ULL - old_value) + new_value + 1;
  return (18446744073709551615ULL - old_value) + new_value + 1;
}

/* Whether `d` converts to the integer type of `ds_type` without overflow. */
static bool vcd_fits(gauge_t d, int ds_type) {
  if (isnan(d))
    return false;
  if (ds_type == DS_TYPE_DERIVE)
    return d >= -9223372036854775808.0 && d < 9223372036854775808.0;
  return d > -1.0 && d < 18446744073709551616.0;
}

/* Starts a rate_to_value state from the first rate seen. */
static void vcd_rate_state_start(rate_to_value_state_t *state, gauge_t rate, int ds_type) {
  if (ds_type == DS_TYPE_DERIVE) {
    state->last_value.derive = (derive_t)rate;
    state->residual = rate - (gauge_t)state->last_value.derive;
  } else if (ds_type == DS_TYPE_COUNTER) {
    state->last_value.counter = (counter_t)rate;
    state->residual = rate - (gauge_t)state->last_value.counter;
  } else {
    state->last_value.absolute = (absolute_t)rate;
    state->residual = rate - (gauge_t)state->last_value.absolute;
  }
}

int rate_to_value(value_t *ret_value, gauge_t rate, rate_to_value_state_t *state, int ds_type,
                  cdtime_t t) {
  if (ret_value == NULL || state == NULL)
    return EINVAL;
  if (ds_type < DS_TYPE_COUNTER || ds_type > DS_TYPE_ABSOLUTE)
    return EINVAL;
  if (ds_type == DS_TYPE_GAUGE) {
    state->last_value.gauge = rate;
    state->last_time = t;
    *ret_value = state->last_value;
    return 0;
  }
  /* Negative rates and time not moving forward reset the state. */
  if ((rate < 0.0 && ds_type != DS_TYPE_DERIVE) || !vcd_fits(rate, ds_type) ||
      t <= state->last_time) {
    memset(state, 0, sizeof(*state));
    return EINVAL;
  }

  gauge_t delta = rate * CDTIME_T_TO_DOUBLE(t - state->last_time) + state->residual;
  if (state->last_time != 0 && !vcd_fits(delta, ds_type)) {
    memset(state, 0, sizeof(*state));
    return EINVAL;
  }
  if (state->last_time == 0) {
    vcd_rate_state_start(state, rate, ds_type);
    state->last_time = t;
    return EAGAIN;
  }

  if (ds_type == DS_TYPE_DERIVE) {
    derive_t d = (derive_t)delta;
    state->last_value.derive = (derive_t)((uint64_t)state->last_value.derive + (uint64_t)d);
    state->residual = delta - (gauge_t)d;
  } else if (ds_type == DS_TYPE_COUNTER) {
    counter_t d = (counter_t)delta;
    state->last_value.counter += d;
    state->residual = delta - (gauge_t)d;
  } else {
    /* Absolute values are the increment of this period alone. */
    absolute_t d = (absolute_t)delta;
    state->last_value.absolute = d;
    state->residual = delta - (gauge_t)d;
  }
  state->last_time = t;
  *ret_value = state->last_value;
  return 0;
}

int value_to_rate(gauge_t *ret_rate, value_t value, int ds_type, cdtime_t t,
                  value_to_rate_state_t *state) {
  if (ret_rate == NULL || state == NULL)
    return EINVAL;
  if (ds_type < DS_TYPE_COUNTER || ds_type > DS_TYPE_ABSOLUTE)
    return EINVAL;
  if (t <= state->last_time) {
    memset(state, 0, sizeof(*state));
    return EINVAL;
  }
  /* The first value only primes the state, as in collectd. */
  if (state->last_time == 0) {
    state->last_value = value;
    state->last_time = t;
    return EAGAIN;
  }

  gauge_t interval = CDTIME_T_TO_DOUBLE(t - state->last_time);
  switch (ds_type) {
  case DS_TYPE_DERIVE: {
    derive_t diff = (derive_t)((uint64_t)value.derive - (uint64_t)state->last_value.derive);
    *ret_rate = (gauge_t)diff / interval;
    break;
  }
  case DS_TYPE_GAUGE:
    *ret_rate = value.gauge;
    break;
  case DS_TYPE_COUNTER:
    *ret_rate = (gauge_t)counter_diff(state->last_value.counter, value.counter) / interval;
    break;
  default:
    *ret_rate = (gauge_t)value.absolute / interval;
    break;
  }
  state->last_value = value;
  state->last_time = t;
  return 0;
}

/* ============================================================== network */

int service_name_to_port_number(const char *service_name) {
  if (service_name == NULL)
    return -1;
  struct addrinfo hints = {.ai_family = AF_UNSPEC};
  struct addrinfo *list = NULL;
  int status = getaddrinfo(NULL, service_name, &hints, &list);
  if (status != 0) {
    ERROR("service_name_to_port_number: getaddrinfo failed: %s", gai_strerror(status));
    return -1;
  }
  int port = -1;
  for (struct addrinfo *ai = list; ai != NULL && port <= 0; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET)
      port = ntohs(((struct sockaddr_in *)(void *)ai->ai_addr)->sin_port);
    else if (ai->ai_family == AF_INET6)
      port = ntohs(((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_port);
  }
  freeaddrinfo(list);
  return port > 0 ? port : -1;
}

void set_sock_opts(int sockfd) {
  int socktype = 0;
  socklen_t len = sizeof(socktype);
  if (getsockopt(sockfd, SOL_SOCKET, SO_TYPE, &socktype, &len) != 0) {
    WARNING("set_sock_opts: failed to determine socket type");
    return;
  }
  if (socktype != SOCK_STREAM)
    return;
  int domain = AF_UNSPEC;
  len = sizeof(domain);
  (void)getsockopt(sockfd, SOL_SOCKET, SO_DOMAIN, &domain, &len);

  int on = 1;
  if (setsockopt(sockfd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0)
    WARNING("set_sock_opts: failed to set socket keepalive flag");

  /* TCP keep-alive timing applies to IP sockets only (collectd tries it on
   * every stream socket and warns). */
  if (domain != AF_INET && domain != AF_INET6)
    return;
  /* Idle time and probe interval follow collectd: derived from the interval
   * (idle in units of 100 ms of it, probes in seconds). */
  uint64_t ms = CDTIME_T_TO_MS(plugin_get_interval());
  if (ms == 0)
    ms = 10000;
  /* The kernel refuses values above 32767 seconds. */
  uint64_t idle_s = (ms - 1) / 100 + 1;
  uint64_t intvl_s = (ms - 1) / 1000 + 1;
  int idle = (int)(idle_s < 32767 ? idle_s : 32767);
  int intvl = (int)(intvl_s < 32767 ? intvl_s : 32767);
  if (setsockopt(sockfd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0)
    WARNING("set_sock_opts: failed to set socket tcp keepalive time");
  if (setsockopt(sockfd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) != 0)
    WARNING("set_sock_opts: failed to set socket tcp keepalive interval");
}

/* ====================================================== string arrays */

int strarray_add(char ***ret_array, size_t *ret_array_len, char const *str) {
  if (ret_array == NULL || ret_array_len == NULL || str == NULL)
    return EINVAL;
  size_t len = *ret_array_len;
  if (len >= SIZE_MAX / sizeof(char *) - 1)
    return ENOMEM;
  char **array = realloc(*ret_array, (len + 1) * sizeof(*array));
  if (array == NULL)
    return ENOMEM;
  *ret_array = array;
  array[len] = strdup(str);
  if (array[len] == NULL)
    return ENOMEM;
  *ret_array_len = len + 1;
  return 0;
}

void strarray_free(char **array, size_t array_len) {
  if (array == NULL)
    return;
  for (size_t i = 0; i < array_len; i++)
    free(array[i]);
  free(array);
}

/* ========================================================= capabilities */

int check_capability(int arg) {
  if (arg < 0 || arg >= 32 * _LINUX_CAPABILITY_U32S_3)
    return -1;
  struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
  memset(data, 0, sizeof(data));
  if (syscall(SYS_capget, &header, data) != 0) {
    ERROR("check_capability: capget failed: %s", STRERRNO);
    return -1;
  }
  uint32_t bit = UINT32_C(1) << (arg % 32);
  return (data[arg / 32].effective & bit) ? 0 : -1;
}

/* ======================================================== notifications */

int notification_init(notification_t *n, int severity, const char *message, const char *host,
                      const char *plugin, const char *plugin_instance, const char *type,
                      const char *type_instance) {
  if (n == NULL)
    return -1;
  memset(n, 0, sizeof(*n));
  n->severity = severity;
  if (message != NULL)
    sstrncpy(n->message, message, sizeof(n->message));
  if (host != NULL)
    sstrncpy(n->host, host, sizeof(n->host));
  if (plugin != NULL)
    sstrncpy(n->plugin, plugin, sizeof(n->plugin));
  if (plugin_instance != NULL)
    sstrncpy(n->plugin_instance, plugin_instance, sizeof(n->plugin_instance));
  if (type != NULL)
    sstrncpy(n->type, type, sizeof(n->type));
  if (type_instance != NULL)
    sstrncpy(n->type_instance, type_instance, sizeof(n->type_instance));
  return 0;
}

/* Allocates a meta entry named `name` of `type` (value set by the caller). */
static notification_meta_t *vcd_meta_new(const char *name, enum notification_meta_type_e type) {
  notification_meta_t *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    ERROR("plugin_notification_meta_add: calloc failed.");
    return NULL;
  }
  sstrncpy(m->name, name, sizeof(m->name));
  m->type = type;
  return m;
}

/* Appends `m` to the end of n's meta list. */
static int vcd_meta_append(notification_t *n, notification_meta_t *m) {
  if (m == NULL)
    return -1;
  notification_meta_t **link = &n->meta;
  while (*link != NULL)
    link = &(*link)->next;
  *link = m;
  return 0;
}

/* Appends to n's list an entry named `name` with the type and value of
 * `value` (a string copied). */
static int vcd_meta_add(notification_t *n, const char *name, const notification_meta_t *value) {
  if (n == NULL || name == NULL || (unsigned)value->type > NM_TYPE_BOOLEAN ||
      (value->type == NM_TYPE_STRING && value->nm_value.nm_string == NULL))
    return -1;
  notification_meta_t *m = vcd_meta_new(name, value->type);
  if (m == NULL)
    return -1;
  m->nm_value = value->nm_value;
  if (m->type == NM_TYPE_STRING) {
    m->nm_value.nm_string = strdup(value->nm_value.nm_string);
    if (m->nm_value.nm_string == NULL) {
      free(m);
      return -1;
    }
  }
  return vcd_meta_append(n, m);
}

int plugin_notification_meta_add_string(notification_t *n, const char *name, const char *value) {
  notification_meta_t m = {.type = NM_TYPE_STRING, .nm_value.nm_string = value};
  return vcd_meta_add(n, name, &m);
}

int plugin_notification_meta_add_signed_int(notification_t *n, const char *name, int64_t value) {
  notification_meta_t m = {.type = NM_TYPE_SIGNED_INT, .nm_value.nm_signed_int = value};
  return vcd_meta_add(n, name, &m);
}

int plugin_notification_meta_add_unsigned_int(notification_t *n, const char *name,
                                              uint64_t value) {
  notification_meta_t m = {.type = NM_TYPE_UNSIGNED_INT, .nm_value.nm_unsigned_int = value};
  return vcd_meta_add(n, name, &m);
}

int plugin_notification_meta_add_double(notification_t *n, const char *name, double value) {
  notification_meta_t m = {.type = NM_TYPE_DOUBLE, .nm_value.nm_double = value};
  return vcd_meta_add(n, name, &m);
}

int plugin_notification_meta_add_boolean(notification_t *n, const char *name, bool value) {
  notification_meta_t m = {.type = NM_TYPE_BOOLEAN, .nm_value.nm_boolean = value};
  return vcd_meta_add(n, name, &m);
}

int plugin_notification_meta_copy(notification_t *dst, const notification_t *src) {
  if (dst == NULL || src == NULL || dst == src)
    return -1;
  /* Copying a list onto itself would never end; collectd asserts here. */
  if (src->meta != NULL && src->meta == dst->meta)
    return -1;
  int status = 0;
  for (const notification_meta_t *m = src->meta; m != NULL; m = m->next)
    if (vcd_meta_add(dst, m->name, m) != 0)
      status = -1;
  return status;
}

int plugin_notification_meta_free(notification_meta_t *n) {
  if (n == NULL)
    return -1;
  while (n != NULL) {
    notification_meta_t *next = n->next;
    if (n->type == NM_TYPE_STRING)
      free((void *)(uintptr_t)n->nm_value.nm_string);
    free(n);
    n = next;
  }
  return 0;
}

int parse_log_severity(const char *severity) {
  if (severity == NULL)
    return -1;
  /* Every level above "err" maps to LOG_ERR, as in collectd. */
  static const struct {
    const char *name;
    int level;
  } levels[] = {
      {"emerg", LOG_ERR},     {"alert", LOG_ERR},   {"crit", LOG_ERR}, {"err", LOG_ERR},
      {"warning", LOG_WARNING}, {"notice", LOG_NOTICE}, {"info", LOG_INFO},
#if COLLECT_DEBUG
      {"debug", LOG_DEBUG},
#endif
  };
  for (size_t i = 0; i < STATIC_ARRAY_SIZE(levels); i++)
    if (strcasecmp(severity, levels[i].name) == 0)
      return levels[i].level;
  return -1;
}

int parse_notif_severity(const char *severity) {
  if (severity == NULL)
    return -1;
  if (strcasecmp(severity, "FAILURE") == 0)
    return NOTIF_FAILURE;
  if (strcasecmp(severity, "OKAY") == 0)
    return NOTIF_OKAY;
  if (strcasecmp(severity, "WARNING") == 0 || strcasecmp(severity, "WARN") == 0)
    return NOTIF_WARNING;
  return -1;
}

/* ========================================================== complaints */

/* Logs when the complaint's back-off has passed; true if it logged. */
static bool vcd_vcomplain(int level, c_complain_t *c, const char *format, va_list ap) {
  cdtime_t now = cdtime();
  if (c->last + c->interval > now)
    return false;
  c->last = now;

  cdtime_t base = plugin_get_interval();
  if (base == 0)
    base = DOUBLE_TO_CDTIME_T(COLLECTD_DEFAULT_INTERVAL);
  /* The wait starts at the interval and doubles, up to one day. */
  if (c->interval < base)
    c->interval = base;
  else
    c->interval *= 2;
  if (c->interval > TIME_T_TO_CDTIME_T_STATIC(86400))
    c->interval = TIME_T_TO_CDTIME_T_STATIC(86400);

  char message[512];
  vsnprintf(message, sizeof(message), format, ap);
  plugin_log(level, "%s", message);
  return true;
}

void c_complain(int level, c_complain_t *c, const char *format, ...) {
  if (c == NULL || format == NULL)
    return;
  va_list ap;
  va_start(ap, format);
  if (vcd_vcomplain(level, c, format, ap))
    c->complained_once = true;
  va_end(ap);
}

void c_complain_once(int level, c_complain_t *c, const char *format, ...) {
  if (c == NULL || format == NULL || c->complained_once)
    return;
  va_list ap;
  va_start(ap, format);
  if (vcd_vcomplain(level, c, format, ap))
    c->complained_once = true;
  va_end(ap);
}

void c_do_release(int level, c_complain_t *c, const char *format, ...) {
  if (c == NULL || format == NULL || c->interval == 0)
    return;
  c->interval = 0;
  c->complained_once = false;

  char message[512];
  va_list ap;
  va_start(ap, format);
  vsnprintf(message, sizeof(message), format, ap);
  va_end(ap);
  plugin_log(level, "%s", message);
}

/* ============================================================== random */

static pthread_mutex_t vcd_rand_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t vcd_rand_state;
static bool vcd_rand_seeded;

/* splitmix64 step; the caller holds vcd_rand_lock. */
static uint64_t vcd_rand_next_locked(void) {
  if (!vcd_rand_seeded) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
      seed = cdtime() ^ ((uint64_t)getpid() << 32);
    vcd_rand_state = seed;
    vcd_rand_seeded = true;
  }
  uint64_t z = (vcd_rand_state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static uint64_t vcd_rand64(void) {
  pthread_mutex_lock(&vcd_rand_lock);
  uint64_t r = vcd_rand_next_locked();
  pthread_mutex_unlock(&vcd_rand_lock);
  return r;
}

double cdrand_d(void) {
  return (double)(vcd_rand64() >> 11) * 0x1.0p-53;
}

uint32_t cdrand_u(void) {
  return (uint32_t)(vcd_rand64() >> 32);
}

long cdrand_range(long min, long max) {
  if (min > max) {
    long tmp = min;
    min = max;
    max = tmp;
  }
  uint64_t span = (uint64_t)max - (uint64_t)min + 1;
  uint64_t r = vcd_rand64();
  if (span != 0) {
    /* Rejection sampling keeps every value in [min, max] equally likely. */
    uint64_t threshold = (0 - span) % span;
    while (r < threshold)
      r = vcd_rand64();
    r %= span;
  }
  return (long)((uint64_t)min + r);
}

/* ======================================================= substitution */

/* True when the `n` bytes at `a` and the string `s` share memory. */
static bool vcd_overlaps(const char *a, size_t n, const char *s) {
  uintptr_t pa = (uintptr_t)a;
  uintptr_t ps = (uintptr_t)s;
  return pa < ps + strlen(s) + 1 && ps < pa + n;
}

/* Writes front, replacement and back of `string` into `buf`, each cut to
 * what still fits; `string` must not overlap `buf`. */
static void vcd_subst_into(char *buf, size_t buflen, const char *string, size_t off1, size_t off2,
                           const char *replacement) {
  size_t left = buflen - 1;
  size_t front = off1 < left ? off1 : left;
  left -= front;
  size_t rep_len = strlen(replacement);
  size_t rep = rep_len < left ? rep_len : left;
  left -= rep;
  size_t back_len = strlen(string + off2);
  size_t back = back_len < left ? back_len : left;

  memcpy(buf, string, front);
  memcpy(buf + front, replacement, rep);
  memcpy(buf + front + rep, string + off2, back);
  buf[front + rep + back] = '\0';
}

char *subst(char *buf, size_t buflen, const char *string, size_t off1, size_t off2,
            const char *replacement) {
  if (buf == NULL || buflen == 0 || string == NULL || replacement == NULL)
    return NULL;
  size_t string_len = strlen(string);
  if (off1 > string_len || off2 > string_len || off1 > off2)
    return NULL;

  /* Inputs that live in `buf` are copied first so writing cannot clobber them. */
  char *string_copy = NULL;
  char *rep_copy = NULL;
  if (vcd_overlaps(buf, buflen, string) && (string = string_copy = strdup(string)) == NULL)
    return NULL;
  if (vcd_overlaps(buf, buflen, replacement) &&
      (replacement = rep_copy = strdup(replacement)) == NULL) {
    free(string_copy);
    return NULL;
  }
  vcd_subst_into(buf, buflen, string, off1, off2, replacement);
  free(string_copy);
  free(rep_copy);
  return buf;
}

/* Appends up to `n` bytes of `src` at `*out` within `*left`. */
static void vcd_put(char *buf, size_t *out, size_t *left, const char *src, size_t n) {
  if (n > *left)
    n = *left;
  memcpy(buf + *out, src, n);
  *out += n;
  *left -= n;
}

/* Replaces every occurrence of `needle` in `string`, scanning forward, so
 * a replacement that contains the needle cannot loop; inputs must not
 * overlap `buf`. */
static void vcd_subst_all(char *buf, size_t buflen, const char *string, const char *needle,
                          const char *replacement) {
  size_t needle_len = strlen(needle);
  size_t rep_len = strlen(replacement);
  size_t out = 0;
  size_t left = buflen - 1;
  const char *pos = string;
  const char *hit = (needle_len > 0) ? strstr(pos, needle) : NULL;
  while (hit != NULL && left > 0) {
    vcd_put(buf, &out, &left, pos, (size_t)(hit - pos));
    vcd_put(buf, &out, &left, replacement, rep_len);
    pos = hit + needle_len;
    hit = strstr(pos, needle);
  }
  vcd_put(buf, &out, &left, pos, strlen(pos));
  buf[out] = '\0';
}

char *subst_string(char *buf, size_t buflen, const char *string, const char *needle,
                   const char *replacement) {
  if (buf == NULL || buflen == 0 || string == NULL || needle == NULL || replacement == NULL)
    return NULL;
  const char *inputs[3] = {string, needle, replacement};
  char *copies[3] = {NULL, NULL, NULL};
  bool ok = true;
  for (size_t i = 0; i < 3 && ok; i++) {
    if (!vcd_overlaps(buf, buflen, inputs[i]))
      continue;
    copies[i] = strdup(inputs[i]);
    inputs[i] = copies[i];
    ok = (copies[i] != NULL);
  }
  if (ok)
    vcd_subst_all(buf, buflen, inputs[0], inputs[1], inputs[2]);
  for (size_t i = 0; i < 3; i++)
    free(copies[i]);
  return ok ? buf : NULL;
}

#pragma GCC visibility pop
