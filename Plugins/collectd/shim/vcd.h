/*
 * What the `collectd` Vigil plugin (collectd.c) calls in the shim: load a
 * collectd plugin as a module, configure it from the manifest's JSON, run
 * its init, read and shutdown callbacks, and receive what it dispatches.
 * The only shim names besides collectd's own that the shim exports.
 *
 * One module is one collectd plugin file loaded in this process. collectd
 * plugins keep their state in statics and run module_register and init once
 * per process, so a process holds at most one module of a given name; a
 * second is refused (the compat plugin says to isolate it).
 */
#ifndef VIGIL_COLLECTD_VCD_H
#define VIGIL_COLLECTD_VCD_H

#include <stddef.h>
#include <stdint.h>

#include "collectd/core/daemon/collectd.h"
#include "collectd/core/daemon/plugin.h"

#define VCD_EXPORT __attribute__((visibility("default")))

/** The version of this interface; the compat plugin refuses another. */
#define VCD_INTERFACE_VERSION 1

typedef struct vcd_module vcd_module;
typedef struct vcd_config vcd_config;

/** Where a module's output goes. Called on whichever thread dispatched
 *  (a read callback on the poll thread, or a plugin's own thread), only
 *  while the module's gate is open (values, notifications); log always. */
typedef struct vcd_sink {
    void (*values)(void *ctx, const data_set_t *ds, const value_list_t *vl, const gauge_t *rates);
    void (*notification)(void *ctx, const notification_t *n);
    /** `level` is a syslog level (LOG_ERR…LOG_DEBUG); `message` NUL-terminated. */
    void (*log)(void *ctx, int level, const char *message);
} vcd_sink;

/** Counts a module keeps of what it refused, by reason. */
typedef struct vcd_counts {
    uint64_t unknown_type;   /* a type types.db does not have */
    uint64_t bad_length;     /* values_len does not match the type */
    uint64_t too_old;        /* not newer than the last value of its name */
    uint64_t gate_closed;    /* dispatched while the monitor was stopped */
    uint64_t read_failures;  /* read callbacks that returned non-zero */
} vcd_counts;

VCD_EXPORT int vcd_interface_version(void);

/** Sets hostname_g and interval_g (the first module's interval) and loads
 *  `types_db` (the default types.db) once per process. 0, or -1 with `err`. */
VCD_EXPORT int vcd_global_init(const char *hostname, cdtime_t interval, const char *types_db, char *err,
                               size_t err_len);

/** Adds the types of another types.db file. 0, or -1 with "PATH:LINE: …".
 *  Without `replace`, a file that redefines a known type is refused (the
 *  process's other modules use it). */
VCD_EXPORT int vcd_types_add(const char *path, int replace, char *err, size_t err_len);

/** dlopens `path` (RTLD_NOW | RTLD_LOCAL) and runs its module_register.
 *  `hostname` is what its values are dispatched with where the plugin
 *  leaves the host empty or writes hostname_g (the first module's).
 *  NULL with a message in `err` when it cannot be loaded (dlerror's text,
 *  which names a missing library), exports no module_register, or a module
 *  of `name` is already loaded in this process (`*already` set to 1). */
VCD_EXPORT vcd_module *vcd_module_load(const char *path, const char *name, const char *hostname, cdtime_t interval,
                                       const vcd_sink *sink, void *ctx, int *already, char *err,
                                       size_t err_len);

/** Parses the manifest's `config` (JSON text of an object, or "null") into a
 *  <Plugin NAME> block. NULL with "PATH: what is wrong" in `err`, PATH as
 *  the host places it ("options.config.Key[1]"). */
VCD_EXPORT vcd_config *vcd_config_parse(const char *json, size_t len, const char *plugin, char *err,
                                        size_t err_len);
VCD_EXPORT void vcd_config_free(vcd_config *config);

/** Hands the configuration to the module's config callbacks. 0, or -1 with
 *  "PATH: what is wrong" in `err`: the key the plugin refused where that is
 *  known, with what the plugin logged while it refused it. */
VCD_EXPORT int vcd_module_configure(vcd_module *m, const vcd_config *config, char *err, size_t err_len);

/** Runs the module's init callbacks (once per module). 0, or -1 with what
 *  the plugin logged. */
VCD_EXPORT int vcd_module_init(vcd_module *m, char *err, size_t err_len);

/** Opens (1) or closes (0) the gate. Closing waits for dispatches in
 *  progress: once it returns nothing more reaches the sink's values or
 *  notification functions. */
VCD_EXPORT void vcd_module_gate(vcd_module *m, int open);

/** Runs the module's read callbacks that are due at `now` (each at its own
 *  interval, suspended with collectd's doubling back-off after a failure).
 *  Returns how many ran; `*failed` how many of them failed; the last
 *  failure's message in `err`. */
VCD_EXPORT int vcd_module_read(vcd_module *m, cdtime_t now, int *failed, char *err, size_t err_len);

/** Closes the gate, runs the module's shutdown callbacks, drops its
 *  callbacks and unloads it when it is safe to (it started no threads). */
VCD_EXPORT void vcd_module_unload(vcd_module *m);

VCD_EXPORT vcd_counts vcd_module_counts(const vcd_module *m);

/** Whether the module started threads (plugin_thread_create). */
VCD_EXPORT int vcd_module_has_threads(const vcd_module *m);

#endif
