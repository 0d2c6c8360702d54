/*
 * test_graphite.c: tests of the graphite output without a Vigil host. `make
 * test` builds graphite.so and runs this program on it.
 *
 * It loads the .so as the host does (dlopen, then the one symbol), negotiates,
 * and writes batches to an instance as the host's sink would, with carbon
 * played by a listening socket on loopback that this program reads: what
 * arrives is checked line by line, and so are the answers (OK once the lines
 * were sent, RETRY with a wait while nobody listens). Exits 0 when every check
 * passed.
 */

/* POSIX 2008 for dlopen, sockets and poll. */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vigil_plugin.h"

static int failures = 0, checks = 0;

#define CHECK(cond)                                                              \
    do {                                                                         \
        checks++;                                                                \
        if (!(cond)) {                                                           \
            failures++;                                                          \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

/* ------------------------------------------------------- carbon, played here */

/* A listening socket on 127.0.0.1, any free port; its port in `port`. */
static int listen_loopback(int *port) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 4) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

/* Reads what arrived on `fd` within 2 s, up to `size` - 1 bytes, until
 * `lines` lines came; returns the bytes read. */
static size_t read_lines(int fd, char *out, size_t size, int lines) {
    size_t used = 0;
    int seen = 0;
    struct pollfd p;
    p.fd = fd;
    p.events = POLLIN;
    while (seen < lines && used + 1 < size && poll(&p, 1, 2000) == 1) {
        ssize_t n = read(fd, out + used, size - 1 - used);
        size_t i;
        if (n <= 0) break;
        for (i = used; i < used + (size_t)n; i++) seen += out[i] == '\n';
        used += (size_t)n;
    }
    out[used] = 0;
    return used;
}

/* ------------------------------------------------------------- the host side */

static char message[256]; /* the plugin's last error message */

static vigil_error error_buffer(void) {
    vigil_error err;
    memset(&err, 0, sizeof err);
    err.size = sizeof err;
    err.message = message;
    err.capacity = sizeof message;
    message[0] = '\0';
    return err;
}

static const vigil_plugin_descriptor *load(const char *path) {
    static const vigil_abi_version offered = { VIGIL_ABI_MAJOR, VIGIL_ABI_MINOR };
    vigil_entry_args args;
    vigil_entry_result result;
    vigil_plugin_entry_fn entry;
    void *symbol, *image = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (image == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", path, dlerror());
        return NULL;
    }
    symbol = dlsym(image, VIGIL_ENTRY_SYMBOL);
    if (symbol == NULL) {
        fprintf(stderr, "%s does not export %s\n", path, VIGIL_ENTRY_SYMBOL);
        return NULL;
    }
    /* ISO C has no cast from an object pointer to a function pointer: copy
     * the bits, which POSIX guarantees to be the function's address. */
    memcpy(&entry, &symbol, sizeof entry);
    memset(&args, 0, sizeof args);
    args.size = sizeof args;
    args.version_count = 1;
    args.versions = &offered;
    memset(&result, 0, sizeof result);
    result.size = sizeof result;
    result.error = error_buffer();
    if (entry(&args, &result) != VIGIL_OK || result.descriptor == NULL) {
        fprintf(stderr, "%s refused to negotiate: %s\n", path, message);
        return NULL;
    }
    return result.descriptor;
}

/* Creates an instance sending to 127.0.0.1:`port` with `prefix`. */
static vigil_status create(const vigil_plugin_descriptor *d, int port, const char *prefix, void **instance) {
    vigil_option options[3];
    vigil_create_args args;
    vigil_error err = error_buffer();
    memset(options, 0, sizeof options);
    options[0].name = vigil_str_from_cstr("host");
    options[0].value.type = VIGIL_TYPE_STRING;
    options[0].value.as.str = vigil_str_from_cstr("127.0.0.1");
    options[1].name = vigil_str_from_cstr("port");
    options[1].value.type = VIGIL_TYPE_INT;
    options[1].value.as.i64 = port;
    options[2].name = vigil_str_from_cstr("prefix");
    options[2].value.type = VIGIL_TYPE_STRING;
    options[2].value.as.str = vigil_str_from_cstr(prefix);
    memset(&args, 0, sizeof args);
    args.size = sizeof args;
    args.instance_name = vigil_str_from_cstr("test");
    args.options = options;
    args.option_count = 3;
    *instance = NULL;
    return d->create(&args, instance, &err);
}

/* Two events as the host stamps them: a sample with an int, a double, a
 * string (left out) and a bool; an event whose monitor name has characters
 * carbon's paths do not take. */
static vigil_field fields_a[4], fields_b[1];
static vigil_output_event events[2];

static void make_events(void) {
    memset(fields_a, 0, sizeof fields_a);
    fields_a[0].name = vigil_str_from_cstr("count");
    fields_a[0].value.type = VIGIL_TYPE_INT;
    fields_a[0].value.as.i64 = 42;
    fields_a[1].name = vigil_str_from_cstr("usage");
    fields_a[1].value.type = VIGIL_TYPE_DOUBLE;
    fields_a[1].value.as.f64 = 0.25;
    fields_a[2].name = vigil_str_from_cstr("label");
    fields_a[2].value.type = VIGIL_TYPE_STRING;
    fields_a[2].value.as.str = vigil_str_from_cstr("not a number");
    fields_a[3].name = vigil_str_from_cstr("up");
    fields_a[3].value.type = VIGIL_TYPE_BOOL;
    fields_a[3].value.as.boolean = 1;
    memset(fields_b, 0, sizeof fields_b);
    fields_b[0].name = vigil_str_from_cstr("temp");
    fields_b[0].value.type = VIGIL_TYPE_DOUBLE;
    fields_b[0].value.as.f64 = -3.5;

    memset(events, 0, sizeof events);
    events[0].size = sizeof events[0];
    events[0].severity = VIGIL_SEVERITY_INFO;
    events[0].kind = vigil_str_from_cstr("sample");
    events[0].time_ns = INT64_C(1700000000123456789);
    events[0].fields = fields_a;
    events[0].field_count = 4;
    events[0].host = vigil_str_from_cstr("web-1");
    events[0].monitor = vigil_str_from_cstr("cpu");
    events[0].plugin = vigil_str_from_cstr("cpu");
    events[0].seq = 1;
    events[1] = events[0];
    events[1].kind = vigil_str_from_cstr("reading");
    events[1].time_ns = INT64_C(1700000001000000000);
    events[1].fields = fields_b;
    events[1].field_count = 1;
    events[1].monitor = vigil_str_from_cstr("room 2/a.b");
    events[1].plugin = vigil_str_from_cstr("sensors");
    events[1].seq = 2;
}

/* Writes both events as attempt `attempt`; the answer in `result`. */
static vigil_status write_batch(const vigil_plugin_descriptor *d, void *instance, uint32_t attempt,
                                vigil_write_result *result) {
    vigil_batch batch;
    vigil_error err = error_buffer();
    memset(&batch, 0, sizeof batch);
    batch.size = sizeof batch;
    batch.attempt = attempt;
    batch.events = events;
    batch.count = 2;
    batch.event_size = sizeof events[0];
    memset(result, 0, sizeof *result);
    result->size = sizeof *result;
    result->verdict = VIGIL_WRITE_OK; /* the host's preset */
    return d->write(instance, &batch, result, &err);
}

static const char expected[] =
    "vigil.web-1.cpu.sample.count 42 1700000000\n"
    "vigil.web-1.cpu.sample.usage 0.25 1700000000\n"
    "vigil.web-1.cpu.sample.up 1 1700000000\n"
    "vigil.web-1.room_2_a_b.reading.temp -3.5 1700000001\n";

int main(int argc, char **argv) {
    const vigil_plugin_descriptor *d;
    vigil_write_result result;
    void *instance = NULL;
    char got[4096];
    int listener, port, peer;

    if (argc != 2) {
        fprintf(stderr, "usage: %s ./graphite.so\n", argv[0]);
        return 2;
    }
    d = load(argv[1]);
    if (d == NULL) return 1;
    make_events();

    /* What the host reads before it writes: an output, with write. */
    CHECK(d->kind == VIGIL_PLUGIN_OUTPUT);
    CHECK(d->size >= VIGIL_DESCRIPTOR_SIZE_1_5 && d->write != NULL && d->poll == NULL);

    /* Options are checked by create, with the option's path in the message. */
    CHECK(create(d, 70000, "vigil", &instance) == VIGIL_E_INVALID_CONFIG);
    CHECK(strncmp(message, "options.port: ", 14) == 0);

    /* Carbon is there: every number arrives as one line, in order; the
     * string is left out; names are cut to what carbon takes. */
    listener = listen_loopback(&port);
    CHECK(listener >= 0);
    if (listener < 0) return 1;
    CHECK(create(d, port, "vigil", &instance) == VIGIL_OK);
    CHECK(write_batch(d, instance, 1, &result) == VIGIL_OK);
    CHECK(result.verdict == VIGIL_WRITE_OK && result.per_event_used == 0);
    peer = accept(listener, NULL, NULL);
    CHECK(peer >= 0);
    read_lines(peer, got, sizeof got, 4);
    CHECK(strcmp(got, expected) == 0);
    if (strcmp(got, expected) != 0) fprintf(stderr, "received:\n%s", got);

    /* Carbon went away: the next write answers RETRY with a wait, so that the
     * host keeps the events; nothing is rejected. */
    close(peer);
    close(listener);
    {
        int tries, retried = 0;
        /* The first send after the peer closed may still be taken by the
         * kernel; the plugin learns of the close on the next one. */
        for (tries = 0; tries < 3 && !retried; tries++) {
            CHECK(write_batch(d, instance, 2, &result) == VIGIL_OK);
            retried = result.verdict == VIGIL_WRITE_RETRY;
        }
        CHECK(retried);
        CHECK(result.retry_after_ns > 0);
    }

    /* Carbon is back (on a new port: a new instance): delivered again. */
    d->destroy(instance);
    listener = listen_loopback(&port);
    CHECK(listener >= 0);
    if (listener < 0) return 1;
    CHECK(create(d, port, "vigil", &instance) == VIGIL_OK);
    CHECK(write_batch(d, instance, 3, &result) == VIGIL_OK && result.verdict == VIGIL_WRITE_OK);
    peer = accept(listener, NULL, NULL);
    read_lines(peer, got, sizeof got, 4);
    CHECK(strcmp(got, expected) == 0);
    d->destroy(instance);
    close(peer);
    close(listener);

    if (failures > 0) {
        fprintf(stderr, "test_graphite: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_graphite: all %d checks passed\n", checks);
    return 0;
}
