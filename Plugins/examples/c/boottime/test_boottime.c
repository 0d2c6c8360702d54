/*
 * test_boottime.c: tests of the boottime plugin without a Vigil host. `make test`
 * builds boottime.so and runs this program on it.
 *
 * It loads the .so as the host does (dlopen, then the one symbol), negotiates,
 * and drives an instance through a fake host table that records what the
 * plugin emits, against a fixture directory it writes in /tmp (a stand-in
 * for /proc). Exits 0 when every check passed.
 */

/* POSIX 2008 for mkdtemp; dlopen and dlsym are POSIX too. */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---------------------------------------------------------- the fake host */

/* What the plugin emitted: the last `sample`, and how many there were. */
static struct {
    int samples;
    double uptime;
    int recently_booted;
    int other; /* events of another kind, or with unexpected fields */
} seen;

static int str_is(vigil_str s, const char *text) {
    return s.len == strlen(text) && (s.len == 0 || memcmp(s.ptr, text, s.len) == 0);
}

static vigil_status fake_emit(vigil_host_ctx *host, const vigil_event *event) {
    size_t i;

    (void)host;
    if (!str_is(event->kind, "sample")) {
        seen.other++;
        return VIGIL_OK;
    }
    seen.samples++;
    for (i = 0; i < event->field_count; i++) {
        const vigil_field *f = &event->fields[i];
        if (str_is(f->name, "uptime") && f->value.type == VIGIL_TYPE_DOUBLE)
            seen.uptime = f->value.as.f64;
        else if (str_is(f->name, "recently_booted") && f->value.type == VIGIL_TYPE_BOOL)
            seen.recently_booted = f->value.as.boolean;
        else
            seen.other++;
    }
    return VIGIL_OK;
}

static void fake_log(vigil_host_ctx *host, vigil_log_level level, vigil_str message) {
    (void)host;
    fprintf(stderr, "plugin log (level %d): %.*s\n", (int)level, (int)message.len, message.ptr);
}

static void fake_set_availability(vigil_host_ctx *host, int32_t available, vigil_str reason) {
    (void)host;
    (void)available;
    (void)reason;
}

static int64_t fake_now_ns(vigil_host_ctx *host) {
    (void)host;
    return 0;
}

static void fake_finished(vigil_host_ctx *host) {
    (void)host;
}

static const vigil_host_api fake_api = {
    .size = sizeof(vigil_host_api),
    .abi_major = VIGIL_ABI_MAJOR,
    .abi_minor = VIGIL_ABI_MINOR,
    .emit = fake_emit,
    .log = fake_log,
    .set_availability = fake_set_availability,
    .now_ns = fake_now_ns,
    .finished = fake_finished,
};

/* ---------------------------------------------------------------- helpers */

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

/* Runs the plugin's create with `procfs` and `recent` (nanoseconds). */
static vigil_status create(const vigil_plugin_descriptor *d, const char *procfs, int64_t recent_ns,
                           void **instance) {
    vigil_option options[2];
    vigil_create_args args;
    vigil_error err = error_buffer();

    memset(options, 0, sizeof options);
    options[0].name = vigil_str_from_cstr("procfs");
    options[0].value.type = VIGIL_TYPE_STRING;
    options[0].value.as.str = vigil_str_from_cstr(procfs);
    options[1].name = vigil_str_from_cstr("recent");
    options[1].value.type = VIGIL_TYPE_DURATION;
    options[1].value.as.i64 = recent_ns;

    memset(&args, 0, sizeof args);
    args.size = sizeof args;
    args.instance_name = vigil_str_from_cstr("test");
    args.host = NULL; /* our fake host needs no context */
    args.api = &fake_api;
    args.options = options;
    args.option_count = 2;
    args.interval_ns = 10 * INT64_C(1000000000);
    *instance = NULL;
    return d->create(&args, instance, &err);
}

static vigil_status call(vigil_status (*fn)(void *, vigil_error *), void *instance) {
    vigil_error err = error_buffer();
    return fn(instance, &err);
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* ------------------------------------------------------------------- main */

int main(int argc, char **argv) {
    const char *library = argc > 1 ? argv[1] : "./boottime.so";
    const int64_t hour = 3600 * INT64_C(1000000000);
    char dir[] = "/tmp/test_boottime.XXXXXX", file[512], missing[512];
    void *handle, *symbol, *instance;
    vigil_plugin_entry_fn entry;
    vigil_abi_version offered = { VIGIL_ABI_MAJOR, VIGIL_ABI_MINOR };
    vigil_entry_args args;
    vigil_entry_result result;
    const vigil_plugin_descriptor *d;

    /* Load it as the host does. */
    handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", library, dlerror());
        return 1;
    }
    symbol = dlsym(handle, VIGIL_ENTRY_SYMBOL);
    if (symbol == NULL) {
        fprintf(stderr, "%s does not export %s\n", library, VIGIL_ENTRY_SYMBOL);
        return 1;
    }
    /* ISO C has no cast from an object pointer to a function pointer: copy
     * the bits, which POSIX guarantees to be the function's address. */
    memcpy(&entry, &symbol, sizeof entry);

    /* Negotiate. */
    memset(&args, 0, sizeof args);
    args.size = sizeof args;
    args.version_count = 1;
    args.versions = &offered;
    memset(&result, 0, sizeof result);
    result.size = sizeof result;
    result.error = error_buffer();
    CHECK(entry(&args, &result) == VIGIL_OK);
    CHECK(result.abi_major == VIGIL_ABI_MAJOR);
    d = result.descriptor;
    if (d == NULL) {
        fprintf(stderr, "negotiation gave no descriptor: %s\n", message);
        return 1;
    }
    CHECK(str_is(d->name, "boottime"));
    CHECK(d->poll != NULL);
    CHECK(d->option_count == 2 && d->event_count == 1);

    /* A fixture standing in for /proc. */
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(file, sizeof file, "%s/uptime", dir);
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK(write_file(file, "12345.67 54321.00\n") == 0);

    /* Start (twice: harmless), poll, read the event. */
    CHECK(create(d, dir, hour, &instance) == VIGIL_OK && instance != NULL);
    if (instance != NULL) {
        CHECK(call(d->start, instance) == VIGIL_OK);
        CHECK(call(d->start, instance) == VIGIL_OK);
        CHECK(call(d->poll, instance) == VIGIL_OK);
        CHECK(seen.samples == 1);
        CHECK(seen.uptime == 12345.67);
        CHECK(seen.recently_booted == 0);

        /* A machine booted 30 s ago. */
        CHECK(write_file(file, "30.50 60.00\n") == 0);
        CHECK(call(d->poll, instance) == VIGIL_OK);
        CHECK(seen.samples == 2);
        CHECK(seen.uptime == 30.5);
        CHECK(seen.recently_booted == 1);

        /* Content that does not parse: TEMPORARY, nothing emitted. */
        CHECK(write_file(file, "soon\n") == 0);
        CHECK(call(d->poll, instance) == VIGIL_E_TEMPORARY);
        CHECK(seen.samples == 2);

        CHECK(call(d->stop, instance) == VIGIL_OK);
        CHECK(call(d->stop, instance) == VIGIL_OK);
        d->destroy(instance);
    }
    CHECK(seen.other == 0);

    /* No such file: start says UNAVAILABLE, with the path. */
    CHECK(create(d, missing, hour, &instance) == VIGIL_OK && instance != NULL);
    if (instance != NULL) {
        CHECK(call(d->start, instance) == VIGIL_E_UNAVAILABLE);
        CHECK(strstr(message, "missing/uptime") != NULL);
        d->destroy(instance);
    }

    /* A bad value: INVALID_CONFIG, reported at the option. */
    CHECK(create(d, dir, 0, &instance) == VIGIL_E_INVALID_CONFIG);
    CHECK(strncmp(message, "options.recent: ", 16) == 0);
    CHECK(create(d, "", hour, &instance) == VIGIL_E_INVALID_CONFIG);
    CHECK(strncmp(message, "options.procfs: ", 16) == 0);

    remove(file);
    rmdir(dir);
    if (failures > 0) {
        fprintf(stderr, "test_boottime: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_boottime: all %d checks passed\n", checks);
    return 0;
}

