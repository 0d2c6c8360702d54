/*
 * graphite.c — an example output plugin (ABI 1.5) in plain C, and the C output
 * scaffold of `vigil new-plugin NAME --lang c --kind output`: sends the
 * numbers of the events it is given to Graphite (carbon's plaintext
 * protocol over TCP), one line per numeric or boolean field:
 *
 *     PREFIX.HOST.MONITOR.KIND.FIELD VALUE SECONDS\n
 *
 * Names are cut to what Graphite takes ([A-Za-z0-9_-], anything else
 * becomes `_`); strings are left out. It shows what an output needs: the
 * options, a connection opened when first needed, lines gathered into writes
 * of up to 64 KiB (one send per line would cost more than the rest), and the
 * answer for each
 * batch — OK once the kernel took every line, RETRY (with a wait) when the
 * peer is away or went away mid-batch, so that the host keeps the events
 * and writes them again. It never rejects: carbon takes any line.
 *
 * Build, as its README says for every example:
 *   cc -std=c99 -Wall -Wextra -Werror -pedantic -shared -fPIC -fvisibility=hidden \
 *      -I Sources/CVigilPlugin/include Plugins/examples/c/graphite/graphite.c -o graphite.so
 * Manifest:
 *   sinks:
 *     graphite:
 *       type: plugin
 *       plugin: graphite
 *       options: { host: 127.0.0.1, port: 2003, prefix: vigil }
 */
#define _POSIX_C_SOURCE 200809L /* getaddrinfo, snprintf */

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include "vigil_plugin.h"

#define LINE_MAX_BYTES 1024
#define SEND_BYTES 65536 /* lines are sent in writes of up to this much */
#define RETRY_AFTER_NS 1000000000LL /* a second before the host writes again */

static const vigil_option_spec options[] = {
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("host"),
      .default_text = VIGIL_STR("127.0.0.1"), .doc = VIGIL_STR("Carbon's host name or address.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_INT, .name = VIGIL_STR("port"),
      .default_text = VIGIL_STR("2003"), .doc = VIGIL_STR("Carbon's plaintext port, 1-65535.") },
    { .size = sizeof(vigil_option_spec), .type = VIGIL_TYPE_STRING, .name = VIGIL_STR("prefix"),
      .default_text = VIGIL_STR("vigil"), .doc = VIGIL_STR("The first part of every metric's path.") },
};

typedef struct graphite_output {
    char host[256];
    char port[8];
    char prefix[128];
    int fd; /* -1 when not connected */
    char out[SEND_BYTES]; /* lines not sent yet */
    size_t used;
} graphite_output;

static int option_is(const vigil_option *o, const char *name) {
    return o->name.len == strlen(name) && memcmp(o->name.ptr, name, o->name.len) == 0;
}

/* A string option into `out`; refuses one too long for it or holding a NUL. */
static int copy_text(vigil_str s, char *out, size_t size) {
    if (s.len >= size || (s.len > 0 && memchr(s.ptr, 0, s.len) != NULL)) return -1;
    if (s.len > 0) memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return 0;
}

static vigil_status graphite_create(const vigil_create_args *args, void **instance, vigil_error *err) {
    graphite_output *g = calloc(1, sizeof *g);
    size_t i;
    if (g == NULL) return vigil_error_set(err, VIGIL_E_NOMEM, "out of memory");
    g->fd = -1;
    for (i = 0; i < args->option_count; i++) {
        const vigil_option *o = &args->options[i];
        if (option_is(o, "host") && copy_text(o->value.as.str, g->host, sizeof g->host) != 0) {
            free(g);
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.host: at most 255 bytes, no NUL");
        }
        if (option_is(o, "prefix") && copy_text(o->value.as.str, g->prefix, sizeof g->prefix) != 0) {
            free(g);
            return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.prefix: at most 127 bytes, no NUL");
        }
        if (option_is(o, "port")) {
            if (o->value.as.i64 < 1 || o->value.as.i64 > 65535) {
                free(g);
                return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "options.port: %lld is not 1-65535",
                                       (long long)o->value.as.i64);
            }
            snprintf(g->port, sizeof g->port, "%d", (int)o->value.as.i64);
        }
    }
    *instance = g;
    return VIGIL_OK;
}

/* Connects to carbon; 0, or -1 with the reason in `err`. */
static int graphite_connect(graphite_output *g, vigil_error *err) {
    struct addrinfo hints, *list = NULL, *a;
    struct timeval timeout = { 5, 0 };
    int status;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    status = getaddrinfo(g->host, g->port, &hints, &list);
    if (status != 0) {
        vigil_error_set(err, VIGIL_E_TEMPORARY, "cannot resolve %s: %s", g->host, gai_strerror(status));
        return -1;
    }
    for (a = list; a != NULL && g->fd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        /* A peer that stops reading costs a write at most 5 s, then a retry. */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) g->fd = fd;
        else close(fd);
    }
    freeaddrinfo(list);
    if (g->fd < 0) {
        vigil_error_set(err, VIGIL_E_TEMPORARY, "cannot connect to %s:%s", g->host, g->port);
        return -1;
    }
    return 0;
}

/* Appends `part` to `out` with every character Graphite does not take in a
 * path made `_`. */
static size_t append_name(char *out, size_t used, size_t size, vigil_str part) {
    size_t i;
    for (i = 0; i < part.len && used + 1 < size; i++) {
        char c = part.ptr[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
        out[used++] = ok ? c : '_';
    }
    if (used + 1 < size) out[used++] = '.';
    return used;
}

/* Sends all of `buffer`; 0, or -1 (the connection is closed). */
static int send_all(graphite_output *g, const char *buffer, size_t length) {
    while (length > 0) {
        ssize_t n = send(g->fd, buffer, length, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            close(g->fd);
            g->fd = -1;
            return -1;
        }
        buffer += n;
        length -= (size_t)n;
    }
    return 0;
}

/* Sends the lines gathered in `g->out`; 0, or -1 (the connection is closed). */
static int send_gathered(graphite_output *g) {
    int status = g->used > 0 ? send_all(g, g->out, g->used) : 0;
    g->used = 0;
    return status;
}

/* Adds one line to `g->out`, sending what was gathered first when it would
 * not fit: one write per 64 KiB, not one per line. 0, or -1. */
static int gather(graphite_output *g, const char *line, size_t length) {
    if (g->used + length > sizeof g->out && send_gathered(g) != 0) return -1;
    memcpy(g->out + g->used, line, length);
    g->used += length;
    return 0;
}

static vigil_status graphite_write(void *instance, const vigil_batch *batch, vigil_write_result *result,
                                   vigil_error *err) {
    graphite_output *g = instance;
    const char *at = (const char *)batch->events;
    size_t i, f;
    char line[LINE_MAX_BYTES];
    if (g->fd < 0 && graphite_connect(g, err) != 0) {
        result->verdict = VIGIL_WRITE_RETRY;
        result->retry_after_ns = RETRY_AFTER_NS;
        return VIGIL_OK;
    }
    for (i = 0; i < batch->count; i++, at += batch->event_size) {
        const vigil_output_event *e = (const vigil_output_event *)at;
        vigil_str prefix = vigil_str_from_cstr(g->prefix);
        size_t base = 0;
        base = append_name(line, base, sizeof line, prefix);
        base = append_name(line, base, sizeof line, e->host);
        base = append_name(line, base, sizeof line, e->monitor);
        base = append_name(line, base, sizeof line, e->kind);
        for (f = 0; f < e->field_count; f++) {
            const vigil_field *field = &e->fields[f];
            double value;
            size_t used;
            int n;
            switch (field->value.type) {
            case VIGIL_TYPE_INT: value = (double)field->value.as.i64; break;
            case VIGIL_TYPE_DOUBLE: value = field->value.as.f64; break;
            case VIGIL_TYPE_BOOL: value = field->value.as.boolean ? 1 : 0; break;
            default: continue; /* strings have no place in Graphite */
            }
            if (isnan(value) || isinf(value)) continue;
            used = append_name(line, base, sizeof line, field->name);
            if (used > 0 && line[used - 1] == '.') used--; /* the field ends the path */
            n = snprintf(line + used, sizeof line - used, " %.17g %lld\n", value, (long long)(e->time_ns / 1000000000));
            if (n < 0 || (size_t)n >= sizeof line - used) continue; /* a path too long to send */
            if (gather(g, line, used + (size_t)n) != 0) goto gone;
        }
    }
    if (send_gathered(g) != 0) goto gone;
    result->verdict = VIGIL_WRITE_OK;
    return VIGIL_OK;

gone:
    /* The peer went away mid-batch: the host writes the whole batch again,
     * so some lines may arrive twice (carbon keeps the last value of a
     * point). */
    g->used = 0;
    result->verdict = VIGIL_WRITE_RETRY;
    result->retry_after_ns = RETRY_AFTER_NS;
    vigil_error_set(err, VIGIL_E_TEMPORARY, "%s:%s closed the connection", g->host, g->port);
    return VIGIL_OK;
}

static void graphite_destroy(void *instance) {
    graphite_output *g = instance;
    if (g == NULL) return;
    if (g->fd >= 0) close(g->fd);
    free(g);
}

static const vigil_plugin_descriptor descriptor = {
    .size = sizeof(vigil_plugin_descriptor),
    .kind = VIGIL_PLUGIN_OUTPUT,
    .name = VIGIL_STR("graphite"),
    .version = VIGIL_STR("1.0.0"),
    .description = VIGIL_STR("Sends the events' numbers to Graphite (carbon's plaintext protocol over TCP)."),
    .options = options,
    .option_count = sizeof options / sizeof options[0],
    .create = graphite_create,
    .destroy = graphite_destroy,
    .write = graphite_write,
};

VIGIL_EXPORT vigil_status vigil_plugin_entry(const vigil_entry_args *args, vigil_entry_result *result) {
    return vigil_negotiate(args, result, &descriptor);
}
