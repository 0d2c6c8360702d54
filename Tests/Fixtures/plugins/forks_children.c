/* forks_children.c — isolation fixture: a plugin that starts processes of
 * its own, as collectd's exec plugin forks `/bin/sh script.sh`. In start it
 * forks
 *
 *   - a child that stays in the runner's process group and sleeps (pause);
 *   - a child that leaves it (setsid), forks a grandchild and exits, the
 *     way a daemon detaches; the grandchild execs `/bin/sleep 600`.
 *
 * Each sleeper appends its pid and a newline to `pid_file`, so a test can
 * check that both end with the runner, however the runner ended. The
 * plugin itself never waits for them. Only async-signal-safe calls after
 * fork: the runner has threads. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define FX_INSTANCE_FIELDS char pid_file[512];
#include "fixture.h"

static const vigil_option_spec options[] = {
    { sizeof(vigil_option_spec), VIGIL_TYPE_STRING, VIGIL_STR("pid_file"), VIGIL_STR(""),
      VIGIL_STR("Where each child appends its pid."), 0, 0, { NULL, 0 } },
};

static vigil_status forks_create(const vigil_create_args *args, void **out, vigil_error *err) {
    instance *in;
    size_t i;
    vigil_status status = fx_create(args, out, err);
    if (status != VIGIL_OK)
        return status;
    in = *out;
    for (i = 0; i < args->option_count; i++) {
        const vigil_option *o = &args->options[i];
        if (o->value.type == VIGIL_TYPE_STRING && o->name.len == 8 && memcmp(o->name.ptr, "pid_file", 8) == 0) {
            size_t n = o->value.as.str.len < sizeof in->pid_file - 1 ? o->value.as.str.len : sizeof in->pid_file - 1;
            memcpy(in->pid_file, o->value.as.str.ptr, n);
            in->pid_file[n] = 0;
        }
    }
    return VIGIL_OK;
}

/* Appends "<pid>\n" to the pid file (async-signal-safe). */
static void note_pid(const char *path) {
    char line[32];
    int n = 0, fd;
    char digits[16];
    int d = 0;
    long pid = (long)getpid();
    do {
        digits[d++] = (char)('0' + pid % 10);
        pid /= 10;
    } while (pid > 0);
    while (d > 0)
        line[n++] = digits[--d];
    line[n++] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        (void)write(fd, line, (size_t)n);
        close(fd);
    }
}

static vigil_status forks_start(void *self, vigil_error *err) {
    instance *in = self;
    pid_t child;
    if (in->pid_file[0] == 0)
        return vigil_error_set(err, VIGIL_E_INVALID_CONFIG, "pid_file is required");
    /* In the runner's group: sleeps until killed. */
    child = fork();
    if (child == 0) {
        note_pid(in->pid_file);
        for (;;)
            pause();
    }
    if (child < 0)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "fork failed");
    /* Detached: a session of its own, then a grandchild that outlives it. */
    child = fork();
    if (child == 0) {
        if (setsid() < 0)
            _exit(1);
        if (fork() == 0) {
            note_pid(in->pid_file);
            execl("/bin/sleep", "sleep", "600", (char *)NULL);
            _exit(127);
        }
        _exit(0);
    }
    if (child < 0)
        return vigil_error_set(err, VIGIL_E_TEMPORARY, "fork failed");
    return VIGIL_OK;
}

static const vigil_plugin_descriptor descriptor = {
    sizeof(vigil_plugin_descriptor), VIGIL_PLUGIN_MONITOR,
    VIGIL_STR("forks_children"), VIGIL_STR("1.0.0"),
    VIGIL_STR("Isolation fixture: starts a child and a detached (setsid) grandchild that sleep."),
    options, sizeof options / sizeof options[0], fx_sample_events, 1,
    1000000000,
    forks_create, forks_start, fx_poll, fx_stop, fx_destroy,
};

FX_ENTRY(descriptor)
